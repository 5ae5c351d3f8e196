//! [`PersistentMap`]: a [`Map`] for any key and value whose writes are journaled to files,
//! so that it comes back after a crash.
//!
//! # Design
//!
//! A [`FlatMap`](crate::FlatMap) can live in its files because its table *is* its data; a
//! `Map`'s table holds pointers to heap entries, which mean nothing to the next process. So
//! this map keeps its entries in memory as a `Map` does (a thin shell over one, storing
//! [`Durable`] values) and logs what every write did to a journal (`journal.rs`): records in
//! file-backed shared mappings, which a process crash cannot lose once written, with no
//! system call per write. Snapshots compact the journals in the background. Reading order:
//! this essay, `journal.rs` (the files), then the code below.
//!
//! ## Promises
//!
//! 1. **Process crash** (panic, abort, SIGKILL at any instant, during a growth or a
//!    compaction too): the reopened map holds every write that returned, and each write in
//!    flight wholly or not at all, consistently with what any returned read saw (durable
//!    linearizability, per key).
//! 2. **Power loss**: the state as of the last [`PersistentMap::checkpoint`] that returned,
//!    plus possibly later writes, per key a prefix of its history.
//! 3. A clean [`PersistentMap::close`] (or drop) writes a snapshot, so the next open reads one
//!    file.
//!
//! ## Every write is one swap, logged before it
//!
//! A `Map` write reads the key's value word, decides, and swaps the word (an engine insert,
//! a 16-byte CAS or a remove); a lost race decides again on the newer value (`compute`). Here
//! each attempt, between its decision and its swap, takes a sequence number `seq` and writes a
//! *pending* record `(seq, prev, key, new value or removal)` to its lane's journal, where
//! `prev` is the sequence number of the value it read (stored in the [`Durable`] beside the
//! value; 0 if it read the key absent). If the swap wins, the writer marks the record
//! *confirmed* before returning; if it loses, the next attempt first marks it *void*. So:
//!
//! - Per key, a successful write whose `prev` is a number follows exactly the value with that
//!   number (each number is taken once, and an entry's number never changes), so those
//!   writes form chains through `prev` in the map's order; numbers grow along a chain, since a
//!   writer takes its number after reading what it replaces, which happens after that value's
//!   number was taken (the map's Release swap and Acquire read order them, and one atomic
//!   counter's values follow happens-before).
//! - A write from absence (`prev` 0) does not say *which* absence: an insert is "if absent",
//!   so one decided on an absence can land on a later one, after the key came and went, with a
//!   number below that removal's (a review found this; an earlier replay lost such a write).
//! - A record is written before its swap can be seen: whatever a returned read saw has its
//!   record in the files.
//!
//! ## Replay (`journal::replay`)
//!
//! Per key, replay follows *segments*: one from the snapshot's value, and one from each write
//! from absence that *happened*; each step takes a record naming the current value's number
//! as `prev`, until a removal ends the segment or nothing follows. Void records are skipped.
//! A record is known to have happened if it is confirmed (by its writer after its swap, or by
//! a reader, below), another record names it (its writer read it from the map), or the
//! snapshot holds it. At a step, the earliest candidate that happened is taken (at most one
//! did: each won a swap from the same value); if none did, every candidate was in flight at
//! the crash:
//!
//! - A put in flight is not taken: a read that finds a value whose record is still pending
//!   confirms it itself (one store, [`PersistentRef::seen`]) before returning it, and a write
//!   that replaces it names it, so an unconfirmed, unnamed put was seen by nobody and may be
//!   dropped whole. (After a power loss it may even have lost its race, its void unwritten.)
//! - An absence cannot be confirmed by the read that sees it, so a removal in flight is
//!   taken.
//!
//! In a history at most one segment ends with a value: a write from absence needs every
//! earlier value removed. That value is the key's state; if every segment ends in a removal,
//! the key is absent. So every process-crash state of the files replays to a state that
//! includes every returned write and every value or absence a returned read saw, and
//! otherwise only whole in-flight writes: promise 1. After a power loss a chain stops at the
//! first record the disk lost (a later record naming it has no predecessor to follow), and a
//! lost removal can leave two segments ending with values, both held after the last
//! checkpoint (the newest-numbered is kept, and the open compacts before taking writes so the
//! choice is written down): promise 2.
//!
//! An open after a crash *settles* what it chose: each record the crash left pending is
//! marked confirmed if replay took its step, void if not (`journal::settle`, synced), before
//! the map takes writes, so that a second crash before the journals are compacted replays
//! the old records to the same choices beside the new run's (whose numbers are above every
//! number in the files, and whose `prev` name the values replay produced).
//!
//! ## Compaction
//!
//! Each write holds its lane's lock from its first record to its confirmation. A compaction
//! takes every lane's lock in turn to move it to the next generation's journal files (so no
//! write straddles the switch), then walks the live map and writes each entry with its
//! number to a snapshot, synced and renamed into place, and deletes the older files. A key's
//! snapshot entry is what the walk read; any later write is in the new journals with a
//! `prev` the chain reaches from it (or from the key's absence). The old chunks stay mapped
//! until no guard that could hold a pointer to a state byte in them remains (the map's
//! collector frees them): a reader may be about to confirm a record in one.

use core::{
    borrow::Borrow,
    fmt,
    hash::{BuildHasher, Hash},
};
use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering},
        Arc, Condvar, Mutex,
    },
    thread::JoinHandle,
};

use serde::{de::DeserializeOwned, Serialize};

use crate::{
    any_map::{Compute, Map, MapRef, Operation},
    error::{Error, StorageError, StorageErrorKind},
    hash::DefaultHashBuilder,
    journal::{self, crash_point, Identity, Journal, Kind, StateByte, CONFIRMED, VOID},
    map::{Builder, ForMap, Insert},
};

/// A value as the map stores it: the user's value, the sequence number of the write that
/// stored it, and its record's state byte while that write has not confirmed it.
pub(crate) struct Durable<V> {
    value: V,
    seq: u64,
    /// The record's state byte while it may be pending; null once confirmed.
    pending: AtomicPtr<AtomicU8>,
}

/// Journal bytes that trigger a compaction, at least (and twice the last snapshot's size).
const COMPACT_AFTER_MIN: u64 = 64 << 20;

/// What [`Builder::open`](crate::Builder#method.open-1) found in a [`PersistentMap`]'s
/// directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MapRecovery {
    /// The map had been closed cleanly: one snapshot, no journal.
    pub clean: bool,
    /// Keys in the map.
    pub keys: usize,
    /// Journal records read.
    pub records: usize,
    /// After a restart of the machine (a possible power loss): journal tails past their last
    /// checkpoint that did not read whole, unsynced journals whose header was lost, and
    /// unlisted journals holding records, dropped (the open then compacts). Without a
    /// restart, any of these is damage and the open is refused.
    pub torn: usize,
}

struct Shared<K, V, S> {
    map: Map<K, Durable<V>, S>,
    journal: Journal,
    /// The next write's sequence number.
    next_seq: AtomicU64,
    /// Held by a compaction (one at a time).
    compacting: Mutex<()>,
    /// Journal bytes after which the background thread compacts.
    compact_after: AtomicU64,
    /// `(compaction requested, closing)`, with the compactor's wake-up.
    requests: Mutex<(bool, bool)>,
    wake: Condvar,
    /// The last background compaction's error, for the next `checkpoint` to report.
    background_error: Mutex<Option<Error>>,
    /// A compaction is asked for and has not started: later crossings of the threshold do
    /// not wake the thread again.
    requested: AtomicBool,
}

/// A concurrent hash map for any serializable key and value, kept in files: every write is
/// journaled before it takes effect, so the map survives a crash of its process (and, up to
/// the last [`checkpoint`](Self::checkpoint), a power loss). Made by
/// [`Builder::build_persistent`](crate::Builder#method.build_persistent-1) or reopened by
/// [`PersistentMap::open`]; feature `serde`, Unix.
///
/// Its operations are those of a [`Map`] through a pinned handle ([`pin`](Self::pin)), with
/// writes answering `Result`: a write the journal cannot take (a full disk) changes nothing
/// and returns [`Error::Storage`]. Keys and values are stored with `postcard`; keys that are
/// equal must serialize to the same bytes (true of std's types and of derived impls; a key
/// type whose `Eq` is looser than its fields, such as a case-insensitive string, would split
/// a key's history in the files). The files name the key and value types by
/// `core::any::type_name`, which may change with the compiler or a module's path: such a
/// change makes an open answer `TypeMismatch` (the files are untouched).
///
/// ```
/// # fn main() -> Result<(), floe::Error> {
/// # let dir = std::env::temp_dir().join(format!("floe-doc-persistent-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// use floe::{Map, PersistentMap};
///
/// let map = Map::<String, Vec<u32>>::builder().build_persistent(&dir)?;
/// map.pin().insert("primes".to_string(), vec![2, 3, 5])?;
/// map.close()?;
///
/// let map = PersistentMap::<String, Vec<u32>>::open(&dir)?;
/// assert_eq!(map.pin().get("primes"), Some(&vec![2, 3, 5]));
/// # drop(map);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(())
/// # }
/// ```
pub struct PersistentMap<K, V, S = DefaultHashBuilder>
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    shared: Arc<Shared<K, V, S>>,
    compactor: Option<JoinHandle<()>>,
    /// `close` ran (its snapshot is written; `Drop` has nothing left to do).
    closed: bool,
}

/// A pinned handle on a [`PersistentMap`] ([`PersistentMap::pin`]): references it hands out
/// live as long as it.
pub struct PersistentRef<'m, K, V, S> {
    shared: &'m Shared<K, V, S>,
    map: MapRef<'m, K, Durable<V>, S>,
}

fn identity<K, V>() -> Identity<'static> {
    Identity {
        key: core::any::type_name::<K>(),
        value: core::any::type_name::<V>(),
    }
}

impl<K, V, S> Builder<K, V, S, ForMap>
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    /// Let [`open`](Self::open) repair a directory whose journals it would refuse as damaged
    /// (a record that fails its checksum anywhere, even below a checkpoint; a journal the
    /// manifest does not list holding records): open it as after a power loss instead,
    /// dropping each journal's records from the first that fails, and report how many places
    /// lost records ([`MapRecovery::torn`]). What was dropped is lost: the values it held may
    /// come back older. Missing files, files of the wrong length and damaged snapshots are
    /// refused still. Default `false`: damage is refused.
    pub fn repair(mut self, repair: bool) -> Self {
        self.config.repair = repair;
        self
    }

    /// Make a new, empty [`PersistentMap`] in directory `dir` (created if missing).
    ///
    /// # Errors
    /// [`Error::Storage`] if `dir` holds a map already
    /// ([`StorageErrorKind::Exists`](StorageErrorKind::Exists)), is locked by another process,
    /// or cannot be written; the builder's own errors as [`build`](Self::build).
    pub fn build_persistent(self, dir: impl AsRef<Path>) -> Result<PersistentMap<K, V, S>, Error> {
        let dir = dir.as_ref();
        self.create_in(dir).map_err(|error| error.at(dir))
    }

    fn create_in(self, dir: &Path) -> Result<PersistentMap<K, V, S>, Error> {
        if cfg!(miri) {
            return Err(Error::storage(StorageErrorKind::Unsupported));
        }
        let map = self.with_value::<Durable<V>>().build()?;
        let journal = Journal::create(dir, &identity::<K, V>())?;
        Ok(PersistentMap::start(map, journal, 1))
    }

    /// Reopen the [`PersistentMap`] in `dir` (after a clean close or a crash) with this
    /// builder's settings and hasher, and report what was found. After a crash, the records
    /// the crash left pending are given their fate in the files (synced) before this returns,
    /// and the background thread then folds the journals into a snapshot.
    ///
    /// # Errors
    /// [`Error::Storage`]: no map there, locked by another process, made for other key or
    /// value types or by another format version, damaged (a file the manifest lists missing,
    /// of another length or not a regular file; a record that fails its checksum below a
    /// journal's last checkpoint, or, on a machine that has not restarted since the map was
    /// opened, anywhere but as the one record a crash cut; a snapshot that does not check; a
    /// record that does not decode as `K` or `V`). A failed open changes no record (an error
    /// while settling leaves some records settled, as the next open would settle them).
    pub fn open(
        self,
        dir: impl AsRef<Path>,
    ) -> Result<(PersistentMap<K, V, S>, MapRecovery), Error> {
        let dir = dir.as_ref();
        self.open_in(dir).map_err(|error| error.at(dir))
    }

    fn open_in(self, dir: &Path) -> Result<(PersistentMap<K, V, S>, MapRecovery), Error> {
        if cfg!(miri) {
            return Err(Error::storage(StorageErrorKind::Unsupported));
        }
        let (journal, loaded) = Journal::open(dir, &identity::<K, V>(), self.config.repair)?;
        let mut contents = loaded.contents()?;
        let keys = contents.keys.len();
        let map = self.capacity(keys).with_value::<Durable<V>>().build()?;
        let undecodable = || {
            Error::storage(StorageErrorKind::Corrupt(
                "a record does not decode as the map's key or value type",
            ))
        };
        // Set when a key's files left two candidates (a power loss): the choice is written
        // down in a snapshot before the map takes writes.
        let mut needs_compaction = false;
        {
            let pinned = map.pin();
            for (key, (snapshot, records)) in contents.keys.iter_mut() {
                let (end, ambiguous) = journal::replay(snapshot.take(), records);
                needs_compaction |= ambiguous;
                let Some((value, seq)) = end else {
                    continue;
                };
                let key: K = postcard::from_bytes(key).map_err(|_| undecodable())?;
                let value: V = postcard::from_bytes(value).map_err(|_| undecodable())?;
                let durable = Durable {
                    value,
                    seq,
                    pending: AtomicPtr::new(core::ptr::null_mut()),
                };
                if !pinned.try_insert_new(key, durable)?.is_inserted() {
                    return Err(Error::storage(StorageErrorKind::Corrupt(
                        "two records name the same key",
                    )));
                }
            }
        }
        let recovery = MapRecovery {
            clean: contents.files.is_empty(),
            keys: map.len(),
            records: contents.records,
            torn: contents.torn,
        };
        // Every record left pending by the crash gets the fate replay gave it, in the files,
        // so that the next replay (if this run crashes too) chooses the same.
        let fates: Vec<(usize, u64, u8)> = contents
            .keys
            .values()
            .flat_map(|(_, records)| records)
            .filter_map(|r| {
                let (file, offset) = r.at?;
                Some((file, offset, if r.applied { CONFIRMED } else { VOID }))
            })
            .collect();
        journal::settle(&contents.files, &fates)?;
        // Records a power loss took (dropped above) leave their chunks with holes that the
        // rule of a machine that has not restarted would call damage: compact them away
        // before this boot is recorded as the map's (below), and before the map takes writes.
        needs_compaction |= contents.torn > 0;
        // New records go to fresh files of the next generation; the background thread folds
        // the replayed journals into a snapshot.
        drop(journal.next_generation());
        let next_seq =
            contents
                .max_seq
                .checked_add(1)
                .ok_or(Error::storage(StorageErrorKind::Corrupt(
                    "a record's sequence number is the largest there is",
                )))?;
        let map = PersistentMap::start(map, journal, next_seq);
        if needs_compaction {
            map.compact()?;
        } else if !contents.files.is_empty() {
            map.shared.request_compaction();
        }
        // This boot has the map open from here on (the tail rule, `journal.rs`): recorded
        // only once every journal an earlier boot left with holes is compacted away.
        map.shared.journal.record_open()?;
        Ok((map, recovery))
    }

    /// Reopen the [`PersistentMap`] in `dir` if there is one ([`open`](Self::open), whose
    /// [`MapRecovery`] comes back), else make a new one there
    /// ([`build_persistent`](Self::build_persistent); `None` in place of the recovery).
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("floe-doc-pm-ooc-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// use floe::Map;
    /// let (map, recovery) = Map::<String, u32>::builder().open_or_create(&dir)?;
    /// assert!(recovery.is_none()); // made
    /// map.pin().insert("a".to_string(), 1)?;
    /// map.close()?;
    /// let (map, recovery) = Map::<String, u32>::builder().open_or_create(&dir)?;
    /// assert!(recovery.is_some()); // opened
    /// assert_eq!(map.pin().get("a"), Some(&1));
    /// # drop(map);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`open`](Self::open) when a map is there; as
    /// [`build_persistent`](Self::build_persistent) when none is. A directory that holds a
    /// persistent [`FlatMap`](crate::FlatMap) is refused
    /// ([`StorageErrorKind::OtherKind`](StorageErrorKind::OtherKind)), and so is one that holds
    /// no map but other files ([`StorageErrorKind::NotEmpty`](StorageErrorKind::NotEmpty)).
    ///
    /// A directory with the kind's own files but not its marker (journals whose marker was
    /// removed, or a creation a crash interrupted) is refused as damaged
    /// ([`StorageErrorKind::Corrupt`](StorageErrorKind::Corrupt)) and left as it is: a new
    /// map made there would drop the old one's data.
    #[allow(clippy::type_complexity)] // the map, and what the open found: read at a glance
    pub fn open_or_create(
        self,
        dir: impl AsRef<Path>,
    ) -> Result<(PersistentMap<K, V, S>, Option<MapRecovery>), Error> {
        let dir = dir.as_ref();
        match crate::durable::map_kind(dir) {
            Some(crate::durable::PERSISTENT_MAP) => {
                self.open(dir).map(|(map, recovery)| (map, Some(recovery)))
            }
            Some(other) => Err(Error::storage(StorageErrorKind::OtherKind(other)).at(dir)),
            None => {
                crate::durable::refuse_orphans(
                    dir,
                    journal::is_own_file,
                    "journal files without the map's meta file: a damaged map, or a creation a crash interrupted (remove them to start anew)",
                )
                .map_err(|error| Error::storage(error).at(dir))?;
                self.build_persistent(dir).map(|map| (map, None))
            }
        }
    }
}

impl<K, V, S> PersistentMap<K, V, S>
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: BuildHasher + Default + Send + Sync + 'static,
{
    /// Reopen the map in `dir` with the default settings ([`Builder::open`](crate::Builder#method.open-1)
    /// reports what it found).
    ///
    /// # Errors
    /// As [`Builder::open`](crate::Builder#method.open-1).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, Error> {
        Map::<K, V>::builder()
            .hasher(S::default())
            .open(dir)
            .map(|(map, _)| map)
    }
}

impl<K, V, S> PersistentMap<K, V, S>
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    fn start(map: Map<K, Durable<V>, S>, journal: Journal, next_seq: u64) -> Self {
        let shared = Arc::new(Shared {
            map,
            journal,
            next_seq: AtomicU64::new(next_seq),
            compacting: Mutex::new(()),
            compact_after: AtomicU64::new(COMPACT_AFTER_MIN),
            requests: Mutex::new((false, false)),
            wake: Condvar::new(),
            background_error: Mutex::new(None),
            requested: AtomicBool::new(false),
        });
        let background = Arc::clone(&shared);
        let compactor = std::thread::Builder::new()
            .name("floe-compact".into())
            .spawn(move || background.compactor())
            .ok();
        PersistentMap {
            shared,
            compactor,
            closed: false,
        }
    }

    /// A pinned handle: reads hand out references that live as long as it (as [`Map::pin`]).
    pub fn pin(&self) -> PersistentRef<'_, K, V, S> {
        PersistentRef {
            shared: &self.shared,
            map: self.shared.map.pin(),
        }
    }

    /// The table layout of the map in memory (as [`Map::layout`]; chosen at each build and
    /// open, not stored in the files).
    pub fn layout(&self) -> crate::Layout {
        self.shared.map.layout()
    }

    /// Keys in the map (as [`Map::len`]).
    pub fn len(&self) -> usize {
        self.shared.map.len()
    }

    /// Whether the map holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys the table holds before it grows.
    pub fn capacity(&self) -> usize {
        self.shared.map.capacity()
    }

    /// Make every write that returned before this call durable against a power loss (syncs
    /// the journals written since the last checkpoint).
    ///
    /// # Errors
    /// [`Error::Storage`] if a file could not be synced, or if a background compaction
    /// failed since the last call (its journals are kept; nothing is lost).
    pub fn checkpoint(&self) -> Result<(), Error> {
        self.shared.journal.checkpoint()?;
        let failed = self
            .shared
            .background_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        failed.map_or(Ok(()), Err)
    }

    /// Write a snapshot of the map and delete the journals it covers (the background thread
    /// does this as the journals grow; writes go on meanwhile). Durable when it returns.
    ///
    /// # Errors
    /// [`Error::Storage`] if the snapshot could not be written (the journals are kept).
    pub fn compact(&self) -> Result<(), Error> {
        self.shared.compact()
    }

    /// Close the map: write a snapshot (so the next open reads one file) and release the
    /// directory. Dropping the map does the same, ignoring errors.
    ///
    /// # Errors
    /// [`Error::Storage`] if the snapshot could not be written; the journals are kept and
    /// the next open replays them.
    pub fn close(mut self) -> Result<(), Error> {
        self.stop_compactor();
        self.closed = true;
        self.shared.compact()
    }

    /// Leave the files as a crash of this process would (no snapshot, the journals as
    /// they are; the directory stays locked until the process ends), after the background
    /// thread stops. For tests that crash a map without ending the process.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        self.stop_compactor();
        core::mem::forget(self);
    }

    fn stop_compactor(&mut self) {
        if let Some(compactor) = self.compactor.take() {
            self.shared
                .requests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .1 = true;
            self.shared.wake.notify_all();
            let _ = compactor.join();
        }
    }
}

impl<K, V, S> Drop for PersistentMap<K, V, S>
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    fn drop(&mut self) {
        self.stop_compactor();
        if !self.closed {
            let _ = self.shared.compact();
        }
    }
}

impl<K, V, S> fmt::Debug for PersistentMap<K, V, S>
where
    K: Hash + Eq + Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PersistentMap")
            .field("dir", &self.shared.journal.dir())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl<K, V, S> Shared<K, V, S>
where
    K: Hash + Eq + Serialize,
    V: Serialize,
    S: BuildHasher,
{
    /// The background thread: compact when asked, until the map closes.
    fn compactor(&self) {
        loop {
            {
                let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
                while !requests.0 && !requests.1 {
                    requests = self.wake.wait(requests).unwrap_or_else(|p| p.into_inner());
                }
                if requests.1 {
                    return;
                }
                requests.0 = false;
            }
            if let Err(error) = self.compact() {
                *self
                    .background_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(error);
            }
            self.requested.store(false, Ordering::Relaxed);
        }
    }

    /// Count `bytes` of journal and ask for a compaction when they pass the threshold.
    fn appended(&self, bytes: usize) {
        let total = self
            .journal
            .appended
            .fetch_add(bytes as u64, Ordering::Relaxed)
            + bytes as u64;
        if total > self.compact_after.load(Ordering::Relaxed) {
            self.request_compaction();
        }
    }

    /// Wake the background thread to compact (once per request in flight).
    fn request_compaction(&self) {
        if !self.requested.swap(true, Ordering::Relaxed) {
            self.requests.lock().unwrap_or_else(|p| p.into_inner()).0 = true;
            self.wake.notify_one();
        }
    }

    fn compact(&self) -> Result<(), Error> {
        let _one_at_a_time = self.compacting.lock().unwrap_or_else(|p| p.into_inner());
        let (gen, old_chunks) = self.journal.next_generation();
        crash_point();
        let pinned = self.map.pin();
        let mut key_bytes = Vec::new();
        let mut value_bytes = Vec::new();
        let written = self.journal.write_snapshot(gen, |emit| {
            for (key, durable) in pinned.iter() {
                key_bytes.clear();
                value_bytes.clear();
                encode(key, &mut key_bytes)?;
                encode(&durable.value, &mut value_bytes)?;
                emit(&key_bytes, &value_bytes, durable.seq)?;
            }
            Ok(())
        });
        // SAFETY (of the state bytes in them): every write that had a record in the old
        // chunks finished before its lane switched, and confirmed or voided it; a reader that
        // loaded a pointer into them did so under a guard active now.
        pinned.retire_later(Box::new(old_chunks));
        crash_point();
        let bytes = written?;
        self.compact_after
            .store(COMPACT_AFTER_MIN.max(2 * bytes), Ordering::Relaxed);
        Ok(())
    }
}

/// Append `value`'s postcard encoding to `out`.
fn encode<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> std::io::Result<()> {
    postcard::serialize_with_flavor(value, AppendTo(out))
        .map_err(|error| std::io::Error::other(error.to_string()))
}

/// A postcard output that pushes onto a `Vec` it borrows. (postcard's own `Vec` outputs take
/// the vector by value, and the `Extend` one goes through an iterator per byte, which made
/// encoding a tenth of a write's time: serde sends a `[u8]` byte by byte.)
struct AppendTo<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for AppendTo<'_> {
    type Output = ();

    #[inline(always)]
    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0.push(byte);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

fn encode_error(error: std::io::Error) -> Error {
    Error::storage(StorageError::from_io("encode a key or value", error))
}

/// A write attempt's record while its fate is unknown.
#[derive(Default)]
struct Attempt {
    pending: Option<StateByte>,
    bytes: usize,
}

impl Attempt {
    /// Mark the last attempt's record void (it lost its race or was abandoned).
    fn void(&mut self) {
        if let Some(state) = self.pending.take() {
            // SAFETY: the record is in a chunk of our lane, which cannot switch generation
            // (and so be unmapped) while we hold the lane.
            unsafe { state.set(VOID) };
        }
    }

    /// Mark the attempt's record confirmed: its swap won.
    fn confirm(&mut self) {
        if let Some(state) = self.pending.take() {
            // SAFETY: as in `void`.
            unsafe { state.set(CONFIRMED) };
        }
    }
}

/// The values of a `Compute` over stored values.
fn unwrap_compute<V, T>(outcome: Compute<'_, Durable<V>, T>) -> Compute<'_, V, T> {
    match outcome {
        Compute::Inserted(new) => Compute::Inserted(&new.value),
        Compute::Updated { old, new } => Compute::Updated {
            old: &old.value,
            new: &new.value,
        },
        Compute::Removed(old) => Compute::Removed(&old.value),
        Compute::Absent => Compute::Absent,
        Compute::Aborted(result) => Compute::Aborted(result),
    }
}

impl<K, V, S> PersistentRef<'_, K, V, S>
where
    K: Hash + Eq + Serialize,
    V: Serialize,
    S: BuildHasher,
{
    /// `durable`'s value, its record confirmed first if its writer has not yet (replay
    /// then keeps what this read saw; module docs).
    fn seen<'a>(&self, durable: &'a Durable<V>) -> &'a V {
        // Acquire: pairs with the writer's Release store of null after its confirmation, so
        // a null read here means the record is confirmed already. A stale non-null pointer
        // only repeats that store, into a chunk that stays mapped while our guard lives.
        let state = durable.pending.load(Ordering::Acquire);
        if !state.is_null() {
            // SAFETY: a pointer to a state byte in a chunk that is not unmapped before our
            // guard ends (compaction retires chunks through the map's collector, after every
            // write with a record in them has ended).
            unsafe { StateByte(state).set(CONFIRMED) };
        }
        &durable.value
    }

    /// The value of `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key).map(|durable| self.seen(durable))
    }

    /// Whether `key` is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Every key and value (weakly consistent, as [`MapRef::iter`]).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.map
            .iter()
            .map(|(key, durable)| (key, self.seen(durable)))
    }

    /// Write a record for an attempt: the key's bytes, the value's (none for a removal),
    /// the number of the value it replaces. Returns the record's state byte and size.
    fn log(
        &self,
        lane: &mut journal::Lane,
        key: &[u8],
        prev: u64,
        value: Option<&V>,
    ) -> Result<(StateByte, u64), Error> {
        lane.scratch.clear();
        lane.scratch.extend_from_slice(key);
        let kind = match value {
            Some(value) => {
                encode(value, &mut lane.scratch).map_err(encode_error)?;
                Kind::Put
            }
            None => Kind::Remove,
        };
        // Taken after the decision read `prev`'s value (module docs: the chain's order).
        let seq = self.shared.next_seq.fetch_add(1, Ordering::Relaxed);
        let state = lane.append(&self.shared.journal, seq, prev, kind, key.len())?;
        crash_point();
        Ok((state, seq))
    }

    /// Every write but a removal by a borrowed key: `Map::compute` with each attempt logged
    /// before its swap. `decide` also gets back the value of its last attempt if that lost a
    /// race.
    fn write<T>(
        &self,
        key: K,
        mut decide: impl FnMut(Option<&Durable<V>>, Option<V>) -> Operation<V, T>,
    ) -> Result<Compute<'_, Durable<V>, T>, Error> {
        let mut key_bytes = Vec::new();
        encode(&key, &mut key_bytes).map_err(encode_error)?;
        let mut lane = self.shared.journal.lane();
        let mut attempt = Attempt::default();
        let outcome = self.map.try_compute_returning(key, |old, returned| {
            attempt.void();
            if let Some(old) = old {
                self.seen(old);
            }
            let decision = decide(old, returned.map(|durable: Durable<V>| durable.value));
            let prev = old.map_or(0, |old| old.seq);
            match decision {
                Operation::Abort(result) => Operation::Abort(Ok(result)),
                Operation::Remove if old.is_none() => Operation::Remove,
                Operation::Remove => match self.log(&mut lane, &key_bytes, prev, None) {
                    Ok((state, _)) => {
                        attempt.pending = Some(state);
                        attempt.bytes = key_bytes.len();
                        Operation::Remove
                    }
                    Err(error) => Operation::Abort(Err(error)),
                },
                Operation::Insert(value) => {
                    match self.log(&mut lane, &key_bytes, prev, Some(&value)) {
                        Ok((state, seq)) => {
                            attempt.pending = Some(state);
                            attempt.bytes = lane.scratch.len();
                            Operation::Insert(Durable {
                                value,
                                seq,
                                pending: AtomicPtr::new(state.0.cast_mut()),
                            })
                        }
                        Err(error) => Operation::Abort(Err(error)),
                    }
                }
            }
        });
        let outcome = match outcome {
            Ok(Compute::Aborted(Err(error))) | Err(error) => {
                attempt.void();
                return Err(error);
            }
            Ok(outcome) => outcome,
        };
        crash_point();
        let outcome = match outcome {
            Compute::Inserted(new) => Compute::Inserted(new),
            Compute::Updated { old, new } => Compute::Updated { old, new },
            Compute::Removed(old) => Compute::Removed(old),
            Compute::Absent => Compute::Absent,
            Compute::Aborted(result) => Compute::Aborted(result.expect("errors returned above")),
        };
        attempt.confirm();
        if let Compute::Inserted(new) | Compute::Updated { new, .. } = outcome {
            // Release: pairs with `seen`'s Acquire load; a reader that sees null skips its
            // store, ours (just above) being ordered before.
            new.pending.store(core::ptr::null_mut(), Ordering::Release);
        }
        crash_point();
        drop(lane);
        if attempt.bytes > 0 {
            self.shared.appended(attempt.bytes);
        }
        Ok(outcome)
    }

    /// Insert `key` with `value` if it is absent; if present, the map is unchanged and its
    /// value is returned (as [`MapRef::insert_new`]).
    ///
    /// # Errors
    /// [`Error::Storage`] if the journal cannot take the record (nothing changed);
    /// [`Error::Full`] and the other errors of [`MapRef::try_insert_new`].
    pub fn insert_new(&self, key: K, value: V) -> Result<Insert<&V>, Error> {
        let mut value = Some(value);
        let outcome = self.write(key, |present, returned| match present {
            // A pointer, not a reference: `decide`'s argument cannot outlive the call, but
            // the entry it names lives as long as our guard.
            Some(present) => Operation::Abort(core::ptr::from_ref(present)),
            None => Operation::Insert(
                returned
                    .or_else(|| value.take())
                    .expect("the value is back after a lost race"),
            ),
        })?;
        Ok(match outcome {
            Compute::Inserted(_) => Insert::Inserted,
            // SAFETY: read from the map under our guard, which keeps it alive.
            Compute::Aborted(present) => Insert::Present(unsafe { &(*present).value }),
            _ => unreachable!("an insert inserts or aborts"),
        })
    }

    /// Insert `key` with `value`, or replace its value, as std's `HashMap::insert` does;
    /// returns the value replaced.
    ///
    /// # Errors
    /// As [`insert_new`](Self::insert_new).
    pub fn insert(&self, key: K, value: V) -> Result<Option<&V>, Error> {
        let mut value = Some(value);
        let outcome = self.write::<()>(key, |_, returned| {
            Operation::Insert(
                returned
                    .or_else(|| value.take())
                    .expect("the value is back after a lost race"),
            )
        })?;
        Ok(match outcome {
            Compute::Updated { old, .. } => Some(&old.value),
            _ => None,
        })
    }

    /// [`insert`](Self::insert)'s former name.
    ///
    /// # Errors
    /// As [`insert`](Self::insert).
    #[deprecated(
        since = "0.2.0",
        note = "`insert` now replaces a present value, as std's does"
    )]
    pub fn upsert(&self, key: K, value: V) -> Result<Option<&V>, Error> {
        self.insert(key, value)
    }

    /// Read, decide and write `key` in one atomic step, as [`MapRef::compute`]. `decide` runs
    /// while this thread holds a journal lane: it must not write to, checkpoint, compact or
    /// close the same map (that would wait for the lane it holds); reads are fine.
    ///
    /// # Errors
    /// As [`insert`](Self::insert).
    pub fn compute<T>(
        &self,
        key: K,
        mut decide: impl FnMut(Option<&V>) -> Operation<V, T>,
    ) -> Result<Compute<'_, V, T>, Error> {
        let outcome = self.write(key, |present, _| {
            decide(present.map(|durable| &durable.value))
        })?;
        Ok(unwrap_compute(outcome))
    }

    /// Remove `key`, returning its value.
    ///
    /// # Errors
    /// [`Error::Storage`] if the journal cannot take the record (nothing changed).
    pub fn remove<Q>(&self, key: &Q) -> Result<Option<&V>, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_if(key, |_| true)
    }

    /// Remove `key` if `accept` says so of its value (as [`MapRef::remove_if`]).
    ///
    /// # Errors
    /// As [`remove`](Self::remove).
    pub fn remove_if<Q>(
        &self,
        key: &Q,
        mut accept: impl FnMut(&V) -> bool,
    ) -> Result<Option<&V>, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let word = self.map.hash_word(key);
        let mut lane = self.shared.journal.lane();
        let mut attempt = Attempt::default();
        let mut failure = None;
        let mut key_bytes = Vec::new();
        let removed = self.map.remove_entry_if_by(
            word,
            |k| k.borrow() == key,
            |stored_key, old| {
                attempt.void();
                if failure.is_some() || !accept(self.seen(old)) {
                    return false;
                }
                key_bytes.clear();
                if let Err(error) = encode(stored_key, &mut key_bytes) {
                    failure = Some(encode_error(error));
                    return false;
                }
                match self.log(&mut lane, &key_bytes, old.seq, None) {
                    Ok((state, _)) => {
                        attempt.pending = Some(state);
                        attempt.bytes = key_bytes.len();
                        true
                    }
                    Err(error) => {
                        failure = Some(error);
                        false
                    }
                }
            },
        );
        let Some((_, old)) = removed else {
            attempt.void();
            return failure.map_or(Ok(None), Err);
        };
        crash_point();
        attempt.confirm();
        drop(lane);
        self.shared.appended(attempt.bytes);
        Ok(Some(&old.value))
    }

    /// Remove every key for which `keep` is false, each as by [`remove_if`](Self::remove_if)
    /// (one journal record a key removed). Not atomic, as [`MapRef::retain`]: a key written
    /// meanwhile is judged on what the walk or the removal reads.
    ///
    /// # Errors
    /// As [`remove`](Self::remove); the keys removed before the error stay removed.
    pub fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool) -> Result<(), Error>
    where
        K: Clone,
    {
        // The keys first: a removal must not run under the walk's step.
        let doomed: Vec<K> = self
            .map
            .iter()
            .filter(|(key, durable)| !keep(key, self.seen(durable)))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &doomed {
            self.remove_if(key, |value| !keep(key, value))?;
        }
        Ok(())
    }

    /// Remove every key (one journal record each; not atomic, as [`Map::clear`]).
    ///
    /// # Errors
    /// As [`retain`](Self::retain).
    pub fn clear(&self) -> Result<(), Error>
    where
        K: Clone,
    {
        self.retain(|_, _| false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that finds a value whose record its writer has not confirmed yet confirms it
    /// (replay then keeps what the read saw; module docs).
    #[test]
    fn a_read_confirms_a_pending_record() {
        if cfg!(miri) {
            return; // no files under Miri
        }
        let dir = std::env::temp_dir().join(format!("floe-pmap-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let map = Map::<u64, u64>::builder().build_persistent(&dir).unwrap();
        let state = AtomicU8::new(journal::PENDING);
        let durable = Durable {
            value: 7,
            seq: 1,
            pending: AtomicPtr::new(core::ptr::from_ref(&state).cast_mut()),
        };
        assert!(map.shared.map.pin().insert_new(1, durable).is_inserted());
        assert_eq!(map.pin().get(&1), Some(&7));
        assert_eq!(state.load(Ordering::Relaxed), CONFIRMED);
        // The value must not outlive `state` with its pointer: take it out before both go.
        map.shared.map.pin().remove(&1);
        drop(map);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
