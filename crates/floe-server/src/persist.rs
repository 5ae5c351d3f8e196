//! Warm restarts (`floe-server -e DIR`): the cache's items kept in a directory of journals
//! and snapshots, so a server that was stopped, killed or crashed comes back with its items,
//! their flags, CAS uniques and expiry times.
//!
//! # Design
//!
//! **Records name results, not changes.** Every write that changes an item appends the whole
//! new item to a journal (key, value, flags, CAS unique, expiry as a Unix time, the time it
//! was stored, its flush generation, the meta protocol's stale mark and key form); a delete
//! appends the key, a `flush_all` the flush generation and delayed-flush time it left. Each
//! record carries a sequence number and a CRC32. Since a record is a state, not a step,
//! replay needs one rule only: for each key, the record with the largest sequence number
//! wins. And any subset of the records (what a power loss leaves) restores each key to a
//! state it had, never to a mix of two.
//!
//! **Sequence numbers follow the map's order of writes to a key.** A write takes its number
//! inside its `compute` decision or `remove_if` test (`cache/session.rs`, `sequenced`), that is
//! after it read the item it replaces; if its swap then fails, the decision runs again and
//! takes a new number. Let W1 then W2 be two successful writes of one key in the map's order.
//! W2's successful decision read W1's result (W2's swap succeeded against it), which W1
//! published after taking its number; the index's release/acquire on the item's word makes W1's
//! fetch-add happen before W2's, and fetch-adds of one atomic are totally ordered consistently
//! with happens-before, so seq(W1) < seq(W2). A relaxed counter therefore suffices.
//!
//! **An absent key has no version.** That argument needs W2's decision to have read W1's
//! result, and a write that inserts a key found absent read none: the key can be written and
//! removed again between its decision and its publication, and the map lets the insert land
//! (the key is absent when it does), carrying a number taken before those writes. Replay then
//! prefers the delete the insert came after: a set acknowledged after a delete came back absent
//! (the shared-key kill test found it in CI). So every removal notes, before it takes effect,
//! the number it stands for in the clock of its key's stripe ([`Store::removing`]: a delete its
//! own number; an eviction or expiry unlink, not journaled, the removed item's), and an insert
//! into an absent key reads that clock after its publication ([`Store::removed_after`]). If a
//! removal stood for a larger number than the insert's, the insert journals what the key holds
//! then (its own item, or one that replaced it) again, as a copy under a new number taken in a
//! decision that read it (`Session::inserted` in `cache/session.rs`), in its own session, before it
//! replies. Why that suffices: let R be the removal that the insert I follows in the key's
//! order. R raised the clock before its linearization (the engine's retire or the value word's
//! swap, both release RMWs), which I's insert read with acquire (it found the key absent), so
//! the raise happens before I's read of the clock, which therefore sees R's number or more
//! (coherence: relaxed suffices). The copy's number is taken after the same chain, so is larger
//! than R's, and its record is in the journal before I is acknowledged. (Copying only I's own
//! item was not enough: a write that replaced it first has a larger number, but its record
//! waits in its own session's buffer, which may end after a crash that this reply came before.)
//! If the key is absent by then, whatever removed it came after R. A removal that is not
//! journaled stands for the item it removed: an insert decided before that item's write and
//! landing after its eviction would otherwise lose to the evicted item's record. A stripe is
//! shared by many keys, so a removal of another key re-sequences an insert now and then for
//! nothing (one more swap and record).
//!
//! **A record is in the kernel before its reply is sent.** A worker answers all the requests
//! one read brought under one session; the session buffers its records and writes them to the
//! worker's journal with one `write` call when it ends, which is before the event loop sends
//! the replies. So a process crash (panic, abort, SIGKILL) loses no write a client heard of:
//! the page cache keeps what was written. A write in flight at the crash was either applied
//! and written whole, or is absent (a record cut short fails its CRC and ends its journal).
//! The housekeeping thread syncs the journals every `--persist-sync` milliseconds, so a power
//! loss or kernel crash loses at most the writes of the last interval, each whole or absent.
//!
//! **Snapshots keep the journals short** (compaction). When the journals hold more bytes than
//! the last snapshot (and at least `--persist-compact` megabytes), and at every clean stop:
//! 1. every lane (one journal per worker) is switched, under its lock, to a new file of the
//!    next generation `g + 1`, so from then on records go there;
//! 2. a snapshot of generation `g + 1` is written from the live map: a temporary file, synced,
//!    renamed into place, the directory synced;
//! 3. the snapshot and journals of earlier generations are deleted.
//!
//! Replay reads the newest snapshot `s` and every journal of generation `s` or later.
//! Step 1 is one cut across all lanes: a session holds the store's cut lock (shared) from
//! before its first write until its records are appended, and step 1 switches every lane
//! under the lock held exclusively. So a write's record is in the journal of the generation
//! in which the write was applied: writes in generation `g` were applied before the cut,
//! writes in `g + 1` after it. Why nothing is lost: every write of generation `g` was applied
//! before step 2 began to read the map, which therefore shows that write or a later one of
//! the key (a key the map no longer holds was deleted later, and that delete is either before
//! the cut, shown by the key's absence, or after it, its record in `g + 1`). Every record of
//! `g + 1` is of a write applied after the cut, so later in its key's order, with a larger
//! sequence number, than any write of `g`: the largest number wins over the snapshot's item
//! exactly when its write came after what the snapshot read. A crash before step 2's rename
//! leaves snapshot `g` and journals `g` and `g + 1`, all read; after it, journals `g` are no
//! longer needed. (Switching lane by lane with no cut was wrong: a session that set a key
//! before the switch but appended after it put the set in `g + 1`, while a later delete of the
//! key, appended earlier by a shorter session, went to `g` and was deleted with it, so replay
//! brought the set back. The shared-key kill test found it in CI.)
//!
//! **Restoring.** An open maps the files, checks every record (a damaged snapshot is refused
//! before anything else happens) and chooses each key's winner; the cache then restores the
//! winners on a thread of its own while the server already listens. Reads find what is back;
//! writes wait until the restore is done (`Cache::open`, `Cache::wait_restored`), so a restored
//! record never overwrites a newer write, delete or flush, and new sequence numbers and CAS
//! uniques are larger than every restored one.
//!
//! **What is not kept**: read marks (an item's frequency, whether and when it was read, the
//! win token), and evictions and expiry unlinks (an evicted item can come back after a
//! restart, which a cache is free to do: it was the key's last value; a memory limit lower
//! than before evicts as the items are restored). A record of an item that has expired by the
//! time of the restart is not restored.
//!
//! **Damage is refused, never served** (`floe::durable` holds the rules every floe format
//! shares). The directory's `manifest` names every file replay needs: the snapshot (its
//! generation and length), each journal of that generation or later with the length its last
//! sync reached, and the boot of the machine that opened the directory. It changes only by
//! a whole-file replace, in this order: a new journal is created (header written, synced),
//! then listed, then written to; a snapshot is renamed into place, then listed with the older
//! journals unlisted, then the older files deleted; the housekeeping sync syncs the journals,
//! then records their lengths. An open refuses (exit code 2) a listed file that is missing,
//! shorter than its synced length, or not a regular file (a FIFO is refused, not waited on),
//! and judges each journal's end: a record that fails below the synced length is damage; on
//! a machine that has not restarted since (the boot id), the only end a crash leaves is one
//! record cut short by the end of the file (a `write` that SIGKILL interrupted), so a whole
//! record that fails, or whole records after a failed one, are damage too; after a restart,
//! what follows the synced length may be a power loss's and is dropped (logged). An open that
//! dropped a torn end truncates the journal there, and syncs every journal it kept, before it
//! lists them: the next open judges them whole. Undetectable: whole records removed from a
//! journal's end within the last sync interval (a journal cut at a record boundary there
//! looks like writes that never happened).
//!
//! **When the disk fails** (full, or an I/O error): the journal can no longer follow the cache,
//! and a restart from what it has would bring back values overwritten since. So the first
//! failed journal write (or sync) first unlinks the directory's `manifest`, in one step
//! that works on a full disk, and syncs the directory; only then does it turn persistence off
//! (a session whose append is skipped from then on replies after the marker is gone), log why,
//! and delete the journals and snapshots (at once, or when a compaction under way ends). The
//! server keeps serving from memory. An open refuses journals and snapshots without the marker
//! (a crash while the files were being deleted leaves a subset of them, which could restore a
//! value a lost delete had removed), so a directory emptied by a failure starts cold, and one
//! the failure left half-emptied is refused with a message that says so, never restored stale.
//! (Turning persistence off first and deleting the files after, as before, let sessions skip
//! their appends and reply while the files could still be restored, and waited for the
//! compaction lock from inside a session that held the cut the compaction was waiting for: a
//! review found both.) A failed snapshot is only
//! logged: the journals still hold everything, and the next compaction tries again.
//!
//! # Files
//!
//! ```text
//! DIR                         locked (flock on the directory) by the server that has it open
//! DIR/manifest                the files below that replay needs (present while they may be
//!                             restored from)
//! DIR/snapshot-<gen>          the items as of a compaction, then an end record
//! DIR/snapshot-<gen>.tmp      a snapshot being written (removed by the next open)
//! DIR/journal-<gen>-<lane>    records appended by worker <lane>
//! ```
//!
//! Each file starts with a 32-byte header (magic, format version, generation, lane, CRC32),
//! so a foreign file or one from another format version is refused by name.

use std::{
    collections::HashMap,
    fmt,
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, TryLockError,
    },
    time::Instant,
};

use crossbeam_utils::CachePadded;
use floe::durable::{self, Listed};

use crate::log;

const JOURNAL_MAGIC: [u8; 8] = *b"floejrnl";
const SNAPSHOT_MAGIC: [u8; 8] = *b"floesnap";
/// The format of the files; another is refused.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of a file's header.
pub const FILE_HEADER: usize = 32;
/// Bytes of a record's fixed part (the key and the value follow).
pub const RECORD_HEADER: usize = 56;

/// The manifest (module docs): what replay needs. Its presence also says the directory's
/// journals and snapshots may be restored from: removed first when a journal write fails
/// (`Store::fail`).
const MANIFEST: &str = "manifest";
const MANIFEST_MAGIC: [u8; 8] = *b"floemani";

/// Stripes of the removal clocks (`Store::removing`): 32 KiB, so that a removal of another
/// key rarely re-sequences an insert.
const REMOVAL_STRIPES: usize = 4096;

/// The removal clock of a key of hash `hash` (its top bits).
fn removal_stripe(hash: u64) -> usize {
    (hash >> (64 - REMOVAL_STRIPES.trailing_zeros())) as usize
}

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An item as a write left it.
    Item = 1,
    /// The key was deleted.
    Delete = 2,
    /// A `flush_all`: the flush generation after it and its delayed time.
    Flush = 3,
    /// The end of a snapshot (`seq` is the number of records before it).
    End = 4,
}

impl Kind {
    fn of(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Item,
            2 => Kind::Delete,
            3 => Kind::Flush,
            4 => Kind::End,
            _ => return None,
        })
    }
}

/// Why a record does not decode when the bytes end inside it.
const CUT_SHORT: &str = "a record cut short";

const STALE: u8 = 1;
const BINARY_KEY: u8 = 2;

/// One record: an item, a delete, a flush or a snapshot's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// What it says.
    pub kind: Kind,
    /// Its place in the order of writes to its key (the larger wins).
    pub seq: u64,
    /// The key (empty for a flush or an end).
    pub key: &'a [u8],
    /// The value bytes (items only).
    pub data: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// The CAS unique.
    pub cas: u64,
    /// An item's expiry as a Unix time (0: never); a flush's delayed time as a Unix time
    /// (0: none pending).
    pub expires: i64,
    /// When the item was stored, as a Unix time.
    pub stored: i64,
    /// The flush generation an item was stored in, or the one a flush left.
    pub generation: u32,
    /// Marked stale by a meta invalidation.
    pub stale: bool,
    /// Its key was given in base64 (meta `b`).
    pub binary_key: bool,
}

impl<'a> Record<'a> {
    /// A record of `kind` with nothing else set.
    pub fn new(kind: Kind, seq: u64) -> Record<'a> {
        Record {
            kind,
            seq,
            key: &[],
            data: &[],
            flags: 0,
            cas: 0,
            expires: 0,
            stored: 0,
            generation: 0,
            stale: false,
            binary_key: false,
        }
    }

    /// Bytes it takes encoded.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER + self.key.len() + self.data.len()
    }

    /// Append the record to `out`: a CRC32 of everything after it, then the fields, the key
    /// and the value, little-endian.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.reserve(self.encoded_len());
        out.extend_from_slice(&[0; 4]);
        out.push(self.kind as u8);
        out.push(if self.stale { STALE } else { 0 } | if self.binary_key { BINARY_KEY } else { 0 });
        out.extend_from_slice(&(self.key.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.cas.to_le_bytes());
        out.extend_from_slice(&self.expires.to_le_bytes());
        out.extend_from_slice(&self.stored.to_le_bytes());
        out.extend_from_slice(self.key);
        out.extend_from_slice(self.data);
        let crc = crc32fast::hash(&out[start + 4..]);
        out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// The record at the start of `bytes` and its length, or why there is none (cut short,
    /// a checksum that fails, an unknown kind, a key too long).
    pub fn decode(bytes: &'a [u8]) -> Result<(Record<'a>, usize), &'static str> {
        if bytes.len() < RECORD_HEADER {
            return Err(CUT_SHORT);
        }
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let key_len = u16_at(6) as usize;
        let data_len = u32_at(8) as usize;
        if key_len > crate::protocol::MAX_KEY_LEN {
            return Err("a key longer than 250 bytes");
        }
        let len = RECORD_HEADER + key_len + data_len;
        if bytes.len() < len {
            return Err(CUT_SHORT);
        }
        let kind = Kind::of(bytes[4]).ok_or("a record of an unknown kind")?;
        if crc32fast::hash(&bytes[4..len]) != u32_at(0) {
            return Err("a record whose checksum fails");
        }
        let bits = bytes[5];
        Ok((
            Record {
                kind,
                seq: u64_at(24),
                key: &bytes[RECORD_HEADER..RECORD_HEADER + key_len],
                data: &bytes[RECORD_HEADER + key_len..len],
                flags: u32_at(12),
                cas: u64_at(32),
                expires: u64_at(40) as i64,
                stored: u64_at(48) as i64,
                generation: u32_at(16),
                stale: bits & STALE != 0,
                binary_key: bits & BINARY_KEY != 0,
            },
            len,
        ))
    }
}

/// A file's header: magic, format version, generation, lane, and a CRC32 of those.
fn file_header(magic: [u8; 8], gen: u64, lane: u32) -> [u8; FILE_HEADER] {
    let mut header = [0; FILE_HEADER];
    header[..8].copy_from_slice(&magic);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&lane.to_le_bytes());
    header[16..24].copy_from_slice(&gen.to_le_bytes());
    let crc = crc32fast::hash(&header[..24]);
    header[24..28].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Check a file's header against what its name says.
fn check_header(bytes: &[u8], magic: [u8; 8], gen: u64, lane: u32) -> Result<(), &'static str> {
    if bytes.len() < FILE_HEADER || bytes[..8] != magic {
        return Err("not a floe-server file (its magic is wrong)");
    }
    if crc32fast::hash(&bytes[..24]).to_le_bytes() != bytes[24..28] || bytes[28..32] != [0; 4] {
        return Err("its header is damaged (its checksum fails)");
    }
    if bytes[8..12] != FORMAT_VERSION.to_le_bytes() {
        return Err("written by another format version");
    }
    if bytes[12..16] != lane.to_le_bytes() || bytes[16..24] != gen.to_le_bytes() {
        return Err("its header does not match its name");
    }
    Ok(())
}

/// Why a persistence directory could not be opened or written.
#[derive(Debug)]
pub enum StoreError {
    /// An I/O error on a path (what was being done, the path, the error).
    Io(&'static str, PathBuf, io::Error),
    /// Another process holds the directory.
    Locked(PathBuf),
    /// A file that is not ours, or of another format version.
    Foreign(PathBuf, &'static str),
    /// A snapshot that is damaged (where, and what is wrong).
    Corrupt(PathBuf, u64, &'static str),
    /// Journals or snapshots without the `manifest` beside them: left by a run whose
    /// persistence failed midway through emptying the directory (or copied without it).
    Unmarked(PathBuf),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io(what, path, error) => {
                write!(f, "cannot {what} {}: {error}", path.display())
            }
            StoreError::Locked(path) => write!(
                f,
                "{} is in use by another process (its lock is held)",
                path.display()
            ),
            StoreError::Foreign(path, why) => write!(f, "{}: {why}", path.display()),
            StoreError::Corrupt(path, offset, why) => write!(
                f,
                "{} is damaged at byte {offset}: {why} (move the directory away to start cold)",
                path.display()
            ),
            StoreError::Unmarked(path) => write!(
                f,
                "{} holds journals or snapshots but no `{MANIFEST}`: a run whose disk failed \
                 left them, they were copied without it, or an older floe-server wrote them, \
                 and they may be stale (remove them to start cold)",
                path.display(),
            ),
        }
    }
}

impl std::error::Error for StoreError {}

fn io_error<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> StoreError + 'p {
    move |error| StoreError::Io(what, path.to_path_buf(), error)
}

/// How the directory is kept. (How often the journals are synced is the housekeeping
/// thread's: `server::Config::sync_ms`.)
#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    /// Compact once the journals hold at least this many bytes and more than the last
    /// snapshot.
    pub compact_bytes: u64,
    /// Open a directory whose journals would be refused as damaged (a record that fails
    /// anywhere, a journal cut below its last sync, missing, or holding records the manifest
    /// does not list) instead: each journal is cut at its first failed record, and what was
    /// dropped is logged (`--persist-repair`). A missing or damaged snapshot, or a damaged
    /// manifest, is refused still.
    pub repair: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            compact_bytes: 64 << 20,
            repair: false,
        }
    }
}

/// What an open found and restored.
#[derive(Clone, Debug, Default)]
pub struct Replayed {
    /// Files read (snapshot and journals).
    pub files: usize,
    /// Bytes read.
    pub bytes: u64,
    /// Records read.
    pub records: u64,
    /// Records that won for their key and were handed to the cache (items only).
    pub items: usize,
    /// Bytes at the end of journals that did not form whole records (a write cut short by a
    /// crash, or lost to a power loss), dropped.
    pub torn_bytes: u64,
    /// Seconds spent reading and choosing the records.
    pub read_seconds: f64,
}

/// What replay hands the cache to restore.
pub struct Restore<'a> {
    /// The items to restore, one per key (expired ones included: the cache drops them).
    pub items: Vec<Record<'a>>,
    /// The flush generation the last `flush_all` left.
    pub generation: u32,
    /// A delayed `flush_all`'s time as a Unix time (0: none).
    pub oldest_live: i64,
    /// The largest CAS unique of any record (new uniques must be larger).
    pub max_cas: u64,
}

/// What an open read, for the cache to restore (in the background: the server listens
/// meanwhile). Owns the mapped files its records point into.
pub struct Replay {
    // Declared before `_files`, so dropped first: its records borrow from them.
    restore: Restore<'static>,
    _files: Vec<FileBytes>,
}

impl Replay {
    /// The items and flush state to restore.
    pub fn restore(&self) -> &Restore<'_> {
        &self.restore
    }
}

/// One worker's journal.
struct Lane {
    file: Arc<File>,
    /// Its generation and lane number (its name), and the bytes written to it.
    gen: u64,
    number: u32,
    length: u64,
}

/// An open persistence directory.
pub struct Store {
    dir: PathBuf,
    /// Held for the store's life: the flock that keeps out a second server.
    _lock: floe::durable::DirLock,
    /// The manifest as last written (taken after a lane's lock, never before one).
    manifest: Mutex<durable::Manifest>,
    lanes: Box<[CachePadded<Mutex<Lane>>]>,
    /// The generation the lanes write (changed by a compaction, under `compacting`).
    generation: AtomicU64,
    compacting: Mutex<()>,
    /// The cut between generations: a session holds it shared from before its first write to
    /// after its records are appended (`Cache`'s sessions), a compaction exclusively while it
    /// switches the lanes, so every write lands in the journal of the generation in which it
    /// was applied (module docs).
    cut: std::sync::RwLock<()>,
    next_seq: CachePadded<AtomicU64>,
    /// Per stripe of key hashes, the largest number a removal of one of its keys stood for
    /// (module docs, "An absent key has no version").
    removals: Box<[AtomicU64]>,
    /// Bytes appended to the journals since the last snapshot.
    journal_bytes: AtomicU64,
    /// Bytes of the last snapshot.
    snapshot_bytes: AtomicU64,
    snapshots: AtomicU64,
    failed: AtomicBool,
    options: StoreOptions,
}

/// A file in the directory, by what its name says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Name {
    Snapshot(u64),
    SnapshotTemporary(u64),
    Journal(u64, u32),
}

impl Name {
    fn parse(name: &str) -> Option<Name> {
        if let Some(rest) = name.strip_prefix("snapshot-") {
            return match rest.strip_suffix(".tmp") {
                Some(gen) => gen.parse().ok().map(Name::SnapshotTemporary),
                None => rest.parse().ok().map(Name::Snapshot),
            };
        }
        let (gen, lane) = name.strip_prefix("journal-")?.split_once('-')?;
        Some(Name::Journal(gen.parse().ok()?, lane.parse().ok()?))
    }

    fn file_name(self) -> String {
        match self {
            Name::Snapshot(gen) => format!("snapshot-{gen}"),
            Name::SnapshotTemporary(gen) => format!("snapshot-{gen}.tmp"),
            Name::Journal(gen, lane) => format!("journal-{gen}-{lane}"),
        }
    }

    fn generation(self) -> u64 {
        match self {
            Name::Snapshot(gen) | Name::SnapshotTemporary(gen) | Name::Journal(gen, _) => gen,
        }
    }
}

/// A file's bytes, mapped rather than copied: replay reads hundreds of megabytes, and a copy
/// would be a fresh page to zero and fill for every page of the file.
enum FileBytes {
    Mapped(memmap2::Mmap),
    Empty,
}

impl FileBytes {
    fn map(path: &Path) -> io::Result<FileBytes> {
        let file = floe::durable::open_regular(path, OpenOptions::new().read(true))?;
        if file.metadata()?.len() == 0 {
            return Ok(FileBytes::Empty);
        }
        // SAFETY: a read-only private mapping of a file in the directory this process holds
        // locked (flock), so no other floe-server writes or truncates it while it is mapped;
        // another program that truncated it meanwhile would end the process with SIGBUS, as
        // with any mapped file (the directory is the server's own).
        let mapped = unsafe { memmap2::Mmap::map(&file)? };
        let _ = mapped.advise(memmap2::Advice::Sequential);
        Ok(FileBytes::Mapped(mapped))
    }
}

impl core::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(mapped) => mapped,
            FileBytes::Empty => &[],
        }
    }
}

fn list(dir: &Path) -> Result<Vec<Name>, StoreError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error("read", dir))? {
        let entry = entry.map_err(io_error("read", dir))?;
        if let Some(name) = entry.file_name().to_str().and_then(Name::parse) {
            names.push(name);
        }
    }
    Ok(names)
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    floe::durable::sync_dir(dir).map_err(io_error("sync", dir))
}

impl Store {
    /// Open (creating it if need be) the directory `dir` for a cache of `lanes` workers;
    /// read and check its snapshot and journals and choose what they restore (the
    /// [`Replay`], which the cache restores), then start journals of a new generation.
    /// `now_unix` is the time expiry and delayed flushes are judged at.
    ///
    /// # Errors
    /// The directory cannot be created, read or locked (another server has it), a file is
    /// foreign or of another format version, or damaged (a listed file missing, cut below
    /// its last sync or not a regular file; a record that fails where no crash leaves one;
    /// the snapshot). An open refused for what it read changes nothing; one that fails after
    /// (creating this run's journals, writing the manifest) may have cut torn journal ends
    /// and made journals, which the next open judges as before.
    pub fn open(
        dir: &Path,
        lanes: usize,
        options: StoreOptions,
        now_unix: i64,
    ) -> Result<(Store, Replayed, Replay), StoreError> {
        use floe::durable::{ManifestError, Tail};
        fs::create_dir_all(dir).map_err(io_error("create", dir))?;
        let lock = durable::DirLock::acquire(dir).map_err(|error| match error {
            durable::LockError::Held => StoreError::Locked(dir.into()),
            durable::LockError::Io(error) => StoreError::Io("lock", dir.into(), error),
        })?;
        let started = Instant::now();
        let names = list(dir)?;
        let manifest_path = dir.join(MANIFEST);
        let manifest = match durable::read_regular(&manifest_path, 1 << 30) {
            Ok(bytes) => durable::Manifest::decode(&bytes, MANIFEST_MAGIC, FORMAT_VERSION)
                .map_err(|error| match error {
                    ManifestError::Foreign => StoreError::Foreign(
                        manifest_path.clone(),
                        "not a floe-server manifest (its magic is wrong)",
                    ),
                    ManifestError::Version(_) => StoreError::Foreign(
                        manifest_path.clone(),
                        "written by another format version",
                    ),
                    ManifestError::Damaged => StoreError::Corrupt(
                        manifest_path.clone(),
                        0,
                        "its checksum fails or it is cut short",
                    ),
                })?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                if !names.is_empty() {
                    return Err(StoreError::Unmarked(dir.to_path_buf()));
                }
                durable::Manifest::default()
            }
            Err(error) => return Err(StoreError::Io("read", manifest_path, error)),
        };
        let power_lost = options.repair || durable::may_have_lost_power(manifest.boot);
        // The snapshot and the journals it lists, each checked against its length.
        let mut snapshot = None;
        let mut journals: Vec<((u64, u32), u64)> = Vec::new();
        for (name, listed) in &manifest.files {
            match Name::parse(name) {
                Some(Name::Snapshot(gen)) if snapshot.is_none() => snapshot = Some((gen, *listed)),
                Some(Name::Journal(gen, lane)) => journals.push(((gen, lane), listed.synced)),
                _ => {
                    return Err(StoreError::Corrupt(
                        manifest_path,
                        0,
                        "it lists a file of no known kind, or two snapshots",
                    ))
                }
            }
        }
        journals.sort_unstable();
        let from = snapshot.map_or(0, |(gen, _)| gen);
        if journals.iter().any(|&((gen, _), _)| gen < from)
            || journals
                .iter()
                .any(|&((gen, _), _)| gen > durable::MAX_GENERATION)
            || from > durable::MAX_GENERATION
        {
            return Err(StoreError::Corrupt(
                manifest_path,
                0,
                "its generations are impossible",
            ));
        }
        let missing = "the manifest lists it, but it is missing or not a regular file";
        let read = |name: Name| {
            let path = dir.join(name.file_name());
            FileBytes::map(&path).map_err(|error| match error.kind() {
                io::ErrorKind::NotFound | io::ErrorKind::InvalidInput => {
                    StoreError::Corrupt(path.clone(), 0, missing)
                }
                _ => StoreError::Io("read", path.clone(), error),
            })
        };
        let mut replayed = Replayed::default();
        let snapshot_bytes = match snapshot {
            Some((gen, listed)) => {
                let bytes = read(Name::Snapshot(gen))?;
                listed.check_length(bytes.len() as u64).map_err(|why| {
                    StoreError::Corrupt(
                        dir.join(Name::Snapshot(gen).file_name()),
                        bytes.len() as u64,
                        why,
                    )
                })?;
                bytes
            }
            None => FileBytes::Empty,
        };
        // The journals the manifest lists, then those it does not (a compaction that
        // crashed between creating its journals and listing them: they hold no record).
        if options.repair {
            // A repair goes on without a listed journal that is gone (what it held is lost),
            // and reads every journal as if no sync had promised any of it.
            journals.retain(|&((gen, lane), _)| {
                let path = dir.join(Name::Journal(gen, lane).file_name());
                let there = fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_file());
                if !there {
                    log!(
                        0,
                        "{}: missing, its records are lost (--persist-repair)",
                        path.display()
                    );
                }
                there
            });
            for (_, synced) in &mut journals {
                *synced = 0;
            }
        }
        let journal_bytes = journals
            .iter()
            .map(|&((gen, lane), _)| read(Name::Journal(gen, lane)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut unlisted = Vec::new();
        for name in &names {
            if let Name::Journal(gen, lane) = *name {
                if gen >= from && !manifest.files.contains_key(&name.file_name()) {
                    let path = dir.join(name.file_name());
                    let bytes = FileBytes::map(&path).map_err(io_error("read", &path))?;
                    // Ours (a header, or the part of one a crash left), never a foreign file
                    // that happens to have a journal's name: that is refused, not deleted.
                    let header = file_header(JOURNAL_MAGIC, gen, lane);
                    if bytes.len() >= FILE_HEADER {
                        check_header(&bytes, JOURNAL_MAGIC, gen, lane)
                            .map_err(|why| StoreError::Foreign(path.clone(), why))?;
                    } else if bytes[..] != header[..bytes.len()] {
                        return Err(StoreError::Foreign(
                            path,
                            "not a floe-server file (its magic is wrong)",
                        ));
                    }
                    let records =
                        (FILE_HEADER..bytes.len()).any(|at| Record::decode(&bytes[at..]).is_ok());
                    if records && !power_lost {
                        return Err(StoreError::Corrupt(
                            path,
                            0,
                            "it holds records, but the manifest does not list it",
                        ));
                    }
                    if records {
                        log!(
                            0,
                            "{}: records the manifest does not list (a power loss's), dropped",
                            path.display()
                        );
                        replayed.torn_bytes += bytes.len() as u64;
                    }
                    unlisted.push(*name);
                }
            }
        }
        let mut chosen = Chosen::default();
        if let Some((gen, _)) = snapshot {
            let path = dir.join(Name::Snapshot(gen).file_name());
            replayed.files += 1;
            replayed.bytes += snapshot_bytes.len() as u64;
            check_header(&snapshot_bytes, SNAPSHOT_MAGIC, gen, 0)
                .map_err(|why| StoreError::Foreign(path.clone(), why))?;
            chosen.read_snapshot(&snapshot_bytes, &path, &mut replayed)?;
        }
        // Where each journal's whole records end (a torn end is cut there below).
        let mut ends = Vec::with_capacity(journals.len());
        for (&((gen, lane), synced), bytes) in journals.iter().zip(&journal_bytes) {
            replayed.files += 1;
            replayed.bytes += bytes.len() as u64;
            let path = dir.join(Name::Journal(gen, lane).file_name());
            if (bytes.len() as u64) < synced.max(FILE_HEADER as u64) {
                return Err(StoreError::Corrupt(
                    path,
                    bytes.len() as u64,
                    "it is shorter than its last sync left it (cut short)",
                ));
            }
            check_header(bytes, JOURNAL_MAGIC, gen, lane)
                .map_err(|why| StoreError::Foreign(path.clone(), why))?;
            let (end, why) = chosen.read_journal(bytes, &mut replayed);
            ends.push(end);
            if end as usize == bytes.len() {
                continue;
            }
            // A record that fails. On a machine that has not restarted only a `write` cut by
            // the process's end can leave one, and only as the file's last, cut short.
            let cut_short = why == Some(CUT_SHORT);
            if !power_lost && !cut_short {
                return Err(StoreError::Corrupt(path, end, why.unwrap_or("damaged")));
            }
            let judged = durable::judge_tail(bytes, end as usize, synced, power_lost, 1, |rest| {
                Record::decode(rest).is_ok()
            });
            match judged {
                Tail::Whole | Tail::Torn { .. } => {
                    let torn = bytes.len() as u64 - end;
                    log!(
                        if power_lost { 0 } else { 1 },
                        "{}: {torn} bytes at its end are not whole records (a write cut short{}), dropped",
                        path.display(),
                        if power_lost { ", or lost to a power loss" } else { "" }
                    );
                    replayed.torn_bytes += torn;
                }
                Tail::Damaged { .. } => {
                    return Err(StoreError::Corrupt(
                        path,
                        end,
                        if (end) < synced {
                            "a record below what its last sync covered fails"
                        } else {
                            "whole records follow one that fails"
                        },
                    ))
                }
            }
        }
        let last_gen = names
            .iter()
            .map(|name| name.generation())
            .chain(snapshot.map(|(gen, _)| gen))
            .max()
            .unwrap_or(0);
        let next_seq = chosen.max_seq + 1;
        let restore_set = chosen.into_restore(now_unix);
        replayed.items = restore_set.items.len();
        replayed.read_seconds = started.elapsed().as_secs_f64();
        let snapshot_len = snapshot_bytes.len() as u64;
        // SAFETY: the records point into the files' mappings (or into static empty slices),
        // which stay where they are when the `FileBytes` values move, and which the `Replay`
        // owns and drops only after the records (field order); `Replay::restore` lends the
        // records out only for as long as the `Replay` is borrowed.
        let restore_set: Restore<'static> = unsafe { core::mem::transmute(restore_set) };
        let mut files = journal_bytes;
        files.push(snapshot_bytes);
        let replay = Replay {
            restore: restore_set,
            _files: files,
        };

        // Accepted. Each journal kept is cut at its whole records' end and synced, so that
        // from now on it is whole as listed (the next open judges it by this boot's rule).
        let mut kept = std::collections::BTreeMap::new();
        for (&((gen, lane), _), &end) in journals.iter().zip(&ends) {
            let path = dir.join(Name::Journal(gen, lane).file_name());
            let file = durable::open_regular(&path, OpenOptions::new().write(true))
                .map_err(io_error("open", &path))?;
            if file.metadata().map_err(io_error("read", &path))?.len() != end {
                file.set_len(end).map_err(io_error("truncate", &path))?;
            }
            file.sync_data().map_err(io_error("sync", &path))?;
            let listed = Listed {
                length: None,
                synced: end,
            };
            kept.insert(Name::Journal(gen, lane).file_name(), listed);
        }
        // A new generation for this run's journals: never append to a file a crash may have
        // cut short.
        let gen = durable::next_generation(last_gen).ok_or(StoreError::Corrupt(
            manifest_path.clone(),
            0,
            "its generations are used up",
        ))?;
        let lanes = (0..lanes as u32)
            .map(|lane| {
                let file = create_journal(dir, gen, lane)?;
                let listed = Listed {
                    length: None,
                    synced: FILE_HEADER as u64,
                };
                kept.insert(Name::Journal(gen, lane).file_name(), listed);
                Ok(CachePadded::new(Mutex::new(Lane {
                    file: Arc::new(file),
                    gen,
                    number: lane,
                    length: FILE_HEADER as u64,
                })))
            })
            .collect::<Result<_, StoreError>>()?;
        if let Some((gen, listed)) = snapshot {
            kept.insert(Name::Snapshot(gen).file_name(), listed);
        }
        // Unlisted journals (a compaction's that never held a record, or a power loss's
        // records dropped above) go before this boot is recorded: under its rule, records in
        // an unlisted journal are damage.
        for name in &unlisted {
            let _ = fs::remove_file(dir.join(name.file_name()));
        }
        sync_dir(dir)?;
        let manifest = durable::Manifest {
            boot: durable::boot_id(),
            files: kept,
        };
        manifest
            .write(dir, MANIFEST, MANIFEST_MAGIC, FORMAT_VERSION)
            .map_err(io_error("write", &manifest_path))?;
        let store = Store {
            dir: dir.to_path_buf(),
            _lock: lock,
            manifest: Mutex::new(manifest),
            lanes,
            generation: AtomicU64::new(gen),
            compacting: Mutex::new(()),
            cut: std::sync::RwLock::new(()),
            next_seq: CachePadded::new(AtomicU64::new(next_seq)),
            removals: (0..REMOVAL_STRIPES).map(|_| AtomicU64::new(0)).collect(),
            journal_bytes: AtomicU64::new(replayed.bytes.saturating_sub(snapshot_len)),
            snapshot_bytes: AtomicU64::new(snapshot_len),
            snapshots: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            options,
        };
        // What earlier runs left that replay no longer reads.
        for name in names {
            let stale = match name {
                Name::SnapshotTemporary(_) => true,
                Name::Snapshot(g) | Name::Journal(g, _) => g < from,
            };
            if stale {
                let _ = fs::remove_file(dir.join(name.file_name()));
            }
        }
        Ok((store, replayed, replay))
    }

    /// Change the manifest with `change` and write it; on failure the recorded one is kept.
    /// After a failure (`fail`, which unlinks the manifest under the same lock) nothing is
    /// written: the directory must not be restored from.
    fn record(&self, change: impl FnOnce(&mut durable::Manifest)) -> Result<(), StoreError> {
        let mut manifest = lock(&self.manifest);
        if self.failed() {
            return Ok(());
        }
        let mut changed = manifest.clone();
        change(&mut changed);
        if changed != *manifest {
            changed
                .write(&self.dir, MANIFEST, MANIFEST_MAGIC, FORMAT_VERSION)
                .map_err(io_error("write", &self.dir.join(MANIFEST)))?;
            *manifest = changed;
        }
        Ok(())
    }

    /// The next sequence number (see the module docs for why relaxed suffices).
    pub fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Note that a removal of a key of hash `hash` stands for number `seq` (a delete's own, or
    /// the removed item's for a removal that is not journaled): before the removal takes
    /// effect (module docs, "An absent key has no version").
    pub fn removing(&self, hash: u64, seq: u64) {
        self.removals[removal_stripe(hash)].fetch_max(seq, Ordering::Relaxed);
    }

    /// Whether a removal of a key of `hash`'s stripe stood for a number larger than `seq`, as
    /// far as this thread has seen: an insert into an absent key with number `seq` asks after
    /// its publication, and re-sequences its item if so (module docs).
    pub fn removed_after(&self, hash: u64, seq: u64) -> bool {
        self.removals[removal_stripe(hash)].load(Ordering::Relaxed) > seq
    }

    /// Whether writing failed and persistence is off (module docs: the directory is no
    /// longer restored from). Acquire: pairs with `fail`'s release, so a session that finds
    /// it set and skips its append replies after the `manifest` is gone.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes appended to the journals since the last snapshot.
    pub fn journal_bytes(&self) -> u64 {
        self.journal_bytes.load(Ordering::Relaxed)
    }

    /// Snapshots written by this run.
    pub fn snapshots(&self) -> u64 {
        self.snapshots.load(Ordering::Relaxed)
    }

    /// Hold the cut between generations (shared) for a session: from before its first write
    /// until its records are appended.
    pub fn hold_cut(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.cut
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Append a session's records to journal `lane` (one `write`).
    pub fn append(&self, lane: usize, records: &[u8]) {
        if self.failed() {
            return;
        }
        let written = {
            let mut lane = lock(&self.lanes[lane % self.lanes.len()]);
            let written = (&*lane.file).write_all(records);
            if written.is_ok() {
                lane.length += records.len() as u64;
            }
            written
        };
        match written {
            Ok(()) => {
                self.journal_bytes
                    .fetch_add(records.len() as u64, Ordering::Relaxed);
            }
            Err(error) => self.fail(&error),
        }
    }

    /// A journal write (or sync) failed: the directory must not be restored from (it would
    /// be stale), and persistence stops. First the `manifest` goes, in one unlink (which
    /// works on a full disk), synced; only then is `failed` published, so no session skips
    /// its append and replies while the files could still be restored. Then the files are
    /// removed, here if no compaction is under way, else by the compaction when it ends
    /// (waiting for it here could deadlock: a session that calls this holds the cut that the
    /// compaction may be waiting for), and by the next `sync` at the latest.
    fn fail(&self, error: &io::Error) {
        if self.failed() {
            return;
        }
        {
            // Under the manifest's lock: a `record` (a compaction's, a sync's) either wrote
            // before the unlink, or finds `failed` set and writes nothing.
            let _manifest = lock(&self.manifest);
            let _ = fs::remove_file(self.dir.join(MANIFEST));
            let _ = sync_dir(&self.dir);
            // Release: pairs with `failed()`'s Acquire; the unlink above comes first.
            if self.failed.swap(true, Ordering::Release) {
                return;
            }
        }
        log!(
            0,
            "cannot write the journal in {}: {error}; persistence is off and the directory is emptied (the next start is cold)",
            self.dir.display()
        );
        match self.compacting.try_lock() {
            Ok(_compacting) => self.remove_files(),
            Err(TryLockError::Poisoned(poisoned)) => {
                let _compacting = poisoned.into_inner();
                self.remove_files();
            }
            Err(TryLockError::WouldBlock) => {}
        }
    }

    /// Remove every journal and snapshot (after a failure; the caller holds `compacting`).
    fn remove_files(&self) {
        if let Ok(names) = list(&self.dir) {
            for name in names {
                let _ = fs::remove_file(self.dir.join(name.file_name()));
            }
        }
    }

    /// Sync every journal to the disk (the housekeeping thread's tick, and a clean stop), then
    /// record in the manifest how far each is synced. The lane's lock is held only to take its
    /// file and length, not while syncing.
    pub fn sync(&self) {
        if self.failed() {
            // What a failure could not remove at once (a compaction was under way).
            let _compacting = lock(&self.compacting);
            self.remove_files();
            return;
        }
        let mut synced = Vec::with_capacity(self.lanes.len());
        for lane in self.lanes.iter() {
            let (file, name, length) = {
                let lane = lock(lane);
                (Arc::clone(&lane.file), (lane.gen, lane.number), lane.length)
            };
            if let Err(error) = file.sync_data() {
                self.fail(&error);
                return;
            }
            synced.push((name, length));
        }
        let recorded = self.record(|manifest| {
            for (name, length) in synced {
                // A journal a compaction unlisted meanwhile is no longer needed.
                let name = Name::Journal(name.0, name.1).file_name();
                if let Some(listed) = manifest.files.get_mut(&name) {
                    listed.synced = listed.synced.max(length);
                }
            }
        });
        if let Err(error) = recorded {
            let error = match error {
                StoreError::Io(_, _, error) => error,
                other => io::Error::other(other.to_string()),
            };
            self.fail(&error);
        }
    }

    /// Whether the journals have grown enough to compact.
    pub fn wants_compaction(&self) -> bool {
        let journal = self.journal_bytes();
        !self.failed()
            && journal >= self.options.compact_bytes
            && journal > self.snapshot_bytes.load(Ordering::Relaxed)
    }

    /// Compact (module docs, steps 1 to 3): switch the lanes to a new generation, write a
    /// snapshot with `fill` (which pushes every live item), then delete what it replaces.
    /// Returns the snapshot's size.
    ///
    /// # Errors
    /// A file could not be created, written or synced; the directory is then as consistent
    /// as before (replay reads the older snapshot and every journal since).
    pub fn compact(
        &self,
        fill: impl FnOnce(&mut SnapshotWriter) -> io::Result<()>,
    ) -> Result<u64, StoreError> {
        let _compacting = lock(&self.compacting);
        let compacted = self.compact_holding_lock(fill);
        // A journal write that failed meanwhile left the files to this compaction (`fail`).
        if self.failed() {
            self.remove_files();
        }
        compacted
    }

    /// [`compact`](Self::compact)'s work, under `compacting`.
    fn compact_holding_lock(
        &self,
        fill: impl FnOnce(&mut SnapshotWriter) -> io::Result<()>,
    ) -> Result<u64, StoreError> {
        if self.failed() {
            return Ok(0);
        }
        let Some(gen) = floe::durable::next_generation(self.generation.load(Ordering::Relaxed))
        else {
            return Err(StoreError::Corrupt(
                self.dir.join(MANIFEST),
                0,
                "its generations are used up",
            ));
        };
        // Step 1, at one cut: no session is between a write and its append while the lanes
        // switch. The bytes counted from here on are the new generation's.
        let files = (0..self.lanes.len())
            .map(|index| create_journal(&self.dir, gen, index as u32).map(Arc::new))
            .collect::<Result<Vec<_>, _>>();
        // Listed before any record goes in (module docs).
        let files = files.and_then(|files| {
            self.record(|manifest| {
                for lane in 0..files.len() as u32 {
                    let listed = Listed {
                        length: None,
                        synced: FILE_HEADER as u64,
                    };
                    manifest
                        .files
                        .insert(Name::Journal(gen, lane).file_name(), listed);
                }
            })?;
            Ok(files)
        });
        let files = match files {
            Ok(files) => files,
            Err(error) => {
                // None is in use: remove what was made, so the next compaction can make them.
                for index in 0..self.lanes.len() {
                    let name = Name::Journal(gen, index as u32).file_name();
                    let _ = fs::remove_file(self.dir.join(name));
                }
                return Err(error);
            }
        };
        {
            let _cut = self
                .cut
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            self.journal_bytes.store(0, Ordering::Relaxed);
            for (lane, file) in self.lanes.iter().zip(files) {
                let mut lane = lock(lane);
                lane.file = file;
                lane.gen = gen;
                lane.length = FILE_HEADER as u64;
            }
        }
        self.generation.store(gen, Ordering::Relaxed);
        sync_dir(&self.dir)?;
        // Step 2.
        let temporary = self.dir.join(Name::SnapshotTemporary(gen).file_name());
        let written = write_snapshot(&temporary, gen, fill);
        let size = match written {
            Ok(size) => size,
            Err(error) => {
                let _ = fs::remove_file(&temporary);
                return Err(StoreError::Io("write the snapshot", temporary, error));
            }
        };
        let path = self.dir.join(Name::Snapshot(gen).file_name());
        fs::rename(&temporary, &path).map_err(io_error("rename", &temporary))?;
        sync_dir(&self.dir)?;
        // Replay starts from the new snapshot: the older journals are no longer needed.
        self.record(|manifest| {
            manifest.files.retain(|name, _| match Name::parse(name) {
                Some(Name::Journal(journal_gen, _)) => journal_gen >= gen,
                _ => false,
            });
            manifest
                .files
                .insert(Name::Snapshot(gen).file_name(), Listed::whole(size));
        })?;
        // Step 3.
        for name in list(&self.dir)? {
            if name.generation() < gen {
                let _ = fs::remove_file(self.dir.join(name.file_name()));
            }
        }
        self.snapshot_bytes.store(size, Ordering::Relaxed);
        self.snapshots.fetch_add(1, Ordering::Relaxed);
        Ok(size)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A thread that panicked while holding a lane left at most a record cut short, which
    // replay drops: the lane is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn create_journal(dir: &Path, gen: u64, lane: u32) -> Result<File, StoreError> {
    let path = dir.join(Name::Journal(gen, lane).file_name());
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .map_err(io_error("create", &path))?;
    file.write_all(&file_header(JOURNAL_MAGIC, gen, lane))
        .map_err(io_error("write", &path))?;
    // Synced before the manifest lists it: a listed journal has its header on the disk.
    file.sync_data().map_err(io_error("sync", &path))?;
    Ok(file)
}

fn write_snapshot(
    path: &Path,
    gen: u64,
    fill: impl FnOnce(&mut SnapshotWriter) -> io::Result<()>,
) -> io::Result<u64> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)?;
    let mut writer = SnapshotWriter {
        out: BufWriter::with_capacity(1 << 20, file),
        scratch: Vec::new(),
        records: 0,
        bytes: FILE_HEADER as u64,
    };
    writer.out.write_all(&file_header(SNAPSHOT_MAGIC, gen, 0))?;
    fill(&mut writer)?;
    let end = writer.records;
    writer.push(&Record::new(Kind::End, end))?;
    let bytes = writer.bytes;
    let file = writer.out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(bytes)
}

/// Writes a snapshot's records (given to [`Store::compact`]'s `fill`).
pub struct SnapshotWriter {
    out: BufWriter<File>,
    scratch: Vec<u8>,
    records: u64,
    bytes: u64,
}

impl SnapshotWriter {
    /// Append one record.
    pub fn push(&mut self, record: &Record<'_>) -> io::Result<()> {
        self.scratch.clear();
        record.encode(&mut self.scratch);
        self.out.write_all(&self.scratch)?;
        self.records += 1;
        self.bytes += self.scratch.len() as u64;
        Ok(())
    }
}

/// The records replay keeps: for each key the one with the largest sequence number, and the
/// flush state.
#[derive(Default)]
struct Chosen<'a> {
    /// From the snapshot: one record per key (a snapshot holds each key once).
    snapshot: Vec<Record<'a>>,
    /// From the journals: the winner per key so far (items and deletes).
    journal: HashMap<&'a [u8], Record<'a>>,
    generation: u32,
    /// The delayed flush of the flush record with the largest sequence number.
    oldest_live: (u64, i64),
    max_seq: u64,
    max_cas: u64,
}

impl<'a> Chosen<'a> {
    fn note(&mut self, record: &Record<'a>) {
        self.max_seq = self.max_seq.max(record.seq);
        self.max_cas = self.max_cas.max(record.cas);
        if record.kind == Kind::Flush {
            // Generations only grow; of two racing flushes the later number may carry the
            // smaller one.
            self.generation = self.generation.max(record.generation);
            if record.seq >= self.oldest_live.0 {
                self.oldest_live = (record.seq, record.expires);
            }
        }
    }

    fn read_snapshot(
        &mut self,
        bytes: &'a [u8],
        path: &Path,
        replayed: &mut Replayed,
    ) -> Result<(), StoreError> {
        let mut at = FILE_HEADER;
        let mut records = 0;
        loop {
            let (record, len) = Record::decode(&bytes[at..])
                .map_err(|why| StoreError::Corrupt(path.into(), at as u64, why))?;
            replayed.records += 1;
            match record.kind {
                Kind::End if record.seq == records && at + len == bytes.len() => return Ok(()),
                Kind::End => {
                    return Err(StoreError::Corrupt(
                        path.into(),
                        at as u64,
                        "its end record does not match what precedes it",
                    ))
                }
                Kind::Item => self.snapshot.push(record),
                Kind::Delete => {}
                Kind::Flush => {}
            }
            self.note(&record);
            records += 1;
            at += len;
        }
    }

    /// Read a journal's records up to the first that is not whole; returns where they end,
    /// and why the next one does not decode (`None`: the journal ends there).
    fn read_journal(
        &mut self,
        bytes: &'a [u8],
        replayed: &mut Replayed,
    ) -> (u64, Option<&'static str>) {
        let mut at = FILE_HEADER;
        while at < bytes.len() {
            let (record, len) = match Record::decode(&bytes[at..]) {
                Ok(decoded) => decoded,
                Err(why) => return (at as u64, Some(why)),
            };
            replayed.records += 1;
            self.note(&record);
            if matches!(record.kind, Kind::Item | Kind::Delete) {
                self.journal
                    .entry(record.key)
                    .and_modify(|held| {
                        if record.seq > held.seq {
                            *held = record;
                        }
                    })
                    .or_insert(record);
            }
            at += len;
        }
        (at as u64, None)
    }

    /// The winning items still valid after the flushes (expiry is left to the cache).
    fn into_restore(mut self, now_unix: i64) -> Restore<'a> {
        let mut items = Vec::with_capacity(self.snapshot.len() + self.journal.len());
        for record in std::mem::take(&mut self.snapshot) {
            match self.journal.get(record.key) {
                Some(newer) if newer.seq > record.seq => {}
                Some(_) => {
                    self.journal.remove(record.key);
                    items.push(record);
                }
                None => items.push(record),
            }
        }
        items.extend(
            self.journal
                .into_values()
                .filter(|record| record.kind == Kind::Item),
        );
        let (generation, oldest_live) = (self.generation, self.oldest_live.1);
        // A delayed flush whose time has come invalidated every item stored up to it.
        let flushed = |record: &Record<'_>| {
            record.generation < generation
                || (oldest_live != 0 && oldest_live <= now_unix && record.stored <= oldest_live)
        };
        items.retain(|record| !flushed(record));
        Restore {
            items,
            generation,
            oldest_live: if oldest_live > now_unix {
                oldest_live
            } else {
                0
            },
            max_cas: self.max_cas,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item<'a>(seq: u64, key: &'a [u8], data: &'a [u8]) -> Record<'a> {
        Record {
            key,
            data,
            flags: 7,
            cas: seq * 10,
            expires: 0,
            stored: 1_700_000_000,
            ..Record::new(Kind::Item, seq)
        }
    }

    #[test]
    fn records_round_trip_and_every_flipped_bit_is_caught() {
        let record = Record {
            stale: true,
            binary_key: true,
            expires: 1_800_000_000,
            generation: 3,
            ..item(42, b"key", b"value bytes")
        };
        let mut bytes = Vec::new();
        record.encode(&mut bytes);
        assert_eq!(bytes.len(), record.encoded_len());
        assert_eq!(Record::decode(&bytes), Ok((record, bytes.len())));
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                Record::decode(&flipped).map(|(r, _)| r) != Ok(record),
                "bit {bit} went unnoticed"
            );
        }
        for cut in 0..bytes.len() {
            assert!(Record::decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn the_largest_sequence_number_wins_whichever_file_holds_it() {
        let mut snapshot = Vec::new();
        for record in [item(5, b"a", b"snap-a"), item(9, b"b", b"snap-b")] {
            record.encode(&mut snapshot);
        }
        let mut journal = vec![0; FILE_HEADER];
        for record in [
            item(7, b"a", b"journal-a"),
            item(3, b"b", b"journal-b-older"),
            Record {
                key: b"c",
                ..Record::new(Kind::Delete, 11)
            },
            item(10, b"c", b"journal-c-deleted"),
            item(12, b"d", b"journal-d"),
        ] {
            record.encode(&mut journal);
        }
        journal.extend_from_slice(&[1, 2, 3]);
        let mut chosen = Chosen::default();
        let mut at = 0;
        while at < snapshot.len() {
            let (record, len) = Record::decode(&snapshot[at..]).unwrap();
            chosen.snapshot.push(record);
            at += len;
        }
        let mut replayed = Replayed::default();
        assert_eq!(
            chosen.read_journal(&journal, &mut replayed),
            (journal.len() as u64 - 3, Some(CUT_SHORT))
        );
        assert_eq!(chosen.max_seq, 12);
        let mut items: Vec<_> = chosen
            .into_restore(0)
            .items
            .iter()
            .map(|r| (r.key.to_vec(), r.data.to_vec()))
            .collect();
        items.sort();
        let expected: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"a".to_vec(), b"journal-a".to_vec()),
            (b"b".to_vec(), b"snap-b".to_vec()),
            (b"d".to_vec(), b"journal-d".to_vec()),
        ];
        assert_eq!(items, expected);
    }

    #[test]
    fn flushes_drop_what_they_flushed() {
        let mut chosen = Chosen::default();
        chosen.snapshot.push(item(1, b"old", b"x"));
        chosen.snapshot.push(Record {
            generation: 1,
            stored: 1_700_000_100,
            ..item(3, b"new", b"y")
        });
        chosen.note(&Record {
            generation: 1,
            ..Record::new(Kind::Flush, 2)
        });
        let restore = chosen.into_restore(1_700_000_200);
        assert_eq!(restore.generation, 1);
        let keys: Vec<_> = restore.items.iter().map(|r| r.key).collect();
        assert_eq!(keys, [b"new"]);

        // A delayed flush whose time came drops what was stored up to it; one still to come
        // is handed on.
        for (now, kept, pending) in [(1_700_000_060, 1, 0), (1_700_000_040, 2, 1_700_000_050)] {
            let mut chosen = Chosen::default();
            chosen.snapshot.push(Record {
                stored: 1_700_000_010,
                ..item(1, b"before", b"x")
            });
            chosen.snapshot.push(Record {
                stored: 1_700_000_055,
                ..item(2, b"after", b"x")
            });
            chosen.note(&Record {
                expires: 1_700_000_050,
                ..Record::new(Kind::Flush, 3)
            });
            let restore = chosen.into_restore(now);
            assert_eq!(restore.items.len(), kept);
            assert_eq!(restore.oldest_live, pending);
        }
    }

    #[test]
    fn names_parse_back() {
        for name in [
            Name::Snapshot(3),
            Name::SnapshotTemporary(4),
            Name::Journal(5, 12),
        ] {
            assert_eq!(Name::parse(&name.file_name()), Some(name));
        }
        assert_eq!(Name::parse("journal-x-1"), None);
        assert_eq!(Name::parse("lock"), None);
    }

    #[test]
    fn headers_catch_foreign_and_renamed_files() {
        let header = file_header(JOURNAL_MAGIC, 4, 1);
        assert_eq!(check_header(&header, JOURNAL_MAGIC, 4, 1), Ok(()));
        assert!(check_header(&header, SNAPSHOT_MAGIC, 4, 1).is_err());
        assert!(check_header(&header, JOURNAL_MAGIC, 5, 1).is_err());
        assert!(check_header(&header[..20], JOURNAL_MAGIC, 4, 1).is_err());
        let mut version = header;
        version[8] = 9;
        assert!(check_header(&version, JOURNAL_MAGIC, 4, 1).is_err());
    }
    /// The files of `dir` by name, the manifest included.
    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// A store on a fresh scratch directory, with a record in journal 0.
    fn store_with_a_record(name: &str) -> (PathBuf, Store) {
        let dir = std::env::temp_dir().join(format!("floe-persist-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, _, _) = Store::open(&dir, 2, StoreOptions::default(), 0).unwrap();
        let mut records = Vec::new();
        item(store.next_seq(), b"k", b"v").encode(&mut records);
        store.append(0, &records);
        (dir, store)
    }

    /// A failed journal write takes the `manifest` away before it turns persistence off
    /// (so a session that skips its append replies only once the files cannot be restored),
    /// then empties the directory: at once when no compaction holds the lock, else at the next
    /// sync (and without waiting for the lock, which a session calling it could deadlock on).
    /// An open refuses journals without the manifest, and leaves them.
    #[test]
    fn a_failed_write_unmarks_the_directory_before_it_turns_persistence_off() {
        let disk_full = || io::Error::from_raw_os_error(28);
        let (dir, store) = store_with_a_record("fail-at-once");
        assert!(files(&dir).contains(&MANIFEST.to_string()));
        store.fail(&disk_full());
        assert!(store.failed());
        assert!(files(&dir).is_empty());
        drop(store);
        let _ = fs::remove_dir_all(&dir);

        let (dir, store) = store_with_a_record("fail-while-compacting");
        let compacting = lock(&store.compacting);
        store.fail(&disk_full());
        assert!(store.failed());
        let left = files(&dir);
        assert!(!left.contains(&MANIFEST.to_string()), "{left:?}");
        assert!(
            left.iter().any(|name| name.starts_with("journal-")),
            "{left:?}"
        );
        // What a crash now leaves: refused, and unchanged.
        let copy = dir.with_extension("copy");
        let _ = fs::remove_dir_all(&copy);
        fs::create_dir_all(&copy).unwrap();
        for name in &left {
            fs::copy(dir.join(name), copy.join(name)).unwrap();
        }
        let before = files(&copy);
        match Store::open(&copy, 2, StoreOptions::default(), 0) {
            Err(error @ StoreError::Unmarked(_)) => {
                assert!(error.to_string().contains("may be stale"), "{error}");
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("a directory without its marker was opened"),
        }
        assert_eq!(files(&copy), before);
        drop(compacting);
        store.sync();
        assert!(files(&dir).is_empty());
        drop(store);
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_dir_all(&copy);
    }
}
