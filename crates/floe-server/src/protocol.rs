//! memcached's protocol constants: the limits and version string every protocol module and
//! the journal share. A leaf: it imports nothing of the crate.

/// The longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;

/// Expiry times above this many seconds are absolute Unix times (memcached's 30 days).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// The longest command line (without its data block) other than the get commands.
pub const MAX_LINE: usize = 8 << 10;

/// The longest get / gets / gat / gats / mg line (about 1,000 keys of 250 bytes).
pub const MAX_GET_LINE: usize = 256 << 10;

/// The version string clients see; the `1.6` prefix makes version-sniffing clients treat
/// the server as a memcached 1.6.
pub const VERSION: &str = concat!("1.6.99-floe-", env!("CARGO_PKG_VERSION"));
