//! The files of a [`PersistentMap`](crate::PersistentMap): journals of write records in shared
//! mappings, snapshots, and the replay that turns them back into a map.
//!
//! ```text
//!  <dir>                            locked (flock) by the one process that has the map open
//!  <dir>/floe-map.meta              identity: format version, key and value type names
//!  <dir>/floe-map.manifest          the files the map needs: the snapshot (generation and
//!                                   length), every journal chunk (length, synced length),
//!                                   and the boot of the machine that last opened the map
//!  <dir>/snapshot-<gen>             every key, value and sequence number at one compaction
//!  <dir>/journal-<gen>-<lane>-<n>   write records, appended by one lane at a time
//! ```
//!
//! # The manifest, and what an open refuses
//!
//! Every change to the set of files goes through the manifest (`durable::replace_file`: a
//! temporary file synced and renamed, the directory synced), in this order: a new chunk is
//! created (its header written), then listed, then written to; a snapshot is written, synced
//! and renamed into place, then listed (with the older chunks unlisted), then the older files
//! deleted; a checkpoint syncs the chunks, then records their synced lengths. So at every
//! instant, every file the manifest lists exists with the length it lists, and every record a
//! write returned after is in a listed file. An open therefore refuses (`StorageErrorKind::Corrupt`)
//! a listed file that is missing, of another length, or not a regular file; it ignores (and
//! the next compaction deletes) unlisted files holding no record. Within a chunk, the tail
//! rule of `durable::judge_tail` decides: while the machine has not restarted since the map
//! was opened (the manifest's boot id), a record's first word, written last, is either zero
//! (the end of the chunk, or a record a crash cut) or heads a whole record, so a record that
//! fails its checksum, or a whole record after the end, is damage; after a restart, records
//! past the synced length may be lost to the power loss, and are dropped and counted
//! (`MapRecovery::torn`), after which the open compacts before it takes a write.
//! Undetectable: a chunk's last records, written since its last checkpoint, zeroed whole
//! (indistinguishable from writes that never happened).
//!
//! A journal chunk is a file mapped shared: a record is in the kernel's page cache the moment
//! its stores are made, so a process that dies loses no record it finished writing, with no
//! system call per write. A record is written body first and its first word (length and
//! checksum) last, as one 8-byte store, so a record cut by a crash reads as the end of the
//! chunk. Its *state* byte (pending, confirmed, void) is outside the checksum: the writer
//! changes it after the record's fate is known (`persistent_map.rs` says when and why).
//!
//! `checkpoint` syncs every chunk written since the last one, then the directory, then
//! records in the manifest how far each was synced. Opening reads a damaged record (or
//! header) below a chunk's synced length as damage (an error); past it, the manifest's boot
//! id decides (below): after a power loss any page written since the last checkpoint may be
//! missing or stale.
//!
//! A compaction starts a new generation: every lane switches to a chunk of the next
//! generation (under its lock, so no write straddles the switch), the live map is written to
//! `snapshot-<gen>.tmp`, synced and renamed, and the older snapshot and journals are deleted.
//! A directory therefore holds the newest complete snapshot (generation G, or none) and the
//! journals of generations G and later; replay reads exactly those.

use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, AtomicU8, Ordering},
        Arc,
    },
};

use memmap2::MmapRaw;

use crate::{
    durable::{self, Listed, Manifest, ManifestError},
    error::{Error, StorageErrorKind},
    raw::persist::store::{create_reserved, io_error, io_error_at, Store},
};

/// Bumped whenever the meaning of a byte in the files changes.
pub(crate) const JOURNAL_FORMAT: u32 = 2;
const META: &str = durable::PERSISTENT_MAP_MARKER;
const META_MAGIC: [u8; 8] = *b"FLOEPMAP";
const CHUNK_MAGIC: [u8; 8] = *b"FLOEJRNL";
const SNAPSHOT_MAGIC: [u8; 8] = *b"FLOESNAP";
/// A chunk's header: magic, version, lane, generation, chunk number, checksum.
const CHUNK_HEADER: usize = 64;
const MANIFEST: &str = "floe-map.manifest";
const MANIFEST_MAGIC: [u8; 8] = *b"FLOEMANI";
/// No floe file of the map's kinds is longer (a chunk holds one record of at most 4 GiB).
const FILE_LIMIT: u64 = 1 << 40;
/// A record's fixed part: `[len: u32, crc: u32] [seq: u64] [prev: u64] [key_len: u32, kind:
/// u8, state: u8, 0: u16]`, then the key's bytes and the value's, padded to 8.
const RECORD_HEAD: usize = 32;
const STATE_AT: usize = 29;
/// Bytes of a new chunk, unless one record needs more.
pub(crate) const CHUNK_BYTES: usize = 2 << 20;

/// What a record says happened to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The key was given the record's value.
    Put = 1,
    /// The key was removed.
    Remove = 2,
}

/// A record's state byte.
pub(crate) const PENDING: u8 = 0;
pub(crate) const CONFIRMED: u8 = 1;
pub(crate) const VOID: u8 = 2;

/// A crash point (feature `crash-points`; `sync.rs`).
#[inline(always)]
pub(crate) fn crash_point() {
    #[cfg(feature = "crash-points")]
    crate::sync::crash_point();
}

fn corrupt(why: &'static str) -> Error {
    Error::storage(StorageErrorKind::Corrupt(why))
}

fn crc_of(parts: &[&[u8]]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    for part in parts {
        crc.update(part);
    }
    crc.finalize()
}

fn sync_dir(dir: &Path) -> Result<(), Error> {
    durable::sync_dir(dir).map_err(io_error_at("sync the map's directory", dir))
}

/// Read a file of the map, as a regular file only, with `what` and `missing` for the errors.
fn read_file(path: &Path, what: &'static str, missing: &'static str) -> Result<Vec<u8>, Error> {
    read_at_most(path, FILE_LIMIT, what, missing)
}

/// [`read_file`] of a file that may be at most `limit` bytes long: a longer one (a listed
/// file extended, sparsely, to a disk's size) is refused from its metadata, not read.
fn read_at_most(
    path: &Path,
    limit: u64,
    what: &'static str,
    missing: &'static str,
) -> Result<Vec<u8>, Error> {
    durable::read_regular(path, limit).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => corrupt(missing),
        std::io::ErrorKind::FileTooLarge => {
            corrupt("a file's length is not the manifest's (cut short or extended)")
        }
        _ => io_error(what)(error),
    })
}

/// The map's identity as the meta file states it.
pub(crate) struct Identity<'a> {
    pub(crate) key: &'a str,
    pub(crate) value: &'a str,
}

impl Identity<'_> {
    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&META_MAGIC);
        bytes.extend_from_slice(&JOURNAL_FORMAT.to_le_bytes());
        for name in [self.key, self.value] {
            bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            bytes.extend_from_slice(name.as_bytes());
        }
        let crc = crc_of(&[&bytes]);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Check `bytes` (the meta file) against this identity.
    fn check(&self, bytes: &[u8]) -> Result<(), Error> {
        if bytes.len() < 8 || bytes[..8] != META_MAGIC {
            return Err(Error::storage(StorageErrorKind::Foreign));
        }
        if bytes.len() < 16 {
            return Err(corrupt("the meta file is cut short"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc_of(&[body]).to_le_bytes() != crc {
            return Err(corrupt("the meta file's checksum does not match"));
        }
        let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
        if version != JOURNAL_FORMAT {
            return Err(Error::storage(StorageErrorKind::Version { found: version }));
        }
        let mut rest = &body[12..];
        for (ours, which) in [(self.key, "key"), (self.value, "value")] {
            let name = take_prefixed(&mut rest).ok_or(corrupt("the meta file is cut short"))?;
            if name != ours.as_bytes() {
                return Err(Error::storage(StorageErrorKind::TypeMismatch(which)));
            }
        }
        Ok(())
    }
}

/// A `u32`-length-prefixed field of `rest`, advancing it.
fn take_prefixed<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let field = rest.get(4..4 + len)?;
    *rest = &rest[4 + len..];
    Some(field)
}

/// One journal file, mapped shared for as long as a record in it may still be changed (its
/// state byte) or synced.
pub(crate) struct Chunk {
    map: MmapRaw,
    /// The file's name in the directory.
    name: String,
    /// Bytes written (records end here); changed only by the lane that owns the chunk.
    written: AtomicU64,
}

impl Chunk {
    fn create(dir: &Path, bytes: usize, lane: u32, gen: u64, number: u64) -> Result<Chunk, Error> {
        let name = format!("journal-{gen:016x}-{lane:04x}-{number:08x}");
        let path = dir.join(&name);
        let file = create_reserved(
            &path,
            bytes,
            "create a journal file",
            "reserve a journal file's blocks",
        )?;
        let map = MmapRaw::map_raw(&file).map_err(io_error_at("map a journal file", &path))?;
        let mut header = [0u8; CHUNK_HEADER];
        header[..8].copy_from_slice(&CHUNK_MAGIC);
        header[8..12].copy_from_slice(&JOURNAL_FORMAT.to_le_bytes());
        header[12..16].copy_from_slice(&lane.to_le_bytes());
        header[16..24].copy_from_slice(&gen.to_le_bytes());
        header[24..32].copy_from_slice(&number.to_le_bytes());
        let crc = crc_of(&[&header[..32]]);
        header[32..36].copy_from_slice(&crc.to_le_bytes());
        // SAFETY: the mapping is `bytes` >= CHUNK_HEADER long, ours alone (the file was just
        // created), and nothing else in this process has a reference into it yet.
        unsafe { core::ptr::copy_nonoverlapping(header.as_ptr(), map.as_mut_ptr(), CHUNK_HEADER) };
        // Synced before the manifest lists it: a listed chunk has its length and header on
        // the disk, whatever a power loss takes later.
        map.flush()
            .map_err(io_error_at("sync a new journal file", &path))?;
        file.sync_all()
            .map_err(io_error_at("sync a new journal file", &path))?;
        Ok(Chunk {
            map,
            name,
            written: AtomicU64::new(CHUNK_HEADER as u64),
        })
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    /// Sync the records written so far; returns their length.
    fn sync(&self) -> Result<u64, Error> {
        // Acquire: pairs with `append`'s Release store of `written`, so the records below it,
        // stored by the lane's writer, come before this thread's sync of them.
        let written = self.written.load(Ordering::Acquire);
        self.map
            .flush_range(0, written as usize)
            .map_err(io_error("sync a journal file"))?;
        Ok(written)
    }
}

/// A lane: the chunk one writer at a time appends to (the map holds each lane's lock for a
/// whole write), and the chunks it filled in this generation.
pub(crate) struct Lane {
    number: u32,
    gen: u64,
    next_chunk: u64,
    current: Option<Arc<Chunk>>,
    /// Chunks of this lane not synced since they were filled (a checkpoint syncs them).
    filled: Vec<Arc<Chunk>>,
    /// Filled chunks a checkpoint synced. Kept mapped until the generation ends: a reader may
    /// still be about to confirm a record in one, and only the switch's retirement (through
    /// the map's collector) waits for it.
    synced: Vec<Arc<Chunk>>,
    /// Reused buffer for a record's body.
    pub(crate) scratch: Vec<u8>,
}

/// Where a written record's state byte is, for [`confirm`] and [`void`]. Valid while the
/// chunk is mapped: the map keeps chunks mapped until no guard can hold one of these
/// (`persistent_map.rs`).
#[derive(Clone, Copy)]
pub(crate) struct StateByte(pub(crate) *const AtomicU8);

impl StateByte {
    /// Record the record's fate. Relaxed: no thread of this process reads state bytes; a
    /// crash sees every store made before it (the page cache is coherent with the CPU).
    ///
    /// # Safety
    /// The chunk holding the record is still mapped.
    pub(crate) unsafe fn set(self, state: u8) {
        // SAFETY: by the caller.
        unsafe { (*self.0).store(state, Ordering::Relaxed) }
    }
}

impl Lane {
    /// Append a record: `body` holds the key's bytes then the value's; the record is
    /// `PENDING`. Returns its state byte.
    pub(crate) fn append(
        &mut self,
        journal: &Journal,
        seq: u64,
        prev: u64,
        kind: Kind,
        key_len: usize,
    ) -> Result<StateByte, Error> {
        let body_len = self.scratch.len();
        if u32::try_from(body_len).is_err() {
            return Err(Error::storage(StorageErrorKind::Io {
                what: "journal a key and value of 4 GiB or more",
                kind: std::io::ErrorKind::FileTooLarge,
                errno: 0,
            }));
        }
        let len = RECORD_HEAD + body_len.next_multiple_of(8);
        let room = |chunk: &Chunk| chunk.len() - chunk.written.load(Ordering::Relaxed) as usize;
        if self
            .current
            .as_deref()
            .is_none_or(|chunk| room(chunk) < len)
        {
            self.start_chunk(journal, len)?;
        }
        let chunk = self.current.as_deref().expect("started above");
        let at = chunk.written.load(Ordering::Relaxed) as usize;
        let mut head = [0u8; RECORD_HEAD];
        head[8..16].copy_from_slice(&seq.to_le_bytes());
        head[16..24].copy_from_slice(&prev.to_le_bytes());
        head[24..28].copy_from_slice(&(key_len as u32).to_le_bytes());
        head[28] = kind as u8;
        head[STATE_AT] = PENDING;
        let crc = crc_of(&[&head[8..STATE_AT], &head[STATE_AT + 1..], &self.scratch]);
        // SAFETY: `at + len` is within the mapping (room checked above); the bytes from `at`
        // on are this lane's alone (no record was written there, and the lane is locked by
        // its writer), and zero (a fresh reserved file). The first word goes last, as one
        // aligned 8-byte store (`at` is a multiple of 8), so the record reads as absent until
        // it is whole.
        unsafe {
            let base = chunk.map.as_mut_ptr().add(at);
            core::ptr::copy_nonoverlapping(head.as_ptr().add(8), base.add(8), RECORD_HEAD - 8);
            core::ptr::copy_nonoverlapping(self.scratch.as_ptr(), base.add(RECORD_HEAD), body_len);
            let first = u64::from(body_len as u32) | u64::from(crc) << 32;
            // Release: the body's plain stores come before the word that makes the record
            // whole, for any observer (no thread of this process reads records; it is the
            // order the page cache sees them in that a crash keeps).
            (*(base as *const AtomicU64)).store(first, Ordering::Release);
            chunk.written.store((at + len) as u64, Ordering::Release);
            Ok(StateByte(base.add(STATE_AT) as *const AtomicU8))
        }
    }

    /// Make the lane's next chunk and list it in the manifest before any record goes in.
    fn start_chunk(&mut self, journal: &Journal, record: usize) -> Result<(), Error> {
        let bytes = CHUNK_BYTES.max((CHUNK_HEADER + record).next_multiple_of(4096));
        let chunk = Chunk::create(&journal.dir, bytes, self.number, self.gen, self.next_chunk)?;
        if let Err(error) = journal.list_chunk(&chunk.name, bytes as u64) {
            drop(chunk);
            let _ = std::fs::remove_file(journal.dir.join(format!(
                "journal-{:016x}-{:04x}-{:08x}",
                self.gen, self.number, self.next_chunk
            )));
            return Err(error);
        }
        self.next_chunk += 1;
        if let Some(full) = self.current.replace(Arc::new(chunk)) {
            self.filled.push(full);
        }
        Ok(())
    }

    /// Switch to generation `gen` (the next chunk is made on the next append). Returns the
    /// chunks of the old generation, which the caller keeps mapped until no guard can hold
    /// one of their state bytes.
    pub(crate) fn switch(&mut self, gen: u64) -> Vec<Arc<Chunk>> {
        self.gen = gen;
        self.next_chunk = 0;
        let mut old = std::mem::take(&mut self.filled);
        old.append(&mut self.synced);
        old.extend(self.current.take());
        old
    }

    /// The chunks a checkpoint syncs: the filled ones (moved to `synced`: once synced, they
    /// change no more) and the current one.
    fn take_unsynced(&mut self) -> Vec<Arc<Chunk>> {
        let mut chunks = self.filled.clone();
        self.synced.append(&mut self.filled);
        chunks.extend(self.current.clone());
        chunks
    }
}

/// The directory: its lock, the lanes, the generation.
pub(crate) struct Journal {
    dir: PathBuf,
    _lock: crate::durable::DirLock,
    pub(crate) lanes: Box<[std::sync::Mutex<Lane>]>,
    /// The generation new chunks are made in (a compaction's snapshot has it too).
    gen: AtomicU64,
    /// Record bytes appended since the last compaction, to decide when to compact.
    pub(crate) appended: AtomicU64,
    /// The newest durable snapshot's generation (0: none).
    snapshot_gen: AtomicU64,
    /// The manifest as last written (module docs). Taken after a lane's lock, never before
    /// one.
    manifest: std::sync::Mutex<Manifest>,
}

/// The snapshot's file name.
fn snapshot_name(gen: u64) -> String {
    format!("snapshot-{gen:016x}")
}

/// Lanes per map: enough that threads rarely share one.
fn lane_count() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (2 * cores).clamp(2, 256)
}

impl Journal {
    fn with_lock(dir: &Path, lock: crate::durable::DirLock, gen: u64) -> Journal {
        let lanes = (0..lane_count())
            .map(|number| {
                std::sync::Mutex::new(Lane {
                    number: number as u32,
                    gen,
                    next_chunk: 0,
                    current: None,
                    filled: Vec::new(),
                    synced: Vec::new(),
                    scratch: Vec::new(),
                })
            })
            .collect();
        Journal {
            dir: dir.to_path_buf(),
            _lock: lock,
            lanes,
            gen: AtomicU64::new(gen),
            appended: AtomicU64::new(0),
            snapshot_gen: AtomicU64::new(0),
            manifest: std::sync::Mutex::new(Manifest::default()),
        }
    }

    fn manifest(&self) -> std::sync::MutexGuard<'_, Manifest> {
        self.manifest.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Change the manifest with `change` and write it; on failure the recorded one is kept.
    fn record(&self, change: impl FnOnce(&mut Manifest)) -> Result<(), Error> {
        let mut manifest = self.manifest();
        let mut changed = manifest.clone();
        change(&mut changed);
        changed
            .write(&self.dir, MANIFEST, MANIFEST_MAGIC, JOURNAL_FORMAT)
            .map_err(io_error_at(
                "write the map's manifest",
                &self.dir.join(MANIFEST),
            ))?;
        *manifest = changed;
        Ok(())
    }

    /// List a new chunk (`length` bytes), before anything is written to it.
    fn list_chunk(&self, name: &str, length: u64) -> Result<(), Error> {
        self.record(|manifest| {
            let listed = Listed {
                length: Some(length),
                synced: 0,
            };
            manifest.files.insert(name.to_owned(), listed);
        })
    }

    /// Record that this boot of the machine has the map open (after a successful open, before
    /// any write): from now on a damaged record is told from a crash's end by the rule of a
    /// machine that has not restarted.
    pub(crate) fn record_open(&self) -> Result<(), Error> {
        let boot = durable::boot_id();
        self.record(|manifest| manifest.boot = boot)
    }

    /// Make a new, empty map's directory (refused if one is there).
    pub(crate) fn create(dir: &Path, identity: &Identity<'_>) -> Result<Journal, Error> {
        let lock = Store::lock(dir, true)?;
        // Our own leftovers only (a manifest, journals or snapshots of an attempt that never
        // wrote its meta file, temporary files).
        durable::check_new_dir(dir, durable::PERSISTENT_MAP, is_own_file)
            .map_err(Error::storage)?;
        // The manifest first: a directory with a meta file is a map, and a map has one.
        let journal = Journal::with_lock(dir, lock, 1);
        journal.record_open()?;
        durable::replace_file(dir, META, &identity.encode())
            .map_err(io_error("write the map's meta file"))?;
        Ok(journal)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn lane(&self) -> std::sync::MutexGuard<'_, Lane> {
        thread_local! {
            static LANE: usize = {
                static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            };
        }
        let home = LANE.with(|lane| *lane);
        let lanes = &self.lanes;
        // Our own lane if free, else the next free one, else wait for ours.
        for step in 0..lanes.len() {
            if let Ok(lane) = lanes[(home + step) % lanes.len()].try_lock() {
                return lane;
            }
        }
        lanes[home % lanes.len()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sync every record written so far (for a power loss), and record how far each chunk
    /// is synced (the manifest).
    pub(crate) fn checkpoint(&self) -> Result<(), Error> {
        let mut chunks = Vec::new();
        for lane in self.lanes.iter() {
            let mut lane = lane.lock().unwrap_or_else(|p| p.into_inner());
            chunks.extend(lane.take_unsynced());
        }
        let mut lengths = Vec::new();
        for chunk in &chunks {
            match chunk.sync() {
                Ok(length) => lengths.push((chunk.name.clone(), length)),
                Err(error) => {
                    let error = error.at(&self.dir.join(&chunk.name));
                    // Not synced after all: the next checkpoint tries them again.
                    let mut lane = self.lanes[0].lock().unwrap_or_else(|p| p.into_inner());
                    lane.filled.extend(chunks);
                    return Err(error);
                }
            }
        }
        sync_dir(&self.dir)?;
        self.record(|manifest| {
            for (name, length) in lengths {
                // A chunk a compaction unlisted meanwhile is no longer needed.
                if let Some(listed) = manifest.files.get_mut(&name) {
                    listed.synced = listed.synced.max(length);
                }
            }
        })
    }

    /// Switch every lane to the next generation and return it with the old generation's
    /// chunks (to be unmapped once no guard can hold their state bytes).
    pub(crate) fn next_generation(&self) -> (u64, Vec<Arc<Chunk>>) {
        let gen = self.gen.fetch_add(1, Ordering::Relaxed) + 1;
        let mut old = Vec::new();
        let mut locked: Vec<_> = self
            .lanes
            .iter()
            .map(|lane| lane.lock().unwrap_or_else(|p| p.into_inner()))
            .collect();
        for lane in &mut locked {
            old.extend(lane.switch(gen));
        }
        self.appended.store(0, Ordering::Relaxed);
        (gen, old)
    }

    /// Write snapshot `gen` from `entries` (key bytes, value bytes, sequence number), make it
    /// durable, and delete every older snapshot and journal. Returns the snapshot's bytes.
    pub(crate) fn write_snapshot(
        &self,
        gen: u64,
        entries: impl FnMut(
            &mut dyn FnMut(&[u8], &[u8], u64) -> std::io::Result<()>,
        ) -> std::io::Result<()>,
    ) -> Result<u64, Error> {
        let tmp = self.dir.join(format!("snapshot-{gen:016x}.tmp"));
        let written = write_snapshot_file(&tmp, gen, entries);
        let bytes = match written {
            Ok(bytes) => bytes,
            Err(error) => {
                let _ = std::fs::remove_file(&tmp);
                // The directory, not the file: each compaction takes a new generation (and an
                // error's path is kept for the rest of the process).
                return Err(io_error_at("write a snapshot", &self.dir)(error));
            }
        };
        crash_point();
        std::fs::rename(&tmp, self.dir.join(snapshot_name(gen)))
            .map_err(io_error_at("rename a snapshot into place", &self.dir))?;
        sync_dir(&self.dir)?;
        crash_point();
        // The snapshot is replay's start from now on: the older chunks are no longer needed.
        self.record(|manifest| {
            manifest.files.retain(|name, _| match parse_name(name) {
                Name::Journal { gen: g } => g >= gen,
                _ => false,
            });
            manifest
                .files
                .insert(snapshot_name(gen), Listed::whole(bytes));
        })?;
        self.snapshot_gen.fetch_max(gen, Ordering::Relaxed);
        crash_point();
        remove_older(&self.dir, gen);
        Ok(bytes)
    }
}

fn write_snapshot_file(
    path: &Path,
    gen: u64,
    mut entries: impl FnMut(
        &mut dyn FnMut(&[u8], &[u8], u64) -> std::io::Result<()>,
    ) -> std::io::Result<()>,
) -> std::io::Result<u64> {
    let file = File::create(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut header = [0u8; 32];
    header[..8].copy_from_slice(&SNAPSHOT_MAGIC);
    header[8..12].copy_from_slice(&JOURNAL_FORMAT.to_le_bytes());
    header[16..24].copy_from_slice(&gen.to_le_bytes());
    out.write_all(&header)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header);
    let mut count = 0u64;
    let mut bytes = header.len() as u64;
    entries(&mut |key, value, seq| {
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
        head[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
        head[8..].copy_from_slice(&seq.to_le_bytes());
        for part in [&head[..], key, value] {
            crc.update(part);
            out.write_all(part)?;
        }
        count += 1;
        bytes += (16 + key.len() + value.len()) as u64;
        Ok(())
    })?;
    let mut trailer = [0u8; 16];
    trailer[..8].copy_from_slice(&count.to_le_bytes());
    crc.update(&trailer[..8]);
    trailer[8..12].copy_from_slice(&crc.finalize().to_le_bytes());
    out.write_all(&trailer)?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(bytes + 16)
}

/// What a file name in the directory is.
#[derive(Clone, Copy)]
enum Name {
    Snapshot(u64),
    Journal { gen: u64 },
    Temporary,
    Other,
}

impl Name {
    fn journal_gen(self) -> Option<u64> {
        match self {
            Name::Journal { gen } => Some(gen),
            _ => None,
        }
    }
}

/// Whether `name` is one of a `PersistentMap`'s files: its meta file, manifest, a journal, a
/// snapshot, or a temporary file.
pub(crate) fn is_own_file(name: &str) -> bool {
    name == META || name == MANIFEST || !matches!(parse_name(name), Name::Other)
}

fn parse_name(name: &str) -> Name {
    if name.ends_with(".tmp") {
        return Name::Temporary;
    }
    if let Some(gen) = name.strip_prefix("snapshot-") {
        return u64::from_str_radix(gen, 16).map_or(Name::Other, Name::Snapshot);
    }
    if let Some(rest) = name.strip_prefix("journal-") {
        let mut parts = rest.split('-');
        let gen = parts.next().and_then(|g| u64::from_str_radix(g, 16).ok());
        let valid = parts.clone().count() == 2 && parts.all(|p| u64::from_str_radix(p, 16).is_ok());
        if let (Some(gen), true) = (gen, valid) {
            return Name::Journal { gen };
        }
    }
    Name::Other
}

/// Delete snapshots and journals older than generation `gen`, and leftover temporary files.
fn remove_older(dir: &Path, gen: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let old = match parse_name(&name.to_string_lossy()) {
            Name::Snapshot(g) | Name::Journal { gen: g } => g < gen,
            // A snapshot a crashed compaction left half written (never another temporary
            // file: a checkpoint may be writing its list right now).
            Name::Temporary => name.to_string_lossy().starts_with("snapshot-"),
            Name::Other => false,
        };
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Give every record replay left pending its fate, in the files: `CONFIRMED` if replay took
/// its step, `VOID` if not; then sync them. A later replay (after another crash, before a
/// compaction folds these journals away) then makes the same choices whatever records the
/// next run adds: its in-flight rules apply only to records pending at *its* crash.
pub(crate) fn settle(files: &[PathBuf], fates: &[(usize, u64, u8)]) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    let mut touched: Vec<Option<File>> = files.iter().map(|_| None).collect();
    for &(file, offset, state) in fates {
        if touched[file].is_none() {
            let opened =
                durable::open_regular(&files[file], OpenOptions::new().read(true).write(true))
                    .map_err(io_error("open a journal to settle its records"))?;
            touched[file] = Some(opened);
        }
        let journal = touched[file].as_ref().expect("opened above");
        journal
            .write_all_at(&[state], offset)
            .map_err(io_error("settle a journal record"))?;
    }
    for journal in touched.into_iter().flatten() {
        journal
            .sync_data()
            .map_err(io_error("sync a settled journal"))?;
    }
    Ok(())
}

/// A stored value's bytes (in the files as read) and its sequence number.
pub(crate) type Stored<'a> = (&'a [u8], u64);

/// What the files say of one key: its snapshot entry, if any, and its journal records.
pub(crate) type KeyFiles<'a> = (Option<Stored<'a>>, Vec<Record<'a>>);

/// One record as replay sees it.
pub(crate) struct Record<'a> {
    pub(crate) seq: u64,
    pub(crate) prev: u64,
    pub(crate) kind: Kind,
    pub(crate) state: u8,
    /// The value's bytes (empty for a remove).
    pub(crate) value: &'a [u8],
    /// A pending record's state byte: journal file (index in `Contents::files`) and offset.
    pub(crate) at: Option<(usize, u64)>,
    /// Replay took this record's step.
    pub(crate) applied: bool,
}

/// What a directory holds, read and checked: the snapshot's entries and every journal record,
/// grouped by key.
pub(crate) struct Contents<'a> {
    /// Per key (its bytes): the snapshot's value and sequence number, if it has one, and the
    /// journal records.
    pub(crate) keys: HashMap<&'a [u8], KeyFiles<'a>, crate::hash::WyHash>,
    /// The largest sequence number in the files.
    pub(crate) max_seq: u64,
    /// Records past a chunk's synced length that were damaged (a power loss's tail), and
    /// journals never checkpointed whose header is damaged: dropped.
    pub(crate) torn: usize,
    /// Journal records read.
    pub(crate) records: usize,
    /// The journal files read, in that order (`Record::at` names them by index).
    pub(crate) files: Vec<PathBuf>,
}

/// The files replay reads, as read (records are parsed in place, not copied).
pub(crate) struct Loaded {
    snapshot: Option<(u64, Vec<u8>)>,
    /// The chunks the manifest lists: generation, path, synced length, bytes.
    journals: Vec<(u64, PathBuf, u64, Vec<u8>)>,
    /// The machine may have restarted since the map was last opened (`durable::judge_tail`).
    power_lost: bool,
    /// Unlisted chunks holding records, after a restart (dropped as a power loss's).
    unlisted: usize,
}

impl Loaded {
    /// Check and parse everything, grouped by key.
    pub(crate) fn contents(&self) -> Result<Contents<'_>, Error> {
        let mut contents = Contents {
            keys: HashMap::with_hasher(crate::hash::WyHash::new()),
            max_seq: 0,
            torn: self.unlisted,
            records: 0,
            files: Vec::new(),
        };
        if let Some((gen, bytes)) = &self.snapshot {
            read_snapshot(bytes, *gen, &mut contents)?;
        }
        for (gen, path, synced, bytes) in &self.journals {
            read_chunk(bytes, *gen, *synced, self.power_lost, &mut contents)?;
            contents.files.push(path.clone());
        }
        Ok(contents)
    }
}

impl Journal {
    /// Open an existing map's directory: lock it, check its identity and manifest, read and
    /// check every file the manifest lists (module docs). Changes nothing (the caller settles
    /// the pending records once the map is rebuilt, then `record_open`).
    /// `repair`: judge the journals as after a power loss (`Builder::repair`).
    pub(crate) fn open(
        dir: &Path,
        identity: &Identity<'_>,
        repair: bool,
    ) -> Result<(Journal, Loaded), Error> {
        durable::check_kind(dir, durable::PERSISTENT_MAP).map_err(Error::storage)?;
        let lock = Store::lock(dir, false)?;
        let meta = read_file(&dir.join(META), "read the map's meta file", "no meta file")?;
        identity.check(&meta)?;
        let bytes = read_file(
            &dir.join(MANIFEST),
            "read the map's manifest",
            "the map's manifest is missing",
        )?;
        let manifest = Manifest::decode(&bytes, MANIFEST_MAGIC, JOURNAL_FORMAT).map_err(
            |error| match error {
                ManifestError::Version(found) => {
                    Error::storage(StorageErrorKind::Version { found })
                }
                ManifestError::Foreign | ManifestError::Damaged => {
                    corrupt("the map's manifest is damaged")
                }
            },
        )?;
        let power_lost = repair || durable::may_have_lost_power(manifest.boot);
        let mut loaded = Loaded {
            snapshot: None,
            journals: Vec::new(),
            power_lost,
            unlisted: 0,
        };
        let mut gen = 0;
        let mut newest = 1;
        for (name, listed) in &manifest.files {
            let path = dir.join(name);
            let (what, missing) = match parse_name(name) {
                Name::Snapshot(_) => (
                    "read a snapshot",
                    "the snapshot the manifest names is missing",
                ),
                Name::Journal { .. } => {
                    ("read a journal", "a journal the manifest lists is missing")
                }
                Name::Temporary | Name::Other => {
                    return Err(corrupt("the manifest lists a file of no known kind"))
                }
            };
            let bytes = read_at_most(&path, listed.length.unwrap_or(FILE_LIMIT), what, missing)?;
            listed.check_length(bytes.len() as u64).map_err(|_| {
                corrupt("a file's length is not the manifest's (cut short or extended)")
            })?;
            match parse_name(name) {
                Name::Snapshot(snapshot_gen) if loaded.snapshot.is_none() => {
                    gen = snapshot_gen;
                    loaded.snapshot = Some((snapshot_gen, bytes));
                }
                Name::Journal { gen: journal_gen } => {
                    newest = newest.max(journal_gen);
                    // A repair reads every chunk as if no checkpoint had promised any of it.
                    let synced = if repair { 0 } else { listed.synced };
                    loaded.journals.push((journal_gen, path, synced, bytes));
                }
                _ => return Err(corrupt("the manifest lists two snapshots")),
            }
        }
        if gen.max(newest) > durable::MAX_GENERATION {
            return Err(corrupt(
                "the manifest's generations are past any a map reaches",
            ));
        }
        newest = newest.max(gen);
        if loaded
            .journals
            .iter()
            .any(|(journal_gen, ..)| *journal_gen < gen)
        {
            return Err(corrupt(
                "the manifest lists a journal older than its snapshot",
            ));
        }
        loaded
            .journals
            .sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        // Chunks the manifest does not list: made by a lane that crashed before listing them
        // (no record in them), or older than the snapshot (a compaction's leftovers).
        for entry in std::fs::read_dir(dir).map_err(io_error("list the map's directory"))? {
            let entry = entry.map_err(io_error("list the map's directory"))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(journal_gen) = parse_name(&name).journal_gen() else {
                continue;
            };
            if journal_gen < gen || manifest.files.contains_key(&name) {
                continue;
            }
            let bytes = read_file(&entry.path(), "read a journal", "a journal vanished")?;
            if (CHUNK_HEADER..bytes.len())
                .step_by(8)
                .any(|at| record_at(&bytes[at..]))
            {
                if !power_lost {
                    return Err(corrupt(
                        "a journal the manifest does not list holds records",
                    ));
                }
                loaded.unlisted += 1;
            }
            newest = newest.max(journal_gen);
        }
        let journal = Journal::with_lock(dir, lock, newest);
        journal.snapshot_gen.store(gen, Ordering::Relaxed);
        *journal.manifest() = manifest;
        Ok((journal, loaded))
    }
}

fn read_snapshot<'a>(bytes: &'a [u8], gen: u64, contents: &mut Contents<'a>) -> Result<(), Error> {
    if bytes.len() < 48 || bytes[..8] != SNAPSHOT_MAGIC {
        return Err(corrupt("a snapshot's header is damaged"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != JOURNAL_FORMAT {
        return Err(Error::storage(StorageErrorKind::Version { found: version }));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 16);
    let count = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
    let crc = crc_of(&[body, &trailer[..8]]);
    if crc.to_le_bytes() != trailer[8..12]
        || trailer[12..] != [0; 4]
        || body[16..24] != gen.to_le_bytes()
    {
        return Err(corrupt("a snapshot's checksum does not match"));
    }
    let mut rest = &body[32..];
    let mut read = 0u64;
    while !rest.is_empty() {
        let (Some(head), true) = (rest.get(..16), rest.len() >= 16) else {
            return Err(corrupt("a snapshot is cut short"));
        };
        let key_len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let value_len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
        let seq = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        let Some(entry) = rest.get(16..16 + key_len + value_len) else {
            return Err(corrupt("a snapshot is cut short"));
        };
        let (key, value) = entry.split_at(key_len);
        let slot = contents.keys.entry(key).or_default();
        if slot.0.is_some() {
            return Err(corrupt("a snapshot holds a key twice"));
        }
        slot.0 = Some((value, seq));
        contents.max_seq = contents.max_seq.max(seq);
        rest = &rest[16 + key_len + value_len..];
        read += 1;
    }
    if read != count {
        return Err(corrupt("a snapshot's entry count does not match"));
    }
    Ok(())
}

/// A record that checks, at the start of `bytes`: its length, kind, state, checksum and
/// padding; `None` if not (or if it is cut off).
fn decode_record(bytes: &[u8]) -> Option<(Record<'_>, &[u8], usize)> {
    let head = bytes.get(..RECORD_HEAD)?;
    let first = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    if first == 0 {
        return None;
    }
    let body_len = first as u32 as usize;
    let crc = (first >> 32) as u32;
    let key_len = u32::from_le_bytes(head[24..28].try_into().expect("4 bytes")) as usize;
    let body = bytes.get(RECORD_HEAD..RECORD_HEAD + body_len)?;
    let kind = match head[28] {
        1 => Kind::Put,
        2 => Kind::Remove,
        _ => return None,
    };
    let state = head[STATE_AT];
    // The cheap tests first: the tail rule tries this at every word of a cut record's bytes.
    if key_len > body_len
        || state > VOID
        || head[30..32] != [0, 0]
        || crc_of(&[&head[8..STATE_AT], &head[STATE_AT + 1..], body]) != crc
    {
        return None;
    }
    // The padding after the body is zero (it is outside the checksum).
    let len = RECORD_HEAD + body_len.next_multiple_of(8);
    if bytes
        .get(RECORD_HEAD + body_len..len)
        .is_none_or(|padding| padding.iter().any(|&b| b != 0))
    {
        return None;
    }
    let (key, value) = body.split_at(key_len);
    let record = Record {
        seq: u64::from_le_bytes(head[8..16].try_into().expect("8 bytes")),
        prev: u64::from_le_bytes(head[16..24].try_into().expect("8 bytes")),
        kind,
        state,
        value,
        at: None,
        applied: false,
    };
    Some((record, key, len))
}

fn record_at(bytes: &[u8]) -> bool {
    decode_record(bytes).is_some()
}

/// Read one chunk's records into `contents`; `synced` is how far the last checkpoint synced
/// it (0: not at all), `power_lost` whether the machine may have restarted since it was
/// written (the tail rule, module docs).
fn read_chunk<'a>(
    bytes: &'a [u8],
    gen: u64,
    synced: u64,
    power_lost: bool,
    contents: &mut Contents<'a>,
) -> Result<(), Error> {
    let synced = usize::try_from(synced).unwrap_or(usize::MAX);
    if synced > bytes.len() || synced % 8 != 0 || (synced != 0 && synced < CHUNK_HEADER) {
        return Err(corrupt("a journal is shorter than its checkpoint says"));
    }
    let header_ok = bytes.len() >= CHUNK_HEADER
        && bytes[..8] == CHUNK_MAGIC
        && crc_of(&[&bytes[..32]]).to_le_bytes() == bytes[32..36]
        && bytes[16..24] == gen.to_le_bytes();
    if !header_ok {
        // A chunk is synced (its header written) before it is listed, so a listed chunk's
        // header is on the disk: damaged, unless the open repairs (`Builder::repair`), when
        // a chunk no checkpoint synced is dropped whole (nothing in it was promised).
        if synced > 0 || !power_lost {
            return Err(corrupt("a journal's header is damaged"));
        }
        if bytes.iter().any(|&b| b != 0) {
            contents.torn += 1;
        }
        return Ok(());
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != JOURNAL_FORMAT {
        return Err(Error::storage(StorageErrorKind::Version { found: version }));
    }
    let mut at = CHUNK_HEADER;
    loop {
        let Some((mut record, key, len)) = bytes.get(at..).and_then(decode_record) else {
            // The end of the records. A first word that is not zero was written whole (it
            // is the record's last store), so on a machine that has not restarted a record
            // that fails behind one is damage; otherwise the tail rule decides.
            let first = bytes.get(at..at + 8).map_or(0, |word| {
                u64::from_le_bytes(word.try_into().expect("8 bytes"))
            });
            if first != 0 && !power_lost {
                return Err(corrupt("a journal record's checksum does not match"));
            }
            return match durable::judge_tail(bytes, at, synced as u64, power_lost, 8, record_at) {
                durable::Tail::Whole => Ok(()),
                durable::Tail::Torn { .. } => {
                    // A crash's cut record (its first word still zero) is no loss.
                    if power_lost {
                        contents.torn += 1;
                    }
                    Ok(())
                }
                durable::Tail::Damaged { .. } => {
                    Err(corrupt("a journal record's checksum does not match"))
                }
            };
        };
        contents.max_seq = contents.max_seq.max(record.seq);
        contents.records += 1;
        if record.state != VOID {
            record.at =
                (record.state == PENDING).then(|| (contents.files.len(), (at + STATE_AT) as u64));
            contents.keys.entry(key).or_default().1.push(record);
        }
        at += len;
    }
}

/// A key's state after replay: its value's bytes and sequence number, or absent; and whether
/// the records left more than one candidate for the final state (only a power loss can: the
/// caller then compacts before the map takes writes, so the choice is not made again).
///
/// The records of a key name, as `prev`, the sequence number of the value their writer read
/// and replaced; 0 if it read the key absent. A `prev` other than 0 names one value exactly;
/// 0 does not say *which* absence (an insert decided on one absence can land on a later one,
/// after the key came and went), so replay works in *segments*: each starts at the snapshot's
/// value or at a write from absence that happened, and follows `prev` links until a removal
/// ends it or nothing follows. In a real history at most one segment ends with a value (any
/// insert from absence needs every earlier value removed); it is the key's state, and if every
/// segment ends in a removal the key is absent. `persistent_map.rs` argues the choice at each
/// step.
pub(crate) fn replay<'a>(
    snapshot: Option<Stored<'a>>,
    records: &mut [Record<'a>],
) -> (Option<Stored<'a>>, bool) {
    if records.is_empty() {
        return (snapshot, false);
    }
    records.sort_unstable_by_key(|r| r.seq);
    let mut by_prev: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (index, record) in records.iter().enumerate() {
        match record.prev {
            0 => roots.push(index),
            prev => by_prev.entry(prev).or_default().push(index),
        }
    }
    let snapshot_seq = snapshot.map(|(_, seq)| seq);
    // Known to have taken effect: confirmed (by its writer after its swap, or by a reader
    // that saw its value), read by a later write (which names it), or held by the snapshot.
    let happened = |r: &Record<'_>| {
        r.state == CONFIRMED || by_prev.contains_key(&r.seq) || Some(r.seq) == snapshot_seq
    };
    let mut taken = Vec::new();
    // Follow a segment from the value with sequence number `seq`: the next step is the
    // earliest record naming it that happened; failing that, a removal of it in flight (an
    // absence cannot be confirmed by the read that sees it, so it may have been seen). A put
    // in flight that nobody confirmed or read was seen by nobody: it is not taken.
    // (A record numbered below what it names is damage, skipped: numbers only grow along a
    // chain, so a damaged file cannot make this loop.)
    let follow = |mut value: Stored<'a>, taken: &mut Vec<usize>| -> Option<Stored<'a>> {
        loop {
            let next = by_prev.get(&value.1).and_then(|candidates| {
                let mut later = candidates.iter().filter(|&&i| records[i].seq > value.1);
                later
                    .clone()
                    .find(|&&i| happened(&records[i]))
                    .or_else(|| later.find(|&&i| records[i].kind == Kind::Remove))
                    .copied()
            });
            let Some(next) = next else {
                return Some(value);
            };
            taken.push(next);
            let record = &records[next];
            match record.kind {
                Kind::Put => value = (record.value, record.seq),
                Kind::Remove => return None,
            }
        }
    };
    let mut ends = Vec::new();
    if let Some(value) = snapshot {
        ends.extend(follow(value, &mut taken));
    }
    for &root in &roots {
        let record = &records[root];
        if record.kind == Kind::Put && happened(record) {
            taken.push(root);
            ends.extend(follow((record.value, record.seq), &mut taken));
        }
    }
    // Segments that meet (the snapshot's value on a root's path) end at the same record.
    ends.sort_unstable_by_key(|(_, seq)| *seq);
    ends.dedup_by_key(|(_, seq)| *seq);
    let ambiguous = ends.len() > 1;
    // More than one end only after a power loss took a removal: each is a value the key held
    // after the last checkpoint; the newest-numbered is kept.
    let end = ends.pop();
    taken.sort_unstable();
    taken.dedup();
    for index in taken {
        records[index].applied = true;
    }
    (end, ambiguous)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(seq: u64, prev: u64, state: u8, value: &str) -> Record<'_> {
        Record {
            seq,
            prev,
            kind: Kind::Put,
            state,
            value: value.as_bytes(),
            at: None,
            applied: false,
        }
    }

    fn remove(seq: u64, prev: u64, state: u8) -> Record<'static> {
        Record {
            seq,
            prev,
            kind: Kind::Remove,
            state,
            value: &[],
            at: None,
            applied: false,
        }
    }

    fn replayed<'a>(
        snapshot: Option<(&'a str, u64)>,
        mut records: Vec<Record<'a>>,
    ) -> Option<String> {
        let snapshot = snapshot.map(|(v, seq)| (v.as_bytes(), seq));
        let (end, ambiguous) = replay(snapshot, &mut records);
        assert!(!ambiguous, "a process crash leaves one candidate");
        end.map(|(v, _)| String::from_utf8(v.to_vec()).unwrap())
    }

    #[test]
    fn a_chain_of_confirmed_records_replays_in_order() {
        let records = vec![
            put(3, 1, CONFIRMED, "c"),
            put(1, 0, CONFIRMED, "a"),
            remove(5, 3, CONFIRMED),
            put(7, 0, CONFIRMED, "d"),
        ];
        assert_eq!(replayed(None, records), Some("d".into()));
        // From a snapshot that already has seq 3: the records before it do not replay.
        let records = vec![put(1, 0, CONFIRMED, "a"), put(3, 1, CONFIRMED, "c")];
        assert_eq!(replayed(Some(("c", 3)), records), Some("c".into()));
    }

    #[test]
    fn after_a_removal_only_later_writes_from_absence_follow() {
        // 2 inserted from absence, 4 removed it; 3 is a write from absence that lost its race
        // and was in flight (not voided yet) at the crash: not taken.
        let records = vec![
            put(2, 0, CONFIRMED, "a"),
            put(3, 0, PENDING, "stale"),
            remove(4, 2, CONFIRMED),
        ];
        assert_eq!(replayed(None, records), None);
    }

    #[test]
    fn an_insert_decided_on_an_earlier_absence_can_land_after_a_removal() {
        // 1 and 2 both read the key absent; 1 landed, 3 removed it, then 2 landed on the new
        // absence (its insert only needs the key absent) and returned: its number is below
        // the removal's, and it is still the key's value.
        let records = vec![
            put(1, 0, CONFIRMED, "a"),
            put(2, 0, CONFIRMED, "b"),
            remove(3, 1, CONFIRMED),
        ];
        assert_eq!(replayed(None, records), Some("b".into()));
        // Landed first instead: 2, then 4 removed it, then 1 (with a smaller number).
        let records = vec![
            put(1, 0, CONFIRMED, "a"),
            put(2, 0, CONFIRMED, "b"),
            remove(4, 2, CONFIRMED),
        ];
        assert_eq!(replayed(None, records), Some("a".into()));
    }

    #[test]
    fn a_snapshot_value_on_a_segment_is_one_end() {
        // The snapshot's walk saw 5, which the journal has as a pending write read by 6.
        let records = vec![
            put(1, 0, CONFIRMED, "a"),
            put(5, 1, PENDING, "b"),
            put(6, 5, CONFIRMED, "c"),
        ];
        assert_eq!(replayed(Some(("b", 5)), records), Some("c".into()));
        // The walk saw 5 and nothing read it: the snapshot holds it, so it happened.
        let records = vec![put(1, 0, CONFIRMED, "a"), put(5, 1, PENDING, "b")];
        assert_eq!(replayed(Some(("b", 5)), records), Some("b".into()));
    }

    #[test]
    fn a_confirmed_record_beats_an_in_flight_sibling() {
        // 5 and 6 both read 1; 5 won and was confirmed, 6 lost and was not voided yet.
        let records = vec![
            put(1, 0, CONFIRMED, "a"),
            put(5, 1, CONFIRMED, "won"),
            put(6, 1, PENDING, "lost"),
        ];
        assert_eq!(replayed(None, records), Some("won".into()));
    }

    #[test]
    fn a_record_with_a_successor_happened() {
        // 5 won but its writer died before confirming; 7 read it (and is in flight). 6 lost.
        let records = vec![
            put(1, 0, CONFIRMED, "a"),
            put(6, 1, PENDING, "lost"),
            put(5, 1, PENDING, "won"),
            put(7, 5, PENDING, "next"),
        ];
        // 5 is taken (7 read it); 7 itself, unconfirmed and unread, was seen by nobody.
        assert_eq!(replayed(None, records), Some("won".into()));
    }

    #[test]
    fn among_in_flight_records_a_removal_is_kept() {
        // A returned read may have seen the key absent: the removal must stay.
        let records = vec![
            put(1, 0, CONFIRMED, "a"),
            put(6, 1, PENDING, "put"),
            remove(5, 1, PENDING),
        ];
        assert_eq!(replayed(None, records), None);
    }

    #[test]
    fn orphans_and_unconfirmed_puts_are_not_taken() {
        let records = vec![put(1, 0, CONFIRMED, "a"), put(9, 4, CONFIRMED, "orphan")];
        assert_eq!(replayed(None, records), Some("a".into()));
        // A put in flight that nobody confirmed or read: seen by nobody, so not taken (after a
        // power loss it may even have lost its race with its confirmation unwritten).
        let records = vec![put(1, 0, CONFIRMED, "a"), put(2, 1, PENDING, "in flight")];
        assert_eq!(replayed(None, records), Some("a".into()));
        let records = vec![put(2, 0, PENDING, "in flight")];
        assert_eq!(replayed(None, records), None);
    }

    #[test]
    fn a_power_loss_that_took_a_removal_leaves_two_ends() {
        // 1 landed, its removal 3 was lost with the power, 2 landed after it: both values
        // were held after the checkpoint; replay reports the ambiguity.
        let mut records = vec![put(1, 0, CONFIRMED, "a"), put(2, 0, CONFIRMED, "b")];
        let (end, ambiguous) = replay(None, &mut records);
        assert!(ambiguous);
        assert_eq!(end.map(|(v, _)| v), Some(&b"b"[..]));
    }
}
