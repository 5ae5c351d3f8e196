//! The default layout's batch loops, compiled inside each backend's entry point
//! (`raw/dispatch.rs`): a batch of gets and a batch of mixed requests, each through the
//! lookahead ring (`raw/ring.rs`: each request's bin prefetched `far` requests before it
//! runs, its chained link buckets half a window before). Every request runs as its
//! single-key operation (`mod.rs`) on lines already loaded, in request order; a bin found
//! moved (a growth started during the batch) ends the loop, and the driver answers the rest
//! one by one.

use super::RawTable;
use crate::raw::{
    counter::Shard,
    layout::Bin,
    loader::LineLoader,
    prefetch_far,
    ring::{self, Locate},
    Full, Moved, Stopped, Upserted, WordDone, WordOp,
};

impl RawTable {
    /// Gets of requests `0..n` through a lookahead ring `far` deep (`ring.rs`): `locate(i)`
    /// is request i's (hash, key word), `answer(i, value)` takes its answer. Compiled inside
    /// the backend's entry point, so a get costs no call and no reader announcement of its
    /// own. `Err(i)`: the bin of request `i` has moved (a growth started during the batch);
    /// the requests before it are answered.
    #[inline(always)]
    pub(crate) fn get_batch<P: LineLoader>(
        &self,
        loader: P,
        n: usize,
        far: usize,
        locate: impl Locate,
        answer: impl FnMut(usize, Option<u64>),
    ) -> Result<(), usize> {
        struct Gets<'t, P, L, A> {
            table: &'t RawTable,
            loader: P,
            locate: L,
            answer: A,
        }
        impl<'t, P, L, A> ring::Stages for Gets<'t, P, L, A>
        where
            P: LineLoader,
            L: Locate,
            A: FnMut(usize, Option<u64>),
        {
            type Slot = (&'t Bin, u64);

            #[inline(always)]
            fn locate(&mut self, i: usize) -> (&'t Bin, u64) {
                let (hash, key) = self.locate.locate(i);
                (self.table.bin_of(hash), key)
            }

            #[inline(always)]
            fn prefetch(&mut self, &(bin, _): &(&'t Bin, u64)) {
                prefetch_far((bin as *const Bin).cast());
            }

            #[inline(always)]
            fn chase(&mut self, &mut (bin, key): &mut (&'t Bin, u64)) {
                self.table.chase_key(self.loader, bin, key);
            }

            #[inline(always)]
            fn run(&mut self, i: usize, (bin, key): (&'t Bin, u64)) -> Result<(), ()> {
                let value = self
                    .table
                    .get_in(self.loader, bin, key)
                    .map_err(|Moved| ())?;
                (self.answer)(i, value);
                Ok(())
            }
        }
        ring::run(
            &mut Gets {
                table: self,
                loader,
                locate,
                answer,
            },
            n,
            far,
        )
    }

    /// Requests `0..n` of a batch through a lookahead ring `far` deep (`ring.rs`), in order,
    /// on this table: `locate(i)` is request i's (hash, key word), `op(i)` what it asks,
    /// `add(i, old)` the value an `Add` leaves in place of `old`, `answer(i, done)` takes what
    /// it did and says whether to go on. Compiled inside the backend's entry point, so a
    /// request costs none of the single-key path's calls and checks (the caller holds the
    /// writers' gate and has checked that the table is not migrating; each write paces the
    /// preparation of the next table as a single one does). A request the engine cannot run
    /// here (a full bin, a moved bin, a shadowed key) stops the batch before it runs, for the
    /// caller to run through the single-key path, which grows, follows and waits.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_batch<P: LineLoader>(
        &self,
        loader: P,
        n: usize,
        far: usize,
        locate: impl Locate,
        op: impl Fn(usize) -> WordOp,
        add: impl Fn(usize, u64) -> u64,
        answer: impl FnMut(usize, WordDone) -> bool,
    ) -> Result<(), Stopped> {
        struct Requests<P, L, O, F, A> {
            loader: P,
            locate: L,
            op: O,
            add: F,
            answer: A,
            /// The request that stopped the ring ran.
            ran: bool,
        }
        impl<P, L, O, F, A> Requests<P, L, O, F, A>
        where
            P: LineLoader,
            O: Fn(usize) -> WordOp,
            F: Fn(usize, u64) -> u64,
        {
            /// Run request `i` on `bin`, counting the keys it inserts in `len`; `None` if it
            /// cannot run here.
            #[inline(always)]
            fn apply(
                &self,
                table: &RawTable,
                len: &Shard<'_>,
                i: usize,
                bin: &Bin,
                hash: u64,
                key: u64,
            ) -> Option<WordDone> {
                let op = (self.op)(i);
                if op == WordOp::Get {
                    return table.get_in(self.loader, bin, key).ok().map(WordDone::Get);
                }
                table.pace_preparation(hash);
                let writer = self.loader.writer();
                let bin_index = table.index_of(bin);
                let upserted = |result: Result<Result<Upserted, Full>, Moved>| match result {
                    Ok(Ok(Upserted::Done(before))) => Some(before),
                    _ => None,
                };
                Some(match op {
                    WordOp::Get => unreachable!("answered above"),
                    WordOp::Insert(value) => {
                        match table
                            .insert_counted::<_, false>(writer, bin, bin_index, key, value, len)
                        {
                            Ok(Ok(inserted)) => WordDone::Insert(inserted),
                            _ => return None,
                        }
                    }
                    WordOp::Upsert(value) => WordDone::Upsert(upserted(table.upsert_counted(
                        writer,
                        bin,
                        bin_index,
                        key,
                        value,
                        |_| value,
                        len,
                    ))?),
                    WordOp::Add(delta) => WordDone::Add(upserted(table.upsert_counted(
                        writer,
                        bin,
                        bin_index,
                        key,
                        delta,
                        |old| (self.add)(i, old),
                        len,
                    ))?),
                    WordOp::Put(value) => WordDone::Put(
                        table
                            .update(writer, bin_index, key, |_| value)
                            .ok()?
                            .map(|(old, _)| old),
                    ),
                    WordOp::Remove => WordDone::Remove(table.remove(writer, bin_index, key).ok()?),
                })
            }
        }
        struct Stages<'t, P, L, O, F, A> {
            table: &'t RawTable,
            /// The batch's thread's shard of `len`, looked up once.
            len: Shard<'t>,
            requests: Requests<P, L, O, F, A>,
        }
        impl<'t, P, L, O, F, A> ring::Stages for Stages<'t, P, L, O, F, A>
        where
            P: LineLoader,
            L: Locate,
            O: Fn(usize) -> WordOp,
            F: Fn(usize, u64) -> u64,
            A: FnMut(usize, WordDone) -> bool,
        {
            /// The bin, the hash and the key word.
            type Slot = (&'t Bin, u64, u64);

            #[inline(always)]
            fn locate(&mut self, i: usize) -> (&'t Bin, u64, u64) {
                let (hash, key) = self.requests.locate.locate(i);
                (self.table.bin_of(hash), hash, key)
            }

            #[inline(always)]
            fn prefetch(&mut self, &(bin, _, _): &(&'t Bin, u64, u64)) {
                prefetch_far((bin as *const Bin).cast());
            }

            #[inline(always)]
            fn chase(&mut self, &mut (bin, _, key): &mut (&'t Bin, u64, u64)) {
                self.table.chase_key(self.requests.loader, bin, key);
            }

            #[inline(always)]
            fn run(&mut self, i: usize, (bin, hash, key): (&'t Bin, u64, u64)) -> Result<(), ()> {
                let done = self
                    .requests
                    .apply(self.table, &self.len, i, bin, hash, key)
                    .ok_or(())?;
                if (self.requests.answer)(i, done) {
                    Ok(())
                } else {
                    self.requests.ran = true;
                    Err(())
                }
            }
        }
        let mut stages = Stages {
            table: self,
            len: self.len.shard(),
            requests: Requests {
                loader,
                locate,
                op,
                add,
                answer,
                ran: false,
            },
        };
        ring::run(&mut stages, n, far).map_err(|at| Stopped {
            at,
            ran: stages.requests.ran,
        })
    }
}
