//! Growth benchmarks (issue 5): maps that start small and grow while they are used.
//!
//! * `population` (DLHT Fig. 7): every thread inserts its share of `--keys` fresh keys into a
//!   map created for `--initial-slots` slots (capacity = half of them), so the map grows many
//!   times during the run. Throughput is keys over wall time.
//! * `grow-read` (DLHT Fig. 8): the map is prefilled to its first table's capacity; then
//!   writer threads insert the remaining keys (growing it) while reader threads get prefilled
//!   keys at random. Readers keep going for a tail after the writers stop, which gives the
//!   steady get rate the during-growth rate is compared with.
//!
//! With `--latency on` every operation is timed (one clock read per operation, the gap to the
//! previous one), so the maximum and the far tail are exact rather than sampled; throughput
//! from such runs includes that cost for every map alike. `--timeline MS` records operations
//! per interval (SEPH Fig. 7) and, with latency on, each interval's p99.9 per operation kind,
//! and draws both. The same run then times the machine itself: the same threads reading the
//! clock with no map operation between the reads, for as long as the maps ran, so a stall
//! that the machine gives any program (a host taking the CPU, a scheduler tick) is told apart
//! from one the map causes. Every insert must report "inserted" and every get
//! the key's value, and after the run a sample of the keys is read back: a wrong answer fails
//! the run (exit 1).

use std::{
    fmt::Write as _,
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::{
    keys::{mix, Rng},
    maps::{BenchMap, MapKind, Recipe, Visit},
    measure::{histogram, Latency, Workers},
    svg::{Svg, PALETTE},
    workload::value_of,
};

/// Which growth workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Population,
    GrowRead,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Population => "population",
            Kind::GrowRead => "grow-read",
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Plan {
    pub kind: Kind,
    pub maps: Vec<(MapKind, String)>,
    pub keys: u64,
    pub initial_slots: usize,
    pub threads: Vec<usize>,
    /// Readers of grow-read (default: half the threads, at least one writer).
    pub readers: Option<usize>,
    pub repeat: usize,
    pub interval: Duration,
    pub latency: bool,
    /// floe's inserts through its batches of this prefetch depth (1: one call per insert;
    /// peers always insert one by one).
    pub batch: usize,
    pub recipe: Recipe,
}

/// One map at one thread count (the median repeat by insert throughput).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub map: String,
    pub workload: Kind,
    pub threads: usize,
    pub writers: usize,
    pub readers: usize,
    pub keys: u64,
    pub initial_slots: usize,
    /// Million inserts per second: median, min, max of the repeats.
    pub insert_mops: f64,
    pub insert_mops_min: f64,
    pub insert_mops_max: f64,
    /// grow-read: million gets per second while the writers ran, and in the tail after.
    pub get_mops_during: Option<f64>,
    pub get_mops_steady: Option<f64>,
    /// Lowest interval of the get timeline while writers ran, as a fraction of the steady rate.
    pub get_min_interval_fraction: Option<f64>,
    pub insert_latency_ns: Option<Latency>,
    pub get_latency_ns: Option<Latency>,
    /// Timeline intervals (while the writers ran) with no insert completed.
    pub zero_insert_intervals: usize,
    pub interval_ms: f64,
    /// Million inserts (and gets) per second per interval, of the median repeat.
    pub insert_timeline: Vec<f64>,
    pub get_timeline: Vec<f64>,
    /// Table bytes at the end, for maps that report them.
    pub table_bytes: Option<usize>,
    /// p99.9 latency (microseconds) per interval, with latency on (0: no operation in it).
    #[serde(default)]
    pub insert_p999_timeline_us: Vec<f64>,
    #[serde(default)]
    pub get_p999_timeline_us: Vec<f64>,
}

/// The machine's own stalls: `threads` threads reading the clock back to back with nothing in
/// between, for `seconds`; the gaps between reads are what any program would have seen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineGaps {
    pub threads: usize,
    pub seconds: f64,
    pub gap_ns: Latency,
    pub gaps_over_1ms: u64,
    pub gaps_over_5ms: u64,
    /// The kernel's rate of faulting in memory (GB/s), huge pages as the run asked: fresh
    /// memory, and memory freed a moment before (see `fault_rates`). `None` where it cannot
    /// be measured (no `MADV_POPULATE_WRITE`).
    #[serde(default)]
    pub fresh_fault_gbps: Option<f64>,
    #[serde(default)]
    pub reused_fault_gbps: Option<f64>,
}

/// Bytes `fault_rates` faults in, twice.
const FAULT_PROBE_BYTES: usize = 256 << 20;

/// How fast the kernel faults in memory for this process: a fresh mapping faulted in whole
/// (`MADV_POPULATE_WRITE`), unmapped, and a second one at once. On a virtual machine whose
/// host backs guest memory on first touch and takes freed memory back (free page reporting),
/// the first is the host's rate and can be tens of times slower than the second: that is the
/// cost a growing table's first touches pay, whoever pays it.
fn fault_rates(huge_pages: bool) -> (Option<f64>, Option<f64>) {
    let once = || -> Option<f64> {
        // SAFETY: a fresh anonymous private mapping, advised, populated and unmapped here; no
        // reference into it is made.
        unsafe {
            let base = libc::mmap(
                core::ptr::null_mut(),
                FAULT_PROBE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return None;
            }
            let advice = if huge_pages {
                libc::MADV_HUGEPAGE
            } else {
                libc::MADV_NOHUGEPAGE
            };
            libc::madvise(base, FAULT_PROBE_BYTES, advice);
            let start = Instant::now();
            let ok = libc::madvise(base, FAULT_PROBE_BYTES, libc::MADV_POPULATE_WRITE) == 0;
            let elapsed = start.elapsed();
            libc::munmap(base, FAULT_PROBE_BYTES);
            ok.then(|| FAULT_PROBE_BYTES as f64 / elapsed.as_secs_f64() / 1e9)
        }
    };
    let fresh = once();
    (fresh, once())
}

/// floe's table at the moment a growing map would grow (its first insert that finds no room).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    pub bins: usize,
    pub keys: usize,
    pub table_bytes: usize,
    /// Key and value bytes over table bytes (bins and link pool).
    pub space_efficiency: f64,
    /// Keys over slots (three a bin, four a link bucket).
    pub slot_load: f64,
    /// Distinct lines a get of a present key reads (`--features line-stats`; absent otherwise).
    pub lines_per_get: Option<f64>,
}

/// One run's report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    #[serde(flatten)]
    pub envelope: crate::report::Envelope,
    pub rows: Vec<Row>,
    /// floe at its growth trigger, for a few table sizes.
    pub triggers: Vec<Trigger>,
    /// The machine's own gaps, per thread count (with latency on). (Not `machine`: the
    /// envelope's description of the machine has that name.)
    #[serde(default)]
    pub machine_gaps: Vec<MachineGaps>,
}

/// Fill a fixed floe table of `bins` bins (default link pool) with fresh keys until the first
/// insert finds no room: the state in which a growing map grows.
pub fn trigger(recipe: &Recipe, bins: usize) -> Result<Trigger, String> {
    let map = floe::FlatMap::<u64, u64>::builder()
        .bins(bins)
        .max_bins(bins)
        .hasher(recipe.hasher)
        .huge_pages(recipe.huge_pages)
        .build()
        .map_err(|e| e.to_string())?;
    let mut n = 0u64;
    while map.try_insert_new(key(n), value_of(key(n))).is_ok() {
        n += 1;
    }
    let before = floe::lines_read();
    for j in 0..n {
        if map.get(&key(j)) != Some(value_of(key(j))) {
            return Err(format!("trigger: key number {j} lost"));
        }
    }
    let lines = floe::lines_read() - before;
    let stats = map.stats();
    Ok(Trigger {
        bins,
        keys: n as usize,
        table_bytes: stats.allocated_bytes,
        space_efficiency: n as f64 * 16.0 / stats.allocated_bytes as f64,
        slot_load: n as f64 / stats.slots as f64,
        lines_per_get: (lines > 0).then(|| lines as f64 / n as f64),
    })
}

pub const SCHEMA: &str = "floe-bench-growth/1";

/// Key number `i` (distinct for distinct `i`).
#[inline(always)]
fn key(i: u64) -> u64 {
    mix(i ^ 0x6a09_e667_f3bc_c908)
}

/// What one thread did.
struct Lane {
    ops: u64,
    wrong: u64,
    timeline: Vec<u64>,
    latency: Option<Histogram<u64>>,
    /// Latency per timeline interval (with latency on), made when an interval is first used.
    interval_latency: Vec<Histogram<u32>>,
    /// grow-read readers: gets while writers ran, and the time they took.
    during: (u64, Duration),
    /// grow-read readers: the time after the writers finished.
    tail: Duration,
}

impl Lane {
    /// Time one operation: the gap from `last` to now, into the run's histogram and its
    /// interval's. A no-op with latency off.
    #[inline(always)]
    fn time(&mut self, last: &mut Instant, epoch: Instant, interval: Duration) {
        let Some(h) = self.latency.as_mut() else {
            return;
        };
        let now = Instant::now();
        let gap = (now - *last).as_nanos() as u64;
        *last = now;
        h.saturating_record(gap);
        let idx = ((now - epoch).as_nanos() / interval.as_nanos().max(1)) as usize;
        if self.interval_latency.len() <= idx {
            self.interval_latency
                .resize_with(idx + 1, interval_histogram);
        }
        self.interval_latency[idx].saturating_record(gap);
    }

    fn new(latency: bool) -> Lane {
        Lane {
            ops: 0,
            wrong: 0,
            timeline: Vec::new(),
            latency: latency.then(histogram),
            interval_latency: Vec::new(),
            during: (0, Duration::ZERO),
            tail: Duration::ZERO,
        }
    }
}

/// One repeat's totals.
struct Sample {
    insert_mops: f64,
    get_during: Option<f64>,
    get_steady: Option<f64>,
    inserts: Vec<u64>,
    gets: Vec<u64>,
    insert_latency: Option<Histogram<u64>>,
    get_latency: Option<Histogram<u64>>,
    insert_p999_us: Vec<f64>,
    get_p999_us: Vec<f64>,
    table_bytes: Option<usize>,
    elapsed: Duration,
}

/// A small histogram for one timeline interval: 2 significant digits, 32-bit counts (an
/// interval holds at most a few million operations), 1 ns to 100 s.
fn interval_histogram() -> Histogram<u32> {
    Histogram::new_with_bounds(1, 100_000_000_000, 2).expect("valid bounds")
}

fn add_interval(timeline: &mut Vec<u64>, epoch: Instant, interval: Duration, ops: u64) {
    let idx = (epoch.elapsed().as_nanos() / interval.as_nanos().max(1)) as usize;
    if timeline.len() <= idx {
        timeline.resize(idx + 1, 0);
    }
    timeline[idx] += ops;
}

/// Insert keys `lo..hi`, 64 at a time between clock reads (or every one timed); floe through
/// its batches when `batch` > 1 (no per-insert latency then: an insert's latency is not
/// separable from its batch's).
fn insert_range<M: BenchMap>(
    map: &M,
    lo: u64,
    hi: u64,
    epoch: Instant,
    interval: Duration,
    latency: bool,
    batch: usize,
) -> Lane {
    if let (Some(floe), true) = (map.as_floe(), batch > 1) {
        return insert_batched(floe, lo, hi, epoch, interval, batch);
    }
    let mut lane = Lane::new(latency);
    let mut i = lo;
    let mut last = Instant::now();
    while i < hi {
        let end = (i + 64).min(hi);
        for j in i..end {
            let k = key(j);
            lane.wrong += u64::from(!map.insert(k, value_of(k)));
            lane.time(&mut last, epoch, interval);
        }
        add_interval(&mut lane.timeline, epoch, interval, end - i);
        lane.ops += end - i;
        i = end;
    }
    lane
}

fn insert_batched(
    map: &crate::maps::Map,
    lo: u64,
    hi: u64,
    epoch: Instant,
    interval: Duration,
    depth: usize,
) -> Lane {
    let mut lane = Lane::new(false);
    let batch = map.batch().depth(depth);
    let mut requests = Vec::with_capacity(256);
    let mut i = lo;
    while i < hi {
        let end = (i + 256).min(hi);
        requests.clear();
        requests.extend((i..end).map(|j| {
            let k = key(j);
            floe::Request::InsertNew(k, value_of(k))
        }));
        batch.run_each(&requests, |_, response| {
            lane.wrong +=
                u64::from(response != floe::Response::InsertNew(Ok(floe::Insert::Inserted)));
        });
        add_interval(&mut lane.timeline, epoch, interval, end - i);
        lane.ops += end - i;
        i = end;
    }
    lane
}

/// Get random keys among `0..present` until `writers_done` reaches `writers` and then `tail`
/// more; the gets before the writers finished are counted apart.
#[allow(clippy::too_many_arguments)]
fn read_until<M: BenchMap>(
    map: &M,
    present: u64,
    seed: u64,
    writers_done: &AtomicUsize,
    writers: usize,
    tail: Duration,
    epoch: Instant,
    interval: Duration,
    latency: bool,
) -> Lane {
    let mut lane = Lane::new(latency);
    let mut rng = Rng(seed);
    let start = Instant::now();
    let mut finished_at: Option<Instant> = None;
    let mut last = Instant::now();
    loop {
        for _ in 0..64 {
            let k = key(rng.below(present));
            lane.wrong += u64::from(map.get(k) != Some(value_of(k)));
            lane.time(&mut last, epoch, interval);
        }
        lane.ops += 64;
        add_interval(&mut lane.timeline, epoch, interval, 64);
        match finished_at {
            None if writers_done.load(Ordering::Acquire) >= writers => {
                finished_at = Some(Instant::now());
                lane.during = (lane.ops, start.elapsed());
            }
            Some(at) if at.elapsed() >= tail => {
                lane.tail = at.elapsed();
                return lane;
            }
            _ => {}
        }
    }
}

struct Measure<'a> {
    plan: &'a Plan,
    threads: usize,
    workers: &'a Workers,
}

impl Visit for Measure<'_> {
    type Output = Sample;

    fn visit<M: BenchMap>(self, build: &dyn Fn() -> Result<M, String>) -> Result<Sample, String> {
        let plan = self.plan;
        let map = build()?;
        let interval = plan.interval;
        match plan.kind {
            Kind::Population => {
                let threads = self.threads as u64;
                let epoch = Instant::now();
                let (elapsed, lanes) = self.workers.run(self.threads, |t| {
                    let t = t as u64;
                    let (lo, hi) = (plan.keys * t / threads, plan.keys * (t + 1) / threads);
                    insert_range(&map, lo, hi, epoch, interval, plan.latency, plan.batch)
                });
                check(&map, &lanes, 0, plan.keys)?;
                Ok(Sample {
                    insert_mops: plan.keys as f64 / elapsed.as_secs_f64() / 1e6,
                    get_during: None,
                    get_steady: None,
                    inserts: merge(lanes.iter().map(|l| &l.timeline)),
                    gets: Vec::new(),
                    insert_latency: merge_latency(lanes.iter()),
                    get_latency: None,
                    insert_p999_us: interval_p999(lanes.iter()),
                    get_p999_us: Vec::new(),
                    table_bytes: map.table_bytes(),
                    elapsed,
                })
            }
            Kind::GrowRead => {
                let readers = plan
                    .readers
                    .unwrap_or(self.threads / 2)
                    .min(self.threads - 1);
                let writers = self.threads - readers;
                let present = (plan.initial_slots as u64 / 2).min(plan.keys / 2).max(1);
                for j in 0..present {
                    let k = key(j);
                    if !map.insert(k, value_of(k)) {
                        return Err(format!("prefill: key {k:#x} was not inserted"));
                    }
                }
                let fresh = plan.keys - present;
                let done = AtomicUsize::new(0);
                let epoch = Instant::now();
                let writer_time = AtomicUsize::new(0);
                let (elapsed, lanes) = self.workers.run(self.threads, |t| {
                    if t < writers {
                        let w = t as u64;
                        let (lo, hi) = (
                            present + fresh * w / writers as u64,
                            present + fresh * (w + 1) / writers as u64,
                        );
                        let start = Instant::now();
                        let lane =
                            insert_range(&map, lo, hi, epoch, interval, plan.latency, plan.batch);
                        writer_time
                            .fetch_max(start.elapsed().as_nanos() as usize, Ordering::Relaxed);
                        done.fetch_add(1, Ordering::Release);
                        (true, lane)
                    } else {
                        let tail = Duration::from_millis(300);
                        let lane = read_until(
                            &map,
                            present,
                            t as u64 + 1,
                            &done,
                            writers,
                            tail,
                            epoch,
                            interval,
                            plan.latency,
                        );
                        (false, lane)
                    }
                });
                let (inserters, getters): (Vec<_>, Vec<_>) =
                    lanes.into_iter().partition(|(w, _)| *w);
                let inserters: Vec<Lane> = inserters.into_iter().map(|(_, l)| l).collect();
                let getters: Vec<Lane> = getters.into_iter().map(|(_, l)| l).collect();
                check(&map, &inserters, 0, plan.keys)?;
                if let Some(bad) = getters.iter().find(|l| l.wrong > 0) {
                    return Err(format!("{} gets returned a wrong answer", bad.wrong));
                }
                let writer_secs = writer_time.load(Ordering::Relaxed) as f64 / 1e9;
                let during_ops: u64 = getters.iter().map(|l| l.during.0).sum();
                let during_secs = getters
                    .iter()
                    .map(|l| l.during.1.as_secs_f64())
                    .fold(0.0, f64::max);
                let total: u64 = getters.iter().map(|l| l.ops).sum();
                let tail_secs = getters
                    .iter()
                    .map(|l| l.tail.as_secs_f64())
                    .fold(0.0, f64::max);
                Ok(Sample {
                    insert_mops: fresh as f64 / writer_secs / 1e6,
                    get_during: Some(during_ops as f64 / during_secs.max(1e-9) / 1e6),
                    get_steady: Some((total - during_ops) as f64 / tail_secs.max(1e-9) / 1e6),
                    inserts: merge(inserters.iter().map(|l| &l.timeline)),
                    gets: merge(getters.iter().map(|l| &l.timeline)),
                    insert_latency: merge_latency(inserters.iter()),
                    get_latency: merge_latency(getters.iter()),
                    insert_p999_us: interval_p999(inserters.iter()),
                    get_p999_us: interval_p999(getters.iter()),
                    table_bytes: map.table_bytes(),
                    elapsed,
                })
            }
        }
    }
}

/// Every insert said "inserted", and a sample of keys `lo..hi` reads back.
fn check<M: BenchMap>(map: &M, lanes: &[Lane], lo: u64, hi: u64) -> Result<(), String> {
    let wrong: u64 = lanes.iter().map(|l| l.wrong).sum();
    if wrong > 0 {
        return Err(format!("{wrong} inserts of fresh keys did not insert"));
    }
    for j in (lo..hi).step_by(61) {
        let k = key(j);
        if map.get(k) != Some(value_of(k)) {
            return Err(format!("key {k:#x} (number {j}) lost after the growth"));
        }
    }
    Ok(())
}

fn merge<'a>(timelines: impl Iterator<Item = &'a Vec<u64>>) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for t in timelines {
        if out.len() < t.len() {
            out.resize(t.len(), 0);
        }
        for (o, v) in out.iter_mut().zip(t) {
            *o += v;
        }
    }
    out
}

fn merge_latency<'a>(lanes: impl Iterator<Item = &'a Lane>) -> Option<Histogram<u64>> {
    let mut out: Option<Histogram<u64>> = None;
    for h in lanes.filter_map(|l| l.latency.as_ref()) {
        match out.as_mut() {
            Some(o) => o.add(h).expect("same bounds"),
            None => out = Some(h.clone()),
        }
    }
    out
}

/// Each interval's p99.9 over the lanes, in microseconds (0 where no operation completed).
fn interval_p999<'a>(lanes: impl Iterator<Item = &'a Lane>) -> Vec<f64> {
    let mut merged: Vec<Histogram<u32>> = Vec::new();
    for lane in lanes {
        if merged.len() < lane.interval_latency.len() {
            merged.resize_with(lane.interval_latency.len(), interval_histogram);
        }
        for (m, h) in merged.iter_mut().zip(&lane.interval_latency) {
            m.add(h).expect("same bounds");
        }
    }
    merged
        .iter()
        .map(|h| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(0.999) as f64 / 1e3
            }
        })
        .collect()
}

/// Time the machine itself (module docs): `threads` threads read the clock back to back for
/// `length`, recording every gap.
/// Then measure its fault rates (`fault_rates`).
pub fn machine_gaps(
    workers: &Workers,
    threads: usize,
    length: Duration,
    huge_pages: bool,
) -> MachineGaps {
    let (elapsed, lanes) = workers.run(threads, |_| {
        let mut h = histogram();
        let start = Instant::now();
        let mut last = start;
        loop {
            // A batch of reads between checks of the end, as the maps' loops do per 64 ops.
            for _ in 0..64 {
                let now = Instant::now();
                h.saturating_record((now - last).as_nanos() as u64);
                last = now;
            }
            if last - start >= length {
                return h;
            }
        }
    });
    let mut all = histogram();
    for h in &lanes {
        all.add(h).expect("same bounds");
    }
    let over = |ns: u64| all.count_between(ns + 1, all.max().max(ns + 1));
    let (fresh_fault_gbps, reused_fault_gbps) = fault_rates(huge_pages);
    MachineGaps {
        threads,
        seconds: elapsed.as_secs_f64(),
        gap_ns: Latency::of(&all).expect("the loop records at least 64 gaps"),
        gaps_over_1ms: over(1_000_000),
        gaps_over_5ms: over(5_000_000),
        fresh_fault_gbps,
        reused_fault_gbps,
    }
}

fn per_interval(ops: &[u64], interval: Duration) -> Vec<f64> {
    ops.iter()
        .map(|&n| n as f64 / interval.as_secs_f64() / 1e6)
        .collect()
}

/// Run the plan; `progress(message)` is told what runs.
pub fn run(
    plan: &Plan,
    mut progress: impl FnMut(&str),
) -> Result<(Vec<Row>, Vec<MachineGaps>), String> {
    let workers = Workers::new();
    let mut rows = Vec::new();
    let mut machine = Vec::new();
    for &threads in &plan.threads {
        // Timed once per thread count, after the first map (as long as its median run).
        let mut machine_timed = false;
        if plan.kind == Kind::GrowRead && threads < 2 {
            return Err("grow-read needs at least 2 threads (writers and readers)".into());
        }
        for (kind, label) in &plan.maps {
            let mut samples = Vec::new();
            for r in 0..plan.repeat {
                progress(&format!(
                    "{} {label} {threads} threads, repeat {}/{}",
                    plan.kind.name(),
                    r + 1,
                    plan.repeat
                ));
                let recipe = Recipe {
                    capacity: plan.initial_slots / 2,
                    ..plan.recipe
                };
                let sample = recipe
                    .visit(
                        *kind,
                        Measure {
                            plan,
                            threads,
                            workers: &workers,
                        },
                    )
                    .map_err(|e| format!("{label}: {e}"))?;
                samples.push(sample);
            }
            samples.sort_by(|a, b| a.insert_mops.total_cmp(&b.insert_mops));
            let (min, max) = (
                samples[0].insert_mops,
                samples[samples.len() - 1].insert_mops,
            );
            let mid = samples.swap_remove(samples.len() / 2);
            let readers = match plan.kind {
                Kind::Population => 0,
                Kind::GrowRead => plan.readers.unwrap_or(threads / 2).min(threads - 1),
            };
            let writers_intervals = mid.inserts.len();
            let insert_timeline = per_interval(&mid.inserts, plan.interval);
            let get_timeline = per_interval(&mid.gets, plan.interval);
            let zero_insert_intervals = mid.inserts[..writers_intervals.saturating_sub(1)]
                .iter()
                .filter(|&&n| n == 0)
                .count();
            let get_min_interval_fraction = mid.get_steady.map(|steady| {
                // Whole intervals while the writers ran (not the last, partial one).
                let during =
                    &get_timeline[..writers_intervals.saturating_sub(1).min(get_timeline.len())];
                during.iter().cloned().fold(f64::INFINITY, f64::min) / steady
            });
            rows.push(Row {
                map: label.clone(),
                workload: plan.kind,
                threads,
                writers: threads - readers,
                readers,
                keys: plan.keys,
                initial_slots: plan.initial_slots,
                insert_mops: mid.insert_mops,
                insert_mops_min: min,
                insert_mops_max: max,
                get_mops_during: mid.get_during,
                get_mops_steady: mid.get_steady,
                get_min_interval_fraction: get_min_interval_fraction.filter(|f| f.is_finite()),
                insert_latency_ns: mid.insert_latency.as_ref().and_then(Latency::of),
                get_latency_ns: mid.get_latency.as_ref().and_then(Latency::of),
                zero_insert_intervals,
                interval_ms: plan.interval.as_secs_f64() * 1e3,
                insert_timeline,
                get_timeline,
                table_bytes: mid.table_bytes,
                insert_p999_timeline_us: mid.insert_p999_us,
                get_p999_timeline_us: mid.get_p999_us,
            });
            if plan.latency && !machine_timed {
                machine_timed = true;
                let length = mid
                    .elapsed
                    .clamp(Duration::from_secs(1), Duration::from_secs(30));
                progress(&format!(
                    "the machine itself, {threads} threads, {length:.1?}"
                ));
                machine.push(machine_gaps(
                    &workers,
                    threads,
                    length,
                    plan.recipe.huge_pages,
                ));
            }
        }
    }
    Ok((rows, machine))
}

/// The results as a text table, with each row's ratio to the best other map.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>3} {:>10} {:>22}  {:>9} {:>9} {:>6}  {:>28}  {:>5}  {:>22}",
        "map",
        "thr",
        "inserts",
        "Mops/s (min-max)",
        "gets dur",
        "steady",
        "min/st",
        "insert p50/p99.99/max (us)",
        "zero",
        "worst p99.9 ins/get us"
    );
    for r in rows {
        let lat = |l: &Option<Latency>| {
            l.map_or("-".to_string(), |l| {
                format!(
                    "{:.2}/{:.1}/{:.0}",
                    l.p50 as f64 / 1e3,
                    l.p9999 as f64 / 1e3,
                    l.max as f64 / 1e3
                )
            })
        };
        let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        let worst = |t: &[f64]| (!t.is_empty()).then(|| t.iter().cloned().fold(0.0, f64::max));
        let worst = format!(
            "{}/{}",
            opt(worst(&r.insert_p999_timeline_us), 0),
            opt(worst(&r.get_p999_timeline_us), 0)
        );
        let _ = writeln!(
            out,
            "{:<20} {:>3} {:>10} {:>7.2} ({:>6.2}-{:>6.2})  {:>9} {:>9} {:>6}  {:>28}  {:>5}  {:>22}",
            r.map,
            r.threads,
            r.workload.name(),
            r.insert_mops,
            r.insert_mops_min,
            r.insert_mops_max,
            opt(r.get_mops_during, 2),
            opt(r.get_mops_steady, 2),
            opt(r.get_min_interval_fraction, 2),
            lat(&r.insert_latency_ns),
            r.zero_insert_intervals,
            worst
        );
    }
    out
}

/// A latency axis label from microseconds: "0.1 us", "25 us", "3.2 ms", "1.5 s" (short
/// enough for the chart's margin).
fn latency_label(us: f64) -> String {
    if us < 1.0 {
        format!("{us:.1} us")
    } else if us < 1e3 {
        format!("{us:.0} us")
    } else if us < 1e6 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.1} s", us / 1e6)
    }
}

/// The machine's own gaps as text (module docs).
pub fn machine_table(machine: &[MachineGaps]) -> String {
    let rate = |gbps: Option<f64>| gbps.map_or("-".to_string(), |r| format!("{r:.2}"));
    let mut out = String::new();
    for m in machine {
        let _ = writeln!(
            out,
            "the machine itself ({} threads reading the clock, {:.1} s): gap p50 {:.2} us, \
             p99.99 {:.1} us, max {:.0} us; {} gaps over 1 ms, {} over 5 ms; memory faulted in at \
             {} GB/s fresh, {} GB/s just freed",
            m.threads,
            m.seconds,
            m.gap_ns.p50 as f64 / 1e3,
            m.gap_ns.p9999 as f64 / 1e3,
            m.gap_ns.max as f64 / 1e3,
            m.gaps_over_1ms,
            m.gaps_over_5ms,
            rate(m.fresh_fault_gbps),
            rate(m.reused_fault_gbps)
        );
    }
    out
}

/// The timeline chart (SEPH Fig. 7): Mops/s per interval against time, one line per map; a
/// second panel for the gets of grow-read.
pub fn svg(report: &Report, title: &str) -> String {
    const W: f64 = 640.0;
    const H: f64 = 260.0;
    const L: f64 = 60.0;
    const B: f64 = 36.0;
    const T: f64 = 30.0;
    let has_gets = report.rows.iter().any(|r| !r.get_timeline.is_empty());
    let has_latency = report
        .rows
        .iter()
        .any(|r| !r.insert_p999_timeline_us.is_empty());
    fn inserts(r: &Row) -> &Vec<f64> {
        &r.insert_timeline
    }
    fn gets(r: &Row) -> &Vec<f64> {
        &r.get_timeline
    }
    fn insert_tails(r: &Row) -> &Vec<f64> {
        &r.insert_p999_timeline_us
    }
    fn get_tails(r: &Row) -> &Vec<f64> {
        &r.get_p999_timeline_us
    }
    type Series = fn(&Row) -> &Vec<f64>;
    // (title, series, log scale): throughput panels, then p99.9 panels on a log scale.
    let mut panels: Vec<(&str, Series, bool)> = vec![("inserts", inserts, false)];
    if has_gets {
        panels.push(("gets", gets, false));
    }
    if has_latency {
        panels.push(("inserts", insert_tails, true));
        if has_gets {
            panels.push(("gets", get_tails, true));
        }
    }
    let height = 40.0 + panels.len() as f64 * (H + 10.0) + 20.0 * report.rows.len() as f64;
    let mut svg = Svg::new(W, height, 11, title);
    let interval = report.rows.first().map_or(0.0, |r| r.interval_ms);
    for (p, &(name, series, log)) in panels.iter().enumerate() {
        let y0 = 30.0 + p as f64 * (H + 10.0);
        let top = report
            .rows
            .iter()
            .flat_map(|r| series(r).iter().cloned())
            .fold(0.0, f64::max)
            .max(1e-9);
        // Linear panels from 0 to 1.1x the top; log panels (microseconds) from 0.1 us to the
        // next power of ten above the top.
        let (max_y, floor) = if log {
            (top.log10().ceil().max(0.0), -1.0)
        } else {
            (top * 1.1, 0.0)
        };
        let scale = |v: f64| {
            if log {
                (v.max(0.1).log10() - floor) / (max_y - floor)
            } else {
                v / max_y
            }
        };
        let max_t = report
            .rows
            .iter()
            .map(|r| series(r).len() as f64 * r.interval_ms)
            .fold(0.0, f64::max)
            .max(1.0);
        let (pw, ph) = (W - L - 20.0, H - T - B);
        svg.rect(L, y0 + T, pw, ph, r##"fill="none" stroke="#999""##);
        let what = if log {
            "p99.9 latency (us, log scale)"
        } else {
            "Mops/s"
        };
        svg.text(
            L,
            y0 + T - 8.0,
            r#"font-weight="bold""#,
            &format!("{name}: {what} per {interval} ms interval"),
        );
        for i in 0..=4 {
            let f = f64::from(i) / 4.0;
            let v = if log {
                10f64.powf(floor + (max_y - floor) * f)
            } else {
                max_y * f
            };
            let y = y0 + T + ph - ph * f;
            svg.text(
                L - 4.0,
                y + 4.0,
                r##"text-anchor="end" fill="#555""##,
                &if log {
                    latency_label(v)
                } else {
                    format!("{v:.1}")
                },
            );
            let t = max_t * f64::from(i) / 4.0;
            let x = L + pw * f64::from(i) / 4.0;
            svg.text(
                x,
                y0 + T + ph + 14.0,
                r##"text-anchor="middle" fill="#555""##,
                &format!("{t:.0} ms"),
            );
        }
        for (i, r) in report.rows.iter().enumerate() {
            let points: Vec<_> = series(r)
                .iter()
                .enumerate()
                .map(|(j, &v)| {
                    let x = L + pw * ((j as f64 + 0.5) * r.interval_ms) / max_t;
                    (x, y0 + T + ph - ph * scale(v))
                })
                .collect();
            let colour = PALETTE[i % PALETTE.len()];
            svg.polyline(&points, &format!(r#"stroke="{colour}" stroke-width="1.5""#));
        }
    }
    let y = 30.0 + panels.len() as f64 * (H + 10.0);
    for (i, r) in report.rows.iter().enumerate() {
        let row_y = y + 20.0 * i as f64;
        let colour = PALETTE[i % PALETTE.len()];
        svg.rect(10.0, row_y, 14.0, 4.0, &format!(r#"fill="{colour}""#));
        svg.text(
            30.0,
            row_y + 5.0,
            "",
            &format!(
                "{} ({} threads): {:.2} M inserts/s",
                r.map, r.threads, r.insert_mops
            ),
        );
    }
    svg.finish()
}

/// A growth chart's title: the workload, its keys and the slots it started from.
pub fn title(report: &Report) -> String {
    report.rows.first().map_or_else(String::new, |row| {
        format!(
            "{}: {} keys from {} slots",
            row.workload.name(),
            crate::keys::pretty_count(row.keys),
            crate::keys::pretty_count(row.initial_slots as u64)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::AnyHash;

    fn plan(kind: Kind, maps: &[MapKind]) -> Plan {
        Plan {
            kind,
            maps: maps.iter().map(|&k| (k, k.name().to_string())).collect(),
            keys: 40_000,
            initial_slots: 1024,
            threads: vec![2],
            readers: None,
            repeat: 1,
            interval: Duration::from_millis(1),
            latency: true,
            batch: 1,
            recipe: Recipe {
                capacity: 0,
                hasher: AnyHash::default(),
                backend: floe::Backend::Auto,
                huge_pages: false,
                populate: false,
                churn: false,
                resize: floe::ResizeMode::Incremental,
            },
        }
    }

    #[test]
    fn latency_labels_fit_the_margin() {
        assert_eq!(latency_label(0.1), "0.1 us");
        assert_eq!(latency_label(31.6), "32 us");
        assert_eq!(latency_label(3162.0), "3.2 ms");
        assert_eq!(latency_label(1e7), "10.0 s");
    }

    #[test]
    fn population_grows_every_map_and_checks_it() {
        let (rows, machine) = run(
            &plan(
                Kind::Population,
                &[
                    MapKind::Floe,
                    MapKind::FloeBlocking,
                    MapKind::Papaya,
                    MapKind::Dashmap,
                ],
            ),
            |_| {},
        )
        .unwrap();
        assert_eq!(rows.len(), 4);
        for r in &rows {
            assert!(r.insert_mops > 0.0, "{r:?}");
            let timeline_ops: f64 = r.insert_timeline.iter().sum::<f64>() * r.interval_ms * 1e3;
            assert!((timeline_ops - 40_000.0).abs() < 1.0, "{timeline_ops}");
            let l = r.insert_latency_ns.unwrap();
            assert!(l.p50 <= l.p9999 && l.p9999 <= l.max);
            // A p99.9 per interval (an operation's time and its batch of 64's count may fall
            // in neighbouring intervals), none above the run's maximum.
            let tails = &r.insert_p999_timeline_us;
            assert!(tails.len().abs_diff(r.insert_timeline.len()) <= 1, "{r:?}");
            assert!(tails.iter().any(|&t| t > 0.0));
            for &tail in tails {
                assert!(
                    tail * 1e3 <= l.max as f64 * 1.01,
                    "{tail} us above max {}",
                    l.max
                );
            }
        }
        assert_eq!(machine.len(), 1);
        let m = &machine[0];
        assert_eq!(m.threads, 2);
        assert!(m.seconds >= 1.0 && m.gap_ns.p50 <= m.gap_ns.max, "{m:?}");
        assert!(machine_table(&machine).contains("the machine itself (2 threads"));
        let floe = &rows[0];
        assert!(floe.table_bytes.unwrap() > 40_000 * 16, "the map grew");
        let text = table(&rows);
        assert!(text.contains("floe-blocking") && text.contains("population"));
        let report = Report {
            envelope: crate::report::Envelope::now(SCHEMA),
            rows,
            triggers: vec![trigger(&plan(Kind::Population, &[]).recipe, 1 << 12).unwrap()],
            machine_gaps: machine,
        };
        let t = &report.triggers[0];
        assert!(t.keys > 1 << 12 && t.space_efficiency > 0.2 && t.space_efficiency < 1.0);
        let chart = svg(&report, "population");
        // Throughput and p99.9 panels, a line per map in each.
        assert_eq!(chart.matches("<polyline").count(), 8);
        assert!(chart.contains("p99.9 latency"));
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
    }

    #[test]
    fn grow_read_reports_gets_during_and_after() {
        let (rows, _) = run(
            &plan(Kind::GrowRead, &[MapKind::Floe, MapKind::Scc]),
            |_| {},
        )
        .unwrap();
        for r in &rows {
            assert!(r.get_p999_timeline_us.iter().any(|&t| t > 0.0));
            assert_eq!((r.writers, r.readers), (1, 1));
            assert!(r.get_mops_during.unwrap() > 0.0 && r.get_mops_steady.unwrap() > 0.0);
            assert!(!r.get_timeline.is_empty());
            assert!(r.get_latency_ns.is_some());
        }
        assert!(run(
            &Plan {
                threads: vec![1],
                ..plan(Kind::GrowRead, &[MapKind::Floe])
            },
            |_| {}
        )
        .unwrap_err()
        .contains("at least 2 threads"));
    }
}
