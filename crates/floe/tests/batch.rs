//! Batches and the pipeline give the answers of the same requests run one by one: in order for
//! batches (including duplicates of a key, stop-on-failure and full tables), as a set keyed by
//! tag for the pipeline; also with writers on other threads. Over both layouts.

mod common;

use std::collections::HashMap;

use floe::{
    hash::Mix64, Backend, FlatMap, Insert, Layout, Prefetch, Request, ResizeMode, Response,
};
use proptest::prelude::*;

use crate::common::{
    growing_dense_map, growing_map, layouts, matrix, tiny_dense_map, tiny_map, SplitMix,
};

type Map = FlatMap<u64, u64, Mix64>;

fn request() -> impl Strategy<Value = Request<u64, u64>> {
    // Few keys, so batches hold many duplicates of one key.
    request_in(24)
}

/// Requests on keys `0..keys`.
fn request_in(keys: u64) -> impl Strategy<Value = Request<u64, u64>> {
    let key = 0u64..keys;
    prop_oneof![
        3 => key.clone().prop_map(Request::Get),
        3 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Request::InsertNew(k, v)),
        2 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Request::Insert(k, v)),
        2 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Request::Put(k, v)),
        2 => (key.clone(), 0u64..5).prop_map(|(k, d)| Request::fetch_add(k, d)),
        3 => key.prop_map(Request::Remove),
    ]
}

/// A fixed-size map of `layout`: `bins` bins and `links` link buckets, or a dense table of as
/// many lines (at least 4).
fn tiny(layout: Layout, backend: Backend, bins: usize, links: usize, seed: u64) -> Map {
    match layout {
        Layout::Bins => tiny_map(backend, bins, links, seed),
        Layout::Dense => tiny_dense_map(backend, bins * 3, seed),
    }
}

/// A map of `layout` that starts at its smallest (`links` buckets for the default layout's
/// two bins) and grows.
fn growing(layout: Layout, backend: Backend, links: usize, mode: ResizeMode, seed: u64) -> Map {
    match layout {
        Layout::Bins => growing_map(backend, 2, links, mode, seed),
        Layout::Dense => growing_dense_map(backend, mode, seed),
    }
}

fn one_by_one(map: &Map, requests: &[Request<u64, u64>]) -> Vec<Response<u64>> {
    requests.iter().map(|&r| map.execute(r)).collect()
}

fn contents(map: &Map) -> Vec<(u64, u64)> {
    let mut all = Vec::new();
    map.for_each(|k, v| all.push((k, v)));
    all.sort_unstable();
    all
}

/// Batch vs one by one on two maps of the same geometry and seed, every backend and depth.
fn check_batch(requests: &[Request<u64, u64>], bins: usize, links: usize, seed: u64) {
    for (layout, backend) in matrix() {
        let expected_map = tiny(layout, backend, bins, links, seed);
        let expected = one_by_one(&expected_map, requests);
        for depth in [0, 1, 2, 5, 16, 64] {
            let map = tiny(layout, backend, bins, links, seed);
            let mut responses = Vec::new();
            let ran = map
                .batch()
                .depth(depth)
                .prefetch(Prefetch::Always)
                .run(requests, &mut responses);
            assert_eq!(ran, requests.len());
            assert_eq!(responses, expected, "{layout:?} {backend:?} depth {depth}");
            assert_eq!(contents(&map), contents(&expected_map));
            map.check_invariants();
        }
    }
}

/// Batches and the pipeline on maps that start at two bins and grow while they run: the same
/// answers as one by one (for the pipeline by tag: requests on one key keep their order
/// across tables, and a growing map never answers `Full`). Returns the fewest bins a map
/// ended with.
fn check_growing(requests: &[Request<u64, u64>], links: usize, window: usize, seed: u64) -> usize {
    let mut fewest = usize::MAX;
    for (layout, backend) in matrix() {
        for mode in [ResizeMode::Incremental, ResizeMode::Blocking] {
            let fresh = || growing(layout, backend, links, mode, seed);
            let expected_map = fresh();
            let expected = one_by_one(&expected_map, requests);
            let map = fresh();
            let mut responses = Vec::new();
            let ran = map
                .batch()
                .depth(window)
                .prefetch(Prefetch::Always)
                .run(requests, &mut responses);
            assert_eq!(
                (ran, &responses),
                (requests.len(), &expected),
                "{layout:?} {backend:?} {mode:?}"
            );
            assert_eq!(contents(&map), contents(&expected_map));
            let map = fresh();
            let mut pipeline = map.pipeline::<usize>(window).prefetch(Prefetch::Always);
            let mut got: Vec<Option<Response<u64>>> = vec![None; requests.len()];
            for (tag, &r) in requests.iter().enumerate() {
                if let Some((t, response)) = pipeline.submit(tag, r) {
                    assert!(got[t].replace(response).is_none(), "tag {t} twice");
                }
            }
            pipeline.flush(|t, response| assert!(got[t].replace(response).is_none()));
            let got: Vec<Response<u64>> = got.into_iter().map(|r| r.expect("completed")).collect();
            assert_eq!(
                got, expected,
                "pipeline, {layout:?} {backend:?} {mode:?} window {window}"
            );
            assert_eq!(contents(&map), contents(&expected_map));
            map.check_invariants();
            // A dense line holds 4 keys to a bin's 3 or so: count in the default's bins.
            let bins = match layout {
                Layout::Bins => map.stats().bins,
                Layout::Dense => map.stats().bins * 4 / 3,
            };
            fewest = fewest.min(bins);
        }
    }
    fewest
}

/// The growing check on a request mix that certainly grows the map several times.
#[test]
fn batches_and_pipelines_keep_their_answers_through_growths() {
    let mut rng = SplitMix(11);
    let requests: Vec<Request<u64, u64>> = (0..if cfg!(miri) { 60 } else { 1500 })
        .map(|_| {
            let k = rng.below(600);
            match rng.below(6) {
                0 => Request::Remove(k),
                1 => Request::Get(k),
                2 => Request::fetch_add(k, 1),
                3 => Request::Put(k, k),
                _ => Request::Insert(k, k),
            }
        })
        .collect();
    for window in [1, 7, 32] {
        let bins = check_growing(&requests, 1, window, window as u64);
        assert!(bins >= 64, "the map grew only to {bins} bins");
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 32 },
        ..ProptestConfig::default()
    })]

    /// Hundreds of keys into a map of two bins: it grows several times under the batch and
    /// the pipeline.
    #[test]
    fn batches_and_pipelines_match_one_by_one_while_growing(
        requests in prop::collection::vec(request_in(400), 0..600),
        links in 0usize..3,
        window in 1usize..48,
        seed in any::<u64>(),
    ) {
        check_growing(&requests, links, window, seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 128 },
        ..ProptestConfig::default()
    })]

    /// Two bins and a small pool: chains and `Full` inside batches.
    #[test]
    fn batches_match_one_by_one_in_full_tables(
        requests in prop::collection::vec(request(), 0..200),
        seed in any::<u64>(),
    ) {
        check_batch(&requests, 2, 3, seed);
    }

    #[test]
    fn batches_match_one_by_one(
        requests in prop::collection::vec(request(), 0..300),
        seed in any::<u64>(),
    ) {
        check_batch(&requests, 16, 8, seed);
    }

    /// Stop-on-failure runs exactly the prefix up to and including the first failure.
    #[test]
    fn stop_on_failure_stops_at_the_first_failure(
        requests in prop::collection::vec(request(), 1..100),
        seed in any::<u64>(),
    ) {
        for layout in layouts() {
        let reference = tiny(layout, Backend::Scalar, 4, 2, seed);
        let all = one_by_one(&reference, &requests);
        let first_failure = all.iter().position(Response::is_failure);
        let map = tiny(layout, Backend::Auto, 4, 2, seed);
        let mut responses = Vec::new();
        let ran = map
            .batch()
            .depth(8)
            .prefetch(Prefetch::Always)
            .stop_on_failure(true)
            .run(&requests, &mut responses);
        let expected_len = first_failure.map_or(requests.len(), |i| i + 1);
        prop_assert_eq!(ran, expected_len);
        prop_assert_eq!(&responses[..], &all[..expected_len]);
        }
    }

    /// The pipeline's completions, matched up by tag, are the one-by-one answers. (The link
    /// pool never runs dry here: whether it does depends on the order across bins, which the
    /// pipeline does not keep.)
    #[test]
    fn pipeline_matches_one_by_one_by_tag(
        requests in prop::collection::vec(request(), 0..300),
        window in 1usize..40,
        seed in any::<u64>(),
    ) {
        for (layout, backend) in matrix() {
            // 4 bins with a deep pool: many chained bins, so requests go round twice. A bin
            // can still fill up (15 keys), but that depends only on its own requests, whose
            // order the pipeline keeps. A dense table's room depends on the order across
            // lines (displacements): the dense maps have room for every key.
            for (bins, links) in [(4, 64), (64, 64)] {
                let bins = if layout == Layout::Dense { bins.max(16) } else { bins };
                let expected = one_by_one(&tiny(layout, backend, bins, links, seed), &requests);
                let map = tiny(layout, backend, bins, links, seed);
                let mut pipeline = map.pipeline::<usize>(window).prefetch(Prefetch::Always);
                let mut got: Vec<Option<Response<u64>>> = vec![None; requests.len()];
                for (tag, &r) in requests.iter().enumerate() {
                    prop_assert!(pipeline.in_flight() <= window);
                    if let Some((t, response)) = pipeline.submit(tag, r) {
                        prop_assert!(got[t].replace(response).is_none(), "tag {} twice", t);
                    }
                }
                pipeline.flush(|t, response| {
                    assert!(got[t].replace(response).is_none(), "tag {t} twice");
                });
                prop_assert_eq!(pipeline.in_flight(), 0);
                let got: Vec<Response<u64>> = got.into_iter().map(|r| r.expect("completed")).collect();
                prop_assert_eq!(&got, &expected);
                map.check_invariants();
            }
        }
    }
}

/// Which typed batch a test runs: `insert_each`, `insert_new_each` or `fetch_add_each`.
#[derive(Clone, Copy, Debug)]
enum Typed {
    Insert,
    InsertNew,
    FetchAdd,
}

impl Typed {
    const ALL: [Typed; 3] = [Typed::Insert, Typed::InsertNew, Typed::FetchAdd];

    /// The request `run_each` would take for the pair.
    fn request(self, (key, value): (u64, u64)) -> Request<u64, u64> {
        match self {
            Typed::Insert => Request::Insert(key, value),
            Typed::InsertNew => Request::InsertNew(key, value),
            Typed::FetchAdd => Request::fetch_add(key, value),
        }
    }

    /// Run `pairs` through this typed batch, its answers as `run_each`'s responses; and how
    /// many ran.
    fn run(
        self,
        batch: floe::Batch<'_, u64, u64, Mix64>,
        pairs: &[(u64, u64)],
    ) -> (usize, Vec<Response<u64>>) {
        let mut responses = Vec::new();
        let mut next = 0;
        let mut answer = |i: usize, response: Response<u64>| {
            assert_eq!(i, next, "answers in order");
            next += 1;
            responses.push(response);
        };
        let ran = match self {
            Typed::Insert => batch.insert_each(pairs, |i, r| answer(i, Response::Insert(r))),
            Typed::InsertNew => {
                batch.insert_new_each(pairs, |i, r| answer(i, Response::InsertNew(r)))
            }
            Typed::FetchAdd => batch.fetch_add_each(pairs, |i, r| answer(i, Response::FetchAdd(r))),
        };
        (ran, responses)
    }
}

/// A typed batch against the same requests one by one, on maps made by `fresh` with every
/// third key of `0..keys` present first: the same answers (with and without stop-on-failure)
/// and contents.
fn check_typed(fresh: impl Fn() -> Map, pairs: &[(u64, u64)], keys: u64, depth: usize) {
    for typed in Typed::ALL {
        for stop in [false, true] {
            let prefilled = || {
                let map = fresh();
                for k in (0..keys).step_by(3) {
                    // A tiny table may be full: then the key is simply absent.
                    let _ = map.try_insert(k, k + 1);
                }
                map
            };
            let expected_map = prefilled();
            let requests: Vec<_> = pairs.iter().map(|&p| typed.request(p)).collect();
            let mut expected = one_by_one(&expected_map, &requests);
            if stop {
                if let Some(first) = expected.iter().position(Response::is_failure) {
                    expected.truncate(first + 1);
                    // The one-by-one map ran the rest too: rerun only the prefix.
                    let again = prefilled();
                    assert_eq!(one_by_one(&again, &requests[..=first]), expected);
                    let map = prefilled();
                    let batch = map
                        .batch()
                        .depth(depth)
                        .prefetch(Prefetch::Always)
                        .stop_on_failure(true);
                    let (ran, responses) = typed.run(batch, pairs);
                    assert_eq!((ran, &responses), (first + 1, &expected), "{typed:?} stop");
                    assert_eq!(contents(&map), contents(&again), "{typed:?} stop");
                    continue;
                }
            }
            let map = prefilled();
            let batch = map
                .batch()
                .depth(depth)
                .prefetch(Prefetch::Always)
                .stop_on_failure(stop);
            let (ran, responses) = typed.run(batch, pairs);
            assert_eq!(
                (ran, &responses),
                (pairs.len(), &expected),
                "{typed:?} depth {depth}"
            );
            assert_eq!(contents(&map), contents(&expected_map), "{typed:?}");
            map.check_invariants();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 24 },
        ..ProptestConfig::default()
    })]

    /// `insert_each`, `insert_new_each` and `fetch_add_each` answer as `run_each` of their
    /// requests: in full tables (a bin's `Full` inside the engine's loop), in tables that grow
    /// under them, on every layout and backend.
    #[test]
    fn typed_batches_match_one_by_one(
        pairs in prop::collection::vec((0u64..300, 0u64..5), 0..400),
        depth in prop_oneof![Just(0usize), 1usize..80],
        seed in any::<u64>(),
    ) {
        for (layout, backend) in matrix() {
            check_typed(|| tiny(layout, backend, 2, 3, seed), &pairs, 300, depth);
            check_typed(|| tiny(layout, backend, 64, 16, seed), &pairs, 300, depth);
            check_typed(
                || growing(layout, backend, 1, ResizeMode::Incremental, seed),
                &pairs,
                300,
                depth,
            );
        }
    }
}

#[test]
fn get_many_matches_get() {
    for (layout, backend) in matrix() {
        let map = tiny(layout, backend, 256, 64, 9);
        for k in 0..400u64 {
            if k % 3 != 0 {
                assert!(map.try_insert_new(k, k * 10).unwrap().is_inserted());
            }
        }
        // More keys than one chunk of the engine's batch loop (512), and a last partial one.
        let keys: Vec<u64> = (0..1300).map(|k| k % 500).collect();
        for depth in [0, 3, 16, 64] {
            let mut values = vec![Some(1); keys.len()];
            map.batch()
                .depth(depth)
                .prefetch(Prefetch::Always)
                .get_many(&keys, &mut values)
                .unwrap();
            for (k, v) in keys.iter().zip(&values) {
                assert_eq!(
                    *v,
                    map.get(k),
                    "{layout:?} {backend:?} depth {depth} key {k}"
                );
            }
        }
    }
}

/// `get_many` while another thread grows the map again and again: batches that start during
/// a growth go key by key, batches during which one starts finish key by key from the first
/// moved bin; every present key is found with its value either way.
#[test]
#[cfg_attr(miri, ignore = "many growths")]
fn get_many_while_the_map_grows() {
    for (layout, backend) in matrix() {
        for mode in [ResizeMode::Incremental, ResizeMode::Blocking] {
            let map = match layout {
                Layout::Bins => growing_map(backend, 4, 1, mode, 5),
                Layout::Dense => growing_dense_map(backend, mode, 5),
            };
            let present: Vec<u64> = (0..1500).collect();
            for &k in &present {
                assert!(map.try_insert_new(k, !k).unwrap().is_inserted());
            }
            let done = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    for k in 1_000_000..1_060_000u64 {
                        assert!(map.try_insert_new(k, k).unwrap().is_inserted());
                    }
                    done.store(true, std::sync::atomic::Ordering::Relaxed);
                });
                let mut values = vec![None; present.len()];
                let mut rounds = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || rounds < 3 {
                    values.fill(None);
                    map.batch()
                        .depth(16)
                        .prefetch(Prefetch::Always)
                        .get_many(&present, &mut values)
                        .unwrap();
                    for (k, v) in present.iter().zip(&values) {
                        assert_eq!(*v, Some(!k), "{layout:?} {backend:?} {mode:?} key {k}");
                    }
                    rounds += 1;
                }
            });
            assert_eq!(map.len(), 61_500);
            map.check_invariants();
        }
    }
}

#[test]
fn batch_and_pipeline_defaults() {
    let map = FlatMap::<u64, u64>::try_with_capacity(1000).unwrap();
    // A small table: auto mode runs without prefetching and still answers.
    let mut out = Vec::new();
    assert_eq!(map.batch().run(&[], &mut out), 0);
    map.batch().run(
        &[Request::InsertNew(1, 2), Request::InsertNew(1, 3)],
        &mut out,
    );
    assert_eq!(
        out,
        [
            Response::InsertNew(Ok(Insert::Inserted)),
            Response::InsertNew(Ok(Insert::Present(2)))
        ]
    );
    assert!(out[1].is_failure() && !out[0].is_failure());
    let mut pipeline = map.pipeline::<()>(0);
    assert!(
        pipeline.submit((), Request::Get(1)).is_none(),
        "window rounds up to 1"
    );
    assert_eq!(
        pipeline.submit((), Request::Get(2)),
        Some(((), Response::Get(Some(2))))
    );
    let mut rest = Vec::new();
    pipeline.flush(|_, r| rest.push(r));
    assert_eq!(rest, [Response::Get(None)]);
    assert!(format!("{pipeline:?}").contains("window: 1"));
    assert_eq!(Request::<u64, u64>::Remove(4).key(), 4);
}

/// What one request does to a model of this thread's keys.
fn model_answer(model: &mut HashMap<u64, u64>, request: Request<u64, u64>) -> Response<u64> {
    match request {
        Request::Get(k) => Response::Get(model.get(&k).copied()),
        Request::InsertNew(k, v) => Response::InsertNew(Ok(match model.get(&k) {
            Some(&old) => Insert::Present(old),
            None => {
                model.insert(k, v);
                Insert::Inserted
            }
        })),
        Request::FetchAdd(k, _) => {
            let old = model.get(&k).copied();
            model.insert(k, old.unwrap_or(0) + 1);
            Response::FetchAdd(Ok(old))
        }
        Request::Remove(k) => Response::Remove(model.remove(&k)),
        other => unreachable!("not generated: {other:?}"),
    }
}

fn even_key_request(rng: &mut SplitMix) -> Request<u64, u64> {
    let key = rng.below(32) * 2;
    match rng.below(4) {
        0 => Request::Get(key),
        1 => Request::InsertNew(key, rng.next()),
        2 => Request::fetch_add(key, 1),
        _ => Request::Remove(key),
    }
}

/// Another thread inserts, removes and overwrites the odd keys of the same 64 bins.
fn odd_key_writer(map: &FlatMap<u64, u64>, rounds: usize) {
    let mut rng = SplitMix(1);
    for _ in 0..rounds {
        let key = rng.below(64) * 2 + 1;
        match rng.below(3) {
            0 => drop(map.try_insert_new(key, key)),
            1 => drop(map.remove(&key)),
            _ => drop(map.try_insert(key, rng.next())),
        }
    }
}

fn shared_map() -> FlatMap<u64, u64> {
    FlatMap::<u64, u64>::builder()
        .bins(64)
        .link_buckets(64)
        .build()
        .unwrap()
}

/// The pipeline on one thread while another writes other keys: completions, matched by tag,
/// are the answers of the requests in submission order (same-key order is kept).
#[test]
fn pipeline_with_concurrent_writers() {
    let rounds = if cfg!(miri) { 200 } else { 30_000 };
    let map = shared_map();
    std::thread::scope(|s| {
        s.spawn(|| odd_key_writer(&map, rounds * 2));
        let mut rng = SplitMix(2);
        let requests: Vec<Request<u64, u64>> =
            (0..rounds).map(|_| even_key_request(&mut rng)).collect();
        let mut model = HashMap::new();
        let expected: Vec<Response<u64>> = requests
            .iter()
            .map(|&r| model_answer(&mut model, r))
            .collect();
        let mut got = vec![None; rounds];
        let mut pipeline = map.pipeline::<usize>(12).prefetch(Prefetch::Always);
        for (tag, &request) in requests.iter().enumerate() {
            if let Some((t, response)) = pipeline.submit(tag, request) {
                got[t] = Some(response);
            }
        }
        pipeline.flush(|t, response| got[t] = Some(response));
        for (tag, (got, expected)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(
                got.as_ref(),
                Some(expected),
                "tag {tag}: {:?}",
                requests[tag]
            );
        }
    });
    map.check_invariants();
}

/// Batches on one thread while another thread writes other keys of the same bins: the
/// batch's answers are still exactly its one-by-one answers.
#[test]
fn batches_with_concurrent_writers() {
    let rounds = if cfg!(miri) { 20 } else { 2_000 };
    let map = shared_map();
    std::thread::scope(|s| {
        s.spawn(|| odd_key_writer(&map, rounds * 20));
        let mut model = HashMap::new();
        let mut rng = SplitMix(2);
        let mut responses = Vec::new();
        for _ in 0..rounds {
            let requests: Vec<Request<u64, u64>> =
                (0..16).map(|_| even_key_request(&mut rng)).collect();
            responses.clear();
            map.batch()
                .depth(4)
                .prefetch(Prefetch::Always)
                .run(&requests, &mut responses);
            for (&request, response) in requests.iter().zip(&responses) {
                assert_eq!(*response, model_answer(&mut model, request), "{request:?}");
            }
        }
    });
    map.check_invariants();
}

/// A batch meets a key an open shadow insert holds: the insert is refused (`Shadowed`) inside
/// the engine's batch loop, the upsert leaves it for the single-key path, which waits for the
/// shadow's commit (on another thread) and then updates the committed value, and the batch
/// goes on after it in order. Both layouts (the dense one runs batches at the facade).
/// Batches of even-key requests on a map of each layout that starts at its smallest and
/// grows (and shrinks) under them, while another thread inserts and removes odd keys: every
/// response is the one-by-one model's (the dense layout's batch loop stops at a moved line and
/// the request goes on through the single-key path, which follows it).
#[test]
fn batches_keep_their_answers_while_another_thread_grows_the_map() {
    let odd_keys = if cfg!(miri) { 300 } else { 100_000 };
    for layout in layouts() {
        let map = growing(layout, Backend::Auto, 1, ResizeMode::Incremental, 5);
        let done = std::sync::atomic::AtomicBool::new(false);
        let batches = std::thread::scope(|s| {
            s.spawn(|| {
                let mut rng = SplitMix(9);
                for i in 0..odd_keys {
                    // Mostly new keys, so the map grows; some removed, and now and then a
                    // shrink, so it also migrates into smaller tables.
                    let key = 2 * i + 1;
                    // (A full table answers an error; the next growth takes the key.)
                    let _ = map.try_insert_new(key, key);
                    if rng.below(4) == 0 {
                        map.remove(&(rng.below(i + 1) * 2 + 1));
                    }
                    if i % 8192 == 8191 {
                        map.shrink_to_fit().expect("a smaller table");
                    }
                }
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            let mut model = HashMap::new();
            let mut rng = SplitMix(3);
            let mut responses = Vec::new();
            let mut batches = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) || batches < 10 {
                let requests: Vec<Request<u64, u64>> =
                    (0..32).map(|_| even_key_request(&mut rng)).collect();
                responses.clear();
                map.batch()
                    .depth(8)
                    .prefetch(Prefetch::Always)
                    .run(&requests, &mut responses);
                for (&request, response) in requests.iter().zip(&responses) {
                    assert_eq!(
                        *response,
                        model_answer(&mut model, request),
                        "{layout:?} {request:?}"
                    );
                }
                batches += 1;
            }
            batches
        });
        map.check_invariants();
        let bins = map.stats().bins;
        assert!(bins > 64, "{layout:?}: the map did not grow ({bins} bins)");
        assert!(batches >= 10, "{layout:?}: {batches} batches");
    }
}

#[test]
fn a_batch_waits_for_a_shadowed_key_and_goes_on_in_order() {
    for layout in [Layout::Bins, Layout::Dense] {
        let map = FlatMap::<u64, u64>::builder()
            .layout(layout)
            .capacity(1 << 12)
            .build()
            .unwrap();
        for k in 0..100 {
            assert!(map.insert_new(k, k).is_inserted());
        }
        let shadow = map.insert_shadow(500, 5).expect("absent");
        let requests = [
            Request::Get(1),
            Request::InsertNew(500, 1),
            Request::Insert(500, 7),
            Request::Get(500),
            Request::fetch_add(2, 10),
        ];
        let mut responses = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                shadow.commit();
            });
            map.batch()
                .prefetch(Prefetch::Always)
                .run(&requests, &mut responses);
        });
        assert_eq!(
            responses,
            [
                Response::Get(Some(1)),
                Response::InsertNew(Ok(Insert::Shadowed)),
                Response::Insert(Ok(Some(5))),
                Response::Get(Some(7)),
                Response::FetchAdd(Ok(Some(2))),
            ],
            "{layout:?}"
        );
        assert_eq!((map.get(&500), map.get(&2)), (Some(7), Some(12)));
    }
}

/// Insert-then-delete pairs of fresh keys in batches, round after round: each delete finds
/// its key and frees its slot, so the next round's inserts find room and `len` returns to
/// zero. A delete whose slot CAS succeeded but read as failed (the `cmpxchg16b` block once
/// lost its result to `rbx`, in just this monomorphization) left its slot retired but
/// unfreed, its answer `None`, the count drifting, and the next insert into that bin waiting
/// forever. Then on every layout and backend.
#[test]
fn insert_delete_pairs_free_their_slots_round_after_round() {
    let requests: Vec<Request<u64, u64>> = (0..4096u64)
        .flat_map(|k| [Request::InsertNew(k << 20, k), Request::Remove(k << 20)])
        .collect();
    let expected = |i: usize| match requests[i] {
        Request::InsertNew(..) => Response::InsertNew(Ok(Insert::Inserted)),
        Request::Remove(key) => Response::Remove(Some(key >> 20)),
        _ => unreachable!("pairs only"),
    };
    let map = FlatMap::<u64, u64>::with_capacity(1 << 16);
    for round in 0..4 {
        let mut answered = 0;
        map.batch()
            .depth(64)
            .run_each(&requests, |_, _| answered += 1);
        assert_eq!((answered, map.len()), (requests.len(), 0), "round {round}");
    }
    for (layout, backend) in matrix() {
        let map = FlatMap::<u64, u64>::builder()
            .layout(layout)
            .backend(backend)
            .capacity(1 << 14)
            .build()
            .unwrap();
        for round in 0..4 {
            map.batch().run_each(&requests, |i, response| {
                assert_eq!(
                    response,
                    expected(i),
                    "{layout:?} {backend:?} round {round}, #{i}"
                );
            });
            assert_eq!(map.len(), 0, "{layout:?} {backend:?} round {round}");
        }
    }
}
