//! The durable layer under every on-disk format floe keeps: the persistent `FlatMap` (table
//! files and a superblock, `raw/persist/store.rs`), the journaled `PersistentMap`
//! (`journal.rs`) and `floe-server -e` (journals and snapshots, `floe-server/src/persist.rs`). Each format keeps
//! its own records and its own promises; what they share is here, written once:
//!
//! - **Files are opened as regular files or not at all** ([`open_regular`], [`read_regular`]):
//!   the open itself does not block (`O_NONBLOCK`, so a FIFO or a device put where a file
//!   should be cannot hold an open, and the directory's lock with it, for ever), and anything
//!   that is not a regular file is refused before a byte is read.
//! - **One lock per directory** ([`DirLock`]): `flock` on the directory itself, not on a file
//!   in it, so deleting or replacing a file cannot let a second process in beside the first.
//! - **Small files are replaced whole** ([`replace_file`]): a temporary file, synced, renamed
//!   over the old one, the directory synced; a crash leaves the old file or the new one.
//! - **A manifest names every file a directory needs** ([`Manifest`]): with the length it must
//!   have (or, for a log appended to, the length its last sync reached) and the boot of the
//!   machine that opened the directory. A format changes its set of files in one order: a new
//!   file is made whole (and synced), then listed, then used; a file is unlisted, then
//!   deleted. So an open refuses a listed file that is missing, of the wrong length or not a
//!   regular file, and may delete an unlisted one that holds nothing.
//! - **A directory is one map's** (`map_kind`, `first_foreign_entry`): a persistent
//!   `FlatMap` is known by its superblock, a `PersistentMap` by its meta file; each format
//!   refuses to open or to make a map in the other's directory, and makes a new map only in a
//!   directory that is missing, empty, or holds only leftovers of its own files.
//! - **Generations never wrap** ([`next_generation`], [`MAX_GENERATION`]): a number read from a
//!   file above the bound is damage, and a store refuses to count past it.
//! - **A torn tail is told from damage** ([`judge_tail`]): a log whose records stop early was
//!   either cut by the end of its writer (a crash, or a power loss that kept some pages and not
//!   others) or damaged afterwards. The rule, which every log format applies to the bytes past
//!   its last whole record:
//!   1. anything below the length the last sync covered is damage: a sync is a promise;
//!   2. if the machine has not restarted since the writer opened the files ([`boot_id`]
//!      unchanged), no power loss can have happened, and a process that dies loses nothing it
//!      stored: a log can end only in the middle of the one record being written, so a whole
//!      valid record anywhere after the end means the bytes between were damaged;
//!   3. after a restart, pages written since the last sync may each be missing, zero or
//!      stale, so what follows the first bad record is a power loss's tail: dropped, and
//!      counted for the caller to report.
//!
//! What it cannot tell: damage that removes or zeroes whole records at a log's very end, in
//! the part written since its last sync, looks exactly like the writes a crash cut off there;
//! each format says how much that can be (a record being written at a crash for `PersistentMap`,
//! the last sync interval for `floe-server`, nothing for a cleanly closed directory, whose
//! lengths are recorded).

use std::{
    collections::BTreeMap,
    fs::{File, OpenOptions},
    io::{self, ErrorKind, Read, Write},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

/// The two kinds of persistent map, as [`map_kind`] names them (and refusals report them).
pub(crate) const FLAT_MAP: &str = "FlatMap";
pub(crate) const PERSISTENT_MAP: &str = "PersistentMap";

/// The file that makes a directory a persistent `FlatMap`'s: its superblock
/// (`raw/persist/store.rs`).
pub(crate) const FLAT_MAP_MARKER: &str = "floe.super";

/// The file that makes a directory a `PersistentMap`'s: its meta file (`journal.rs`).
pub(crate) const PERSISTENT_MAP_MARKER: &str = "floe-map.meta";

/// Which kind of persistent map `dir` holds, by its marker file: `"FlatMap"`,
/// `"PersistentMap"`, or `None` for neither (or no directory).
pub(crate) fn map_kind(dir: &Path) -> Option<&'static str> {
    if dir.join(FLAT_MAP_MARKER).exists() {
        Some(FLAT_MAP)
    } else if dir.join(PERSISTENT_MAP_MARKER).exists() {
        Some(PERSISTENT_MAP)
    } else {
        None
    }
}

/// Refuse to open a map of kind `ours` in `dir` unless its marker file is there: the other
/// kind's directory is [`OtherKind`](crate::error::StorageErrorKind::OtherKind), neither is
/// [`Missing`](crate::error::StorageErrorKind::Missing).
pub(crate) fn check_kind(dir: &Path, ours: &'static str) -> Result<(), crate::error::StorageError> {
    use crate::error::StorageErrorKind;
    match map_kind(dir) {
        Some(kind) if kind == ours => Ok(()),
        Some(other) => Err(StorageErrorKind::OtherKind(other).into()),
        None => Err(StorageErrorKind::Missing.into()),
    }
}

/// Refuse to make a new map of kind `ours` in `dir` (locked by the caller) unless it is empty
/// but for leftovers `own` claims: a map of this kind is
/// [`Exists`](crate::error::StorageErrorKind::Exists), the other kind's
/// [`OtherKind`](crate::error::StorageErrorKind::OtherKind), any other entry
/// [`NotEmpty`](crate::error::StorageErrorKind::NotEmpty).
pub(crate) fn check_new_dir(
    dir: &Path,
    ours: &'static str,
    own: impl Fn(&str) -> bool,
) -> Result<(), crate::error::StorageError> {
    use crate::error::{StorageError, StorageErrorKind};
    match map_kind(dir) {
        Some(kind) if kind == ours => return Err(StorageErrorKind::Exists.into()),
        Some(other) => return Err(StorageErrorKind::OtherKind(other).into()),
        None => {}
    }
    match first_foreign_entry(dir, own) {
        Ok(None) => Ok(()),
        Ok(Some(_)) => Err(StorageErrorKind::NotEmpty.into()),
        Err(error) => Err(StorageError::from_io("list the map's directory", error)),
    }
}

/// Refuse, as damage, a directory with no marker file that holds files of the kind of map
/// `own` claims (a `FlatMap`'s tables whose superblock was removed, a `PersistentMap`'s
/// journals whose meta file was): making a new map there would drop the old one's data.
/// `orphaned` is the refusal's message. A missing directory passes.
pub(crate) fn refuse_orphans(
    dir: &Path,
    own: impl Fn(&str) -> bool,
    orphaned: &'static str,
) -> Result<(), crate::error::StorageError> {
    use crate::error::StorageErrorKind;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(&own) {
            return Err(StorageErrorKind::Corrupt(orphaned).into());
        }
    }
    Ok(())
}

/// The name of the first entry of `dir` that `own` does not claim (a file of another program, a
/// subdirectory, a name that is not UTF-8), if any: where a new map must not be made, since
/// its cleanups remove leftovers by name and a user who pointed it at the wrong directory
/// should hear so before anything is written there.
///
/// # Errors
/// The directory cannot be read.
pub(crate) fn first_foreign_entry(
    dir: &Path,
    own: impl Fn(&str) -> bool,
) -> io::Result<Option<std::ffi::OsString>> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let claimed = name.to_str().is_some_and(&own) && entry.file_type()?.is_file();
        if !claimed {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

/// The largest generation number a floe file may carry: far beyond any count of growths,
/// compactions or restarts a directory will see (one a microsecond for eight years), and far
/// enough below `u64::MAX` that nothing adding to one overflows.
pub const MAX_GENERATION: u64 = 1 << 48;

/// The generation after `last`, or `None` past [`MAX_GENERATION`] (a damaged or hostile file
/// set it there: refuse rather than wrap).
pub fn next_generation(last: u64) -> Option<u64> {
    last.checked_add(1).filter(|&next| next <= MAX_GENERATION)
}

/// Open `path` with `options`, refusing anything but a regular file, without blocking: the
/// open is made with `O_NONBLOCK` (a FIFO or a device cannot hold it), the file's type checked
/// on the open descriptor (no window for a swap between a check and the open), and the flag
/// cleared again for the reads and writes that follow.
///
/// # Errors
/// The open's own, and [`ErrorKind::InvalidInput`] ("not a regular file") for anything else
/// at the path.
pub fn open_regular(path: &Path, options: &OpenOptions) -> io::Result<File> {
    let mut options = options.clone();
    options.custom_flags(libc::O_NONBLOCK);
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    set_blocking(&file)?;
    Ok(file)
}

fn set_blocking(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; results checked.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Read the regular file `path` whole ([`open_regular`]), refusing one longer than `limit`
/// bytes (a small file's reader should not be made to allocate a disk's worth).
///
/// # Errors
/// As [`open_regular`], and [`ErrorKind::FileTooLarge`] past `limit`.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path, OpenOptions::new().read(true))?;
    let length = file.metadata()?.len();
    if length > limit {
        return Err(io::Error::new(
            ErrorKind::FileTooLarge,
            "longer than any file of its kind",
        ));
    }
    let mut bytes = Vec::with_capacity(length as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            ErrorKind::FileTooLarge,
            "longer than any file of its kind",
        ));
    }
    Ok(bytes)
}

/// Sync a directory (the names created, renamed or removed in it).
///
/// # Errors
/// The open's or the sync's.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replace `dir/name` with `bytes`, atomically: `dir/name.tmp` written and synced, renamed
/// over `name`, the directory synced. A crash or power loss leaves the old file or the new
/// one whole.
///
/// # Errors
/// Any step's; the old file is then still in place (a temporary file may be left, which the
/// next replace overwrites).
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let temp = dir.join(format!("{name}.tmp"));
    // Whatever a crash (or anyone) left at the temporary name is removed, and the file made
    // anew (`O_EXCL`): a FIFO there would block the open, a symlink would be followed.
    match std::fs::remove_file(&temp) {
        Err(error) if error.kind() != ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, dir.join(name))?;
    sync_dir(dir)
}

/// Why a directory could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another process (or another open in this one) holds it.
    Held,
    /// The directory could not be opened or locked (the error says why).
    Io(io::Error),
}

/// A directory held by this process: `flock` on the directory itself, so that no file in it,
/// deleted or replaced, can let a second process in. (Local file systems: on NFS, where
/// `flock` is emulated with POSIX locks that need a descriptor open for writing, a
/// directory cannot be locked, and persistence there is not supported.) Released by an explicit unlock when
/// dropped: closing the descriptor alone is not enough, since a child that another thread of
/// the process forks holds a copy of the descriptor, and with it the lock, until its exec (a
/// map reopened right after a close was refused as open elsewhere while tests spawned
/// children).
#[derive(Debug)]
pub struct DirLock(File);

impl DirLock {
    /// Lock `dir` (which must exist and be a directory), without waiting.
    ///
    /// # Errors
    /// [`LockError::Held`] if another holder has it; [`LockError::Io`] if it is missing, not
    /// a directory, or cannot be locked.
    pub fn acquire(dir: &Path) -> Result<DirLock, LockError> {
        let handle = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK)
            .open(dir)
            .map_err(LockError::Io)?;
        match handle.try_lock() {
            Ok(()) => Ok(DirLock(handle)),
            Err(std::fs::TryLockError::WouldBlock) => Err(LockError::Held),
            Err(std::fs::TryLockError::Error(error)) => Err(LockError::Io(error)),
        }
    }

    /// The directory's descriptor (for `fstatfs` and the like).
    pub fn handle(&self) -> &File {
        &self.0
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // An error leaves the lock to the close that follows.
        let _ = self.0.unlock();
    }
}

/// This boot of the machine: the kernel's random boot id, or `None` where there is none. A log
/// written under one boot id and read under the same was cut, if at all, by the end of a
/// process, never by a power loss ([`judge_tail`]).
pub fn boot_id() -> Option<[u8; 16]> {
    if ASSUME_REBOOTED.with(|flag| flag.get()) {
        return Some(*b"floe: rebooted  ");
    }
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: Vec<u8> = text
        .trim()
        .bytes()
        .filter(|byte| byte.is_ascii_hexdigit())
        .collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (index, pair) in hex.chunks(2).enumerate() {
        let digits = std::str::from_utf8(pair).ok()?;
        id[index] = u8::from_str_radix(digits, 16).ok()?;
    }
    Some(id)
}

/// Whether files written under boot `written` may have met a power loss since: the machine
/// restarted, or one of the two boots is unknown.
pub fn may_have_lost_power(written: Option<[u8; 16]>) -> bool {
    match (written, boot_id()) {
        (Some(then), Some(now)) => then != now,
        _ => true,
    }
}

thread_local! {
    static ASSUME_REBOOTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `body` on this thread as if the machine had restarted since every directory was
/// written: [`boot_id`] answers a boot no file names. For tests of what a power loss leaves
/// (which a test cannot cause), never for production use.
#[doc(hidden)]
pub fn assume_rebooted<R>(body: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            ASSUME_REBOOTED.with(|flag| flag.set(self.0));
        }
    }
    let _reset = Reset(ASSUME_REBOOTED.with(|flag| flag.replace(true)));
    body()
}

/// What the bytes past a log's last whole record are ([`judge_tail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Nothing (the log ends at its last record, or only zeroes follow).
    Whole,
    /// The end of a write a crash or power loss cut short: these bytes are dropped.
    Torn {
        /// Bytes dropped.
        bytes: u64,
    },
    /// Damage: a failed record below the synced length, or whole records after a failed one
    /// where no power loss can have happened.
    Damaged {
        /// Where the first record that failed starts.
        at: u64,
    },
}

/// Judge what follows a log's last whole record (the rule in the module docs). `bytes` is the
/// log, `end` where its records stopped, `synced` how far the last sync the format recorded
/// reached (0 for none), `power_lost` whether a power loss may have happened since the log was
/// written ([`may_have_lost_power`]), and `record_at` whether a whole, valid record starts at
/// the start of a slice; records start at multiples of `align` bytes.
pub fn judge_tail(
    bytes: &[u8],
    end: usize,
    synced: u64,
    power_lost: bool,
    align: usize,
    record_at: impl Fn(&[u8]) -> bool,
) -> Tail {
    let rest = bytes.get(end..).unwrap_or_default();
    if rest.iter().all(|&byte| byte == 0) {
        // Zeroes below the synced length are damage too: a sync promised records there.
        return if (end as u64) < synced {
            Tail::Damaged { at: end as u64 }
        } else {
            Tail::Whole
        };
    }
    if (end as u64) < synced {
        return Tail::Damaged { at: end as u64 };
    }
    if !power_lost {
        let align = align.max(1);
        let mut at = end + align;
        while at < bytes.len() {
            if record_at(&bytes[at..]) {
                return Tail::Damaged { at: end as u64 };
            }
            at += align;
        }
    }
    Tail::Torn {
        bytes: rest.len() as u64,
    }
}

/// A file a [`Manifest`] lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// The length the file must have (made whole and never resized: a table, a snapshot, a
    /// reserved journal chunk), or `None` for a log that grows by appends.
    pub length: Option<u64>,
    /// How far the last sync of the file reached: below it, every byte is promised.
    pub synced: u64,
}

impl Listed {
    /// A file made whole, `length` bytes, synced.
    pub fn whole(length: u64) -> Listed {
        Listed {
            length: Some(length),
            synced: length,
        }
    }

    /// Whether a file of `actual` bytes can be this one; if not, why.
    pub fn check_length(&self, actual: u64) -> Result<(), &'static str> {
        match self.length {
            Some(length) if length != actual => {
                Err("its length is not the one the manifest lists (cut short or extended)")
            }
            _ if actual < self.synced => {
                Err("it is shorter than its last sync left it (cut short)")
            }
            _ => Ok(()),
        }
    }
}

/// Why a manifest's bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestError {
    /// Not a manifest of this format (its magic).
    Foreign,
    /// Written by another version of the format.
    Version(u32),
    /// Damaged: its checksum fails, or it is cut short.
    Damaged,
}

/// The files a directory needs (module docs), as the last change to its set of files left
/// it. Encoded with a format's own magic and version, and a CRC32 over the whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The boot of the machine that last opened the directory ([`boot_id`]).
    pub boot: Option<[u8; 16]>,
    /// Every file the directory needs, by name.
    pub files: BTreeMap<String, Listed>,
}

impl Manifest {
    /// The manifest's bytes, for a format of `magic` and `version`.
    pub fn encode(&self, magic: [u8; 8], version: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&magic);
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.push(u8::from(self.boot.is_some()));
        bytes.extend_from_slice(&self.boot.unwrap_or_default());
        bytes.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for (name, listed) in &self.files {
            bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            bytes.extend_from_slice(name.as_bytes());
            bytes.push(u8::from(listed.length.is_some()));
            bytes.extend_from_slice(&listed.length.unwrap_or_default().to_le_bytes());
            bytes.extend_from_slice(&listed.synced.to_le_bytes());
        }
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Read a manifest of a format of `magic` and `version`.
    ///
    /// # Errors
    /// [`ManifestError`]: another format's, another version's, or damaged.
    pub fn decode(bytes: &[u8], magic: [u8; 8], version: u32) -> Result<Manifest, ManifestError> {
        if bytes.len() < 8 || bytes[..8] != magic {
            return Err(ManifestError::Foreign);
        }
        const FIXED: usize = 8 + 4 + 1 + 16 + 4;
        if bytes.len() < FIXED + 4 {
            return Err(ManifestError::Damaged);
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return Err(ManifestError::Damaged);
        }
        let found = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
        if found != version {
            return Err(ManifestError::Version(found));
        }
        let boot = match body[12] {
            0 => None,
            1 => Some(body[13..29].try_into().expect("16 bytes")),
            _ => return Err(ManifestError::Damaged),
        };
        let count = u32::from_le_bytes(body[29..33].try_into().expect("4 bytes"));
        let mut rest = &body[FIXED..];
        let mut files = BTreeMap::new();
        for _ in 0..count {
            let take = |rest: &mut &[u8], n: usize| -> Result<Vec<u8>, ManifestError> {
                let taken = rest.get(..n).ok_or(ManifestError::Damaged)?.to_vec();
                *rest = &rest[n..];
                Ok(taken)
            };
            let word = |bytes: Vec<u8>| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            let len = u32::from_le_bytes(take(&mut rest, 4)?.try_into().expect("4 bytes"));
            let name = String::from_utf8(take(&mut rest, len as usize)?)
                .map_err(|_| ManifestError::Damaged)?;
            let exact = take(&mut rest, 1)?[0];
            let length = word(take(&mut rest, 8)?);
            let synced = word(take(&mut rest, 8)?);
            let length = match exact {
                0 => None,
                1 => Some(length),
                _ => return Err(ManifestError::Damaged),
            };
            if length.is_some_and(|length| synced > length) || files.contains_key(&name) {
                return Err(ManifestError::Damaged);
            }
            files.insert(name, Listed { length, synced });
        }
        if !rest.is_empty() {
            return Err(ManifestError::Damaged);
        }
        Ok(Manifest { boot, files })
    }

    /// Write the manifest as `dir/name` ([`replace_file`]).
    ///
    /// # Errors
    /// As [`replace_file`].
    pub fn write(&self, dir: &Path, name: &str, magic: [u8; 8], version: u32) -> io::Result<()> {
        replace_file(dir, name, &self.encode(magic, version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_round_trip_and_every_flipped_bit_is_caught() {
        let manifest = Manifest {
            boot: Some([7; 16]),
            files: [
                ("snapshot-3".to_string(), Listed::whole(4096)),
                (
                    "journal-3-1".to_string(),
                    Listed {
                        length: None,
                        synced: 100,
                    },
                ),
            ]
            .into(),
        };
        let bytes = manifest.encode(*b"testmani", 5);
        assert_eq!(Manifest::decode(&bytes, *b"testmani", 5), Ok(manifest));
        assert_eq!(
            Manifest::decode(&bytes, *b"othrmani", 5),
            Err(ManifestError::Foreign)
        );
        for bit in 64..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                Manifest::decode(&damaged, *b"testmani", 5).is_err(),
                "bit {bit}"
            );
        }
        for cut in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..cut], *b"testmani", 5).is_err());
        }
        let listed = Listed {
            length: None,
            synced: 100,
        };
        assert!(listed.check_length(100).is_ok() && listed.check_length(5000).is_ok());
        assert!(listed.check_length(99).is_err());
        assert!(Listed::whole(64).check_length(65).is_err());
    }

    #[test]
    fn generations_stop_at_the_bound() {
        assert_eq!(next_generation(1), Some(2));
        assert_eq!(next_generation(MAX_GENERATION - 1), Some(MAX_GENERATION));
        assert_eq!(next_generation(MAX_GENERATION), None);
        assert_eq!(next_generation(u64::MAX), None);
    }

    /// Records for the tail rule: 8 bytes, a nonzero word whose high half repeats the low.
    fn valid(bytes: &[u8]) -> bool {
        bytes.len() >= 8 && {
            let word = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            word != 0 && word >> 32 == word & 0xFFFF_FFFF
        }
    }

    fn log(records: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for n in 1..=records as u64 {
            bytes.extend_from_slice(&(n << 32 | n).to_le_bytes());
        }
        bytes.resize(bytes.len() + 64, 0);
        bytes
    }

    #[test]
    fn the_tail_rule() {
        let bytes = log(10);
        assert_eq!(judge_tail(&bytes, 80, 0, false, 8, valid), Tail::Whole);
        // Zeroes a sync promised records in.
        assert_eq!(
            judge_tail(&bytes, 80, 88, false, 8, valid),
            Tail::Damaged { at: 80 }
        );
        // A record damaged in the middle: whole ones follow.
        let mut damaged = bytes.clone();
        damaged[5 * 8] ^= 1;
        assert_eq!(
            judge_tail(&damaged, 40, 0, false, 8, valid),
            Tail::Damaged { at: 40 }
        );
        // ...which after a restart is a power loss's tail, unless below the sync.
        assert_eq!(
            judge_tail(&damaged, 40, 0, true, 8, valid),
            Tail::Torn { bytes: 104 }
        );
        assert_eq!(
            judge_tail(&damaged, 40, 48, true, 8, valid),
            Tail::Damaged { at: 40 }
        );
        // The last record cut: nothing whole follows.
        let mut cut = bytes.clone();
        cut[9 * 8 + 4] ^= 1;
        assert_eq!(
            judge_tail(&cut, 72, 0, false, 8, valid),
            Tail::Torn { bytes: 72 }
        );
    }

    fn make_fifo(path: &Path) {
        let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path; the result is checked.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // no FIFOs or flock under Miri
    fn fifos_and_directories_are_not_opened_as_files() {
        let dir = std::env::temp_dir().join(format!("floe-durable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        make_fifo(&fifo);
        for options in [
            OpenOptions::new().read(true).clone(),
            OpenOptions::new().read(true).write(true).clone(),
        ] {
            let error = open_regular(&fifo, &options).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidInput);
        }
        assert!(read_regular(&fifo, 100).is_err());
        assert!(read_regular(&dir, 100).is_err());
        std::fs::write(dir.join("file"), b"0123456789").unwrap();
        assert_eq!(read_regular(&dir.join("file"), 10).unwrap(), b"0123456789");
        assert_eq!(
            read_regular(&dir.join("file"), 9).unwrap_err().kind(),
            ErrorKind::FileTooLarge
        );
        // A FIFO where a replace's temporary file goes is removed, not opened.
        make_fifo(&dir.join("small.tmp"));
        replace_file(&dir, "small", b"new").unwrap();
        assert_eq!(std::fs::read(dir.join("small")).unwrap(), b"new");
        let lock = DirLock::acquire(&dir).unwrap();
        assert!(matches!(DirLock::acquire(&dir), Err(LockError::Held)));
        drop(lock);
        let again = DirLock::acquire(&dir).unwrap();
        drop(again);
        assert!(matches!(
            DirLock::acquire(&dir.join("file")),
            Err(LockError::Io(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
