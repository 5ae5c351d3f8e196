//! loom models of the bin protocols: every interleaving (up to the preemption bound) of two or
//! three threads on one bin. Run with `ci/loom.sh`:
//! `RUSTFLAGS="--cfg floe_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p floe --test loom`.
#![cfg(floe_loom)]

use std::{
    hash::{BuildHasher, Hasher},
    sync::Arc,
};

use floe::{Error, FlatMap, Insert, ResizeMode, Taken};
use loom::thread;

/// Bit 0 of the key picks the bin of a 2-bin table (fastrange uses the top bit of the hash):
/// even keys share bin 0, odd keys bin 1. Lets a model put chosen keys in one bin.
#[derive(Clone, Copy, Default)]
struct LowBit;

struct LowBitHasher(u64);

impl Hasher for LowBitHasher {
    fn write_u64(&mut self, word: u64) {
        self.0 = word.rotate_right(1);
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("the map hashes words only")
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl BuildHasher for LowBit {
    type Hasher = LowBitHasher;
    fn build_hasher(&self) -> LowBitHasher {
        LowBitHasher(0)
    }
}

type Map = FlatMap<u64, u64, LowBit>;

/// Two bins of three slots, `links` link buckets, never growing.
fn map(links: usize) -> Arc<Map> {
    Arc::new(
        FlatMap::<u64, u64>::builder()
            .bins(2)
            .link_buckets(links)
            .max_bins(2)
            .hasher(LowBit)
            .build()
            .unwrap(),
    )
}

/// Keys of bin 0 of the two-bin map that go to four different bins (0, 1, 2, 3) of the 16-bin
/// table it grows into (the hasher rotates bit 0 to the top; the next bits down are the key's
/// bits 63, 62, 61).
const SPLIT: [u64; 4] = [0, 1 << 61, 2 << 61, 3 << 61];

/// A key of bin 1 of a four-bin map (and of bin 0 of a two-bin one): its hash's top bits are
/// 01.
const SPLIT_BIN_1: u64 = 1 << 63;

/// A two-bin map without link buckets whose bin 0 is full (`SPLIT[0..3]`, value = key + 1), so
/// the next insert into bin 0 grows it. `ResizeMode::Incremental`: the rest of the move is
/// left to whoever touches the map next.
fn full_growing_map() -> Arc<Map> {
    let m = Arc::new(
        FlatMap::<u64, u64>::builder()
            .bins(2)
            .link_buckets(0)
            .hasher(LowBit)
            .build()
            .unwrap(),
    );
    for &k in &SPLIT[..3] {
        assert!(m.try_insert_new(k, k + 1).unwrap().is_inserted());
    }
    m
}

/// As [`full_growing_map`], in `ResizeMode::Blocking`: the insert that grows it moves every
/// bin itself.
fn full_blocking_map() -> Arc<Map> {
    let m = Arc::new(
        FlatMap::<u64, u64>::builder()
            .bins(2)
            .link_buckets(0)
            .resize_mode(ResizeMode::Blocking)
            .hasher(LowBit)
            .build()
            .unwrap(),
    );
    for &k in &SPLIT[..3] {
        assert!(m.try_insert_new(k, k + 1).unwrap().is_inserted());
    }
    m
}

/// Check `f` under loom, and that loom found more than one interleaving to explore (a model
/// whose threads never overlap proves nothing; seen when the thread that spawns does all its
/// work before the spawned one starts).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    check_explored(builder, f);
}

fn check_explored(builder: loom::model::Builder, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let runs = runs.load(Ordering::Relaxed);
    assert!(
        runs > 1,
        "loom explored {runs} execution: the model is vacuous"
    );
}

#[test]
fn two_inserts_of_one_key_have_one_winner() {
    model(|| {
        let m = map(0);
        let other = m.clone();
        let t = thread::spawn(move || other.try_insert_new(2, 20).unwrap());
        let mine = m.try_insert_new(2, 10).unwrap();
        let theirs = t.join().unwrap();
        match (mine, theirs) {
            (Insert::Inserted, Insert::Present(10)) => assert_eq!(m.get(&2), Some(10)),
            (Insert::Present(20), Insert::Inserted) => assert_eq!(m.get(&2), Some(20)),
            other => panic!("not linearizable: {other:?}"),
        }
        assert_eq!(m.check_invariants(), 1);
    });
}

#[test]
fn insert_remove_get_in_one_bin() {
    model(|| {
        let m = map(0);
        assert!(m.try_insert_new(2, 1).unwrap().is_inserted());
        let (a, b) = (m.clone(), m.clone());
        let remover = thread::spawn(move || a.remove(&2));
        let inserter = thread::spawn(move || b.try_insert_new(2, 7).unwrap());
        let seen = m.get(&2);
        let removed = remover.join().unwrap();
        let inserted = inserter.join().unwrap();
        // Only one thread removes, and 1 was there first.
        assert_eq!(removed, Some(1));
        match inserted {
            // Insert ran before the remove: the key is gone at the end.
            Insert::Present(1) => assert_eq!(m.get(&2), None),
            // Insert ran after the remove: 7 stays.
            Insert::Inserted => assert_eq!(m.get(&2), Some(7)),
            other => panic!("impossible insert outcome {other:?}"),
        }
        // The reader saw one of the states the key went through.
        assert!(matches!(seen, None | Some(1) | Some(7)), "{seen:?}");
        if seen == Some(7) {
            assert_eq!(inserted, Insert::Inserted);
        }
        m.check_invariants();
    });
}

#[test]
fn put_racing_remove_and_reinsert_of_another_key_into_the_same_slot() {
    // Keys 2 and 4 share bin 0. Slot 0 holds 2; the remover frees it and inserts 4, which
    // takes the first free slot, the same one. The put must never write 4's slot.
    model(|| {
        let m = map(0);
        assert!(m.try_insert_new(2, 1).unwrap().is_inserted());
        let other = m.clone();
        let recycler = thread::spawn(move || {
            let removed = other.remove(&2);
            assert!(other.try_insert_new(4, 40).unwrap().is_inserted());
            removed
        });
        let put = m.put(2, 99);
        let removed = recycler.join().unwrap();
        match put {
            // The put came first: the remove returned the put's value.
            Some(1) => assert_eq!(removed, Some(99)),
            // The put came after the remove: nothing written.
            None => assert_eq!(removed, Some(1)),
            other => panic!("impossible put outcome {other:?}"),
        }
        assert_eq!(m.get(&4), Some(40), "the put overwrote the recycled slot");
        assert_eq!(m.get(&2), None);
        assert_eq!(m.check_invariants(), 1);
    });
}

#[test]
fn fetch_adds_are_not_lost() {
    model(|| {
        let m = map(0);
        let other = m.clone();
        let t = thread::spawn(move || other.try_fetch_add(6, 1).unwrap());
        let mine = m.try_fetch_add(6, 1).unwrap();
        let theirs = t.join().unwrap();
        assert!(
            matches!((mine, theirs), (None, Some(1)) | (Some(1), None)),
            "{mine:?} {theirs:?}"
        );
        assert_eq!(m.get(&6), Some(2));
    });
}

#[test]
fn concurrent_chaining_of_a_link_bucket() {
    // Bin 0 is full (three keys); two threads each insert a fourth key and both need link
    // bucket 0 of that bin. Exactly one chaining wins; both keys land; nothing is lost.
    model(|| {
        let m = map(2);
        for k in [0, 2, 4] {
            let _ = m.try_insert_new(k, k).unwrap();
        }
        let other = m.clone();
        let t = thread::spawn(move || other.try_insert_new(6, 6).unwrap());
        assert_eq!(m.try_insert_new(8, 8).unwrap(), Insert::Inserted);
        assert_eq!(t.join().unwrap(), Insert::Inserted);
        for k in [0, 2, 4, 6, 8] {
            assert_eq!(m.get(&k), Some(k));
        }
        assert_eq!(m.check_invariants(), 5);
    });
}

#[test]
fn full_bin_reports_full_and_keeps_its_keys() {
    model(|| {
        let m = map(0);
        for k in [0, 2] {
            let _ = m.try_insert_new(k, k).unwrap();
        }
        let other = m.clone();
        let t = thread::spawn(move || other.try_insert_new(4, 4));
        let mine = m.try_insert_new(6, 6);
        let theirs = t.join().unwrap();
        // Three slots, two taken: exactly one of the two inserts fits.
        match (mine, theirs) {
            (Ok(Insert::Inserted), Err(Error::Full)) | (Err(Error::Full), Ok(Insert::Inserted)) => {
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(m.get(&0), Some(0));
        assert_eq!(m.get(&2), Some(2));
        assert_eq!(m.check_invariants(), 3);
    });
}

#[test]
fn get_never_returns_the_value_of_a_recycled_slot() {
    // Slot 0 of bin 0 holds (2, 1); one thread removes 2 and inserts 4 with another value,
    // which takes the same slot. The reader's line read may see key 2 from the first
    // incarnation and value 40 from the second (`sync.rs`): the seqlock (fences and version
    // check) must reject that mix. Remove either fence and this model fails.
    model(|| {
        let m = map(0);
        assert!(m.try_insert_new(2, 1).unwrap().is_inserted());
        let reader = m.clone();
        let reader = thread::spawn(move || (reader.get(&2), reader.get(&4)));
        assert_eq!(m.remove(&2), Some(1));
        assert!(m.try_insert_new(4, 40).unwrap().is_inserted());
        let (two, four) = reader.join().unwrap();
        assert!(matches!(two, None | Some(1)), "get(2) = {two:?}");
        assert!(matches!(four, None | Some(40)), "get(4) = {four:?}");
        assert_eq!(m.check_invariants(), 1);
    });
}

#[test]
fn get_never_returns_a_new_key_with_the_value_before_it() {
    // Slot 1 of bin 0 holds (2, 1); one thread removes 2 and inserts 4 with another value,
    // which takes the same slot and leaves it `Inserting`, written. Under loom the scalar
    // loader reads slot 1 value first (`loader.rs`), so a reader can see key 4 beside the
    // old value 1 with no header change after its first header load: only `confirm`'s
    // re-read of an `Inserting` slot rejects that. Skip the re-read and this model fails.
    model(|| {
        let m = map(0);
        assert!(m.try_insert_new(6, 7).unwrap().is_inserted());
        assert!(m.try_insert_new(2, 1).unwrap().is_inserted());
        let reader = m.clone();
        let reader = thread::spawn(move || reader.get(&4));
        assert_eq!(m.remove(&2), Some(1));
        assert!(m.try_insert_new(4, 40).unwrap().is_inserted());
        let four = reader.join().unwrap();
        assert!(matches!(four, None | Some(40)), "get(4) = {four:?}");
        assert_eq!(m.check_invariants(), 2);
    });
}

#[test]
fn a_commit_publishes_only_inserts_it_saw_written() {
    // An insert leaves its slot `Inserting`; the next commit in the bin publishes it (`Valid`)
    // if its step 2 read the key. One thread inserts 2; the other inserts 4 (whose commit may
    // publish 2's slot) and then 2 itself. Had the commit of 4 published 2's slot before it
    // was written, the second insert of 2 would no longer look at it (step 2 reads `Inserting`
    // slots only), miss it in its search and take a second slot: two winners. An insert that
    // does not wait for an unwritten slot (and so publishes it) fails this model.
    model(|| {
        let m = map(0);
        let other = m.clone();
        let first = thread::spawn(move || other.try_insert_new(2, 20).unwrap());
        assert_eq!(m.try_insert_new(4, 40).unwrap(), Insert::Inserted);
        let second = m.try_insert_new(2, 21).unwrap();
        match (first.join().unwrap(), second) {
            (Insert::Inserted, Insert::Present(20)) => assert_eq!(m.get(&2), Some(20)),
            (Insert::Present(21), Insert::Inserted) => assert_eq!(m.get(&2), Some(21)),
            other => panic!("not linearizable: {other:?}"),
        }
        assert_eq!(m.get(&4), Some(40));
        assert_eq!(m.check_invariants(), 2);
    });
}

#[test]
fn a_remove_frees_its_slot_while_a_commit_publishes_it() {
    // Key 2's slot is `Inserting` (written, never published) when one thread removes 2 while
    // another inserts 4 into the bin, whose commit may publish 2's slot between the remove's
    // retire and its free. The slot must be freed exactly once, from whichever state it is
    // in, and reused. A free that gives up when its header CAS fails leaks the slot and fails
    // this model.
    model(|| {
        let m = map(0);
        assert!(m.try_insert_new(2, 20).unwrap().is_inserted());
        let other = m.clone();
        let inserter = thread::spawn(move || {
            let four = other.try_insert_new(4, 40).unwrap();
            (four, other.get(&2))
        });
        assert_eq!(m.remove(&2), Some(20));
        let (four, two) = inserter.join().unwrap();
        assert_eq!(four, Insert::Inserted);
        assert!(matches!(two, None | Some(20)), "get(2) = {two:?}");
        assert_eq!(m.get(&2), None);
        // Both freed slots are reusable: the bin takes three keys again.
        for k in [6, 8] {
            assert_eq!(m.try_insert_new(k, k).unwrap(), Insert::Inserted);
        }
        assert_eq!(m.check_invariants(), 3);
    });
}

#[test]
fn get_racing_an_insert_that_chains_a_link_bucket() {
    // Bin 0's primary slots are full: inserting 6 chains a link bucket, then commits a slot in
    // it. A reader that sees the slot searchable must see the chaining (the commit CAS is
    // Release; the search's debug assertion fires otherwise, and ci/loom.sh keeps debug
    // assertions on).
    model(|| {
        let m = map(1);
        for k in [0, 2, 4] {
            assert!(m.try_insert_new(k, k).unwrap().is_inserted());
        }
        let reader = m.clone();
        let reader = thread::spawn(move || reader.get(&6));
        assert_eq!(m.try_insert_new(6, 60).unwrap(), Insert::Inserted);
        let seen = reader.join().unwrap();
        assert!(matches!(seen, None | Some(60)), "{seen:?}");
        assert_eq!(m.get(&6), Some(60));
        assert_eq!(m.check_invariants(), 4);
    });
}

#[test]
fn remove_and_reinsert_racing_a_put_of_the_same_key() {
    // The put may read (2, 1), stall while 2 is removed and inserted again with the same
    // value into the same slot, then CAS. The put is linearized at its CAS only if the key is
    // there at that instant; its write must then survive (never discarded with the slot).
    model(|| {
        let m = map(0);
        assert!(m.try_insert_new(2, 1).unwrap().is_inserted());
        let other = m.clone();
        let recycler = thread::spawn(move || {
            let removed = other.remove(&2);
            let inserted = other.try_insert_new(2, 1).unwrap();
            (removed, inserted)
        });
        let put = m.put(2, 9);
        let (removed, inserted) = recycler.join().unwrap();
        assert_eq!(inserted, Insert::Inserted);
        match (put, removed) {
            // Put before the remove: the remove took the put's value.
            (Some(1), Some(9)) => assert_eq!(m.get(&2), Some(1)),
            // Put after the re-insert: its write stays.
            (Some(1), Some(1)) => assert_eq!(m.get(&2), Some(9)),
            // Put between remove and re-insert: nothing to put.
            (None, Some(1)) => assert_eq!(m.get(&2), Some(1)),
            other => panic!("not linearizable: {other:?}"),
        }
        assert_eq!(m.check_invariants(), 1);
    });
}

// ---------------------------------------------------------------------------------------------
// Growth: one bin transfer racing a put, a remove and an insert (src/raw/bins/migrate.rs).
// ---------------------------------------------------------------------------------------------

#[test]
fn bin_transfer_racing_a_put_loses_no_write() {
    model(|| {
        let m = full_growing_map();
        let other = m.clone();
        // This insert finds bin 0 full, grows the map and moves bin 0.
        let grower = thread::spawn(move || other.try_insert_new(SPLIT[3], 4).unwrap());
        let put = m.put(SPLIT[1], 99);
        assert_eq!(grower.join().unwrap(), Insert::Inserted);
        assert_eq!(put, Some(SPLIT[1] + 1), "the put saw the key");
        assert_eq!(
            m.get(&SPLIT[1]),
            Some(99),
            "the put's write was lost in the old table"
        );
        assert_eq!(m.get(&SPLIT[3]), Some(4));
        assert_eq!(m.get(&SPLIT[0]), Some(1));
        assert_eq!(m.check_invariants(), 4);
        assert_eq!(m.stats().bins, 16);
    });
}

#[test]
fn bin_transfer_racing_a_remove() {
    model(|| {
        let m = full_growing_map();
        let other = m.clone();
        let grower = thread::spawn(move || other.try_insert_new(SPLIT[3], 4).unwrap());
        let removed = m.remove(&SPLIT[2]);
        assert_eq!(grower.join().unwrap(), Insert::Inserted);
        assert_eq!(removed, Some(SPLIT[2] + 1));
        assert_eq!(
            m.get(&SPLIT[2]),
            None,
            "a removed key came back after the move"
        );
        assert_eq!(m.get(&SPLIT[0]), Some(1));
        assert_eq!(m.check_invariants(), 3);
    });
}

#[test]
fn bin_transfer_racing_an_insert_of_the_same_and_another_key() {
    model(|| {
        let m = full_growing_map();
        let other = m.clone();
        let grower = thread::spawn(move || other.try_insert_new(SPLIT[3], 4).unwrap());
        // Another insert into bin 0: it may commit a slot before the move (which then waits
        // for it), find the bin moved, or help grow. An insert of a present key must see it.
        let present = m.try_insert_new(SPLIT[0], 7).unwrap();
        let same = m.try_insert_new(SPLIT[3], 5).unwrap();
        let theirs = grower.join().unwrap();
        assert_eq!(present, Insert::Present(1));
        match (same, theirs) {
            (Insert::Present(4), Insert::Inserted) => assert_eq!(m.get(&SPLIT[3]), Some(4)),
            (Insert::Inserted, Insert::Present(5)) => assert_eq!(m.get(&SPLIT[3]), Some(5)),
            other => panic!("not linearizable: {other:?}"),
        }
        assert_eq!(m.check_invariants(), 4);
    });
}

#[test]
fn bin_transfer_waits_for_an_insert_committed_before_its_claim() {
    // Bin 0 is full, so one thread's insert there grows the map and moves bin 1 too, while
    // the other inserts key 1 into bin 1, which has room: its commit may come before the
    // claim and its write after it. The mover must wait for that write (an insert is never
    // abandoned) and move the key; a mover that skips the unwritten slot loses the insert.
    // Blocking resize: the grower moves every bin itself.
    model(|| {
        let m = full_blocking_map();
        let other = m.clone();
        let grower = thread::spawn(move || other.try_insert_new(SPLIT[3], 4).unwrap());
        assert_eq!(m.try_insert_new(1, 10).unwrap(), Insert::Inserted);
        assert_eq!(grower.join().unwrap(), Insert::Inserted);
        assert_eq!(m.get(&1), Some(10));
        assert_eq!(m.get(&SPLIT[3]), Some(4));
        assert_eq!(m.check_invariants(), 5);
    });
}

#[test]
fn get_during_a_bin_transfer_sees_the_key() {
    model(|| {
        let m = full_growing_map();
        let reader = m.clone();
        // The key is present throughout: a get must never miss it, whichever table it reads.
        // (The reader is the spawned thread: loom then interleaves it with the whole move.)
        let reader = thread::spawn(move || reader.get(&SPLIT[2]));
        // This insert finds bin 0 full, grows the map and moves bin 0.
        assert_eq!(m.try_insert_new(SPLIT[3], 4).unwrap(), Insert::Inserted);
        assert_eq!(reader.join().unwrap(), Some(SPLIT[2] + 1));
        assert_eq!(m.check_invariants(), 4);
    });
}

#[test]
fn shrink_racing_an_insert_and_a_put() {
    // Four bins shrink to two: the insert either lands before the freeze (and is moved) or
    // waits for the move and lands in the smaller table; the put is never lost; every key of
    // both bins of the group reaches the new bin. The shrink
    // is a long walk (freeze, count, allocate, move) that the other threads spin-wait on, so
    // this model gets more branches and one preemption.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.max_branches = 100_000;
    check_explored(builder, || {
        let m = Arc::new(
            FlatMap::<u64, u64>::builder()
                .bins(4)
                .link_buckets(2)
                .hasher(LowBit)
                .build()
                .unwrap(),
        );
        assert!(m.try_insert_new(SPLIT[0], 1).unwrap().is_inserted());
        // Bin 1 of the group {0, 1} that becomes new bin 0 holds a key too, so the move
        // writes the new bin twice (issue 11: an insert that reached the new bin after its
        // first old bin was published raced the placement of the second).
        assert!(m.try_insert_new(SPLIT_BIN_1, 3).unwrap().is_inserted());
        let (a, b) = (m.clone(), m.clone());
        let inserter = thread::spawn(move || a.try_insert_new(SPLIT[1], 2).unwrap());
        let putter = thread::spawn(move || b.put(SPLIT[0], 9));
        let shrank = m.shrink_to_fit().unwrap();
        assert_eq!(inserter.join().unwrap(), Insert::Inserted);
        assert_eq!(putter.join().unwrap(), Some(1));
        assert!(shrank);
        assert_eq!(m.get(&SPLIT[0]), Some(9), "the put was lost by the shrink");
        assert_eq!(m.get(&SPLIT[1]), Some(2));
        assert_eq!(m.get(&SPLIT_BIN_1), Some(3));
        assert_eq!(m.check_invariants(), 3);
        assert_eq!(m.stats().bins, 2);
    });
}

#[test]
fn a_shadow_insert_racing_an_insert_of_its_key_has_one_winner() {
    // One thread shadow-inserts key 2 and commits; the other inserts key 2 and then gets it.
    // Exactly one of them gets the key, and the get never sees the shadow's value before its
    // commit. A step 2 that ignored `Shadow` slots would let both win. (The plain insert is
    // the spawned thread: loom then interleaves it with the whole shadow life cycle.)
    model(|| {
        let m = map(0);
        let other = m.clone();
        let t = thread::spawn(move || {
            let inserted = other.try_insert_new(2, 10).unwrap();
            (inserted, other.get(&2))
        });
        let shadow = m.try_insert_shadow(2, 20).unwrap();
        let made = shadow.is_ok();
        match shadow {
            Ok(shadow) => shadow.commit(),
            Err(taken) => assert_eq!(taken, Taken::Present(10)),
        }
        let (mine, seen) = t.join().unwrap();
        match (mine, made) {
            (Insert::Inserted, false) => assert_eq!(seen, Some(10)),
            // Refused while the shadow was open, or found the committed key.
            (Insert::Shadowed | Insert::Present(20), true) => {
                assert!(matches!(seen, None | Some(20)), "{seen:?}");
            }
            other => panic!("not linearizable: {other:?}"),
        }
        assert!(m.get(&2).is_some());
        assert_eq!(m.check_invariants(), 1);
    });
}

#[test]
fn an_aborted_shadow_is_never_seen_and_frees_its_key() {
    // A shadow insert of key 2 aborted while another thread gets and then inserts key 2: the
    // get never sees the shadow's value, and the insert either finds the key taken (before
    // the abort) or inserts it (after); afterwards exactly the real insert's value remains.
    model(|| {
        let m = map(0);
        let shadow = m.try_insert_shadow(2, 20).unwrap().unwrap();
        let other = m.clone();
        let t = thread::spawn(move || {
            let seen = other.get(&2);
            (seen, other.try_insert_new(2, 10).unwrap())
        });
        shadow.abort();
        let (seen, inserted) = t.join().unwrap();
        assert_eq!(seen, None, "a get saw a shadow");
        match inserted {
            Insert::Shadowed => assert_eq!(m.get(&2), None),
            Insert::Inserted => assert_eq!(m.get(&2), Some(10)),
            other => panic!("{other:?}"),
        }
        let live = usize::from(inserted == Insert::Inserted);
        assert_eq!(m.check_invariants(), live);
    });
}

#[test]
fn a_bin_transfer_carries_an_open_shadow() {
    transfer_racing_a_shadow(true);
}

#[test]
fn a_bin_transfer_racing_a_shadow_abort_leaves_no_trace() {
    transfer_racing_a_shadow(false);
}

/// Bin 0 is full (three keys) and a fourth insert grows the map while the other thread
/// shadow-inserts key 1 into bin 1 and commits or aborts it: the move must carry the shadow
/// (as a shadow: invisible until the commit) whichever table the resolution finds it in, and
/// exactly one of the move and the resolution may take the shadow's slot.
fn transfer_racing_a_shadow(commit: bool) {
    model(move || {
        let m = full_blocking_map();
        let other = m.clone();
        let grower = thread::spawn(move || other.try_insert_new(SPLIT[3], 4).unwrap());
        let shadow = m.try_insert_shadow(1, 10).unwrap().unwrap();
        assert_eq!(m.get(&1), None);
        if commit {
            shadow.commit();
        } else {
            shadow.abort();
        }
        assert_eq!(grower.join().unwrap(), Insert::Inserted);
        assert_eq!(m.get(&1), commit.then_some(10));
        assert_eq!(m.check_invariants(), 4 + usize::from(commit));
        assert_eq!(m.len(), 4 + usize::from(commit));
    });
}

#[test]
fn a_pointer_swap_racing_a_transfer_and_a_remove_hands_each_value_to_one_owner() {
    // `floe::Map` keeps a pointer in the value word and swaps it with `compare_exchange`:
    // whoever takes a value out of the table (the swap that replaced it, or the remove that
    // returned it) retires it, and a swap that failed frees its new value. Here the values
    // stand for those pointers. One thread grows the map (moving the key's bin) and then
    // removes the key; the other swaps the key's value. Each value must end with exactly one
    // owner: a value owned twice is a double free in `Map`, a value owned by nobody a leak or
    // a use after free.
    model(|| {
        let m = full_growing_map();
        let key = SPLIT[1];
        let (old, new) = (key + 1, 100);
        let other = m.clone();
        let grower = thread::spawn(move || {
            assert_eq!(other.try_insert_new(SPLIT[3], 4).unwrap(), Insert::Inserted);
            other.remove(&key)
        });
        let swapped = m.compare_exchange(&key, old, new);
        let removed = grower.join().unwrap();
        let old_owners = usize::from(swapped.is_ok()) + usize::from(removed == Some(old));
        assert_eq!(old_owners, 1, "swap {swapped:?}, remove {removed:?}");
        let new_owners = usize::from(removed == Some(new)) + usize::from(m.get(&key) == Some(new));
        let new_published = swapped.is_ok();
        assert_eq!(
            new_owners,
            usize::from(new_published),
            "swap {swapped:?}, remove {removed:?}"
        );
        assert_eq!(m.get(&key), None, "the remove came last");
        assert_eq!(m.check_invariants(), 3);
    });
}

#[test]
fn a_stalled_put_never_lands_on_a_shadow_of_its_key() {
    // The put reads (2, 20) and may stall while the other thread removes key 2 and
    // shadow-inserts it again with the same value (into the same slot: the bin has one free
    // slot). A put that lands after the remove must find the key absent; one that lands on
    // the shadow changes a value nobody can see (the commit then publishes 21).
    model(|| {
        let m = map(0);
        assert!(m.try_insert_new(2, 20).unwrap().is_inserted());
        let other = m.clone();
        let t = thread::spawn(move || other.put(2, 21));
        let removed = m.remove(&2);
        let shadow = m.try_insert_shadow(2, 20).unwrap().unwrap();
        // The put ends while the shadow is open (so it cannot be a put after the commit).
        let put = t.join().unwrap();
        shadow.commit();
        match put {
            Some(20) => assert_eq!(removed, Some(21), "the put landed on the shadow"),
            None => assert_eq!(removed, Some(20)),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.get(&2), Some(20));
        assert_eq!(m.check_invariants(), 1);
    });
}

#[test]
fn a_stalled_remove_never_frees_a_shadow_of_its_key() {
    // Two removes of key 2; the main thread's, if it wins, is followed by a shadow insert of
    // the same key and value (same slot) and its commit. The other remove must not take the
    // shadow: exactly one remove answers, and the committed key stays.
    model(|| {
        let m = map(0);
        assert!(m.try_insert_new(2, 20).unwrap().is_inserted());
        let other = m.clone();
        let t = thread::spawn(move || other.remove(&2));
        let mine = m.remove(&2);
        // Key 2 is gone now (by either remove).
        let shadow = m.try_insert_shadow(2, 20).unwrap().unwrap();
        // The other remove ends while the shadow is open: it may only have taken the original.
        let theirs = t.join().unwrap();
        shadow.commit();
        let answered = usize::from(mine.is_some()) + usize::from(theirs.is_some());
        assert_eq!(
            answered, 1,
            "two removes of one key answered: {mine:?} {theirs:?}"
        );
        assert_eq!(m.get(&2), Some(20), "the shadow was taken");
        assert_eq!(m.len(), 1);
        assert_eq!(m.check_invariants(), 1);
    });
}

#[test]
fn a_shadow_commit_racing_inserts_into_its_bin_is_never_published_unwritten() {
    // The commit turns the claimed shadow slot `Inserting` and then writes the key; the other
    // thread inserts key 4 (whose commit publishes the bin's `Inserting` slots it read
    // written) and then key 2. If the insert of 4 could read the slot as it was before the
    // claim (the shadow key beside another key: "not ours", so publishable), the slot would
    // turn `Valid` unwritten, the insert of 2 would skip it and make a second copy of key 2.
    model(|| {
        let m = map(0);
        let shadow = m.try_insert_shadow(2, 10).unwrap().unwrap();
        let other = m.clone();
        let t = thread::spawn(move || {
            let four = other.try_insert_new(4, 40).unwrap();
            (four, other.try_insert_new(2, 99).unwrap())
        });
        shadow.commit();
        let (four, two) = t.join().unwrap();
        assert_eq!(four, Insert::Inserted);
        assert!(
            matches!(two, Insert::Shadowed | Insert::Present(10)),
            "{two:?}"
        );
        assert_eq!(m.get(&2), Some(10));
        assert_eq!(m.check_invariants(), 2);
    });
}
