//! Protocol edge cases, each as docs/protocol.md states it: CREATE_TOPIC field
//! ranges, a routed PRODUCE that fails on one partition, the record size
//! limit, UNKNOWN_TOPIC with auto-create on, and JOIN_GROUP's `members`.

use crate::common;

use std::time::Duration;

use flume_client::lowlevel::Client;
use flume_client::{Admin, ConnectionConfig, Producer};
use flume_protocol::{
    partition_for_key, record, CreateTopicRequest, ErrorCode, FetchPartition, FetchRequest,
    HeartbeatRequest, JoinGroupRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest,
    PartitionOffset, ProduceEntry, ProduceRequest, TopicPartitions,
};
use flume_rt as rt;

/// Every CREATE_TOPIC field outside its documented range is INVALID_REQUEST and
/// creates nothing; -1 takes the broker default.
#[test]
fn create_topic_checks_every_field_against_its_range() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let admin = Admin::connect(&broker.local_addr().to_string())
            .await
            .unwrap();
        let base = CreateTopicRequest {
            name: "x".into(),
            ..CreateTopicRequest::default()
        };
        let bad = [
            CreateTopicRequest {
                partitions: -2,
                ..base.clone()
            },
            CreateTopicRequest {
                backpressure: 2,
                ..base.clone()
            },
            CreateTopicRequest {
                segment_bytes: 0,
                ..base.clone()
            },
            CreateTopicRequest {
                segment_bytes: (1 << 31) + 1,
                ..base.clone()
            },
            CreateTopicRequest {
                retention_ms: -5,
                ..base.clone()
            },
            CreateTopicRequest {
                retention_bytes: -2,
                ..base.clone()
            },
            CreateTopicRequest {
                max_pending: -3,
                ..base.clone()
            },
        ];
        for req in bad {
            let err = admin.create_topic(req.clone()).await.unwrap_err();
            assert_eq!(err.code(), Some(ErrorCode::InvalidRequest), "{req:?}");
        }
        let md = admin.topics(&["x".into()]).await.unwrap();
        assert_eq!(md[0].error, ErrorCode::UnknownTopic, "nothing was created");
        // -1 everywhere: the broker defaults (3 partitions).
        admin.create_topic(base).await.unwrap();
        let md = admin.topics(&["x".into()]).await.unwrap();
        assert_eq!(md[0].partitions.len(), 3);
        broker.shutdown().await;
    });
}

/// Two keys that route to partitions 0 and 1 of a 2-partition topic.
fn keys_for_both_partitions() -> (Vec<u8>, Vec<u8>) {
    let mut found: [Option<Vec<u8>>; 2] = [None, None];
    for i in 0..1000 {
        let k = format!("k{i}").into_bytes();
        let p = partition_for_key(&k, 2) as usize;
        if found[p].is_none() {
            found[p] = Some(k);
        }
    }
    let [Some(a), Some(b)] = found else {
        panic!("no keys for both partitions")
    };
    (a, b)
}

/// A routed entry is appended partition by partition: when one partition fails
/// the other is still stored, `spans` lists exactly what was stored and
/// `record_partitions` says which records those are.
#[test]
fn routed_produce_failing_on_one_partition_says_which_records_were_stored() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "r", 2).await;
        // Partition 1 stops taking appends (its queue is closed): SHUTTING_DOWN there only.
        let t = broker.engine().records().topic("r").unwrap();
        t.partition(1).unwrap().shutdown().await;
        let (k0, k1) = keys_for_both_partitions();
        let mut batch = Vec::new();
        record::encode(&mut batch, 0, 1, Some(&k1), b"lost", &[]);
        record::encode(&mut batch, 0, 2, Some(&k0), b"kept", &[]);
        let client = Client::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();
        let resp = client
            .call(&ProduceRequest {
                entries: vec![ProduceEntry {
                    topic: "r".into(),
                    partition: -1,
                    records: batch.into(),
                }],
            })
            .await
            .unwrap();
        let r = &resp.results[0];
        assert_eq!(r.error, ErrorCode::ShuttingDown);
        assert_eq!(r.spans.len(), 1, "{r:?}");
        assert_eq!(r.spans[0].partition, 0);
        assert_eq!(r.record_partitions, vec![1, 0]);
        assert_eq!(r.record_offsets(), vec![(1, -1), (0, 0)]);
        assert_eq!(
            t.partition(0).unwrap().end_offset(),
            1,
            "partition 0 stored its record"
        );
        assert_eq!(t.partition(1).unwrap().end_offset(), 0);
        broker.shutdown().await;
    });
}

/// One limit: the producer's default is the broker's default `max_record_bytes`
/// (1 MiB, the 16-byte header counted); a record one byte over fails with
/// RECORD_TOO_LARGE and a message that states the limit.
#[test]
fn record_size_limit_is_one_limit_with_the_header_counted() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let addr = broker.local_addr().to_string();
        let limit = record::DEFAULT_MAX_RECORD_BYTES;
        assert_eq!(broker.engine().config().max_record_bytes, limit);
        let fits = vec![7u8; limit - record::encoded_len(None, &[], &[])];
        assert_eq!(record::encoded_len(None, &fits, &[]), limit);
        let producer = Producer::connect(&addr).await.unwrap();
        producer.send("big", None, &fits).await.unwrap();
        let over = vec![7u8; fits.len() + 1];
        let err = producer.send("big", None, &over).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::RecordTooLarge), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("limit is {limit} bytes")), "{msg}");
        // Caught by the producer before sending: the message names the record's size.
        assert!(msg.contains(&format!("{} bytes", limit + 1)), "{msg}");

        // The broker's own check agrees, byte for byte.
        let client = Client::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();
        let entry = |value: &[u8]| {
            let mut b = Vec::new();
            record::encode(&mut b, 0, 0, None, value, &[]);
            ProduceEntry {
                topic: "big".into(),
                partition: 0,
                records: b.into(),
            }
        };
        let resp = client
            .call(&ProduceRequest {
                entries: vec![entry(&fits), entry(&over)],
            })
            .await
            .unwrap();
        assert_eq!(resp.results[0].error, ErrorCode::None);
        assert_eq!(resp.results[1].error, ErrorCode::RecordTooLarge);
        broker.shutdown().await;
    });
}

/// With auto-create on, only PRODUCE and JOIN_GROUP create topics: FETCH,
/// METADATA, OFFSET_FETCH and OFFSET_COMMIT answer UNKNOWN_TOPIC.
#[test]
fn only_produce_and_join_create_topics() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        assert!(broker.engine().config().auto_create_topics);
        let client = Client::connect(
            &broker.local_addr().to_string(),
            ConnectionConfig::default(),
        )
        .await
        .unwrap();
        let md = client
            .call(&MetadataRequest {
                topics: vec!["ghost".into()],
            })
            .await
            .unwrap();
        assert_eq!(md.topics[0].error, ErrorCode::UnknownTopic);
        assert!(md.topics[0].partitions.is_empty());
        let f = client
            .call(&FetchRequest {
                max_wait_ms: 0,
                min_bytes: 1,
                max_bytes: 1024,
                partitions: vec![FetchPartition {
                    topic: "ghost".into(),
                    partition: 0,
                    offset: 0,
                    max_bytes: 1024,
                }],
            })
            .await
            .unwrap();
        assert_eq!(f.partitions[0].error, ErrorCode::UnknownTopic);
        let of = client
            .call(&OffsetFetchRequest {
                group: "g".into(),
                topics: vec![TopicPartitions {
                    topic: "ghost".into(),
                    partitions: vec![],
                }],
            })
            .await
            .unwrap();
        assert_eq!(of.partitions[0].error, ErrorCode::UnknownTopic);
        assert_eq!(of.partitions[0].partition, -1);
        let oc = client
            .call(&OffsetCommitRequest {
                group: "g".into(),
                generation: -1,
                member_id: String::new(),
                offsets: vec![PartitionOffset {
                    topic: "ghost".into(),
                    partition: 0,
                    offset: 1,
                }],
            })
            .await
            .unwrap();
        assert_eq!(oc.results[0].error, ErrorCode::UnknownTopic);
        assert!(broker.engine().records().topic("ghost").is_none());
        broker.shutdown().await;
    });
}

/// JOIN_GROUP's `members` (every member id, sorted) goes to every member, not
/// only the leader; invalid group names are INVALID_NAME.
#[test]
fn every_member_gets_the_member_list() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "m", 2).await;
        let join = |member: String| JoinGroupRequest {
            group: "g".into(),
            member_id: member,
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 1_000,
            assignor: String::new(),
            topics: vec!["m".into()],
        };
        let a = Client::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();
        let b = Client::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();
        let first = a.call(&join(String::new())).await.unwrap();
        // The second join starts a rebalance (the first member's heartbeat then
        // says so); the first member rejoins to complete it.
        let extra = Duration::from_secs(5);
        let jb = join(String::new());
        let second = rt::spawn(async move { b.call_with_extra(&jb, extra).await });
        let hb = HeartbeatRequest {
            group: "g".into(),
            generation: first.generation,
            member_id: first.member_id.clone(),
        };
        common::wait_until("the rebalance to start", Duration::from_secs(5), || async {
            a.call(&hb).await.err().and_then(|e| e.code()) == Some(ErrorCode::RebalanceInProgress)
        })
        .await;
        let ra = a
            .call_with_extra(&join(first.member_id.clone()), extra)
            .await;
        let rb = second.await;
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(ra.generation, rb.generation);
        let mut all = vec![ra.member_id.clone(), rb.member_id.clone()];
        all.sort();
        assert_eq!(ra.members, all);
        assert_eq!(rb.members, all, "the non-leader gets the list too");
        // Any non-empty group id is taken (as Kafka does); an empty one is not.
        let bad = a
            .call(&JoinGroupRequest {
                group: String::new(),
                ..join(String::new())
            })
            .await
            .unwrap_err();
        assert_eq!(bad.code(), Some(ErrorCode::InvalidName));
        broker.shutdown().await;
    });
}
