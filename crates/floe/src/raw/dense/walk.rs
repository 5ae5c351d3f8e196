//! The dense layout's walks (`mod.rs`, "Walks: every key once, with displacements held
//! off"): a table counts its walks and its displacements in progress, and a walk waits until
//! no displacement runs while a displacement gives up if a walk does (a Dekker pair of
//! counters, argued at `enter_displacement`); then the walk itself, line by line, and the
//! invariant check the tests run on a quiescent table.

use super::{DenseTable, LOCKED, SPILL_SATURATED, SPILL_SHIFT};
use crate::sync::{spin, AtomicUsize, Ordering};

/// A displacement in progress (`DenseTable::enter_displacement`); ends on drop.
pub(super) struct Displacing<'t>(&'t AtomicUsize);

impl Drop for Displacing<'_> {
    fn drop(&mut self) {
        // Release: the displacement's stores happen before a walk that waited for it.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A walk of a table in progress (`DenseTable::start_walk`): displacements wait until drop.
pub(crate) struct Walking<'t>(&'t AtomicUsize);

impl Drop for Walking<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl DenseTable {
    /// Announce a displacement, unless a walk runs (`None`: the write answers `Full`).
    pub(super) fn enter_displacement(&self) -> Option<Displacing<'_>> {
        // Dekker, with the walk's read a read-modify-write (module docs, Walks): our AcqRel
        // increment, then this Acquire load of `walkers`, against `start_walk`'s AcqRel
        // increment of `walkers`, then AcqRel RMW read of `displacing`. An RMW reads the
        // value just before it in its variable's modification order. If the walk's read
        // comes before our increment in that order, our increment reads from it (Release
        // to Acquire): the walk's increment happens before this load, which sees it. If
        // after, the walk's read sees our increment (or the Release decrement that ends
        // our displacement, whose stores the walk then sees). (Two SeqCst loads would do on
        // the hardware; loom does not model SeqCst loads, and the RMW costs a walk once.)
        self.displacing.fetch_add(1, Ordering::AcqRel);
        let displacing = Displacing(&self.displacing);
        if self.walkers.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(displacing)
    }

    /// Hold displacements off this table until the returned guard drops; waits for the ones
    /// in progress (module docs, Walks).
    pub(crate) fn start_walk(&self) -> Walking<'_> {
        // AcqRel: see `enter_displacement`. The RMW reads of `displacing` acquire: they
        // pair with the Release end of a displacement waited for, whose stores the walk
        // then sees, and release, for a displacer's increment that reads from them.
        self.walkers.fetch_add(1, Ordering::AcqRel);
        let walking = Walking(&self.walkers);
        while self.displacing.fetch_add(0, Ordering::AcqRel) > 0 {
            spin();
        }
        walking
    }

    /// Visit every key of the table (a walk must be started, `start_walk`): `visit(key,
    /// Some(value), line)` for a key read in a line not moved, `visit(key, None, line)` for a
    /// key of a moved line or a stashed key whose home is moved, whose value is the next
    /// table's to answer (module docs, Walks). The stash comes first, its keys with `line`
    /// `usize::MAX`.
    pub(crate) fn walk(
        &self,
        rehash: &dyn Fn(u64) -> u64,
        visit: &mut dyn FnMut(u64, Option<u64>, usize),
    ) {
        debug_assert!(
            self.walkers.load(Ordering::Relaxed) > 0,
            "walk without start_walk"
        );
        self.stash.for_each(|key, value| {
            // The stash's loads were Acquire: the writer byte is read after them.
            let moved = self.is_moved(self.lines_of(rehash(key)).0);
            visit(key, (!moved).then_some(value), usize::MAX);
        });
        for line in 0..self.nlines {
            // Acquire loads: each pairs with the Release store that put its key there, and
            // orders the writer byte's load after them.
            let slots = self.lines[line]
                .slots
                .each_ref()
                .map(|slot| slot.load_acquire());
            #[cfg(not(floe_loom))]
            crate::sync::compiler_fence(Ordering::Acquire);
            let moved = self.is_moved(line);
            let shadow = self.empty.shadow_of(line);
            for (at, &(key, value)) in slots.iter().enumerate() {
                // The four loads are four instants: a key removed and inserted again into a
                // later slot of this line between them shows twice (module docs, Walks).
                // Either value was its value during the walk; it is visited once.
                let again = slots[..at].iter().any(|&(earlier, _)| earlier == key);
                if !self.is_empty_key(line, key) && key != shadow && !again {
                    visit(key, (!moved).then_some(value), line);
                }
            }
        }
    }

    /// The table's keys and values, after checking (panicking where one fails) that each key is in
    /// its home, its alternative or the stash, once (`Stash::check_invariants`); that each line's
    /// spill count counts its keys elsewhere, and a line with keys elsewhere has no clean empty
    /// slot; that no line is left locked, and the key count. Open shadow inserts count as keys
    /// in those checks (and in none of the keys), and their count is checked. For tests, on a
    /// quiescent table.
    pub(crate) fn check_invariants(
        &self,
        hash: &dyn Fn(u64) -> u64,
    ) -> std::collections::HashMap<u64, u64> {
        let t = self;
        let mut contents = std::collections::HashMap::new();
        let mut shadows = std::collections::HashSet::new();
        let mut spilled = vec![0usize; t.nlines];
        for line in 0..t.nlines {
            for slot in &t.lines[line].slots {
                let (stored, value) = slot.load();
                if t.is_empty_key(line, stored) {
                    assert_eq!(value, 0, "an empty slot of line {line} holds a value");
                    continue;
                }
                let shadow = stored == t.empty.shadow_of(line);
                let key = if shadow { value } else { stored };
                let (home, alt) = t.lines_of(hash(key));
                assert!(
                    line == home || line == alt,
                    "key {key} in line {line}, not its own"
                );
                if line == alt {
                    spilled[home] += 1;
                }
                if shadow {
                    assert!(shadows.insert(key), "shadow of {key} twice");
                } else {
                    assert!(contents.insert(key, value).is_none(), "key {key} twice");
                }
            }
        }
        for (key, value) in t.stash.check_invariants(hash) {
            spilled[t.lines_of(hash(key)).0] += 1;
            assert!(contents.insert(key, value).is_none(), "key {key} twice");
        }
        for key in t.stash.shadow_keys() {
            spilled[t.lines_of(hash(key)).0] += 1;
            assert!(shadows.insert(key), "shadow of {key} twice");
        }
        assert_eq!(
            t.shadows.load(Ordering::Relaxed),
            shadows.len(),
            "shadows counted"
        );
        if let Some(key) = shadows.iter().find(|key| contents.contains_key(key)) {
            panic!("key {key} present and shadowed");
        }
        for (line, &count) in spilled.iter().enumerate() {
            let meta = t.meta[line].0.load(Ordering::Relaxed);
            assert_eq!(meta & LOCKED, 0, "line {line} left locked");
            let recorded = usize::from(meta >> SPILL_SHIFT);
            if recorded == usize::from(SPILL_SATURATED) {
                assert!(count <= recorded || recorded == usize::from(SPILL_SATURATED));
            } else {
                assert_eq!(recorded, count, "line {line}'s spill count");
            }
            if count > 0 {
                let clean = t.empty.clean_of(line);
                assert!(
                    t.lines[line].slots.iter().all(|s| s.load().0 != clean),
                    "line {line} has keys in their alternatives and a clean empty slot"
                );
            }
        }
        assert_eq!(t.len(), contents.len());
        contents
    }
}
