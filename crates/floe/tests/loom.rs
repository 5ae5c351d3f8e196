//! loom models of the bin protocols: every interleaving (up to the preemption bound) of two or
//! three threads on one bin. Run with `ci/loom.sh`:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p floe --test loom`.
#![cfg(loom)]

use std::{
    hash::{BuildHasher, Hasher},
    sync::Arc,
};

use floe::{Error, FlatMap, Insert};
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

/// Two bins of three slots, `links` link buckets.
fn map(links: usize) -> Arc<Map> {
    Arc::new(
        FlatMap::<u64, u64>::builder()
            .bins(2)
            .link_buckets(links)
            .hasher(LowBit)
            .build()
            .unwrap(),
    )
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

#[test]
fn two_inserts_of_one_key_have_one_winner() {
    model(|| {
        let m = map(0);
        let other = m.clone();
        let t = thread::spawn(move || other.insert(2, 20).unwrap());
        let mine = m.insert(2, 10).unwrap();
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
        assert!(m.insert(2, 1).unwrap().is_inserted());
        let (a, b) = (m.clone(), m.clone());
        let remover = thread::spawn(move || a.remove(&2));
        let inserter = thread::spawn(move || b.insert(2, 7).unwrap());
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
        assert!(m.insert(2, 1).unwrap().is_inserted());
        let other = m.clone();
        let recycler = thread::spawn(move || {
            let removed = other.remove(&2);
            assert!(other.insert(4, 40).unwrap().is_inserted());
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
        let t = thread::spawn(move || other.fetch_add(6, 1).unwrap());
        let mine = m.fetch_add(6, 1).unwrap();
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
            let _ = m.insert(k, k).unwrap();
        }
        let other = m.clone();
        let t = thread::spawn(move || other.insert(6, 6).unwrap());
        assert_eq!(m.insert(8, 8).unwrap(), Insert::Inserted);
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
            let _ = m.insert(k, k).unwrap();
        }
        let other = m.clone();
        let t = thread::spawn(move || other.insert(4, 4));
        let mine = m.insert(6, 6);
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
