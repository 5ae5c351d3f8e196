//! The workloads, turned into per-thread operation arrays before any timing.
//!
//! Every prepared [`Op`] carries the answer a correct map must give, so each run checks every
//! answer for free (a wrong answer fails the run): threads never share the keys they write, and
//! values encode their key (see [`value_of`]).
//!
//! | workload | from | prefill | operations |
//! |---|---|---|---|
//! | `get` | DLHT | 100% | gets of present keys (from `--dist`) |
//! | `get-miss` | DLHT | 100% | gets of keys never inserted |
//! | `insdel` | DLHT | 100% | insert a fresh key, then delete it |
//! | `putheavy` | DLHT | 100% | 50% gets, 50% puts (update in place) of present keys |
//! | `mixed` | DRAMHiT | 100% | `--read-ratio` gets, the rest puts of present keys |
//! | `fill` | DRAMHiT | 0% | insert fresh keys until the table holds 75% of `--keys` |
//! | `readheavy` | conc-map-bench | 75% | read 98, insert 1, remove 1, update 0 (%) |
//! | `exchange` | conc-map-bench | 75% | read 10, insert 40, remove 40, update 10 |
//! | `rapidgrow` | conc-map-bench | 0% | read 5, insert 80, remove 5, update 10 |
//! | `population` | DLHT Fig. 7 | 0% | insert `--keys` fresh keys into maps created small |
//! | `grow-read` | DLHT Fig. 8 | first table | writers grow the map while readers get |
//!
//! The last two run in `growth.rs` (maps created for `--initial-slots`, timelines, every
//! operation timed); the rest of this module does not see them.
//!
//! The first five run for `--seconds` (or `--ops`), cycling through their arrays; they leave the
//! table as they found it (up to values), so one prefilled map serves every repeat and thread
//! count. The last four run a fixed number of operations once, on a fresh map per repeat.
//!
//! The conc-map-bench mixes follow bustle's rules (a port of libcuckoo's universal benchmark):
//! the table is created with capacity `--keys`, prefilled to the fraction above, and runs
//! `--keys` operations by default. Each thread owns a private key array; inserts take its next
//! unused key, removes take its oldest present key, and reads and updates pick any key of the
//! array (uniform in bustle; `--dist` here), so they hit only when that key is present.

use serde::{Deserialize, Serialize};

use crate::{dist::Dist, keys::mix};

/// The workloads `--workload` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Gets of present keys.
    Get,
    /// Gets of absent keys.
    GetMiss,
    /// Insert a fresh key, then delete it.
    Insdel,
    /// 50% gets, 50% puts of present keys.
    Putheavy,
    /// `--read-ratio` gets, the rest puts.
    Mixed,
    /// Insert into an empty table up to 75% of `--keys`.
    Fill,
    /// conc-map-bench ReadHeavy: read 98, insert 1, remove 1.
    Readheavy,
    /// conc-map-bench Exchange: read 10, insert 40, remove 40, update 10.
    Exchange,
    /// conc-map-bench RapidGrow: read 5, insert 80, remove 5, update 10.
    Rapidgrow,
    /// DLHT Fig. 7: insert `--keys` fresh keys into a map created for `--initial-slots`
    /// (growth benchmarks, `growth.rs`).
    Population,
    /// DLHT Fig. 8: writers grow the map while readers get (growth benchmarks, `growth.rs`).
    GrowRead,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Get => "get",
            Workload::GetMiss => "get-miss",
            Workload::Insdel => "insdel",
            Workload::Putheavy => "putheavy",
            Workload::Mixed => "mixed",
            Workload::Fill => "fill",
            Workload::Readheavy => "readheavy",
            Workload::Exchange => "exchange",
            Workload::Rapidgrow => "rapidgrow",
            Workload::Population => "population",
            Workload::GrowRead => "grow-read",
        }
    }

    /// Whether the workload runs a fixed number of operations once on a fresh map per repeat
    /// (rather than cycling for a time on a shared prefilled map).
    pub fn runs_once(self) -> bool {
        matches!(
            self,
            Workload::Fill | Workload::Readheavy | Workload::Exchange | Workload::Rapidgrow
        )
    }

    /// Whether the workload keeps inserting fresh keys and removing others (see
    /// `Recipe::churn`).
    pub fn churns(self) -> bool {
        matches!(
            self,
            Workload::Insdel | Workload::Readheavy | Workload::Exchange | Workload::Rapidgrow
        )
    }

    /// The prefill fraction of `--keys` when `--prefill` is not given.
    pub fn default_prefill(self) -> f64 {
        match self {
            Workload::Fill | Workload::Rapidgrow => 0.0,
            Workload::Readheavy | Workload::Exchange => 0.75,
            _ => 1.0,
        }
    }

    /// The bustle mix (read, insert, remove, update), for the conc-map-bench workloads.
    pub fn bustle_mix(self) -> Option<[u8; 4]> {
        match self {
            Workload::Readheavy => Some([98, 1, 1, 0]),
            Workload::Exchange => Some([10, 40, 40, 10]),
            Workload::Rapidgrow => Some([5, 80, 5, 10]),
            _ => None,
        }
    }
}

/// What an operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// `get(key)`.
    Get,
    /// Insert if absent.
    Insert,
    /// Replace the value if present.
    Update,
    /// Remove if present.
    Remove,
}

/// One prepared operation and the answer a correct map gives: for gets, whether the key is
/// present; for the others, whether the operation takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub key: u64,
    pub kind: Kind,
    pub expect: bool,
}

/// Bits of a value that encode its key; updates change only the bits above (a writer tag).
pub const VALUE_KEY_BITS: u64 = (1 << 56) - 1;

/// The value inserted for `key`. Values stay below 2^63 even with a writer tag, so maps that
/// reserve the top values (leapfrog reserves `u64::MAX` and `u64::MAX - 1`) are not disturbed.
#[inline(always)]
pub fn value_of(key: u64) -> u64 {
    (key ^ 0x0f0f_f0f0_5555_aaaa) & VALUE_KEY_BITS
}

/// The value an update by `thread` writes for `key` (same key bits, the thread in the tag).
#[inline(always)]
pub fn updated_value_of(key: u64, thread: usize) -> u64 {
    value_of(key) | ((thread as u64 % 127 + 1) << 56)
}

/// Whether a value read for `key` is one that some operation wrote for it.
#[inline(always)]
pub fn value_matches(key: u64, value: u64) -> bool {
    value & VALUE_KEY_BITS == value_of(key) && value >> 63 == 0
}

/// Keys by region, thread and index: a bijection of the three, so regions never overlap.
mod region {
    pub const PRESENT: u64 = 0;
    pub const ABSENT: u64 = 1;
    pub const FRESH: u64 = 2;
    pub const PRIVATE: u64 = 3;
}

/// The key with index `index` of `thread`'s share of `region` (indexes below 2^40).
pub fn key(region: u64, thread: usize, index: u64) -> u64 {
    debug_assert!(index < 1 << 40 && thread < 1 << 16);
    mix((region << 56 | (thread as u64) << 40 | index) ^ 0x5eed_f10e_0000_0000)
}

/// The `index`-th of the keys every workload shares (the ones prefilled by the cycling
/// workloads).
pub fn present_key(index: u64) -> u64 {
    key(region::PRESENT, 0, index)
}

/// What to prepare.
#[derive(Clone, Debug)]
pub struct Spec {
    pub workload: Workload,
    pub read_ratio: f64,
    pub keys: u64,
    pub prefill: f64,
    pub dist: Dist,
    pub threads: usize,
    /// Operations per thread array for cycling workloads; total operations for the others
    /// (`None`: `--keys`, as bustle does).
    pub ops: Option<u64>,
    /// Length of each thread's array for the cycling workloads.
    pub stream_len: usize,
}

/// Prepared work for one thread count.
pub struct Plan {
    /// Keys inserted (value [`value_of`]) before timing.
    pub prefill: Vec<u64>,
    /// One operation array per thread.
    pub streams: Vec<Vec<Op>>,
    /// Capacity to create the map with: `--keys`, or the most keys ever present if larger.
    pub capacity: u64,
    /// Fraction of operations that only read (to weigh the read and RMW ceilings).
    pub read_fraction: f64,
}

impl Spec {
    /// Problems with the combination of flags, as messages for the user.
    pub fn check(&self) -> Result<(), String> {
        let w = self.workload.name();
        if !(0.0..=1.0).contains(&self.prefill) {
            return Err(format!("--prefill must be in [0, 1], not {}", self.prefill));
        }
        if !(0.0..=1.0).contains(&self.read_ratio) {
            return Err(format!(
                "--read-ratio must be in [0, 1], not {}",
                self.read_ratio
            ));
        }
        let present = self.present();
        match self.workload {
            Workload::Get | Workload::Putheavy | Workload::Mixed if present == 0 => {
                return Err(format!(
                    "{w} needs present keys: --prefill {} leaves none",
                    self.prefill
                ))
            }
            Workload::Fill if present >= self.fill_target() => {
                return Err(format!(
                    "fill inserts up to 75% of --keys; --prefill {} is already there",
                    self.prefill
                ))
            }
            Workload::Fill if self.ops.is_some() => {
                return Err(
                    "fill's operation count follows from --keys and --prefill; drop --ops".into(),
                )
            }
            _ => {}
        }
        let drawn_from = match self.workload {
            Workload::GetMiss => self.keys,
            Workload::Get | Workload::Putheavy | Workload::Mixed => present,
            _ => u64::MAX,
        };
        if drawn_from != u64::MAX {
            self.dist.check(drawn_from)?;
        } else if matches!(self.workload, Workload::Insdel | Workload::Fill)
            && self.dist != Dist::Uniform
        {
            return Err(format!(
                "{w} inserts fresh keys, so --dist does not apply (leave it uniform)"
            ));
        }
        Ok(())
    }

    fn present(&self) -> u64 {
        (self.keys as f64 * self.prefill) as u64
    }

    fn fill_target(&self) -> u64 {
        self.keys * 3 / 4
    }

    /// Prepare the prefill list and the per-thread arrays (in parallel, one thread each).
    pub fn plan(&self) -> Plan {
        let threads = self.threads;
        if let Some(mix) = self.workload.bustle_mix() {
            return self.bustle_plan(mix);
        }
        let present = self.present();
        let prefill: Vec<u64> = (0..present).map(present_key).collect();
        let (streams, read_fraction) = match self.workload {
            Workload::Fill => {
                let target = self.fill_target();
                let share = (target - present).div_ceil(threads as u64);
                let streams = (0..threads as u64)
                    .map(|t| {
                        let from = present + t * share;
                        let to = (from + share).min(target);
                        (from..to)
                            .map(|i| Op {
                                key: present_key(i),
                                kind: Kind::Insert,
                                expect: true,
                            })
                            .collect()
                    })
                    .collect();
                (streams, 0.0)
            }
            Workload::Insdel => {
                let streams = self.per_thread(|t, _| {
                    let pairs = self.stream_len / 2;
                    (0..pairs as u64)
                        .flat_map(|i| {
                            let key = key(region::FRESH, t, i);
                            [
                                Op {
                                    key,
                                    kind: Kind::Insert,
                                    expect: true,
                                },
                                Op {
                                    key,
                                    kind: Kind::Remove,
                                    expect: true,
                                },
                            ]
                        })
                        .collect()
                });
                (streams, 0.0)
            }
            Workload::GetMiss => {
                let streams = self.per_thread(|t, sampler| {
                    let mut sampler = sampler.expect("key picks");
                    let _ = t;
                    (0..self.stream_len)
                        .map(|_| Op {
                            key: key(region::ABSENT, 0, sampler.next_index()),
                            kind: Kind::Get,
                            expect: false,
                        })
                        .collect()
                });
                (streams, 1.0)
            }
            Workload::Get | Workload::Putheavy | Workload::Mixed => {
                let read_ratio = match self.workload {
                    Workload::Get => 1.0,
                    Workload::Putheavy => 0.5,
                    _ => self.read_ratio,
                };
                let threshold = (read_ratio * (1u64 << 32) as f64) as u64;
                let streams = self.per_thread(|_, sampler| {
                    let mut sampler = sampler.expect("key picks");
                    (0..self.stream_len)
                        .map(|_| {
                            let key = present_key(sampler.next_index());
                            let read =
                                read_ratio >= 1.0 || sampler.uniform_below(1 << 32) < threshold;
                            Op {
                                key,
                                kind: if read { Kind::Get } else { Kind::Update },
                                expect: true,
                            }
                        })
                        .collect()
                });
                (streams, read_ratio)
            }
            Workload::Readheavy | Workload::Exchange | Workload::Rapidgrow => {
                unreachable!("handled above")
            }
            Workload::Population | Workload::GrowRead => {
                unreachable!("the growth workloads run in growth.rs")
            }
        };
        // InsDel holds one fresh key per thread on top of the prefill.
        let in_flight = if self.workload == Workload::Insdel {
            threads as u64
        } else {
            0
        };
        Plan {
            prefill,
            streams,
            capacity: self.keys.max(present + in_flight),
            read_fraction,
        }
    }

    /// Build one array per thread in parallel; `make(thread, sampler)` gets a sampler over the
    /// keys the workload draws from (present keys, or `--keys` absent ones for get-miss).
    fn per_thread(
        &self,
        make: impl Fn(usize, Option<crate::dist::Sampler>) -> Vec<Op> + Sync,
    ) -> Vec<Vec<Op>> {
        let drawn_from = match self.workload {
            Workload::GetMiss => self.keys,
            _ => self.present(),
        };
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.threads)
                .map(|t| {
                    let make = &make;
                    let sampler = (drawn_from > 0)
                        .then(|| self.dist.sampler(drawn_from, 0xd157 + t as u64 * 7919));
                    s.spawn(move || make(t, sampler))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("stream generation panicked"))
                .collect()
        })
    }

    /// bustle's rules (module docs), simulated per thread so every answer is known.
    fn bustle_plan(&self, [read, insert, remove, update]: [u8; 4]) -> Plan {
        let threads = self.threads as u64;
        let total_ops = self.ops.unwrap_or(self.keys);
        let ops_per_thread = total_ops / threads;
        let prefill_total = self.present();
        let prefill_per_thread = prefill_total / threads;
        let max_inserts = total_ops.div_ceil(100) * u64::from(insert);
        let keys_per_thread = (self.keys.max(max_inserts) + prefill_total)
            .div_ceil(threads)
            .next_power_of_two();
        // The 100-slot operation pattern, shuffled once with a fixed seed (as bustle does).
        let mut pattern: Vec<Kind> = [
            (Kind::Get, read),
            (Kind::Insert, insert),
            (Kind::Remove, remove),
            (Kind::Update, update),
        ]
        .iter()
        .flat_map(|&(kind, n)| std::iter::repeat_n(kind, n.into()))
        .collect();
        let mut shuffle = Dist::Uniform.sampler(u64::MAX, 0x00b0_571e);
        for i in (1..pattern.len()).rev() {
            let j = shuffle.uniform_below(i as u64 + 1) as usize;
            pattern.swap(i, j);
        }
        let simulated: Vec<(Vec<Op>, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.threads)
                .map(|t| {
                    let pattern = &pattern;
                    let mut sampler = self.dist.sampler(keys_per_thread, 0xb0 + t as u64);
                    s.spawn(move || {
                        let key = |i: u64| key(region::PRIVATE, t, i);
                        let (mut erased, mut inserted) = (0u64, prefill_per_thread);
                        let mut peak = inserted;
                        let ops = (0..ops_per_thread)
                            .map(|i| match pattern[(i % 100) as usize] {
                                Kind::Insert => {
                                    inserted += 1;
                                    peak = peak.max(inserted - erased);
                                    Op {
                                        key: key(inserted - 1),
                                        kind: Kind::Insert,
                                        expect: true,
                                    }
                                }
                                Kind::Remove if erased < inserted => {
                                    erased += 1;
                                    Op {
                                        key: key(erased - 1),
                                        kind: Kind::Remove,
                                        expect: true,
                                    }
                                }
                                Kind::Remove => Op {
                                    key: key(inserted),
                                    kind: Kind::Remove,
                                    expect: false,
                                },
                                kind => {
                                    let i = sampler.next_index();
                                    Op {
                                        key: key(i),
                                        kind,
                                        expect: (erased..inserted).contains(&i),
                                    }
                                }
                            })
                            .collect();
                        (ops, peak)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("stream generation panicked"))
                .collect()
        });
        let prefill = (0..self.threads)
            .flat_map(|t| (0..prefill_per_thread).map(move |i| key(region::PRIVATE, t, i)))
            .collect();
        let peak: u64 = simulated.iter().map(|(_, peak)| peak).sum();
        Plan {
            prefill,
            streams: simulated.into_iter().map(|(ops, _)| ops).collect(),
            capacity: self.keys.max(peak),
            read_fraction: f64::from(read) / 100.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn spec(workload: Workload, threads: usize) -> Spec {
        Spec {
            workload,
            read_ratio: 0.9,
            keys: 4096,
            prefill: workload.default_prefill(),
            dist: Dist::Uniform,
            threads,
            ops: None,
            stream_len: 2000,
        }
    }

    /// Replaying every thread's array on a `HashMap` gives exactly the expected answers,
    /// whatever the interleaving (threads write disjoint keys), for every workload.
    #[test]
    fn expected_answers_are_the_sequential_answers() {
        for workload in [
            Workload::Get,
            Workload::GetMiss,
            Workload::Insdel,
            Workload::Putheavy,
            Workload::Mixed,
            Workload::Fill,
            Workload::Readheavy,
            Workload::Exchange,
            Workload::Rapidgrow,
        ] {
            let spec = spec(workload, 2);
            spec.check().unwrap();
            let plan = spec.plan();
            let mut map = std::collections::HashMap::new();
            for &k in &plan.prefill {
                assert!(
                    map.insert(k, value_of(k)).is_none(),
                    "{workload:?}: distinct"
                );
            }
            let mut peak = map.len();
            // Interleave the two threads op by op.
            let longest = plan.streams.iter().map(Vec::len).max().unwrap();
            for i in 0..longest {
                for (t, stream) in plan.streams.iter().enumerate() {
                    let Some(op) = stream.get(i) else { continue };
                    let answer = match op.kind {
                        Kind::Get => map.get(&op.key).is_some_and(|&v| value_matches(op.key, v)),
                        Kind::Insert => {
                            let absent = !map.contains_key(&op.key);
                            map.entry(op.key).or_insert(value_of(op.key));
                            absent
                        }
                        Kind::Update => map
                            .get_mut(&op.key)
                            .map(|v| *v = updated_value_of(op.key, t))
                            .is_some(),
                        Kind::Remove => map.remove(&op.key).is_some(),
                    };
                    assert_eq!(answer, op.expect, "{workload:?} thread {t} op {i}: {op:?}");
                    peak = peak.max(map.len());
                }
            }
            assert!(plan.capacity >= peak as u64, "{workload:?}");
            if workload == Workload::Fill {
                assert_eq!(map.len(), 3072);
            }
        }
    }

    #[test]
    fn bustle_mix_proportions_and_hit_rates() {
        let mut spec = spec(Workload::Exchange, 1);
        spec.ops = Some(100_000);
        let plan = spec.plan();
        let ops = &plan.streams[0];
        let count = |kind| ops.iter().filter(|o| o.kind == kind).count();
        assert_eq!(count(Kind::Get), 10_000);
        assert_eq!(count(Kind::Insert), 40_000);
        assert_eq!(count(Kind::Remove), 40_000);
        assert_eq!(count(Kind::Update), 10_000);
        assert_eq!(plan.prefill.len(), 3072);
        let hits = ops
            .iter()
            .filter(|o| o.kind == Kind::Get && o.expect)
            .count();
        assert!(
            hits > 0 && hits < 10_000,
            "reads hit only present keys: {hits}"
        );
    }

    #[test]
    fn regions_do_not_overlap() {
        let mut seen = HashSet::new();
        for region in 0..4 {
            for thread in 0..3 {
                for index in 0..1000 {
                    assert!(seen.insert(key(region, thread, index)));
                }
            }
        }
        assert!(value_matches(7, updated_value_of(7, 126)));
        assert!(!value_matches(7, value_of(8)));
        assert!(updated_value_of(u64::MAX, 200) < u64::MAX - 1);
    }

    #[test]
    fn bad_combinations_are_refused() {
        let mut s = spec(Workload::Get, 1);
        s.prefill = 0.0;
        assert!(s.check().unwrap_err().contains("present keys"));
        let mut s = spec(Workload::Insdel, 1);
        s.dist = Dist::Zipf { theta: 0.9 };
        assert!(s.check().unwrap_err().contains("--dist"));
        let mut s = spec(Workload::Fill, 1);
        s.prefill = 0.8;
        assert!(s.check().is_err());
        let mut s = spec(Workload::Get, 1);
        s.dist = Dist::Hot {
            keys: 5000,
            percent: 10.0,
        };
        assert!(s.check().unwrap_err().contains("hot set"));
        let mut s = spec(Workload::Mixed, 1);
        s.read_ratio = 1.5;
        assert!(s.check().is_err());
    }
}
