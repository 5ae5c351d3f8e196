//! A worker's handle on the cache and the sessions it runs: every operation of the protocols
//! (gets, stores, `incr`/`decr`, deletes, touches), each write's sequence number and journal
//! record, and the eviction steps a store takes to make room.

use core::sync::atomic::Ordering;
use std::sync::Arc;

use super::{
    counters::{bump, Counter},
    eviction::{
        lock, node_charge, Node, Queues, Retired, MAX_PASSED_OVER, SMALL_SHARE_MAX,
        SMALL_SHARE_MIN, SMALL_SHARE_STEP,
    },
    index::{Computed, Decision, Pinned},
    item::*,
    shared::{too_large, Cache},
};
use crate::persist::{Kind, Record, Store};

/// The part of a new item that comes from the write making it.
struct Stamp<'k> {
    /// The key the write stores under (at most 250 bytes: the protocols refuse longer keys
    /// before they reach a session).
    key: &'k [u8],
    /// A unique no other write has: the id of the queue node the item gets if it needs one.
    unique: u64,
    /// The item's CAS unique: `unique`, unless the client chose it (meta `E`). Node ids
    /// stay `unique`s (their low 32 bits, `eviction::Node`), so a client's choice never
    /// names a node.
    cas: u64,
    now: u32,
    generation: u32,
    binary_key: bool,
}

impl Stamp<'_> {
    /// The header of an item this write makes.
    fn fields(&self, flags: u32, exptime: u32) -> Fields {
        Fields {
            cas: self.cas,
            seq: 0,
            flags,
            exptime,
            time: self.now,
            generation: self.generation,
            last_access: self.now,
            // A new node, unless the write hands on the node of the item it replaces.
            node: self.unique as u32,
            binary_key: self.binary_key,
            stale: false,
            token_sent: false,
        }
    }

    /// An item this write makes under its key, its value the concatenation of `value`.
    fn item(&self, value: &[&[u8]], fields: Fields) -> ItemBox {
        ItemBox::new(self.key, value, fields)
    }
}

/// What a write published.
struct Published {
    cas: u64,
    /// The write's unique: the id of the node it queued, if it queued one.
    unique: u64,
    /// The new item's charge.
    charge: usize,
    /// The key's hash if the item needs a queue node of its own (its key was absent from
    /// the index); `None` if it kept the node of the item it replaced.
    queues_node: Option<u64>,
}

/// A worker thread's handle on the cache.
pub struct Worker {
    cache: Arc<Cache>,
    id: usize,
    /// Records of the current session's writes, written to the journal when it ends.
    journal: Vec<u8>,
}

impl Worker {
    /// The cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Report the bytes this worker's connections hold allocated for input and for output
    /// buffers, and how many hold an input buffer (for `stats`).
    pub fn set_buffer_bytes(&self, input: usize, output: usize, input_buffers: usize) {
        let counters = &self.cache.counters[self.id];
        counters.input_bytes.store(input as u64, Ordering::Relaxed);
        counters
            .output_bytes
            .store(output as u64, Ordering::Relaxed);
        counters
            .input_buffers
            .store(input_buffers as u64, Ordering::Relaxed);
    }

    /// Bump a counter of this worker's (outside a session: the server's byte counts).
    pub fn count(&self, counter: Counter, by: u64) {
        bump(&self.cache.counters[self.id].events[counter as usize], by);
    }

    /// Report the bytes of replies this worker's connections hold unsent (for `stats`).
    pub fn set_pending_output(&self, bytes: usize) {
        self.cache.counters[self.id]
            .pending_output
            .store(bytes as u64, Ordering::Relaxed);
    }

    /// Begin a run of operations at the current server time: pins the index (items read
    /// stay valid until the session ends; keep sessions short, one per batch of requests).
    pub fn session(&mut self) -> Session<'_> {
        let now = self.cache.now();
        let Worker { cache, id, journal } = self;
        Session {
            _cut: cache.store.get().map(Store::hold_cut),
            index: cache.index.pin(),
            cache,
            id: *id,
            now,
            journal: core::cell::RefCell::new(journal),
        }
    }
}

/// Operations at one server time under one pin of the index.
pub struct Session<'w> {
    cache: &'w Cache,
    pub(super) index: Pinned<'w>,
    id: usize,
    now: u32,
    /// The worker's journal buffer (a `RefCell`: `touch` journals through `&self`).
    journal: core::cell::RefCell<&'w mut Vec<u8>>,
    /// A persistent cache's cut between journal generations, held until this session's
    /// records are appended (released after `drop` has appended them: `persist.rs`).
    _cut: Option<std::sync::RwLockReadGuard<'w, ()>>,
}

impl Drop for Session<'_> {
    /// Write the session's records to the worker's journal: before the event loop sends the
    /// replies, so a write a client heard of is in the kernel (`persist.rs`).
    fn drop(&mut self) {
        let journal = self.journal.get_mut();
        if journal.is_empty() {
            return;
        }
        if let Some(store) = self.cache.store.get() {
            store.append(self.id, journal);
        }
        journal.clear();
    }
}

/// A write's decision with its sequence number taken, in a persistent cache: inside the
/// decision, after it read the item it replaces (`persist.rs` argues why that orders the
/// numbers of a key's writes as the index orders the writes).
fn sequenced<R>(cache: &Cache, decision: Decision<R>) -> Decision<R> {
    match (cache.store.get(), decision) {
        (Some(store), Decision::Insert(mut item)) => {
            item.seq = store.next_seq();
            Decision::Insert(item)
        }
        (_, decision) => decision,
    }
}

impl<'w> Session<'w> {
    /// The server time of this session.
    pub fn now(&self) -> u32 {
        self.now
    }

    /// The cache.
    pub fn cache(&self) -> &'w Cache {
        self.cache
    }

    /// Bump a counter of this worker.
    pub fn count(&self, counter: Counter, by: u64) {
        bump(&self.cache.counters[self.id].events[counter as usize], by);
    }

    /// After a write of this session inserted `new` where `key` (hashing to `hash`) was absent:
    /// in a persistent cache, if a removal of a key of its stripe stood for a larger number
    /// than `new`'s meanwhile (`persist.rs`, "An absent key has no version"), journal what the
    /// key holds now again, as a copy under a new number taken in a decision that read it.
    /// `new`'s own number may be older than a set and delete of the key that came between its
    /// decision and its publication. The copy is of whatever item is present, not only of
    /// `new`: another write may have replaced `new` already, and its record, which would
    /// outnumber the delete, is in its own session's buffer until that session ends, while this
    /// one replies first; a crash between would restore the delete under a read that saw `new`.
    /// The copy keeps the CAS unique and the queue node, and is charged what the item was, as a
    /// touch's is; read marks made on the item after the copy was taken are lost, as a touch
    /// loses them. If the key is absent, whatever removed it came later.
    fn inserted(&self, hash: u64, key: &[u8], new: &Item) {
        #[cfg(test)]
        hooks::published_absent();
        let cache = self.cache;
        let Some(store) = cache.store.get() else {
            return;
        };
        if !store.removed_after(hash, new.seq) {
            return;
        }
        let outcome = self.index.compute(key, |present| match present {
            Some(item) => sequenced(
                cache,
                Decision::Insert(item.with_exptime(item.exptime()).taking_over(item)),
            ),
            None => Decision::Abort(()),
        });
        if let Computed::Updated { new: copy, .. } = outcome {
            // The copy is charged what the item was.
            self.journal_item(copy);
        }
    }

    /// Journal the item a write published (a persistent cache only).
    fn journal_item(&self, item: &Item) {
        if self.cache.store.get().is_some() {
            self.cache
                .item_record(item)
                .encode(&mut self.journal.borrow_mut());
        }
    }

    /// Journal a delete with sequence number `seq` (a persistent cache only).
    fn journal_delete(&self, key: &[u8], seq: u64) {
        if self.cache.store.get().is_some() {
            Record {
                key,
                ..Record::new(Kind::Delete, seq)
            }
            .encode(&mut self.journal.borrow_mut());
        }
    }

    /// `flush_all` (see [`Cache::flush_all`]), journaled.
    pub fn flush_all(&self, delay: i64) {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        self.cache.flush_all(delay, self.now);
        if let Some(store) = self.cache.store.get() {
            self.cache
                .flush_record(store.next_seq())
                .encode(&mut self.journal.borrow_mut());
        }
    }

    /// Restore replayed items (`Cache::restore`) in one batch of inserts (each bin prefetched
    /// ahead, DLHT's batches: the index's lines are what a restore waits on); returns how many
    /// were restored. An item is left out if it expired meanwhile or cannot be had within the
    /// memory limit without evicting (`-M`).
    pub(super) fn restore(&mut self, records: &[Record<'_>]) -> usize {
        let mut items = Vec::with_capacity(records.len());
        for record in records {
            if let Some(item) = self.restored_item(record) {
                items.push(item);
            }
        }
        // Each inserted item's queue node.
        let nodes: Vec<Node> = items
            .iter()
            .map(|item| Node {
                hash: self.cache.hash(item.key()),
                id: item.node,
                charge: item.charge() as u32,
            })
            .collect();
        let mut inserted = Vec::with_capacity(nodes.len());
        self.index.insert_new_many(items, |i, stored| {
            if stored {
                inserted.push(i);
            } else {
                // Replay gives each key once; an index that cannot grow refuses it, and so
                // does a slot another restored key with the same hash took (`index.rs`).
                self.cache
                    .used
                    .fetch_sub(nodes[i].charge as usize + node_charge(), Ordering::Relaxed);
            }
        });
        let restored = inserted.len();
        let mut queues = lock(&self.cache.queues[self.id]);
        for i in inserted {
            queues.push(nodes[i]);
        }
        restored
    }

    /// The item a replayed record restores, charged against the memory limit; `None` if it
    /// expired meanwhile or does not fit (`-M`).
    fn restored_item(&mut self, record: &Record<'_>) -> Option<ItemBox> {
        let cache = self.cache;
        let exptime = match record.expires {
            0 => 0,
            unix => {
                let time = unix - cache.process_started;
                if time <= self.now as i64 {
                    return None;
                }
                cache.note_expiry();
                time.min(u32::MAX as i64) as u32
            }
        };
        let (charge, node) = (
            item_charge(record.key.len(), record.data.len()),
            node_charge(),
        );
        if too_large(cache, record.key.len(), record.data.len()) || !self.reserve(charge + node) {
            return None;
        }
        let fields = Fields {
            cas: record.cas,
            seq: record.seq,
            flags: record.flags,
            exptime,
            // Stored before this process began: server time 0, older than any flush's.
            time: (record.stored - cache.process_started).clamp(0, u32::MAX as i64) as u32,
            generation: cache.flush_generation.load(Ordering::Relaxed),
            last_access: self.now,
            node: self.next_cas() as u32,
            binary_key: record.binary_key,
            stale: record.stale,
            token_sent: false,
        };
        Some(ItemBox::new(record.key, &[record.data], fields))
    }

    /// A CAS unique no other write has, larger than every one taken before it (never 0,
    /// which means "no CAS" in requests).
    fn next_cas(&mut self) -> u64 {
        self.cache.next_unique.fetch_add(1, Ordering::Relaxed)
    }

    /// Look up many keys in one batch (bins prefetched, then items, then the first bytes of
    /// the values found: `prefetch_values`); `found[i]` is the valid item of `keys[i]`.
    /// Expired and flushed items are unlinked and answered `None`. Counts `get_hits` /
    /// `get_misses` when `count` is set. Does not mark the items read (the caller does, with
    /// [`Session::mark_read`], once it has used what the marks were).
    pub fn get_many<'s>(&'s self, keys: &[&[u8]], found: &mut Vec<Option<&'s Item>>, count: bool) {
        found.clear();
        found.resize(keys.len(), None);
        self.index.get_many(keys, found);
        let mut hits = 0;
        for (slot, key) in found.iter_mut().zip(keys) {
            *slot = slot.and_then(|item| self.valid(key, item));
            if slot.is_some() {
                hits += 1;
            }
        }
        prefetch_values(found);
        if count {
            self.count(Counter::CmdGet, keys.len() as u64);
            self.count(Counter::GetHits, hits);
            self.count(Counter::GetMisses, keys.len() as u64 - hits);
        }
    }

    /// One key's valid item, without counting or marking it read.
    pub fn peek(&self, key: &[u8]) -> Option<&Item> {
        self.index.get(key).and_then(|item| self.valid(key, item))
    }

    /// A read of `key` missed. If the key was evicted recently, the queues' split was wrong
    /// for this workload: a key evicted unread from small and asked for again says small is
    /// too short (its items leave before their first read), one evicted from main says main
    /// is. Each moves the small queue's share by `SMALL_SHARE_STEP` (see "The split adapts"
    /// in `cache/mod.rs`). A shard busy with an eviction is not waited for: its ghosts
    /// are skipped this time.
    pub fn missed(&self, key: &[u8]) {
        let cache = self.cache;
        let hash = cache.hash(key);
        for shard in cache.queues.iter() {
            let Ok(mut queues) = shard.try_lock() else {
                continue;
            };
            let grow = if queues.ghost.signal(hash) {
                true
            } else if queues.main_ghost.signal(hash) {
                false
            } else {
                continue;
            };
            drop(queues);
            // A compare-exchange loop (`fetch_update`'s, spelled out: nightly renames it).
            let mut share = cache.small_share.load(Ordering::Relaxed);
            loop {
                let moved = if grow {
                    (share + SMALL_SHARE_STEP).min(SMALL_SHARE_MAX)
                } else {
                    share.saturating_sub(SMALL_SHARE_STEP).max(SMALL_SHARE_MIN)
                };
                match cache.small_share.compare_exchange_weak(
                    share,
                    moved,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(seen) => share = seen,
                }
            }
        }
    }

    /// Mark an item read (for eviction and the meta protocol's `h` and `l` flags).
    pub fn mark_read(&self, item: &Item) {
        let freq = item.freq.load(Ordering::Relaxed);
        if freq < 3 {
            item.freq.store(freq + 1, Ordering::Relaxed);
        }
        if item.fetched.load(Ordering::Relaxed) == 0 {
            item.fetched.store(1, Ordering::Relaxed);
        }
        if item.last_access.load(Ordering::Relaxed) != self.now {
            item.last_access.store(self.now, Ordering::Relaxed);
        }
    }

    /// `item` if valid now; otherwise unlinks it and answers `None`.
    pub(super) fn valid<'s>(&'s self, key: &[u8], item: &'s Item) -> Option<&'s Item> {
        match self.cache.validity(item, self.now) {
            Ok(()) => Some(item),
            Err(why) => {
                // Counted by the read that unlinks it: a batch may hold the key twice, and
                // memcached, which unlinks at the first, counts one.
                if unlink(&self.index, self.cache, key, item.cas, self.now) {
                    self.count(why, 1);
                }
                None
            }
        }
    }

    /// Set a valid item's expiry (`touch`, `gat`); the item keeps its value, flags, CAS
    /// unique and read marks. A copy of the item with the new expiry replaces it in one
    /// swap: storing the expiry in place would race with a writer copying the item (an
    /// `append` that read the old expiry and publishes after the store would undo the
    /// touch). The copy keeps the queue node (and CAS unique), and is charged what the item
    /// was (a touch never needs memory, so it never fails for want of it).
    ///
    /// FIXME: the copy takes the win token's state when it is made; a read that takes the
    /// token from the old item between then and the swap leaves the copy's token free, so a
    /// touch racing with a stale item's first read can let a second client win it too
    /// (memcached changes the item in place under its lock). `ms ... I` and an in-place
    /// `incr` copy the same way. Harmless but for one extra recache; closing it would need
    /// the token shared between the copies (an `Arc<AtomicBool>` carried by in-place copies).
    pub fn touch(&self, key: &[u8], exptime: u32) -> Option<&Item> {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        let cache = self.cache;
        let now = self.now;
        let outcome = self.index.compute(key, |present| {
            sequenced(
                cache,
                match present.filter(|item| cache.validity(item, now).is_ok()) {
                    Some(item) => Decision::Insert(item.with_exptime(exptime).taking_over(item)),
                    None => Decision::Abort(()),
                },
            )
        });
        match outcome {
            Computed::Updated { new, .. } => {
                // The copy is charged what the item was.
                self.journal_item(new);
                Some(new)
            }
            _ => None,
        }
    }

    /// What every item this write makes carries: a fresh unique (its CAS unique, unless
    /// `cas` chooses another), the time, the flush generation.
    fn stamp<'k>(&mut self, cas: Option<u64>, key: &'k [u8]) -> Stamp<'k> {
        let unique = self.next_cas();
        Stamp {
            key,
            unique,
            cas: cas.unwrap_or(unique),
            now: self.now,
            generation: self.cache.flush_generation.load(Ordering::Relaxed),
            binary_key: false,
        }
    }

    /// Store `data` under `key`. `compare` is a CAS unique the present item must have
    /// (`cas`, `ms ... C`), if any. The caller checked the key's length.
    pub fn store(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        data: &[u8],
        compare: Option<u64>,
    ) -> Stored {
        self.store_with(
            mode,
            key,
            flags,
            exptime,
            data,
            compare,
            MetaStore::default(),
        )
    }

    /// [`store`](Self::store) with what a meta command adds (see [`MetaStore`]).
    #[allow(clippy::too_many_arguments)]
    pub fn store_with(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        data: &[u8],
        compare: Option<u64>,
        meta: MetaStore,
    ) -> Stored {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        self.count(Counter::CmdSet, 1);
        let charge = item_charge(key.len(), data.len());
        if too_large(self.cache, key.len(), data.len()) {
            self.count(Counter::StoreTooLarge, 1);
            return Stored::TooLarge;
        }
        // The item and the queue node it may get. Appends and prepends grow the value: they
        // reserve the rest below, once the present value's length is known.
        let node = node_charge();
        if !self.reserve(charge + node) {
            self.count(Counter::StoreNoMemory, 1);
            return Stored::OutOfMemory;
        }
        match self.store_computed(mode, key, flags, exptime, data, compare, meta) {
            Ok(published) => {
                let needed = published.charge + published.queues_node.map_or(0, |_| node);
                self.settle(charge + node, needed);
                if let Some(hash) = published.queues_node {
                    self.enqueue(hash, published.unique, published.charge);
                }
                self.count(Counter::TotalItems, 1);
                if compare.is_some() {
                    self.count(Counter::CasHits, 1);
                }
                Stored::Stored(published.cas)
            }
            Err(failure) => {
                self.cache.used.fetch_sub(charge + node, Ordering::Relaxed);
                match failure {
                    Stored::NotFound if compare.is_some() => self.count(Counter::CasMisses, 1),
                    Stored::Exists => self.count(Counter::CasBadval, 1),
                    // An append or prepend that grew past `-I` or found no memory.
                    Stored::TooLarge => self.count(Counter::StoreTooLarge, 1),
                    Stored::OutOfMemory => self.count(Counter::StoreNoMemory, 1),
                    _ => {}
                }
                failure
            }
        }
    }

    /// Every store, as one `compute`: the decision reads the present item, so a CAS check
    /// and the write it guards are one atomic step, and the new item takes over the queue
    /// node of the item it replaces (expired or not).
    #[allow(clippy::too_many_arguments)]
    fn store_computed(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: u32,
        data: &[u8],
        compare: Option<u64>,
        meta: MetaStore,
    ) -> Result<Published, Stored> {
        let cache = self.cache;
        let now = self.now;
        let mut stamp = self.stamp(meta.cas, key);
        stamp.binary_key = meta.binary_key;
        let (cas, unique) = (stamp.cas, stamp.unique);
        // An append or prepend keeps the present item's flags, expiry and key form; like
        // memcached, it refuses to grow the value past `-I` (or the whole memory limit).
        let extend = |present: &Item, before: &[u8], after: &[u8]| {
            if too_large(cache, key.len(), before.len() + after.len()) {
                return Err(Stored::NotStored);
            }
            Ok(stamp.item(
                &[before, after],
                Fields {
                    binary_key: present.binary_key(),
                    ..stamp.fields(present.flags, present.exptime())
                },
            ))
        };
        let outcome = self.index.compute(key, |present| {
            let replaced = present;
            let present = present.filter(|item| cache.validity(item, now).is_ok());
            // As memcached 1.6 (measured): with a CAS unique, set and replace answer "not
            // found" for an absent key and "exists" for another unique (or 0, which matches
            // nothing), or, invalidating, store an older unique as a stale item; append and
            // prepend answer "not stored" and "exists" (and ignore a unique of 0); add ignores
            // the unique.
            let unique_given = compare.filter(|&cas| cas != 0 || mode.replaces_whole());
            let made = match (mode, present) {
                (StoreMode::Add, Some(_)) => Err(Stored::NotStored),
                (StoreMode::Set | StoreMode::Replace, None) if compare.is_some() => {
                    Err(Stored::NotFound)
                }
                (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
                    Err(Stored::NotStored)
                }
                (_, Some(item))
                    if mode != StoreMode::Add
                        && unique_given.is_some_and(|cas| cas == 0 || cas != item.cas) =>
                {
                    let older = unique_given.is_some_and(|cas| cas != 0 && cas < item.cas);
                    if meta.invalidate && older && mode.replaces_whole() {
                        // Stored anyway, stale: the client's value is of an older version
                        // than the item's (memcached keeps the item's expiry and win token).
                        Ok(stamp.item(
                            &[data],
                            Fields {
                                stale: true,
                                token_sent: item.win_token_taken(),
                                ..stamp.fields(flags, item.exptime())
                            },
                        ))
                    } else {
                        Err(Stored::Exists)
                    }
                }
                (StoreMode::Append, Some(item)) => extend(item, item.data(), data),
                (StoreMode::Prepend, Some(item)) => extend(item, data, item.data()),
                _ => Ok(stamp.item(
                    &[data],
                    Fields {
                        token_sent: meta.token_sent,
                        ..stamp.fields(flags, exptime)
                    },
                )),
            };
            let operation = sequenced(
                cache,
                match (made, replaced) {
                    (Ok(item), Some(replaced)) => Decision::Insert(item.taking_over(replaced)),
                    (Ok(item), None) => Decision::Insert(item),
                    (Err(why), _) => Decision::Abort(why),
                },
            );
            #[cfg(test)]
            hooks::decided(replaced, &operation);
            operation
        });
        let (new, queues_node) = self.published(key, outcome)?;
        Ok(Published {
            cas,
            unique,
            charge: new.charge(),
            queues_node,
        })
    }

    /// `incr` / `decr` by `delta` (`decr` stops at 0; `incr` wraps at 2^64). `compare` is a
    /// CAS unique to check, if any; `create` an initial value and expiry for an absent
    /// key (the meta protocol's `N` / `J` flags); `pad` a shorter result with spaces to
    /// the old value's length (see below); `cas` the CAS unique to give the new value
    /// instead of a fresh one (meta `E`).
    #[allow(clippy::too_many_arguments)]
    pub fn delta(
        &mut self,
        key: &[u8],
        incr: bool,
        delta: u64,
        compare: Option<u64>,
        create: Option<(u64, u32)>,
        pad: bool,
        cas: Option<u64>,
    ) -> Delta {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        // The protocols refuse longer keys; one that came another way is never stored.
        if key.len() > crate::protocol::MAX_KEY_LEN {
            return Delta::NotFound;
        }
        // As memcached, a unique of 0 is none.
        let compare = compare.filter(|&cas| cas != 0);
        let (hit, miss) = if incr {
            (Counter::IncrHits, Counter::IncrMisses)
        } else {
            (Counter::DecrHits, Counter::DecrMisses)
        };
        // What a counter item usually takes (20 digits); a longer value rewritten padded
        // settles the rest below.
        let charge = item_charge(key.len(), 24);
        let node = node_charge();
        if !self.reserve(charge + node) {
            return Delta::OutOfMemory;
        }
        let cache = self.cache;
        let now = self.now;
        let stamp = self.stamp(cas, key);
        let (cas, unique) = (stamp.cas, stamp.unique);
        let make = |digits: &[u8], fields: Fields| stamp.item(&[digits], fields);
        let mut value = 0;
        // Set by the decision that applied: an expired or flushed item still in the index
        // counts as absent.
        let mut created = false;
        let mut decide = |present: Option<&Item>| {
            created = false;
            let replaced = present;
            let present = present.filter(|item| cache.validity(item, now).is_ok());
            // The new item takes over the queue node of the item it replaces, if any.
            let insert = |item: ItemBox| match replaced {
                Some(replaced) => Decision::Insert(item.taking_over(replaced)),
                None => Decision::Insert(item),
            };
            match present {
                None => match create {
                    Some((initial, exptime)) if compare.is_none() => {
                        value = initial;
                        created = true;
                        insert(make(
                            initial.to_string().as_bytes(),
                            stamp.fields(0, exptime),
                        ))
                    }
                    _ => Decision::Abort(Delta::NotFound),
                },
                Some(item) if compare.is_some_and(|cas| item.cas != cas) => {
                    Decision::Abort(Delta::Exists)
                }
                Some(item) => {
                    let Some(current) = parse_counter(item.data()) else {
                        return Decision::Abort(Delta::NonNumeric);
                    };
                    value = if incr {
                        current.wrapping_add(delta)
                    } else {
                        current.saturating_sub(delta)
                    };
                    let mut digits = value.to_string().into_bytes();
                    // memcached rewrites a result no longer than the value in place, padded
                    // with spaces to the old length, when no other request holds the item
                    // (otherwise it writes a new item of the digits alone); clients see the
                    // padding, and the item rewritten in place keeps its marks (`mg`'s `h`,
                    // `l`, and the stale mark and win token).
                    let in_place = pad && digits.len() <= item.data().len();
                    if in_place {
                        digits.resize(item.data().len(), b' ');
                    }
                    let new = make(
                        &digits,
                        Fields {
                            binary_key: item.binary_key(),
                            ..stamp.fields(item.flags, item.exptime())
                        },
                    );
                    insert(if in_place {
                        new.with_marks_of(item)
                    } else {
                        new
                    })
                }
            }
        };
        let outcome = self.index.compute(key, |present| {
            let operation = sequenced(cache, decide(present));
            #[cfg(test)]
            hooks::decided(present, &operation);
            operation
        });
        let (new, queues_node) = match self.published(key, outcome) {
            Ok(published) => published,
            Err(why) => {
                self.cache.used.fetch_sub(charge + node, Ordering::Relaxed);
                self.count(if why == Delta::NotFound { miss } else { hit }, 1);
                return why;
            }
        };
        let stored = new.charge();
        // Reserved what a counter usually takes; a long value rewritten padded takes more.
        self.settle(charge + node, stored + queues_node.map_or(0, |_| node));
        if let Some(hash) = queues_node {
            self.enqueue(hash, unique, stored);
        }
        self.count(hit, 1);
        Delta::Value(value, cas, created)
    }

    /// Delete `key` (only if its CAS unique is `compare`, when one is given).
    pub fn delete(&mut self, key: &[u8], compare: Option<u64>) -> Deleted {
        self.remove_key(key, compare, true)
    }

    /// Remove `key`'s item, not counted as a delete: a store refused (too large, out of
    /// memory) drops the value it would have replaced, as memcached does, without counting
    /// a delete as memcached does not.
    pub fn discard(&mut self, key: &[u8]) {
        self.remove_key(key, None, false);
    }

    fn remove_key(&mut self, key: &[u8], compare: Option<u64>, counted: bool) -> Deleted {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        let cache = self.cache;
        let now = self.now;
        let mut mismatch = false;
        // The delete's sequence number, taken when the test accepts (after it read the item
        // it removes, as a write's is: `sequenced`).
        let mut seq = 0;
        let hash = cache.hash(key);
        let removed = self.index.remove_if(hash, key, |item| {
            mismatch =
                compare.is_some_and(|cas| item.cas != cas) && cache.validity(item, now).is_ok();
            if !mismatch {
                seq = cache.store.get().map_or(0, Store::next_seq);
                cache.note_removal(hash, seq);
            }
            !mismatch
        });
        match removed {
            Some(item) => {
                self.journal_delete(key, seq);
                self.cache.used.fetch_sub(item.charge(), Ordering::Relaxed);
                if self.cache.validity(item, now).is_ok() {
                    self.count(Counter::DeleteHits, u64::from(counted));
                    Deleted::Deleted
                } else {
                    self.count(Counter::DeleteMisses, u64::from(counted));
                    Deleted::NotFound
                }
            }
            None if mismatch => Deleted::Exists,
            None => {
                self.count(Counter::DeleteMisses, u64::from(counted));
                Deleted::NotFound
            }
        }
    }

    /// `md` with `I` or `x`: change `key`'s item as `tombstone` says instead of removing it
    /// (only if its CAS unique is `compare`, when one is given). The changed item is a copy
    /// published in one swap, as a touch's is: an invalidated one keeps its value and read
    /// marks, an emptied one is new. Like a touch it never fails for want of memory (an
    /// invalidation takes what the item took, an emptying less).
    pub fn tombstone(&mut self, key: &[u8], compare: Option<u64>, tombstone: Tombstone) -> Deleted {
        // A persistent cache's writes wait for its restore (`Cache::open`).
        self.cache.wait_restored();
        let cache = self.cache;
        let now = self.now;
        let stamp = self.stamp(None, key);
        let mut mismatch = false;
        let outcome = self.index.compute(key, |present| {
            mismatch = false;
            let Some(item) = present.filter(|item| cache.validity(item, now).is_ok()) else {
                return Decision::Abort(());
            };
            if compare.is_some_and(|cas| item.cas != cas) {
                mismatch = true;
                return Decision::Abort(());
            }
            let mut changed = match tombstone.empty {
                // As memcached: an empty item, stored over the old one with its CAS unique.
                Some((flags, exptime)) => stamp.item(
                    &[],
                    Fields {
                        cas: tombstone.cas.unwrap_or(item.cas),
                        ..stamp.fields(flags, exptime)
                    },
                ),
                None => item.with_exptime(item.exptime()),
            };
            if tombstone.stale {
                // Marked stale with its win token put back, for the next read to take.
                changed.set_token_sent(false);
                changed.set_stale(true);
                changed.cas = tombstone.cas.unwrap_or(stamp.unique);
                changed.exptime = tombstone.exptime.unwrap_or(changed.exptime);
            }
            sequenced(cache, Decision::Insert(changed.taking_over(item)))
        });
        match outcome {
            Computed::Updated { old, new } => {
                self.journal_item(new);
                let (old, new) = (old.charge(), new.charge());
                if new >= old {
                    cache.used.fetch_add(new - old, Ordering::Relaxed);
                } else {
                    cache.used.fetch_sub(old - new, Ordering::Relaxed);
                }
                // memcached counts a removed value as a delete, not an invalidation.
                if !tombstone.stale {
                    self.count(Counter::DeleteHits, 1);
                }
                Deleted::Deleted
            }
            _ if mismatch => Deleted::Exists,
            _ => {
                self.count(Counter::DeleteMisses, 1);
                Deleted::NotFound
            }
        }
    }

    /// Settle a write's charge: `reserved` bytes were charged before it, `needed` is what
    /// it took (its item, and its node if it queued one). More than reserved (an append, a
    /// counter rewritten padded) is kept even over the limit when nothing can be evicted,
    /// rather than undo a write already published: the next store evicts.
    fn settle(&self, reserved: usize, needed: usize) {
        if needed > reserved {
            if !self.reserve(needed - reserved) {
                self.cache
                    .used
                    .fetch_add(needed - reserved, Ordering::Relaxed);
            }
        } else {
            self.cache
                .used
                .fetch_sub(reserved - needed, Ordering::Relaxed);
        }
    }

    /// Charge `bytes` against the limit, evicting (or, under `-M`, reclaiming only expired
    /// items) until they fit. `false`: they do not fit; nothing is charged.
    fn reserve(&self, bytes: usize) -> bool {
        let cache = self.cache;
        let limit = cache.memory_limit();
        // Signed: `used` may be below zero for a moment (see `Cache::used`).
        let limit = limit.min(isize::MAX as usize) as isize;
        let before = cache.used.fetch_add(bytes, Ordering::Relaxed) as isize;
        if before.saturating_add(bytes as isize) <= limit {
            return true;
        }
        // Over the limit: free at least what is over, from this worker's queues first.
        let shards = cache.queues.len();
        let mut idle_rounds = 0;
        let mut shard = self.id;
        while cache.charged() > limit {
            let freed = {
                let mut queues = lock(&cache.queues[shard]);
                self.evict_one(&mut queues)
            };
            if freed {
                idle_rounds = 0;
            } else {
                idle_rounds += 1;
                shard = (shard + 1) % shards;
                if idle_rounds > shards {
                    cache.used.fetch_sub(bytes, Ordering::Relaxed);
                    self.count(Counter::OutOfMemory, 1);
                    return false;
                }
            }
        }
        true
    }

    /// One S3-FIFO step on a shard: drop stale nodes and expired items, move read items on,
    /// evict one unread item. `false` when the shard has nothing it may free.
    fn evict_one(&self, queues: &mut Queues) -> bool {
        let cache = self.cache;
        let evict = cache.settings.evict;
        // Under `-M`, live items are passed over (to their queue's tail) so that the stale
        // nodes and expired items behind them are still found, at most this many per call.
        // Known limit: the bound keeps the work of a refused store, and its hold of each
        // shard's lock, small (`MAX_PASSED_OVER` lookups per call, a call or two per shard),
        // so a stale node or an expired item behind more live items than that is reached
        // only after several refused stores have each moved 64 live items to the tail; until
        // then stores answer out of memory although memory could be freed.
        let mut may_pass_over = (queues.small.len() + queues.main.len()).min(MAX_PASSED_OVER);
        loop {
            let total = queues.small.bytes + queues.main.bytes;
            let share = cache.small_share.load(Ordering::Relaxed) as usize;
            let from_small = !queues.small.is_empty()
                && (queues.small.bytes * 1000 >= total * share || queues.main.is_empty());
            let Some(mut node) = queues.fifo(from_small).pop_front() else {
                return false;
            };
            let Some(item) = self.index.find_by_hash(node.hash, |item| node.names(item)) else {
                // Stale: its item was removed (and uncharged) already; the node itself is
                // memory freed.
                self.free_node();
                return true;
            };
            // The read marks of the item looked at (a write that replaced it meanwhile may
            // make the one removed a newer one: the counters below are of the one seen).
            let unfetched = u64::from(!item.was_fetched());
            let idle = self.now.saturating_sub(item.last_access());
            let expires = u64::from(item.exptime != 0);
            if cache.validity(item, self.now).is_err() {
                match self.retire(node, item.key(), false) {
                    Retired::Kept(node) => queues.fifo(from_small).push_back(node),
                    Retired::Reclaimed | Retired::Evicted => {
                        self.count(Counter::Reclaimed, 1);
                        self.count(Counter::ExpiredUnfetched, unfetched);
                    }
                    Retired::Stale => {}
                }
                return true;
            }
            // Queued again below, with the charge of the item that holds it now.
            node.charge = item.charge() as u32;
            if !evict {
                // `-M`: a live item is never evicted.
                queues.fifo(from_small).push_back(node);
                may_pass_over -= 1;
                if may_pass_over == 0 {
                    return false;
                }
                continue;
            }
            let freq = item.freq.load(Ordering::Relaxed);
            if freq > 0 {
                item.freq
                    .store(if from_small { 0 } else { freq - 1 }, Ordering::Relaxed);
                queues.main.push_back(node);
                self.count(
                    if from_small {
                        Counter::MovesToWarm
                    } else {
                        Counter::MovesWithinLru
                    },
                    1,
                );
                continue;
            }
            let hash = node.hash;
            match self.retire(node, item.key(), true) {
                Retired::Evicted => {
                    self.count(Counter::Evictions, 1);
                    self.count(Counter::EvictedUnfetched, unfetched);
                    self.count(Counter::EvictedNonzero, expires);
                    cache.evicted_idle.store(idle, Ordering::Relaxed);
                    if from_small {
                        let capacity = queues.main.len();
                        queues.ghost.insert(hash, capacity);
                    } else {
                        let capacity = queues.small.len();
                        queues.main_ghost.insert(hash, capacity);
                    }
                }
                Retired::Reclaimed => {
                    self.count(Counter::Reclaimed, 1);
                    self.count(Counter::ExpiredUnfetched, unfetched);
                }
                Retired::Kept(node) => queues.fifo(from_small).push_back(node),
                Retired::Stale => {}
            }
            return true;
        }
    }

    /// Remove the item that `node` names under `key` (the key of the item the caller found
    /// the node naming; nodes hold no key), only if it is expired or flushed, unless
    /// `evicting`, and free the node; a node that a valid item still names is handed back.
    /// The item removed may be a newer one than the caller looked at: a write that replaced
    /// it kept its node.
    fn retire(&self, node: Node, key: &[u8], evicting: bool) -> Retired {
        let cache = self.cache;
        let now = self.now;
        let removed = self.index.remove_if(node.hash, key, |item| {
            let remove = node.names(item) && (evicting || cache.validity(item, now).is_err());
            cache.removing_if(node.hash, item, remove)
        });
        let retired = match removed {
            Some(item) => {
                cache.used.fetch_sub(item.charge(), Ordering::Relaxed);
                if cache.validity(item, now).is_ok() {
                    Retired::Evicted
                } else {
                    Retired::Reclaimed
                }
            }
            // Once no item names a node, none can again (only a write that replaces an item
            // naming it hands it on), but for an id 2^32 stores younger of the same key: a
            // policy slip, see `eviction::Node`.
            None if self.index.get(key).is_some_and(|item| node.names(item)) => {
                return Retired::Kept(node)
            }
            None => Retired::Stale,
        };
        self.free_node();
        retired
    }

    /// The bookkeeping of a write `compute` answered: a displaced item uncharged and a new
    /// key noted (an insert keeps the new item's own node id, so it needs a queue node), or
    /// the replaced item's charge returned (the new item took over its node); then the new
    /// item journaled. The item and, if it needs a node, its key's hash; an aborted
    /// decision's reason.
    fn published<'s, R>(
        &self,
        key: &[u8],
        outcome: Computed<'s, R>,
    ) -> Result<(&'s Item, Option<u64>), R> {
        let (new, queues_node) = match outcome {
            Computed::Inserted {
                new,
                displaced,
                hash,
            } => {
                self.displaced(hash, displaced);
                self.inserted(hash, key, new);
                (new, Some(hash))
            }
            Computed::Updated { old, new } => {
                self.cache.used.fetch_sub(old.charge(), Ordering::Relaxed);
                (new, None)
            }
            Computed::Aborted(why) => return Err(why),
        };
        self.journal_item(new);
        Ok((new, queues_node))
    }

    /// Uncharge the item a store displaced from its key's hash `hash` (another key's with
    /// the same hash: `index.rs`, "Two keys with one hash"), as an eviction.
    fn displaced(&self, hash: u64, displaced: Option<&Item>) {
        if let Some(item) = displaced {
            self.cache.note_removal(hash, item.seq);
            self.cache.used.fetch_sub(item.charge(), Ordering::Relaxed);
            self.count(Counter::Evictions, 1);
        }
    }

    /// Uncharge a node leaving its queue.
    fn free_node(&self) {
        self.cache.used.fetch_sub(node_charge(), Ordering::Relaxed);
    }

    /// Queue a newly stored item, its key hashing to `hash`, for eviction: main if its key
    /// was evicted recently. Its node's charge was reserved with the item's.
    fn enqueue(&self, hash: u64, id: u64, charge: usize) {
        lock(&self.cache.queues[self.id]).push(Node {
            hash,
            id: id as u32,
            charge: charge as u32,
        });
    }
}

/// Bytes of each value a batch of gets starts loading before its replies copy them: a
/// multi-get's replies copy every value into the output, and without this each value's first
/// lines missed the caches one after another (the hardware prefetcher follows a value once
/// its copy runs). Multi-gets of 16 x 1 KiB against the build without it, two runs (AMD
/// EPYC): zipf 1.03x and 1.08x, uniform 1.04x and 1.01x; the first line alone gained less
/// (`results/reference/issue44/value-prefetch-2026-12-01/`).
const VALUE_PREFETCH_BYTES: usize = 1024;

/// Start loading the first [`VALUE_PREFETCH_BYTES`] of each found item's value.
fn prefetch_values(found: &[Option<&Item>]) {
    for item in found.iter().flatten() {
        let data = item.data();
        for offset in (0..data.len().min(VALUE_PREFETCH_BYTES)).step_by(64) {
            prefetch_line(data[offset..].as_ptr());
        }
    }
}

impl Cache {
    /// A worker: the per-thread context every operation runs in. `id` picks its eviction
    /// queue and counters: make one worker per id in `0..settings().workers` (the counters
    /// of an id are written by one thread).
    pub fn worker(self: &Arc<Self>, id: usize) -> Worker {
        Worker {
            cache: Arc::clone(self),
            id: id % self.settings.workers,
            journal: Vec::new(),
        }
    }
}

/// Unlink the item a read found invalid at `now` (`key`'s, with CAS unique `cas`) if it is
/// still there and still invalid at `now`; uncharges it. The unique alone does not name that
/// item: a `touch` publishes a copy with the same unique and a new expiry, and one whose
/// session began before the reader's (an earlier `now`) may have found the item valid and
/// answered TOUCHED; that copy stays unless it too is invalid at the reader's time.
fn unlink(index: &Pinned<'_>, cache: &Cache, key: &[u8], cas: u64, now: u32) -> bool {
    let hash = cache.hash(key);
    match index.remove_if(hash, key, |item| {
        cache.removing_if(
            hash,
            item,
            item.cas == cas && cache.validity(item, now).is_err(),
        )
    }) {
        Some(item) => {
            cache.used.fetch_sub(item.charge(), Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// Code a test runs at a chosen instant of a write.
#[cfg(test)]
pub(super) mod hooks {
    use std::cell::Cell;

    thread_local! {
        static DECIDING_ON_ABSENT: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) };
        static PUBLISHED_ABSENT: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) };
    }

    /// Run `decided` once, in the next decision of this thread that inserts into an absent
    /// key: after it took its sequence number, before the index publishes its item; and
    /// `published` once the index has published it, before the write looks at its stripe's
    /// removal clock (`Session::inserted`).
    pub fn on_next_absent_insert(
        decided: impl FnOnce() + 'static,
        published: impl FnOnce() + 'static,
    ) {
        DECIDING_ON_ABSENT.set(Some(Box::new(decided)));
        PUBLISHED_ABSENT.set(Some(Box::new(published)));
    }

    /// A write published the item it inserted into an absent key.
    pub fn published_absent() {
        if let Some(hook) = PUBLISHED_ABSENT.take() {
            hook();
        }
    }

    /// A write's decision answered `operation` on `present`.
    pub fn decided<T>(present: Option<&super::Item>, decision: &super::Decision<T>) {
        if present.is_none() && matches!(decision, super::Decision::Insert(_)) {
            if let Some(hook) = DECIDING_ON_ABSENT.take() {
                hook();
            }
        }
    }
}
