//! Timed loops: pinned threads, a start barrier, per-thread work prepared before timing,
//! every answer checked, latency sampled into HDR histograms.
//!
//! **Latency sampling.** One operation in every [`CHUNK`] is timed on its own with two clock
//! reads (`Instant::now`, a vDSO `rdtsc` that is ordered after earlier loads), so the sampled
//! operation's latency includes whatever of it did not overlap with its neighbours. The cost is
//! two clock reads per 256 operations; BENCHMARKS.md has the measured effect on throughput
//! (`--latency off` turns it off).

use std::{
    sync::Barrier,
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::{
    keys::Rng,
    maps::{AnyMap, BenchMap, Map},
    workload::{updated_value_of, value_matches, value_of, Kind, Op},
};

/// Thread placement: thread `i` of a run is pinned to core `i % cores`.
pub struct Workers {
    cores: Vec<core_affinity::CoreId>,
}

impl Workers {
    pub fn new() -> Self {
        Self {
            cores: core_affinity::get_core_ids().unwrap_or_default(),
        }
    }

    /// The number of cores threads are pinned to (at least 1).
    pub fn cores(&self) -> usize {
        self.cores.len().max(1)
    }

    /// Run `body(i)` on `threads` pinned threads released together; returns the time from the
    /// first thread's start to the last thread's end (each thread reads the clock itself: the
    /// spawning thread may not run again until a worker on its core is done), and the bodies'
    /// results.
    pub fn run<R: Send>(
        &self,
        threads: usize,
        body: impl Fn(usize) -> R + Sync,
    ) -> (Duration, Vec<R>) {
        let barrier = Barrier::new(threads);
        let timed: Vec<(Instant, Instant, R)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let (barrier, body, cores) = (&barrier, &body, &self.cores);
                    s.spawn(move || {
                        if !cores.is_empty() {
                            core_affinity::set_for_current(cores[i % cores.len()]);
                        }
                        barrier.wait();
                        let start = Instant::now();
                        let result = body(i);
                        (start, Instant::now(), result)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("worker panicked"))
                .collect()
        });
        let first = timed
            .iter()
            .map(|t| t.0)
            .min()
            .expect("at least one thread");
        let last = timed
            .iter()
            .map(|t| t.1)
            .max()
            .expect("at least one thread");
        (last - first, timed.into_iter().map(|t| t.2).collect())
    }
}

/// Per-thread streams of `len` items from `item(rng)`, prepared before timing (each thread
/// its own seed, so threads do not walk the same sequence).
pub fn streams<T>(
    threads: usize,
    seed: u64,
    len: usize,
    mut item: impl FnMut(&mut Rng) -> T,
) -> Vec<Vec<T>> {
    (0..threads)
        .map(|i| {
            let mut rng = Rng(seed + i as u64);
            (0..len).map(|_| item(&mut rng)).collect()
        })
        .collect()
}

/// The median of repeated measurements: the middle one, the upper of the two middle ones
/// for an even count. `values` must not be empty (every caller measures at least once).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Apply `op` to the items of `stream`, cycling, until `duration` has passed (the clock is read
/// every 4096 items). Returns the number of items processed.
#[inline(always)]
pub fn cycle_for<T>(stream: &[T], duration: Duration, mut op: impl FnMut(&T)) -> u64 {
    let start = Instant::now();
    let mut ops = 0u64;
    loop {
        for chunk in stream.chunks(4096) {
            for item in chunk {
                op(item);
            }
            ops += chunk.len() as u64;
            if start.elapsed() >= duration {
                return ops;
            }
        }
    }
}

/// When a timed run ends.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// After this long (the clock is read about every 4096 operations), cycling.
    For(Duration),
    /// After at least this many operations per thread (whole chunks), cycling.
    PerThread(u64),
    /// At the end of each thread's array.
    Once,
}

/// Operations between latency samples; runs stop only at chunk boundaries, so pairs of
/// operations (InsDel's insert and delete) are never cut apart.
pub const CHUNK: usize = 256;

/// Requests handed to one batch call (the prefetch window restarts at each call, so longer is
/// closer to a stream).
const BATCH_CHUNK: usize = 2048;

/// How operations are handed to the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// One call per operation (every map).
    Single,
    /// floe's order-preserving batches (`FlatMap::batch`), `--batch` requests ahead, 2048
    /// requests per call: `Batch::get_many` when every operation is a get,
    /// `Batch::insert_new_each` when every one is an insert, else `run_each`.
    Batch,
    /// floe's asynchronous pipeline (`FlatMap::pipeline`), a window of `--batch` requests.
    Pipeline,
    /// The harness's floor, for all-get workloads on floe: `Batch::get_many` over the prebuilt
    /// keys, 2048 per call, checking only each call's number of hits (no per-answer check).
    /// `--api batch` must come within 10% of it (BENCHMARKS.md, "DRAM speed";
    /// the log `results/history/BENCHMARKS-log-2026-11.md` has issue 12 part 4).
    Bare,
}

/// How a run executes its operations.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub api: Api,
    /// Prefetch depth (batch) or window (pipeline).
    pub batch: usize,
    pub prefetch: floe::Prefetch,
    pub sample_latency: bool,
}

impl Mode {
    pub fn single(sample_latency: bool) -> Self {
        Mode {
            api: Api::Single,
            batch: 1,
            prefetch: floe::Prefetch::Auto,
            sample_latency,
        }
    }
}

/// One timed run.
pub struct Sample {
    pub mops: f64,
    pub ops: u64,
    pub latency: Option<Histogram<u64>>,
    pub lines_per_op: Option<f64>,
}

/// Run `op` on `map` and say whether the answer is the expected one.
#[inline(always)]
fn execute<M: BenchMap>(map: &M, op: &Op, thread: usize) -> bool {
    match op.kind {
        Kind::Get => match map.get(op.key) {
            Some(value) => op.expect && value_matches(op.key, value),
            None => !op.expect,
        },
        Kind::Insert => map.insert(op.key, value_of(op.key)) == op.expect,
        Kind::Update => map.update(op.key, updated_value_of(op.key, thread)) == op.expect,
        Kind::Remove => map.remove(op.key) == op.expect,
    }
}

/// A latency histogram as every timed loop of the bench keeps them.
pub fn histogram() -> Histogram<u64> {
    // 1 ns to 100 s at 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds")
}

struct Driven {
    ops: u64,
    mistakes: Mistakes,
    latency: Option<Histogram<u64>>,
    lines: u64,
}

/// Walk `items` `chunk` (even) at a time until `stop`, calling `body(index of the chunk's
/// first item, chunk)`; the clock is read about every 4096 items. Returns the number of items
/// processed.
#[inline(always)]
fn for_chunks<T>(items: &[T], chunk: usize, stop: Stop, mut body: impl FnMut(usize, &[T])) -> u64 {
    let (mut ops, mut chunks) = (0u64, 0u64);
    let clock_every = (4096 / chunk).max(1) as u64;
    let start = Instant::now();
    'run: loop {
        for (c, items) in items.chunks(chunk).enumerate() {
            body(c * chunk, items);
            ops += items.len() as u64;
            chunks += 1;
            match stop {
                Stop::For(duration) if chunks % clock_every == 0 && start.elapsed() >= duration => {
                    break 'run
                }
                Stop::PerThread(n) if ops >= n => break 'run,
                _ => {}
            }
        }
        if matches!(stop, Stop::Once) || items.is_empty() {
            break;
        }
    }
    ops
}

/// Wrong answers seen by one thread.
#[derive(Default)]
struct Mistakes {
    count: u64,
    first: Option<Op>,
}

impl Mistakes {
    #[inline(always)]
    fn record(&mut self, right: bool, op: &Op) {
        if !right {
            self.count += 1;
            self.first.get_or_insert(*op);
        }
    }
}

/// One thread's timed loop, one call per operation.
fn drive<M: BenchMap>(map: &M, stream: &[Op], thread: usize, stop: Stop, sample: bool) -> Driven {
    let mut latency = sample.then(histogram);
    let lines_before = floe::lines_read();
    let mut mistakes = Mistakes::default();
    let ops = for_chunks(stream, CHUNK, stop, |_, chunk| {
        let mut rest = chunk;
        if let Some(histogram) = latency.as_mut() {
            let t0 = Instant::now();
            let right = execute(map, &chunk[0], thread);
            let nanos = t0.elapsed().as_nanos() as u64;
            histogram.saturating_record(nanos.max(1));
            mistakes.record(right, &chunk[0]);
            rest = &chunk[1..];
        }
        for op in rest {
            mistakes.record(execute(map, op, thread), op);
        }
    });
    Driven {
        ops,
        mistakes,
        latency,
        lines: floe::lines_read() - lines_before,
    }
}

/// The floe request for a prepared operation.
#[inline(always)]
fn request_of(op: &Op, thread: usize) -> floe::Request<u64, u64> {
    match op.kind {
        Kind::Get => floe::Request::Get(op.key),
        Kind::Insert => floe::Request::InsertNew(op.key, value_of(op.key)),
        Kind::Update => floe::Request::Put(op.key, updated_value_of(op.key, thread)),
        Kind::Remove => floe::Request::Remove(op.key),
    }
}

/// Whether floe's response to `op` is the expected one.
#[inline(always)]
fn response_right(op: &Op, response: &floe::Response<u64>) -> bool {
    use floe::Response as R;
    match *response {
        R::Get(Some(value)) => op.expect && value_matches(op.key, value),
        R::Get(None) => !op.expect,
        R::InsertNew(r) => matches!(r, Ok(floe::Insert::Inserted)) == op.expect,
        R::Put(v) | R::Remove(v) => v.is_some() == op.expect,
        R::Insert(_) | R::FetchAdd(_) => false,
    }
}

/// One thread's timed loop through floe's batches or pipeline, a chunk at a time, on requests
/// made from `stream` before timing. No latency samples: a request's latency is not separable
/// from its batch's.
fn drive_batched(
    map: &Map,
    stream: &[Op],
    requests: &[floe::Request<u64, u64>],
    stop: Stop,
    mode: Mode,
) -> Driven {
    let lines_before = floe::lines_read();
    let mut mistakes = Mistakes::default();
    let batch = map.batch().depth(mode.batch).prefetch(mode.prefetch);
    let mut pipeline = map.pipeline::<usize>(mode.batch).prefetch(mode.prefetch);
    let mut check = |index: usize, response: &floe::Response<u64>| {
        mistakes.record(response_right(&stream[index], response), &stream[index]);
    };
    let ops = for_chunks(requests, BATCH_CHUNK, stop, |first, chunk| match mode.api {
        Api::Batch => {
            batch.run_each(chunk, |i, response| check(first + i, &response));
        }
        Api::Pipeline => {
            for (i, &request) in chunk.iter().enumerate() {
                if let Some((index, response)) = pipeline.submit(first + i, request) {
                    check(index, &response);
                }
            }
        }
        Api::Single | Api::Bare => unreachable!("handled by drive and drive_bare"),
    });
    pipeline.flush(|index, response| check(index, &response));
    Driven {
        ops,
        mistakes,
        latency: None,
        lines: floe::lines_read() - lines_before,
    }
}

/// All-insert streams through floe's typed batch (`Batch::insert_new_each`: `(key, value)`
/// pairs made before timing, no request or response enums), every answer checked as
/// `drive_batched` checks it: the batched writer's path a user with one kind of write takes.
fn drive_insert_each(
    map: &Map,
    stream: &[Op],
    pairs: &[(u64, u64)],
    stop: Stop,
    mode: Mode,
) -> Driven {
    let lines_before = floe::lines_read();
    let mut mistakes = Mistakes::default();
    let batch = map.batch().depth(mode.batch).prefetch(mode.prefetch);
    let ops = for_chunks(pairs, BATCH_CHUNK, stop, |first, chunk| {
        batch.insert_new_each(chunk, |i, outcome| {
            let op = &stream[first + i];
            mistakes.record(
                matches!(outcome, Ok(floe::Insert::Inserted)) == op.expect,
                op,
            );
        });
    });
    Driven {
        ops,
        mistakes,
        latency: None,
        lines: floe::lines_read() - lines_before,
    }
}

/// The any-key map's request for a prepared operation (an update replaces a present key's
/// value, as `BenchMap::update`).
#[inline(always)]
fn any_request_of(op: &Op, thread: usize) -> floe::MapRequest<'_, u64, u64> {
    match op.kind {
        Kind::Get => floe::MapRequest::Get(&op.key),
        Kind::Insert => floe::MapRequest::InsertNew(op.key, value_of(op.key)),
        Kind::Update => floe::MapRequest::Put(op.key, updated_value_of(op.key, thread)),
        Kind::Remove => floe::MapRequest::Remove(&op.key),
    }
}

/// Whether the any-key map's response to `op` is the expected one.
#[inline(always)]
fn any_response_right(op: &Op, response: &floe::MapResponse<'_, u64>) -> bool {
    use floe::MapResponse as R;
    match *response {
        R::Get(Some(&value)) => op.expect && value_matches(op.key, value),
        R::Get(None) => !op.expect,
        R::InsertNew(r) => matches!(r, Ok(floe::Insert::Inserted)) == op.expect,
        R::Put(v) | R::Remove(v) => v.is_some() == op.expect,
        R::Insert(_) => false,
    }
}

/// One thread's timed loop through `Map`'s batches or pipeline, a chunk at a time, with one
/// handle pinned per chunk (a pipeline is flushed at the end of each chunk, since its
/// responses live as long as the handle). Requests are made from the stream as they are
/// submitted (a `MapRequest` moves the owned key of an insert: here a copy of a `u64`).
fn drive_any_batched(map: &AnyMap, stream: &[Op], thread: usize, stop: Stop, mode: Mode) -> Driven {
    let lines_before = floe::lines_read();
    let mut mistakes = Mistakes::default();
    let ops = for_chunks(stream, BATCH_CHUNK, stop, |first, chunk| {
        let m = map.pin();
        let requests = chunk.iter().map(|op| any_request_of(op, thread));
        let mut check = |index: usize, response: &floe::MapResponse<'_, u64>| {
            let op = &stream[first + index];
            mistakes.record(any_response_right(op, response), op);
        };
        match mode.api {
            Api::Batch => {
                m.batch()
                    .depth(mode.batch)
                    .prefetch(mode.prefetch)
                    .run_each(requests, |i, response| check(i, &response));
            }
            Api::Pipeline => {
                let mut pipeline = m.pipeline(mode.batch).prefetch(mode.prefetch);
                for (i, request) in requests.enumerate() {
                    if let Some((index, response)) = pipeline.submit(i, request) {
                        check(index, &response);
                    }
                }
                pipeline.flush(|index, response| check(index, &response));
            }
            Api::Single | Api::Bare => unreachable!("handled by drive and drive_get_many"),
        }
    });
    Driven {
        ops,
        mistakes,
        latency: None,
        lines: floe::lines_read() - lines_before,
    }
}

/// Keys and expected answers of an all-get stream, extracted before timing: the check after
/// each `get_many` call reads only the keys the call just read (in cache) and one bit per
/// key, not the 16-byte operations (a second stream competing with the call's prefetches for
/// the core's miss buffers; a profile showed the check loop stalled on it).
struct GetStream {
    keys: Vec<u64>,
    /// Bit `i % 64` of word `i / 64`: operation `i` expects a hit.
    expect: Vec<u64>,
}

impl GetStream {
    fn of(stream: &[Op]) -> Self {
        let mut expect = vec![0u64; stream.len().div_ceil(64)];
        for (i, op) in stream.iter().enumerate() {
            expect[i / 64] |= u64::from(op.expect) << (i % 64);
        }
        Self {
            keys: stream.iter().map(|op| op.key).collect(),
            expect,
        }
    }

    #[inline(always)]
    fn expects(&self, i: usize) -> bool {
        self.expect[i / 64] >> (i % 64) & 1 == 1
    }

    /// Hits expected in each chunk of `chunk` keys (a multiple of 64), for the bare loop.
    fn hits_per_chunk(&self, chunk: usize) -> Vec<u32> {
        debug_assert_eq!(chunk % 64, 0);
        self.expect
            .chunks(chunk / 64)
            .map(|words| words.iter().map(|w| w.count_ones()).sum())
            .collect()
    }
}

/// All-get streams through the map's batched get (`BenchMap::get_many`: `Batch::get_many` for
/// `FlatMap`, `MapRef::get_many` for `Map`; no request or response enums), every answer
/// checked.
fn drive_get_many<M: BenchMap>(
    map: &M,
    stream: &[Op],
    gets: &GetStream,
    stop: Stop,
    mode: Mode,
) -> Driven {
    let lines_before = floe::lines_read();
    let mut mistakes = Mistakes::default();
    let mut values = vec![None; BATCH_CHUNK];
    let ops = for_chunks(&gets.keys, BATCH_CHUNK, stop, |first, chunk| {
        let values = &mut values[..chunk.len()];
        map.get_many(chunk, values, mode.batch, mode.prefetch);
        for (i, (&key, value)) in chunk.iter().zip(values.iter()).enumerate() {
            let expect = gets.expects(first + i);
            let right = match *value {
                Some(v) => expect && value_matches(key, v),
                None => !expect,
            };
            if !right {
                mistakes.record(false, &stream[first + i]);
            }
        }
    });
    Driven {
        ops,
        mistakes,
        latency: None,
        lines: floe::lines_read() - lines_before,
    }
}

/// All-get streams through `Batch::get_many` as a user's own loop would run them: prebuilt
/// keys, and per call only the number of hits compared with the one expected (counted before
/// timing). What `drive_get_many` costs beyond this is the harness.
fn drive_bare(map: &Map, gets: &GetStream, stop: Stop, mode: Mode) -> Driven {
    let lines_before = floe::lines_read();
    let batch = map.batch().depth(mode.batch).prefetch(mode.prefetch);
    let hits = gets.hits_per_chunk(BATCH_CHUNK);
    let mut values = vec![None; BATCH_CHUNK];
    let mut wrong_calls = 0u64;
    let ops = for_chunks(&gets.keys, BATCH_CHUNK, stop, |first, chunk| {
        let values = &mut values[..chunk.len()];
        batch
            .get_many(chunk, values)
            .expect("one value slot per key");
        let found = values.iter().filter(|v| v.is_some()).count();
        wrong_calls += u64::from(found != hits[first / BATCH_CHUNK] as usize);
    });
    Driven {
        ops,
        mistakes: Mistakes {
            count: wrong_calls,
            first: None,
        },
        latency: None,
        lines: floe::lines_read() - lines_before,
    }
}

/// Time `streams` (one per thread) on `map`. Fails if any answer is wrong.
pub fn timed<M: BenchMap>(
    workers: &Workers,
    map: &M,
    streams: &[Vec<Op>],
    stop: Stop,
    mode: Mode,
) -> Result<Sample, String> {
    let (elapsed, driven) = match (mode.api, map.as_floe()) {
        (Api::Single, _) => workers.run(streams.len(), |t| {
            drive(map, &streams[t], t, stop, mode.sample_latency)
        }),
        (Api::Batch, _)
            if M::GET_MANY && streams.iter().flatten().all(|op| op.kind == Kind::Get) =>
        {
            let gets: Vec<GetStream> = streams.iter().map(|s| GetStream::of(s)).collect();
            workers.run(streams.len(), |t| {
                drive_get_many(map, &streams[t], &gets[t], stop, mode)
            })
        }
        (Api::Bare, Some(floe)) if streams.iter().flatten().all(|op| op.kind == Kind::Get) => {
            let gets: Vec<GetStream> = streams.iter().map(|s| GetStream::of(s)).collect();
            workers.run(streams.len(), |t| drive_bare(floe, &gets[t], stop, mode))
        }
        (Api::Bare, _) => return Err("--api bare runs all-get workloads on floe only".into()),
        (Api::Batch, Some(floe)) if streams.iter().flatten().all(|op| op.kind == Kind::Insert) => {
            let pairs: Vec<Vec<(u64, u64)>> = streams
                .iter()
                .map(|s| s.iter().map(|op| (op.key, value_of(op.key))).collect())
                .collect();
            workers.run(streams.len(), |t| {
                drive_insert_each(floe, &streams[t], &pairs[t], stop, mode)
            })
        }
        (_, Some(floe)) => {
            let requests: Vec<Vec<_>> = streams
                .iter()
                .enumerate()
                .map(|(t, s)| s.iter().map(|op| request_of(op, t)).collect())
                .collect();
            workers.run(streams.len(), |t| {
                drive_batched(floe, &streams[t], &requests[t], stop, mode)
            })
        }
        (_, None) => match map.as_any() {
            Some(any) => workers.run(streams.len(), |t| {
                drive_any_batched(any, &streams[t], t, stop, mode)
            }),
            None => {
                return Err(
                    "only floe's maps have batched interfaces beyond all-get batches".into(),
                )
            }
        },
    };
    let ops: u64 = driven.iter().map(|d| d.ops).sum();
    let wrong: u64 = driven.iter().map(|d| d.mistakes.count).sum();
    if wrong > 0 {
        let first = driven
            .iter()
            .enumerate()
            .find_map(|(t, d)| d.mistakes.first.map(|op| (t, op)));
        return Err(match first {
            Some((thread, first)) => format!(
                "{wrong} of {ops} answers were wrong (first: {first:?} on thread {thread}); \
                 a full table answers inserts with `false`"
            ),
            None => {
                format!("{wrong} get_many calls of the bare loop found the wrong number of keys")
            }
        });
    }
    let mut latency = (mode.sample_latency && mode.api == Api::Single).then(histogram);
    for d in &driven {
        if let (Some(all), Some(one)) = (latency.as_mut(), d.latency.as_ref()) {
            all.add(one).expect("same bounds");
        }
    }
    let lines: u64 = driven.iter().map(|d| d.lines).sum();
    Ok(Sample {
        mops: ops as f64 / elapsed.as_secs_f64() / 1e6,
        ops,
        latency,
        lines_per_op: cfg!(feature = "line-stats").then(|| lines as f64 / ops.max(1) as f64),
    })
}

/// Insert `keys` (value [`value_of`]) on `threads` threads; fails if an insert does not take.
pub fn prefill<M: BenchMap>(
    workers: &Workers,
    threads: usize,
    map: &M,
    keys: &[u64],
) -> Result<(), String> {
    let share = keys.len().div_ceil(threads).max(1);
    let (_, failed) = workers.run(threads, |t| {
        keys.iter()
            .skip(t * share)
            .take(share)
            .filter(|&&k| !map.insert(k, value_of(k)))
            .count()
    });
    let failed: usize = failed.iter().sum();
    if failed > 0 {
        return Err(format!(
            "prefill: {failed} of {} inserts did not take (table full?)",
            keys.len()
        ));
    }
    Ok(())
}

/// Latency percentiles in nanoseconds (the JSON schema's `latency_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
}

impl Latency {
    pub fn of(histogram: &Histogram<u64>) -> Option<Latency> {
        (!histogram.is_empty()).then(|| Latency {
            p50: histogram.value_at_quantile(0.5),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            p9999: histogram.value_at_quantile(0.9999),
            max: histogram.max(),
        })
    }
}

/// Median, min and max of repeated runs (Mops/s), with their latency samples merged.
#[derive(Clone, Debug)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub median_ops: u64,
    pub latency: Option<Latency>,
    pub lines_per_op: Option<f64>,
}

impl Summary {
    pub fn of(mut samples: Vec<Sample>) -> Summary {
        assert!(!samples.is_empty(), "at least one run");
        let mut merged: Option<Histogram<u64>> = None;
        for s in &samples {
            if let Some(h) = &s.latency {
                merged
                    .get_or_insert_with(histogram)
                    .add(h)
                    .expect("same bounds");
            }
        }
        samples.sort_by(|a, b| a.mops.total_cmp(&b.mops));
        let mid = &samples[samples.len() / 2];
        Summary {
            median: mid.mops,
            min: samples[0].mops,
            max: samples[samples.len() - 1].mops,
            median_ops: mid.ops,
            latency: merged.as_ref().and_then(Latency::of),
            lines_per_op: mid.lines_per_op,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_stream_keeps_every_expectation_and_counts_hits_per_chunk() {
        // 5000 gets (two whole chunks and a partial one), hits on keys divisible by 3.
        let stream: Vec<Op> = (0..5000u64)
            .map(|key| Op {
                key,
                kind: Kind::Get,
                expect: key % 3 == 0,
            })
            .collect();
        let gets = GetStream::of(&stream);
        assert_eq!(
            gets.keys,
            stream.iter().map(|op| op.key).collect::<Vec<_>>()
        );
        assert!((0..stream.len()).all(|i| gets.expects(i) == stream[i].expect));
        let direct: Vec<u32> = stream
            .chunks(BATCH_CHUNK)
            .map(|c| c.iter().filter(|op| op.expect).count() as u32)
            .collect();
        assert_eq!(gets.hits_per_chunk(BATCH_CHUNK), direct);
    }
}
