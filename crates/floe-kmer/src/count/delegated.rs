//! The delegated engine: a `floe::delegate::Partitioned` map, one partition per worker. Each
//! worker sends every k-mer's `fetch_add` to the worker that owns its partition (through the
//! section queues) and applies the ones sent to it, in prefetched batches, whenever it sends a
//! section or waits; the hot k-mers of a skewed input stay in their owner's cache instead of
//! moving between the cores that count them (DRAMHiT-P's k-mer counting).

use floe::{
    delegate::{Handle, Partitioned},
    FlatMap,
};

use super::{run_workers, Engine, Sink, Table, Worker};
use crate::Error;

/// The partitioned map the workers count into.
pub struct Delegated {
    map: Partitioned<u64, u64>,
}

impl Delegated {
    /// A map of `threads` partitions sized together for `size_hint` distinct k-mers (they
    /// grow past it on their own).
    ///
    /// # Errors
    /// [`Error::Usage`] if the tables cannot be had: the hint is the command line's.
    pub fn new(size_hint: usize, threads: usize) -> Result<Delegated, Error> {
        let map = Partitioned::builder(threads)
            .map(FlatMap::builder().capacity(size_hint))
            .build()
            .map_err(|error| {
                Error::Usage(format!(
                    "cannot make tables for {size_hint} k-mers (the size hint, -s) on \
                     {threads} threads: {error}"
                ))
            })?;
        Ok(Delegated { map })
    }
}

impl Engine for Delegated {
    fn run(&self, threads: usize, worker: &impl Worker) -> Result<u64, Error> {
        debug_assert_eq!(threads, self.map.threads());
        let handles = self.map.handles().map_err(Error::Table)?;
        run_workers(handles.into_iter().map(Counter).collect(), worker)
    }

    fn into_table(self) -> Box<dyn Table> {
        Box::new(self.map)
    }
}

impl Table for Partitioned<u64, u64> {
    fn for_each(&self, visit: &mut dyn FnMut(u64, u64)) {
        Partitioned::for_each(self, visit);
    }

    fn len(&self) -> usize {
        Partitioned::len(self)
    }
}

/// A worker's handle on the partitioned map.
struct Counter<'m>(Handle<'m, u64, u64>);

impl Sink for Counter<'_> {
    fn add(&mut self, kmers: &[u64]) -> Result<(), Error> {
        for &kmer in kmers {
            // Refused only when the k-mer's partition is full (no memory for a growth).
            self.0.fetch_add(kmer, 1).map_err(Error::Table)?;
        }
        Ok(())
    }

    fn finish(self) -> Result<(), Error> {
        // Every k-mer this worker sent has been counted when `close` returns; an update that
        // failed at its partition is reported here (`Undelivered`) and fails the count.
        self.0.close(|_, _| {}).map_err(Error::Table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::count::Numbers;

    #[test]
    fn every_kmer_is_counted_on_every_thread() {
        let engine = Delegated::new(1000, 3).unwrap();
        assert_eq!(engine.run(3, &Numbers(5000)).unwrap(), 30_000);
        let mut counts = crate::count::table_kmers(&*engine.into_table());
        counts.sort_unstable();
        assert_eq!(counts, (0..5000).map(|k| (k, 6)).collect::<Vec<_>>());
    }

    #[test]
    fn a_full_partition_fails_the_count() {
        let map = Partitioned::builder(2)
            .map(FlatMap::builder().bins(2).max_bins(2))
            .build()
            .unwrap();
        let result = Delegated { map }.run(2, &Numbers(5000));
        assert!(
            matches!(
                result,
                Err(Error::Table(
                    floe::Error::Full | floe::Error::Undelivered { .. }
                ))
            ),
            "{result:?}"
        );
    }
}
