//! Where a persistent map keeps its tables: a directory of table files and a superblock.
//!
//! ```text
//!  <dir>                       locked (flock on the directory) by the one process that has
//!                              the map open (`durable::DirLock`)
//!  <dir>/floe.super            the superblock: identity, options, which tables are live
//!  <dir>/table-<gen>.floe      one table: its bins, then its link pool, as in memory
//! ```
//!
//! A table file *is* the table: the engine's bins and link buckets are a shared mapping of it
//! (`Region::map_file`), so every store an operation makes is in the kernel's page cache the
//! moment it is made, and a process that dies (panic, abort, SIGKILL) loses none of it. What
//! the engine's protocols guarantee in memory at every instant, a committed insert never
//! abandoned, a retire a single CAS, a move that copies before it retires, is then what the
//! files hold at the instant of a crash; `persist/recover.rs` turns any such instant back into a
//! map.
//!
//! The superblock changes only at a table's birth and death (creation, a growth or shrink
//! starting and completing, a checkpoint, a clean close). Each change writes a whole new
//! superblock to a temporary file, syncs it and renames it over the old one, so a crash leaves
//! the old one or the new one, never a torn one; a checksum still guards it against a foreign
//! or damaged file. Before the superblock names a new table as current, the new table's file
//! is synced, so a power loss can never leave a superblock that names a table the disk does
//! not hold.

use std::{
    fs::{File, OpenOptions},
    io::ErrorKind,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard},
};

use super::writeback::Writeback;
use crate::raw::alloc::{Region, HUGE_PAGE};
use crate::{
    durable::{self, DirLock, LockError},
    error::{Error, StorageError, StorageErrorKind},
};

const MAGIC: [u8; 8] = *b"FLOEMAP\0";
/// Bumped whenever the layout of the files or the meaning of a word in them changes.
pub(crate) const FORMAT_VERSION: u32 = 1;
const SUPERBLOCK_BYTES: usize = 192;
const SUPER: &str = durable::FLAT_MAP_MARKER;

/// What a map file was made for: key, value and hasher types (a tag each), the hasher's seed.
/// Opening with other types is refused (`StorageErrorKind::TypeMismatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) key: u64,
    pub(crate) value: u64,
    pub(crate) hasher: u64,
    pub(crate) seed: u64,
}

/// A table as the superblock records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct TableRecord {
    pub(crate) gen: u64,
    pub(crate) bins: u64,
    pub(crate) link_buckets: u64,
    pub(crate) transfer_reserve: u64,
}

impl TableRecord {
    /// Bytes of its file: bins, then the pool, rounded up to whole huge pages (the mapping's
    /// granule). The tail past the pool is reserved with the rest, and never written.
    pub(crate) fn file_bytes(&self) -> Option<usize> {
        let lines = self
            .bins
            .checked_add(self.link_buckets)?
            .checked_add(self.transfer_reserve)?;
        let bytes = usize::try_from(lines.checked_mul(64)?).ok()?;
        bytes.checked_next_multiple_of(HUGE_PAGE)
    }
}

/// The superblock's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub(crate) identity: Identity,
    pub(crate) bins_per_link: u64,
    pub(crate) max_bins: u64,
    /// The last table generation handed out (file names are never reused).
    pub(crate) last_gen: u64,
    pub(crate) current: TableRecord,
    /// The table `current` is migrating into, with its group (old bins per new bin, 1 for a
    /// growth); `gen` 0 when none.
    pub(crate) next: TableRecord,
    pub(crate) group: u64,
    /// Incremented by every checkpoint.
    pub(crate) checkpoints: u64,
    /// Keys at the clean close (meaningful when `clean`): an open checks the tables against it.
    pub(crate) keys: u64,
    /// The map was closed cleanly after its last write (no recovery sweep needed).
    pub(crate) clean: bool,
    /// At a clean close, the table file's checksum (`RawTable::file_checksum`), which a
    /// clean open checks before it trusts anything in the file; 0: none recorded.
    pub(crate) table_checksum: u64,
}

impl Superblock {
    fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut out = [0u8; SUPERBLOCK_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&(SUPERBLOCK_BYTES as u32).to_le_bytes());
        let words = [
            self.identity.key,
            self.identity.value,
            self.identity.hasher,
            self.identity.seed,
            self.bins_per_link,
            self.max_bins,
            self.last_gen,
            self.current.gen,
            self.current.bins,
            self.current.link_buckets,
            self.current.transfer_reserve,
            self.next.gen,
            self.next.bins,
            self.next.link_buckets,
            self.next.transfer_reserve,
            self.group,
            self.checkpoints,
            u64::from(self.clean),
            self.keys,
            self.table_checksum,
        ];
        for (index, word) in words.iter().enumerate() {
            out[16 + 8 * index..24 + 8 * index].copy_from_slice(&word.to_le_bytes());
        }
        let sum = checksum(&out[..SUPERBLOCK_BYTES - 8]);
        out[SUPERBLOCK_BYTES - 8..].copy_from_slice(&sum.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, StorageErrorKind> {
        if bytes.len() < 16 || bytes[..8] != MAGIC {
            return Err(StorageErrorKind::Foreign);
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(StorageErrorKind::Version { found: version });
        }
        if bytes.len() != SUPERBLOCK_BYTES
            || u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize
                != SUPERBLOCK_BYTES
        {
            return Err(StorageErrorKind::Corrupt(
                "the superblock has the wrong length",
            ));
        }
        let stored = u64::from_le_bytes(bytes[SUPERBLOCK_BYTES - 8..].try_into().expect("8"));
        if stored != checksum(&bytes[..SUPERBLOCK_BYTES - 8]) {
            return Err(StorageErrorKind::Corrupt(
                "the superblock's checksum does not match",
            ));
        }
        let word = |index: usize| {
            u64::from_le_bytes(bytes[16 + 8 * index..24 + 8 * index].try_into().expect("8"))
        };
        let table = |first: usize| TableRecord {
            gen: word(first),
            bins: word(first + 1),
            link_buckets: word(first + 2),
            transfer_reserve: word(first + 3),
        };
        let block = Superblock {
            identity: Identity {
                key: word(0),
                value: word(1),
                hasher: word(2),
                seed: word(3),
            },
            bins_per_link: word(4),
            max_bins: word(5),
            last_gen: word(6),
            current: table(7),
            next: table(11),
            group: word(15),
            checkpoints: word(16),
            clean: word(17) != 0,
            keys: word(18),
            table_checksum: word(19),
        };
        block.validate()?;
        Ok(block)
    }

    /// Geometry a table of this build could have been made with (a checksummed superblock
    /// from a buggy or hostile writer must still not make us map absurd sizes).
    fn validate(&self) -> Result<(), StorageErrorKind> {
        if self.last_gen > durable::MAX_GENERATION {
            return Err(StorageErrorKind::Corrupt(
                "the superblock's generation is past any a map reaches",
            ));
        }
        let sane = |table: &TableRecord| {
            table.bins >= 2
                && table.gen >= 1
                && table.gen <= self.last_gen
                && table.link_buckets.saturating_add(table.transfer_reserve) < u32::MAX as u64 - 2
                && table.file_bytes().is_some_and(|b| b <= isize::MAX as usize)
        };
        if !sane(&self.current) || self.bins_per_link == 0 || self.max_bins < self.current.bins {
            return Err(StorageErrorKind::Corrupt(
                "the superblock's table geometry is impossible",
            ));
        }
        if self.next.gen != 0 {
            // A growth, or a refresh into a table of the same size (`step_for` in
            // `bins/driver.rs`: a link pool spent by churn).
            let grows = self.next.bins >= self.current.bins
                && self.next.bins.is_multiple_of(self.current.bins)
                && self.group == 1;
            let shrinks = self.group >= 2
                && self.current.bins.is_multiple_of(self.group)
                && self.next.bins == self.current.bins / self.group;
            if !sane(&self.next) || self.next.gen == self.current.gen || !(grows || shrinks) {
                return Err(StorageErrorKind::Corrupt(
                    "the superblock's migration is impossible",
                ));
            }
        }
        Ok(())
    }
}

/// FNV-1a over the bytes, then one multiply-fold: enough to tell a damaged or foreign file
/// from a superblock (not a cryptographic guarantee, nor meant as one).
fn checksum(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &byte in bytes {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let product = u128::from(hash) * 0x9e37_79b9_7f4a_7c15;
    (product as u64) ^ ((product >> 64) as u64)
}

/// A persistent map's directory, opened and locked by this process.
pub(crate) struct Store {
    dir: PathBuf,
    /// Holds the directory's lock until dropped.
    _lock: DirLock,
    block: Mutex<Superblock>,
    /// `Durability::Flush`: the write-back every table of the map uses (`persist/writeback.rs`).
    writeback: Option<Writeback>,
    /// The directory is on a file system whose files outlive a power loss (not tmpfs or
    /// ramfs): growths there order their moves (`bins/migrate.rs`, "Power loss during a move").
    durable_medium: bool,
}

pub(crate) fn io_error(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |error| Error::storage(StorageError::from_io(what, error))
}

/// [`io_error`] naming the file or directory `path`.
pub(crate) fn io_error_at<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |error| io_error(what)(error).at(path)
}

impl Store {
    /// Take the directory's lock (creating the directory when `create`).
    pub(crate) fn lock(dir: &Path, create: bool) -> Result<DirLock, Error> {
        if create {
            std::fs::create_dir_all(dir).map_err(io_error("create the map's directory"))?;
        }
        DirLock::acquire(dir).map_err(|error| match error {
            LockError::Held => Error::storage(StorageErrorKind::Locked),
            LockError::Io(error) if error.kind() == ErrorKind::NotFound => {
                Error::storage(StorageErrorKind::Missing)
            }
            LockError::Io(error) => io_error("lock the map's directory")(error),
        })
    }

    /// Make a new map in `dir` (created if missing; refused if it already holds a map).
    /// `first` is the first table's record with `gen` 1; its file is created by
    /// [`create_table`](Self::create_table) and the superblock written by
    /// [`commit_first`](Self::commit_first) once it exists.
    pub(crate) fn create(dir: &Path, block: Superblock) -> Result<Store, Error> {
        let lock = Self::lock(dir, true)?;
        let durable_medium = outlives_power_loss(lock.handle());
        // Our own leftovers only: table files and a superblock's temporary file of an
        // earlier attempt that never wrote its superblock.
        durable::check_new_dir(dir, durable::FLAT_MAP, is_own_file).map_err(Error::storage)?;
        // Table files of an earlier attempt that never wrote its superblock.
        remove_table_files_except(dir, &[]);
        Ok(Store {
            dir: dir.to_path_buf(),
            _lock: lock,
            block: Mutex::new(block),
            writeback: None,
            durable_medium,
        })
    }

    /// Open the map in `dir`: its lock, its superblock, checked. Table files the superblock
    /// does not name (a growth's table whose creation a crash interrupted before it was
    /// recorded) are removed.
    pub(crate) fn open(dir: &Path) -> Result<(Store, Superblock), Error> {
        durable::check_kind(dir, durable::FLAT_MAP).map_err(Error::storage)?;
        let lock = Self::lock(dir, false)?;
        let durable_medium = outlives_power_loss(lock.handle());
        // Any longer file is no superblock: read a little more than one, which decode refuses.
        let bytes = durable::read_regular(&dir.join(SUPER), 2 * SUPERBLOCK_BYTES as u64).map_err(
            |error| match error.kind() {
                ErrorKind::NotFound => Error::storage(StorageErrorKind::Missing),
                ErrorKind::FileTooLarge => Error::storage(StorageErrorKind::Corrupt(
                    "the superblock has the wrong length",
                )),
                _ => io_error("read the superblock")(error),
            },
        )?;
        let block = Superblock::decode(&bytes).map_err(Error::storage)?;
        let live: Vec<u64> = [block.current.gen, block.next.gen]
            .into_iter()
            .filter(|&gen| gen != 0)
            .collect();
        remove_table_files_except(dir, &live);
        Ok((
            Store {
                dir: dir.to_path_buf(),
                _lock: lock,
                block: Mutex::new(block),
                writeback: None,
                durable_medium,
            },
            block,
        ))
    }

    /// Give every table of the map this write-back (`Durability::Flush`), or none.
    pub(crate) fn set_writeback(&mut self, writeback: Option<Writeback>) {
        self.writeback = writeback;
    }

    /// The write-back the map's tables use, if any.
    pub(crate) fn writeback(&self) -> Option<Writeback> {
        self.writeback
    }

    /// Whether a growth must sync each chunk's copies before it retires their old slots
    /// (`bins/migrate.rs`, "Power loss during a move"): on a file system that survives a power
    /// loss, at `Durability::Process` (at `Flush` each copy is written back line by line).
    pub(crate) fn orders_moves(&self) -> bool {
        self.writeback.is_none() && self.durable_medium
    }

    /// The map's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn table_path(&self, gen: u64) -> PathBuf {
        self.dir.join(table_file_name(gen))
    }

    /// The superblock as last recorded.
    pub(crate) fn block(&self) -> MutexGuard<'_, Superblock> {
        self.block
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A fresh generation number for a new table; `None` past `durable::MAX_GENERATION`.
    pub(crate) fn next_gen(&self) -> Option<u64> {
        let mut block = self.block();
        block.last_gen = durable::next_generation(block.last_gen)?;
        Some(block.last_gen)
    }

    /// Create and map the (zeroed) file of a new table, its blocks reserved on the device.
    ///
    /// The blocks are reserved (`posix_fallocate`) rather than left a hole (`set_len`): the
    /// table is written through a shared mapping, and a store to a hole is a page fault that
    /// must allocate a block, which on a full device (or past a quota) cannot fail any other
    /// way than with SIGBUS, killing the process in the middle of an operation. Reserved, a
    /// full device is this call's error (`ENOSPC`, or `EFBIG` past `RLIMIT_FSIZE`), answered
    /// as [`Error::Storage`] by the growth that wanted the table, and the map stays as it was.
    /// What it costs: on a disk file system a metadata update; on tmpfs the pages themselves,
    /// allocated and zeroed here rather than at each first touch (a 2.6 GiB table: about 2 s
    /// more to build: the benchmark log, `results/history/BENCHMARKS-log-2026-11.md`).
    pub(crate) fn create_table(&self, record: &TableRecord) -> Result<Arc<Region>, Error> {
        let bytes = record.file_bytes().ok_or(Error::CapacityOverflow)?;
        let path = self.table_path(record.gen);
        // Its errors name the directory, not the new file: every attempt of a growth that
        // keeps failing (a full disk) takes a new generation, and an error's path is kept
        // for the rest of the process (`StorageError::path`).
        let file = create_reserved(
            &path,
            bytes,
            "create a table file",
            "reserve the disk blocks of a new table file",
        )
        .map_err(|error| error.at_instead(&self.dir))?;
        // Synced once reserved: the superblock will name the file, and a power loss must not
        // leave it shorter than recorded (its blocks are unwritten extents, so this writes
        // only metadata).
        let mapped = file
            .sync_all()
            .map_err(io_error_at("sync a new table file", &self.dir))
            .and_then(|()| {
                Region::map_file(&file, bytes)
                    .map_err(io_error_at("map a new table file", &self.dir))
            });
        match mapped {
            Ok(region) => Ok(Arc::new(region)),
            Err(error) => {
                drop(file);
                let _ = std::fs::remove_file(&path);
                Err(error)
            }
        }
    }

    /// Map the existing file of a recorded table, checking its length.
    pub(crate) fn open_table(&self, record: &TableRecord) -> Result<Arc<Region>, Error> {
        let path = self.table_path(record.gen);
        self.open_table_file(record, &path)
            .map_err(|error| error.at(&path))
    }

    fn open_table_file(&self, record: &TableRecord, path: &Path) -> Result<Arc<Region>, Error> {
        let bytes = record.file_bytes().ok_or(Error::CapacityOverflow)?;
        let file = durable::open_regular(path, OpenOptions::new().read(true).write(true)).map_err(
            |error| match error.kind() {
                ErrorKind::NotFound => Error::storage(StorageErrorKind::Corrupt(
                    "a table file the superblock names is missing",
                )),
                _ => io_error("open a table file")(error),
            },
        )?;
        let length = file
            .metadata()
            .map_err(io_error("read a table file's length"))?
            .len();
        if length != bytes as u64 {
            return Err(Error::storage(StorageErrorKind::Corrupt(
                "a table file has the wrong length (truncated or not this map's)",
            )));
        }
        Region::map_file(&file, bytes)
            .map(Arc::new)
            .map_err(io_error("map a table file"))
    }

    /// Delete a table's file (its mapping, if any, stays valid until unmapped).
    pub(crate) fn remove_table(&self, gen: u64) {
        let _ = std::fs::remove_file(self.table_path(gen));
    }

    /// Change the superblock with `change` and write it (atomically: temporary file, sync,
    /// rename, directory sync). On failure the recorded superblock is left as it was.
    pub(crate) fn record(&self, change: impl FnOnce(&mut Superblock)) -> Result<(), Error> {
        let mut block = self.block();
        let mut changed = *block;
        change(&mut changed);
        self.write(&changed)?;
        *block = changed;
        Ok(())
    }

    fn write(&self, block: &Superblock) -> Result<(), Error> {
        let written = durable::replace_file(&self.dir, SUPER, &block.encode());
        written.map_err(io_error_at("write the superblock", &self.dir.join(SUPER)))
    }
}

/// Whether the file system holding `file` keeps its files across a power loss: `false` for
/// tmpfs and ramfs (memory only), `true` for every other (and when it cannot be told). Test
/// builds that log their syncs to simulate a disk (`writeback::log`) count as a disk.
fn outlives_power_loss(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    #[cfg(feature = "crash-points")]
    if super::writeback::log::logging_syncs() {
        return true;
    }
    // Magic numbers from linux/magic.h.
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    // SAFETY: `statfs` is a plain C struct of integers, for which all zeroes is a value.
    let mut info: libc::statfs = unsafe { core::mem::zeroed() };
    // SAFETY: fstatfs on a descriptor we own, into a struct it fills; the result is checked.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut info) } != 0 {
        return true;
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between C libraries
    let kind = info.f_type as i64;
    !matches!(kind, TMPFS_MAGIC | RAMFS_MAGIC)
}

/// Create the file `path` (which must not exist) `bytes` long with its blocks reserved
/// (`reserve`), open for reading and writing; on failure nothing is left behind. The errors
/// say `create` or `reserve` as what could not be done.
pub(crate) fn create_reserved(
    path: &Path,
    bytes: usize,
    create: &'static str,
    reserve_blocks: &'static str,
) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_error_at(create, path))?;
    if let Err(error) = reserve(&file, bytes) {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(io_error_at(reserve_blocks, path)(error));
    }
    Ok(file)
}

/// Make `file` (empty) `bytes` long with every block allocated, reading as zeroes.
pub(crate) fn reserve(file: &File, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let length =
        libc::off_t::try_from(bytes).map_err(|_| std::io::Error::from(ErrorKind::FileTooLarge))?;
    // SAFETY: posix_fallocate on a descriptor we own, open for writing; it returns the error
    // number (0 for success) instead of setting errno.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, length) } {
        0 => Ok(()),
        // HACK: a file system that cannot reserve blocks (glibc emulates the call where the
        // kernel lacks it, so only other C libraries get here) gets the sparse file of old:
        // correct, but a full device there is a SIGBUS on a store, not an error.
        libc::EOPNOTSUPP => file.set_len(bytes as u64),
        error => Err(std::io::Error::from_raw_os_error(error)),
    }
}

fn table_file_name(gen: u64) -> String {
    format!("table-{gen:016x}.floe")
}

/// Remove every table file in `dir` whose generation is not in `keep`.
/// Whether `name` is one of a persistent `FlatMap`'s files: its superblock (or the superblock's
/// temporary file) or a table file.
pub(crate) fn is_own_file(name: &str) -> bool {
    table_generation(name).is_some() || name.starts_with(SUPER)
}

/// The generation of a table file's name (`table-<hex>.floe`), `None` for any other name.
fn table_generation(name: &str) -> Option<u64> {
    name.strip_prefix("table-")
        .and_then(|rest| rest.strip_suffix(".floe"))
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
}

fn remove_table_files_except(dir: &Path, keep: &[u64]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(gen) = table_generation(name) {
            if !keep.contains(&gen) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            identity: Identity {
                key: 1,
                value: 2,
                hasher: 3,
                seed: 4,
            },
            bins_per_link: 8,
            max_bins: u64::MAX,
            last_gen: 2,
            current: TableRecord {
                gen: 1,
                bins: 64,
                link_buckets: 16,
                transfer_reserve: 0,
            },
            next: TableRecord {
                gen: 2,
                bins: 256,
                link_buckets: 40,
                transfer_reserve: 22,
            },
            group: 1,
            checkpoints: 3,
            clean: false,
            keys: 0,
            table_checksum: 0,
        }
    }

    #[test]
    fn superblocks_round_trip() {
        let block = sample();
        assert_eq!(Superblock::decode(&block.encode()), Ok(block));
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let bytes = sample().encode();
        // Under Miri every byte, one bit of each (the bits rotate from byte to byte): the
        // checksum code is the same for every bit, and all of them took 44 s there.
        let stride = if cfg!(miri) { 9 } else { 1 };
        for bit in (0..bytes.len() * 8).step_by(stride) {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&damaged).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn foreign_truncated_and_impossible_superblocks_are_refused() {
        assert_eq!(Superblock::decode(b"hello"), Err(StorageErrorKind::Foreign));
        assert_eq!(
            Superblock::decode(&[0u8; SUPERBLOCK_BYTES]),
            Err(StorageErrorKind::Foreign)
        );
        let bytes = sample().encode();
        assert!(matches!(
            Superblock::decode(&bytes[..100]),
            Err(StorageErrorKind::Corrupt(_))
        ));
        let mut future = bytes;
        future[8] = 9;
        assert_eq!(
            Superblock::decode(&future),
            Err(StorageErrorKind::Version { found: 9 })
        );
        let mut block = sample();
        block.next.bins = 100;
        assert!(matches!(
            Superblock::decode(&block.encode()),
            Err(StorageErrorKind::Corrupt(_))
        ));
        // A checksummed superblock whose generation the next growth would overflow.
        let mut block = sample();
        block.last_gen = u64::MAX;
        assert!(matches!(
            Superblock::decode(&block.encode()),
            Err(StorageErrorKind::Corrupt(_))
        ));
        let mut block = sample();
        block.current.bins = 1 << 62;
        assert!(matches!(
            Superblock::decode(&block.encode()),
            Err(StorageErrorKind::Corrupt(_))
        ));
    }
}
