//! Errors.

use core::fmt;
use std::path::{Path, PathBuf};

use crate::config::Backend;

/// Everything a floe call can refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The key's bin has no free slot, cannot chain another link bucket (all 15 slots are
    /// taken, or the table's pool of link buckets is used up), and the map may not grow: it
    /// was capped with `Builder::max_bins`. Nothing stored was changed.
    /// A capped map answers with this from the `try_` forms (`try_insert`, ...); the plain
    /// forms panic with it.
    Full,
    /// The requested size does not fit in memory addresses, or exceeds what one table can
    /// index (2^32 link buckets).
    CapacityOverflow,
    /// The operating system refused the table's memory.
    AllocationFailed {
        /// Bytes requested.
        bytes: usize,
    },
    /// The backend was requested explicitly but this CPU does not support it.
    UnsupportedBackend(Backend),
    /// The hasher maps every probed key into the same bin, so no key can serve as the dead key
    /// of that bin (see the engine's design notes). A constant hash function does this.
    DegenerateHasher,
    /// More than a bin's worth of keys (15) share their hash, or so many of its top bits, with
    /// the key being inserted that no table this machine could hold (nor any of up to 2^40
    /// bins) would give them separate bins: a weak or adversarial hasher (use a keyed one,
    /// such as the default with a random seed). The map is unchanged and did not grow.
    HashCollisions,
    /// A builder setting is out of range; the message says which.
    InvalidConfig(&'static str),
    /// A batch call got a different number of keys and value slots.
    LengthMismatch {
        /// Keys given.
        keys: usize,
        /// Value slots given.
        values: usize,
    },
    /// A call that waits for every operation in progress (a strongly consistent snapshot)
    /// was made from inside an operation of a floe map on the same thread (an `update`
    /// closure, a `for_each` visitor), which it would wait for forever.
    InsideOperation,
    /// A persistent map's files could not be made, opened, read or written; the
    /// [`StorageError`] says what was wrong and where; its source is the operating
    /// system's error, if it refused. A failed open never changes the files.
    Storage(StorageError),
    /// Fire-and-forget updates sent through a [`delegate::Handle`](crate::delegate::Handle)
    /// failed at their partition's owner (no room for their keys: the partition is capped
    /// and full, or its hasher crowds the keys); reported by the sender's next `flush`. The
    /// other updates took effect.
    Undelivered {
        /// How many failed.
        updates: usize,
    },
    /// A [`Partitioned`](crate::delegate::Partitioned) map's handles are out: take them
    /// again once every one has closed.
    HandlesOut,
    /// The map's layout does not offer this operation (the message says which):
    /// [`Layout::Dense`](crate::Layout::Dense) has no `FlatMap` persistence (its files are
    /// the default layout's tables). Nothing was changed.
    NotInLayout(&'static str),
}

/// What is wrong with a persistent map's files (`Builder::persistent`, `FlatMap::open`,
/// `PersistentMap`): the kind of a [`StorageError`], which also names the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageErrorKind {
    /// The system refused a file operation.
    Io {
        /// What floe was doing.
        what: &'static str,
        /// The error's kind.
        kind: std::io::ErrorKind,
        /// The OS error number, 0 if none.
        errno: i32,
    },
    /// Another process (or another map in this one) has the map open.
    Locked,
    /// There is no map at the path (no directory or no superblock).
    Missing,
    /// `Builder::persistent` was asked to create a map where one exists (use `FlatMap::open`).
    Exists,
    /// The directory holds the other kind of persistent map (a `PersistentMap`'s where a
    /// `FlatMap` was asked for, or the reverse); the message names the kind found. Nothing
    /// was changed.
    OtherKind(&'static str),
    /// A new map was asked for in a directory that holds files that are not that map's own (or
    /// subdirectories): a new map is made only in a missing or empty directory. Nothing was
    /// changed.
    NotEmpty,
    /// The superblock is not a floe map's (wrong magic).
    Foreign,
    /// The files were written by a floe with another format version.
    Version {
        /// The version found.
        found: u32,
    },
    /// The files are damaged; the message says how.
    Corrupt(&'static str),
    /// The map was made for other key, value or hasher types; the message says which.
    TypeMismatch(&'static str),
    /// Persistence is not available here (not Unix, or under Miri or loom).
    Unsupported,
}

/// A persistent map's files refused: what is wrong ([`kind`](Self::kind)), the file or
/// directory it concerns ([`path`](Self::path)), and for a refusal of the operating system its
/// [`std::io::Error`] as the [`source`](std::error::Error::source).
///
/// `Copy`, as [`Error`] is (a batch's responses are): the path and the source are kept once
/// per process, interned (see [`path`](Self::path)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageError {
    kind: StorageErrorKind,
    /// A thin pointer (to the interned `PathBuf`): an `Error` is part of every batch response,
    /// so its size matters.
    path: Option<&'static PathBuf>,
}

impl StorageError {
    /// What is wrong.
    pub fn kind(&self) -> StorageErrorKind {
        self.kind
    }

    /// The file or directory the error concerns: the one floe was working on, or the map's
    /// directory when no single file is to blame.
    ///
    /// Each distinct path an error names is kept for the rest of the process (interned, so
    /// that the error stays `Copy`): a few bytes per file or directory that ever failed,
    /// never per error, and at most 4096 of them (errors about further paths name none).
    pub fn path(&self) -> Option<&'static Path> {
        self.path.map(PathBuf::as_path)
    }

    #[cfg_attr(floe_loom, allow(dead_code))]
    pub(crate) fn from_io(what: &'static str, error: std::io::Error) -> Self {
        StorageErrorKind::Io {
            what,
            kind: error.kind(),
            errno: error.raw_os_error().unwrap_or(0),
        }
        .into()
    }

    /// This error, naming `path` if it names none yet (the innermost layer that knew the
    /// file wins over the directory a caller adds).
    #[cfg_attr(floe_loom, allow(dead_code))]
    pub(crate) fn at(self, path: &Path) -> Self {
        StorageError {
            path: self.path.or_else(|| interned_path(path)),
            ..self
        }
    }

    /// This error, naming `path` whatever it named.
    #[cfg_attr(floe_loom, allow(dead_code))]
    pub(crate) fn at_instead(self, path: &Path) -> Self {
        StorageError {
            path: interned_path(path),
            ..self
        }
    }
}

/// At most this many distinct paths are kept; errors about further ones name none. floe
/// names the files of its own choosing only where their number is bounded (a growth's or a
/// compaction's failure names the map's directory, since each attempt takes a new file name),
/// so the bound is reached only by a program that opens this many directories that fail.
#[cfg_attr(floe_loom, allow(dead_code))]
const MAX_INTERNED_PATHS: usize = 4096;

/// `path`, kept for the rest of the process: one copy per distinct path, at most
/// [`MAX_INTERNED_PATHS`] of them (`None` past that).
#[cfg_attr(floe_loom, allow(dead_code))]
#[cold]
fn interned_path(path: &Path) -> Option<&'static PathBuf> {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static PATHS: OnceLock<Mutex<HashSet<&'static PathBuf>>> = OnceLock::new();
    let mut paths = PATHS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let owned = path.to_path_buf();
    if let Some(&kept) = paths.get(&owned) {
        return Some(kept);
    }
    if paths.len() >= MAX_INTERNED_PATHS {
        return None;
    }
    let kept: &'static PathBuf = Box::leak(Box::new(owned));
    paths.insert(kept);
    Some(kept)
}

/// The operating system's error of this number (or, for 0, of this kind), kept for the rest
/// of the process so that a `Copy` error can lend it as its source: one per distinct error.
#[cold]
fn interned_io_error(kind: std::io::ErrorKind, errno: i32) -> &'static std::io::Error {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Kept = HashMap<(std::io::ErrorKind, i32), &'static std::io::Error>;
    static ERRORS: OnceLock<Mutex<Kept>> = OnceLock::new();
    let mut errors = ERRORS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    errors.entry((kind, errno)).or_insert_with(|| {
        Box::leak(Box::new(if errno != 0 {
            std::io::Error::from_raw_os_error(errno)
        } else {
            std::io::Error::from(kind)
        }))
    })
}

impl From<StorageErrorKind> for StorageError {
    fn from(kind: StorageErrorKind) -> Self {
        StorageError { kind, path: None }
    }
}

impl PartialEq<StorageErrorKind> for StorageError {
    fn eq(&self, other: &StorageErrorKind) -> bool {
        self.kind == *other
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(path) = self.path {
            write!(f, "{}: ", path.display())?;
        }
        fmt::Display::fmt(&self.kind, f)
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.kind {
            StorageErrorKind::Io { kind, errno, .. } => Some(interned_io_error(kind, errno)),
            _ => None,
        }
    }
}

impl fmt::Display for StorageErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageErrorKind::Io { what, kind, errno } => {
                write!(f, "could not {what}: {kind}")?;
                if *errno != 0 {
                    write!(f, " ({})", std::io::Error::from_raw_os_error(*errno))?;
                }
                Ok(())
            }
            StorageErrorKind::Locked => {
                f.write_str("the map is open in another process (its lock is held)")
            }
            StorageErrorKind::Missing => f.write_str("no floe map at this path"),
            StorageErrorKind::Exists => {
                f.write_str("a floe map exists at this path already (open it instead)")
            }
            StorageErrorKind::OtherKind(kind) => {
                write!(f, "the directory holds a floe {kind}, not the kind of map asked for")
            }
            StorageErrorKind::NotEmpty => f.write_str(
                "the directory holds files that are not this map's (a new map is made only in a missing or empty directory)",
            ),
            StorageErrorKind::Foreign => {
                f.write_str("not a floe map (the superblock's magic does not match)")
            }
            StorageErrorKind::Version { found } => write!(
                f,
                "the map's format version is {found}, this floe reads {}",
                crate::raw::FORMAT_VERSION
            ),
            StorageErrorKind::Corrupt(why) => write!(f, "the map's files are damaged: {why}"),
            StorageErrorKind::TypeMismatch(which) => {
                write!(f, "the map was made for another {which} type")
            }
            StorageErrorKind::Unsupported => {
                f.write_str("persistent maps are not supported on this platform")
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Full => f.write_str("the table is full for this key: its bin has no free slot, no link bucket is left, and the map may not grow (max_bins)"),
            Error::CapacityOverflow => f.write_str("the requested capacity is too large for one table"),
            Error::AllocationFailed { bytes } => write!(f, "could not allocate {bytes} bytes for the table"),
            Error::UnsupportedBackend(backend) => write!(f, "this CPU does not support the {backend:?} backend"),
            Error::DegenerateHasher => f.write_str("the hasher sends every key to the same bin"),
            Error::HashCollisions => f.write_str("too many keys share this key's hash: no table size would separate them"),
            Error::InvalidConfig(why) => write!(f, "invalid map configuration: {why}"),
            Error::NotInLayout(what) => write!(f, "the map's layout does not offer {what}"),
            Error::LengthMismatch { keys, values } => write!(f, "{keys} keys but {values} value slots"),
            Error::InsideOperation => f.write_str("called from inside an operation of a floe map on this thread, which it would wait for"),
            Error::Storage(error) => write!(f, "persistent map: {error}"),
            Error::Undelivered { updates } => write!(f, "{updates} delegated updates failed at their partition's owner (no room for their keys)"),
            Error::HandlesOut => f.write_str("the partitioned map's handles are out (close them all first)"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // The storage error's own message is part of this one's; its source (the
            // operating system's error) is the cause a caller may want to inspect.
            Error::Storage(error) => std::error::Error::source(error),
            _ => None,
        }
    }
}

impl Error {
    /// The kind of a storage error, `None` for every other error: the short way to ask
    /// `error.storage_kind() == Some(StorageErrorKind::Missing)`.
    pub fn storage_kind(&self) -> Option<StorageErrorKind> {
        match self {
            Error::Storage(error) => Some(error.kind()),
            _ => None,
        }
    }

    /// A storage error of `kind` (or a [`StorageError`]), naming no path yet.
    #[cfg_attr(floe_loom, allow(dead_code))]
    pub(crate) fn storage(error: impl Into<StorageError>) -> Error {
        Error::Storage(error.into())
    }

    /// This error, naming `path` if it is a storage error that names none yet.
    #[cfg_attr(floe_loom, allow(dead_code))]
    pub(crate) fn at(self, path: &Path) -> Error {
        match self {
            Error::Storage(error) => Error::Storage(error.at(path)),
            other => other,
        }
    }

    /// This error, naming `path` (whatever it named) if it is a storage error.
    #[cfg_attr(floe_loom, allow(dead_code))]
    pub(crate) fn at_instead(self, path: &Path) -> Error {
        match self {
            Error::Storage(error) => Error::Storage(error.at_instead(path)),
            other => other,
        }
    }

    /// Panic with this error. The infallible forms (`insert`, `with_capacity`, ...) do, as
    /// std's collections panic on a capacity overflow; their `try_` twins return it instead.
    #[cold]
    #[inline(never)]
    #[track_caller]
    pub(crate) fn raise(self) -> ! {
        panic!("floe: {self}")
    }
}

/// `Result::unwrap` for the infallible forms, with the error's own message and the caller's
/// location in the panic.
pub(crate) trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T, Error> {
    #[inline(always)]
    #[track_caller]
    fn or_raise(self) -> T {
        match self {
            Ok(value) => value,
            Err(error) => error.raise(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_stays_small_and_its_path_and_source_are_kept_once() {
        // Every batch response carries an `Error` slot: naming paths must not grow it past
        // the four words it had.
        assert!(size_of::<Error>() <= 32, "{}", size_of::<Error>());
        let missing = Error::storage(StorageErrorKind::Missing).at(Path::new("/a/b"));
        let again = Error::storage(StorageErrorKind::Missing).at(Path::new("/a/b"));
        let (Error::Storage(first), Error::Storage(second)) = (missing, again) else {
            unreachable!()
        };
        assert_eq!(first.path(), Some(Path::new("/a/b")));
        assert!(core::ptr::eq(first.path().unwrap(), second.path().unwrap()));
        assert_eq!(
            missing.to_string(),
            "persistent map: /a/b: no floe map at this path"
        );
        // The innermost path wins.
        assert_eq!(missing.at(Path::new("/a")), missing);
        assert!(std::error::Error::source(&missing).is_none());
        let io = StorageError::from_io(
            "read the superblock",
            std::io::Error::from_raw_os_error(libc::EACCES),
        );
        let source = std::error::Error::source(&io).expect("an I/O error's source");
        let source = source.downcast_ref::<std::io::Error>().unwrap();
        assert_eq!(source.raw_os_error(), Some(libc::EACCES));
        assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied);
    }
}
