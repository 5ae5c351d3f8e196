//! YCSB's core workloads A, B, C, D and F (Cooper et al., 2010) on the maps of byte strings of
//! `sizes`: 23-byte keys as YCSB makes them (`user` and 19 digits of a hashed record number),
//! values of `--value-bytes` (YCSB's record is 10 fields of 100 bytes: 1 KiB; 100 bytes is its
//! one-field variant), zipfian key popularity (theta 0.99, YCSB's).
//!
//! A run of one map: the **load** phase inserts the records into an empty map (so it grows;
//! timed, reported as `load`), then each workload runs for `--seconds` on the loaded map:
//!
//! | workload | operations |
//! |---|---|
//! | A | 50% read, 50% update |
//! | B | 95% read, 5% update |
//! | C | 100% read |
//! | D | 95% read of the *latest* records, 5% insert of new ones |
//! | F | 50% read, 50% read-modify-write |
//!
//! A read looks the key up and reads every byte of the record (YCSB reads all fields); an
//! update writes a whole new record (allocated per update, for every map alike); a
//! read-modify-write reads the record and writes a new one. D's "latest" is approximated: reads
//! draw a zipfian rank among the most recently *loaded* records (rank 0 = the last one), and
//! each thread inserts new records of its own. E (scans) has no counterpart in a hash map.
//! Every read is checked (the record's first word is its record number). scc's `HashIndex`
//! runs the load, C and D only: its update inserts the new entry and then marks the old one
//! removed, and a concurrent read can miss the key in between (seen here as failed checks), so
//! A, B and F would measure wrong answers.

use std::time::Duration;

use clap::Args;

use crate::{
    dist::Dist,
    keys::parse_count,
    maps::{AnyHash, AHASH},
    measure::{cycle_for, median, Workers},
    sizes::{first_word, row_cells, sum_all, value, BlobKind, BlobMap, BlobRunArgs, Bytes},
};

#[derive(Args, Debug, Clone)]
pub struct YcsbArgs {
    /// Records loaded before the workloads run.
    #[arg(long, default_value = "2^20", value_parser = parse_count)]
    pub records: u64,
    /// Record sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "100,1024")]
    pub value_bytes: Vec<usize>,
    /// Workloads to run after the load: any of a, b, c, d, f.
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d,f")]
    pub workloads: Vec<String>,
    /// Zipfian skew of the key choice.
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    #[command(flatten)]
    pub run: BlobRunArgs,
}

/// YCSB's key of record `i`: "user" and the record number hashed (FNV-1a, as YCSB's
/// `fnvhash64`) as 19 decimal digits: 23 bytes.
fn ycsb_key(i: u64) -> Bytes {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for byte in i.to_le_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01B3);
    }
    // 19 digits: distinct hashes below 10^19 stay distinct (checked by the load).
    format!("user{:019}", hash % 10_000_000_000_000_000_000)
        .into_bytes()
        .into_boxed_slice()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    A,
    B,
    C,
    D,
    F,
}

impl Workload {
    fn parse(name: &str) -> Result<Self, String> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "a" => Workload::A,
            "b" => Workload::B,
            "c" => Workload::C,
            "d" => Workload::D,
            "f" => Workload::F,
            other => return Err(format!("unknown YCSB workload {other:?} (a, b, c, d, f)")),
        })
    }

    /// Percent of operations that are not reads (updates, inserts or read-modify-writes).
    fn write_percent(self) -> u64 {
        match self {
            Workload::A | Workload::F => 50,
            Workload::B | Workload::D => 5,
            Workload::C => 0,
        }
    }
}

/// One prepared operation: a read or a write of record `index`.
#[derive(Clone, Copy)]
struct Op {
    index: u64,
    write: bool,
}

/// Per-thread operation streams for `workload`, drawn before timing.
fn streams(workload: Workload, args: &YcsbArgs, round: usize) -> Vec<Vec<Op>> {
    let records = args.records;
    (0..args.run.threads)
        .map(|t| {
            let seed = 7 + (round * 64 + t) as u64;
            let mut sampler = Dist::Zipf { theta: args.theta }.sampler(records, seed);
            // D's inserts: this thread's own new records, above the loaded ones.
            let mut next_new = records + (t as u64) * (1 << 32);
            (0..1 << 16)
                .map(|_| {
                    let write = sampler.uniform_below(100) < workload.write_percent();
                    let rank = sampler.next_index();
                    if workload == Workload::D {
                        if write {
                            next_new += 1;
                            return Op {
                                index: next_new - 1,
                                write,
                            };
                        }
                        // The latest loaded records are the most popular.
                        return Op {
                            index: records - 1 - rank,
                            write,
                        };
                    }
                    Op { index: rank, write }
                })
                .collect()
        })
        .collect()
}

/// Load `args.records` records into an empty map of type `M`, then run each workload: the
/// load's throughput and each workload's (Mops/s).
fn run_map<M: BlobMap>(
    bytes: usize,
    workloads: &[Workload],
    args: &YcsbArgs,
    workers: &Workers,
    round: usize,
    reads_miss_during_updates: bool,
) -> Result<(f64, Vec<f64>), String> {
    // A small empty map (YCSB's load grows the store): room for 1024 records, floe's default.
    let map = M::with_capacity(1024, AnyHash::Ahash(&AHASH));
    let per_thread = args.records.div_ceil(args.run.threads as u64);
    let (elapsed, duplicates) = workers.run(args.run.threads, |t| {
        let start = t as u64 * per_thread;
        let end = (start + per_thread).min(args.records);
        (start..end)
            .filter(|&i| !map.insert(ycsb_key(i), value(i, bytes)))
            .count()
    });
    let duplicates: usize = duplicates.iter().sum();
    if duplicates > 0 {
        return Err(format!(
            "load: {duplicates} keys collided (a YCSB key repeated)"
        ));
    }
    let load = args.records as f64 / elapsed.as_secs_f64() / 1e6;
    let duration = Duration::from_secs_f64(args.run.seconds);
    let mut results = Vec::new();
    for &workload in workloads {
        if reads_miss_during_updates && matches!(workload, Workload::A | Workload::B | Workload::F)
        {
            // Not measured (NaN): its reads would fail the check, not the map's speed.
            results.push(f64::NAN);
            continue;
        }
        let ops = streams(workload, args, round);
        // The keys, made before timing as YCSB's client does outside its measured call.
        let keys: Vec<Vec<Bytes>> = ops
            .iter()
            .map(|s| s.iter().map(|op| ycsb_key(op.index)).collect())
            .collect();
        let (elapsed, counts) = workers.run(args.run.threads, |t| {
            let (stream, keys) = (&ops[t], &keys[t]);
            let mut wrong = 0u64;
            let mut at = 0usize;
            let done = cycle_for(stream, duration, |op| {
                let key = &keys[at];
                at += 1;
                if at == stream.len() {
                    at = 0;
                }
                let read = || map.get_with(key, |v| sum_all(v) ^ first_word(v) << 1);
                match (workload, op.write) {
                    (Workload::D, true) => {
                        // A record inserted again after the stream wrapped is already there.
                        map.insert(key.clone(), value(op.index, bytes));
                    }
                    (Workload::F, true) => {
                        wrong += u64::from(read().is_none());
                        map.upsert(key.clone(), value(op.index, bytes));
                    }
                    (_, true) => map.upsert(key.clone(), value(op.index, bytes)),
                    (_, false) => {
                        let expect = map_check(op.index, bytes);
                        wrong += u64::from(read() != Some(expect));
                    }
                }
            });
            (done, wrong)
        });
        let wrong: u64 = counts.iter().map(|c| c.1).sum();
        if wrong > 0 {
            return Err(format!("{wrong} wrong reads in workload {workload:?}"));
        }
        let done: u64 = counts.iter().map(|c| c.0).sum();
        results.push(done as f64 / elapsed.as_secs_f64() / 1e6);
    }
    Ok((load, results))
}

/// What a read of record `i` computes: every byte summed, with the record number folded in.
fn map_check(i: u64, bytes: usize) -> u64 {
    let record = value(i, bytes);
    sum_all(&record) ^ first_word(&record) << 1
}

fn run_kind(
    kind: BlobKind,
    bytes: usize,
    workloads: &[Workload],
    args: &YcsbArgs,
    workers: &Workers,
    round: usize,
) -> Result<(f64, Vec<f64>), String> {
    use crate::sizes::Namespaced;
    let w = workloads;
    let result = match kind {
        BlobKind::Floe => {
            run_map::<floe::Map<Bytes, Bytes, AnyHash>>(bytes, w, args, workers, round, false)
        }
        BlobKind::FloeNamespaced => run_map::<Namespaced>(bytes, w, args, workers, round, false),
        BlobKind::Papaya => {
            run_map::<papaya::HashMap<Bytes, Bytes, AnyHash>>(bytes, w, args, workers, round, false)
        }
        BlobKind::Scc => {
            run_map::<scc::HashMap<Bytes, Bytes, AnyHash>>(bytes, w, args, workers, round, false)
        }
        BlobKind::SccIndex => {
            run_map::<scc::HashIndex<Bytes, Bytes, AnyHash>>(bytes, w, args, workers, round, true)
        }
        BlobKind::Dashmap => run_map::<dashmap::DashMap<Bytes, Bytes, AnyHash>>(
            bytes, w, args, workers, round, false,
        ),
        BlobKind::FloePersistent => {
            run_map::<crate::sizes::PersistentBlobs>(bytes, w, args, workers, round, false)
        }
    };
    result.map_err(|e| format!("{kind:?}: {e}"))
}

/// Why `ycsb` stopped: bad flags (exit code 2) or a failed run.
pub enum YcsbError {
    Usage(String),
    Run(String),
}

pub fn main(args: YcsbArgs) -> Result<(), YcsbError> {
    let usage = |m: String| YcsbError::Usage(m);
    let workloads: Vec<Workload> = args
        .workloads
        .iter()
        .map(|w| Workload::parse(w))
        .collect::<Result<_, _>>()
        .map_err(usage)?;
    if let Some(refusal) = args.run.refusal() {
        return Err(usage(refusal.into()));
    }
    if args.records < 2 {
        return Err(usage("--records must be at least 2".into()));
    }
    if !(0.0..1.5).contains(&args.theta) {
        return Err(usage(format!("--theta {} is outside [0, 1.5)", args.theta)));
    }
    if args.value_bytes.is_empty() {
        return Err(usage("nothing to measure".into()));
    }
    let workers = Workers::new();
    println!(
        "# floe-bench ycsb: {} records of 23-byte keys, zipf {}, {} threads, {} s per workload, median of {} (maps alternated), hasher ahash; Mops/s",
        args.records, args.theta, args.run.threads, args.run.seconds, args.run.repeat
    );
    let names: Vec<String> = args.run.maps.iter().map(|m| format!("{m:?}")).collect();
    println!("value_B\tphase\t{}\tfloe/best-peer", names.join("\t"));
    for &bytes in &args.value_bytes {
        // samples[map][phase]: phase 0 is the load, then the workloads.
        let mut samples = vec![vec![Vec::new(); workloads.len() + 1]; args.run.maps.len()];
        for round in 0..args.run.repeat {
            for step in 0..args.run.maps.len() {
                let m = (step + round) % args.run.maps.len();
                let (load, each) =
                    run_kind(args.run.maps[m], bytes, &workloads, &args, &workers, round)
                        .map_err(YcsbError::Run)?;
                samples[m][0].push(load);
                for (w, x) in each.into_iter().enumerate() {
                    samples[m][w + 1].push(x);
                }
            }
        }
        let phases =
            std::iter::once("load".to_string()).chain(workloads.iter().map(|w| format!("{w:?}")));
        for (p, phase) in phases.enumerate() {
            let medians: Vec<f64> = samples
                .iter()
                .map(|by_phase| median(by_phase[p].clone()))
                .collect();
            let (cells, ratio) = row_cells(&args.run.maps, &medians);
            println!("{bytes}\t{phase}\t{cells}\t{ratio}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_23_bytes_and_distinct() {
        let keys: std::collections::HashSet<Bytes> = (0..100_000).map(ycsb_key).collect();
        assert_eq!(keys.len(), 100_000);
        assert!(keys.iter().all(|k| k.len() == 23 && k.starts_with(b"user")));
    }

    #[test]
    fn every_map_runs_every_workload() {
        let args = YcsbArgs {
            records: 2000,
            value_bytes: vec![100],
            workloads: vec![],
            theta: 0.99,
            run: BlobRunArgs {
                threads: 2,
                seconds: 0.02,
                repeat: 1,
                maps: vec![],
            },
        };
        let workloads = [
            Workload::A,
            Workload::B,
            Workload::C,
            Workload::D,
            Workload::F,
        ];
        let workers = Workers::new();
        for kind in [
            BlobKind::Floe,
            BlobKind::FloeNamespaced,
            BlobKind::Papaya,
            BlobKind::Scc,
            BlobKind::SccIndex,
            BlobKind::Dashmap,
            BlobKind::FloePersistent,
        ] {
            let (load, each) = run_kind(kind, 100, &workloads, &args, &workers, 0).unwrap();
            // NaN: a workload the map sits out (HashIndex's updates, see the module docs).
            assert!(
                load > 0.0 && each.iter().all(|&x| x > 0.0 || x.is_nan()),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        assert!(Workload::parse("e").is_err());
        assert_eq!(Workload::parse("A"), Ok(Workload::A));
    }
}
