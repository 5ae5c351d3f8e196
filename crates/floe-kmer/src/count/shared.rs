//! The shared-map engines: every worker adds into one `floe::FlatMap<u64, u64>` (k-mer to
//! count), in batches of prefetched `fetch_add` requests (`batched`) or one call per k-mer
//! (`unbatched`).

use floe::FlatMap;

use super::{run_workers, Engine, Sink, Table, Worker};
use crate::Error;

/// One map that all workers count into.
pub struct SharedMap {
    map: FlatMap<u64, u64>,
    batched: bool,
}

impl SharedMap {
    /// A map sized for `size_hint` distinct k-mers (it grows past them on its own), counted
    /// into in batches or not.
    ///
    /// # Errors
    /// [`Error::Usage`] if a table of that size cannot be had: the hint is the command
    /// line's.
    pub fn new(size_hint: usize, batched: bool) -> Result<SharedMap, Error> {
        let map = FlatMap::try_with_capacity(size_hint).map_err(|error| {
            Error::Usage(format!(
                "cannot make a table for {size_hint} k-mers (the size hint, -s): {error}"
            ))
        })?;
        Ok(SharedMap { map, batched })
    }
}

impl Engine for SharedMap {
    fn run(&self, threads: usize, worker: &impl Worker) -> Result<u64, Error> {
        let map = &self.map;
        if self.batched {
            let sinks = (0..threads).map(|_| Batched::new(map)).collect();
            run_workers(sinks, worker)
        } else {
            run_workers(vec![Unbatched { map }; threads], worker)
        }
    }

    fn into_table(self) -> Box<dyn Table> {
        Box::new(self.map)
    }
}

impl Table for FlatMap<u64, u64> {
    fn for_each(&self, visit: &mut dyn FnMut(u64, u64)) {
        FlatMap::for_each(self, visit);
    }

    fn len(&self) -> usize {
        FlatMap::len(self)
    }
}

/// A worker's batches: its requests, reused from batch to batch.
struct Batched<'m> {
    map: &'m FlatMap<u64, u64>,
    /// The batch's `(k-mer, 1)` pairs, for the typed batch (`Batch::fetch_add_each`: no
    /// request to decode per k-mer).
    pairs: Vec<(u64, u64)>,
}

impl<'m> Batched<'m> {
    fn new(map: &'m FlatMap<u64, u64>) -> Self {
        Batched {
            map,
            pairs: Vec::with_capacity(super::BATCH),
        }
    }
}

impl Sink for Batched<'_> {
    fn add(&mut self, kmers: &[u64]) -> Result<(), Error> {
        self.pairs.clear();
        self.pairs.extend(kmers.iter().map(|&kmer| (kmer, 1)));
        let mut refused = None;
        // A fetch_add fails only when its key is new and the table cannot take it (no memory
        // for a growth); the batch stops there and the count fails with it.
        self.map
            .batch()
            .stop_on_failure(true)
            .fetch_add_each(&self.pairs, |_, previous| {
                if let Err(error) = previous {
                    refused = Some(error);
                }
            });
        refused.map_or(Ok(()), |error| Err(Error::Table(error)))
    }

    fn finish(self) -> Result<(), Error> {
        Ok(())
    }
}

/// A worker's handle that adds one k-mer per call.
#[derive(Clone, Copy)]
struct Unbatched<'m> {
    map: &'m FlatMap<u64, u64>,
}

impl Sink for Unbatched<'_> {
    fn add(&mut self, kmers: &[u64]) -> Result<(), Error> {
        for &kmer in kmers {
            self.map.try_fetch_add(kmer, 1).map_err(Error::Table)?;
        }
        Ok(())
    }

    fn finish(self) -> Result<(), Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::count::Numbers;

    fn capped(bins: usize, batched: bool) -> SharedMap {
        let map = FlatMap::builder()
            .bins(bins)
            .max_bins(bins)
            .build()
            .expect("a small map");
        SharedMap { map, batched }
    }

    #[test]
    fn both_sinks_count_every_kmer_on_every_thread() {
        for batched in [true, false] {
            let engine = capped(1 << 12, batched);
            assert_eq!(engine.run(3, &Numbers(5000)).unwrap(), 30_000);
            let mut counts = crate::count::table_kmers(&*engine.into_table());
            counts.sort_unstable();
            assert_eq!(counts, (0..5000).map(|k| (k, 6)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_full_table_fails_the_count() {
        // Two bins cannot hold 5000 keys and may not grow: the count must fail, not drop them.
        for batched in [true, false] {
            let result = capped(2, batched).run(2, &Numbers(5000));
            assert!(
                matches!(result, Err(Error::Table(floe::Error::Full))),
                "batched: {batched}: {result:?}"
            );
        }
    }
}
