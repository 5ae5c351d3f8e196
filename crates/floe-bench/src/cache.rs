//! `floe-bench cache`: `floe::Cache` and `floe::FlatCache` against moka (W-TinyLFU and its LRU
//! policy), quick_cache and scc's `HashCache`, in one run: hit ratio on four request streams
//! at two cache sizes, throughput on two threads, and memory per entry (issue 43's targets).
//!
//! Every cache is built for `capacity` entries (each weighs 1) and hashes with ahash, so only
//! the caches differ. Keys and values are `u64` in the hit-ratio and throughput runs (for
//! every cache, so that `FlatCache`, which holds words, runs them too), and the memory probe's
//! keys are 16 bytes (`u128`, issue 43's shape; `FlatCache` sits it out). Capacities are powers of two, and the key
//! space is sized from them (`sizes`): scc's `HashCache` rounds its maximum capacity up to a
//! power of two, so a cache of 10,000 entries held 16,384, 1.64 times the others' entries,
//! which made its hit ratios those of a larger cache. After each trace and each throughput run
//! every cache is asked how many entries it holds, and a run in which one holds more than its
//! capacity stops with an error rather than print figures of caches of different sizes.
//!
//! | trace | stream (key space `K`, cache `C` = 10% or 50% of `K`) | ratio of |
//! |---|---|---|
//! | `zipf` | cache-aside (get; insert on a miss), zipf 0.99 over `K` keys, `4K` requests | gets of the second half |
//! | `session` | `K` keys written once each; each read once, `d` writes after its own (`d` uniform in `[0, K/4)`): a session store | reads after the first `C` writes |
//! | `scan` | the `zipf` stream with a scan of `C` keys never seen again after every `K/2` requests | zipf gets of the second half |
//! | `one-hit` | cache-aside: 50% zipf 0.99 over `K` keys, 50% keys used once | zipf gets of the second half |
//!
//! Hit ratios are single-threaded (the same stream in the same order for every cache), median
//! of `--rounds` seeds. Throughput: `--threads` threads each run their own `zipf` stream
//! (cache-aside, 10% cache) against one shared cache: a warming half untimed, then the timed
//! half; median of `--rounds`. Memory: a child process per cache fills a cache of
//! `--memory-entries` with 16-byte keys and 100-byte values (`Box<[u8]>`) and reports its RSS
//! growth per entry, then inserts as many new keys again (each evicting one) and reports it
//! once more: a full cache's steady state, with what eviction keeps (ghosts, sketches).

use std::{
    sync::Barrier,
    time::{Duration, Instant},
};

use clap::{Args, ValueEnum};

use crate::{dist::Dist, measure::median};

/// The caches compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CacheKind {
    /// `floe::Cache` (S3-FIFO with an adaptive split).
    Floe,
    /// `floe::FlatCache` (the same policy on a `FlatMap`: keys and values of a word; absent
    /// from the memory probe, whose keys are 16 bytes).
    FloeFlat,
    /// moka's `sync::Cache`, its default W-TinyLFU policy.
    Moka,
    /// moka's `sync::Cache` with `EvictionPolicy::lru()`.
    MokaLru,
    /// quick_cache's `sync::Cache` (CLOCK-Pro-like S3-FIFO).
    QuickCache,
    /// scc's `HashCache` (per-bucket LRU).
    Scc,
}

const ALL: [CacheKind; 6] = [
    CacheKind::Floe,
    CacheKind::FloeFlat,
    CacheKind::Moka,
    CacheKind::MokaLru,
    CacheKind::QuickCache,
    CacheKind::Scc,
];

const TRACES: [&str; 4] = ["zipf", "session", "scan", "one-hit"];

#[derive(Args, Debug)]
pub struct CacheArgs {
    /// Key space of the hit-ratio traces, roughly: the caches hold the powers of two at or
    /// below 10% and 50% of it, and each trace's key space is 10 or 2 times its cache.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Traces to run (zipf, session, scan, one-hit).
    #[arg(long, value_delimiter = ',', default_values_t = TRACES.map(String::from))]
    pub traces: Vec<String>,
    /// Caches to compare.
    #[arg(long, value_delimiter = ',', default_values_t = ALL.to_vec(), value_enum)]
    pub caches: Vec<CacheKind>,
    /// Rounds (seeds for the hit ratios, repeats for throughput); the median is reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Threads of the throughput run.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Key space of the throughput run, roughly: the cache holds the power of two at or below
    /// 10% of it, over a key space 10 times that.
    #[arg(long, default_value_t = 1_000_000)]
    pub throughput_keys: u64,
    /// Timed requests per thread per throughput round.
    #[arg(long, default_value_t = 2_000_000)]
    pub requests: u64,
    /// Entries of the memory probe (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub memory_entries: u64,
}

#[derive(Args, Debug)]
pub struct CacheProbeArgs {
    #[arg(long, value_enum)]
    pub cache: CacheKind,
    #[arg(long)]
    pub entries: u64,
}

type Hasher = ahash::RandomState;

fn hasher() -> Hasher {
    ahash::RandomState::with_seeds(1, 2, 3, 4)
}

/// What the benchmark needs of a cache.
trait Contender<K, V>: Send + Sync {
    fn build(capacity: u64) -> Self;
    fn lookup(&self, key: K) -> Option<V>;
    fn store(&self, key: K, value: V);
    /// Let a cache that defers its bookkeeping finish it (before a memory reading).
    fn settle(&self) {}
    /// The entries it holds (after `settle`).
    fn held(&self) -> u64;
}

/// What every cache asks of a key.
trait Key: core::hash::Hash + Eq + Clone + Send + Sync + 'static {}

impl<K: core::hash::Hash + Eq + Clone + Send + Sync + 'static> Key for K {}

impl<K: Key, V: Clone + Send + Sync + 'static> Contender<K, V> for floe::Cache<K, V, Hasher> {
    fn build(capacity: u64) -> Self {
        floe::Cache::builder()
            .max_capacity(capacity)
            .hasher(hasher())
            .build()
            .expect("the OS refused the cache's index")
    }
    fn lookup(&self, key: K) -> Option<V> {
        floe::Cache::get(self, &key)
    }
    fn store(&self, key: K, value: V) {
        floe::Cache::insert(self, key, value);
    }
    fn held(&self) -> u64 {
        self.len() as u64
    }
}

impl Contender<u64, u64> for floe::FlatCache<u64, u64, Hasher> {
    fn build(capacity: u64) -> Self {
        floe::FlatCache::builder()
            .max_capacity(capacity)
            .hasher(hasher())
            .build()
            .expect("the OS refused the cache's index")
    }
    fn lookup(&self, key: u64) -> Option<u64> {
        floe::FlatCache::get(self, &key)
    }
    fn store(&self, key: u64, value: u64) {
        floe::FlatCache::insert(self, key, value);
    }
    fn held(&self) -> u64 {
        self.len() as u64
    }
}

impl<K: Key, V: Clone + Send + Sync + 'static> Contender<K, V> for moka::sync::Cache<K, V, Hasher> {
    fn build(capacity: u64) -> Self {
        moka::sync::Cache::builder()
            .max_capacity(capacity)
            .build_with_hasher(hasher())
    }
    fn lookup(&self, key: K) -> Option<V> {
        moka::sync::Cache::get(self, &key)
    }
    fn store(&self, key: K, value: V) {
        moka::sync::Cache::insert(self, key, value);
    }
    fn settle(&self) {
        self.run_pending_tasks();
    }
    fn held(&self) -> u64 {
        self.entry_count()
    }
}

/// moka with its LRU policy.
struct MokaLru<K, V>(moka::sync::Cache<K, V, Hasher>);

impl<K: Key, V: Clone + Send + Sync + 'static> Contender<K, V> for MokaLru<K, V> {
    fn build(capacity: u64) -> Self {
        MokaLru(
            moka::sync::Cache::builder()
                .max_capacity(capacity)
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .build_with_hasher(hasher()),
        )
    }
    fn lookup(&self, key: K) -> Option<V> {
        self.0.get(&key)
    }
    fn store(&self, key: K, value: V) {
        self.0.insert(key, value);
    }
    fn settle(&self) {
        self.0.run_pending_tasks();
    }
    fn held(&self) -> u64 {
        self.0.entry_count()
    }
}

impl<K: Key, V: Clone + Send + Sync + 'static> Contender<K, V>
    for quick_cache::sync::Cache<K, V, quick_cache::UnitWeighter, Hasher>
{
    fn build(capacity: u64) -> Self {
        quick_cache::sync::Cache::with(
            capacity as usize,
            capacity,
            quick_cache::UnitWeighter,
            hasher(),
            quick_cache::sync::DefaultLifecycle::default(),
        )
    }
    fn lookup(&self, key: K) -> Option<V> {
        quick_cache::sync::Cache::get(self, &key)
    }
    fn store(&self, key: K, value: V) {
        quick_cache::sync::Cache::insert(self, key, value);
    }
    fn held(&self) -> u64 {
        self.len() as u64
    }
}

impl<K: Key, V: Clone + Send + Sync + 'static> Contender<K, V> for scc::HashCache<K, V, Hasher> {
    fn build(capacity: u64) -> Self {
        scc::HashCache::with_capacity_and_hasher(0, capacity as usize, hasher())
    }
    fn lookup(&self, key: K) -> Option<V> {
        self.get_sync(&key).map(|entry| entry.get().clone())
    }
    fn store(&self, key: K, value: V) {
        let _ = self.put_sync(key, value);
    }
    fn held(&self) -> u64 {
        self.len() as u64
    }
}

/// Run `body` with the cache type of `kind`, for keys `K` and values `V` any cache holds;
/// `$flat` is what to do for `floe::FlatCache`, which holds words only (`with_word_cache`).
macro_rules! with_cache {
    ($kind:expr, $k:ty, $v:ty, |$c:ident| $body:expr, flat => $flat:expr) => {
        match $kind {
            CacheKind::Floe => {
                type $c = floe::Cache<$k, $v, Hasher>;
                $body
            }
            CacheKind::FloeFlat => $flat,
            CacheKind::Moka => {
                type $c = moka::sync::Cache<$k, $v, Hasher>;
                $body
            }
            CacheKind::MokaLru => {
                type $c = MokaLru<$k, $v>;
                $body
            }
            CacheKind::QuickCache => {
                type $c = quick_cache::sync::Cache<$k, $v, quick_cache::UnitWeighter, Hasher>;
                $body
            }
            CacheKind::Scc => {
                type $c = scc::HashCache<$k, $v, Hasher>;
                $body
            }
        }
    };
}

/// Run `body` with the cache type of `kind` for `u64` keys and values (every cache).
macro_rules! with_word_cache {
    ($kind:expr, |$c:ident| $body:expr) => {
        with_cache!($kind, u64, u64, |$c| $body, flat => {
            type $c = floe::FlatCache<u64, u64, Hasher>;
            $body
        })
    };
}

/// One request of a trace.
#[derive(Clone, Copy)]
enum Request {
    /// Get; insert on a miss; `counted` if its answer counts toward the ratio.
    Aside { key: u64, counted: bool },
    /// Insert (a write of the session store).
    Write { key: u64 },
    /// Get only (a read of the session store).
    Read { key: u64, counted: bool },
}

/// The request stream of `trace` over `keys` keys for a cache of `capacity`.
fn stream(trace: &str, keys: u64, capacity: u64, seed: u64) -> Vec<Request> {
    let total = 4 * keys;
    let mut zipf = Dist::Zipf { theta: 0.99 }.sampler(keys, seed);
    let mut coin = Dist::Uniform.sampler(2, seed ^ 0x5eed);
    let mut fresh = keys; // keys past the zipf ones, each used once
    let mut out = Vec::with_capacity(total as usize + 2 * keys as usize);
    match trace {
        "zipf" | "scan" => {
            for i in 0..total {
                let counted = i >= total / 2;
                out.push(Request::Aside {
                    key: zipf.next_index(),
                    counted,
                });
                if trace == "scan" && (i + 1) % (keys / 2).max(1) == 0 {
                    for _ in 0..capacity {
                        out.push(Request::Aside {
                            key: fresh,
                            counted: false,
                        });
                        fresh += 1;
                    }
                }
            }
        }
        "one-hit" => {
            for i in 0..total {
                let counted = i >= total / 2;
                if coin.next_index() == 0 {
                    out.push(Request::Aside {
                        key: zipf.next_index(),
                        counted,
                    });
                } else {
                    out.push(Request::Aside {
                        key: fresh,
                        counted: false,
                    });
                    fresh += 1;
                }
            }
        }
        "session" => {
            // Reads due at each write's step.
            let mut due: Vec<Vec<u64>> = vec![Vec::new(); keys as usize + (keys / 4) as usize + 1];
            let mut distance = Dist::Uniform.sampler((keys / 4).max(1), seed ^ 0xd15);
            for key in 0..keys {
                out.push(Request::Write { key });
                due[(key + distance.next_index()) as usize].push(key);
                for &read in &due[key as usize] {
                    out.push(Request::Read {
                        key: read,
                        counted: key >= capacity,
                    });
                }
            }
            for reads in &due[keys as usize..] {
                for &read in reads {
                    out.push(Request::Read {
                        key: read,
                        counted: true,
                    });
                }
            }
        }
        _ => unreachable!("traces are checked"),
    }
    out
}

fn run_stream<C: Contender<u64, u64>>(cache: &C, stream: &[Request]) -> f64 {
    let (mut reads, mut hits) = (0u64, 0u64);
    for request in stream {
        match *request {
            Request::Aside { key, counted } => {
                let hit = cache.lookup(key).is_some();
                if !hit {
                    cache.store(key, key);
                }
                reads += u64::from(counted);
                hits += u64::from(counted && hit);
            }
            Request::Write { key } => cache.store(key, key),
            Request::Read { key, counted } => {
                let hit = cache.lookup(key).is_some();
                reads += u64::from(counted);
                hits += u64::from(counted && hit);
            }
        }
    }
    hits as f64 / reads.max(1) as f64
}

/// The key space and the capacity for a cache of `percent`% of about `keys` keys: the
/// capacity is the power of two at or below `percent`% of `keys` (every peer then holds
/// exactly what it was built for; see the module docs), the key space `100 / percent` times
/// it.
fn sizes(keys: u64, percent: u64) -> (u64, u64) {
    let wanted = (keys * percent / 100).max(1);
    let capacity = 1 << wanted.ilog2();
    (capacity * 100 / percent, capacity)
}

/// The hit ratio of a cache of `kind` on `trace`; an error if the cache held more entries
/// than `capacity` at its end (its ratio would be a larger cache's).
fn hit_ratio(
    kind: CacheKind,
    trace: &str,
    keys: u64,
    capacity: u64,
    seed: u64,
) -> Result<f64, String> {
    let requests = stream(trace, keys, capacity, seed);
    let (ratio, held) = with_word_cache!(kind, |C| {
        let cache = <C as Contender<u64, u64>>::build(capacity);
        let ratio = run_stream(&cache, &requests);
        cache.settle();
        (ratio, cache.held())
    });
    within_capacity(kind, held, capacity, &format!("the {trace} trace"))?;
    Ok(ratio)
}

/// An error if a cache of `kind` held more than `capacity` entries after `run`: its figures
/// would be a larger cache's, not comparable with the others'.
fn within_capacity(kind: CacheKind, held: u64, capacity: u64, run: &str) -> Result<(), String> {
    if held > capacity {
        return Err(format!(
            "{} held {held} entries at capacity {capacity} after {run}: its figures would not \
             compare with the others'",
            name(kind)
        ));
    }
    Ok(())
}

/// Requests per second of `threads` threads running cache-aside zipf streams on one cache.
/// An error if the cache held more entries than its capacity at the end of the run.
fn throughput(kind: CacheKind, args: &CacheArgs, round: u64) -> Result<f64, String> {
    let (keys, capacity) = sizes(args.throughput_keys, 10);
    let streams: Vec<Vec<u64>> = (0..args.threads as u64)
        .map(|t| {
            let mut zipf = Dist::Zipf { theta: 0.99 }.sampler(keys, 100 * round + t);
            (0..2 * args.requests).map(|_| zipf.next_index()).collect()
        })
        .collect();
    with_word_cache!(kind, |C| {
        let cache = <C as Contender<u64, u64>>::build(capacity);
        let start = Barrier::new(args.threads);
        let elapsed: Vec<Duration> = std::thread::scope(|s| {
            let workers: Vec<_> = streams
                .iter()
                .map(|keys| {
                    let (cache, start) = (&cache, &start);
                    s.spawn(move || {
                        let (warm, timed) = keys.split_at(keys.len() / 2);
                        let aside = |key: u64| {
                            if cache.lookup(key).is_none() {
                                cache.store(key, key);
                            }
                        };
                        warm.iter().for_each(|&k| aside(k));
                        start.wait();
                        let began = Instant::now();
                        timed.iter().for_each(|&k| aside(k));
                        began.elapsed()
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a worker panicked"))
                .collect()
        });
        let slowest = elapsed.iter().max().copied().unwrap_or_default();
        cache.settle();
        within_capacity(kind, cache.held(), capacity, "the throughput run")?;
        Ok((args.requests * args.threads as u64) as f64 / slowest.as_secs_f64())
    })
}

/// The memory probe's `i`th key: 16 bytes, both halves used.
fn probe_key(i: u64) -> u128 {
    u128::from(i) << 64 | u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// RSS growth per entry of filling a cache of `kind`, then per entry held after as many
/// inserts of new keys again (each evicting one: what a full cache holds in its steady state,
/// eviction's own structures included); prints the two (in this process: run it in a fresh
/// one).
pub fn probe(args: &CacheProbeArgs) -> Result<(), String> {
    if !(1..=1 << 32).contains(&args.entries) {
        return Err(format!("--entries {}: from 1 to 2^32", args.entries));
    }
    let value = vec![7u8; 100].into_boxed_slice();
    let rss = || crate::machine::rss_bytes().ok_or("no /proc/self/statm");
    let before = rss()?;
    let (filled, churned) = with_cache!(args.cache, u128, Box<[u8]>, |C| {
        let cache = <C as Contender<u128, Box<[u8]>>>::build(args.entries);
        for key in 0..args.entries {
            cache.store(probe_key(key), value.clone());
        }
        cache.settle();
        let filled = rss()?;
        let held = (0..args.entries.min(1000))
            .filter(|&k| cache.lookup(probe_key(k)).is_some())
            .count();
        if held < args.entries.min(1000) as usize * 9 / 10 {
            return Err(format!(
                "{:?} kept only {held} of the first 1000 entries at capacity {}",
                args.cache, args.entries
            ));
        }
        for key in args.entries..2 * args.entries {
            cache.store(probe_key(key), value.clone());
        }
        cache.settle();
        let churned = rss()?;
        // Per entry held: scc's `HashCache` holds up to the next power of two.
        let held = cache.held();
        if held < args.entries * 9 / 10 {
            return Err(format!(
                "{:?} held {held} entries at capacity {} after the churn",
                args.cache, args.entries
            ));
        }
        (
            filled.saturating_sub(before) as f64 / args.entries as f64,
            churned.saturating_sub(before) as f64 / held as f64,
        )
    }, flat => {
        return Err(
            "floe-flat holds keys and values of a word; the probe's keys are 16 bytes and its \
             values 100"
                .into(),
        )
    });
    println!("{filled:.1} {churned:.1}");
    Ok(())
}

/// The memory probe of `kind` in a child process: bytes an entry when filled, and after the
/// churn.
fn probe_child(kind: CacheKind, entries: u64) -> Result<(f64, f64), String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding floe-bench: {e}"))?;
    let name = kind
        .to_possible_value()
        .map_or_else(|| format!("{kind:?}"), |v| v.get_name().to_string());
    let output = std::process::Command::new(exe)
        .args([
            "cache-probe",
            "--cache",
            &name,
            "--entries",
            &entries.to_string(),
        ])
        .output()
        .map_err(|e| format!("starting the memory probe: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "the memory probe of {name} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let printed = String::from_utf8_lossy(&output.stdout);
    let numbers: Vec<f64> = printed
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the memory probe of {name} printed {printed:?}: {e}"))?;
    match numbers[..] {
        [filled, churned] => Ok((filled, churned)),
        _ => Err(format!(
            "the memory probe of {name} printed {printed:?}, not two numbers"
        )),
    }
}

fn name(kind: CacheKind) -> &'static str {
    match kind {
        CacheKind::Floe => "floe",
        CacheKind::FloeFlat => "floe-flat",
        CacheKind::Moka => "moka",
        CacheKind::MokaLru => "moka-lru",
        CacheKind::QuickCache => "quick_cache",
        CacheKind::Scc => "scc-HashCache",
    }
}

/// Flags out of range (exit code 2).
pub fn check(args: &CacheArgs) -> Result<(), String> {
    for trace in &args.traces {
        if !TRACES.contains(&trace.as_str()) {
            return Err(format!(
                "--traces: unknown trace {trace:?} (known: {})",
                TRACES.join(", ")
            ));
        }
    }
    if args.keys < 1000 || args.throughput_keys < 1000 || args.memory_entries < 1000 {
        return Err("--keys, --throughput-keys and --memory-entries: at least 1000".into());
    }
    if [
        args.keys,
        args.throughput_keys,
        args.requests,
        args.memory_entries,
    ]
    .iter()
    .any(|&n| n > 1 << 32)
    {
        return Err(
            "--keys, --throughput-keys, --requests and --memory-entries: at most 2^32".into(),
        );
    }
    if args.rounds == 0 || args.threads == 0 || args.requests == 0 || args.caches.is_empty() {
        return Err("--rounds, --threads, --requests and --caches: at least one".into());
    }
    Ok(())
}

/// The three measurements, printed as Markdown tables.
pub fn main(args: CacheArgs) -> Result<(), String> {
    let cpu = crate::machine::machine().cpu;
    println!(
        "# floe-bench cache: about {} keys, median of {} rounds, ahash for every cache; CPU: {cpu}",
        args.keys, args.rounds
    );
    println!("\n## Hit ratio (%), single thread, cache-aside where the trace says so\n");
    let mut header = String::from("| trace | cache size |");
    for &kind in &args.caches {
        header += &format!(" {} |", name(kind));
    }
    println!("{header}\n|---|---|{}", "---:|".repeat(args.caches.len()));
    for trace in &args.traces {
        for percent in [10u64, 50] {
            let (keys, capacity) = sizes(args.keys, percent);
            let mut row = format!("| {trace} | {percent}% ({capacity} of {keys}) |");
            for &kind in &args.caches {
                let ratios = (0..args.rounds as u64)
                    .map(|seed| hit_ratio(kind, trace, keys, capacity, seed + 1))
                    .collect::<Result<_, _>>()?;
                row += &format!(" {:.2} |", 100.0 * median(ratios));
            }
            println!("{row}");
        }
    }
    let (throughput_keys, throughput_capacity) = sizes(args.throughput_keys, 10);
    println!(
        "\n## Throughput, {} threads, cache-aside zipf 0.99 over {throughput_keys} keys, cache \
         of {throughput_capacity} (10%), {} timed requests per thread (M requests/s; rounds \
         alternate the caches)\n",
        args.threads, args.requests
    );
    let mut rates = vec![Vec::new(); args.caches.len()];
    for round in 0..args.rounds as u64 {
        for (i, &kind) in args.caches.iter().enumerate() {
            rates[i].push(throughput(kind, &args, round)? / 1e6);
        }
    }
    // Each floe cache present gets a column: its rate over each cache's.
    let ours: Vec<(CacheKind, f64)> = [CacheKind::Floe, CacheKind::FloeFlat]
        .into_iter()
        .filter_map(|floe| {
            let i = args.caches.iter().position(|&k| k == floe)?;
            Some((floe, median(rates[i].clone())))
        })
        .collect();
    let mut header = String::from("| cache | median | rounds |");
    for (floe, _) in &ours {
        header += &format!(" {} ÷ this |", name(*floe));
    }
    println!("{header}\n|---|---:|---|{}", "---:|".repeat(ours.len()));
    for (i, &kind) in args.caches.iter().enumerate() {
        let m = median(rates[i].clone());
        let all: Vec<String> = rates[i].iter().map(|r| format!("{r:.2}")).collect();
        let mut row = format!("| {} | {m:.2} | {} |", name(kind), all.join(" "));
        for (_, rate) in &ours {
            row += &format!(" {:.2}x |", rate / m);
        }
        println!("{row}");
    }
    if args.memory_entries > 0 {
        println!(
            "\n## Memory: RSS growth per entry, {} entries of 16-byte keys and 100-byte values \
             (Box<[u8]>: 112 bytes of it are the value's allocation), filled, and after as many \
             inserts again, each evicting one\n",
            args.memory_entries
        );
        println!("| cache | bytes/entry, filled | after the churn |\n|---|---:|---:|");
        for &kind in args.caches.iter().filter(|&&k| k != CacheKind::FloeFlat) {
            match probe_child(kind, args.memory_entries) {
                Ok((filled, churned)) => {
                    println!("| {} | {filled:.1} | {churned:.1} |", name(kind))
                }
                Err(e) => println!("| {} | failed: {e} | |", name(kind)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_probe_refuses_sizes_it_cannot_fill_twice() {
        for entries in [0, (1 << 32) + 1, u64::MAX] {
            let args = CacheProbeArgs {
                cache: CacheKind::Floe,
                entries,
            };
            assert!(probe(&args).unwrap_err().contains("--entries"));
        }
        // FlatCache holds words; the probe's keys are 16 bytes: refused, not measured.
        let args = CacheProbeArgs {
            cache: CacheKind::FloeFlat,
            entries: 1000,
        };
        assert!(probe(&args).unwrap_err().contains("a word"));
    }

    #[test]
    fn session_writes_each_key_once_and_reads_it_once_after() {
        let keys = 4000;
        let requests = stream("session", keys, keys / 10, 1);
        let mut written = vec![false; keys as usize];
        let mut read = vec![false; keys as usize];
        for request in requests {
            match request {
                Request::Write { key } => {
                    assert!(!written[key as usize]);
                    written[key as usize] = true;
                }
                Request::Read { key, .. } => {
                    assert!(written[key as usize], "read before its write");
                    assert!(!read[key as usize]);
                    read[key as usize] = true;
                }
                Request::Aside { .. } => panic!("the session trace is writes and reads"),
            }
        }
        assert!(written.iter().all(|&w| w) && read.iter().all(|&r| r));
    }

    #[test]
    fn cache_aside_traces_count_their_second_half() {
        for trace in ["zipf", "scan", "one-hit"] {
            let requests = stream(trace, 2000, 200, 1);
            let counted = requests
                .iter()
                .filter(|r| matches!(r, Request::Aside { counted: true, .. }))
                .count();
            assert!(counted > 0 && counted <= 4000, "{trace}: {counted}");
            assert!(requests.iter().all(|r| matches!(r, Request::Aside { .. })));
        }
    }

    #[test]
    fn a_perfect_cache_hits_every_repeat() {
        // Capacity above the key space: exactly the first references miss.
        let requests = stream("zipf", 2000, 2000, 1);
        let mut seen = std::collections::HashSet::new();
        let (mut counted, mut repeats) = (0, 0);
        for request in &requests {
            if let Request::Aside { key, counted: c } = *request {
                let repeat = !seen.insert(key);
                counted += u64::from(c);
                repeats += u64::from(c && repeat);
            }
        }
        let cache = <floe::Cache<u64, u64, Hasher> as Contender<u64, u64>>::build(1 << 20);
        let ratio = run_stream(&cache, &requests);
        assert!(
            (ratio - repeats as f64 / counted as f64).abs() < 1e-12,
            "{ratio}"
        );
        let flat = <floe::FlatCache<u64, u64, Hasher> as Contender<u64, u64>>::build(1 << 20);
        let ratio = run_stream(&flat, &requests);
        assert!(
            (ratio - repeats as f64 / counted as f64).abs() < 1e-12,
            "{ratio}"
        );
    }
}
