//! Opening a persistent cache (`-e`): its store, and the restore that runs in the background
//! while the server serves (on workers of its own, which replay the records).

use core::sync::atomic::Ordering;
use std::{sync::Arc, time::Instant};

use floe::hash::DefaultHashBuilder;

use super::shared::{Cache, Clock, OpenError, Settings};
use crate::persist::{Replayed, Restore, Store, StoreError, StoreOptions};

impl Cache {
    /// A cache with the system clock whose items are kept in `dir` (`-e`, `persist.rs`).
    /// The directory's files are read and checked here; the items they hold are restored by
    /// a thread of their own while the server already serves: reads meanwhile find the
    /// items restored so far (a key not yet restored is a miss, as in any cache warming up),
    /// and writes wait until the restore is done ([`Cache::wait_restored`]), so no write
    /// can be overtaken by an older restored value and no delete or flush undone.
    ///
    /// # Errors
    /// The directory cannot be created, locked (another server has it) or read, or holds a
    /// foreign or damaged file (`StoreError` says which); the directory is left as it was.
    pub fn open(
        settings: Settings,
        dir: &std::path::Path,
        options: StoreOptions,
    ) -> Result<(Arc<Cache>, Replayed), OpenError> {
        let started = Instant::now();
        let cache = Arc::new(
            Self::with_clock(
                settings,
                Clock::System(Instant::now()),
                DefaultHashBuilder::new(),
            )
            .map_err(OpenError::Map)?,
        );
        let workers = cache.settings.workers;
        let now_unix = cache.process_started + cache.now() as i64;
        let (store, replayed, replay) =
            Store::open(dir, workers, options, now_unix).map_err(OpenError::Store)?;
        let restore = replay.restore();
        cache
            .flush_generation
            .store(restore.generation, Ordering::Relaxed);
        if restore.oldest_live != 0 {
            let when = (restore.oldest_live - cache.process_started).clamp(1, u32::MAX as i64);
            cache.oldest_live.store(when as u32, Ordering::Relaxed);
            cache.note_expiry();
        }
        cache
            .next_unique
            .fetch_max(restore.max_cas.saturating_add(1), Ordering::Relaxed);
        cache.restoring.store(true, Ordering::Relaxed);
        let background = Arc::clone(&cache);
        let spawned = std::thread::Builder::new()
            .name("floe-restore".into())
            .spawn(move || {
                let restoring =
                    std::panic::AssertUnwindSafe(|| background.restore(replay.restore()));
                let Ok(restored) = std::panic::catch_unwind(restoring) else {
                    // A bug. Writes wait for the restore, so going on would hang them, and a
                    // snapshot of a half-restored map would lose items: stop here (the
                    // directory is as it was, the next start restores it).
                    crate::log!(0, "the restore failed; stopping");
                    std::process::abort();
                };
                crate::log!(
                    1,
                    "restored {restored} items in {:.3} s",
                    started.elapsed().as_secs_f64()
                );
                drop(replay);
                // The store is set only now: nothing is journaled while the items go in (no
                // write runs), and a checkpoint cannot snapshot a half-restored map.
                if background.store.set(store).is_err() {
                    unreachable!("the store is set once, here");
                }
                background.finish_restore();
            });
        if let Err(error) = spawned {
            return Err(OpenError::Store(StoreError::Io(
                "start the restore of",
                dir.to_path_buf(),
                error,
            )));
        }
        Ok((cache, replayed))
    }

    /// Restore replay's items, split over one thread per worker, each filling its own
    /// eviction queue (nothing else touches the queues meanwhile: only writes evict, and they
    /// wait). Returns how many were restored.
    fn restore(self: &Arc<Self>, restore: &Restore<'_>) -> usize {
        // One growth up front rather than one per doubling while the items go in (best
        // effort: a map that cannot reserve grows as it fills).
        let _ = self.index.reserve(restore.items.len());
        let workers = self.settings.workers;
        let chunk = restore.items.len().div_ceil(workers).max(1);
        std::thread::scope(|scope| {
            let threads: Vec<_> = restore
                .items
                .chunks(chunk)
                .enumerate()
                .map(|(id, items)| {
                    scope.spawn(move || {
                        let mut worker = self.worker(id);
                        let mut restored = 0;
                        // Short sessions: a pin held for the whole restore would keep every
                        // item evicted meanwhile allocated.
                        for batch in items.chunks(1024) {
                            restored += worker.session().restore(batch);
                        }
                        restored
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|thread| thread.join().expect("a restore thread panicked"))
                .sum()
        })
    }
}
