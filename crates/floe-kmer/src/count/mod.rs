//! Counting: the workers, and the engines they count into.
//!
//! A count runs `threads` workers and no other thread, as jellyfish's `-t` means: each worker
//! in turn takes the shared [`Input`]'s lock, parses the next chunk into its own buffer, lets
//! go, rolls the chunk's k-mers into a batch of [`BATCH`] and hands full batches to its
//! [`Sink`]. A sink is the worker's own handle on the engine: what it does with a batch
//! (prefetched compare-and-swaps into the compact table, a prefetched batch of `fetch_add`s,
//! one call per k-mer, or messages to the threads that own the k-mers) is the engine's
//! business.
//!
//! # Engines
//! An [`Engine`] makes one sink per worker and runs the workers ([`Engine::run`]), then gives
//! its table of counts ([`Engine::into_table`], a [`Table`]). `run` is handed the worker as a
//! [`Worker`] whose `work` is generic over the sink type, so the engine may build whatever its sinks borrow
//! (a delegation set-up, per-thread queues) on its own stack, the sinks' loop is compiled
//! for the sink type, and [`run_workers`] does the spawning and joining for every engine. To
//! add an engine: a module beside [`shared`] with a type implementing [`Engine`] and its sink
//! implementing [`Sink`], a variant of [`EngineKind`] (the `--engine` value), and its arm in
//! [`count`].
//!
//! # Nothing lost, nothing invented
//! Any error (input, table) stops every worker and is the count's answer: there are no partial
//! counts. At the end the counts must add up to the k-mers the workers extracted; if they do
//! not, the count fails with [`Error::Internal`] instead of printing wrong numbers.

pub mod compact;
pub mod delegated;
pub mod passes;
pub mod shared;

use std::{
    ops::RangeInclusive,
    sync::{
        atomic::{AtomicBool, Ordering::Relaxed},
        Mutex,
    },
    thread,
    time::{Duration, Instant},
};

use crate::{
    kmer::{prefix, Kmers, Word},
    parse::Input,
    Error,
};

/// K-mers a worker gathers before handing them to its sink: a few hundred, so a batched
/// engine's prefetching covers the memory latency (it keeps 16 ahead) and the per-batch costs
/// (a call, a pin of the table) are spread thin, while the batch stays in the L1 cache.
pub const BATCH: usize = 256;

/// A worker's handle on an engine, for k-mers packed in `W`. Each worker owns one, on its
/// own thread.
pub trait Sink<W: Word = u64> {
    /// Counts each k-mer of `kmers` once (it may do so later, by [`finish`](Sink::finish)).
    ///
    /// # Errors
    /// The engine could not count a k-mer; the worker stops and the count fails.
    fn add(&mut self, kmers: &[W]) -> Result<(), Error>;

    /// Called once, by the worker's thread, after its last `add`: when the input is exhausted,
    /// and also when the worker stops on an error (so an engine whose sinks wait for one
    /// another at the end does not wait for one that failed). After every sink has
    /// finished, every k-mer added is in the counts.
    ///
    /// # Errors
    /// As [`add`](Sink::add).
    fn finish(self) -> Result<(), Error>;
}

/// What runs on each worker thread: given the thread's sink, count until the input is
/// exhausted; returns the k-mers added to the sink.
pub trait Worker<W: Word = u64>: Sync {
    /// Runs the worker with `sink`.
    ///
    /// # Errors
    /// The input's or the sink's; the other workers stop soon after.
    fn work<S: Sink<W>>(&self, sink: &mut S) -> Result<u64, Error>;
}

/// A counting engine: the table and how workers reach it.
pub trait Engine<W: Word = u64> {
    /// Runs `worker` on `threads` threads, each with its own sink (usually through
    /// [`run_workers`]). Returns the k-mers the workers added.
    ///
    /// # Errors
    /// The first worker's or sink's error.
    fn run(&self, threads: usize, worker: &impl Worker<W>) -> Result<u64, Error>;

    /// The table of counts, once every worker has finished.
    fn into_table(self) -> Box<dyn Table<W>>;
}

/// A finished count's table: the k-mers and their counts where the engine keeps them.
pub trait Table<W: Word = u64>: Send + Sync {
    /// Visits every distinct k-mer with its count, in no particular order.
    fn for_each(&self, visit: &mut dyn FnMut(W, u64));

    /// Visits the k-mers of shard `shard` of `shards` (`shard < shards`): together the
    /// shards visit every k-mer once, so threads may visit one each. By default shard 0 visits
    /// them all.
    fn for_each_shard(&self, shard: usize, shards: usize, visit: &mut dyn FnMut(W, u64)) {
        debug_assert!(shard < shards);
        if shard == 0 {
            self.for_each(visit);
        }
    }

    /// Distinct k-mers.
    fn len(&self) -> usize;

    /// Into how many parts [`Counts::for_each_sorted`] splits the k-mers: a pass over the
    /// table per part, against a copy of a part's k-mers at a time. 1 (one copy of them all)
    /// for a table that already costs far more than a copy, more for a compact one.
    fn sorting_parts(&self) -> usize {
        1
    }

    /// Whether no k-mer was counted.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs `worker` once per sink, each on a thread of its own, and finishes every sink. Returns
/// the k-mers added, or the first error in thread order.
///
/// # Panics
/// If a worker or sink panicked (the panic goes on).
pub fn run_workers<W: Word, S: Sink<W> + Send>(
    sinks: Vec<S>,
    worker: &impl Worker<W>,
) -> Result<u64, Error> {
    thread::scope(|scope| {
        let threads: Vec<_> = sinks
            .into_iter()
            .map(|mut sink| {
                scope.spawn(move || {
                    let worked = worker.work(&mut sink);
                    let finished = sink.finish();
                    worked.and_then(|added| finished.map(|()| added))
                })
            })
            .collect();
        let mut total = Ok(0u64);
        for thread in threads {
            let result = thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            total = match (total, result) {
                (Ok(sum), Ok(added)) => Ok(sum + added),
                (Err(first), _) | (Ok(_), Err(first)) => Err(first),
            };
        }
        total
    })
}

/// The engines `--engine` chooses from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EngineKind {
    /// One shared table of floe-kmer's own, 8 bytes a slot (a k-mer's high bits implied by
    /// its slot, see `count::compact`); each worker counts its k-mers in prefetched batches.
    /// The fastest, at a quarter of the shared map's memory.
    #[default]
    Compact,
    /// One shared floe map; each worker runs its k-mers as a batch of `fetch_add` requests,
    /// the bins of the next ones prefetched while one runs (floe's own batches, as the
    /// DRAMHiT and DLHT papers count k-mers).
    Batched,
    /// One shared floe map; one `fetch_add` call per k-mer. The baseline the batches are
    /// measured against; as fast or faster while the table fits in the caches.
    Unbatched,
    /// floe's partitioned delegation (`floe::delegate`): one partition per worker, each
    /// k-mer's `fetch_add` sent to the worker that owns it, which applies what it is sent in
    /// prefetched batches. For skewed inputs on many cores, where the shared map's hot k-mers
    /// would bounce between the counting cores (BENCHMARKS, "Counting k-mers").
    Delegated,
}

impl EngineKind {
    /// The name `--engine` takes.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Batched => "batched",
            EngineKind::Unbatched => "unbatched",
            EngineKind::Delegated => "delegated",
            EngineKind::Compact => "compact",
        }
    }
}

/// What to count and how.
#[derive(Clone, Debug)]
pub struct Settings {
    /// K-mer length, 1 to 64 (to 32 in a `u64`, and with the engines other than the compact
    /// one).
    pub k: usize,
    /// Count each k-mer together with its reverse complement, under the smaller of the two.
    pub canonical: bool,
    /// Worker threads (all the threads a count uses).
    pub threads: usize,
    /// Distinct k-mers to size the table for; it grows past them on its own.
    pub size_hint: usize,
    /// The engine.
    pub engine: EngineKind,
}

/// Where a thread writes its k-mers of one bucket of a sorted part, and how many it wrote.
type Stretch<'p, W> = (&'p mut [(W, u64)], usize);

/// A finished count: the table where the engine counted (not copied out, so a histogram is
/// tallied without a second copy of every k-mer), and what it took.
pub struct Counts<W: Word = u64> {
    table: Box<dyn Table<W>>,
    /// The threads the count ran on, which [`for_each_sorted`](Self::for_each_sorted)'s
    /// passes over the table use too.
    threads: usize,
    /// The k-mers counted (the sum of the counts).
    pub total: u64,
    /// Time spent reading and counting.
    pub elapsed: Duration,
}

impl<W: Word> Counts<W> {
    /// Distinct k-mers.
    pub fn distinct(&self) -> usize {
        self.table.len()
    }

    /// Visits every distinct k-mer with its count, in no particular order.
    pub fn for_each(&self, mut visit: impl FnMut(W, u64)) {
        self.table.for_each(&mut visit);
    }

    /// Visits every distinct k-mer of length `k` with its count, in increasing order of
    /// k-mer, a sorted part at a time: the table's [`sorting_parts`](Table::sorting_parts)
    /// parts (a copy of them all would cost 16 bytes a k-mer on top of the table).
    ///
    /// With more than one part, one pass over the table tallies the k-mers by their first
    /// four bases (buckets); the tallies are grouped into ranges of about a part's share of
    /// the k-mers; then each range is gathered in a pass of its own (each thread placing its
    /// shard's k-mers by bucket, where the tallies say), its buckets sorted on every thread,
    /// and visited.
    ///
    /// # Errors
    /// The first of `visit`'s.
    pub fn for_each_sorted<E>(
        &self,
        k: usize,
        mut visit: impl FnMut(&[(W, u64)]) -> Result<(), E>,
    ) -> Result<(), E> {
        let parts = self.table.sorting_parts().max(1);
        let bucket_bits = if parts == 1 { 0 } else { (2 * k).min(8) };
        let shift = (2 * k - bucket_bits) as u32;
        // A k-mer's bucket: its top `bucket_bits` bits (none at all: a shift by the word's
        // width at k = 32 or 64 would wrap to no shift in a release build, which once dropped
        // every k-mer).
        let bucket = |kmer: W| {
            if shift >= W::BITS {
                0
            } else {
                (kmer >> shift).low_u64() as usize
            }
        };
        // Each shard's tally of each bucket (one pass on every thread): where each thread's
        // k-mers of a part go in the part's vector.
        let shard_tallies = if parts == 1 {
            vec![vec![self.distinct()]]
        } else {
            let empty = vec![vec![0usize; 1 << bucket_bits]; self.threads.max(1)];
            self.gather(empty, |tallies, kmer, _| {
                tallies[bucket(kmer)] += 1;
            })
        };
        let mut tallies = vec![0usize; 1 << bucket_bits];
        for shard in &shard_tallies {
            for (tally, add) in tallies.iter_mut().zip(shard) {
                *tally += add;
            }
        }
        let target = (self.distinct() / parts).max(1 << 16);
        // The ranges of buckets: [start, end) with about `target` k-mers each.
        let mut ranges = Vec::new();
        let (mut start, mut held) = (0, 0);
        for (bucket, &tally) in tallies.iter().enumerate() {
            if held > 0 && held + tally > target {
                ranges.push((start, bucket, held));
                (start, held) = (bucket, 0);
            }
            held += tally;
        }
        ranges.push((start, tallies.len(), held));
        let largest = ranges.iter().map(|&(_, _, held)| held).max().unwrap_or(0);
        let mut part = Vec::with_capacity(largest);
        for (start, end, held) in ranges {
            part.clear();
            part.resize(held, (W::ZERO, 0u64));
            // Where each thread writes its shard's k-mers of each bucket: bucket after bucket,
            // each bucket's stretch shard after shard, so that a bucket is one run of the
            // part, sorted on its own.
            let mut rest = &mut part[..];
            let mut places: Vec<Vec<Stretch<'_, W>>> = (0..shard_tallies.len())
                .map(|_| Vec::with_capacity(end - start))
                .collect();
            for bucket in start..end {
                for (shard, tally) in shard_tallies.iter().enumerate() {
                    let (mine, after) = std::mem::take(&mut rest).split_at_mut(tally[bucket]);
                    places[shard].push((mine, 0usize));
                    rest = after;
                }
            }
            let filled = self.gather(places, |places, kmer, count| {
                let at = bucket(kmer).wrapping_sub(start);
                if let Some((stretch, written)) = places.get_mut(at) {
                    stretch[*written] = (kmer, count);
                    *written += 1;
                }
            });
            debug_assert!(filled
                .iter()
                .flatten()
                .all(|(s, written)| s.len() == *written));
            drop(filled);
            self.sort_buckets(&mut part, &tallies[start..end]);
            visit(&part)?;
        }
        Ok(())
    }

    /// Sorts `part`, made of runs of k-mers of `buckets[i]` each (the k-mers of a run all
    /// below the next run's), by sorting the runs on the count's threads: a thread takes
    /// consecutive runs of about its share of the k-mers.
    fn sort_buckets(&self, part: &mut [(W, u64)], buckets: &[usize]) {
        let threads = self.threads.max(1);
        if threads == 1 || buckets.len() == 1 {
            part.sort_unstable_by_key(|&(kmer, _)| kmer);
            return;
        }
        let share = part.len().div_ceil(threads).max(1);
        let mut groups: Vec<Vec<&mut [(W, u64)]>> = vec![Vec::new()];
        let (mut rest, mut held) = (part, 0);
        for &tally in buckets {
            if held >= share {
                groups.push(Vec::new());
                held = 0;
            }
            let (run, after) = std::mem::take(&mut rest).split_at_mut(tally);
            groups.last_mut().expect("one group at least").push(run);
            held += tally;
            rest = after;
        }
        thread::scope(|scope| {
            for group in groups {
                scope.spawn(move || {
                    for run in group {
                        run.sort_unstable_by_key(|&(kmer, _)| kmer);
                    }
                });
            }
        });
    }

    /// One pass over the table on `accumulators.len()` threads, each over its shard of the
    /// table into its accumulator, which are returned.
    fn gather<A: Send>(
        &self,
        accumulators: Vec<A>,
        take: impl Fn(&mut A, W, u64) + Sync,
    ) -> Vec<A> {
        let shards = accumulators.len();
        let (table, take) = (&*self.table, &take);
        thread::scope(|scope| {
            let threads: Vec<_> = accumulators
                .into_iter()
                .enumerate()
                .map(|(shard, mut acc)| {
                    scope.spawn(move || {
                        table.for_each_shard(shard, shards, &mut |kmer, count| {
                            take(&mut acc, kmer, count)
                        });
                        acc
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|thread| {
                    thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    }

    /// Every distinct k-mer with its count, in no particular order ([`write_dump`] sorts
    /// them); the table is freed once they are copied out.
    ///
    /// [`write_dump`]: crate::output::write_dump
    pub fn into_kmers(self) -> Vec<(W, u64)> {
        let mut kmers = Vec::with_capacity(self.table.len());
        self.table
            .for_each(&mut |kmer, count| kmers.push((kmer, count)));
        kmers
    }
}

impl<W: Word> std::fmt::Debug for Counts<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counts")
            .field("distinct", &self.distinct())
            .field("total", &self.total)
            .field("elapsed", &self.elapsed)
            .finish()
    }
}

/// Counts the k-mers of `input`.
///
/// ```
/// use floe_kmer::{count::{count, EngineKind, Settings}, parse::{Input, Source}};
/// let source = Source::Bytes { name: "demo".into(), data: b">s\nACGTNacg\n".as_slice().into() };
/// let input = Input::new(vec![source], indicatif::ProgressBar::hidden()).unwrap();
/// let settings = Settings { k: 3, canonical: false, threads: 2, size_hint: 100, engine: EngineKind::Batched };
/// // k-mers of up to 32 bases in a `u64` (up to 64 in a `u128`).
/// let counts = count::<u64>(input, &settings).unwrap();
/// assert_eq!(counts.total, 3);
/// let mut kmers = counts.into_kmers();
/// kmers.sort();
/// // ACG twice (the second in lowercase), CGT once; the N breaks the run.
/// assert_eq!(kmers, [(0b00_01_10, 2), (0b01_10_11, 1)]);
/// ```
///
/// # Errors
/// [`Error::Usage`] if k is not in 1..=`W::MAX_K` (or above 32 with an engine other than
/// the compact one); the input's errors (malformed, truncated, unreadable), or the engine's.
pub fn count<W: CountWord>(input: Input, settings: &Settings) -> Result<Counts<W>, Error> {
    count_within(input, settings, &Limits::default())
}

/// A word the engines count in: the compact engine counts any, floe's maps (the other
/// engines) hold 8-byte keys, so k-mers of `u64` only.
pub trait CountWord: compact::Slot {
    /// Runs the engine `kind` over `worker` (`count_within` runs the compact one itself,
    /// within its limits).
    ///
    /// # Errors
    /// The engine's, and [`Error::Usage`] where it does not count this word.
    fn run_engine(
        kind: EngineKind,
        settings: &Settings,
        worker: &impl Worker<Self>,
    ) -> Result<(u64, Box<dyn Table<Self>>), Error>;
}

impl CountWord for u64 {
    fn run_engine(
        kind: EngineKind,
        settings: &Settings,
        worker: &impl Worker<u64>,
    ) -> Result<(u64, Box<dyn Table<u64>>), Error> {
        let threads = settings.threads.max(1);
        match kind {
            EngineKind::Batched => run(
                shared::SharedMap::new(settings.size_hint, true)?,
                threads,
                worker,
            ),
            EngineKind::Unbatched => run(
                shared::SharedMap::new(settings.size_hint, false)?,
                threads,
                worker,
            ),
            EngineKind::Delegated => run(
                delegated::Delegated::new(settings.size_hint, threads)?,
                threads,
                worker,
            ),
            EngineKind::Compact => run(
                compact::Compact::<u64>::new(settings.k, settings.size_hint)?,
                threads,
                worker,
            ),
        }
    }
}

impl CountWord for u128 {
    fn run_engine(
        kind: EngineKind,
        settings: &Settings,
        worker: &impl Worker<u128>,
    ) -> Result<(u64, Box<dyn Table<u128>>), Error> {
        if kind == EngineKind::Compact {
            let engine = compact::Compact::<u128>::new(settings.k, settings.size_hint)?;
            return run(engine, settings.threads.max(1), worker);
        }
        Err(Error::Usage(format!(
            "--engine {} counts k up to 32 (floe's maps hold 8-byte keys), not k = {}; the \
             compact engine (the default) counts k up to 64",
            kind.name(),
            settings.k
        )))
    }
}

/// What one pass of a count in passes ([`passes`]) may count and spend.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// Count only the k-mers whose [`prefix`] (the k-mer itself for k <= 32) is in this
    /// range (after canonicalizing); `None`: all.
    pub kmers: Option<RangeInclusive<u64>>,
    /// The most the table may take, in bytes (the compact engine only): past it the count
    /// fails with [`Error::OverBudget`] instead of growing.
    pub table_bytes: Option<usize>,
}

/// [`count`] within `limits`.
///
/// # Errors
/// As [`count`]; [`Error::OverBudget`] if the table would have to grow past
/// `limits.table_bytes`, and [`Error::Usage`] if a table cap is asked of an engine other than
/// the compact one.
pub fn count_within<W: CountWord>(
    input: Input,
    settings: &Settings,
    limits: &Limits,
) -> Result<Counts<W>, Error> {
    if limits.table_bytes.is_some() && settings.engine != EngineKind::Compact {
        return Err(Error::Usage(format!(
            "a memory budget needs the compact engine, not --engine {}",
            settings.engine.name()
        )));
    }
    let start = Instant::now();
    let worker = Extract::new(input, settings, limits.kmers.clone())?;
    let threads = settings.threads.max(1);
    let (total, table) = match settings.engine {
        EngineKind::Compact => run(
            compact::Compact::<W>::within(settings.k, settings.size_hint, limits.table_bytes)?,
            threads,
            &worker,
        )?,
        other => W::run_engine(other, settings, &worker)?,
    };
    let elapsed = start.elapsed();
    let mut sum = 0u64;
    table.for_each(&mut |_, n| sum = sum.wrapping_add(n));
    if sum != total {
        return Err(Error::Internal(format!(
            "the table holds {sum} k-mers but {total} were counted"
        )));
    }
    Ok(Counts {
        table,
        threads,
        total,
        elapsed,
    })
}

/// Runs the counting workers over `input` with `sinks` (one per thread) instead of an
/// engine's: every k-mer of the input (canonical ones with `settings.canonical`) goes to
/// some sink. Returns the k-mers given.
///
/// # Errors
/// As [`count`].
pub(crate) fn extract_into<W: Word, S: Sink<W> + Send>(
    input: Input,
    settings: &Settings,
    sinks: Vec<S>,
) -> Result<u64, Error> {
    run_workers(sinks, &Extract::<W>::new(input, settings, None)?)
}

/// Runs `engine` and takes its table.
fn run<W: Word>(
    engine: impl Engine<W>,
    threads: usize,
    worker: &impl Worker<W>,
) -> Result<(u64, Box<dyn Table<W>>), Error> {
    let total = engine.run(threads, worker)?;
    Ok((total, engine.into_table()))
}

/// The worker: parse a chunk under the input's lock, extract its k-mers outside it.
struct Extract<W> {
    input: Mutex<Input>,
    k: usize,
    canonical: bool,
    /// The k-mers to count (one pass of a count in passes); `None`: all.
    kmers: Option<RangeInclusive<u64>>,
    /// Set by a worker that failed, so the others stop at their next chunk. Relaxed: it is
    /// only a hint to stop early; the error itself travels through the threads' join.
    stop: AtomicBool,
    word: core::marker::PhantomData<fn() -> W>,
}

impl<W: Word> Worker<W> for Extract<W> {
    fn work<S: Sink<W>>(&self, sink: &mut S) -> Result<u64, Error> {
        let result = self.extract(sink);
        if result.is_err() {
            self.stop.store(true, Relaxed);
        }
        result
    }
}

impl<W: Word> Extract<W> {
    /// The workers' shared state for a count of `input` by `settings`, of the k-mers whose
    /// prefixes are in `kmers` only if given.
    fn new(
        mut input: Input,
        settings: &Settings,
        kmers: Option<RangeInclusive<u64>>,
    ) -> Result<Extract<W>, Error> {
        if !(1..=W::MAX_K).contains(&settings.k) {
            return Err(Error::Usage(format!(
                "k = {} is not in 1..={} (a k-mer is packed in {} bits)",
                settings.k,
                W::MAX_K,
                W::BITS
            )));
        }
        input.set_k(settings.k);
        Ok(Extract {
            input: Mutex::new(input),
            k: settings.k,
            canonical: settings.canonical,
            kmers,
            stop: AtomicBool::new(false),
            word: core::marker::PhantomData,
        })
    }

    fn extract(&self, sink: &mut impl Sink<W>) -> Result<u64, Error> {
        let mut chunk = Vec::new();
        let mut batch = Vec::with_capacity(BATCH);
        let mut added = 0u64;
        while !self.stop.load(Relaxed) {
            let more = match self.input.lock() {
                Ok(mut input) => input.next_chunk(&mut chunk)?,
                // A worker panicked while parsing; its panic is the count's answer.
                Err(_) => break,
            };
            if !more {
                break;
            }
            // The range's test only in a pass that has one (the common count has none).
            let kmers = Kmers::<W>::new(&chunk, self.k, self.canonical);
            let mut take = |kmer| {
                batch.push(kmer);
                if batch.len() == BATCH {
                    sink.add(&batch)?;
                    added += BATCH as u64;
                    batch.clear();
                }
                Ok::<_, Error>(())
            };
            match &self.kmers {
                None => kmers.into_iter().try_for_each(&mut take)?,
                Some(range) => kmers
                    .into_iter()
                    .filter(|&kmer| range.contains(&prefix(kmer, self.k)))
                    .try_for_each(&mut take)?,
            }
        }
        if !batch.is_empty() {
            sink.add(&batch)?;
            added += batch.len() as u64;
        }
        Ok(added)
    }
}

/// A worker for the engines' tests: adds the k-mers 0, 1, 2, ... below `n`, each twice, in
/// batches of 100.
#[cfg(test)]
pub(crate) struct Numbers(pub(crate) u64);

#[cfg(test)]
impl<W: Word> Worker<W> for Numbers {
    fn work<S: Sink<W>>(&self, sink: &mut S) -> Result<u64, Error> {
        let kmers: Vec<W> = (0..self.0)
            .chain(0..self.0)
            .map(|n| W::truncate(u128::from(n)))
            .collect();
        for batch in kmers.chunks(100) {
            sink.add(batch)?;
        }
        Ok(2 * self.0)
    }
}

/// A table's k-mers and counts, for the engines' tests.
#[cfg(test)]
pub(crate) fn table_kmers<W: Word>(table: &dyn Table<W>) -> Vec<(W, u64)> {
    let mut kmers = Vec::with_capacity(table.len());
    table.for_each(&mut |kmer, count| kmers.push((kmer, count)));
    kmers
}
