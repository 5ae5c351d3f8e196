//! The cache: items in one allocation each, indexed by a floe [`FlatMap`](floe::FlatMap),
//! memory bounded by S3-FIFO eviction.
//!
//! # Design
//!
//! **Index and items.** An item is one allocation: a 48-byte header (client flags, CAS unique,
//! expiry, read marks...), then the key's bytes, then the value's (`item.rs`). The index
//! (`index.rs`) is a `floe::FlatMap<u64, u64>` from the key's 64-bit hash to the item's
//! address, the word kept inline in the bin's line. A get is the map's lock-free get: one bin
//! line, then the item, whose key is compared; a multi-get, and a run of gets a client
//! pipelined, is one batch of the map's (`FlatMap::batch`), which prefetches every bin before
//! it reads any (DLHT's batches), then every item found; the session then starts loading the
//! first KiB of each value found, which the replies copy next (`Session::get_many`). Writes
//! are single swaps of the word: every store, `incr` / `decr` and `touch` a `compute` (a
//! read-decide-swap that retries when the key's word changed under it, so a CAS check and
//! the write it guards are one atomic step, and the new item can take over what the one it
//! replaces had: its queue node, below), delete a `remove_if`. Each write is therefore
//! linearizable at its swap, as the map's writes are. Items never change once published,
//! except for the read marks (the access frequency, whether it was read, the last-access
//! time, the win token): hints for eviction and the meta protocol, written by readers with
//! relaxed atomics, so a lost mark costs an item at most one pass through a queue, never a
//! wrong answer (the win token, which must go to one reader, is taken with a `fetch_or`).
//!
//! A value read by a get stays valid while the reader's guard lives: replaced and removed
//! items are freed through the index's `seize` collector only after every reader that could
//! see them has left, so a connection copies value bytes into its output without a lock.
//! Two keys whose 64-bit hashes are equal share a slot: the later store displaces the other
//! key's item, as an eviction (`index.rs`).
//!
//! **Why not segments.** Segcache stores items in append-only segments with an index of
//! pointers into them, which saves per-item allocation and makes eviction and expiry
//! segment-at-a-time. Here each item is one allocation of the global allocator, its
//! reclamation already safe against concurrent readers through the collector; a segment
//! store would need its own reclamation protocol (a segment may be reused only after every
//! reader of every item in it has left). The per-item cost we pay instead is the allocator's
//! rounding and header; it is counted in each item's charge.
//!
//! **Memory.** `-m` bounds the bytes charged, which are the bytes allocated: each item is
//! charged its allocation as glibc's malloc sizes it (`item_charge`), each eviction queue
//! node its 16-byte slot (`node_charge`: a node outlives its item until it reaches the head
//! of its queue). For a 20-byte key and a 100-byte value that is 176 + 16 = 192 bytes,
//! memcached's slab class for it. It was 224 when `floe::Map` held each key in an entry of
//! its own beside the value's allocation (96 + 112 + 16), and 288 before that, when the
//! entry and the queue node shared the key in an `Arc`: at `-m 64` floe-server then held
//! 14% fewer 100-byte items than memcached, and lost 1 to 13 points of hit ratio on zipf and
//! uniform reads (BENCHMARKS.md). An item's charge is added when it is published and
//! subtracted when it is unlinked (by the write that replaced or removed it), not when its
//! memory is freed (a deferred free happens a few operations later); the index's own table
//! is reported apart (`index_bytes` in `stats`), as the issue asks.
//!
//! **Eviction: S3-FIFO** (Yang et al., SOSP'23). New items enter a small FIFO queue (10% of
//! the bytes at the start; see "The split adapts" below); a get only marks the item (a 2-bit
//! frequency, a relaxed store, no lock, no queue move, which is what makes it fit a lock-free
//! table: an LRU would move the item on every hit). At the head of the small queue an item that was read since it entered moves
//! to the main queue and one that was not is evicted, its key's hash remembered in a ghost
//! FIFO; an item whose key is in the ghost goes straight to main when it is stored again. At
//! the head of main, an item read since its last pass goes round again with its frequency
//! lowered, and an unread one is evicted. One-hit wonders leave after a short stay in the
//! small queue, so they never push out the working set, which memcached's segmented LRU lets
//! them do for its whole cold segment. The queues are sharded, one per worker thread behind
//! a mutex that only the worker, an evicting writer and the expiry sweep take (never a
//! reader), so a set takes an uncontended lock. A queue node names its item by its key's
//! hash and node id (`Item::node`, the CAS unique of the store that queued it, of which the
//! node keeps the low 32 bits: see `eviction::Node`), and eviction finds it by that hash in
//! the index (`Pinned::find_by_hash`), so a node holds no key. A write that replaces an
//! item hands the node on to the new item, so a key rewritten a million times (`set`,
//! `append`, `incr`...) has one node, keeps its place in the queue and leaves nothing
//! charged behind; only a key's first store after it was absent queues a node. A node
//! whose item was removed (deleted, evicted, expired) is stale and is freed when eviction
//! reaches it. Under `-M` nothing live is evicted: eviction passes over live items (to their
//! queue's tail) to reach the stale nodes and expired items behind them, so those are freed
//! whatever sits at the head.
//!
//! **The split adapts** (after ARC, Megiddo and Modha, FAST'03). S3-FIFO's fixed 10% small
//! queue evicts an item that was not read within the next 10% of the cache's worth of
//! writes, where an LRU keeps it for the whole cache's worth: a client that writes a key and
//! reads it once, later, missed every time on floe-server and never on memcached (issue 44).
//! So the small queue's share of the queued bytes is a target that the misses move: a read
//! that misses a key evicted unread from small (still in its ghost) grows the share by 1%, one
//! that misses a key evicted from main (a second ghost) shrinks it by 1%, within 1% and 99%;
//! each ghost entry moves it once. A workload whose items are read late moves the share up
//! until they stay (at 99% the queues are one FIFO with second chances, as CLOCK); one whose
//! hot items are pushed out of main moves it back down, and scans and one-hit wonders, which
//! are never asked for again, move nothing and keep S3-FIFO's protection of main. Measured
//! beside memcached on the traces of `floe-bench server --hit-ratio` (BENCHMARKS.md). The
//! share is one number for the cache (a relaxed atomic), read at each eviction step.
//!
//! **Stale nodes.** A delete leaves its item's node behind, 16 bytes; eviction frees it when
//! it reaches a queue's head, and until then it counts against `-m` (a million deletes of
//! keys never stored again hold 16 MB until eviction passes them). The key and the value
//! leave with the item.
//!
//! **Persistence** (`-e DIR`, `persist.rs`). Each write takes a sequence number inside its
//! decision (`sequenced`) and, once published, appends the whole new item to its session's
//! journal buffer, which the session writes to its worker's journal when it ends: before the
//! replies are sent. A restart restores, for each key, the record with the largest number,
//! in the background while the server serves; writes wait for it (`Cache::open`). A write
//! into an absent key read no earlier item, so a removal may have overtaken its number; it
//! then journals what the key holds again under a new one (`Session::inserted`).
//!
//! **Expiry.** An expired or flushed item is never returned: every read checks it, and the
//! read that finds it unlinks it. Eviction drops expired items first when they reach a
//! queue's head, and [`Cache::reclaim_expired`] (run by the server's housekeeping thread in
//! slices) unlinks expired items without touching the request path.
//!
//! # Rooms
//!
//! Reading order: this essay, then [`item`] (what an item holds and is charged), `index.rs`
//! (items by key, and when they are freed), [`counters`], [`eviction`] (the queues' data),
//! [`shared`] (the [`Cache`] every worker shares: settings,
//! clock, charges, expiry, flush, the sweep), [`session`] (workers, a worker's operations
//! and the eviction steps a store takes) and [`open`] (a persistent cache's open and restore).
//! Arrows point down that list only; this index re-exports what the protocols use.

pub mod counters;
pub mod eviction;
mod index;
pub mod item;
pub mod open;
pub mod session;
pub mod shared;

pub use self::{
    counters::{Counter, COUNTERS},
    eviction::node_charge,
    item::*,
    session::{Session, Worker},
    shared::{too_large, Cache, OpenError, QueuesSummary, Settings},
};

#[cfg(test)]
mod tests;
