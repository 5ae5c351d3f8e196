//! The dense layout's stash: the few keys that found no room in either of their two lines.
//!
//! A dense table (`dense/mod.rs`) keeps a key in its home line or its alternative. Filled to its
//! trigger, about one insert in 55 million finds both full with nothing to displace (two
//! lines of keys living in their alternatives: `dense/mod.rs`, Known limits); with nowhere else
//! to put it, the map doubled its table for one key (measured: a population of 2^26 keys
//! into a map whose tables were sized for them ended in a table twice too large). The stash
//! is that somewhere: 16 lines of four slots beside the table, which gets read without a
//! lock, and behind them a list under a mutex, for the keys a migration moves in and finds
//! no room for once the lines are full (only crowded hashes have got that far).
//!
//! - **Where a key goes**: its stash line is a hash of its hash ([`line_of`]), so a get
//!   reads one line of the 16, not all.
//! - **Occupancy**: `occupied` has bit `s` set while line `s` may hold a key, and its top
//!   bit while the list may; a get past both its lines' misses loads this one word (shared,
//!   almost never written) and reads nothing more while it is 0.
//! - **Empty slots**: as in a table line, a word no key of that line can be: 0 for every
//!   line but the stash line of 0's own hash, which gets another word ([`Stash::empty_of`]).
//! - **Who writes**: a key's entry is written only by a thread holding the key's home line
//!   lock (`dense/mod.rs`), so a writer that finds its key here updates the value in place;
//!   taking and freeing slots and changing `occupied` is serialized by `list`'s mutex, since
//!   one stash line holds keys of many homes.
//!
//! # Why a get is right
//!
//! With `dense/mod.rs` (Get): a key stashed is counted in its home's spill count, so its home
//! has no clean empty slot and a get reads both its lines and then the stash. An insert here
//! sets its line's bit (a Release read-modify-write) before it stores the key (Release); a
//! get loads the bits (Acquire) before it reads the line. An entry never moves while its key
//! is present, and a line's bit is cleared only once every slot of the line is free. So a
//! key present throughout a get was stored before the get began, its bit was set before
//! that and stayed set, and the get reads its slot (one 16-byte atomic load, key and value
//! together). A get that loads the bits before an insert sets them linearizes its miss at
//! that load, before the insert's store. The list is read under its mutex.
//!
//! What the loom models check (`dense/mod.rs`, `model`): a get racing a stash insert sees the key
//! absent then present, never the reverse; a get racing a remove in the home of a stashed key
//! finds it, and fails if stashing does not raise the home's spill count (checked by
//! mutation). Weakening `occupied`'s Acquire and Release to Relaxed fails no model: loom has
//! no real time, and a get that must see an insert is ordered after it by a synchronization
//! that carries the bit and the slot by itself (or by the home line's Acquire loads, through
//! the lock its writers share). They are there for the hardware's order of the get's loads,
//! as the table lines' are, and cost nothing on x86.

use crate::raw::{alloc::TableMemory, layout::LinkBucket};
use crate::{
    // A stash line is a link bucket: four slots.
    control::header::LINK_SLOTS as LINE_SLOTS,
    error::Error,
    sync::{AtomicUsize, Mutex, MutexGuard, Ordering},
};

/// Lines of slots a get can read without a lock.
#[cfg(not(floe_loom))]
const LINES: usize = 16;
/// Two lines in loom models: fewer atomics to explore, the same protocol.
#[cfg(floe_loom)]
const LINES: usize = 2;

/// The bit of `occupied` that says the list may hold a key.
const LIST_BIT: usize = 1 << (usize::BITS - 1);

/// Where a stashed key is: a slot of a line, or the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Line { line: usize, slot: usize },
    List,
}

/// The stash of one dense table (module docs).
pub(crate) struct Stash {
    lines: TableMemory<LinkBucket>,
    /// Bit `s`: line `s` may hold a key; [`LIST_BIT`]: the list may.
    occupied: AtomicUsize,
    /// Keys stashed, in the lines and the list (changed under `list`'s mutex).
    len: AtomicUsize,
    /// The keys that found no slot in their stash line (moves only), and the mutex that
    /// serializes every change of the stash's slots and bits.
    list: Mutex<Vec<(u64, u64)>>,
    /// Open shadow inserts (`dense/mod.rs`, Shadow inserts) that a migration moved in and found
    /// no room for, as the list's keys: their keys. Gets never read them; a writer reads and
    /// changes a key's entry under the key's home lock, as a stashed key's.
    shadows: Mutex<Vec<u64>>,
    /// The stash line of the word 0, whose empty word is `empty_there`.
    empty_line: usize,
    empty_there: u64,
}

/// The stash line of a key hashing to `hash`.
#[inline(always)]
fn line_of(hash: u64) -> usize {
    // The top bits of a product with an odd constant depend on every bit of `hash`, not
    // only on the top ones that choose the key's home line.
    (hash.wrapping_mul(0x2545_f491_4f6c_dd1d) >> (64 - LINES.trailing_zeros())) as usize
}

impl Stash {
    /// Slots of the lines (the list is unbounded).
    pub(crate) const SLOTS: usize = LINES * LINE_SLOTS;

    /// An empty stash for keys hashing with `hash`.
    ///
    /// # Errors
    /// `DegenerateHasher` if the first 4096 candidate words all share a stash line with 0;
    /// `AllocationFailed`.
    pub(crate) fn new(hash: &dyn Fn(u64) -> u64) -> Result<Self, Error> {
        let empty_line = line_of(hash(0));
        let empty_there = crate::hash::spread_words()
            .find(|&word| line_of(hash(word)) != empty_line)
            .ok_or(Error::DegenerateHasher)?;
        let lines =
            TableMemory::<LinkBucket>::zeroed(LINES, false).ok_or(Error::AllocationFailed {
                bytes: LINES * core::mem::size_of::<LinkBucket>(),
            })?;
        // Before the stash is shared: the one line whose empty word is not 0.
        for slot in &lines[empty_line].slots {
            slot.store(empty_there, 0);
        }
        Ok(Stash {
            lines,
            occupied: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            list: Mutex::new(Vec::new()),
            shadows: Mutex::new(Vec::new()),
            empty_line,
            empty_there,
        })
    }

    /// The empty word of stash line `line`.
    #[inline(always)]
    fn empty_of(&self, line: usize) -> u64 {
        if line == self.empty_line {
            self.empty_there
        } else {
            0
        }
    }

    fn list(&self) -> MutexGuard<'_, Vec<(u64, u64)>> {
        // The list is left consistent at every await point: a panic elsewhere cannot tear it.
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn shadows(&self) -> MutexGuard<'_, Vec<u64>> {
        // As `list`: never left torn.
        self.shadows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// For a migration placing an open shadow insert of `key` that found no room (the
    /// key's home lock held): keep it here.
    pub(crate) fn add_shadow(&self, key: u64) {
        self.shadows().push(key);
    }

    /// For a writer holding the key's home lock: whether an open shadow insert of `key` is
    /// kept here.
    pub(crate) fn has_shadow(&self, key: u64) -> bool {
        self.shadows().contains(&key)
    }

    /// For a writer holding the key's home lock: take the open shadow insert of `key` out;
    /// whether there was one.
    pub(crate) fn take_shadow(&self, key: u64) -> bool {
        let mut shadows = self.shadows();
        let Some(at) = shadows.iter().position(|&k| k == key) else {
            return false;
        };
        shadows.swap_remove(at);
        true
    }

    /// The keys of the open shadow inserts kept here (a copy).
    pub(crate) fn shadow_keys(&self) -> Vec<u64> {
        self.shadows().clone()
    }

    /// Keys stashed.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Bytes of the lines.
    pub(crate) fn bytes(&self) -> usize {
        self.lines.bytes()
    }

    /// The stashed key's value: lock-free unless the list holds keys (module docs).
    #[inline(always)]
    pub(crate) fn get(&self, hash: u64, key: u64) -> Option<u64> {
        // Acquire: pairs with the Release RMW an insert sets a bit with before storing its
        // key, and keeps the line's loads after this one.
        let occupied = self.occupied.load(Ordering::Acquire);
        if occupied == 0 {
            return None;
        }
        self.get_occupied(occupied, hash, key)
    }

    /// `get` once something is stashed: out of line, to keep the gets' code small.
    #[inline(never)]
    fn get_occupied(&self, occupied: usize, hash: u64, key: u64) -> Option<u64> {
        let line = line_of(hash);
        if occupied & (1 << line) != 0 {
            for slot in &self.lines[line].slots {
                let (stored, value) = slot.load_acquire();
                if stored == key {
                    return Some(value);
                }
            }
        }
        if occupied & LIST_BIT != 0 {
            return self.list().iter().find(|e| e.0 == key).map(|e| e.1);
        }
        None
    }

    /// For a writer holding the key's home lock: where the key is stashed, and its value.
    /// (Exact: only holders of that lock write the key's entry, and the lock's Acquire
    /// ordered their writes before this.)
    pub(crate) fn find(&self, hash: u64, key: u64) -> Option<(Place, u64)> {
        let occupied = self.occupied.load(Ordering::Relaxed);
        if occupied == 0 {
            return None;
        }
        let line = line_of(hash);
        if occupied & (1 << line) != 0 {
            for (slot, entry) in self.lines[line].slots.iter().enumerate() {
                let (stored, value) = entry.load();
                if stored == key {
                    return Some((Place::Line { line, slot }, value));
                }
            }
        }
        if occupied & LIST_BIT != 0 {
            let list = self.list();
            let &(_, value) = list.iter().find(|e| e.0 == key)?;
            return Some((Place::List, value));
        }
        None
    }

    /// For a writer holding the key's home lock: the stashed key at `place` holds `value`.
    pub(crate) fn set(&self, place: Place, key: u64, value: u64) {
        match place {
            // Release: as a table slot's store (a get that reads the pair sees what the
            // writer wrote before it).
            Place::Line { line, slot } => self.lines[line].slots[slot].store(key, value),
            Place::List => {
                if let Some(entry) = self.list().iter_mut().find(|e| e.0 == key) {
                    entry.1 = value;
                }
            }
        }
    }

    /// For a writer holding the key's home lock: remove the stashed key at `place`.
    pub(crate) fn remove(&self, place: Place, key: u64) {
        let mut list = self.list();
        match place {
            Place::Line { line, slot } => {
                let empty = self.empty_of(line);
                self.lines[line].slots[slot].store(empty, 0);
                if self.lines[line].slots.iter().all(|s| s.load().0 == empty) {
                    // After the slot is freed (module docs): Relaxed, since a get that still
                    // sees the bit reads a free slot, a miss either way.
                    self.occupied.fetch_and(!(1 << line), Ordering::Relaxed);
                }
            }
            Place::List => {
                list.retain(|e| e.0 != key);
                if list.is_empty() {
                    self.occupied.fetch_and(!LIST_BIT, Ordering::Relaxed);
                }
            }
        }
        self.len.fetch_sub(1, Ordering::Relaxed);
    }

    /// For a writer holding the key's home lock, the key absent: stash it in a free slot of
    /// its stash line, else (if `list_too`) in the list. Whether it was stashed.
    pub(crate) fn insert(&self, hash: u64, key: u64, value: u64, list_too: bool) -> bool {
        let mut list = self.list();
        let line = line_of(hash);
        let empty = self.empty_of(line);
        let free = self.lines[line]
            .slots
            .iter()
            .position(|s| s.load().0 == empty);
        // Release RMW, before the key is stored (module docs): pairs with `get`'s Acquire.
        if let Some(slot) = free {
            self.occupied.fetch_or(1 << line, Ordering::Release);
            self.lines[line].slots[slot].store(key, value);
        } else if list_too {
            self.occupied.fetch_or(LIST_BIT, Ordering::Release);
            list.push((key, value));
        } else {
            return false;
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Every stashed pair (for a migration moving them on, and walks): the lines' slots
    /// read with acquire loads, then a copy of the list.
    pub(crate) fn for_each(&self, mut visit: impl FnMut(u64, u64)) {
        // Acquire: as in `get`.
        let occupied = self.occupied.load(Ordering::Acquire);
        if occupied == 0 {
            return;
        }
        for line in (0..LINES).filter(|&line| occupied & (1 << line) != 0) {
            for slot in &self.lines[line].slots {
                let (key, value) = slot.load_acquire();
                if key != self.empty_of(line) {
                    visit(key, value);
                }
            }
        }
        if occupied & LIST_BIT != 0 {
            let list = self.list().clone();
            for (key, value) in list {
                visit(key, value);
            }
        }
    }

    /// The stashed pairs, after checking (panicking where one fails) that each key is in
    /// its own stash line, each free slot holds its line's empty word and no value, the bits
    /// cover every line and the list holding keys, and the count. For tests, on a quiescent
    /// table.
    pub(crate) fn check_invariants(&self, hash: &dyn Fn(u64) -> u64) -> Vec<(u64, u64)> {
        let occupied = self.occupied.load(Ordering::Relaxed);
        let mut pairs = Vec::new();
        for line in 0..LINES {
            for slot in &self.lines[line].slots {
                let (key, value) = slot.load();
                if key == self.empty_of(line) {
                    assert_eq!(value, 0, "a free slot of stash line {line} holds a value");
                    continue;
                }
                assert_eq!(line_of(hash(key)), line, "key {key} in another stash line");
                assert_ne!(
                    occupied & (1 << line),
                    0,
                    "stash line {line} holds keys, bit clear"
                );
                pairs.push((key, value));
            }
        }
        let list = self.list();
        assert!(
            list.is_empty() || occupied & LIST_BIT != 0,
            "list holds keys, bit clear"
        );
        pairs.extend(list.iter().copied());
        assert_eq!(pairs.len(), self.len(), "the stash's count");
        pairs
    }
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    use super::*;
    use crate::hash::splitmix as mixed;

    #[test]
    fn keys_go_in_and_out_of_their_lines_then_the_list() {
        let stash = Stash::new(&mixed).unwrap();
        assert_eq!(stash.get(mixed(5), 5), None);
        // Keys of one stash line: four fit, the fifth only in the list.
        let line = line_of(mixed(0));
        let same: Vec<u64> = (0..)
            .filter(|&k| line_of(mixed(k)) == line)
            .take(LINE_SLOTS + 1)
            .collect();
        for &k in &same[..LINE_SLOTS] {
            assert!(stash.insert(mixed(k), k, k + 100, false));
        }
        let last = same[LINE_SLOTS];
        assert!(!stash.insert(mixed(last), last, 1, false));
        assert!(stash.insert(mixed(last), last, 1, true));
        assert_eq!(stash.len(), LINE_SLOTS + 1);
        for &k in &same[..LINE_SLOTS] {
            assert_eq!(stash.get(mixed(k), k), Some(k + 100));
        }
        assert_eq!(stash.get(mixed(last), last), Some(1));
        assert_eq!(stash.find(mixed(last), last), Some((Place::List, 1)));
        stash.set(Place::List, last, 2);
        assert_eq!(stash.get(mixed(last), last), Some(2));
        let (place, _) = stash.find(mixed(same[1]), same[1]).unwrap();
        stash.set(place, same[1], 7);
        assert_eq!(stash.get(mixed(same[1]), same[1]), Some(7));
        assert_eq!(stash.check_invariants(&mixed).len(), LINE_SLOTS + 1);
        for &k in &same {
            let (place, _) = stash.find(mixed(k), k).unwrap();
            stash.remove(place, k);
            assert_eq!(stash.get(mixed(k), k), None);
        }
        assert_eq!(stash.len(), 0);
        assert_eq!(stash.occupied.load(Ordering::Relaxed), 0);
        assert!(stash.check_invariants(&mixed).is_empty());
    }

    #[test]
    fn the_word_zero_and_the_empty_words_are_keys() {
        let stash = Stash::new(&mixed).unwrap();
        for key in [0, stash.empty_there] {
            assert_eq!(stash.get(mixed(key), key), None);
            assert!(stash.insert(mixed(key), key, 9, false));
            assert_eq!(stash.get(mixed(key), key), Some(9));
        }
        let mut seen = Vec::new();
        stash.for_each(|k, v| seen.push((k, v)));
        seen.sort_unstable();
        let mut expected = vec![(0, 9), (stash.empty_there, 9)];
        expected.sort_unstable();
        assert_eq!(seen, expected);
        assert_eq!(stash.check_invariants(&mixed).len(), 2);
    }

    #[test]
    fn a_constant_hash_has_no_empty_words() {
        assert!(matches!(Stash::new(&|_| 7), Err(Error::DegenerateHasher)));
    }
}
