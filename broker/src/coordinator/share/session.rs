//! Share sessions (KIP-932): which partitions a member fetches from and
//! the epoch its next request must carry, so a client lists only what
//! changed (partitions added, partitions with acknowledgements, partitions
//! forgotten) after the first request of a session.
//!
//! A session is keyed by group and member. Epoch 0 opens one (replacing
//! any the member had), -1 closes it, any other epoch must be the one the
//! session expects; every request the session accepts moves the expected
//! epoch on by one (`i32::MAX` wraps to 1). Pure state: the caller keeps
//! the table behind a lock and the bound ([`ShareSessions::new`]).

use std::collections::{BTreeSet, HashMap};

/// A partition of a session: topic and partition.
pub type SessionTp = (String, i32);

/// Why a request does not fit its session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// No session for the member (never opened, closed, or dropped).
    #[error("no share session for member {0}")]
    NotFound(String),
    /// The epoch sent is not the one the session expects.
    #[error("share session epoch {sent}, expected {expected}")]
    Epoch {
        /// What the request carried.
        sent: i32,
        /// What the session expects.
        expected: i32,
    },
    /// The table is full of sessions of live members.
    #[error("the broker keeps {0} share sessions, its limit")]
    Full(usize),
    /// A request that cannot be (an epoch below -1, forgotten partitions
    /// in an opening request).
    #[error("invalid share session request: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone)]
struct Session {
    /// The epoch the next request must carry.
    next: i32,
    partitions: BTreeSet<SessionTp>,
}

/// Every member's share session, at most `limit` of them.
#[derive(Debug)]
pub struct ShareSessions {
    sessions: HashMap<(String, String), Session>,
    limit: usize,
}

/// What a request's session says to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStep {
    /// Fetch from these partitions (the session's, after the request's
    /// changes).
    Fetch(Vec<SessionTp>),
    /// The session closed: apply the request's acknowledgements, release
    /// what the member still holds in these partitions, fetch nothing.
    Closed(Vec<SessionTp>),
}

fn next_epoch(e: i32) -> i32 {
    if e == i32::MAX {
        1
    } else {
        e + 1
    }
}

impl ShareSessions {
    /// An empty table of at most `limit` sessions.
    pub fn new(limit: usize) -> Self {
        ShareSessions {
            sessions: HashMap::new(),
            limit: limit.max(1),
        }
    }

    /// Applies one request to the member's session: `epoch` as sent,
    /// `added` the partitions the request lists, `forgotten` those it drops.
    /// `live` says whether a member still belongs to its group (sessions of
    /// members gone are dropped to make room for a new one).
    ///
    /// # Errors
    /// [`SessionError`]: the request does not fit; nothing changed.
    pub fn step(
        &mut self,
        group: &str,
        member: &str,
        epoch: i32,
        added: &[SessionTp],
        forgotten: &[SessionTp],
        live: &dyn Fn(&str, &str) -> bool,
    ) -> Result<SessionStep, SessionError> {
        let key = (group.to_owned(), member.to_owned());
        match epoch {
            0 => {
                if !forgotten.is_empty() {
                    return Err(SessionError::Invalid(
                        "an opening request (epoch 0) forgets nothing".into(),
                    ));
                }
                if !self.sessions.contains_key(&key) && self.sessions.len() >= self.limit {
                    self.sessions.retain(|(g, m), _| live(g, m));
                    if self.sessions.len() >= self.limit {
                        return Err(SessionError::Full(self.limit));
                    }
                }
                let partitions: BTreeSet<SessionTp> = added.iter().cloned().collect();
                let out = partitions.iter().cloned().collect();
                self.sessions.insert(
                    key,
                    Session {
                        next: 1,
                        partitions,
                    },
                );
                Ok(SessionStep::Fetch(out))
            }
            -1 => {
                let s = self
                    .sessions
                    .remove(&key)
                    .ok_or_else(|| SessionError::NotFound(member.to_owned()))?;
                let mut all = s.partitions;
                all.extend(added.iter().cloned());
                Ok(SessionStep::Closed(all.into_iter().collect()))
            }
            e if e < -1 => Err(SessionError::Invalid(format!("session epoch {e}"))),
            sent => {
                let s = self
                    .sessions
                    .get_mut(&key)
                    .ok_or_else(|| SessionError::NotFound(member.to_owned()))?;
                if s.next != sent {
                    return Err(SessionError::Epoch {
                        sent,
                        expected: s.next,
                    });
                }
                s.next = next_epoch(sent);
                for tp in forgotten {
                    s.partitions.remove(tp);
                }
                s.partitions.extend(added.iter().cloned());
                Ok(SessionStep::Fetch(s.partitions.iter().cloned().collect()))
            }
        }
    }

    /// Drops the sessions of these members (they left the group).
    pub fn drop_members(&mut self, gone: &[(String, String)]) {
        for k in gone {
            self.sessions.remove(k);
        }
    }

    /// True when the member has a session open.
    pub fn is_open(&self, group: &str, member: &str) -> bool {
        self.sessions
            .contains_key(&(group.to_owned(), member.to_owned()))
    }

    /// Drops every session of a group.
    pub fn drop_group(&mut self, group: &str) {
        self.sessions.retain(|(g, _), _| g != group);
    }

    /// How many sessions are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True when none are kept.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> SessionTp {
        (t.to_owned(), p)
    }

    const ALIVE: &dyn Fn(&str, &str) -> bool = &|_, _| true;

    #[test]
    fn a_session_opens_lists_changes_and_closes() {
        let mut s = ShareSessions::new(10);
        assert_eq!(
            s.step("g", "m", 1, &[], &[], ALIVE),
            Err(SessionError::NotFound("m".into()))
        );
        let step = s.step("g", "m", 0, &[tp("a", 0), tp("a", 1)], &[], ALIVE);
        assert_eq!(step, Ok(SessionStep::Fetch(vec![tp("a", 0), tp("a", 1)])));
        // Only changes are listed afterwards.
        let step = s.step("g", "m", 1, &[tp("b", 0)], &[tp("a", 1)], ALIVE);
        assert_eq!(step, Ok(SessionStep::Fetch(vec![tp("a", 0), tp("b", 0)])));
        // The same epoch twice is refused; the expected one moved on.
        assert_eq!(
            s.step("g", "m", 1, &[], &[], ALIVE),
            Err(SessionError::Epoch {
                sent: 1,
                expected: 2
            })
        );
        let step = s.step("g", "m", 2, &[], &[], ALIVE);
        assert_eq!(step, Ok(SessionStep::Fetch(vec![tp("a", 0), tp("b", 0)])));
        let step = s.step("g", "m", -1, &[], &[], ALIVE);
        assert_eq!(step, Ok(SessionStep::Closed(vec![tp("a", 0), tp("b", 0)])));
        assert!(s.is_empty());
        assert!(matches!(
            s.step("g", "m", -1, &[], &[], ALIVE),
            Err(SessionError::NotFound(_))
        ));
    }

    #[test]
    fn opening_again_replaces_the_session_and_epochs_wrap_to_one() {
        let mut s = ShareSessions::new(10);
        s.step("g", "m", 0, &[tp("a", 0)], &[], ALIVE).unwrap();
        s.step("g", "m", 0, &[tp("b", 0)], &[], ALIVE).unwrap();
        assert_eq!(
            s.step("g", "m", 1, &[], &[], ALIVE),
            Ok(SessionStep::Fetch(vec![tp("b", 0)]))
        );
        assert_eq!(s.len(), 1);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert!(matches!(
            s.step("g", "m", -2, &[], &[], ALIVE),
            Err(SessionError::Invalid(_))
        ));
        assert!(matches!(
            s.step("g", "n", 0, &[], &[tp("a", 0)], ALIVE),
            Err(SessionError::Invalid(_))
        ));
    }

    #[test]
    fn a_full_table_makes_room_only_by_dropping_members_gone() {
        let mut s = ShareSessions::new(2);
        s.step("g", "a", 0, &[], &[], ALIVE).unwrap();
        s.step("g", "b", 0, &[], &[], ALIVE).unwrap();
        assert_eq!(
            s.step("g", "c", 0, &[], &[], ALIVE),
            Err(SessionError::Full(2))
        );
        // "a" left its group: its session goes to make room.
        let live = |_: &str, m: &str| m != "a";
        s.step("g", "c", 0, &[], &[], &live).unwrap();
        assert_eq!(s.len(), 2);
        assert!(matches!(
            s.step("g", "a", 1, &[], &[], ALIVE),
            Err(SessionError::NotFound(_))
        ));
        s.drop_members(&[("g".into(), "b".into())]);
        s.drop_group("g");
        assert!(s.is_empty());
    }
}
