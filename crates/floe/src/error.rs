//! Errors.

use core::fmt;

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
    /// [`StorageError`] says what was wrong. A failed open never changes the files.
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

/// What is wrong with a persistent map's files (`Builder::persistent`, `FlatMap::open`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageError {
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

impl StorageError {
    pub(crate) fn from_io(what: &'static str, error: &std::io::Error) -> Self {
        StorageError::Io {
            what,
            kind: error.kind(),
            errno: error.raw_os_error().unwrap_or(0),
        }
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Io { what, kind, errno } => {
                write!(f, "could not {what}: {kind}")?;
                if *errno != 0 {
                    write!(f, " ({})", std::io::Error::from_raw_os_error(*errno))?;
                }
                Ok(())
            }
            StorageError::Locked => {
                f.write_str("the map is open in another process (its lock is held)")
            }
            StorageError::Missing => f.write_str("no floe map at this path"),
            StorageError::Exists => {
                f.write_str("a floe map exists at this path already (open it instead)")
            }
            StorageError::OtherKind(kind) => {
                write!(f, "the directory holds a floe {kind}, not the kind of map asked for")
            }
            StorageError::NotEmpty => f.write_str(
                "the directory holds files that are not this map's (a new map is made only in a missing or empty directory)",
            ),
            StorageError::Foreign => {
                f.write_str("not a floe map (the superblock's magic does not match)")
            }
            StorageError::Version { found } => write!(
                f,
                "the map's format version is {found}, this floe reads {}",
                crate::raw::FORMAT_VERSION
            ),
            StorageError::Corrupt(why) => write!(f, "the map's files are damaged: {why}"),
            StorageError::TypeMismatch(which) => {
                write!(f, "the map was made for another {which} type")
            }
            StorageError::Unsupported => {
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

impl std::error::Error for Error {}

impl Error {
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
