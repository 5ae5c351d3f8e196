//! `Map`'s batches and pipeline: differential tests against `std::collections::HashMap` (on a
//! map of two bins that grows during the batch, and with hashes that collide), requests that
//! never run are dropped exactly once, and single-writer-per-key order seen by batched readers
//! while the map grows.

mod common;

use std::{
    collections::HashMap,
    hash::BuildHasher,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};

use common::{FourWords, StopOnDrop};
use floe::{Insert, Map, MapRequest, MapResponse, Prefetch};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Get(u8),
    Insert(u8, Vec<u8>),
    Upsert(u8, Vec<u8>),
    Put(u8, Vec<u8>),
    Remove(u8),
}

fn op(keys: u8) -> impl Strategy<Value = Op> {
    let value = || prop::collection::vec(any::<u8>(), 0..3);
    prop_oneof![
        3 => (0..keys).prop_map(Op::Get),
        3 => (0..keys, value()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (0..keys, value()).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => (0..keys, value()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (0..keys).prop_map(Op::Remove),
    ]
}

/// How a run hands its requests to the map.
#[derive(Clone, Copy, Debug)]
enum Runner {
    Batch { depth: usize, stop_on_failure: bool },
    Pipeline { window: usize },
}

fn runner() -> impl Strategy<Value = Runner> {
    prop_oneof![
        (0usize..40, any::<bool>()).prop_map(|(depth, stop_on_failure)| Runner::Batch {
            depth,
            stop_on_failure
        }),
        (1usize..40).prop_map(|window| Runner::Pipeline { window }),
    ]
}

fn key(k: u8) -> String {
    format!("key-{k}")
}

/// What `model` answers to `op` (and applies it), as a response with owned values.
fn expect(model: &mut HashMap<String, Vec<u8>>, op: &Op) -> MapResponse<'static, Vec<u8>> {
    let leak = |v: Option<Vec<u8>>| v.map(|v| &*Box::leak(Box::new(v)));
    match op.clone() {
        Op::Get(k) => MapResponse::Get(leak(model.get(&key(k)).cloned())),
        Op::Insert(k, v) => match model.get(&key(k)).cloned() {
            Some(present) => {
                MapResponse::InsertNew(Ok(Insert::Present(leak(Some(present)).unwrap())))
            }
            None => {
                model.insert(key(k), v);
                MapResponse::InsertNew(Ok(Insert::Inserted))
            }
        },
        Op::Upsert(k, v) => MapResponse::Insert(Ok(leak(model.insert(key(k), v)))),
        Op::Put(k, v) => MapResponse::Put(leak(
            model.get_mut(&key(k)).map(|old| std::mem::replace(old, v)),
        )),
        Op::Remove(k) => MapResponse::Remove(leak(model.remove(&key(k)))),
    }
}

fn check<S: BuildHasher>(map: &Map<String, Vec<u8>, S>, runs: &[(Runner, Vec<Op>)]) {
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    for (runner, ops) in runs {
        let keys: Vec<String> = ops
            .iter()
            .map(|op| match op {
                Op::Get(k)
                | Op::Insert(k, _)
                | Op::Upsert(k, _)
                | Op::Put(k, _)
                | Op::Remove(k) => key(*k),
            })
            .collect();
        let requests = ops.iter().zip(&keys).map(|(op, key)| match op.clone() {
            Op::Get(_) => MapRequest::Get(key.as_str()),
            Op::Insert(_, v) => MapRequest::InsertNew(key.clone(), v),
            Op::Upsert(_, v) => MapRequest::Insert(key.clone(), v),
            Op::Put(_, v) => MapRequest::Put(key.clone(), v),
            Op::Remove(_) => MapRequest::Remove(key.as_str()),
        });
        let m = map.pin();
        let mut got = Vec::new();
        let stops = match *runner {
            Runner::Batch {
                depth,
                stop_on_failure,
            } => {
                let ran = m
                    .batch()
                    .depth(depth)
                    .prefetch(Prefetch::Always)
                    .stop_on_failure(stop_on_failure)
                    .run(requests, &mut got);
                assert_eq!(ran, got.len());
                stop_on_failure
            }
            Runner::Pipeline { window } => {
                let mut pipeline = m.pipeline(window).prefetch(Prefetch::Always);
                let mut tags = Vec::new();
                for (tag, request) in requests.enumerate() {
                    if let Some((tag, response)) = pipeline.submit(tag, request) {
                        tags.push(tag);
                        got.push(response);
                    }
                    assert!(pipeline.in_flight() <= window);
                }
                pipeline.flush(|tag, response| {
                    tags.push(tag);
                    got.push(response);
                });
                assert!(tags.iter().copied().eq(0..ops.len()), "submission order");
                false
            }
        };
        for (i, (op, response)) in ops.iter().zip(&got).enumerate() {
            let want = expect(&mut model, op);
            assert_eq!(*response, want, "request {i} ({op:?}) of {runner:?}");
            if stops && want.is_failure() {
                assert_eq!(i + 1, got.len(), "stopped at the first failure");
            }
        }
        if !stops {
            assert_eq!(got.len(), ops.len(), "{runner:?} ran every request");
        }
        drop(m);
        assert_eq!(map.len(), model.len());
    }
    let m = map.pin();
    for (k, v) in &model {
        assert_eq!(m.get(k.as_str()), Some(v));
    }
    assert_eq!(map.check_invariants(), model.len());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 64 },
        ..ProptestConfig::default()
    })]

    /// Up to 150 keys into two bins: the map grows during batches and pipelines.
    #[test]
    fn batches_agree_with_std_while_growing(
        runs in prop::collection::vec((runner(), prop::collection::vec(op(150), 0..120)), 1..8),
    ) {
        let map = Map::<String, Vec<u8>>::builder().bins(2).build().unwrap();
        check(&map, &runs);
    }

    /// Every key on one of four hash words: requests on keys of one collision list.
    #[test]
    fn batches_agree_with_std_when_hashes_collide(
        runs in prop::collection::vec((runner(), prop::collection::vec(op(30), 0..80)), 1..6),
    ) {
        let map = Map::<String, Vec<u8>>::builder().bins(2).hasher(FourWords).build().unwrap();
        check(&map, &runs);
    }
}

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// A value that counts the live ones.
#[derive(Debug, PartialEq)]
struct Counted(u64);

impl Counted {
    fn new(n: u64) -> Self {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Counted(n)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

#[test]
fn requests_that_never_run_are_dropped_once() {
    {
        let map = Map::<u64, Counted>::new();
        let m = map.pin();
        assert!(m.insert_new(3, Counted::new(0)).is_inserted());
        // A batch stopped at its fourth request: the requests after it, some already taken
        // into the window, are dropped without running.
        let requests = (0..10).map(|k| MapRequest::InsertNew(k, Counted::new(k)));
        let mut got = Vec::new();
        let ran = m
            .batch()
            .depth(8)
            .prefetch(Prefetch::Always)
            .stop_on_failure(true)
            .run(requests, &mut got);
        assert_eq!(ran, 4);
        assert!(
            matches!(
                got[3],
                MapResponse::InsertNew(Ok(Insert::Present(Counted(0))))
            ),
            "{got:?}"
        );
        drop(got);
        assert_eq!(map.len(), 4);
        // A pipeline dropped with requests waiting: they never run.
        let mut pipeline = m.pipeline::<u64, ()>(16).prefetch(Prefetch::Always);
        for k in 100..110 {
            assert!(pipeline
                .submit((), MapRequest::Insert(k, Counted::new(k)))
                .is_none());
        }
        assert_eq!(pipeline.in_flight(), 10);
        drop(pipeline);
        assert_eq!(m.get(&100), None);
        assert_eq!(map.len(), 4);
    }
    assert_eq!(LIVE.load(Ordering::Relaxed), 0, "every value dropped once");
}

/// One writer per key, each writing increasing values through pipelines, while a reader's
/// batched gets (through `MapBatch`, with prefetch) must see every key's values never go
/// back, and the map grows from two bins meanwhile.
#[test]
fn batched_readers_see_each_key_move_forward_while_the_map_grows() {
    let keys: u64 = if cfg!(miri) { 8 } else { 2_000 };
    let rounds: u64 = if cfg!(miri) { 3 } else { 40 };
    let map = Map::<u64, u64>::builder().bins(2).build().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop_readers = StopOnDrop(&stop);
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let map = &map;
                s.spawn(move || {
                    for round in 1..=rounds {
                        let m = map.pin();
                        let mut pipeline = m.pipeline::<u64, ()>(32).prefetch(Prefetch::Always);
                        for k in (w..keys).step_by(2) {
                            let done = pipeline.submit((), MapRequest::Insert(k, round));
                            assert!(done.is_none_or(|(_, r)| !r.is_failure()));
                        }
                        pipeline.flush(|_, r| assert!(!r.is_failure()));
                    }
                })
            })
            .collect();
        let reader = s.spawn(|| {
            let all: Vec<u64> = (0..keys).collect();
            let mut seen = vec![0u64; keys as usize];
            while !stop.load(Ordering::Relaxed) {
                let m = map.pin();
                let requests = all.iter().map(MapRequest::<u64, u64>::Get);
                m.batch()
                    .prefetch(Prefetch::Always)
                    .run_each(requests, |i, response| {
                        let MapResponse::Get(value) = response else {
                            unreachable!("gets only")
                        };
                        let now = value.copied().unwrap_or(0);
                        assert!(
                            now >= seen[i],
                            "key {i} went back from {} to {now}",
                            seen[i]
                        );
                        seen[i] = now;
                    });
            }
        });
        for writer in writers {
            writer.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
    });
    let m = map.pin();
    assert!((0..keys).all(|k| m.get(&k) == Some(&rounds)));
    assert_eq!(map.check_invariants(), keys as usize);
}

/// A batch keeps program order across keys (a pipeline need not): two threads each write one
/// key and then read the other's, with the read early enough in the batch to be searched
/// before the write runs. If both reads took effect at that search (as a pipeline's gets
/// may), both could miss the other's write, which no interleaving of the batches' requests
/// in order allows.
#[test]
fn a_batch_keeps_program_order_across_keys() {
    let rounds: u64 = if cfg!(miri) { 2 } else { 3_000 };
    let map = Map::<u64, u64>::new();
    let barrier = std::sync::Barrier::new(2);
    let both_missed = AtomicUsize::new(0);
    let side = |mine: u64, theirs: u64| {
        let mut saw = Vec::with_capacity(rounds as usize);
        let fillers: Vec<u64> = (1_000_000..1_000_014).collect();
        for round in 0..rounds {
            let (mine, theirs) = (mine + 2 * round, theirs + 2 * round);
            let requests = [MapRequest::Insert(mine, round), MapRequest::Get(&theirs)]
                .into_iter()
                .chain(fillers.iter().map(MapRequest::Get));
            barrier.wait();
            let m = map.pin();
            let mut read = None;
            m.batch()
                .depth(16)
                .prefetch(Prefetch::Always)
                .run_each(requests, |i, response| {
                    if i == 1 {
                        read = Some(response == MapResponse::Get(None));
                    }
                });
            saw.push(read.expect("the get ran"));
        }
        saw
    };
    std::thread::scope(|s| {
        let a = s.spawn(|| side(0, 1));
        let b = side(1, 0);
        let a = a.join().unwrap();
        let missed = a.iter().zip(&b).filter(|(a, b)| **a && **b).count();
        both_missed.store(missed, Ordering::Relaxed);
    });
    assert_eq!(
        both_missed.load(Ordering::Relaxed),
        0,
        "both gets missed the other's write"
    );
}
