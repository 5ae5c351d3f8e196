//! [`Map`]: the typed facade for any key and value (DLHT's allocator mode, §3.1-§3.4).
//!
//! # Design
//!
//! A key and its value live in one heap [`Entry`] outside the table. The engine (the same
//! driver of either layout as under [`FlatMap`](crate::FlatMap), `raw/driver.rs`) stores,
//! per entry, two words:
//!
//! - **key word** = the key's full 64-bit hash under the map's hasher. A miss costs one bin
//!   line, as in `FlatMap`: the search compares hash words, and only a hash match leads to an
//!   entry. The bin is chosen from the byte-swapped hash word, so a growth places every slot
//!   from its word alone without reading an entry (SEPH's dereference-free rehashing) and
//!   without the user's hasher; the swap puts the hash's low bytes (which every reasonable
//!   hasher mixes) in the bits `fastrange` reads, and gives the engine a dead key for bin 0
//!   (`DeadKeys::find`).
//! - **value word** = a pointer: to the [`Entry`] (low bit clear), or, for the rare keys
//!   whose 64-bit hashes are equal, to a [`Collided`] list of entries (low bit set).
//!
//! The engine keeps one slot per key word, so "one slot per hash": keys whose hashes collide
//! share the slot through a `Collided` list, which is never changed in place: adding or
//! removing one of its keys swaps the slot's value word for a new list with the engine's
//! 16-byte compare-and-swap. Every hash match is confirmed with the key's `Eq`.
//!
//! ## Every write is one swap of a value word
//!
//! - insert, absent hash: the engine's insert stores `(hash, entry)`; present hash, absent
//!   key: CAS the value word from what was read to a list holding one more entry.
//! - upsert / update of a present key: CAS the value word to a new entry (or a new list with
//!   the entry replaced); the old entry is retired.
//! - remove: the engine's `remove_if` retires the slot only if its value word is still the
//!   one read (so a concurrent insert of a colliding key is never removed with it); for a
//!   list of several, CAS to the list without the key.
//!
//! A CAS that fails means the value word changed since it was read: start over. Each write is
//! linearized at its engine operation (the store of an insert, the successful CAS, the
//! retire of a remove), a get at the engine's load of the value word; the entries and lists
//! behind a word never change once published, so what a get follows is the state at that
//! load.
//!
//! ## Memory
//!
//! An entry or list leaves the table only by a successful swap or remove, and the thread that
//! did it is the only one that retires it, once. Retirement goes through the map's `seize`
//! collector (`Guard::defer_retire`): it is freed after every thread that could have read the
//! word has left its guard. Every operation holds a guard ([`Map::pin`] holds one for as long
//! as the handle lives), and a reference a get returns is tied to it. A pointer read from the
//! table is protected as `seize` requires because it is read inside the guard, after the
//! guard's entry: the engine's searches load slots after an `Acquire` header load and fence
//! `Acquire` after them (and on x86 every load is ordered after the guard's store by the
//! collector's barrier). The pointer's target is initialized before it is published: the
//! engine's slot store is `Release` and its CAS `AcqRel`, and a search fences `Acquire`.
//!
//! ABA on a value word is harmless: a word read under a guard names an allocation that is
//! not freed (so not reused) before the guard ends, and every CAS expecting it runs under the
//! same guard. The same word can come back without a new allocation (a list shrinks back to
//! the one entry `E` it grew from), but a word determines everything behind it, so a CAS that
//! succeeds on it replaces exactly the contents its caller read.
//!
//! ## Shadow inserts
//!
//! A shadow (DLHT §3.2.2; [`MapRef::insert_shadow`]) is an entry in the table that is not
//! present: a value word holding only it is tagged `SHADOW` (bit 1; entries are aligned to
//! 8), and a `Collided` list keeps its present entries first and its shadows after them. The
//! engine sees an ordinary slot, so growth moves shadows with their word as it moves
//! everything else, without reading an entry. Gets, puts, updates, removes, iteration and
//! snapshots search the present entries only; inserts also search the shadows and answer
//! `Shadowed` for the key, and an upsert or a `compute` that would insert waits for the
//! resolution. A shadow is made, committed and aborted as every write is, by one swap of the
//! value word (an engine insert for an absent hash, a removal for the abort of a word's only
//! entry), so each is linearized at that swap and races with other writes on the same hash
//! only as they race with each other: the loser reads the word again. Only the `MapShadow`
//! handle takes its entry out of the shadows (a resolution finds it by address, which its
//! guard keeps from reuse), so a shadow is resolved once; `clear` keeps words that hold
//! shadows (the engine's clear skips them, and the present entries beside them are taken
//! out afterwards with one swap per word), as `FlatMap`'s clear does not see its shadows.

use core::{
    borrow::Borrow,
    fmt,
    hash::{BuildHasher, Hash},
    marker::PhantomData,
};

use seize::{Collector, Guard, LocalGuard, OwnedGuard};
use smallvec::{smallvec, SmallVec};

use crate::{
    batch::Prefetch,
    error::{Error, OrRaise},
    hash::DefaultHashBuilder,
    map::{Builder, ForMap, Insert, Taken},
    raw::{
        driver::{Driver, TableDriver},
        ring, Inserted, Mismatch,
    },
    sync::stat::{AtomicIsize, Ordering},
};

/// A chunk of `get_many`'s keys as the engine's batch loop locates them (`ring::Locate`):
/// their hashing compiled into the loop rather than behind a closure the compiler may leave
/// out of line.
struct HashedKeys<'a, S, T, F, Q: ?Sized> {
    hasher: &'a S,
    keys: &'a [T],
    key: F,
    borrowed: PhantomData<fn(&T) -> &Q>,
}

impl<S, T, F, Q> ring::Locate for HashedKeys<'_, S, T, F, Q>
where
    S: BuildHasher,
    F: Fn(&T) -> &Q,
    Q: Hash + ?Sized,
{
    #[inline(always)]
    fn locate(&self, i: usize) -> (u64, u64) {
        locate_with(self.hasher, (self.key)(&self.keys[i]))
    }
}

/// A key's (bin hash, hash word) under `hasher`: the engine finds its bin by the first and
/// compares the second.
#[inline(always)]
fn locate_with<S: BuildHasher, Q: Hash + ?Sized>(hasher: &S, key: &Q) -> (u64, u64) {
    let word = hasher.hash_one(key);
    (bin_hash(word), word)
}

/// One key and its value, at a stable address. Aligned to 8 so that its address never has
/// the low bits a value word uses as tags (`COLLIDED`, `SHADOW`; an `Entry<u8, ()>` would
/// otherwise have alignment 1, and an `Entry<(), ()>` no allocation at all, at address 1).
#[repr(align(8))]
struct Entry<K, V> {
    key: K,
    value: V,
}

/// Entries whose keys have the same 64-bit hash (distinct keys, two or more, visible ones
/// first, then open shadow inserts). Aligned as `Entry`, for the same tag bits.
#[repr(align(8))]
struct Collided<K, V> {
    entries: Box<[*mut Entry<K, V>]>,
    /// `entries[..visible]` are present; the rest are open shadow inserts.
    visible: usize,
}

/// The tag of a value word that points to a [`Collided`] list.
const COLLIDED: u64 = 1;

/// The tag of a value word that points to one entry that is an open shadow insert.
const SHADOW: u64 = 2;

/// A value word decoded. Raw pointers, not references: the thread that takes an entry out of
/// the table frees it through the pointer the word held (a pointer derived from a shared
/// reference could not be freed).
enum Target<K, V> {
    One(*mut Entry<K, V>),
    Shadow(*mut Entry<K, V>),
    Many(*mut Collided<K, V>),
}

/// The pointer a value word holds (its provenance was exposed when the word was made).
fn pointer<T>(word: u64) -> *mut T {
    core::ptr::with_exposed_provenance_mut((word & !(COLLIDED | SHADOW)) as usize)
}

/// The word of a pointer, exposing its provenance for [`pointer`].
fn word<T>(pointer: *mut T) -> u64 {
    pointer.expose_provenance() as u64
}

/// Decode a value word.
fn target<K, V>(word: u64) -> Target<K, V> {
    if word & COLLIDED != 0 {
        Target::Many(pointer(word))
    } else if word & SHADOW != 0 {
        Target::Shadow(pointer(word))
    } else {
        Target::One(pointer(word))
    }
}

/// The entries of a value word: the present ones and the open shadow inserts.
struct Members<K, V> {
    visible: Entries<K, V>,
    shadows: Entries<K, V>,
}

/// Entries of one value word, on the stack for the common word of one or two entries: every
/// write that replaces or removes a key builds its word's members, and a heap vector there was
/// a `malloc` and a `free` per write.
type Entries<K, V> = SmallVec<[*mut Entry<K, V>; 2]>;

impl<K, V> Members<K, V> {
    /// Every entry, shadows included.
    fn len(&self) -> usize {
        self.visible.len() + self.shadows.len()
    }
}

/// A reference to an entry read from the table.
///
/// # Safety
/// The entry was reachable from the table while the caller's guard was held, and `'g` does
/// not outlive that guard: entries are retired through the collector only after they left
/// the table, so it is alive until then.
unsafe fn entry<'g, K, V>(entry: *mut Entry<K, V>) -> &'g Entry<K, V> {
    // SAFETY: caller.
    unsafe { &*entry }
}

impl<K, V> Target<K, V> {
    /// The entry of `key`, if this word holds it.
    ///
    /// # Safety
    /// As [`entry`], for the word decoded.
    unsafe fn find<Q>(&self, key: &Q) -> Option<*mut Entry<K, V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // SAFETY: caller.
        unsafe { self.find_by(|k| k.borrow() == key) }
    }

    /// The entry whose key satisfies `is`, if this word holds one (`is` picks out one key).
    ///
    /// # Safety
    /// As [`entry`], for the word decoded.
    unsafe fn find_by(&self, is: impl Fn(&K) -> bool) -> Option<*mut Entry<K, V>> {
        // SAFETY: caller.
        unsafe { self.find_entry_by(|k, _| is(k)) }
    }

    /// The present entry whose key and value satisfy `is`, if this word holds one.
    ///
    /// # Safety
    /// As [`entry`], for the word decoded.
    unsafe fn find_entry_by(&self, is: impl Fn(&K, &V) -> bool) -> Option<*mut Entry<K, V>> {
        match *self {
            // SAFETY: caller.
            Target::One(one) => unsafe { find_entry_in(&[one], is) },
            Target::Shadow(_) => None,
            // SAFETY: caller.
            Target::Many(list) => unsafe { find_entry_in(Self::visible_of(list), is) },
        }
    }

    /// The open shadow insert whose key satisfies `is`, if this word holds one.
    ///
    /// # Safety
    /// As [`entry`], for the word decoded.
    unsafe fn find_shadow_by(&self, is: impl Fn(&K) -> bool) -> Option<*mut Entry<K, V>> {
        match *self {
            Target::One(_) => None,
            // SAFETY: caller.
            Target::Shadow(one) => unsafe { find_in(&[one], is) },
            // SAFETY: caller; a published list lives as long as it is reachable.
            Target::Many(list) => unsafe {
                let list = &*list;
                find_in(&list.entries[list.visible..], is)
            },
        }
    }

    /// The present entries of a list.
    ///
    /// # Safety
    /// As [`entry`], for the list's word.
    unsafe fn visible_of<'g>(list: *mut Collided<K, V>) -> &'g [*mut Entry<K, V>] {
        // The list's line (`line-stats`).
        crate::raw::stats::line_read();
        // SAFETY: caller; a published list lives as long as it is reachable.
        let list = unsafe { &*list };
        &list.entries[..list.visible]
    }

    /// The present entries this word holds.
    ///
    /// # Safety
    /// As [`entry`], for the word decoded.
    unsafe fn entries(&self) -> Entries<K, V> {
        match *self {
            Target::One(one) => smallvec![one],
            Target::Shadow(_) => SmallVec::new(),
            // SAFETY: caller.
            Target::Many(list) => unsafe { SmallVec::from_slice(Self::visible_of(list)) },
        }
    }

    /// Every entry this word holds: the present ones and, separately, the open shadows.
    ///
    /// # Safety
    /// As [`entry`], for the word decoded.
    unsafe fn members(&self) -> Members<K, V> {
        match *self {
            Target::One(one) => Members {
                visible: smallvec![one],
                shadows: SmallVec::new(),
            },
            Target::Shadow(one) => Members {
                visible: SmallVec::new(),
                shadows: smallvec![one],
            },
            // SAFETY: caller; a published list lives as long as it is reachable.
            Target::Many(list) => unsafe {
                let list = &*list;
                Members {
                    visible: SmallVec::from_slice(&list.entries[..list.visible]),
                    shadows: SmallVec::from_slice(&list.entries[list.visible..]),
                }
            },
        }
    }
}

/// The entry among `entries` whose key satisfies `is`. Under `line-stats`, each entry whose
/// key is compared counts one line (what a key keeps behind a pointer, a `String`'s bytes,
/// is not the map's to see, and not counted).
///
/// # Safety
/// As [`entry`], for each of `entries`.
unsafe fn find_in<K, V>(
    entries: &[*mut Entry<K, V>],
    is: impl Fn(&K) -> bool,
) -> Option<*mut Entry<K, V>> {
    // SAFETY: caller.
    unsafe { find_entry_in(entries, |k, _| is(k)) }
}

/// The entry among `entries` whose key and value satisfy `is`, each entry looked at counted
/// as [`find_in`] says.
///
/// # Safety
/// As [`entry`], for each of `entries`.
unsafe fn find_entry_in<K, V>(
    entries: &[*mut Entry<K, V>],
    is: impl Fn(&K, &V) -> bool,
) -> Option<*mut Entry<K, V>> {
    entries.iter().copied().find(|&one| {
        crate::raw::stats::line_read();
        // SAFETY: caller.
        let one = unsafe { entry(one) };
        is(&one.key, &one.value)
    })
}

/// What [`MapRef::remove_by_hash_if`] did with the entry it found.
#[cfg_attr(floe_loom, allow(dead_code))]
pub(crate) enum ByHash<'g, K, V> {
    /// `decide` said so, and this call removed it: the key as stored and the value removed.
    Removed(&'g K, &'g V),
    /// `decide` said no: the entry stays (its value).
    Kept(&'g V),
    /// No entry of that hash satisfies `is`.
    Absent,
}

/// What `MapRef::find_present` found: the value word, the key's entry, all the word's entries.
type Present<K, V> = (u64, *mut Entry<K, V>, Members<K, V>);

/// A new value word for `members` (one or more): the entry itself (tagged if a shadow), or a
/// new list.
fn word_of<K, V>(members: Members<K, V>) -> u64 {
    debug_assert!(members.len() > 0);
    match (&members.visible[..], &members.shadows[..]) {
        (&[one], []) => word(one),
        ([], &[one]) => word(one) | SHADOW,
        _ => {
            let visible = members.visible.len();
            let mut entries = members.visible;
            entries.extend(members.shadows);
            let list = Box::into_raw(Box::new(Collided {
                entries: entries.into_vec().into_boxed_slice(),
                visible,
            }));
            word(list) | COLLIDED
        }
    }
}

/// The value word of one entry.
fn word_of_entry<K, V>(entry: *mut Entry<K, V>) -> u64 {
    word(entry)
}

/// An entry not yet in the table: freed (its key and value dropped) when this is dropped,
/// on an error, a present key or a panic in the user's `Eq`, unless it was published.
struct Unpublished<K, V>(*mut Entry<K, V>);

impl<K, V> Unpublished<K, V> {
    fn new(key: K, value: V) -> Self {
        Self(Box::into_raw(Box::new(Entry { key, value })))
    }

    fn pointer(&self) -> *mut Entry<K, V> {
        self.0
    }

    /// The entry's value word.
    fn word(&self) -> u64 {
        word_of_entry(self.0)
    }

    /// The entry is in the table now: the table owns it. Returns it.
    fn published(self) -> *mut Entry<K, V> {
        let entry = self.0;
        core::mem::forget(self);
        entry
    }

    /// Free the entry, handing its key and value back.
    fn into_parts(self) -> (K, V) {
        // SAFETY: from `Box::into_raw` in `new`, never stored in the table; `forget` makes
        // sure `Drop` does not free it again.
        let entry = unsafe { Box::from_raw(self.0) };
        core::mem::forget(self);
        (entry.key, entry.value)
    }
}

impl<K, V> Drop for Unpublished<K, V> {
    fn drop(&mut self) {
        // SAFETY: from `Box::into_raw` in `new`, never stored in the table (else `published`
        // would have forgotten `self`).
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// Put `new` where `old` is in `entries`.
fn replace<K, V>(entries: &mut [*mut Entry<K, V>], old: *mut Entry<K, V>, new: *mut Entry<K, V>) {
    let at = entries
        .iter()
        .position(|&e| e == old)
        .expect("the entry was found in these entries");
    entries[at] = new;
}

/// Free a list that was never published (its entries are not its own).
///
/// # Safety
/// `word` came from `word_of` and was never stored in the table.
unsafe fn discard_unpublished<K, V>(word: u64) {
    if word & COLLIDED != 0 {
        // SAFETY: from `Box::into_raw` in `word_of`; nobody else saw it (caller).
        drop(unsafe { Box::from_raw(pointer::<Collided<K, V>>(word)) });
    }
}

/// Start loading the first line of the entry (or list) a value word points to. A prefetch
/// never faults, so the word may be stale.
#[inline(always)]
fn prefetch_target(value_word: u64) {
    crate::raw::prefetch_line(pointer::<u8>(value_word).cast_const());
}

/// Back off while an open shadow insert holds a key an operation must wait for (its owner
/// may hold it for a whole transaction: give the core away).
fn wait_for_shadow() {
    #[cfg(not(floe_loom))]
    std::thread::yield_now();
    #[cfg(floe_loom)]
    crate::sync::spin();
}

/// Reclaimers for `seize`.
mod reclaim {
    use super::{Collided, Entry};

    /// # Safety
    /// `entry` came from `Box::into_raw` and nobody can reach it any more.
    pub(super) unsafe fn entry<K, V>(entry: *mut Entry<K, V>, _: &seize::Collector) {
        // SAFETY: caller.
        drop(unsafe { Box::from_raw(entry) });
    }

    /// A list without its entries (they are retired on their own, or still in use).
    ///
    /// # Safety
    /// As [`entry`].
    pub(super) unsafe fn list<K, V>(list: *mut Collided<K, V>, _: &seize::Collector) {
        // SAFETY: caller.
        drop(unsafe { Box::from_raw(list) });
    }
}

/// Retire the list a replaced value word pointed to, if it was one (not its entries).
///
/// # Safety
/// `word` was just swapped out of the table by the caller (so only the caller retires it).
unsafe fn retire_list<K, V>(guard: &impl Guard, word: u64) {
    if word & COLLIDED != 0 {
        // SAFETY: unreachable for threads that enter from now on (caller); freed by
        // `reclaim::list` once the threads that could have read it have left.
        unsafe { guard.defer_retire(pointer::<Collided<K, V>>(word), reclaim::list::<K, V>) };
    }
}

/// How many hits ahead [`MapRef::get_many`] prefetches entries, in its second pass over a
/// chunk (the first runs the engine's lookahead ring over the bins).
const ENTRY_DEPTH: usize = 16;

/// Keys run through the engine's lookahead ring at a time by [`MapRef::get_many`] (each
/// chunk refills the ring: 64 of 1024 steps).
const BATCH_CHUNK: usize = 1024;

/// Batches of at most this many keys keep `get_many`'s found words on the stack.
const SHORT_BATCH: usize = 32;

/// What a [`MapRef::compute`] decision asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation<V, T> {
    /// Store this value: insert the key if absent, replace its value if present.
    Insert(V),
    /// Remove the key (if absent, nothing changes and the answer is [`Compute::Absent`]).
    Remove,
    /// Change nothing; [`MapRef::compute`] returns [`Compute::Aborted`] with this.
    Abort(T),
}

/// What [`MapRef::compute`] did. References live as long as the handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compute<'g, V, T> {
    /// The key was absent and now has this value.
    Inserted(&'g V),
    /// The key's value `old` was replaced by `new`.
    Updated {
        /// The value replaced.
        old: &'g V,
        /// The value stored.
        new: &'g V,
    },
    /// The key was removed; this was its value.
    Removed(&'g V),
    /// [`Operation::Remove`] of an absent key: nothing changed.
    Absent,
    /// The decision aborted with this; nothing changed.
    Aborted(T),
}

/// A concurrent hash map for any key and value: entries out of line, one bin line per miss.
///
/// `K: Hash + Eq`, any `V`. All operations take `&self`; reads hand out references tied to a
/// guard, so they go through a pinned handle ([`Map::pin`]), as in papaya. The table, growth,
/// batches of bins and the lock-free protocols are `FlatMap`'s engine; see the module docs
/// of `any_map.rs` for what the slots hold and why it is linearizable.
///
/// Entries come from the global allocator (the table itself is floe's, on huge pages where
/// the system gives them). On a table far larger than the caches a hit reads the entry's line
/// too, and in 4 KiB pages that read may also walk the page table: an allocator that backs
/// the heap with huge pages (glibc's `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, which covers
/// the main arena; jemalloc's or mimalloc's options) made batched gets 1.14x faster in two
/// rounds of three on an Intel Xeon at 8M entries, one thread (`BENCHMARKS.md`, "floe::Map").
///
/// ```
/// use floe::{Insert, Map};
///
/// let map = Map::<String, Vec<u8>>::with_capacity(16);
/// let m = map.pin();
/// assert_eq!(m.insert("a".to_string(), vec![1]), None);
/// assert_eq!(m.insert("a".to_string(), vec![2]), Some(&vec![1])); // replaced, as std's
/// assert_eq!(m.get("a"), Some(&vec![2]));          // `Borrow` lookups: &str for String
/// assert_eq!(m.insert_new("a".to_string(), vec![3]), Insert::Present(&vec![2])); // kept
/// assert_eq!(m.remove("a"), Some(&vec![2]));
/// assert!(m.get("a").is_none());
/// ```
pub struct Map<K, V, S = DefaultHashBuilder> {
    raw: Driver,
    hasher: S,
    /// Entries and lists waiting for readers (module docs, "Memory").
    collector: Collector,
    /// Keys beyond the first in `Collided` lists (the engine counts slots). Signed: a remove
    /// from a list may count before the insert that grew the list has.
    collided_keys: AtomicIsize,
    /// Open shadow inserts (entries in the table that are not present). Signed as
    /// `collided_keys`.
    open_shadows: AtomicIsize,
    /// The map owns its keys and values (drop check); `Send`/`Sync` are implemented below.
    marker: PhantomData<(K, V)>,
}

// SAFETY: the map owns its keys and values; moving it moves them (`K: Send`, `V: Send`).
unsafe impl<K: Send, V: Send, S: Send> Send for Map<K, V, S> {}
// SAFETY: a shared map lets any thread insert keys and values that another drops (`Send`) and
// hands out `&K`/`&V` to every thread (`Sync`).
unsafe impl<K: Send + Sync, V: Send + Sync, S: Sync> Sync for Map<K, V, S> {}

/// An empty map with `S::default()` as its hasher (see [`Map::new`]).
impl<K: Hash + Eq, V, S: BuildHasher + Default> Default for Map<K, V, S> {
    #[track_caller]
    fn default() -> Self {
        Map::<K, V>::builder()
            .hasher(S::default())
            .build()
            .or_raise()
    }
}

impl<K: Hash + Eq, V> Map<K, V> {
    /// An empty map with the default hasher and the best backend, sized for the builder's
    /// default of 1024 keys; it grows on demand.
    ///
    /// # Panics
    /// If the operating system refuses the first table's memory (64 KiB), as std's collections
    /// do; [`try_with_capacity`](Self::try_with_capacity) returns the error instead.
    #[track_caller]
    pub fn new() -> Self {
        Self::builder().build().or_raise()
    }

    /// A map sized for `keys` keys, with the default hasher and the best backend.
    ///
    /// # Panics
    /// If `keys` cannot be addressed or its table's memory cannot be had, as std's collections
    /// do; [`try_with_capacity`](Self::try_with_capacity) returns the error instead.
    #[track_caller]
    pub fn with_capacity(keys: usize) -> Self {
        Self::try_with_capacity(keys).or_raise()
    }

    /// A map sized for `keys` keys, or the reason it cannot be had.
    ///
    /// # Errors
    /// As [`Builder::build`](crate::Builder::build).
    pub fn try_with_capacity(keys: usize) -> Result<Self, Error> {
        Self::builder().capacity(keys).build()
    }

    /// A [`Builder`] with the defaults (the same options as `FlatMap`'s).
    pub fn builder() -> Builder<K, V, DefaultHashBuilder, ForMap> {
        Builder::new()
    }
}

#[cfg(all(feature = "serde", unix, not(floe_loom)))]
impl<K, V, S> Builder<K, V, S, ForMap> {
    /// The same settings for a map whose values are `V2` (a facade storing its own wrapper).
    pub(crate) fn with_value<V2>(self) -> Builder<K, V2, S, ForMap> {
        Builder::from_parts(self.config, self.hasher)
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> Builder<K, V, S, ForMap> {
    /// Allocate a [`Map`].
    ///
    /// ```
    /// let map = floe::Map::<String, u64>::builder().capacity(1000).build()?;
    /// assert!(map.capacity() >= 1000);
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// As for a `FlatMap` ([`Builder::build`](crate::Builder::build)), except that no hasher is
    /// degenerate for it: the engine places slots by hash word alone.
    pub fn build(self) -> Result<Map<K, V, S>, Error> {
        Ok(Map {
            raw: Driver::new(&self.config, &bin_hash)?,
            hasher: self.hasher,
            collector: match self.config.reclaim_batch {
                0 => Collector::new(),
                batch => Collector::new().batch_size(batch),
            },
            collided_keys: AtomicIsize::new(0),
            open_shadows: AtomicIsize::new(0),
            marker: PhantomData,
        })
    }
}

/// Where the engine places a hash word (module docs).
#[inline(always)]
fn bin_hash(word: u64) -> u64 {
    word.swap_bytes()
}

impl<K, V, S> Map<K, V, S> {
    /// A handle for operations, holding the guard their references are tied to. Keep it for a
    /// burst of operations, not for long: entries removed meanwhile (by any thread) are freed
    /// only after it is dropped.
    pub fn pin(&self) -> MapRef<'_, K, V, S> {
        MapRef {
            map: self,
            guard: self.collector.enter(),
        }
    }

    /// A handle as [`pin`](Self::pin) makes, that may move between threads: `Send` and `Sync`
    /// (when the map is `Sync`), so it can be held across an `.await` in a task a
    /// multi-threaded executor moves, or shared by threads. Its guard is seize's owned guard,
    /// which costs more to enter and to leave than `pin`'s thread-local one: make one per task
    /// or per burst, not per operation. Everything a [`MapRef`] does, this does.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let map = Arc::new(floe::Map::<String, u32>::new());
    /// map.pin().insert("a".to_string(), 1);
    /// let worker = {
    ///     let map = Arc::clone(&map);
    ///     std::thread::spawn(move || {
    ///         let m = map.pin_owned();
    ///         let a = m.get("a").copied(); // a reference could be held across an .await here
    ///         a
    ///     })
    /// };
    /// assert_eq!(worker.join().unwrap(), Some(1));
    /// ```
    pub fn pin_owned(&self) -> OwnedMapRef<'_, K, V, S> {
        MapRef {
            map: self,
            guard: self.collector.enter_owned(),
        }
    }

    /// The table layout the map was built with ([`Builder::layout`](crate::Builder::layout)).
    ///
    /// ```
    /// let map = floe::Map::<String, u64>::new();
    /// assert_eq!(map.layout(), floe::Layout::Bins);
    /// ```
    pub fn layout(&self) -> crate::Layout {
        self.raw.layout()
    }

    /// Number of keys. Exact when no insert or remove runs at the same time.
    pub fn len(&self) -> usize {
        self.with_collided(self.raw.len())
    }

    /// The present keys, given the engine's `slots`: plus the entries beyond the first in
    /// collision lists, minus the open shadow inserts.
    fn with_collided(&self, slots: usize) -> usize {
        let collided = self.collided_keys.load(Ordering::Relaxed);
        let shadows = self.open_shadows.load(Ordering::Relaxed);
        slots
            .saturating_add_signed(collided)
            .saturating_add_signed(shadows.saturating_neg())
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys the map holds before its table grows, as std's `HashMap::capacity` (see
    /// `FlatMap::capacity`).
    pub fn capacity(&self) -> usize {
        self.raw.capacity()
    }

    /// Statistics about the table's memory and geometry (the entries themselves, allocated
    /// one by one, are not counted).
    ///
    /// ```
    /// let map = floe::Map::<String, u64>::with_capacity(1000);
    /// let stats = map.stats();
    /// assert!(!stats.migrating);
    /// assert!(stats.bins * 64 <= stats.allocated_bytes);
    /// ```
    pub fn stats(&self) -> crate::Stats {
        self.raw.stats()
    }

    /// The hasher.
    pub fn hasher(&self) -> &S {
        &self.hasher
    }

    /// Remove every key (each at one instant, as by a remove; see `FlatMap::clear` for what
    /// concurrent callers see). Entries are freed once no reader can hold them. Open shadow
    /// inserts stay (as in `FlatMap`: only their handles resolve them).
    pub fn clear(&self) {
        let handle = self.pin();
        // Hash words of the words kept for their shadows that also held present keys: their
        // present entries are taken out below, with one swap per word. Rare: a shadow and a
        // present key with one 64-bit hash.
        let beside_shadows = core::cell::RefCell::new(Vec::new());
        let keep = |key: u64, value: u64| {
            // SAFETY: read from the table under `handle`'s guard.
            let shadowed = unsafe { shadow_state::<K, V>(value) };
            if shadowed == Some(true) {
                beside_shadows.borrow_mut().push(key);
            }
            shadowed.is_some()
        };
        self.raw.clear(&bin_hash, &keep, |value| {
            // SAFETY: the clear's remove took `value` out of the table.
            unsafe { self.retire_word(&handle.guard, value) };
        });
        let mut words = beside_shadows.into_inner();
        // A word is offered again when the engine retries a removal: take it out once.
        words.sort_unstable();
        words.dedup();
        for word in words {
            handle.take_present(word);
        }
    }

    /// Retire everything a value word that left the table holds: its entries and its list.
    ///
    /// # Safety
    /// The caller's engine operation took `word` out of the table.
    unsafe fn retire_word(&self, guard: &impl Guard, word: u64) {
        // SAFETY: read under `guard`, which the caller holds.
        let members = unsafe { target::<K, V>(word).members() };
        debug_assert!(members.shadows.is_empty(), "clear keeps words with shadows");
        let entries = members.visible;
        if entries.len() > 1 {
            // A list holds at most as many entries as keys exist, far below `isize::MAX`.
            let extra = isize::try_from(entries.len() - 1).unwrap_or(isize::MAX);
            self.collided_keys.fetch_sub(extra, Ordering::Relaxed);
        }
        for entry in entries {
            // SAFETY: the entries of a word that left the table are unreachable for threads
            // that enter from now on, and retired only here (by the thread that removed them).
            unsafe { guard.defer_retire(entry, reclaim::entry::<K, V>) };
        }
        // SAFETY: as above.
        unsafe { retire_list::<K, V>(guard, word) };
    }

    /// Make room for `additional` more keys than the map holds now (see `FlatMap::reserve`;
    /// keys whose hashes collide take less room than that).
    ///
    /// # Errors
    /// As `FlatMap::reserve`: [`Error::CapacityOverflow`] if the size cannot be addressed or
    /// exceeds [`Builder::max_bins`], [`Error::AllocationFailed`] if the table does not fit
    /// in the memory available now. The map is unchanged.
    pub fn reserve(&self, additional: usize) -> Result<(), Error> {
        self.raw.reserve(additional, &bin_hash)
    }

    /// Shrink the table if it is much larger than its keys need (see `FlatMap::shrink_to_fit`);
    /// whether it shrank.
    ///
    /// # Errors
    /// [`Error::AllocationFailed`] if the smaller table cannot be had; the map is unchanged.
    pub fn shrink_to_fit(&self) -> Result<bool, Error> {
        self.raw.shrink_to_fit(&bin_hash)
    }
}

impl<K: Hash + Eq, V: Clone, S: BuildHasher> Map<K, V, S> {
    /// A clone of the value of `key`, if present.
    pub fn get_cloned<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.pin().get(key).cloned()
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> Map<K, V, S> {
    /// Check the engine's invariants and the words' (counts, no key twice, a key never both
    /// present and shadowed) on a quiescent map and return the number of keys (for tests).
    #[doc(hidden)]
    pub fn check_invariants(&self) -> usize {
        let slots = self.raw.check_invariants(&bin_hash);
        let _guard = self.collector.enter();
        let (mut entries, mut shadows) = (0usize, 0usize);
        self.raw.for_each(&bin_hash, |_, value| {
            // SAFETY: read from the table under `_guard`.
            let members = unsafe { target::<K, V>(value).members() };
            assert!(
                members.len() > usize::from(value & COLLIDED != 0),
                "a list of fewer than two entries, or a word of none"
            );
            // No key twice in one word, present or shadowed (a key is never both).
            let all: Vec<*mut Entry<K, V>> = members
                .visible
                .iter()
                .chain(&members.shadows)
                .copied()
                .collect();
            for (n, &one) in all.iter().enumerate() {
                for &other in &all[n + 1..] {
                    // SAFETY: as above.
                    let (a, b) = unsafe { (&entry(one).key, &entry(other).key) };
                    assert!(
                        a != b,
                        "a key twice in one value word (present or shadowed)"
                    );
                }
            }
            entries += members.len();
            shadows += members.shadows.len();
        });
        assert_eq!(
            entries.checked_sub(slots),
            usize::try_from(self.collided_keys.load(Ordering::Relaxed)).ok(),
            "collided_keys counts the list entries beyond the first"
        );
        assert_eq!(
            Ok(shadows),
            usize::try_from(self.open_shadows.load(Ordering::Relaxed)),
            "open_shadows counts the shadow entries"
        );
        entries - shadows
    }

    /// Whether `key` is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.pin().get(key).is_some()
    }
}

impl<K, V, S> Map<K, V, S> {
    /// Take every entry out, leaving the map empty (with its table; `shrink_to_fit` gives
    /// memory back) and handing the keys and values over by value. `&mut self`, so no handle
    /// can be reading an entry while it moves out; to drain while other threads use the map,
    /// walk a handle's `iter` and `remove` each key.
    ///
    /// ```
    /// let mut map: floe::Map<String, Vec<u8>> = [("a".to_string(), vec![1])].into_iter().collect();
    /// let pairs: Vec<_> = map.drain().collect();
    /// assert_eq!(pairs, [("a".to_string(), vec![1])]);
    /// assert!(map.is_empty());
    /// ```
    pub fn drain(&mut self) -> MapIntoIter<K, V> {
        let mut words = Vec::new();
        self.raw
            .clear(&bin_hash, &|_, _| false, |word| words.push(word));
        self.collided_keys.store(0, Ordering::Relaxed);
        self.open_shadows.store(0, Ordering::Relaxed);
        let mut entries = Vec::with_capacity(words.len());
        for word in words {
            // SAFETY: `&mut self`: no operation runs and no handle lives, and the clear took
            // each word out of the table exactly once.
            unsafe { take_word(word, |entry| entries.push(entry)) };
        }
        MapIntoIter {
            entries: entries.into_iter(),
        }
    }
}

/// For a value word that holds open shadow inserts, whether it also holds present entries;
/// `None` for a word without shadows.
///
/// # Safety
/// As [`entry`], for the word.
unsafe fn shadow_state<K, V>(word: u64) -> Option<bool> {
    if word & SHADOW != 0 {
        return Some(false);
    }
    if word & COLLIDED == 0 {
        return None;
    }
    // SAFETY: caller.
    let list = unsafe { &*pointer::<Collided<K, V>>(word) };
    (list.visible < list.entries.len()).then_some(list.visible > 0)
}

/// Own the entries a value word holds (and free the word's list, if it has one): each
/// present one goes to `each`; open shadow inserts (whose handles were leaked, as nothing else
/// can leave one when the map is had by `&mut`) are dropped.
///
/// # Safety
/// No thread can reach `word` any more (it left the table, or the caller has the map by
/// `&mut` and the word is in its table and will not be read again), and it is taken once.
unsafe fn take_word<K, V>(word: u64, mut each: impl FnMut(Box<Entry<K, V>>)) {
    // SAFETY: caller; entries and lists are made by `Box::into_raw`, and each entry is in
    // exactly one word.
    unsafe {
        let members = target::<K, V>(word).members();
        for entry in members.visible {
            each(Box::from_raw(entry));
        }
        for shadow in members.shadows {
            drop(Box::from_raw(shadow));
        }
        if word & COLLIDED != 0 {
            drop(Box::from_raw(pointer::<Collided<K, V>>(word)));
        }
    }
}

impl<K, V, S> Drop for Map<K, V, S> {
    fn drop(&mut self) {
        let mut words = Vec::new();
        self.raw.for_each(&bin_hash, |_, value| words.push(value));
        for word in words {
            // SAFETY: `&mut self`: no operation runs and no handle lives, so the table's
            // words are ours, each visited once.
            unsafe { take_word(word, drop::<Box<Entry<K, V>>>) };
        }
        // Entries retired earlier are freed by the collector's own drop, after this.
    }
}

/// The owning iterator of a [`Map`] (`map.into_iter()`, [`Map::drain`]): the keys and values
/// by value. The entries were taken out of the table when it was made; those not yet yielded
/// are dropped with it.
pub struct MapIntoIter<K, V> {
    entries: std::vec::IntoIter<Box<Entry<K, V>>>,
}

impl<K, V> Iterator for MapIntoIter<K, V> {
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        let entry = self.entries.next()?;
        let Entry { key, value } = *entry;
        Some((key, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl<K, V> ExactSizeIterator for MapIntoIter<K, V> {}

impl<K, V, S> IntoIterator for Map<K, V, S> {
    type Item = (K, V);
    type IntoIter = MapIntoIter<K, V>;

    fn into_iter(mut self) -> MapIntoIter<K, V> {
        self.drain()
    }
}

/// Maps at rest are equal when they hold the same keys with equal values (as std's maps);
/// while other threads write to either, the answer is one of a weakly consistent walk.
impl<K: Hash + Eq, V: PartialEq, S: BuildHasher> PartialEq for Map<K, V, S> {
    fn eq(&self, other: &Self) -> bool {
        let (mine, theirs) = (self.pin(), other.pin());
        self.len() == other.len() && mine.iter().all(|(k, v)| theirs.get(k) == Some(v))
    }
}

impl<K: Hash + Eq, V: Eq, S: BuildHasher> Eq for Map<K, V, S> {}

/// A pinned handle on a [`Map`] ([`Map::pin`]): its operations hand out references that live
/// as long as the handle. `G` is the guard it holds: `pin`'s thread-local one (not `Send`), or
/// an owned one ([`OwnedMapRef`], from [`Map::pin_owned`]) for a handle that moves between
/// threads.
pub struct MapRef<'m, K, V, S, G = LocalGuard<'m>> {
    map: &'m Map<K, V, S>,
    guard: G,
}

/// A [`MapRef`] that is `Send` and `Sync` ([`Map::pin_owned`]): to hold across `.await`.
pub type OwnedMapRef<'m, K, V, S> = MapRef<'m, K, V, S, OwnedGuard<'m>>;

impl<K: Hash + Eq, V, S: BuildHasher, G: Guard> MapRef<'_, K, V, S, G> {
    /// The key's hash word and the engine's placement hash.
    #[inline(always)]
    fn locate<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, u64) {
        locate_with(&self.map.hasher, key)
    }

    /// The hash word of `key` (the engine's key word).
    #[inline(always)]
    pub(crate) fn hash_word<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.map.hasher.hash_one(key)
    }

    /// Whether `prefetch` asks to prefetch on this map: [`Prefetch::Auto`] weighs the table
    /// and the entries (a hit reads both), against the same threshold as `FlatMap`'s.
    pub(crate) fn prefetch_enabled(&self, prefetch: Prefetch) -> bool {
        let entries = self.map.len().saturating_mul(size_of::<Entry<K, V>>());
        prefetch.enabled(self.map.raw.table_bytes().saturating_add(entries))
    }

    /// Start loading the bin of the key whose hash word is `word`.
    #[inline(always)]
    pub(crate) fn prefetch_bin(&self, word: u64) {
        self.map.raw.prefetch(bin_hash(word));
    }

    /// Search the bin of the key whose hash word is `word` (best once it is cached), start
    /// loading the entry or list its slot points to, if any, and return the slot's value
    /// word: what a get reads, at this instant ([`value_in`](Self::value_in) finishes it).
    #[inline(always)]
    pub(crate) fn read_ahead(&self, word: u64) -> Option<u64> {
        let value = self.map.raw.get(bin_hash(word), word, &bin_hash);
        if let Some(value) = value {
            prefetch_target(value);
        }
        value
    }

    /// The value of the key that satisfies `is`, among the entries of the value word `value`.
    ///
    /// # Safety
    /// `value` was read from the table under this handle's guard.
    #[inline(always)]
    pub(crate) unsafe fn value_in(&self, value: u64, is: impl Fn(&K) -> bool) -> Option<&V> {
        // SAFETY: read under our guard (caller); the reference lives as `self`.
        unsafe {
            let found = target::<K, V>(value).find_by(is)?;
            Some(&entry(found).value)
        }
    }

    /// The key as stored and its value, if present (std's `get_key_value`).
    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find_by_hash(self.map.hasher.hash_one(key), |k, _| k.borrow() == key)
    }

    /// The entry whose key hashes to `hash` (the map's hasher's `hash_one(key)`, see
    /// [`Map::hasher`]) and whose key and value satisfy `is`: for a caller that kept a key's
    /// hash and not the key, as an eviction queue naming its entries by hash does
    /// (`floe::Cache`'s, floe-server's). Only the entries of keys with exactly that hash are
    /// offered to `is` (one, unless 64-bit hashes collide); a hash no key has finds nothing.
    ///
    /// ```
    /// use std::hash::BuildHasher;
    /// let map = floe::Map::<String, u32>::new();
    /// let m = map.pin();
    /// m.insert("a".to_string(), 1);
    /// let hash = map.hasher().hash_one("a");
    /// assert_eq!(m.find_by_hash(hash, |_, v| *v == 1), Some((&"a".to_string(), &1)));
    /// assert_eq!(m.find_by_hash(hash, |_, v| *v == 2), None);
    /// assert_eq!(m.find_by_hash(hash ^ 1, |_, _| true), None);
    /// ```
    pub fn find_by_hash(&self, hash: u64, is: impl Fn(&K, &V) -> bool) -> Option<(&K, &V)> {
        let value = self.map.raw.get(bin_hash(hash), hash, &bin_hash)?;
        let check = |found: *mut Entry<K, V>| {
            // SAFETY: read from the table under our guard; the entry lives while it does.
            let found: &Entry<K, V> = unsafe { entry(found) };
            is(&found.key, &found.value).then_some((&found.key, &found.value))
        };
        match target::<K, V>(value) {
            Target::One(one) => check(one),
            Target::Shadow(_) => None,
            // SAFETY: read from the table under our guard.
            Target::Many(list) => unsafe { Target::visible_of(list) }
                .iter()
                .find_map(|&found| check(found)),
        }
    }

    /// Remove `key` if `accept` says so of its value; returns the key as stored and the value
    /// removed (std's `remove_entry`, made conditional). `accept` may run more than once.
    pub fn remove_entry_if<Q>(
        &self,
        key: &Q,
        mut accept: impl FnMut(&V) -> bool,
    ) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_entry_if_by(
            self.map.hasher.hash_one(key),
            |k| k.borrow() == key,
            |_, value| accept(value),
        )
    }

    /// The value of `key`, if present.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_by(self.map.hasher.hash_one(key), |k| k.borrow() == key)
    }

    /// The value of the key whose hash word is `word` and that satisfies `is`.
    #[inline(always)]
    pub(crate) fn get_by(&self, word: u64, is: impl Fn(&K) -> bool) -> Option<&V> {
        let value = self.map.raw.get(bin_hash(word), word, &bin_hash)?;
        // SAFETY: read from the table under `self.guard`.
        unsafe { self.value_in(value, is) }
    }

    /// Whether `key` is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Gets of `keys` into `values` (same length), in order, for tables larger than the
    /// caches: a chunk's bins go through the engine's lookahead ring (as `Batch::get_many`,
    /// when the table and the entries take at least the CPU's threshold,
    /// [`PREFETCH_THRESHOLD_BYTES`](crate::batch::PREFETCH_THRESHOLD_BYTES) or more on AMD
    /// CPUs), then the entry of
    /// every hit is prefetched 16 keys before its key is compared. For mixed requests, see
    /// [`batch`](Self::batch) and [`pipeline`](Self::pipeline). Each answer is the one
    /// `get` would give at some instant during the call.
    ///
    /// ```
    /// let map = floe::Map::<String, u32>::with_capacity(10);
    /// let m = map.pin();
    /// m.insert("a".to_string(), 1);
    /// let mut values = [None; 2];
    /// m.get_many(&["a", "b"], &mut values)?;
    /// assert_eq!(values, [Some(&1), None]);
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if `keys` and `values` differ in length (nothing is read).
    pub fn get_many<'h, Q>(&'h self, keys: &[&Q], values: &mut [Option<&'h V>]) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_many_by(keys, |key| *key, values)
    }

    /// [`get_many`](Self::get_many) over a slice of keys as the map holds them, or of anything
    /// that borrows as `K` (`&[String]` or `&[&String]` for a `Map<String, _>`, `&[u64]` for a
    /// `Map<u64, _>`), where `get_many` takes a slice of references to a borrowed form (`&[&str]`).
    ///
    /// ```
    /// let map = floe::Map::<String, u32>::new();
    /// let m = map.pin();
    /// m.insert("a".to_string(), 1);
    /// let keys = vec!["a".to_string(), "b".to_string()];
    /// let mut values = [None; 2];
    /// m.get_many_keys(&keys, &mut values)?;
    /// assert_eq!(values, [Some(&1), None]);
    /// # Ok::<(), floe::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`get_many`](Self::get_many).
    pub fn get_many_keys<'h, B>(
        &'h self,
        keys: &[B],
        values: &mut [Option<&'h V>],
    ) -> Result<(), Error>
    where
        B: Borrow<K>,
    {
        self.get_many_by(keys, |key| key.borrow(), values)
    }

    /// The body of [`get_many`](Self::get_many): `key` lends each item of `keys` as a `Q`.
    fn get_many_by<'h, T, Q>(
        &'h self,
        keys: &[T],
        key: impl Fn(&T) -> &Q,
        values: &mut [Option<&'h V>],
    ) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if keys.len() != values.len() {
            return Err(Error::LengthMismatch {
                keys: keys.len(),
                values: values.len(),
            });
        }
        let (far, depth) = if self.prefetch_enabled(Prefetch::Auto) {
            (ring::DEFAULT_DEPTH, ENTRY_DEPTH)
        } else {
            (0, 0)
        };
        // The table words found, a chunk at a time: on the stack for a short batch, else in
        // one allocation of a chunk's size. A stack array of a whole chunk (16 KiB) was
        // zeroed on every call: for a single key that was most of the call's time
        // (floe-server's gets, profiled on Intel, 2026-11-30).
        let mut short = [None::<u64>; SHORT_BATCH];
        let mut long = Vec::new();
        let words: &mut [Option<u64>] = if keys.len() <= SHORT_BATCH {
            &mut short
        } else {
            long.resize(keys.len().min(BATCH_CHUNK), None);
            &mut long
        };
        for (keys, values) in keys.chunks(BATCH_CHUNK).zip(values.chunks_mut(BATCH_CHUNK)) {
            let words = &mut words[..keys.len()];
            self.map.raw.get_batch(
                keys.len(),
                far,
                HashedKeys {
                    hasher: &self.map.hasher,
                    keys,
                    key: &key,
                    borrowed: PhantomData,
                },
                |i, word| words[i] = word,
                &bin_hash,
            );
            let entry_line = |word: &Option<u64>| {
                if let Some(word) = *word {
                    prefetch_target(word);
                }
            };
            for word in words.iter().take(depth) {
                entry_line(word);
            }
            for (i, ((value, word), item)) in
                values.iter_mut().zip(words.iter()).zip(keys).enumerate()
            {
                if depth > 0 {
                    if let Some(ahead) = words.get(i + depth) {
                        entry_line(ahead);
                    }
                }
                *value = word.and_then(|word| {
                    // SAFETY: read from the table under our guard, which outlives `'h`.
                    unsafe {
                        let found = target::<K, V>(word).find(key(item))?;
                        Some(&entry(found).value)
                    }
                });
            }
        }
        Ok(())
    }

    /// Insert `key -> value` only if `key` is absent; otherwise leave the map unchanged (and
    /// drop `key` and `value`) and return the present value. [`insert`](Self::insert) replaces
    /// it instead, as std's does.
    ///
    /// ```
    /// use floe::Insert;
    /// let map = floe::Map::<String, Vec<u8>>::new();
    /// let map = map.pin();
    /// assert_eq!(map.insert_new("k".to_string(), vec![1]), Insert::Inserted);
    /// assert_eq!(map.insert_new("k".to_string(), vec![2]), Insert::Present(&vec![1]));
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert); [`try_insert_new`](Self::try_insert_new) returns the
    /// errors instead.
    #[track_caller]
    pub fn insert_new(&self, key: K, value: V) -> Insert<&V> {
        self.try_insert_new(key, value).or_raise()
    }

    /// [`insert_new`](Self::insert_new), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert). The map is unchanged and `key` and `value` are
    /// dropped.
    pub fn try_insert_new(&self, key: K, value: V) -> Result<Insert<&V>, Error> {
        self.try_insert_new_hashed(self.map.hasher.hash_one(&key), key, value)
    }

    /// [`try_insert_new`](Self::try_insert_new) of a key whose hash word is `word`.
    pub(crate) fn try_insert_new_hashed(
        &self,
        word: u64,
        key: K,
        value: V,
    ) -> Result<Insert<&V>, Error> {
        let hash = bin_hash(word);
        let new = Unpublished::new(key, value);
        // SAFETY: ours until published, then alive while our guard is; only read before
        // `new` is dropped (every use below is before a return).
        let key = unsafe { &entry(new.pointer()).key };
        loop {
            let present = match self.map.raw.insert(hash, word, new.word(), &bin_hash) {
                Ok(Inserted::New) => {
                    new.published();
                    return Ok(Insert::Inserted);
                }
                Ok(Inserted::Exists(present)) => present,
                // `Map` keeps its shadows in value words, not in the engine's shadow slots.
                Ok(Inserted::Shadowed) => continue,
                Err(error) => return Err(error),
            };
            let target = target::<K, V>(present);
            // SAFETY: read from the table under our guard.
            if let Some(found) = unsafe { target.find(key) } {
                // SAFETY: `found` is in the table; it lives while our guard does.
                return Ok(Insert::Present(unsafe { &entry(found).value }));
            }
            // SAFETY: as above.
            if unsafe { target.find_shadow_by(|k| k == key) }.is_some() {
                return Ok(Insert::Shadowed);
            }
            // Another key with our hash: one more entry in its list.
            // SAFETY: as above.
            let mut members = unsafe { target.members() };
            members.visible.push(new.pointer());
            if self.swap(hash, word, present, word_of(members)) {
                new.published();
                self.count_collided(1);
                return Ok(Insert::Inserted);
            }
        }
    }

    /// Insert `key -> value`, replacing any present value, as std's `HashMap::insert` does.
    /// Returns the previous value (alive while this handle is; the map drops it once no handle
    /// can see it). A key held by an open shadow insert ([`insert_shadow`](Self::insert_shadow))
    /// is waited for until the shadow is committed or aborted: never insert a key whose shadow
    /// this thread holds, or one whose handle was leaked (the wait would not end). `compute`
    /// inserting such a key, a batch's `Insert` and `Extend` wait the same way.
    ///
    /// ```
    /// let map = floe::Map::<String, u64>::new();
    /// let map = map.pin();
    /// assert_eq!(map.insert("k".to_string(), 1), None);
    /// assert_eq!(map.insert("k".to_string(), 2), Some(&1));
    /// assert_eq!(map.get("k"), Some(&2));
    /// ```
    ///
    /// # Panics
    /// As [`FlatMap::insert`](crate::FlatMap::insert): if the larger table's memory cannot be
    /// had, or a map capped with [`Builder::max_bins`] is full. [`try_insert`](Self::try_insert)
    /// returns these as errors; use it on a capped map.
    #[track_caller]
    pub fn insert(&self, key: K, value: V) -> Option<&V> {
        self.try_insert(key, value).or_raise()
    }

    /// [`insert`](Self::insert), answering what it panics on with an error.
    ///
    /// # Errors
    /// As `FlatMap::try_insert`, when the key is absent: [`Error::Full`] at
    /// [`Builder::max_bins`], or the larger table cannot be had. The map is unchanged and
    /// `key` and `value` are dropped.
    pub fn try_insert(&self, key: K, value: V) -> Result<Option<&V>, Error> {
        self.try_insert_hashed(self.map.hasher.hash_one(&key), key, value)
    }

    /// [`insert`](Self::insert)'s former name.
    #[deprecated(
        since = "0.2.0",
        note = "`insert` now replaces a present value, as std's does"
    )]
    #[track_caller]
    pub fn upsert(&self, key: K, value: V) -> Option<&V> {
        self.insert(key, value)
    }

    /// [`try_insert`](Self::try_insert)'s former name.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert).
    #[deprecated(
        since = "0.2.0",
        note = "`try_insert` now replaces a present value, as std's does"
    )]
    pub fn try_upsert(&self, key: K, value: V) -> Result<Option<&V>, Error> {
        self.try_insert(key, value)
    }

    /// The value of `key`, inserting `value` first if the key is absent (std's
    /// `entry(key).or_insert(value)`): one search when the key is present, and the reference
    /// is to the value in the map, so no second lookup is needed after an insert.
    ///
    /// ```
    /// let map = floe::Map::<String, Vec<u32>>::new();
    /// let m = map.pin();
    /// assert_eq!(m.get_or_insert("k".to_string(), vec![1]), &vec![1]);
    /// assert_eq!(m.get_or_insert("k".to_string(), vec![2]), &vec![1]); // kept
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert); [`try_get_or_insert_with`](Self::try_get_or_insert_with)
    /// returns the errors instead.
    #[track_caller]
    pub fn get_or_insert(&self, key: K, value: V) -> &V {
        self.try_get_or_insert_with(key, || value).or_raise()
    }

    /// The value of `key`, inserting `make()` first if the key is absent (std's
    /// `entry(key).or_insert_with(make)`). `make` runs at most once, and only when the key was
    /// found absent; threads racing on one absent key may each run their own `make`, and one
    /// value wins (all of them return it). A key held by an open shadow insert is waited for,
    /// as by [`insert`](Self::insert).
    ///
    /// ```
    /// let map = floe::Map::<u64, String>::new();
    /// let m = map.pin();
    /// let mut made = 0;
    /// for _ in 0..3 {
    ///     m.get_or_insert_with(7, || { made += 1; "seven".to_string() });
    /// }
    /// assert_eq!((m.get(&7).map(String::as_str), made), (Some("seven"), 1));
    /// ```
    ///
    /// # Panics
    /// As [`get_or_insert`](Self::get_or_insert).
    #[track_caller]
    pub fn get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> &V {
        self.try_get_or_insert_with(key, make).or_raise()
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with), answering what it panics on with an
    /// error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert), when the key is absent: the map is unchanged and
    /// `key` and the value made are dropped.
    pub fn try_get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> Result<&V, Error> {
        if let Some(present) = self.get(&key) {
            return Ok(present);
        }
        self.try_insert_or_get(key, make)
    }

    /// Insert `make()` if `key` is absent (`make` runs at most once: a value that lost a
    /// race is offered again); the key's value either way. The second half of
    /// [`try_get_or_insert_with`](Self::try_get_or_insert_with), for a caller that has
    /// just found the key absent.
    pub(crate) fn try_insert_or_get(&self, key: K, make: impl FnOnce() -> V) -> Result<&V, Error> {
        let mut make = Some(make);
        let outcome = self.try_compute_returning(key, |present, returned| match present {
            // A pointer, not a reference: `decide`'s argument cannot outlive the call, but
            // the entry it names lives as long as our guard.
            Some(present) => Operation::Abort(core::ptr::from_ref(present)),
            None => Operation::Insert(
                returned
                    .unwrap_or_else(|| make.take().expect("a value lost in a race comes back")()),
            ),
        })?;
        Ok(match outcome {
            Compute::Inserted(value) => value,
            // SAFETY: read from the map under our guard, which keeps the entry alive as long
            // as `self`.
            Compute::Aborted(present) => unsafe { &*present },
            _ => unreachable!("an insert if absent inserts or aborts"),
        })
    }

    /// [`try_insert`](Self::try_insert) of a key whose hash word is `word`.
    pub(crate) fn try_insert_hashed(
        &self,
        word: u64,
        key: K,
        value: V,
    ) -> Result<Option<&V>, Error> {
        let hash = bin_hash(word);
        let new = Unpublished::new(key, value);
        // SAFETY: as in `insert`.
        let key = unsafe { &entry(new.pointer()).key };
        loop {
            let Some(present) = self.map.raw.get(hash, word, &bin_hash) else {
                match self.map.raw.insert(hash, word, new.word(), &bin_hash) {
                    Ok(Inserted::New) => {
                        new.published();
                        return Ok(None);
                    }
                    // Inserted meanwhile: replace it. (No engine shadows in a `Map`.)
                    Ok(Inserted::Exists(_) | Inserted::Shadowed) => continue,
                    Err(error) => return Err(error),
                }
            };
            let target = target::<K, V>(present);
            // SAFETY: read from the table under our guard.
            let (old, mut members) = unsafe { (target.find(key), target.members()) };
            // SAFETY: as above.
            if old.is_none() && unsafe { target.find_shadow_by(|k| k == key) }.is_some() {
                // The key is locked by an open shadow insert: wait for its commit or abort.
                wait_for_shadow();
                continue;
            }
            match old {
                Some(old) => replace(&mut members.visible, old, new.pointer()),
                None => members.visible.push(new.pointer()),
            }
            if self.swap(hash, word, present, word_of(members)) {
                new.published();
                let Some(old) = old else {
                    self.count_collided(1);
                    return Ok(None);
                };
                // SAFETY: our swap took `old` out of the table; it lives while our guard does.
                unsafe {
                    self.guard.defer_retire(old, reclaim::entry::<K, V>);
                    return Ok(Some(&entry(old).value));
                }
            }
        }
    }

    /// Replace the value of a present `key` by `value`, returning the previous value (alive
    /// while this handle is); `None` if `key` is absent (nothing is written, and `key` and
    /// `value` are dropped). [`update`](Self::update) computes the value from the old one.
    ///
    /// ```
    /// let map = floe::Map::<String, u64>::new();
    /// let map = map.pin();
    /// assert_eq!(map.put("k".to_string(), 1), None);
    /// assert_eq!(map.get("k"), None);
    /// map.insert("k".to_string(), 1);
    /// assert_eq!(map.put("k".to_string(), 2), Some(&1));
    /// assert_eq!(map.get("k"), Some(&2));
    /// ```
    pub fn put(&self, key: K, value: V) -> Option<&V> {
        self.put_hashed(self.hash_word(&key), key, value)
    }

    /// [`put`](Self::put) of a key whose hash word is `word`.
    pub(crate) fn put_hashed(&self, word: u64, key: K, value: V) -> Option<&V> {
        let hash = bin_hash(word);
        let new = Unpublished::new(key, value);
        // SAFETY: as in `insert`.
        let key = unsafe { &entry(new.pointer()).key };
        loop {
            let (present, old, mut members) = self.find_present(hash, word, key)?;
            replace(&mut members.visible, old, new.pointer());
            if self.swap(hash, word, present, word_of(members)) {
                new.published();
                // SAFETY: our swap took `old` out of the table; it lives while our guard does.
                unsafe {
                    self.guard.defer_retire(old, reclaim::entry::<K, V>);
                    return Some(&entry(old).value);
                }
            }
        }
    }

    /// Replace the value of a present `key` by `f(&old)` (copy on write: `f` may run more
    /// than once under contention, with the newer value each time). Returns the new value,
    /// or `None` if the key is absent (then `f` does not run).
    pub fn update<Q>(&self, key: &Q, mut f: impl FnMut(&V) -> V) -> Option<&V>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ?Sized,
    {
        let (hash, word) = self.locate(key);
        loop {
            let (present, old, mut members) = self.find_present(hash, word, key)?;
            // SAFETY: read from the table under our guard.
            let current = unsafe { entry(old) };
            let new = Box::into_raw(Box::new(Entry {
                key: current.key.clone(),
                value: f(&current.value),
            }));
            replace(&mut members.visible, old, new);
            if self.swap(hash, word, present, word_of(members)) {
                // SAFETY: our swap took `old` out of the table and published `new`, which is
                // retired only by whoever takes it out, after our guard ends.
                unsafe {
                    self.guard.defer_retire(old, reclaim::entry::<K, V>);
                    return Some(&entry(new).value);
                }
            }
            // SAFETY: never published.
            drop(unsafe { Box::from_raw(new) });
        }
    }

    /// Remove `key`, returning its value (valid as long as this handle).
    pub fn remove<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_if(key, |_| true)
    }

    /// Remove `key` if `accept` says so of its value; returns the removed value. `accept`
    /// may run more than once under contention.
    pub fn remove_if<Q>(&self, key: &Q, accept: impl FnMut(&V) -> bool) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_if_by(self.map.hasher.hash_one(key), |k| k.borrow() == key, accept)
    }

    /// Read, decide and write `key` in one atomic step: `decide` sees the present value (or
    /// `None`) and answers with an [`Operation`]: store a value (insert or replace), remove
    /// the key, or abort with a result of its own. If another thread changes the key between
    /// the read and the write, `decide` runs again on the newer value, so it should have no
    /// side effects beyond its answer (it runs at least once, and its last answer is the one
    /// applied). The entry-style read-modify-write of std's `entry` API, lock-free. Each
    /// stored value is a new entry; a counter is cheaper as an atomic value added to in place
    /// ([`fetch_add`](Self::fetch_add)).
    ///
    /// ```
    /// use floe::{Compute, Operation};
    /// let stock = floe::Map::<String, u32>::new();
    /// let stock = stock.pin();
    /// // Take one item if any are left: decrement, remove at zero, refuse when absent.
    /// let take = |left: Option<&u32>| match left {
    ///     None => Operation::Abort("sold out"),
    ///     Some(1) => Operation::Remove,
    ///     Some(n) => Operation::Insert(n - 1),
    /// };
    /// stock.insert("apple".to_string(), 2);
    /// assert_eq!(stock.compute("apple".to_string(), take), Compute::Updated { old: &2, new: &1 });
    /// assert_eq!(stock.compute("apple".to_string(), take), Compute::Removed(&1));
    /// assert_eq!(stock.compute("apple".to_string(), take), Compute::Aborted("sold out"));
    /// // Insert-or-modify, as `entry(k).and_modify(..).or_insert(..)`.
    /// let bump = |n: Option<&u32>| Operation::<_, ()>::Insert(n.map_or(1, |n| n + 1));
    /// assert_eq!(stock.compute("pear".to_string(), bump), Compute::Inserted(&1));
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert), when `decide` inserts an absent key;
    /// [`try_compute`](Self::try_compute) returns the error instead.
    #[track_caller]
    pub fn compute<T>(
        &self,
        key: K,
        decide: impl FnMut(Option<&V>) -> Operation<V, T>,
    ) -> Compute<'_, V, T> {
        self.try_compute(key, decide).or_raise()
    }

    /// [`compute`](Self::compute), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert), when `decide` inserts an absent key: the map is
    /// unchanged.
    pub fn try_compute<T>(
        &self,
        key: K,
        mut decide: impl FnMut(Option<&V>) -> Operation<V, T>,
    ) -> Result<Compute<'_, V, T>, Error> {
        self.try_compute_returning(key, |old, _| decide(old))
    }

    /// [`try_compute`](Self::try_compute) whose `decide` also gets back the value its last
    /// answer stored, when that attempt lost a race (so a value that cannot be cloned can be
    /// offered again).
    pub(crate) fn try_compute_returning<T>(
        &self,
        key: K,
        mut decide: impl FnMut(Option<&V>, Option<V>) -> Operation<V, T>,
    ) -> Result<Compute<'_, V, T>, Error> {
        let (hash, word) = self.locate(&key);
        let mut returned = None;
        // The key while no entry holds it; an entry holds it while an attempt to publish one
        // is under way, and hands it back if the attempt fails.
        let mut key = Some(key);
        loop {
            let key_ref = key.as_ref().expect("the key is back between attempts");
            let present = self.map.raw.get(hash, word, &bin_hash);
            let mut shadowed = false;
            let mut members = Members {
                visible: SmallVec::new(),
                shadows: SmallVec::new(),
            };
            // SAFETY: read from the table under our guard.
            let old = present.and_then(|present| unsafe {
                let target = target::<K, V>(present);
                shadowed = target.find_shadow_by(|k| k == key_ref).is_some();
                members = target.members();
                target.find(key_ref)
            });
            // SAFETY: as above; the reference lives as our guard.
            let old_value = old.map(|old| unsafe { &entry(old).value });
            match decide(old_value, returned.take()) {
                Operation::Abort(result) => return Ok(Compute::Aborted(result)),
                Operation::Remove => {
                    let (Some(present), Some(old)) = (present, old) else {
                        return Ok(Compute::Absent);
                    };
                    if let Some(removed) = self.take_out(hash, word, present, old, members) {
                        return Ok(Compute::Removed(removed));
                    }
                }
                Operation::Insert(value) if shadowed => {
                    // The key is locked by an open shadow insert: wait for its commit or
                    // abort, then decide again.
                    returned = Some(value);
                    wait_for_shadow();
                }
                Operation::Insert(value) => {
                    let new = Unpublished::new(key.take().expect("checked above"), value);
                    let stored = match present {
                        None => match self.map.raw.insert(hash, word, new.word(), &bin_hash) {
                            Ok(Inserted::New) => true,
                            Ok(Inserted::Exists(_) | Inserted::Shadowed) => false,
                            Err(error) => return Err(error),
                        },
                        Some(present) => {
                            match old {
                                Some(old) => replace(&mut members.visible, old, new.pointer()),
                                None => members.visible.push(new.pointer()),
                            }
                            self.swap(hash, word, present, word_of(members))
                        }
                    };
                    if !stored {
                        let (back, value) = new.into_parts();
                        key = Some(back);
                        returned = Some(value);
                        continue;
                    }
                    let new = new.published();
                    // SAFETY: published by us; alive while our guard is.
                    let new = unsafe { &entry(new).value };
                    let Some(old) = old else {
                        if present.is_some() {
                            self.count_collided(1);
                        }
                        return Ok(Compute::Inserted(new));
                    };
                    // SAFETY: our swap took `old` out of the table; it lives while our guard
                    // does.
                    unsafe {
                        self.guard.defer_retire(old, reclaim::entry::<K, V>);
                        return Ok(Compute::Updated {
                            old: &entry(old).value,
                            new,
                        });
                    }
                }
            }
        }
    }

    /// For a present `key`: the value word of its hash, its entry, and every entry of that
    /// word. `None` if the key is absent.
    fn find_present<Q>(&self, hash: u64, word: u64, key: &Q) -> Option<Present<K, V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.find_present_by(hash, word, |k| k.borrow() == key)
    }

    /// Insert `key -> value` as a *shadow* (DLHT §3.2.2's shadow insert, as
    /// `FlatMap::insert_shadow`): the key is taken (every insert of it, shadow or not, is
    /// refused: [`Insert::Shadowed`], [`Taken::Shadowed`]) but hidden from everything else
    /// (gets, puts, updates, removes, iteration, snapshots, `len`, `clear`) until the returned
    /// [`MapShadow`]'s [`commit`](MapShadow::commit) makes it visible at once, or its
    /// [`abort`](MapShadow::abort) (or drop) removes it. `insert` and `compute` inserting the
    /// key wait for the commit or abort (the shadow is the key's lock: the thread holding it
    /// must not insert that key itself). Growth carries shadows across with their word.
    ///
    /// The entry is allocated now and only the handle can resolve it: its value word is
    /// tagged as a shadow, which every other operation skips.
    ///
    /// ```
    /// use floe::{Insert, Taken};
    /// let rows = floe::Map::<String, u64>::new();
    /// let m = rows.pin();
    /// let row = m.insert_shadow("r7".to_string(), 70).unwrap();
    /// assert_eq!(m.get("r7"), None);                                  // hidden...
    /// assert_eq!(m.insert_new("r7".to_string(), 1), Insert::Shadowed); // ...but taken
    /// assert!(matches!(m.insert_shadow("r7".to_string(), 2), Err(Taken::Shadowed)));
    /// assert_eq!(row.commit(), &70);                                  // now visible
    /// assert_eq!(m.get("r7"), Some(&70));
    /// drop(m.insert_shadow("r8".to_string(), 80).unwrap());            // aborted
    /// assert_eq!(m.insert_new("r8".to_string(), 81), Insert::Inserted);
    /// ```
    ///
    /// # Panics
    /// As [`insert`](Self::insert); [`try_insert_shadow`](Self::try_insert_shadow) returns
    /// the error instead.
    #[track_caller]
    pub fn insert_shadow<'h>(
        &'h self,
        key: K,
        value: V,
    ) -> Result<MapShadow<'h, K, V, S, G>, Taken<&'h V>> {
        self.try_insert_shadow(key, value).or_raise()
    }

    /// [`insert_shadow`](Self::insert_shadow), answering what it panics on with an error.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert); the map is unchanged and `key` and `value` are
    /// dropped.
    // The plain form's answer inside the `try_` forms' `Result`, as everywhere in the crate.
    #[allow(clippy::type_complexity)]
    pub fn try_insert_shadow<'h>(
        &'h self,
        key: K,
        value: V,
    ) -> Result<Result<MapShadow<'h, K, V, S, G>, Taken<&'h V>>, Error> {
        let word = self.hash_word(&key);
        let hash = bin_hash(word);
        let new = Unpublished::new(key, value);
        // SAFETY: as in `insert`.
        let key = unsafe { &entry(new.pointer()).key };
        loop {
            // Counted around each attempt to publish it (never around the user's `Eq`, which
            // may panic), so that `len` never counts it as a key.
            self.count_shadows(1);
            let inserted = self
                .map
                .raw
                .insert(hash, word, new.word() | SHADOW, &bin_hash);
            if let Ok(Inserted::New) = inserted {
                break;
            }
            self.count_shadows(-1);
            let present = match inserted {
                Ok(Inserted::Exists(present)) => present,
                Ok(Inserted::New | Inserted::Shadowed) => continue,
                Err(error) => return Err(error),
            };
            let target = target::<K, V>(present);
            // SAFETY: read from the table under our guard; `found` lives while it does.
            if let Some(found) = unsafe { target.find(key) } {
                // SAFETY: as above.
                return Ok(Err(Taken::Present(unsafe { &entry(found).value })));
            }
            // SAFETY: as above.
            if unsafe { target.find_shadow_by(|k| k == key) }.is_some() {
                return Ok(Err(Taken::Shadowed));
            }
            // SAFETY: as above.
            let mut members = unsafe { target.members() };
            members.shadows.push(new.pointer());
            self.count_shadows(1);
            if self.swap(hash, word, present, word_of(members)) {
                self.count_collided(1);
                break;
            }
            self.count_shadows(-1);
        }
        Ok(Ok(MapShadow {
            handle: self,
            word,
            entry: new.published(),
            open: true,
        }))
    }

    /// The entries present at one instant (DLHT §3.4.4's strong snapshot; see
    /// `FlatMap::snapshot` for what it costs writers), as references that live as long as
    /// this handle.
    ///
    /// ```
    /// let map = floe::Map::<String, u32>::new();
    /// let m = map.pin();
    /// m.insert("a".to_string(), 1);
    /// m.insert("b".to_string(), 2);
    /// let mut pairs = m.snapshot().unwrap();
    /// pairs.sort();
    /// assert_eq!(pairs, [(&"a".to_string(), &1), (&"b".to_string(), &2)]);
    /// ```
    ///
    /// # Errors
    /// As `FlatMap::snapshot`: [`Error::InsideOperation`] from inside an operation of a floe
    /// map on this thread.
    #[cfg(not(floe_loom))]
    pub fn snapshot(&self) -> Result<Vec<(&K, &V)>, Error> {
        let mut words = Vec::with_capacity(self.map.len());
        self.map
            .raw
            .snapshot(&bin_hash, |_, value| words.push(value))?;
        let mut pairs = Vec::with_capacity(words.len());
        for value in words {
            // SAFETY: every word was in the table during the snapshot, read while this
            // handle's guard was held (since before the snapshot began), so its entries are
            // retired, if ever, after the guard was taken, and live as long as it.
            for one in unsafe { target::<K, V>(value).entries() } {
                // SAFETY: as above.
                let one = unsafe { entry(one) };
                pairs.push((&one.key, &one.value));
            }
        }
        Ok(pairs)
    }

    /// An iterator over `(&key, &value)`, weakly consistent as `FlatMap::iter`: a key present
    /// for the whole iteration is yielded exactly once, also across growth; a key inserted or
    /// removed during it may or may not be. It never blocks writers. Entries it yields live as
    /// long as this handle, so a long iteration delays the freeing of entries removed
    /// meanwhile.
    pub fn iter(&self) -> MapIter<'_, K, V, S, G> {
        self.into_iter()
    }

    /// One stretch of [`iter`](Self::iter), for a walk taken in pieces (a reply sent as the
    /// client takes it, each piece under a guard of its own): visit the entries of the run of
    /// bins that starts at hash position `from` (0 for the first), and return the position
    /// the next run starts at, or `None` after the last. Calls that follow the positions from
    /// 0 visit every key present for the whole walk exactly once, across growths and shrinks
    /// between them too (the positions are hashes, not slots), with this handle or later
    /// ones; a key inserted or removed meanwhile may or may not be visited.
    ///
    /// ```
    /// let map = floe::Map::new();
    /// for i in 0..1000u64 {
    ///     map.pin().insert(i, i);
    /// }
    /// let (mut seen, mut from) = (0, Some(0));
    /// while let Some(at) = from {
    ///     from = map.pin().iter_run(at, |_, _| seen += 1);
    /// }
    /// assert_eq!(seen, 1000);
    /// ```
    pub fn iter_run(&self, from: u64, mut visit: impl FnMut(&K, &V)) -> Option<u64> {
        self.map.raw.walk_run(from, &bin_hash, |_, value| {
            // SAFETY: read from the table under this handle's guard, which is held for the
            // whole call (as `MapIter::next` reads it).
            for one in unsafe { target::<K, V>(value).entries() } {
                // SAFETY: as above.
                let one = unsafe { entry(one) };
                visit(&one.key, &one.value);
            }
        })
    }

    /// The keys, as [`iter`](Self::iter) yields them.
    pub fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// The values, as [`iter`](Self::iter) yields them.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// Remove every entry for which `keep` answers `false`, while other threads go on using
    /// the map. Walks as [`iter`](Self::iter) does (every key present for the whole call is
    /// offered once, across growth too) and removes a rejected entry only if it is still the
    /// one `keep` saw ([`remove_if`](Self::remove_if) on its identity): a value written
    /// meanwhile is kept, to be judged by a later `retain`.
    ///
    /// ```
    /// let map: floe::Map<String, usize> = ["a", "bb", "ccc"].map(|s| (s.to_string(), s.len())).into_iter().collect();
    /// map.pin().retain(|_, len| *len != 2);
    /// assert_eq!(map.len(), 2);
    /// assert!(!map.contains_key("bb"));
    /// ```
    pub fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool)
    where
        K: Hash + Eq,
        S: BuildHasher,
    {
        for (key, value) in self.iter() {
            if !keep(key, value) {
                self.remove_if(key, |now| core::ptr::eq(now, value));
            }
        }
    }
}

/// The handle's steps that work on hash words alone (no hashing; keys are compared only by
/// the caller's `is`): shared by the typed operations and by [`Map::clear`].
impl<K, V, S, G: Guard> MapRef<'_, K, V, S, G> {
    /// Drop `object` once no guard of this map that is active now remains (so nothing read
    /// under one can still point into it).
    #[cfg(all(feature = "serde", unix, not(floe_loom)))]
    pub(crate) fn retire_later<T>(&self, object: Box<T>) {
        unsafe fn reclaim<T>(object: *mut T, _: &seize::Collector) {
            // SAFETY: made by `Box::into_raw` below and retired once.
            drop(unsafe { Box::from_raw(object) });
        }
        // SAFETY: the object is ours (boxed here) and retired once; the caller has made it
        // unreachable for guards that start after this call.
        unsafe { self.guard.defer_retire(Box::into_raw(object), reclaim::<T>) };
        // A thread that retires little (a compactor) would otherwise leave it in its batch
        // until the batch fills.
        self.guard.flush();
    }

    /// The entry of hash word `word` whose key and value satisfy `is` (as
    /// [`find_by_hash`](Self::find_by_hash)), removed if `decide` says so of it: one lookup
    /// where a `find_by_hash` and a removal by its key were two (`floe::Cache`'s eviction,
    /// which names entries by hash). `decide` may run again on the entry found anew when a
    /// write changed the key's word between the look and the removal; the removal is
    /// linearizable as [`remove_entry_if`](Self::remove_entry_if)'s.
    pub(crate) fn remove_by_hash_if(
        &self,
        word: u64,
        is: impl Fn(&K, &V) -> bool,
        mut decide: impl FnMut(&K, &V) -> bool,
    ) -> ByHash<'_, K, V> {
        let hash = bin_hash(word);
        loop {
            let Some((present, old, members)) = self.find_present_entry_by(hash, word, &is) else {
                return ByHash::Absent;
            };
            // SAFETY: read from the table under our guard; the entry lives while it does.
            let old_entry: &Entry<K, V> = unsafe { entry(old) };
            if !decide(&old_entry.key, &old_entry.value) {
                return ByHash::Kept(&old_entry.value);
            }
            if let Some(removed) = self.take_out(hash, word, present, old, members) {
                return ByHash::Removed(&old_entry.key, removed);
            }
        }
    }

    /// [`remove_if`](Self::remove_if) of the key whose hash word is `word` and that
    /// satisfies `is`.
    pub(crate) fn remove_if_by(
        &self,
        word: u64,
        is: impl Fn(&K) -> bool,
        mut accept: impl FnMut(&V) -> bool,
    ) -> Option<&V> {
        self.remove_entry_if_by(word, is, |_, value| accept(value))
            .map(|(_, value)| value)
    }

    /// [`remove_if_by`](Self::remove_if_by) whose `accept` sees the key stored too, and that
    /// returns the key stored with the value.
    pub(crate) fn remove_entry_if_by(
        &self,
        word: u64,
        is: impl Fn(&K) -> bool,
        mut accept: impl FnMut(&K, &V) -> bool,
    ) -> Option<(&K, &V)> {
        match self.remove_by_hash_if(word, |key, _| is(key), |key, value| accept(key, value)) {
            ByHash::Removed(key, value) => Some((key, value)),
            ByHash::Kept(_) | ByHash::Absent => None,
        }
    }

    /// Take the entry `old` out of the value word `present` (which holds `entries`), if the
    /// word is still `present`: the word goes if `old` was its only entry, else it becomes
    /// the list without `old`. Retires `old` and returns its value on success.
    fn take_out(
        &self,
        hash: u64,
        word: u64,
        present: u64,
        old: *mut Entry<K, V>,
        mut members: Members<K, V>,
    ) -> Option<&V> {
        let removed = if members.len() == 1 {
            // Only if the word is still the one read: a colliding key inserted meanwhile
            // must stay.
            self.map
                .raw
                .remove_if(hash, word, |now| now == present, &bin_hash)
                .is_ok()
        } else {
            members.visible.retain(|e| *e != old);
            let swapped = self.swap(hash, word, present, word_of(members));
            if swapped {
                self.count_collided(-1);
            }
            swapped
        };
        // SAFETY: our remove or swap took `old` out of the table (the swap retired the list
        // `present` pointed to, if one); it lives while our guard does.
        removed.then(|| unsafe {
            self.guard.defer_retire(old, reclaim::entry::<K, V>);
            &entry(old).value
        })
    }

    /// [`find_present`](Self::find_present) of the key that satisfies `is`.
    fn find_present_by(
        &self,
        hash: u64,
        word: u64,
        is: impl Fn(&K) -> bool,
    ) -> Option<Present<K, V>> {
        self.find_present_entry_by(hash, word, |key, _| is(key))
    }

    /// [`find_present_by`](Self::find_present_by) of the entry whose key and value satisfy
    /// `is`.
    fn find_present_entry_by(
        &self,
        hash: u64,
        word: u64,
        is: impl Fn(&K, &V) -> bool,
    ) -> Option<Present<K, V>> {
        let present = self.map.raw.get(hash, word, &bin_hash)?;
        let target = target::<K, V>(present);
        // SAFETY: read from the table under our guard.
        unsafe { Some((present, target.find_entry_by(is)?, target.members())) }
    }

    /// Take every present entry out of the word of hash word `word`, leaving its shadows (for
    /// `Map::clear`): one swap, linearized there, retried while the word changes. Each
    /// present key is removed as by a remove (wherever a put moved it meanwhile).
    fn take_present(&self, word: u64) {
        let hash = bin_hash(word);
        loop {
            let Some(present) = self.map.raw.get(hash, word, &bin_hash) else {
                return;
            };
            // SAFETY: read from the table under our guard.
            let Members { visible, shadows } = unsafe { target::<K, V>(present).members() };
            if visible.is_empty() {
                return;
            }
            if shadows.is_empty() {
                // The shadows were resolved meanwhile: the word goes as `clear` takes any.
                if self
                    .map
                    .raw
                    .remove_if(hash, word, |now| now == present, &bin_hash)
                    .is_ok()
                {
                    // SAFETY: our remove took `present` out of the table.
                    unsafe { self.map.retire_word(&self.guard, present) };
                    return;
                }
                continue;
            }
            let kept = Members {
                visible: SmallVec::new(),
                shadows,
            };
            if self.swap(hash, word, present, word_of(kept)) {
                // The word keeps at least one entry: every present one was beyond the first.
                self.count_collided(-isize::try_from(visible.len()).unwrap_or(isize::MAX));
                for one in visible {
                    // SAFETY: our swap took `one` out of the table; retired once, here.
                    unsafe { self.guard.defer_retire(one, reclaim::entry::<K, V>) };
                }
                return;
            }
        }
    }

    /// Count open shadow inserts made (`1`) or resolved (`-1`).
    fn count_shadows(&self, change: isize) {
        self.map.open_shadows.fetch_add(change, Ordering::Relaxed);
    }

    /// Count keys added to (`1`) or taken from (`-1`) a `Collided` list.
    fn count_collided(&self, change: isize) {
        self.map.collided_keys.fetch_add(change, Ordering::Relaxed);
    }

    /// Swap the value word of `word` from `present` to `new` (from `word_of`). On success
    /// the list `present` pointed to (if one) is retired; on failure `new`'s list (if one) is
    /// freed, its entries untouched. Whether it swapped.
    fn swap(&self, hash: u64, word: u64, present: u64, new: u64) -> bool {
        match self
            .map
            .raw
            .compare_exchange(hash, word, present, new, &bin_hash)
        {
            Ok(_) => {
                // SAFETY: our CAS took `present` out of the table.
                unsafe { retire_list::<K, V>(&self.guard, present) };
                true
            }
            Err(Mismatch::Absent | Mismatch::Value(_)) => {
                // SAFETY: `new` was never stored.
                unsafe { discard_unpublished::<K, V>(new) };
                false
            }
        }
    }
}

/// An open shadow insert on a [`Map`] ([`MapRef::insert_shadow`]): its key is taken but
/// hidden until [`commit`](Self::commit) makes `key -> value` visible at once;
/// [`abort`](Self::abort), or dropping it, removes it. Only this handle can resolve the
/// shadow, so it is committed or aborted exactly once. Leaking it (`mem::forget`) leaves the
/// key taken for the life of the map, as a leaked lock guard does.
#[must_use = "an open shadow keeps its key taken until it is committed (dropping it aborts)"]
pub struct MapShadow<'h, K, V, S, G: Guard = LocalGuard<'h>> {
    handle: &'h MapRef<'h, K, V, S, G>,
    /// The key's hash word.
    word: u64,
    /// The shadow's entry, in the table (tagged) while `open`: only this handle takes it out.
    entry: *mut Entry<K, V>,
    /// Not yet committed or aborted.
    open: bool,
}

impl<'h, K, V, S, G: Guard> MapShadow<'h, K, V, S, G> {
    /// The shadowed key.
    pub fn key(&self) -> &K {
        // SAFETY: the entry is in the table while the handle is open (and retired only by
        // it), and the handle's guard outlives `self`.
        unsafe { &entry(self.entry).key }
    }

    /// The value the commit will make visible.
    pub fn value(&self) -> &V {
        // SAFETY: as in `key`.
        unsafe { &entry(self.entry).value }
    }

    /// Make `key -> value` visible, atomically (linearized at one swap of the key's value
    /// word, inside the call); returns the value, which lives as long as the map handle.
    pub fn commit(mut self) -> &'h V {
        self.resolve(true);
        // SAFETY: published by the commit; it lives while the handle's guard does.
        unsafe { &entry(self.entry).value }
    }

    /// Remove the shadow without it ever having been visible; the key is free again (its
    /// key and value are dropped once no reader can hold them).
    pub fn abort(mut self) {
        self.resolve(false);
    }

    /// Take the shadow's entry out of its word: into the present entries (`commit`) or out
    /// of the table. Swaps the word as every write does; retried while other keys of the
    /// same hash change it.
    fn resolve(&mut self, commit: bool) {
        if !core::mem::take(&mut self.open) {
            return;
        }
        let (handle, word) = (self.handle, self.word);
        let hash = bin_hash(word);
        loop {
            let present = handle.map.raw.get(hash, word, &bin_hash);
            // SAFETY: read from the table under the handle's guard.
            let members = present.map(|present| unsafe { target::<K, V>(present).members() });
            let (Some(present), Some(mut members)) = (present, members) else {
                debug_assert!(false, "an open shadow left the table without its handle");
                return;
            };
            let Some(at) = members.shadows.iter().position(|&e| e == self.entry) else {
                debug_assert!(false, "an open shadow left its word without its handle");
                return;
            };
            members.shadows.swap_remove(at);
            if commit {
                members.visible.push(self.entry);
            }
            let resolved = if members.len() == 0 {
                // An abort of the word's only entry: the slot goes.
                handle
                    .map
                    .raw
                    .remove_if(hash, word, |now| now == present, &bin_hash)
                    .is_ok()
            } else {
                handle.swap(hash, word, present, word_of(members))
            };
            if resolved {
                // Collided first: a `len` between the two undercounts, never overcounts.
                if !commit && present & COLLIDED != 0 {
                    handle.count_collided(-1);
                }
                handle.count_shadows(-1);
                if !commit {
                    // SAFETY: our swap or remove took the entry out of the table; inserts
                    // that compared keys with it may still read it, until their guards end.
                    unsafe {
                        handle
                            .guard
                            .defer_retire(self.entry, reclaim::entry::<K, V>)
                    };
                }
                return;
            }
        }
    }
}

impl<K, V, S, G: Guard> Drop for MapShadow<'_, K, V, S, G> {
    fn drop(&mut self) {
        self.resolve(false);
    }
}

impl<K: fmt::Debug, V: fmt::Debug, S, G: Guard> fmt::Debug for MapShadow<'_, K, V, S, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapShadow")
            .field("key", self.key())
            .field("value", self.value())
            .field("open", &self.open)
            .finish()
    }
}

/// Namespaces (DLHT §3.4.2): many logical maps in one table, for a map whose keys are
/// `(namespace, key)` pairs. The handle looks keys up by `(namespace, &borrowed key)`
/// without building the pair (no `String` allocated to look up a `(u32, String)` key): the
/// pair's hash is its parts' hashes in order, which is how std hashes a tuple.
impl<'m, N, K, V, S, G: Guard> MapRef<'m, (N, K), V, S, G>
where
    N: Hash + Eq,
    K: Hash + Eq,
    S: BuildHasher,
{
    /// A view of the keys of `namespace`: one logical map among those sharing this table.
    ///
    /// ```
    /// let tenants = floe::Map::<(u32, String), u64>::new();
    /// let m = tenants.pin();
    /// let (alice, bob) = (m.namespace(1), m.namespace(2));
    /// alice.insert("visits".to_string(), 3);
    /// bob.insert("visits".to_string(), 7);
    /// assert_eq!(alice.get("visits"), Some(&3)); // no String built for the lookup
    /// assert_eq!(bob.get("visits"), Some(&7));
    /// assert_eq!(m.get(&(2, "visits".to_string())), Some(&7)); // the same keys
    /// assert_eq!(alice.remove("visits"), Some(&3));
    /// assert!(!alice.contains_key("visits") && bob.contains_key("visits"));
    /// ```
    pub fn namespace(&self, namespace: N) -> Namespace<'_, 'm, N, K, V, S, G> {
        Namespace {
            map: self,
            namespace,
        }
    }
}

/// The keys of one namespace of a map keyed by `(namespace, key)` ([`MapRef::namespace`]).
pub struct Namespace<'h, 'm, N, K, V, S, G = LocalGuard<'m>> {
    map: &'h MapRef<'m, (N, K), V, S, G>,
    namespace: N,
}

/// Hashes as the pair `(namespace, key)` does, from a borrowed key.
struct Pair<'a, N, Q: ?Sized>(&'a N, &'a Q);

impl<N: Hash, Q: Hash + ?Sized> Hash for Pair<'_, N, Q> {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        // As `<(N, K) as Hash>::hash`: the fields in order (and `K: Borrow<Q>` hashes as `Q`).
        self.0.hash(state);
        self.1.hash(state);
    }
}

impl<'h, N, K, V, S, G: Guard> Namespace<'h, '_, N, K, V, S, G>
where
    N: Hash + Eq,
    K: Hash + Eq,
    S: BuildHasher,
{
    /// The hash word of `key` in this namespace, and a test for its stored pair.
    fn probe<'q, Q>(&'q self, key: &'q Q) -> (u64, impl Fn(&(N, K)) -> bool + 'q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let word = self.map.map.hasher.hash_one(Pair(&self.namespace, key));
        (word, move |(n, k): &(N, K)| {
            *n == self.namespace && k.borrow() == key
        })
    }

    /// The value of `key` in this namespace.
    pub fn get<Q>(&self, key: &Q) -> Option<&'h V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (word, is) = self.probe(key);
        self.map.get_by(word, is)
    }

    /// Whether `key` is present in this namespace.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Remove `key` from this namespace, returning its value.
    pub fn remove<Q>(&self, key: &Q) -> Option<&'h V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (word, is) = self.probe(key);
        self.map.remove_if_by(word, is, |_| true)
    }
}

impl<'h, N, K, V, S, G: Guard> Namespace<'h, '_, N, K, V, S, G>
where
    N: Hash + Eq + Clone,
    K: Hash + Eq,
    S: BuildHasher,
{
    /// Insert `key -> value` in this namespace if absent ([`MapRef::insert_new`]).
    ///
    /// # Panics
    /// As [`MapRef::insert_new`].
    #[track_caller]
    pub fn insert_new(&self, key: K, value: V) -> Insert<&'h V> {
        self.map.insert_new((self.namespace.clone(), key), value)
    }

    /// Insert `key -> value` in this namespace, replacing a present value ([`MapRef::insert`]).
    ///
    /// # Panics
    /// As [`MapRef::insert`].
    #[track_caller]
    pub fn insert(&self, key: K, value: V) -> Option<&'h V> {
        self.map.insert((self.namespace.clone(), key), value)
    }
}

/// The iterator of [`MapRef::iter`].
pub struct MapIter<'h, K, V, S, G = LocalGuard<'h>> {
    handle: &'h MapRef<'h, K, V, S, G>,
    /// The first hash of the next run of bins to read; `None` once the last was read.
    next: Option<u64>,
    buffer: std::vec::IntoIter<*mut Entry<K, V>>,
}

impl<'h, K, V, S, G: Guard> Iterator for MapIter<'h, K, V, S, G> {
    type Item = (&'h K, &'h V);

    fn next(&mut self) -> Option<(&'h K, &'h V)> {
        loop {
            if let Some(found) = self.buffer.next() {
                // SAFETY: read from the table under the handle's guard, which outlives `'h`.
                let found = unsafe { entry(found) };
                return Some((&found.key, &found.value));
            }
            let start = self.next?;
            let mut entries = Vec::new();
            self.next = self.handle.map.raw.walk_run(start, &bin_hash, |_, value| {
                // SAFETY: as above.
                entries.extend(unsafe { target::<K, V>(value).entries() });
            });
            self.buffer = entries.into_iter();
        }
    }
}

impl<'h, K, V, S, G: Guard> IntoIterator for &'h MapRef<'h, K, V, S, G> {
    type Item = (&'h K, &'h V);
    type IntoIter = MapIter<'h, K, V, S, G>;

    fn into_iter(self) -> MapIter<'h, K, V, S, G> {
        MapIter {
            handle: self,
            next: Some(0),
            buffer: Vec::new().into_iter(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashMap,
        hash::{BuildHasherDefault, Hasher},
        sync::atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    /// A hasher that sends every key to one hash word: every key collides.
    #[derive(Default)]
    struct Constant;
    impl Hasher for Constant {
        fn write(&mut self, _: &[u8]) {}
        fn finish(&self) -> u64 {
            0x1234_5678
        }
    }

    fn small<K: Hash + Eq, V>() -> Map<K, V> {
        Map::builder().bins(2).build().unwrap()
    }

    #[test]
    fn operations_agree_with_std() {
        let map = small::<String, Vec<u8>>();
        let mut model: HashMap<String, Vec<u8>> = HashMap::new();
        let m = map.pin();
        let (operations, keys) = if cfg!(miri) {
            (300u32, 40)
        } else {
            (2000, 300)
        };
        for i in 0..operations {
            let key = format!("k{}", i % keys);
            let value = i.to_le_bytes().to_vec();
            match i % 6 {
                5 => {
                    // Remove an even-length value, lengthen an odd one, insert an odd one.
                    let got = m.compute(key.clone(), |now| match now {
                        Some(v) if v.len() % 2 == 0 => Operation::Remove,
                        Some(v) => Operation::Insert([v.as_slice(), &[7]].concat()),
                        None if i % 4 == 0 => Operation::Abort(i),
                        None => Operation::Insert(value[..3].to_vec()),
                    });
                    match model.get(&key).cloned() {
                        Some(v) if v.len() % 2 == 0 => {
                            assert_eq!(got, Compute::Removed(&v));
                            model.remove(&key);
                        }
                        Some(v) => {
                            let new = [v.as_slice(), &[7]].concat();
                            assert_eq!(got, Compute::Updated { old: &v, new: &new });
                            model.insert(key, new);
                        }
                        None if i % 4 == 0 => assert_eq!(got, Compute::Aborted(i)),
                        None => {
                            assert_eq!(got, Compute::Inserted(&value[..3].to_vec()));
                            model.insert(key, value[..3].to_vec());
                        }
                    }
                }
                0 | 1 => {
                    let got = m.try_insert_new(key.clone(), value.clone()).unwrap();
                    match model.get(&key) {
                        Some(v) => assert_eq!(got, Insert::Present(v)),
                        None => {
                            assert_eq!(got, Insert::Inserted);
                            model.insert(key, value);
                        }
                    }
                }
                2 => assert_eq!(
                    m.try_insert(key.clone(), value.clone()).unwrap().cloned(),
                    model.insert(key, value)
                ),
                3 => assert_eq!(m.remove(key.as_str()).cloned(), model.remove(&key)),
                _ => assert_eq!(m.get(key.as_str()), model.get(&key)),
            }
        }
        assert_eq!(map.len(), model.len());
        drop(m);
        assert_eq!(map.check_invariants(), model.len());
    }

    #[test]
    fn colliding_hashes_are_told_apart_by_eq() {
        let map: Map<u32, u32, _> = Map::builder()
            .hasher(BuildHasherDefault::<Constant>::default())
            .bins(2)
            .build()
            .unwrap();
        let m = map.pin();
        for k in 0..20 {
            assert_eq!(m.try_insert_new(k, k * 10).unwrap(), Insert::Inserted);
        }
        assert_eq!(m.try_insert_new(3, 0).unwrap(), Insert::Present(&30));
        assert_eq!(map.len(), 20);
        assert_eq!(m.try_insert(4, 41).unwrap(), Some(&40));
        assert_eq!(m.update(&5, |v| v + 1), Some(&51));
        assert_eq!(m.remove(&6), Some(&60));
        assert_eq!(m.remove_if(&7, |&v| v == 0), None);
        for k in 0..20 {
            let expect = match k {
                4 => Some(41),
                5 => Some(51),
                6 => None,
                k => Some(k * 10),
            };
            assert_eq!(m.get(&k).copied(), expect, "key {k}");
        }
        assert_eq!(map.len(), 19);
        for k in 0..20 {
            m.remove(&k);
        }
        assert!(map.is_empty());
        drop(m);
        assert_eq!(map.check_invariants(), 0);
    }

    /// Counts its drops, to check every key and value is dropped exactly once.
    struct Counted<'c>(&'c AtomicUsize);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn every_value_is_dropped_once() {
        let drops = AtomicUsize::new(0);
        let made;
        {
            let map = small::<u32, Counted<'_>>();
            let m = map.pin();
            let mut count = 0;
            for k in 0..200u32 {
                let _ = m.try_insert_new(k, Counted(&drops)).unwrap();
                count += 1;
            }
            for k in 0..200u32 {
                // A present key: the rejected value is dropped at once.
                let _ = m.try_insert_new(k, Counted(&drops)).unwrap();
                count += 1;
            }
            for k in (0..200u32).step_by(3) {
                let _ = m.try_insert(k, Counted(&drops)).unwrap();
                count += 1;
            }
            for k in (0..200u32).step_by(5) {
                assert!(m.remove(&k).is_some());
            }
            drop(m);
            map.clear();
            for k in 0..50u32 {
                let _ = map.pin().try_insert_new(k, Counted(&drops)).unwrap();
                count += 1;
            }
            made = count;
        }
        assert_eq!(drops.load(Ordering::Relaxed), made);
    }

    /// `drain` and `into_iter` hand every entry over exactly once, collision lists included
    /// (freed, not leaked: Miri's leak check), and a partly consumed owning iterator drops
    /// the rest; the drained map is empty and usable.
    #[test]
    fn shadow_entries_are_dropped_once_however_they_end() {
        fn exercise<S: BuildHasher>(mut map: Map<u32, Counted<'_>, S>, drops: &AtomicUsize) {
            {
                let m = map.pin();
                let _ = m.insert_new(0, Counted(drops));
                let committed = m.insert_shadow(1, Counted(drops)).ok().unwrap();
                let aborted = m.insert_shadow(2, Counted(drops)).ok().unwrap();
                let dropped = m.insert_shadow(3, Counted(drops)).ok().unwrap();
                // Refused: the new entry is dropped at once.
                assert!(m.insert_shadow(1, Counted(drops)).is_err());
                assert!(matches!(m.insert_new(2, Counted(drops)), Insert::Shadowed));
                let _ = committed.commit();
                aborted.abort();
                drop(dropped);
                // Leaked: the map frees it.
                core::mem::forget(m.insert_shadow(4, Counted(drops)).ok().unwrap());
                map.clear();
            }
            assert_eq!(map.len(), 0);
            assert_eq!(map.drain().count(), 0, "a leaked shadow is not handed over");
            drop(map);
            assert_eq!(drops.load(Ordering::Relaxed), 7);
        }
        let drops = AtomicUsize::new(0);
        exercise(small(), &drops);
        drops.store(0, Ordering::Relaxed);
        // Every key on one hash word: the shadows live in a collision list.
        let colliding = Map::builder()
            .hasher(BuildHasherDefault::<Constant>::default())
            .bins(2)
            .build()
            .unwrap();
        exercise(colliding, &drops);
    }

    /// `remove_by_hash_if` among colliding keys: it takes the entry `is` names and only if
    /// `decide` agrees, leaves the others, and finds nothing under another hash.
    #[test]
    fn remove_by_hash_if_takes_the_entry_named_and_only_if_decided() {
        for colliding in [false, true] {
            let map: Map<u32, u32, BuildHasherDefault<Constant>> = Map::builder()
                .hasher(BuildHasherDefault::<Constant>::default())
                .bins(2)
                .build()
                .unwrap();
            let m = map.pin();
            let keys: &[u32] = if colliding { &[1, 2, 3] } else { &[1] };
            for &k in keys {
                m.insert(k, k * 10);
            }
            let hash = map.hasher().hash_one(1u32);
            let last = *keys.last().unwrap();
            assert!(matches!(
                m.remove_by_hash_if(hash, |_, v| *v == last * 10, |_, _| false),
                ByHash::Kept(&v) if v == last * 10
            ));
            assert_eq!(m.get(&last), Some(&(last * 10)), "kept means kept");
            assert!(matches!(
                m.remove_by_hash_if(hash ^ 1, |_, _| true, |_, _| true),
                ByHash::Absent
            ));
            assert!(matches!(
                m.remove_by_hash_if(hash, |_, v| *v == 99, |_, _| true),
                ByHash::Absent
            ));
            assert!(matches!(
                m.remove_by_hash_if(hash, |_, v| *v == last * 10, |k, _| *k == last),
                ByHash::Removed(&k, &v) if k == last && v == last * 10
            ));
            assert_eq!(m.get(&last), None);
            for &k in &keys[..keys.len() - 1] {
                assert_eq!(m.get(&k), Some(&(k * 10)), "a colliding key stays");
            }
            assert_eq!(map.len(), keys.len() - 1);
            assert_eq!(map.check_invariants(), keys.len() - 1);
        }
    }

    #[test]
    fn drain_and_into_iter_hand_over_every_entry_once() {
        let drops = AtomicUsize::new(0);
        let mut map: Map<u32, Counted<'_>, _> = Map::builder()
            .hasher(BuildHasherDefault::<Constant>::default())
            .bins(2)
            .build()
            .unwrap();
        let mut spread = small::<u32, Counted<'_>>();
        for k in 0..30u32 {
            let _ = map.pin().insert_new(k, Counted(&drops));
            let _ = spread.pin().insert_new(k, Counted(&drops));
        }
        let mut keys: Vec<u32> = map
            .drain()
            .map(|(k, v)| {
                drop(v);
                k
            })
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, (0..30).collect::<Vec<_>>());
        assert_eq!(drops.load(Ordering::Relaxed), 30);
        assert!(map.is_empty());
        assert_eq!(map.check_invariants(), 0);
        // Usable again, with a correct count (the collided keys were forgotten with them).
        let _ = map.pin().insert_new(1, Counted(&drops));
        let _ = map.pin().insert_new(2, Counted(&drops));
        assert_eq!(map.len(), 2);
        drop(map);
        assert_eq!(drops.load(Ordering::Relaxed), 32);
        // Partly consumed: the rest are dropped with the iterator.
        let mut rest = spread.drain();
        let (_, first) = rest.next().unwrap();
        drop(first);
        assert_eq!(rest.len(), 29);
        drop(rest);
        assert_eq!(drops.load(Ordering::Relaxed), 62);
        let _ = spread.pin().insert_new(7, Counted(&drops));
        let owned: Vec<(u32, Counted<'_>)> = spread.into_iter().collect();
        assert_eq!(owned.len(), 1);
        drop(owned);
        assert_eq!(drops.load(Ordering::Relaxed), 63);
    }

    /// A key whose `Eq` panics when `PANIC_EQ` is set.
    struct Touchy(u32);
    impl Hash for Touchy {
        fn hash<H: Hasher>(&self, state: &mut H) {
            self.0.hash(state);
        }
    }
    static PANIC_EQ: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    impl PartialEq for Touchy {
        fn eq(&self, other: &Self) -> bool {
            assert!(!PANIC_EQ.load(Ordering::Relaxed), "Eq panics, as asked");
            self.0 == other.0
        }
    }
    impl Eq for Touchy {}

    /// A panic in `Eq` while an insert or upsert holds its new entry frees that entry (and
    /// drops its value): counted here, and Miri's leak check sees it too.
    #[test]
    fn a_panicking_eq_frees_the_entry_being_inserted() {
        let drops = AtomicUsize::new(0);
        {
            let map: Map<Touchy, Counted<'_>, _> = Map::builder()
                .hasher(BuildHasherDefault::<Constant>::default())
                .bins(2)
                .build()
                .unwrap();
            let m = map.pin();
            assert!(m
                .try_insert_new(Touchy(1), Counted(&drops))
                .unwrap()
                .is_inserted());
            PANIC_EQ.store(true, Ordering::Relaxed);
            for upsert in [false, true] {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if upsert {
                        let _ = m.try_insert(Touchy(2), Counted(&drops));
                    } else {
                        let _ = m.try_insert_new(Touchy(2), Counted(&drops));
                    }
                }));
                assert!(outcome.is_err());
            }
            PANIC_EQ.store(false, Ordering::Relaxed);
            assert_eq!(
                drops.load(Ordering::Relaxed),
                2,
                "both rejected values dropped"
            );
            assert_eq!(map.len(), 1);
        }
        assert_eq!(drops.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn maps_at_rest_compare_as_std_maps() {
        let (a, b) = (small::<String, u32>(), small::<String, u32>());
        assert!(a == b);
        for k in 0..100u32 {
            let _ = a.pin().try_insert_new(k.to_string(), k).unwrap();
            let _ = b
                .pin()
                .try_insert_new((99 - k).to_string(), 99 - k)
                .unwrap();
        }
        assert!(a == b);
        let _ = b.pin().try_insert("5".to_string(), 6).unwrap();
        assert!(a != b);
        let _ = b.pin().try_insert("5".to_string(), 5).unwrap();
        let _ = b.pin().try_insert_new("extra".to_string(), 0).unwrap();
        assert!(a != b);
    }

    /// Entries of tiny and zero-sized types keep the tag bit clear: a set of `u8` and a map
    /// of `()` behave (Miri gives align-1 allocations odd addresses, which this would catch).
    #[test]
    fn tiny_and_zero_sized_entries() {
        let bytes: Map<u8, ()> = small();
        let m = bytes.pin();
        for b in 0..=255u8 {
            assert!(m.try_insert_new(b, ()).unwrap().is_inserted());
        }
        assert_eq!(bytes.len(), 256);
        assert_eq!(m.remove(&7), Some(&()));
        assert_eq!(m.get(&7), None);
        assert_eq!(m.get(&8), Some(&()));
        let unit: Map<(), ()> = small();
        let u = unit.pin();
        assert!(u.try_insert_new((), ()).unwrap().is_inserted());
        assert_eq!(u.try_insert((), ()).unwrap(), Some(&()));
        assert_eq!(u.get(&()), Some(&()));
        assert_eq!(unit.len(), 1);
    }

    #[test]
    fn threads_on_shared_keys_keep_the_map_consistent() {
        let map = small::<String, u64>();
        let (threads, operations) = if cfg!(miri) { (2u64, 60u64) } else { (4, 500) };
        std::thread::scope(|scope| {
            for t in 0..threads {
                let map = &map;
                scope.spawn(move || {
                    for i in 0..operations {
                        let key = format!("{}", i % 20);
                        let m = map.pin();
                        match (i + t) % 4 {
                            0 => drop(m.try_insert_new(key, i).unwrap()),
                            1 => drop(m.try_insert(key, i).unwrap()),
                            2 => drop(m.update(key.as_str(), |v| v + 1)),
                            _ => drop(m.remove(key.as_str())),
                        }
                    }
                });
            }
        });
        let keys = (0..20)
            .filter(|k| map.contains_key(&format!("{k}")))
            .count();
        assert_eq!(map.len(), keys);
        assert_eq!(map.check_invariants(), keys);
    }
}
