//! The index: each key's 64-bit hash mapped to its item's address in a `floe::FlatMap<u64,
//! u64>`, and the `seize` collector that frees the items it no longer holds.
//!
//! # Why not `floe::Map`
//!
//! A `Map` keeps each key and value in an entry of its own allocating, fixed-size for the
//! map's types; an item's value, of any length, would be a second allocation beside it. An
//! item here is one allocation, header, key and value (`item.rs`), and the index holds its
//! address: the word a `FlatMap` keeps inline in the bin's line, under the key's hash.
//!
//! # The protocol
//!
//! Every operation runs under a pinned handle ([`Pinned`]), which holds a guard of the
//! index's collector; an item an operation reads stays allocated until that guard ends.
//!
//! - **get**: the `FlatMap`'s get of the hash; the item its word names is this key's if its
//!   key bytes are equal (else the key is absent: below).
//! - **compute**: read the word, decide on the item it names (if it is this key's), and
//!   publish the decision with one operation of the `FlatMap`: an insert-if-absent where the
//!   hash was absent, a compare-exchange from the word read otherwise. If that fails, the
//!   word changed since it was read: decide again (so a decision may run more than once, and
//!   each decision is one atomic step with the write it makes).
//! - **remove_if**: the `FlatMap`'s `remove_if` of the hash, accepting only the key's item
//!   that the caller's test accepts.
//!
//! Each write is linearized at its `FlatMap` operation, a get at its load of the word. The
//! thread whose operation took a word out of the index (a replacing compare-exchange, a
//! removal) is the only one that retires its item, once, through the collector
//! (`Guard::defer_retire`): it is freed after every guard that could have read the word has
//! ended. An item is written in full before its word is published, and the engine's store or
//! compare-exchange that publishes it is `Release` (`AcqRel`), paired with the `Acquire`
//! fence after a search's loads of the slot, so a reader that sees the word sees the item.
//! A word is read inside the guard, after its entry (the engine loads slots after an
//! `Acquire` load of the bin's header and fences `Acquire` after them, which `seize`'s
//! protection asks for; `floe::Map`'s entries rely on the same). ABA on a word is harmless:
//! a word read under a guard names an allocation not freed, so not reused, before the guard
//! ends, and every compare-exchange expecting it runs under that guard.
//!
//! # Two keys with one hash
//!
//! The index has one slot per 64-bit hash (`DefaultHashBuilder`, seeded at random per
//! process: not a keyed pseudo-random function, so a client that could read hashes back
//! could aim for a collision; memcached's clients may delete any key anyway). If two keys'
//! hashes are equal, which for a million keys happens with a probability near 2^-25 per
//! process, the second key's store displaces the first's item as an eviction would
//! ([`Computed::Inserted`]'s `displaced`), and a read of either key finds the other's item
//! and answers a miss: a cache may drop an item at any time, and no read
//! ever answers another key's value.

use core::hash::BuildHasher;

use floe::{hash::DefaultHashBuilder, CompareExchangeError, FlatMap, Insert};
use seize::{Collector, Guard, LocalGuard};

use super::item::{prefetch_line, Item, ItemBox};

/// What a [`Pinned::compute`] decision asks for.
pub(super) enum Decision<R> {
    /// Store this item: insert it if the key is absent, replace the key's item if present.
    Insert(ItemBox),
    /// Change nothing; `compute` answers [`Computed::Aborted`] with this.
    Abort(R),
}

/// What [`Pinned::compute`] did. References live as long as the handle.
pub(super) enum Computed<'g, R> {
    /// The key was absent and now has the item `new`. Where another key's item held the
    /// hash (module docs), it was taken out: `displaced`, to be uncharged as an eviction.
    /// `hash` is the key's (its queue node's, so the caller need not hash it again).
    Inserted {
        new: &'g Item,
        displaced: Option<&'g Item>,
        hash: u64,
    },
    /// The key's item `old` was replaced by `new`.
    Updated { old: &'g Item, new: &'g Item },
    /// The decision aborted with this; nothing changed.
    Aborted(R),
}

/// Items by key: see the module docs.
pub(super) struct Index {
    words: FlatMap<u64, u64>,
    hasher: DefaultHashBuilder,
    collector: Collector,
    /// Tests: every key hashes alike, so each store displaces the key before it.
    #[cfg(test)]
    pub(super) crowded: bool,
}

impl Index {
    /// An index sized for `keys` keys, hashing them with `hasher`.
    pub(super) fn new(keys: usize, hasher: DefaultHashBuilder) -> Result<Self, floe::Error> {
        Ok(Index {
            // The keys are hashes already; a fixed seed only spreads them again.
            words: FlatMap::builder()
                .hasher(DefaultHashBuilder::with_seed(0x0069_6e64_6578))
                .capacity(keys)
                .build()?,
            hasher,
            collector: Collector::new(),
            #[cfg(test)]
            crowded: false,
        })
    }

    /// A handle for operations: items read through it live as long as it does.
    pub(super) fn pin(&self) -> Pinned<'_> {
        Pinned {
            index: self,
            guard: self.collector.enter(),
        }
    }

    /// A key's hash: its slot's key.
    pub(super) fn hash(&self, key: &[u8]) -> u64 {
        #[cfg(test)]
        if self.crowded {
            return 0x0c20_3d3d;
        }
        self.hasher.hash_one(key)
    }

    /// The items it holds.
    pub(super) fn len(&self) -> usize {
        self.words.len()
    }

    /// The table's statistics (its bytes, slots).
    pub(super) fn stats(&self) -> floe::Stats {
        self.words.stats()
    }

    /// Room for `additional` more items without a growth.
    pub(super) fn reserve(&self, additional: usize) -> Result<(), floe::Error> {
        self.words.reserve(additional)
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.words.for_each(|_, word| {
            // SAFETY: `&mut self`: no handle lives, so the index's words are its own, each
            // visited once. Items retired before are freed by the collector's drop, after.
            drop(unsafe { ItemBox::from_word(word) });
        });
    }
}

/// Free a retired item (the collector calls it once no guard can read it).
///
/// # Safety
/// `base` is the address of an item taken out of the index (its word), retired once.
unsafe fn reclaim(base: *mut u8, _: &Collector) {
    // SAFETY: caller; the word is the address.
    drop(unsafe { ItemBox::from_word(base.expose_provenance() as u64) });
}

/// An index pinned: see [`Index::pin`].
pub(super) struct Pinned<'i> {
    index: &'i Index,
    guard: LocalGuard<'i>,
}

/// Keys a [`Pinned::get_many`] call looks up in one batch of the `FlatMap` (on the stack).
const CHUNK: usize = 32;

impl<'i> Pinned<'i> {
    /// The item of `word`, read under this handle.
    fn item(&self, word: u64) -> &Item {
        // SAFETY: a word read from the index under this handle's guard: its item is freed
        // only after the guard ends (module docs), and the reference is tied to `&self`.
        unsafe { Item::at(word) }
    }

    /// Retire the item of a word this thread took out of the index.
    fn retire(&self, word: u64) {
        // SAFETY: the caller's operation took `word` out of the index, so it retires it
        // once; readers that may still hold it entered before, and the collector waits for
        // them.
        unsafe {
            self.guard.defer_retire(
                core::ptr::with_exposed_provenance_mut::<u8>(word as usize),
                reclaim,
            )
        }
    }

    /// `key`'s item.
    pub(super) fn get(&self, key: &[u8]) -> Option<&Item> {
        let word = self.index.words.get(&self.index.hash(key))?;
        Some(self.item(word)).filter(|item| item.key() == key)
    }

    /// Each key's item (`found[i]` for `keys[i]`), the slots' lines prefetched in batches
    /// (DLHT's, through `FlatMap::batch`), then the items' first lines before they are read.
    pub(super) fn get_many<'s>(&'s self, keys: &[&[u8]], found: &mut [Option<&'s Item>]) {
        assert_eq!(keys.len(), found.len(), "one answer per key");
        let mut hashes = [0u64; CHUNK];
        let mut words = [None; CHUNK];
        for (keys, found) in keys.chunks(CHUNK).zip(found.chunks_mut(CHUNK)) {
            let n = keys.len();
            for (hash, key) in hashes.iter_mut().zip(keys) {
                *hash = self.index.hash(key);
            }
            self.index
                .words
                .batch()
                .get_many(&hashes[..n], &mut words[..n])
                .expect("as many answers as keys");
            for &word in words[..n].iter().flatten() {
                // The item's first line: its header and the key compared next.
                prefetch_line(word as usize as *const u8);
            }
            for ((slot, word), key) in found.iter_mut().zip(&words[..n]).zip(keys) {
                *slot = word
                    .map(|word| self.item(word))
                    .filter(|item| item.key() == *key);
            }
        }
    }

    /// The item its queue node names: the one under `hash` if `is` accepts it.
    pub(super) fn find_by_hash(&self, hash: u64, is: impl Fn(&Item) -> bool) -> Option<&Item> {
        let word = self.index.words.get(&hash)?;
        Some(self.item(word)).filter(|item| is(item))
    }

    /// Remove `key`'s item, `hash` the key's ([`Index::hash`]), if `accept` says so (it may
    /// run more than once, if the item changes meanwhile); the item removed, retired
    /// (readable while this handle lives).
    pub(super) fn remove_if(
        &self,
        hash: u64,
        key: &[u8],
        mut accept: impl FnMut(&Item) -> bool,
    ) -> Option<&Item> {
        let word = self.index.words.remove_if(&hash, |word| {
            let item = self.item(word);
            item.key() == key && accept(item)
        })?;
        self.retire(word);
        Some(self.item(word))
    }

    /// Decide on `key`'s item (`None` if absent) and publish the decision in one atomic step
    /// (module docs); `decide` runs again if the item changed meanwhile.
    pub(super) fn compute<R>(
        &self,
        key: &[u8],
        mut decide: impl FnMut(Option<&Item>) -> Decision<R>,
    ) -> Computed<'_, R> {
        let words = &self.index.words;
        let hash = self.index.hash(key);
        let mut read = words.get(&hash);
        loop {
            let present = read.map(|word| self.item(word));
            let own = present.filter(|item| item.key() == key);
            let new = match decide(own) {
                Decision::Abort(why) => return Computed::Aborted(why),
                Decision::Insert(new) => new.into_word(),
            };
            let published = match read {
                None => match words.insert_new(hash, new) {
                    Insert::Inserted => Ok(()),
                    Insert::Present(word) => Err(Some(word)),
                    Insert::Shadowed => unreachable!("the index makes no shadows"),
                },
                Some(old) => match words.compare_exchange(&hash, old, new) {
                    Ok(_) => Ok(()),
                    Err(CompareExchangeError::Mismatch(word)) => Err(Some(word)),
                    Err(CompareExchangeError::Absent) => Err(None),
                },
            };
            match published {
                Ok(()) => {
                    let new = self.item(new);
                    return match (read, own) {
                        (None, _) => Computed::Inserted {
                            new,
                            displaced: None,
                            hash,
                        },
                        (Some(old), Some(own)) => {
                            self.retire(old);
                            Computed::Updated { old: own, new }
                        }
                        (Some(old), None) => {
                            self.retire(old);
                            Computed::Inserted {
                                new,
                                displaced: present,
                                hash,
                            }
                        }
                    };
                }
                Err(now) => {
                    // SAFETY: `new` was never published: this thread owns it still.
                    drop(unsafe { ItemBox::from_word(new) });
                    read = now;
                }
            }
        }
    }

    /// Insert each item whose key is absent, in one batch (each slot prefetched ahead, as
    /// DLHT's batches); `each(i, inserted)` for each of `items[i]`. Those not inserted are
    /// freed.
    pub(super) fn insert_new_many(&self, items: Vec<ItemBox>, mut each: impl FnMut(usize, bool)) {
        let pairs: Vec<(u64, u64)> = items
            .into_iter()
            .map(|item| (self.index.hash(item.key()), item.into_word()))
            .collect();
        self.index
            .words
            .batch()
            .insert_new_each(&pairs, |i, outcome| {
                let inserted = matches!(outcome, Ok(Insert::Inserted));
                each(i, inserted);
                if !inserted {
                    // SAFETY: not published: this thread owns it still.
                    drop(unsafe { ItemBox::from_word(pairs[i].1) });
                }
            });
    }

    /// The items, weakly consistent (as `FlatMap::iter`).
    pub(super) fn iter(&self) -> impl Iterator<Item = &Item> + '_ {
        self.index.words.values().map(|word| self.item(word))
    }

    /// One stretch of a walk over the items taken in pieces (`FlatMap::iter_run`).
    pub(super) fn iter_run(&self, from: u64, mut visit: impl FnMut(&Item)) -> Option<u64> {
        self.index
            .words
            .iter_run(from, |_, word| visit(self.item(word)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::item::Fields;

    fn item(key: &[u8], value: &[u8]) -> ItemBox {
        let fields = Fields {
            cas: 1,
            seq: 0,
            flags: 0,
            exptime: 0,
            time: 0,
            generation: 0,
            last_access: 0,
            node: 0,
            binary_key: false,
            stale: false,
            token_sent: false,
        };
        ItemBox::new(key, &[value], fields)
    }

    fn value<'a>(index: &'a Pinned<'_>, key: &[u8]) -> Option<&'a [u8]> {
        index.get(key).map(Item::data)
    }

    /// Every operation through a small index: inserts, replacements, aborts, removals, a
    /// batch of gets, a batch of inserts, a walk in pieces; every item taken out is retired
    /// and the rest freed with the index (Miri checks both: no leak, no use after free).
    #[test]
    fn operations_answer_and_free_what_they_take_out() {
        let index = Index::new(4, DefaultHashBuilder::with_seed(1)).expect("index");
        let pinned = index.pin();
        let insert = |key: &[u8], v: &[u8]| {
            pinned.compute(key, |present| match present {
                None => Decision::<()>::Insert(item(key, v)),
                Some(_) => Decision::Abort(()),
            })
        };
        assert!(matches!(
            insert(b"a", b"1"),
            Computed::Inserted {
                displaced: None,
                ..
            }
        ));
        assert!(matches!(insert(b"a", b"2"), Computed::Aborted(())));
        assert_eq!(value(&pinned, b"a"), Some(&b"1"[..]));
        let replaced = pinned.compute(b"a", |present| {
            let old = present.expect("present").data();
            Decision::<()>::Insert(item(b"a", &[old, b"+"].concat()))
        });
        match replaced {
            Computed::Updated { old, new } => {
                assert_eq!((old.data(), new.data()), (&b"1"[..], &b"1+"[..]))
            }
            _ => panic!("an update"),
        }
        for i in 0..100u32 {
            insert(format!("k{i}").as_bytes(), &i.to_le_bytes());
        }
        let keys: Vec<Vec<u8>> = (0..120u32).map(|i| format!("k{i}").into_bytes()).collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let mut found = vec![None; keys.len()];
        pinned.get_many(&keys, &mut found);
        for (i, found) in found.iter().enumerate() {
            let expected = (i < 100).then(|| (i as u32).to_le_bytes());
            assert_eq!(
                found.map(Item::data),
                expected.as_ref().map(|v| &v[..]),
                "k{i}"
            );
        }
        assert!(pinned
            .remove_if(index.hash(b"k3"), b"k3", |_| false)
            .is_none());
        assert_eq!(
            pinned
                .remove_if(index.hash(b"k3"), b"k3", |_| true)
                .map(Item::data),
            Some(&3u32.to_le_bytes()[..])
        );
        assert!(pinned.get(b"k3").is_none());
        assert!(pinned
            .remove_if(index.hash(b"k3"), b"k3", |_| true)
            .is_none());
        let restored: Vec<ItemBox> = [&b"k3"[..], b"k4", b"new"]
            .iter()
            .map(|k| item(k, b"r"))
            .collect();
        let mut inserted = Vec::new();
        pinned.insert_new_many(restored, |i, stored| inserted.push((i, stored)));
        assert_eq!(inserted, [(0, true), (1, false), (2, true)]);
        let (mut seen, mut from) = (0, Some(0));
        while let Some(at) = from {
            from = pinned.iter_run(at, |_| seen += 1);
        }
        assert_eq!(seen, index.len());
        assert_eq!(pinned.iter().count(), 102);
    }

    /// Keys on one hash: an insert displaces the other key's item (handed back to uncharge),
    /// and no read, update or removal of one key reaches the other's item.
    #[test]
    fn a_shared_hash_displaces_and_never_confuses() {
        let mut index = Index::new(4, DefaultHashBuilder::with_seed(1)).expect("index");
        index.crowded = true;
        let pinned = index.pin();
        let store =
            |key: &[u8], v: &[u8]| pinned.compute(key, |_| Decision::<()>::Insert(item(key, v)));
        assert!(matches!(
            store(b"a", b"1"),
            Computed::Inserted {
                displaced: None,
                ..
            }
        ));
        assert!(pinned.get(b"b").is_none());
        assert!(pinned.remove_if(index.hash(b"b"), b"b", |_| true).is_none());
        let seen_b = pinned.compute(b"b", |present| {
            assert!(present.is_none(), "a's item is not b's");
            Decision::Abort(())
        });
        assert!(matches!(seen_b, Computed::Aborted(())));
        match store(b"b", b"2") {
            Computed::Inserted {
                new,
                displaced: Some(displaced),
                ..
            } => {
                assert_eq!(
                    (new.key(), displaced.key(), displaced.data()),
                    (&b"b"[..], &b"a"[..], &b"1"[..])
                );
            }
            _ => panic!("b displaces a"),
        }
        assert!(pinned.get(b"a").is_none());
        assert_eq!(value(&pinned, b"b"), Some(&b"2"[..]));
        let mut found = [None; 2];
        pinned.get_many(&[b"a", b"b"], &mut found);
        assert_eq!(found.map(|f| f.map(Item::data)), [None, Some(&b"2"[..])]);
        assert_eq!(index.len(), 1);
    }

    /// Threads replacing and removing the same keys while others read them: every read sees
    /// a whole item of its own key (a replaced item stays readable while a reader's guard
    /// lives), and nothing leaks or is freed twice (Miri).
    #[test]
    fn readers_see_whole_items_while_writers_replace_them() {
        let index = Index::new(16, DefaultHashBuilder::with_seed(2)).expect("index");
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        std::thread::scope(|scope| {
            for writer in 0..2u8 {
                let index = &index;
                scope.spawn(move || {
                    for round in 0..rounds {
                        let pinned = index.pin();
                        let key = [b'k', (round % 4) as u8];
                        if round % 5 == 4 {
                            pinned.remove_if(index.hash(&key), &key, |_| true);
                        } else {
                            let fill = [writer; 40];
                            pinned.compute(&key, |_| Decision::<()>::Insert(item(&key, &fill)));
                        }
                    }
                });
            }
            let index = &index;
            scope.spawn(move || {
                for round in 0..rounds {
                    let pinned = index.pin();
                    let key = [b'k', (round % 4) as u8];
                    if let Some(found) = pinned.get(&key) {
                        assert_eq!(found.key(), key);
                        let data = found.data();
                        assert!(data.len() == 40 && data.iter().all(|b| *b == data[0]));
                    }
                }
            });
        });
    }

    /// Threads counting on shared keys through `compute` while the index grows from room for
    /// one key under their fresh inserts and removals: every increment lands exactly once
    /// (a decision published from a stale word would lose one), a reader never sees a count
    /// go down, and each thread's own keys end as it left them. Checked by mutation: deciding
    /// again on the word first read after a failed publication fails the count check, and an
    /// unconditional store in place of the compare-exchange aborts on a double free.
    #[test]
    fn counting_through_compute_loses_nothing_while_the_index_grows() {
        const HOT: u8 = 3;
        let index = Index::new(1, DefaultHashBuilder::with_seed(3)).expect("index");
        let slots_at_start = index.stats().slots;
        let (threads, rounds) = if cfg!(miri) { (2, 24) } else { (3, 3000) };
        let count = |item: Option<&Item>| {
            item.map_or(0, |item| {
                u64::from_le_bytes(item.data().try_into().expect("8 bytes"))
            })
        };
        std::thread::scope(|scope| {
            for thread in 0..threads {
                let index = &index;
                scope.spawn(move || {
                    let mut seen = [0u64; HOT as usize];
                    for round in 0..rounds {
                        let pinned = index.pin();
                        let hot = [b'h', (round % u32::from(HOT)) as u8];
                        pinned.compute(&hot, |own| {
                            let next = (count(own) + 1).to_le_bytes();
                            Decision::<()>::Insert(item(&hot, &next))
                        });
                        // Fresh keys grow the index; every other one is removed again.
                        let fresh = [b'f', thread, (round >> 8) as u8, round as u8];
                        let stored = pinned.compute(&fresh, |own| {
                            assert!(own.is_none(), "a fresh key is absent");
                            Decision::<()>::Insert(item(&fresh, &u64::from(round).to_le_bytes()))
                        });
                        assert!(matches!(
                            stored,
                            Computed::Inserted {
                                displaced: None,
                                ..
                            }
                        ));
                        if round % 2 == 1 {
                            assert!(pinned
                                .remove_if(index.hash(&fresh), &fresh, |_| true)
                                .is_some());
                        }
                        // Counts only grow, through single and batched reads alike.
                        let keys: Vec<[u8; 2]> = (0..HOT).map(|k| [b'h', k]).collect();
                        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                        let mut found = vec![None; keys.len()];
                        pinned.get_many(&keys, &mut found);
                        for (k, item) in found.into_iter().enumerate() {
                            for now in [count(item), count(pinned.get(keys[k]))] {
                                assert!(now >= seen[k], "count of hot key {k} went down");
                                seen[k] = now;
                            }
                        }
                    }
                });
            }
        });
        let pinned = index.pin();
        for k in 0..HOT {
            let expected = (0..rounds)
                .filter(|r| r % u32::from(HOT) == u32::from(k))
                .count();
            let got = count(pinned.get(&[b'h', k]));
            assert_eq!(got, (expected * usize::from(threads)) as u64, "hot key {k}");
        }
        for thread in 0..threads {
            for round in 0..rounds {
                let fresh = [b'f', thread, (round >> 8) as u8, round as u8];
                let got = pinned.get(&fresh).map(Item::data);
                let want = u64::from(round).to_le_bytes();
                assert_eq!(got, (round % 2 == 0).then_some(&want[..]), "{fresh:?}");
            }
        }
        let hot_and_kept = usize::from(HOT) + usize::from(threads) * (rounds as usize).div_ceil(2);
        assert_eq!(index.len(), hot_and_kept);
        assert!(index.stats().slots > slots_at_start, "the index grew");
    }
}
