//! Logging to stderr at memcached's verbosity levels (`-v`, `-vv`, `-vvv`, `verbosity`).

use core::sync::atomic::{AtomicU8, Ordering};

static VERBOSITY: AtomicU8 = AtomicU8::new(0);

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

/// Log a line to stderr if the verbosity is at least `$level`.
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            eprintln!("floe-server: {}", format_args!($($arg)*));
        }
    };
}
