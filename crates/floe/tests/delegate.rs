//! Partitioned delegation (`floe::delegate`): differential tests against `HashMap`, every
//! message applied exactly once and in order per sender under concurrency (more threads than
//! cores), `flush` waiting for everything, full partitions answered, handles closed in any
//! order on one thread without a hang, and the configuration's errors.

mod common;

use std::{collections::HashMap, hash::BuildHasher, thread};

use common::WordHash;

use floe::{
    delegate::{Handle, Partitioned},
    Error, FlatMap, Insert, Request, Response,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Insert(u64, u64),
    Upsert(u64, u64),
    Put(u64, u64),
    FetchAdd(u64, u64),
    Remove(u64),
    /// A request sent with `submit`, its response checked against the model.
    Submit(SubmitOp),
    /// `flush` in the middle of the run.
    Flush,
}

#[derive(Clone, Debug)]
enum SubmitOp {
    Get(u64),
    Insert(u64, u64),
    FetchAdd(u64, u64),
    Remove(u64),
}

fn op(keys: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Put(k, v)),
        (0..keys, 0..5u64).prop_map(|(k, d)| Op::FetchAdd(k, d)),
        (0..keys).prop_map(Op::Remove),
        (0..keys).prop_map(|k| Op::Submit(SubmitOp::Get(k))),
        (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Submit(SubmitOp::Insert(k, v))),
        (0..keys, 0..5u64).prop_map(|(k, d)| Op::Submit(SubmitOp::FetchAdd(k, d))),
        (0..keys).prop_map(|k| Op::Submit(SubmitOp::Remove(k))),
        Just(Op::Flush),
    ]
}

/// Apply `op` to the model, returning the response a submitted request must get.
fn model_apply(model: &mut HashMap<u64, u64>, op: &Op) -> Option<Response<u64>> {
    match *op {
        Op::Insert(k, v) => {
            model.entry(k).or_insert(v);
            None
        }
        Op::Upsert(k, v) => {
            model.insert(k, v);
            None
        }
        Op::Put(k, v) => {
            if let Some(slot) = model.get_mut(&k) {
                *slot = v;
            }
            None
        }
        Op::FetchAdd(k, d) => {
            let slot = model.entry(k).or_insert(0);
            *slot = slot.wrapping_add(d);
            None
        }
        Op::Remove(k) => {
            model.remove(&k);
            None
        }
        Op::Submit(SubmitOp::Get(k)) => Some(Response::Get(model.get(&k).copied())),
        Op::Submit(SubmitOp::Insert(k, v)) => Some(Response::InsertNew(Ok(match model.get(&k) {
            Some(&present) => Insert::Present(present),
            None => {
                model.insert(k, v);
                Insert::Inserted
            }
        }))),
        Op::Submit(SubmitOp::FetchAdd(k, d)) => {
            let previous = model.get(&k).copied();
            model.insert(k, previous.unwrap_or(0).wrapping_add(d));
            Some(Response::FetchAdd(Ok(previous)))
        }
        Op::Submit(SubmitOp::Remove(k)) => Some(Response::Remove(model.remove(&k))),
        Op::Flush => None,
    }
}

fn handle_apply<S: BuildHasher>(handle: &mut Handle<'_, u64, u64, S>, op: &Op, tag: u32) {
    let sent = match *op {
        Op::Insert(k, v) => handle.insert_new(k, v),
        Op::Upsert(k, v) => handle.insert(k, v),
        Op::Put(k, v) => handle.put(k, v),
        Op::FetchAdd(k, d) => handle.fetch_add(k, d),
        Op::Remove(k) => handle.remove(k),
        Op::Submit(SubmitOp::Get(k)) => handle.submit(tag, Request::Get(k)),
        Op::Submit(SubmitOp::Insert(k, v)) => handle.submit(tag, Request::InsertNew(k, v)),
        Op::Submit(SubmitOp::FetchAdd(k, d)) => handle.submit(tag, Request::fetch_add(k, d)),
        Op::Submit(SubmitOp::Remove(k)) => handle.submit(tag, Request::Remove(k)),
        Op::Flush => return,
    };
    sent.expect("an unbounded map takes every update");
}

fn contents(map: &Partitioned<u64, u64>) -> HashMap<u64, u64> {
    let mut all = HashMap::new();
    map.for_each(|k, v| assert!(all.insert(k, v).is_none(), "key {k} in two partitions"));
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Handles driven in turns from one thread, each on keys of its own (so the model's order
    /// is the handle's order); small sections so queues fill and senders help. Every
    /// submitted request's response equals the model's, and the map equals the model after
    /// the flushes.
    #[test]
    fn handles_in_turns_match_a_hashmap(
        threads in 1usize..4,
        section in prop_oneof![Just(1usize), Just(2), Just(8)],
        runs in proptest::collection::vec(proptest::collection::vec(op(24), 0..60), 4),
    ) {
        let map = Partitioned::<u64, u64>::builder(threads)
            .section(section)
            .sections(2)
            .build()
            .unwrap();
        let mut models = vec![HashMap::new(); threads];
        let mut expected: Vec<Vec<(u32, Response<u64>)>> = vec![Vec::new(); threads];
        let mut got: Vec<Vec<(u32, Response<u64>)>> = vec![Vec::new(); threads];
        let mut handles = map.handles().unwrap();
        let longest = runs.iter().map(Vec::len).max().unwrap_or(0);
        for step in 0..longest {
            for (t, handle) in handles.iter_mut().enumerate() {
                let Some(op) = runs.get(t).and_then(|run| run.get(step)) else { continue };
                // Handle t's keys: t, t + threads, ... (disjoint across handles).
                let op = shift(op, t as u64, threads as u64);
                let tag = step as u32;
                if let Some(response) = model_apply(&mut models[t], &op) {
                    expected[t].push((tag, response));
                }
                if matches!(op, Op::Flush) {
                    handle.flush(|tag, r| got[t].push((tag, r))).unwrap();
                } else {
                    handle_apply(handle, &op, tag);
                }
            }
        }
        for (t, handle) in handles.into_iter().enumerate() {
            handle.close(|tag, r| got[t].push((tag, r))).unwrap();
        }
        for t in 0..threads {
            got[t].sort_by_key(|&(tag, _)| tag);
            prop_assert_eq!(&got[t], &expected[t], "handle {}", t);
        }
        let model: HashMap<u64, u64> = models.into_iter().flatten().collect();
        prop_assert_eq!(contents(&map), model);
    }
}

/// `op` on handle `t`'s own keys.
fn shift(op: &Op, t: u64, threads: u64) -> Op {
    let k = |k: u64| k * threads + t;
    match *op {
        Op::Insert(key, v) => Op::Insert(k(key), v),
        Op::Upsert(key, v) => Op::Upsert(k(key), v),
        Op::Put(key, v) => Op::Put(k(key), v),
        Op::FetchAdd(key, d) => Op::FetchAdd(k(key), d),
        Op::Remove(key) => Op::Remove(k(key)),
        Op::Submit(SubmitOp::Get(key)) => Op::Submit(SubmitOp::Get(k(key))),
        Op::Submit(SubmitOp::Insert(key, v)) => Op::Submit(SubmitOp::Insert(k(key), v)),
        Op::Submit(SubmitOp::FetchAdd(key, d)) => Op::Submit(SubmitOp::FetchAdd(k(key), d)),
        Op::Submit(SubmitOp::Remove(key)) => Op::Submit(SubmitOp::Remove(k(key))),
        Op::Flush => Op::Flush,
    }
}

/// Many threads (more than the machine's cores) counting a few hot keys and many cold ones
/// through delegation: every count exact (each message applied exactly once). Each thread
/// also counts a key of its own with `submit`ted fetch-adds, whose responses must be 0, 1,
/// 2, ... in order (applied in the order sent, none twice or lost), and after its `flush`
/// reads its own upserted keys back directly with their last values (`flush` waits for all).
#[test]
fn concurrent_counts_are_exact_and_in_order() {
    const THREADS: usize = 6;
    const ROUNDS: u64 = 20_000;
    let map = Partitioned::<u64, u64>::builder(THREADS)
        .section(8)
        .build()
        .unwrap();
    let handles = map.handles().unwrap();
    thread::scope(|s| {
        for mut handle in handles {
            s.spawn(move || {
                let t = handle.index() as u64;
                let own_counter = 1_000_000 + t;
                let mut seen = Vec::new();
                for i in 0..ROUNDS {
                    handle.fetch_add(i % 4, 1).unwrap(); // hot: 4 keys
                    handle.fetch_add(100 + i % 1000, 1).unwrap(); // cold
                    handle.insert(2_000_000 + t * ROUNDS + i % 50, i).unwrap();
                    if i % 7 == 0 {
                        handle
                            .submit(i as u32, Request::fetch_add(own_counter, 1))
                            .unwrap();
                    }
                    if i % 5_000 == 4_999 {
                        handle
                            .flush(|tag, response| seen.push((tag, response)))
                            .unwrap();
                        // Everything this thread sent has taken effect.
                        for j in i - 49..=i {
                            let key = 2_000_000 + t * ROUNDS + j % 50;
                            assert_eq!(handle.get(&key), Some(j));
                        }
                    } else if i % 64 == 0 {
                        handle.poll(|tag, response| seen.push((tag, response)));
                    }
                }
                handle
                    .close(|tag, response| seen.push((tag, response)))
                    .unwrap();
                seen.sort_by_key(|&(tag, _)| tag);
                for (n, (_, response)) in seen.iter().enumerate() {
                    let previous = (n > 0).then_some(n as u64);
                    assert_eq!(*response, Response::FetchAdd(Ok(previous)), "thread {t}");
                }
                assert_eq!(seen.len() as u64, ROUNDS.div_ceil(7));
            });
        }
    });
    let threads = THREADS as u64;
    for key in 0..4 {
        assert_eq!(map.get(&key), Some(threads * ROUNDS / 4));
    }
    for key in 100..1100 {
        assert_eq!(map.get(&key), Some(threads * ROUNDS / 1000));
    }
    for t in 0..threads {
        assert_eq!(map.get(&(1_000_000 + t)), Some(ROUNDS.div_ceil(7)));
    }
    assert_eq!(map.len(), 4 + 1000 + THREADS + THREADS * 50);
    // Every key in the partition its router names.
    for (index, partition) in (0..THREADS).map(|i| (i, map.partition(i).unwrap())) {
        partition.for_each(|k, _| assert_eq!(map.partition_of(&k), index));
    }
}

/// A handle sending far more than its queue holds to a partition whose owner never runs
/// (its handle sits idle on the same thread) does not hang: the sender serves that partition
/// itself when the queue is full. Then the handles close in any order.
#[test]
fn an_idle_owner_never_blocks_a_sender_and_handles_close_in_any_order() {
    let map = Partitioned::<u64, u64>::builder(3)
        .section(2)
        .sections(2)
        .build()
        .unwrap();
    for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
        let mut handles: Vec<Option<_>> = map.handles().unwrap().into_iter().map(Some).collect();
        let sender = handles[order[0]].as_mut().unwrap();
        for key in 0..10_000u64 {
            sender.fetch_add(key, 1).unwrap();
        }
        for index in order {
            drop(handles[index].take());
        }
    }
    assert_eq!(map.len(), 10_000);
    assert!((0..10_000u64).all(|key| map.get(&key) == Some(3)));
}

/// The partitions share the keys about evenly.
#[test]
fn keys_spread_over_the_partitions() {
    let map = Partitioned::<u64, u64>::builder(4).build().unwrap();
    let mut per = [0usize; 4];
    for key in 0..40_000u64 {
        per[map.partition_of(&key)] += 1;
    }
    assert!(per.iter().all(|&n| (9_000..11_000).contains(&n)), "{per:?}");
}

/// A capped partition that fills: updates already sent fail at the owner and are reported
/// by `flush` as undelivered, later ones are refused at the call with `Full`; nothing is
/// lost silently (present + refused + undelivered = sent). A remove reopens the partition.
#[test]
fn a_full_partition_is_answered_and_nothing_is_lost_silently() {
    let map = Partitioned::<u64, u64>::builder(2)
        .map(FlatMap::builder().bins(32).max_bins(32).link_buckets(4))
        .section(4)
        .build()
        .unwrap();
    let mut handles = map.handles().unwrap();
    let (mut refused, mut undelivered, mut sent) = (0usize, 0usize, 0usize);
    {
        let handle = &mut handles[0];
        for key in 0..5_000u64 {
            match handle.insert(key, key) {
                Ok(()) => sent += 1,
                Err(Error::Full) => refused += 1,
                Err(other) => panic!("unexpected {other:?}"),
            }
            if key % 100 == 99 {
                match handle.flush(|_, _| {}) {
                    Ok(()) => {}
                    Err(Error::Undelivered { updates }) => undelivered += updates,
                    Err(other) => panic!("unexpected {other:?}"),
                }
            }
        }
        match handle.flush(|_, _| {}) {
            Ok(()) => {}
            Err(Error::Undelivered { updates }) => undelivered += updates,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert!(refused > 0, "the partitions filled");
    assert_eq!(sent + refused, 5_000);
    assert_eq!(
        map.len() + undelivered,
        sent,
        "every update sent is present or reported"
    );
    // A submitted request to the full partition gets its error as the response.
    let full_partition = (0..2).find(|&p| {
        let key = (10_000u64..).find(|k| map.partition_of(k) == p).unwrap();
        handles[1].insert(key, 0) == Err(Error::Full)
    });
    let p = full_partition.expect("some partition is marked full");
    let present = (0..5_000u64).find(|k| map.partition_of(k) == p && map.get(k).is_some());
    // A remove in it lowers the mark.
    handles[1].remove(present.unwrap()).unwrap();
    handles[1].flush(|_, _| {}).unwrap();
    let key = (20_000u64..).find(|k| map.partition_of(k) == p).unwrap();
    let mut responses = Vec::new();
    handles[1].submit(7, Request::InsertNew(key, 1)).unwrap();
    handles[1].flush(|tag, r| responses.push((tag, r))).unwrap();
    assert_eq!(responses.len(), 1);
    assert!(matches!(
        responses[0],
        (
            7,
            Response::InsertNew(Ok(Insert::Inserted)) | Response::InsertNew(Err(Error::Full))
        )
    ));
}

/// A hasher that gives every even key one hash and every odd key another: past 15 keys of
/// each the updates fail at the owner (no table separates them) and are reported, never panicking or dropped silently.
#[test]
fn a_crowding_hasher_is_reported_not_dropped() {
    let map = Partitioned::<u64, u64>::builder(2)
        .map(FlatMap::builder().hasher(WordHash(|w| if w & 1 == 1 { u64::MAX } else { 0 })))
        .build()
        .unwrap();
    let mut handles = map.handles().unwrap();
    let mut refused = 0;
    for key in 0..200u64 {
        if handles[0].fetch_add(key, 1).is_err() {
            refused += 1;
        }
    }
    let undelivered = match handles[0].flush(|_, _| {}) {
        Ok(()) => 0,
        Err(Error::Undelivered { updates }) => updates,
        Err(other) => panic!("unexpected {other:?}"),
    };
    assert_eq!(map.len() + undelivered + refused, 200);
    assert!(undelivered + refused > 0);
}

/// Handles are handed out once per round; a second round after all closed continues on the
/// same queues.
#[test]
fn handles_come_in_rounds() {
    let map = Partitioned::<u64, u64>::builder(2)
        .section(2)
        .sections(2)
        .build()
        .unwrap();
    for round in 0..3u64 {
        let handles = map.handles().unwrap();
        assert_eq!(map.handles().err(), Some(Error::HandlesOut));
        thread::scope(|s| {
            for mut handle in handles {
                s.spawn(move || {
                    for key in 0..1000 {
                        handle.fetch_add(key, 1).unwrap();
                    }
                    handle.close(|_, _| {}).unwrap();
                });
            }
        });
        assert!((0..1000u64).all(|key| map.get(&key) == Some(2 * (round + 1))));
    }
    let partitions = map.into_partitions();
    assert_eq!(partitions.iter().map(FlatMap::len).sum::<usize>(), 1000);
}

#[test]
fn the_configuration_is_checked() {
    let invalid = |r: Result<Partitioned<u64, u64>, Error>| {
        assert!(matches!(r, Err(Error::InvalidConfig(_))), "{r:?}");
    };
    invalid(Partitioned::builder(0).build());
    invalid(Partitioned::builder(257).build());
    invalid(Partitioned::builder(2).section(3).build());
    invalid(Partitioned::builder(2).section(0).build());
    invalid(Partitioned::builder(2).sections(1).build());
    invalid(Partitioned::builder(2).sections(6).build());
    invalid(Partitioned::builder(2).section(1 << 17).build());
    let map = Partitioned::<u64, u64>::builder(2).build().unwrap();
    assert_eq!(map.threads(), 2);
    assert!(map.queue_bytes() > 0);
    assert!(map.is_empty());
    assert!(map.partition(2).is_none());
}

/// The long form (`ci/stress.sh`, `FLOE_STRESS_ROUNDS`): more handles than cores on
/// partitions that start tiny and grow many times, while another thread shrinks and
/// reserves them under the handles; hot counters exact, each handle's own keys (upserts and
/// removes, checked after every flush against its own model) and its submitted counter's
/// responses in order.
#[test]
#[ignore = "long; ci/stress.sh runs it"]
fn stress_delegation_through_growth_shrink_and_reserve() {
    const THREADS: usize = 8;
    let rounds: u64 = std::env::var("FLOE_STRESS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20_000)
        * 10;
    let map = Partitioned::<u64, u64>::builder(THREADS)
        .map(FlatMap::builder().capacity(16))
        .section(4)
        .sections(2)
        .build()
        .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let handles = map.handles().unwrap();
    thread::scope(|s| {
        let (map, done) = (&map, &done);
        s.spawn(move || {
            let mut turn = 0usize;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let partition = map.partition(turn % THREADS).unwrap();
                if turn.is_multiple_of(3) {
                    partition.reserve(1 << 10).unwrap();
                } else {
                    partition.shrink_to_fit().unwrap();
                }
                turn += 1;
                thread::yield_now();
            }
        });
        let workers: Vec<_> = handles
            .into_iter()
            .map(|mut handle| {
                s.spawn(move || {
                    let t = handle.index() as u64;
                    let own = |i: u64| ((t + 1) << 40) | (i % 300);
                    let counter = ((t + 1) << 40) | (1 << 20);
                    let mut model = HashMap::new();
                    let mut seen = Vec::new();
                    let mut rng = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for i in 0..rounds {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        handle.fetch_add(rng % 8, 1).unwrap();
                        let key = own(rng >> 20);
                        if rng.is_multiple_of(3) {
                            handle.remove(key).unwrap();
                            model.remove(&key);
                        } else {
                            handle.insert(key, i).unwrap();
                            model.insert(key, i);
                        }
                        if i.is_multiple_of(11) {
                            handle
                                .submit(i as u32, Request::fetch_add(counter, 1))
                                .unwrap();
                        }
                        if i % 4_096 == 4_095 {
                            handle.flush(|tag, r| seen.push((tag, r))).unwrap();
                            for j in 0..300 {
                                assert_eq!(handle.get(&own(j)), model.get(&own(j)).copied());
                            }
                        }
                    }
                    handle.close(|tag, r| seen.push((tag, r))).unwrap();
                    seen.sort_by_key(|&(tag, _)| tag);
                    for (n, (_, response)) in seen.iter().enumerate() {
                        let previous = (n > 0).then_some(n as u64);
                        assert_eq!(*response, Response::FetchAdd(Ok(previous)));
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let total: u64 = (0..8).map(|k| map.get(&k).unwrap_or(0)).sum();
    assert_eq!(total, THREADS as u64 * rounds);
    for index in 0..THREADS {
        assert_eq!(
            map.partition(index).unwrap().check_invariants(),
            map.partition(index).unwrap().len()
        );
    }
}
