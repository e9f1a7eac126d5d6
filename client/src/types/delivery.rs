//! A record's acknowledgement: the [`Delivery`] a send returns, and the
//! producer's side of it ([`Acks`], one per batch, completed with an
//! [`Outcome`]), shared by both transports' producers.

use std::sync::Arc;

use event_listener::Event;

use crate::error::{Error, Result};
use crate::types::producer::RecordMetadata;

/// The acknowledgement of a record handed over by [`Producer::enqueue`]:
/// resolves to where the record landed, or why it failed.
#[must_use = "a Delivery does nothing unless awaited; dropping it does not cancel the send"]
pub struct Delivery {
    batch: Arc<BatchAck>,
    /// The record's place in its batch.
    index: usize,
    listener: Option<event_listener::EventListener>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery").finish_non_exhaustive()
    }
}

impl std::future::Future for Delivery {
    type Output = Result<RecordMetadata>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        loop {
            if let Some(outcome) = self.batch.outcome.get() {
                return std::task::Poll::Ready(outcome.of(self.index));
            }
            // Listen, then look again before waiting, so a completion in between is not missed.
            match self.listener.as_mut() {
                None => self.listener = Some(self.batch.done.listen()),
                Some(l) => {
                    futures::ready!(std::pin::Pin::new(l).poll(cx));
                    self.listener = None;
                }
            }
        }
    }
}

/// How a batch ended, for each of its records.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Where the first records landed, in order.
    pub(crate) placed: Vec<RecordMetadata>,
    /// The error of every record past `placed` (none when all were placed).
    pub(crate) rest: Option<Error>,
}

impl Outcome {
    pub(crate) fn failed(e: Error) -> Self {
        Outcome {
            placed: Vec::new(),
            rest: Some(e),
        }
    }

    fn of(&self, index: usize) -> Result<RecordMetadata> {
        match self.placed.get(index) {
            Some(m) => Ok(*m),
            None => Err(self.rest.clone().unwrap_or(Error::Closed)),
        }
    }
}

/// The acknowledgement of one batch, shared by its records' [`Delivery`]s:
/// one allocation and one wake-up per batch instead of a channel per record.
#[derive(Debug, Default)]
struct BatchAck {
    outcome: std::sync::OnceLock<Outcome>,
    done: Event,
}

/// The producer's side of a [`BatchAck`]: completes it once; dropped
/// without completing (the producer went away), its records fail with
/// [`Error::Closed`].
#[derive(Debug)]
pub(crate) struct Acks {
    batch: Arc<BatchAck>,
    /// Records in the batch.
    pub(crate) count: usize,
}

impl Acks {
    pub(crate) fn new() -> Self {
        Acks {
            batch: Arc::new(BatchAck::default()),
            count: 0,
        }
    }

    /// A [`Delivery`] for the next record of the batch.
    pub(crate) fn add(&mut self) -> Delivery {
        let d = Delivery {
            batch: Arc::clone(&self.batch),
            index: self.count,
            listener: None,
        };
        self.count += 1;
        d
    }

    pub(crate) fn complete(&self, outcome: Outcome) {
        if self.batch.outcome.set(outcome).is_ok() {
            self.batch.done.notify(usize::MAX);
        }
    }
}

impl Drop for Acks {
    fn drop(&mut self) {
        self.complete(Outcome::failed(Error::Closed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::ArcWake;
    use futures::FutureExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct CountingWaker(AtomicUsize);

    impl ArcWake for CountingWaker {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn meta(partition: i32, offset: i64) -> RecordMetadata {
        RecordMetadata { partition, offset }
    }

    #[test]
    fn each_delivery_of_a_batch_gets_its_own_record_s_place() {
        let mut acks = Acks::new();
        let d: Vec<Delivery> = (0..3).map(|_| acks.add()).collect();
        assert_eq!(acks.count, 3);
        acks.complete(Outcome {
            placed: vec![meta(2, 10), meta(2, 11)],
            rest: Some(Error::protocol("short")),
        });
        let got: Vec<Result<RecordMetadata>> = d
            .into_iter()
            .map(|d| d.now_or_never().expect("complete"))
            .collect();
        assert_eq!(got[0].as_ref().ok(), Some(&meta(2, 10)));
        assert_eq!(got[1].as_ref().ok(), Some(&meta(2, 11)));
        assert!(
            matches!(&got[2], Err(Error::Protocol { detail }) if detail == "short"),
            "{:?}",
            got[2]
        );
    }

    #[test]
    fn a_waiting_delivery_is_woken_once_its_batch_completes() {
        let mut acks = Acks::new();
        let mut first = acks.add();
        let mut second = acks.add();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = futures::task::waker(Arc::clone(&counter));
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut first).poll(&mut cx).is_pending());
        assert!(std::pin::Pin::new(&mut second).poll(&mut cx).is_pending());
        acks.complete(Outcome {
            placed: vec![meta(0, 5), meta(0, 6)],
            rest: None,
        });
        assert_eq!(counter.0.load(Ordering::SeqCst), 2, "both waiters woken");
        assert!(matches!(
            std::pin::Pin::new(&mut second).poll(&mut cx),
            std::task::Poll::Ready(Ok(m)) if m == meta(0, 6)
        ));
        assert!(matches!(
            std::pin::Pin::new(&mut first).poll(&mut cx),
            std::task::Poll::Ready(Ok(m)) if m == meta(0, 5)
        ));
        // Completing again changes nothing.
        acks.complete(Outcome::failed(Error::Closed));
        drop(acks);
    }

    #[test]
    fn a_delivery_can_be_awaited_from_another_task_or_thread() {
        fn send_sync<T: Send + Sync + Unpin + 'static>() {}
        send_sync::<Delivery>();
    }

    #[test]
    fn a_batch_dropped_unsent_fails_its_deliveries_with_closed() {
        let mut acks = Acks::new();
        let mut d = acks.add();
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut d).poll(&mut cx).is_pending());
        drop(acks);
        assert!(matches!(
            std::pin::Pin::new(&mut d).poll(&mut cx),
            std::task::Poll::Ready(Err(Error::Closed))
        ));
    }
}
