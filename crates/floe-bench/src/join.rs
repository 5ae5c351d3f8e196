//! `floe-bench join`: the hash join of DLHT's evaluation (workload A of Balkesen et al.,
//! "Main-memory hash joins on multi-core CPUs": 16-byte tuples, a build relation R and a
//! probe relation S sixteen times its size, every S key a foreign key into R) on floe, beside
//! a radix-partitioned join over hashbrown tables, in one run. `ci/join.sh` runs DuckDB on the
//! same tables (`--dump`) and, given a copy of their code, ETH's radix and no-partitioning
//! joins on relations of the same shape.
//!
//! **Relations.** Columnar, as a column store holds them: R has `--build` tuples over
//! `--build / --duplicates` distinct keys (each key on `--duplicates` tuples, spread through
//! R; about that many when it does not divide `--build`), S has `--probe-factor` times as
//! many, each key drawn from R's keys by `--dist`, or with probability `--miss` a key R does
//! not have. Keys are distinct 64-bit words (a bijective
//! mix of their rank); a tuple's payload is its row number.
//!
//! **Joins.** `inner` emits every matching pair `(R payload, S payload)` into a per-thread
//! buffer of 4096 pairs, which a consumer folds into a checksum when full (the work of
//! handing matches on, without the memory of the whole result); `semi` emits the S tuples
//! with a match, `anti` those without. Each join's answer is a count and a checksum (the sum,
//! modulo 2^64, of `R payload + S payload` over the pairs, or of the S payloads), and every
//! engine must give the same answer (exit 1 otherwise).
//!
//! **Engines.**
//! - `floe-batched`: one shared `FlatMap<u64, u64>` made for R's keys; built through
//!   `Batch::run_each`, probed through `Batch::get_many` in chunks of 512 keys (floe's
//!   lookahead ring). Unique keys map to their payload; duplicate keys to the row of their
//!   latest tuple, each row linking to the one its insert replaced (`insert` answers the old
//!   value: a lock-free multimap). An inner join walks a chunk's chains level by level, each
//!   level's rows prefetched before any is read (a duplicate's row lies anywhere in R, so a
//!   walk one chain at a time waits a miss per row).
//! - `floe`: the same map, one `insert` and one `get` at a time.
//! - `hashbrown`: R partitioned by hash (each thread scatters the rows of its slice into
//!   per-partition vectors, 64 partitions a thread), each partition's `hashbrown::HashMap`
//!   built by one thread, then every thread probes its slice of S, in S's order, into the
//!   table of each key's partition (S is not copied: at workload A's sizes a partitioned copy
//!   of S would double the memory), walking duplicates' chains a chunk at a time as floe's
//!   batched engine does.
//!
//! Times are split into partition (hashbrown only), build (with the allocation of the
//! tables) and probe; tuples/s is `(|R| + |S|) / total`, Balkesen's measure. The probe's
//! lines/s are set beside the random line-read ceiling of the table's size through a 64-deep
//! window (`ceiling.rs`), measured in the same run.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
    time::Duration,
};

use clap::{Args, ValueEnum};
use floe::{FlatMap, Insert, Request, Response};

use crate::{
    ceiling::{Access, Ceiling},
    dist::Dist,
    experiment::stream_len,
    keys::{mix, parse_count},
    machine::machine,
    measure::{median, Workers},
};

/// `floe-bench join`.
#[derive(Args, Debug)]
pub struct JoinArgs {
    /// Tuples in the build relation R (|R|).
    #[arg(long, default_value = "2^22", value_parser = parse_count)]
    pub build: u64,
    /// |S| / |R|.
    #[arg(long, default_value_t = 16)]
    pub probe_factor: u64,
    /// Tuples per distinct build key (1: unique keys, workload A).
    #[arg(long, default_value_t = 1)]
    pub duplicates: u64,
    /// How S's keys are drawn from R's distinct keys: uniform, zipf:THETA, hot:KEYS:PERCENT.
    #[arg(long, default_value = "uniform")]
    pub dist: Dist,
    /// The fraction of S's tuples whose key R does not have.
    #[arg(long, default_value_t = 0.0)]
    pub miss: f64,
    /// Joins, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "inner,semi,anti"
    )]
    pub joins: Vec<JoinKind>,
    /// Engines, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "floe-batched,floe,hashbrown"
    )]
    pub engines: Vec<Engine>,
    /// Threads [default: all cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Runs of each engine and join (interleaved; the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Skip the read ceiling.
    #[arg(long)]
    pub no_ceiling: bool,
    /// Write the relations (`r_keys.u64`, `r_payloads.u64`, `s_keys.u64`, `s_payloads.u64`:
    /// little-endian words) and the answers (`answers.txt`) to this directory, for
    /// `ci/join.sh`'s DuckDB run.
    #[arg(long)]
    pub dump: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JoinKind {
    Inner,
    Semi,
    Anti,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    FloeBatched,
    Floe,
    Hashbrown,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::FloeBatched => "floe-batched",
            Engine::Floe => "floe",
            Engine::Hashbrown => "hashbrown",
        }
    }
}

/// The end of a chain of duplicate rows.
const NIL: u64 = u64::MAX;
/// Probe keys per `get_many` call.
const CHUNK: usize = 512;
/// Matches a thread buffers before folding them.
const OUT: usize = 4096;

/// Refuse flags that cannot make a join (exit code 2).
pub fn check(args: &JoinArgs) -> Result<(), String> {
    if args.build == 0 || args.probe_factor == 0 || args.duplicates == 0 || args.repeat == 0 {
        return Err("--build, --probe-factor, --duplicates and --repeat must be at least 1".into());
    }
    if args.duplicates > args.build {
        return Err(format!(
            "--duplicates {} exceeds --build {}: R needs at least one key",
            args.duplicates, args.build
        ));
    }
    if args
        .build
        .checked_mul(args.probe_factor)
        .is_none_or(|s| s > 1 << 32)
    {
        return Err("|S| = --build x --probe-factor must be at most 2^32".into());
    }
    if !(0.0..=1.0).contains(&args.miss) {
        return Err(format!("--miss must be in [0, 1], not {}", args.miss));
    }
    args.dist.check(args.build / args.duplicates)?;
    if args.joins.is_empty() || args.engines.is_empty() {
        return Err("--joins and --engines need at least one each".into());
    }
    if args.threads == Some(0) {
        return Err("--threads must be at least 1".into());
    }
    Ok(())
}

/// Two columns of one relation.
struct Relation {
    keys: Vec<u64>,
    payloads: Vec<u64>,
}

/// The key of distinct key number `rank` (nonzero, distinct: `mix` is a bijection).
fn key_of(rank: u64) -> u64 {
    mix(rank + 1)
}

fn relations(args: &JoinArgs, threads: usize) -> (Relation, Relation) {
    let distinct = args.build / args.duplicates;
    let r_keys: Vec<u64> = (0..args.build).map(|i| key_of(i % distinct)).collect();
    let r = Relation {
        keys: r_keys,
        payloads: (0..args.build).collect(),
    };
    let probes = args.build * args.probe_factor;
    let share = probes.div_ceil(threads as u64);
    let parts: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads as u64)
            .map(|t| {
                scope.spawn(move || {
                    let mut sampler = args.dist.sampler(distinct, 0x5eed ^ t);
                    let (from, to) = ((t * share).min(probes), ((t + 1) * share).min(probes));
                    let miss = (args.miss * u64::MAX as f64) as u64;
                    (from..to)
                        .map(|_| {
                            if args.miss > 0.0 && sampler.uniform_below(u64::MAX) < miss {
                                // A key R does not have: a rank past its distinct keys.
                                key_of(distinct + sampler.uniform_below(1 << 40))
                            } else {
                                key_of(sampler.next_index())
                            }
                        })
                        .collect()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let s = Relation {
        keys: parts.concat(),
        payloads: (0..probes).collect(),
    };
    (r, s)
}

/// A join's answer: how many rows it emitted and the checksum of their payloads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Answer {
    rows: u64,
    checksum: u64,
}

impl Answer {
    fn add(&mut self, other: Answer) {
        self.rows += other.rows;
        self.checksum = self.checksum.wrapping_add(other.checksum);
    }
}

/// One thread's output: matches buffered, folded when the buffer fills.
struct Output {
    buffer: Vec<(u64, u64)>,
    answer: Answer,
}

impl Output {
    fn new() -> Self {
        Output {
            buffer: Vec::with_capacity(OUT),
            answer: Answer::default(),
        }
    }

    #[inline(always)]
    fn emit(&mut self, r_payload: u64, s_payload: u64) {
        if self.buffer.len() == OUT {
            self.drain();
        }
        self.buffer.push((r_payload, s_payload));
    }

    fn drain(&mut self) {
        for &(r, s) in &self.buffer {
            self.answer.rows += 1;
            self.answer.checksum = self.answer.checksum.wrapping_add(r.wrapping_add(s));
        }
        self.buffer.clear();
    }

    fn finish(mut self) -> Answer {
        self.drain();
        self.answer
    }
}

/// What a build leaves for the probe: the value of each key is a payload (unique keys) or
/// the row of its latest tuple, `next` linking each row to the row before it.
struct Chains<'r> {
    unique: bool,
    next: Vec<AtomicU64>,
    r: &'r Relation,
}

impl<'r> Chains<'r> {
    /// Chains over `r`, whose keys number `distinct` (no links when each is on one tuple).
    fn new(r: &'r Relation, distinct: u64) -> Self {
        let unique = distinct == r.keys.len() as u64;
        Chains {
            unique,
            next: if unique {
                Vec::new()
            } else {
                (0..r.keys.len()).map(|_| AtomicU64::new(NIL)).collect()
            },
            r,
        }
    }

    /// The value a build stores for row `row`: its payload, or the row itself to chain.
    fn value_of(&self, row: usize) -> u64 {
        if self.unique {
            self.r.payloads[row]
        } else {
            row as u64
        }
    }

    /// Row `row`'s insert replaced the value `replaced` (the key's previous row): link it.
    /// Each row is written by the one thread that inserted it, and read only after the
    /// build's threads have been joined (so Relaxed).
    fn record(&self, row: usize, replaced: Option<u64>) {
        if !self.unique {
            self.next[row].store(replaced.unwrap_or(NIL), Relaxed);
        }
    }

    /// Emit the matches of the probe tuple `s_payload` whose key's value is `value`.
    #[inline(always)]
    fn emit(&self, kind: JoinKind, value: Option<u64>, s_payload: u64, out: &mut Output) {
        match (kind, value) {
            (JoinKind::Inner, Some(value)) if self.unique => out.emit(value, s_payload),
            (JoinKind::Inner, Some(mut row)) => {
                while row != NIL {
                    out.emit(self.r.payloads[row as usize], s_payload);
                    row = self.next[row as usize].load(Relaxed);
                }
            }
            (JoinKind::Semi, Some(_)) | (JoinKind::Anti, None) => out.emit(0, s_payload),
            _ => {}
        }
    }

    /// As `emit` for each probe tuple of a chunk (`values[i]` is the value of the key of the
    /// tuple whose payload is `s_payloads[i]`), but an inner join's chains are walked level by
    /// level across the chunk: every live chain's next row (its link and its payload) is
    /// prefetched before any is read, so a chunk keeps as many misses in flight as it has
    /// chains instead of one (a row of a duplicate key lies anywhere in R). Emits the same
    /// pairs as `emit`, in another order.
    fn emit_chunk(
        &self,
        kind: JoinKind,
        values: &[Option<u64>],
        s_payloads: &[u64],
        live: &mut Vec<(u64, u64)>,
        out: &mut Output,
    ) {
        if kind != JoinKind::Inner || self.unique {
            for (&value, &s_payload) in values.iter().zip(s_payloads) {
                self.emit(kind, value, s_payload, out);
            }
            return;
        }
        live.clear();
        live.extend(
            values
                .iter()
                .zip(s_payloads)
                .filter_map(|(&value, &s_payload)| Some((value?, s_payload))),
        );
        while !live.is_empty() {
            for &(row, _) in live.iter() {
                prefetch_read(&self.next[row as usize]);
                prefetch_read(&self.r.payloads[row as usize]);
            }
            live.retain_mut(|(row, s_payload)| {
                out.emit(self.r.payloads[*row as usize], *s_payload);
                *row = self.next[*row as usize].load(Relaxed);
                *row != NIL
            });
        }
    }
}

/// Start loading the line of `value` into the cache (no effect off x86-64).
#[inline(always)]
fn prefetch_read<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect and never faults.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// The slice of `0..n` thread `t` of `threads` takes.
fn share(n: usize, t: usize, threads: usize) -> std::ops::Range<usize> {
    let per = n.div_ceil(threads);
    (t * per).min(n)..((t + 1) * per).min(n)
}

/// Times of one run.
#[derive(Clone, Copy, Default)]
struct Timing {
    partition: Duration,
    build: Duration,
    probe: Duration,
}

impl Timing {
    fn total(&self) -> Duration {
        self.partition + self.build + self.probe
    }
}

fn floe_join(
    batched: bool,
    kind: JoinKind,
    r: &Relation,
    s: &Relation,
    distinct: u64,
    workers: &Workers,
    threads: usize,
) -> Result<(Timing, Answer, usize), String> {
    // The table's allocation (and the zeroing of its pages) is part of the build, as it is
    // for hashbrown and DuckDB.
    let allocating = std::time::Instant::now();
    let map = FlatMap::<u64, u64>::try_with_capacity(distinct as usize)
        .map_err(|e| format!("floe: {e}"))?;
    let allocation = allocating.elapsed();
    let chains = Chains::new(r, distinct);
    let unique = chains.unique;
    let (build, failures) = workers.run(threads, |t| {
        let rows = share(r.keys.len(), t, threads);
        let value_of = |row: usize| chains.value_of(row);
        let record = |row: usize, replaced: Option<u64>| chains.record(row, replaced);
        let mut failed = 0u64;
        if batched {
            let batch = map.batch();
            let mut requests = Vec::with_capacity(CHUNK);
            for start in rows.clone().step_by(CHUNK) {
                let end = (start + CHUNK).min(rows.end);
                requests.clear();
                requests.extend((start..end).map(|row| {
                    if unique {
                        Request::InsertNew(r.keys[row], value_of(row))
                    } else {
                        Request::Insert(r.keys[row], value_of(row))
                    }
                }));
                batch.run_each(&requests, |i, response| match response {
                    Response::InsertNew(Ok(Insert::Inserted)) => {}
                    Response::Insert(Ok(replaced)) => record(start + i, replaced),
                    _ => failed += 1,
                });
            }
        } else {
            for row in rows {
                if unique {
                    if !matches!(
                        map.try_insert_new(r.keys[row], value_of(row)),
                        Ok(Insert::Inserted)
                    ) {
                        failed += 1;
                    }
                } else {
                    match map.try_insert(r.keys[row], value_of(row)) {
                        Ok(replaced) => record(row, replaced),
                        Err(_) => failed += 1,
                    }
                }
            }
        }
        failed
    });
    if failures.iter().sum::<u64>() > 0 {
        return Err("floe: a build insert failed (or found its unique key present)".into());
    }
    let (probe, answers) = workers.run(threads, |t| {
        let rows = share(s.keys.len(), t, threads);
        let mut out = Output::new();
        if batched {
            let batch = map.batch();
            let (mut values, mut live) = (vec![None; CHUNK], Vec::with_capacity(CHUNK));
            for start in rows.clone().step_by(CHUNK) {
                let end = (start + CHUNK).min(rows.end);
                let values = &mut values[..end - start];
                batch
                    .get_many(&s.keys[start..end], values)
                    .expect("as many values as keys");
                chains.emit_chunk(kind, values, &s.payloads[start..end], &mut live, &mut out);
            }
        } else {
            for row in rows {
                chains.emit(kind, map.get(&s.keys[row]), s.payloads[row], &mut out);
            }
        }
        out.finish()
    });
    let mut answer = Answer::default();
    answers.into_iter().for_each(|a| answer.add(a));
    let bytes = map.stats().allocated_bytes;
    Ok((
        Timing {
            partition: Duration::ZERO,
            build: allocation + build,
            probe,
        },
        answer,
        bytes,
    ))
}

/// Partitions a thread: enough that a partition's table stays a few MiB.
const PARTITIONS_PER_THREAD: usize = 64;

fn partition_of(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
}

fn hashbrown_join(
    kind: JoinKind,
    r: &Relation,
    s: &Relation,
    distinct: u64,
    workers: &Workers,
    threads: usize,
) -> (Timing, Answer, usize) {
    // Each partition's table maps a key as floe's does, rows chained in the same `Chains`.
    let chains = Chains::new(r, distinct);
    let partitions = (threads * PARTITIONS_PER_THREAD).next_power_of_two();
    let bits = partitions.trailing_zeros();
    // Each thread scatters the rows of its slice of R into one vector a partition.
    let (partition, scattered) = workers.run(threads, |t| {
        let mut parts: Vec<Vec<u32>> = vec![Vec::new(); partitions];
        for row in share(r.keys.len(), t, threads) {
            parts[partition_of(r.keys[row], bits)].push(row as u32);
        }
        parts
    });
    // Each partition built by one thread, partitions taken in turn.
    let next_partition = AtomicUsize::new(0);
    let (build, built) = workers.run(threads, |_| {
        let mut mine = Vec::new();
        loop {
            let p = next_partition.fetch_add(1, Relaxed);
            if p >= partitions {
                break mine;
            }
            let count: usize = scattered.iter().map(|parts| parts[p].len()).sum();
            let mut table = hashbrown::HashMap::with_capacity(count);
            for &row in scattered.iter().flat_map(|parts| &parts[p]) {
                let row = row as usize;
                let replaced = table.insert(r.keys[row], chains.value_of(row));
                chains.record(row, replaced);
            }
            mine.push((p, table));
        }
    });
    let mut tables: Vec<Option<hashbrown::HashMap<u64, u64>>> =
        (0..partitions).map(|_| None).collect();
    for (p, table) in built.into_iter().flatten() {
        tables[p] = Some(table);
    }
    let tables: Vec<_> = tables
        .into_iter()
        .map(|table| table.expect("every partition built"))
        .collect();
    let bytes = tables.iter().map(|table| table.allocation_size()).sum();
    // Every thread probes its slice of S, in S's order, into the partitions' tables.
    // Duplicate keys' chains are walked a chunk at a time, as floe's batched engine does.
    let (probe, answers) = workers.run(threads, |t| {
        let mut out = Output::new();
        let rows = share(s.keys.len(), t, threads);
        let (mut values, mut live) = (vec![None; CHUNK], Vec::with_capacity(CHUNK));
        for start in rows.clone().step_by(CHUNK) {
            let end = (start + CHUNK).min(rows.end);
            let values = &mut values[..end - start];
            for (value, &key) in values.iter_mut().zip(&s.keys[start..end]) {
                *value = tables[partition_of(key, bits)].get(&key).copied();
            }
            chains.emit_chunk(kind, values, &s.payloads[start..end], &mut live, &mut out);
        }
        out.finish()
    });
    let mut answer = Answer::default();
    answers.into_iter().for_each(|a| answer.add(a));
    (
        Timing {
            partition,
            build,
            probe,
        },
        answer,
        bytes,
    )
}

/// Write `words` little-endian to `path`, streamed (a column of S is GiBs at workload A's size).
fn write_words(path: &Path, words: &[u64]) -> Result<(), String> {
    use std::io::Write;
    let failed = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file =
        std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).map_err(failed)?);
    for word in words {
        file.write_all(&word.to_le_bytes()).map_err(failed)?;
    }
    file.flush().map_err(failed)
}

pub fn main(args: JoinArgs) -> Result<(), String> {
    let workers = Workers::new();
    let threads = args.threads.unwrap_or(workers.cores());
    let distinct = args.build / args.duplicates;
    let (r, s) = relations(&args, threads);
    println!("{}", machine());
    println!(
        "join: |R| = {} ({} distinct keys, {} a key), |S| = {} ({}, {:.1}% absent keys), {threads} threads, median of {}",
        r.keys.len(),
        distinct,
        args.duplicates,
        s.keys.len(),
        args.dist,
        args.miss * 100.0,
        args.repeat
    );
    let mut report = String::new();
    let mut answers_text = String::new();
    writeln!(
        report,
        "{:<14} {:<6} {:>10} {:>10} {:>10} {:>10} {:>12} {:>11} {:>10}",
        "engine",
        "join",
        "part. s",
        "build s",
        "probe s",
        "total s",
        "Mtuples/s",
        "probe Ml/s",
        "table MiB"
    )
    .unwrap();
    let mut ceiling_mops = None;
    for &kind in &args.joins {
        let mut expected: Option<Answer> = None;
        let mut runs: Vec<Vec<(Timing, usize)>> = vec![Vec::new(); args.engines.len()];
        for _ in 0..args.repeat {
            for (e, &engine) in args.engines.iter().enumerate() {
                let (timing, answer, bytes) = match engine {
                    Engine::FloeBatched | Engine::Floe => floe_join(
                        engine == Engine::FloeBatched,
                        kind,
                        &r,
                        &s,
                        distinct,
                        &workers,
                        threads,
                    )?,
                    Engine::Hashbrown => hashbrown_join(kind, &r, &s, distinct, &workers, threads),
                };
                match expected {
                    None => expected = Some(answer),
                    Some(first) if first != answer => {
                        return Err(format!(
                            "{kind:?} join: {} answered {answer:?}, {} {first:?}",
                            engine.name(),
                            args.engines[0].name()
                        ))
                    }
                    Some(_) => {}
                }
                runs[e].push((timing, bytes));
                if ceiling_mops.is_none() && !args.no_ceiling && engine != Engine::Hashbrown {
                    let ceiling = Ceiling::new(bytes, true)?;
                    ceiling_mops = Some(ceiling.measure(
                        &workers,
                        threads,
                        Duration::from_secs(1),
                        Access::ReadIntoL2,
                        64,
                        stream_len(distinct),
                    ));
                }
            }
        }
        let answer = expected.expect("at least one run");
        writeln!(answers_text, "{kind:?} {} {}", answer.rows, answer.checksum).unwrap();
        println!(
            "{kind:?} join: {} rows, checksum {}",
            answer.rows, answer.checksum
        );
        let tuples = (r.keys.len() + s.keys.len()) as f64;
        for (e, engine) in args.engines.iter().enumerate() {
            let of = |f: &dyn Fn(&Timing) -> Duration| {
                median(runs[e].iter().map(|(t, _)| f(t).as_secs_f64()).collect())
            };
            let (part, build, probe, total) = (
                of(&|t| t.partition),
                of(&|t| t.build),
                of(&|t| t.probe),
                of(&|t| t.total()),
            );
            writeln!(
                report,
                "{:<14} {:<6} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>12.1} {:>11.1} {:>10.1}",
                engine.name(),
                format!("{kind:?}").to_lowercase(),
                part,
                build,
                probe,
                total,
                tuples / total / 1e6,
                s.keys.len() as f64 / probe / 1e6,
                runs[e][0].1 as f64 / f64::from(1 << 20)
            )
            .unwrap();
        }
    }
    print!("{report}");
    if let Some(mops) = ceiling_mops {
        println!(
            "read ceiling over floe's table (random lines, L2 window 64): {mops:.1} M lines/s; \
             a probe reads about one line (floe) a tuple"
        );
    }
    if let Some(dir) = &args.dump {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        write_words(&dir.join("r_keys.u64"), &r.keys)?;
        write_words(&dir.join("r_payloads.u64"), &r.payloads)?;
        write_words(&dir.join("s_keys.u64"), &s.keys)?;
        write_words(&dir.join("s_payloads.u64"), &s.payloads)?;
        let answers = dir.join("answers.txt");
        std::fs::write(&answers, answers_text)
            .map_err(|e| format!("{}: {e}", answers.display()))?;
        println!("relations and answers written to {}", dir.display());
    }
    Ok(())
}
