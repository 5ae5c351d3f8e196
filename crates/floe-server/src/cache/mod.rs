//! The cache: items in a floe [`Map`](floe::Map), memory bounded by S3-FIFO eviction.
//!
//! # Design
//!
//! **Index and items.** Every item lives in one entry of a `floe::Map<Key, Item>`: the key
//! (inline in the entry up to 22 bytes, `item::Key`) and the item (value bytes, client
//! flags, CAS unique, expiry). A get is the map's lock-free get: one bin line, then the
//! entry; a multi-get, and a run of gets a client pipelined, is one `MapRef::get_many` call, which
//! prefetches every bin and then every entry before it reads any (DLHT's batches); the
//! session then starts loading the first KiB of each value found, which the replies copy
//! next (`Session::get_many`). Writes
//! are the map's own single-swap writes: every store, `incr` / `decr` and `touch` a
//! `compute` (a read-decide-swap that retries when the key changed under it, so a CAS check
//! and the write it guards are one atomic step, and the new item can take over what the
//! one it replaces had: its queue node, below), delete a `remove_if`. Each write is therefore linearizable at its swap, as
//! the map's writes are. Items never change once published, except for the read marks (the
//! access frequency, whether it was read, the last-access time): hints for eviction and the
//! meta protocol, written by readers with plain relaxed stores, so a lost mark costs an item
//! at most one pass through a queue, never a wrong answer.
//!
//! A value read by a get stays valid while the reader's guard lives: replaced and removed
//! entries are freed by the map's `seize` collector only after every reader that could see
//! them has left, so a connection copies value bytes into its output without a lock.
//!
//! **Why not segments.** Segcache stores items in append-only segments with an index of
//! pointers into them, which saves per-item allocation and makes eviction and expiry
//! segment-at-a-time. With floe's map the entry already is the item (one allocation for the
//! entry, one for the value), its reclamation is already safe against concurrent readers,
//! and a segment store would need its own reclamation protocol on top of the map's (a segment
//! may be reused only after every reader of every item in it has left). The per-item cost
//! we pay instead is the allocator's; it is counted in each item's charge.
//!
//! **Memory.** `-m` bounds the bytes charged, which are the bytes allocated: each item is
//! charged its map entry, its key's allocation and its value's (`item_charge`), each eviction
//! queue node its 16-byte slot (`node_charge`: a node outlives its item until it reaches the
//! head of its queue). For a 20-byte key and a 100-byte value that is 96 (the entry, key
//! inline) + 112 + 16 = 224 bytes (memcached's slab class for it: 192; 288 when the entry
//! and the queue node shared the key in an `Arc` and a node was 32 bytes). An item's charge
//! is added when it is published and subtracted when it is unlinked (by the write that
//! replaced or removed it), not when its memory is freed (a deferred free happens a few
//! operations later); the map's own table is reported apart (`index_bytes` in `stats`), as
//! the issue asks.
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
//! node keeps the low 32 bits: see `eviction::Node`), and eviction finds it among the entries
//! of that hash (`MapRef::find_by_hash`), so a node holds no key. A write that replaces an
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
//! Reading order: this essay, then [`item`] (what an item holds and is charged), [`counters`],
//! [`eviction`] (the queues' data), [`shared`] (the [`Cache`] every worker shares: settings,
//! clock, charges, expiry, flush, the sweep), [`session`] (workers, a worker's operations
//! and the eviction steps a store takes) and [`open`] (a persistent cache's open and restore).
//! Arrows point down that list only; this index re-exports what the protocols use.

pub mod counters;
pub mod eviction;
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
