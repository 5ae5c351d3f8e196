//! Logging to stderr at memcached's verbosity levels (`-v`, `-vv`, `-vvv`, `verbosity`),
//! through `tracing`: each line carries a UTC timestamp and a level, then the message.
//!
//! | verbosity | what | level |
//! |---|---|---|
//! | 0 | errors | `ERROR` |
//! | 1 (`-v`) | start, stop, restores, snapshots, refused connections | `INFO` |
//! | 2 (`-vv`) | connections opened and closed, each text-protocol command line (`<id line`) and the first line of its reply (`>id line`), as memcached's `-vv` | `DEBUG` |
//! | 3 (`-vvv`) | more | `TRACE` |
//!
//! The level can change while the server runs (the `verbosity` command), so lines are
//! filtered here, by one relaxed load, before `tracing` sees them; the subscriber takes
//! every level.

use core::sync::atomic::{AtomicU8, Ordering};

#[doc(hidden)]
pub use tracing as __tracing;

static VERBOSITY: AtomicU8 = AtomicU8::new(0);

/// Send log lines to stderr, with timestamps and levels (the binary calls it once; a second
/// call, or a library user's own subscriber, is left as it is).
pub fn init() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_target(false)
        .try_init();
}

/// Set the level: 0 errors only, 1 warnings and connection errors, 2 connections, 3 more.
pub fn set_verbosity(level: u8) {
    VERBOSITY.store(level, Ordering::Relaxed);
}

/// The current level.
pub fn verbosity() -> u8 {
    VERBOSITY.load(Ordering::Relaxed)
}

/// Whether lines of `level` are logged.
pub fn enabled(level: u8) -> bool {
    verbosity() >= level
}

/// Log a line if the verbosity is at least `$level` (0 to 3; see the module's table).
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            match $level {
                0 => $crate::log::__tracing::error!($($arg)*),
                1 => $crate::log::__tracing::info!($($arg)*),
                2 => $crate::log::__tracing::debug!($($arg)*),
                _ => $crate::log::__tracing::trace!($($arg)*),
            }
        }
    };
}

/// `-vv`: a command line read from connection `id` (`<id line`) and the first line of its
/// reply (`>id line`, if it has one), as memcached logs them.
pub fn command(id: usize, line: &[u8], reply: &[u8]) {
    crate::log!(2, "<{id} {}", line.escape_ascii());
    let first = reply.split(|&b| b == b'\n').next().unwrap_or_default();
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    if !first.is_empty() {
        crate::log!(2, ">{id} {}", first.escape_ascii());
    }
}
