//! S3-FIFO's queues (the design is in the module docs of `cache`): queue nodes and what one
//! is charged, the small and main FIFOs of a shard, the ghosts of keys evicted, and the
//! split's bounds. The
//! eviction steps themselves are a session's (`session.rs`), which holds the index and the
//! counters they touch.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Mutex, MutexGuard},
};

use super::item::Item;

/// Live items a step of eviction passes over under `-M` (where none may be evicted) while
/// it looks for a stale node or an expired item to free: a refused store costs at most this
/// many lookups per shard.
pub(super) const MAX_PASSED_OVER: usize = 64;

/// Queue nodes the expiry sweep takes per step: it holds a shard's lock only while it copies
/// this many nodes' hashes and ids, and a pin of the index only while it checks their items.
pub(super) const SWEEP_SLICE: usize = 256;

/// A queue node: names the item under a key of hash `hash` whose `node` is `id` in its low 32
/// bits. A node that no item names any more (its item was removed) is stale.
///
/// **Why 32 bits of the id are enough.** Node ids are CAS uniques, which never repeat; kept
/// to 32 bits they repeat every 2^32 stores. A node can then name an item other than its own
/// only if that item is under a key of the same 64-bit hash (in practice the same key) and
/// carries a node id a multiple of 2^32 stores apart from it: a stale node of a key deleted
/// and stored again four billion stores later, say. Eviction then judges that item by the
/// wrong node: it may evict it or move it on early, which a cache may always do. Nothing else
/// rests on a node: an item's charge leaves with the write that unlinks it, whichever node led
/// to it, and a node's own charge leaves with the node.
#[derive(Clone, Copy)]
pub(super) struct Node {
    pub(super) hash: u64,
    pub(super) id: u32,
    /// The item's charge when the node was last queued (for the queues' shares of the
    /// bytes, which decide which queue eviction takes from). A write that replaces the item
    /// takes the node over without finding it in its queue (a search of the shard's queues,
    /// under their lock, per overwrite), so the charge is brought up to date only when the
    /// node goes round: passed over under `-M`, or moved on to main. Until then a queue's
    /// `bytes` counts the item as it was (an append that grew it, say, is not counted), which
    /// skews the small/main split, never what is charged against `-m` (`Cache::used`).
    pub(super) charge: u32,
}

impl Node {
    /// Whether `item` carries this node's id (see the type's docs for the 32 bits).
    pub(super) fn names(&self, item: &Item) -> bool {
        item.node == self.id
    }
}

/// One FIFO of queue nodes. `popped` counts the nodes that ever left its front, so
/// `popped + index` names a node for as long as it stays (the expiry sweep's position).
#[derive(Default)]
pub(super) struct Fifo {
    pub(super) nodes: VecDeque<Node>,
    pub(super) bytes: usize,
    pub(super) popped: u64,
}

impl Fifo {
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub(super) fn push_back(&mut self, node: Node) {
        self.bytes += node.charge as usize;
        self.nodes.push_back(node);
    }

    pub(super) fn pop_front(&mut self) -> Option<Node> {
        let node = self.nodes.pop_front()?;
        self.bytes -= node.charge as usize;
        self.popped += 1;
        Some(node)
    }

    /// The position after the last node.
    pub(super) fn end(&self) -> u64 {
        self.popped + self.nodes.len() as u64
    }

    /// Copy up to [`SWEEP_SLICE`] nodes at positions `from..end` (those still there) into
    /// `into`; returns the position to go on from.
    pub(super) fn copy_slice(&self, from: u64, end: u64, into: &mut Vec<Node>) -> u64 {
        let start = from.max(self.popped);
        let stop = end.min(self.end());
        if start >= stop {
            return end;
        }
        let first = (start - self.popped) as usize;
        let last = ((stop - self.popped) as usize).min(first + SWEEP_SLICE);
        into.extend(self.nodes.range(first..last).copied());
        self.popped + last as u64
    }
}

/// One shard of the S3-FIFO queues.
#[derive(Default)]
pub(super) struct Queues {
    pub(super) small: Fifo,
    pub(super) main: Fifo,
    /// Keys evicted from small, unread (S3-FIFO's ghost).
    pub(super) ghost: Ghost,
    /// Keys evicted from main (for the split's adaptation only).
    pub(super) main_ghost: Ghost,
}

impl Queues {
    pub(super) fn fifo(&mut self, small: bool) -> &mut Fifo {
        if small {
            &mut self.small
        } else {
            &mut self.main
        }
    }

    /// Queue a new item's node: in main if the ghost remembers its key (it was evicted from
    /// small not long ago), else in small.
    pub(super) fn push(&mut self, node: Node) {
        if self.ghost.take(node.hash) {
            self.main.push_back(node);
        } else {
            self.small.push_back(node);
        }
    }
}

/// What eviction did with the item a node named.
pub(super) enum Retired {
    /// Removed while valid.
    Evicted,
    /// Removed, expired or flushed.
    Reclaimed,
    /// No item names the node: nothing to remove.
    Stale,
    /// A valid item names the node again (an overwrite came between the look and the
    /// removal of an expired item): the node goes back to a queue.
    Kept(Node),
}

/// Hashes of keys recently evicted from a queue, oldest first, at most `capacity`.
#[derive(Default)]
pub(super) struct Ghost {
    order: VecDeque<u64>,
    pub(super) members: HashMap<u64, Member>,
}

/// A hash in a ghost: its copies in `order`, and whether a read that missed it moved the
/// queues' split already (once per stay, so that a client asking again and again for one
/// evicted key does not push the split to its bound).
#[derive(Default)]
pub(super) struct Member {
    copies: u32,
    signalled: bool,
}

impl Ghost {
    pub(super) fn insert(&mut self, hash: u64, capacity: usize) {
        self.order.push_back(hash);
        self.members.entry(hash).or_default().copies += 1;
        while self.order.len() > capacity.max(64) {
            let old = self.order.pop_front().expect("nonempty");
            self.forget_one(old);
        }
    }

    fn forget_one(&mut self, hash: u64) {
        if let std::collections::hash_map::Entry::Occupied(mut o) = self.members.entry(hash) {
            o.get_mut().copies -= 1;
            if o.get().copies == 0 {
                o.remove();
            }
        }
    }

    /// Whether `hash` was evicted recently; forgets it (it goes to main now).
    fn take(&mut self, hash: u64) -> bool {
        // The hash stays in `order` and is dropped from it in turn; the count says it is
        // no longer a member once every copy has been taken or aged out.
        let member = self.members.contains_key(&hash);
        if member {
            self.forget_one(hash);
        }
        member
    }

    /// Whether a read of `hash` that missed should move the split: it was evicted recently
    /// and no read signalled it since.
    pub(super) fn signal(&mut self, hash: u64) -> bool {
        match self.members.get_mut(&hash) {
            Some(member) if !member.signalled => {
                member.signalled = true;
                true
            }
            _ => false,
        }
    }
}

/// The small queue's share of the queued bytes, in thousandths: where it starts (S3-FIFO's
/// 10%), and its bounds and step (see "The split adapts" in `cache/mod.rs`).
pub(super) const SMALL_SHARE_START: u32 = 100;
pub(super) const SMALL_SHARE_MIN: u32 = 10;
pub(super) const SMALL_SHARE_MAX: u32 = 990;
pub(super) const SMALL_SHARE_STEP: u32 = 10;

pub(super) fn lock(queues: &Mutex<Queues>) -> MutexGuard<'_, Queues> {
    // A panic while a shard was locked leaves it consistent enough to go on: every field
    // is updated before the next one is read.
    queues
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Bytes charged for a queue node: its slot in its queue (it holds no key).
pub const fn node_charge() -> usize {
    size_of::<Node>()
}
