//! `floe-bench skew`: write-heavy work on skewed keys (DRAMHiT Fig. 8), where partitioned
//! delegation (`floe::delegate`) is meant to pay.
//!
//! Two mixes: `count` (every operation a `fetch_add(key, 1)`, k-mer counting's) and `half`
//! (gets and fetch-adds alternating). Keys are drawn from a zipf distribution over `--keys`
//! pseudo-random keys (theta 0 is uniform); every map is prefilled with all of them (value
//! 0), so the table's size is the same at every theta and the run measures updates, not
//! growth. The maps:
//!
//! * `delegated`: `floe::delegate::Partitioned`, one handle per thread; gets read directly,
//!   fetch-adds go to their partition's owner; each thread closes its handle (so every one of
//!   its updates has been applied) inside the timed region.
//! * `shared`: one `FlatMap`, `fetch_add` and `get` one at a time.
//! * `batched`: the same `FlatMap` through `Batch::run_each`, 64 requests a call (prefetched).
//! * `dashmap` (`entry(k).or_insert(0) += 1` under the shard's write lock), `papaya`
//!   (`update_or_insert`), `scc` (`entry_sync(k).and_modify(..).or_insert(1)`): the Rust peers
//!   with an atomic read-modify-write of a value.
//!
//! Operations are drawn before timing into one array of keys per thread (the harness's loop
//! is a load and a call). After each timed run the sum of all values is checked against the
//! number of fetch-adds made so far: a map that lost or doubled an update fails the run.

use std::{sync::Mutex, time::Instant};

use clap::{Args, ValueEnum};
use floe::{delegate::Partitioned, Request};

use crate::{
    dist::Dist,
    keys::{mix, parse_count},
    machine::machine,
    maps::AnyHash,
    measure::Workers,
};

/// `floe-bench skew`.
#[derive(Args, Debug)]
pub struct SkewArgs {
    /// Keys (the zipf distribution's support and the tables' contents).
    #[arg(long, default_value = "2^22", value_parser = parse_count)]
    pub keys: u64,
    /// Zipf thetas, comma separated (0 is uniform).
    #[arg(long, value_delimiter = ',', default_value = "0,0.6,0.8,0.99,1.2")]
    pub thetas: Vec<f64>,
    /// Mixes, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "count,half")]
    pub mixes: Vec<Mix>,
    /// Maps, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "delegated,shared,batched,dashmap,papaya,scc"
    )]
    pub maps: Vec<SkewMap>,
    /// Threads [default: all cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Operations per timed run (total over the threads).
    #[arg(long, default_value = "2^23", value_parser = parse_count)]
    pub ops: u64,
    /// Repeats of every measurement (median, min and max are reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Messages per section of the delegation queues.
    #[arg(long, default_value_t = 32)]
    pub section: usize,
}

/// The mixes of `skew`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mix {
    /// Every operation a fetch_add.
    Count,
    /// Gets and fetch_adds alternating.
    Half,
}

/// The maps of `skew`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SkewMap {
    Delegated,
    Shared,
    Batched,
    Dashmap,
    Papaya,
    Scc,
}

/// Requests per `Batch::run_each` call of `batched`.
const BATCH: usize = 64;

/// One built map of each kind.
enum Built {
    Delegated(Partitioned<u64, u64, AnyHash>),
    Shared(floe::FlatMap<u64, u64, AnyHash>),
    Dashmap(dashmap::DashMap<u64, u64, AnyHash>),
    Papaya(papaya::HashMap<u64, u64, AnyHash>),
    Scc(scc::HashMap<u64, u64, AnyHash>),
}

impl Built {
    fn new(kind: SkewMap, keys: u64, threads: usize, section: usize) -> Result<Built, String> {
        let hasher = AnyHash::default();
        let capacity = usize::try_from(keys).map_err(|_| "--keys too large")?;
        let floe = || {
            floe::FlatMap::<u64, u64>::builder()
                .capacity(capacity)
                .hasher(hasher)
        };
        Ok(match kind {
            SkewMap::Delegated => Built::Delegated(
                Partitioned::builder(threads)
                    .map(floe())
                    .section(section)
                    .build()
                    .map_err(|e| format!("delegated: {e}"))?,
            ),
            SkewMap::Shared | SkewMap::Batched => {
                Built::Shared(floe().build().map_err(|e| format!("floe: {e}"))?)
            }
            SkewMap::Dashmap => {
                Built::Dashmap(dashmap::DashMap::with_capacity_and_hasher(capacity, hasher))
            }
            SkewMap::Papaya => Built::Papaya(
                papaya::HashMap::builder()
                    .capacity(capacity)
                    .hasher(hasher)
                    .build(),
            ),
            SkewMap::Scc => Built::Scc(scc::HashMap::with_capacity_and_hasher(capacity, hasher)),
        })
    }

    fn prefill(&self, keys: &[u64]) {
        for &key in keys {
            match self {
                Built::Delegated(map) => {
                    let partition = map.partition(map.partition_of(&key)).expect("in range");
                    partition.insert(key, 0);
                }
                Built::Shared(map) => {
                    map.insert(key, 0);
                }
                Built::Dashmap(map) => {
                    map.insert(key, 0);
                }
                Built::Papaya(map) => {
                    map.pin().insert(key, 0);
                }
                Built::Scc(map) => {
                    let _ = map.insert_sync(key, 0);
                }
            }
        }
    }

    /// The sum of all values and the number of keys.
    fn total(&self) -> (u64, usize) {
        let (mut sum, mut len) = (0u64, 0usize);
        let mut add = |v: u64| {
            sum = sum.wrapping_add(v);
            len += 1;
        };
        match self {
            Built::Delegated(map) => map.for_each(|_, v| add(v)),
            Built::Shared(map) => map.for_each(|_, v| add(v)),
            Built::Dashmap(map) => map.iter().for_each(|e| add(*e.value())),
            Built::Papaya(map) => map.pin().iter().for_each(|(_, v)| add(*v)),
            Built::Scc(map) => {
                map.iter_sync(|_, v| {
                    add(*v);
                    true
                });
            }
        }
        (sum, len)
    }
}

/// One timed run of `streams` on `map` (as `kind`); returns the seconds.
fn timed(
    workers: &Workers,
    kind: SkewMap,
    map: &Built,
    mix: Mix,
    streams: &[Vec<u64>],
) -> Result<f64, String> {
    let threads = streams.len();
    // Even positions of a `half` stream are gets, odd ones fetch-adds.
    let is_get = |i: usize| mix == Mix::Half && i.is_multiple_of(2);
    let (elapsed, results) = match (kind, map) {
        (SkewMap::Delegated, Built::Delegated(map)) => {
            let handles: Vec<_> = map
                .handles()
                .map_err(|e| format!("delegated: {e}"))?
                .into_iter()
                .map(|h| Mutex::new(Some(h)))
                .collect();
            workers.run(threads, |t| {
                let mut handle = handles[t]
                    .lock()
                    .expect("not poisoned")
                    .take()
                    .expect("one handle per thread");
                let mut found = 0u64;
                for (i, &key) in streams[t].iter().enumerate() {
                    if is_get(i) {
                        found += u64::from(handle.get(&key).is_some());
                    } else {
                        handle.fetch_add(key, 1).map_err(|e| e.to_string())?;
                    }
                }
                handle.close(|_, _| {}).map_err(|e| e.to_string())?;
                Ok::<u64, String>(found)
            })
        }
        (SkewMap::Shared, Built::Shared(map)) => workers.run(threads, |t| {
            Ok(one_at_a_time(
                &streams[t],
                is_get,
                |key| map.get(&key).is_some(),
                |key| {
                    map.fetch_add(key, 1);
                },
            ))
        }),
        (SkewMap::Batched, Built::Shared(map)) => {
            // Requests built before timing, as the keys are.
            let requests: Vec<Vec<Request<u64, u64>>> = streams
                .iter()
                .map(|stream| {
                    stream
                        .iter()
                        .enumerate()
                        .map(|(i, &key)| {
                            if is_get(i) {
                                Request::Get(key)
                            } else {
                                Request::fetch_add(key, 1)
                            }
                        })
                        .collect()
                })
                .collect();
            workers.run(threads, |t| {
                let batch = map.batch();
                let mut found = 0u64;
                let mut failed = 0u64;
                for chunk in requests[t].chunks(BATCH) {
                    batch.run_each(chunk, |_, response| match response {
                        floe::Response::Get(v) => found += u64::from(v.is_some()),
                        other => failed += u64::from(other.is_failure()),
                    });
                }
                if failed > 0 {
                    return Err(format!("{failed} fetch_adds failed"));
                }
                Ok(found)
            })
        }
        (SkewMap::Dashmap, Built::Dashmap(map)) => workers.run(threads, |t| {
            Ok(one_at_a_time(
                &streams[t],
                is_get,
                |key| map.get(&key).is_some(),
                |key| *map.entry(key).or_insert(0) += 1,
            ))
        }),
        // One guard pinned per operation, as the other papaya adapters do.
        (SkewMap::Papaya, Built::Papaya(map)) => workers.run(threads, |t| {
            Ok(one_at_a_time(
                &streams[t],
                is_get,
                |key| map.pin().get(&key).is_some(),
                |key| {
                    map.pin().update_or_insert(key, |v| v + 1, 1);
                },
            ))
        }),
        (SkewMap::Scc, Built::Scc(map)) => workers.run(threads, |t| {
            Ok(one_at_a_time(
                &streams[t],
                is_get,
                |key| map.read_sync(&key, |_, _| ()).is_some(),
                |key| {
                    map.entry_sync(key).and_modify(|v| *v += 1).or_insert(1);
                },
            ))
        }),
        _ => unreachable!("each kind runs on the map it built"),
    };
    for result in results {
        let found = result?;
        let gets = if mix == Mix::Half {
            streams[0].len().div_ceil(2)
        } else {
            0
        };
        // Every key was prefilled: every get must hit (checked per thread, roughly: the
        // streams have the same length).
        if found as usize != gets {
            return Err(format!("{kind:?}: {found} of {gets} gets hit"));
        }
    }
    Ok(elapsed.as_secs_f64())
}

/// The loop of the maps called once per operation: a get at the positions `is_get` names
/// (counting hits), a fetch-add elsewhere. Returns the hits.
#[inline(always)]
fn one_at_a_time(
    stream: &[u64],
    is_get: impl Fn(usize) -> bool,
    get: impl Fn(u64) -> bool,
    add: impl Fn(u64),
) -> u64 {
    let mut found = 0u64;
    for (i, &key) in stream.iter().enumerate() {
        if is_get(i) {
            found += u64::from(get(key));
        } else {
            add(key);
        }
    }
    found
}

/// `floe-bench skew`.
pub fn main(args: SkewArgs) -> Result<(), String> {
    let workers = Workers::new();
    let threads = args.threads.unwrap_or_else(|| workers.cores());
    if threads == 0 || args.keys == 0 || args.ops == 0 || args.repeat == 0 {
        return Err("--threads, --keys, --ops and --repeat must be at least 1".into());
    }
    for &theta in &args.thetas {
        Dist::Zipf { theta }.check(args.keys)?;
    }
    let keys: Vec<u64> = (0..args.keys).map(|i| mix(i ^ 0x5eed)).collect();
    let per_thread = usize::try_from(args.ops / threads as u64).map_err(|_| "--ops too large")?;
    println!("# floe-bench skew: {}", machine());
    println!(
        "# {} keys prefilled, {} threads, {} ops per run, median (min-max) of {}, Mops/s; \
         section {}",
        args.keys,
        threads,
        per_thread * threads,
        args.repeat,
        args.section
    );
    for &mix_kind in &args.mixes {
        let mut built = Vec::new();
        for &kind in &args.maps {
            let started = Instant::now();
            let map = Built::new(kind, args.keys, threads, args.section)?;
            map.prefill(&keys);
            eprintln!(
                "{kind:?}: built and prefilled in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            built.push((kind, map, 0u64));
        }
        println!("\n## {mix_kind:?}");
        let header: Vec<String> = args.maps.iter().map(|m| format!("{m:?}")).collect();
        println!("theta  {}", header.join("  "));
        for &theta in &args.thetas {
            let dist = Dist::Zipf { theta };
            let streams: Vec<Vec<u64>> = (0..threads)
                .map(|t| {
                    let mut sampler = dist.sampler(args.keys, 0xa11ce + t as u64);
                    (0..per_thread)
                        .map(|_| keys[sampler.next_index() as usize])
                        .collect()
                })
                .collect();
            let adds_per_run = streams
                .iter()
                .map(|s| {
                    if mix_kind == Mix::Half {
                        s.len() / 2
                    } else {
                        s.len()
                    }
                })
                .sum::<usize>() as u64;
            let mut samples = vec![Vec::new(); built.len()];
            for _ in 0..args.repeat {
                for (m, (kind, map, adds)) in built.iter_mut().enumerate() {
                    let seconds = timed(&workers, *kind, map, mix_kind, &streams)?;
                    *adds += adds_per_run;
                    let (sum, len) = map.total();
                    if sum != *adds || len as u64 != args.keys {
                        return Err(format!(
                            "{kind:?} lost updates: values sum to {sum} over {len} keys, \
                             expected {adds} over {}",
                            args.keys
                        ));
                    }
                    samples[m].push((per_thread * threads) as f64 / seconds / 1e6);
                }
            }
            let cells: Vec<String> = samples
                .iter_mut()
                .map(|s| {
                    s.sort_by(f64::total_cmp);
                    format!("{:.1} ({:.1}-{:.1})", s[s.len() / 2], s[0], s[s.len() - 1])
                })
                .collect();
            println!("{theta:<5}  {}", cells.join("  "));
        }
    }
    Ok(())
}
