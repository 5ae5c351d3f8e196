//! A table's backing: what a default-layout table keeps of a persistent map's file, or
//! nothing for a table in memory. The table asks it the few questions persistence adds to
//! the engine (is there a file, does every operation write its lines back, does a growth
//! order its moves, sync these bytes) and never reaches past it into the file; only the
//! persistence engine does (`persist/`: the file's mapping, the runs of link buckets a
//! recovery found unchained).
//!
//! Under `floe_loom`, which builds no persistence, [`Backing`] is a zero-sized twin with the
//! methods the engine calls in both builds, answering "in memory", and [`Writeback`] an
//! empty enum, as `sync.rs` swaps the atomics: the engine's code is the same in both builds,
//! with no `cfg` of its own, and the branches on a file are dead code the compiler drops.

#[cfg(not(floe_loom))]
pub(crate) use self::file::{Backing, TableFile, Writeback};
#[cfg(floe_loom)]
pub(crate) use self::in_memory::{Backing, Writeback};

#[cfg(not(floe_loom))]
mod file {
    use std::{
        io,
        ops::Range,
        sync::{
            atomic::{AtomicI32, Ordering},
            Arc, Mutex, PoisonError,
        },
    };

    use crate::raw::alloc::{Region, PAGE};
    #[cfg(feature = "crash-points")]
    use crate::raw::persist::writeback;
    pub(crate) use crate::raw::persist::writeback::Writeback;

    /// A persistent map's table file: its generation (the file's name, `persist/store.rs`)
    /// and its mapping.
    pub(crate) struct TableFile {
        pub(crate) gen: u64,
        pub(in crate::raw) region: Arc<Region>,
    }

    /// A table's backing (module docs).
    pub(crate) struct Backing {
        /// The table's file, for a persistent table.
        file: Option<TableFile>,
        /// `Durability::Flush`: how every operation writes its bin's lines back before it
        /// returns (`persist/writeback.rs`); `None` for every other table.
        writeback: Option<Writeback>,
        /// A growth into this table syncs each chunk's copies before it retires their old
        /// slots (a persistent table on a disk at `Durability::Process`; `bins/migrate.rs`,
        /// "Power loss during a move").
        ordered_moves: bool,
        /// The error number of a sync of ordered moves that failed (0: none): the next
        /// checkpoint reports it.
        move_sync_failed: AtomicI32,
        /// Runs of link buckets below the pool cursors that no bin chains, which the table's
        /// transfers take before the regular pool: found by the recovery of a table a
        /// migration was filling (`persist/recover.rs`, "Link buckets a power loss
        /// unchained"); empty otherwise.
        pub(in crate::raw) unchained: Mutex<Vec<Range<usize>>>,
    }

    impl Backing {
        /// A table in memory.
        pub(crate) fn in_memory() -> Self {
            Backing {
                file: None,
                writeback: None,
                ordered_moves: false,
                move_sync_failed: AtomicI32::new(0),
                unchained: Mutex::new(Vec::new()),
            }
        }

        /// A table in `file`, written back as `writeback` says, ordering a growth's moves
        /// into it if `ordered_moves`.
        pub(crate) fn file(
            file: TableFile,
            writeback: Option<Writeback>,
            ordered_moves: bool,
        ) -> Self {
            Backing {
                file: Some(file),
                writeback,
                ordered_moves,
                ..Self::in_memory()
            }
        }

        /// Whether the table is a file's.
        #[inline(always)]
        pub(crate) fn is_file(&self) -> bool {
            self.file.is_some()
        }

        /// The table's file.
        pub(crate) fn table_file(&self) -> Option<&TableFile> {
            self.file.as_ref()
        }

        /// How operations write their lines back (`Durability::Flush`), if they do.
        #[inline(always)]
        pub(crate) fn writeback(&self) -> Option<Writeback> {
            self.writeback
        }

        /// Whether a growth into the table orders its moves.
        #[inline(always)]
        pub(crate) fn orders_moves(&self) -> bool {
            self.ordered_moves
        }

        /// Under the `crash-points` feature, log the line at `line` (of this table's file)
        /// with what it holds (`contents`, read before the write-back, so the log never
        /// holds a store the write-back may have missed); nothing otherwise.
        #[inline(always)]
        pub(crate) fn log_written_back(
            &self,
            line: *const u8,
            contents: impl FnOnce() -> [u64; 8],
        ) {
            #[cfg(feature = "crash-points")]
            if let Some(file) = &self.file {
                writeback::log::written_back(file.gen, file.region.offset_of(line), contents);
            }
            #[cfg(not(feature = "crash-points"))]
            let _ = (line, contents);
        }

        /// Sync the pages holding the byte ranges `ranges` of the table's file and wait for
        /// the disk (nothing for a table in memory). A failure (the device's) is kept for
        /// [`take_sync_failure`](Self::take_sync_failure), not returned: the caller, a
        /// growth, cannot wait for a device that may never answer.
        pub(crate) fn sync_ranges(&self, ranges: impl IntoIterator<Item = Range<usize>>) {
            let Some(file) = &self.file else {
                return;
            };
            let mut pages: Vec<usize> = ranges
                .into_iter()
                .filter(|range| !range.is_empty())
                .flat_map(|range| range.start / PAGE..=(range.end - 1) / PAGE)
                .collect();
            pages.sort_unstable();
            pages.dedup();
            for run in pages.chunk_by(|a, b| b == &(a + 1)) {
                let (first, last) = (run[0], run[run.len() - 1]);
                #[cfg(feature = "crash-points")]
                writeback::log::synced(file.gen, run.iter().map(|page| page * PAGE), |offset| {
                    file.region.page_words(offset)
                });
                if let Err(error) = file.region.sync_range(first * PAGE..(last + 1) * PAGE) {
                    let errno = error.raw_os_error().unwrap_or(libc::EIO);
                    // Relaxed: a report, not a synchronization: a checkpoint racing the growth
                    // may miss it, and the next one reports it.
                    self.move_sync_failed.store(errno, Ordering::Relaxed);
                }
            }
        }

        /// The error of a sync of [`sync_ranges`](Self::sync_ranges) that failed since the
        /// last call (which clears it).
        pub(crate) fn take_sync_failure(&self) -> Option<io::Error> {
            match self.move_sync_failed.swap(0, Ordering::Relaxed) {
                0 => None,
                errno => Some(io::Error::from_raw_os_error(errno)),
            }
        }

        /// `width` consecutive link buckets from the runs a recovery found unchained
        /// (`persist/recover.rs`, `Sweeper::unchained`), or `None`. Only a transfer takes
        /// them, after the reserve. The shortest run that fits: a single bucket taken from a
        /// run of two would leave a pair's demand two runs of one.
        pub(crate) fn take_unchained(&self, width: usize) -> Option<usize> {
            let mut runs = self
                .unchained
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let run = runs
                .iter_mut()
                .filter(|run| run.len() >= width)
                .min_by_key(|run| run.len())?;
            run.start += width;
            Some(run.start - width)
        }
    }
}

/// The twins under `floe_loom` (module docs): a table is always in memory.
#[cfg(floe_loom)]
mod in_memory {
    use std::ops::Range;

    /// No line is ever written back: the enum has no value, so code holding one is
    /// unreachable and compiled away.
    #[derive(Clone, Copy)]
    pub(crate) enum Writeback {}

    impl Writeback {
        pub(crate) fn line(self, _line: *const u8) {
            match self {}
        }

        pub(crate) fn fence(self) {
            match self {}
        }
    }

    /// A table in memory, zero-sized.
    pub(crate) struct Backing;

    impl Backing {
        pub(crate) fn in_memory() -> Self {
            Backing
        }

        #[inline(always)]
        pub(crate) fn is_file(&self) -> bool {
            false
        }

        #[inline(always)]
        pub(crate) fn writeback(&self) -> Option<Writeback> {
            None
        }

        #[inline(always)]
        pub(crate) fn orders_moves(&self) -> bool {
            false
        }

        #[inline(always)]
        pub(crate) fn log_written_back(
            &self,
            _line: *const u8,
            _contents: impl FnOnce() -> [u64; 8],
        ) {
        }

        pub(crate) fn sync_ranges(&self, _ranges: impl IntoIterator<Item = Range<usize>>) {}

        pub(crate) fn take_unchained(&self, _width: usize) -> Option<usize> {
            None
        }
    }
}
