//! floe-server: a memcached-compatible cache on floe's lock-free map.
//!
//! Reading order: [`cache`] (items, memory, S3-FIFO eviction: the design notes are at its
//! top), [`text`] (memcached's text and meta protocols, and how reads are batched),
//! [`binary`] (its binary protocol), [`connection`] (a connection's unanswered input),
//! [`server`] (one mio event loop per worker thread, connections, back-pressure),
//! [`stats`], [`detail`] (per-prefix counts) and [`crawler`] (`lru_crawler`), [`persist`] (warm restarts: journals and snapshots, `-e`), then `main.rs`
//! (flags). [`protocol`] holds memcached's limits and version string, which they share.

pub mod binary;
pub mod cache;
pub mod connection;
pub mod crawler;
pub mod detail;
pub mod log;
pub mod persist;
pub mod protocol;
pub mod server;
pub mod stats;
pub mod text;
