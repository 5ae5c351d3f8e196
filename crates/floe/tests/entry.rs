//! `MapRef::entry` against std's `HashMap::entry`, and under racing threads.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Barrier,
    },
};

use floe::Map;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Chain {
    OrInsert(u8, u32),
    OrInsertWith(u8, u32),
    OrInsertWithKey(u8),
    OrDefault(u8),
    ModifyOrInsert(u8, u32),
    ModifyOrDefault(u8),
    Remove(u8),
}

fn chain() -> impl Strategy<Value = Chain> {
    prop_oneof![
        (any::<u8>(), any::<u32>()).prop_map(|(k, v)| Chain::OrInsert(k, v)),
        (any::<u8>(), any::<u32>()).prop_map(|(k, v)| Chain::OrInsertWith(k, v)),
        any::<u8>().prop_map(Chain::OrInsertWithKey),
        any::<u8>().prop_map(Chain::OrDefault),
        (any::<u8>(), any::<u32>()).prop_map(|(k, v)| Chain::ModifyOrInsert(k, v)),
        any::<u8>().prop_map(Chain::ModifyOrDefault),
        any::<u8>().prop_map(Chain::Remove),
    ]
}

/// The value a modification makes: different from every inserted one often enough.
fn modified(value: &u32) -> u32 {
    value.wrapping_mul(3).wrapping_add(1)
}

proptest! {
    /// Every chain answers what std's answers and leaves the same map, on keys that crowd
    /// few bins (a `u8` key space) through a growth from a small table.
    #[test]
    fn chains_agree_with_std(chains in proptest::collection::vec(chain(), 1..400)) {
        let map = Map::<u64, u32>::builder().capacity(4).build().unwrap();
        let floe = map.pin();
        let mut std = HashMap::<u64, u32>::new();
        for chain in chains {
            let (ours, theirs) = match chain {
                Chain::OrInsert(k, v) => {
                    let k = u64::from(k);
                    (Some(*floe.entry(k).or_insert(v)), Some(*std.entry(k).or_insert(v)))
                }
                Chain::OrInsertWith(k, v) => {
                    let k = u64::from(k);
                    let (mut ran, mut std_ran) = (false, false);
                    let ours = *floe.entry(k).or_insert_with(|| { ran = true; v });
                    let theirs = *std.entry(k).or_insert_with(|| { std_ran = true; v });
                    prop_assert_eq!(ran, std_ran, "make ran only for an absent key");
                    (Some(ours), Some(theirs))
                }
                Chain::OrInsertWithKey(k) => {
                    let k = u64::from(k);
                    (
                        Some(*floe.entry(k).or_insert_with_key(|k| *k as u32 + 7)),
                        Some(*std.entry(k).or_insert_with_key(|k| *k as u32 + 7)),
                    )
                }
                Chain::OrDefault(k) => {
                    let k = u64::from(k);
                    prop_assert_eq!(*floe.entry(k).key(), k);
                    (Some(*floe.entry(k).or_default()), Some(*std.entry(k).or_default()))
                }
                Chain::ModifyOrInsert(k, v) => {
                    let k = u64::from(k);
                    (
                        Some(*floe.entry(k).and_modify(modified).or_insert(v)),
                        Some(*std.entry(k).and_modify(|n| *n = modified(n)).or_insert(v)),
                    )
                }
                Chain::ModifyOrDefault(k) => {
                    let k = u64::from(k);
                    (
                        Some(*floe.entry(k).and_modify(modified).or_default()),
                        Some(*std.entry(k).and_modify(|n| *n = modified(n)).or_default()),
                    )
                }
                Chain::Remove(k) => {
                    let k = u64::from(k);
                    (floe.remove(&k).copied(), std.remove(&k))
                }
            };
            prop_assert_eq!(ours, theirs);
        }
        prop_assert_eq!(map.len(), std.len());
        for (k, v) in &std {
            prop_assert_eq!(floe.get(k), Some(v));
        }
    }
}

/// Threads count through `and_modify(n + 1).or_insert(1)` on a few keys: every increment
/// lands once (each chain is one atomic compute), across the growths of a map that starts
/// with room for four keys; a key only one thread makes gets its value, and a key every
/// thread makes at once answers every chain the one value that won.
#[test]
fn racing_chains_count_every_increment_and_agree_on_the_winner() {
    const THREADS: usize = 4;
    const ROUNDS: u64 = 5_000;
    let map = Map::<u64, u64>::builder().capacity(4).build().unwrap();
    let start = Barrier::new(THREADS);
    let made = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for thread in 0..THREADS as u64 {
            let (map, start, made) = (&map, &start, &made);
            scope.spawn(move || {
                let m = map.pin();
                start.wait();
                for round in 0..ROUNDS {
                    // Few hot keys, and a stream of new ones that makes the table grow.
                    m.entry(round % 3).and_modify(|n| n + 1).or_insert(1);
                    let fresh = 1_000 + thread * ROUNDS + round;
                    let got = *m.entry(fresh).or_insert_with(|| {
                        made.fetch_add(1, Ordering::Relaxed);
                        fresh * 2
                    });
                    assert_eq!(got, fresh * 2);
                    // One key every thread makes at once: one value wins, and every chain
                    // answers the winner's (nothing changes the key after).
                    let shared = 500_000 + round;
                    let won = *m.entry(shared).or_insert_with(|| thread);
                    assert_eq!(m.get(&shared), Some(&won));
                }
            });
        }
    });
    let m = map.pin();
    let counted: u64 = (0..3).map(|k| *m.get(&k).unwrap()).sum();
    assert_eq!(counted, THREADS as u64 * ROUNDS);
    assert_eq!(made.load(Ordering::Relaxed), THREADS * ROUNDS as usize);
    for round in 0..ROUNDS {
        let shared = *m.get(&(500_000 + round)).unwrap();
        assert!(shared < THREADS as u64);
    }
}

/// Every thread runs `and_modify(n + 1).or_insert(1)` on the same absent key at once, round
/// after round: one insert wins and every other chain, whose insert lost, modifies the
/// winner's value instead, so each key ends at the number of threads. (A chain that inserted
/// its value again after losing, or stored its default over the winner, would leave less.)
#[test]
fn chains_racing_on_one_absent_key_each_count_once() {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 10_000;
    let map = Map::<u64, u64>::builder().capacity(4).build().unwrap();
    let round_start = Barrier::new(THREADS as usize);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let (map, round_start) = (&map, &round_start);
            scope.spawn(move || {
                let m = map.pin();
                for round in 0..ROUNDS {
                    round_start.wait();
                    let after = *m.entry(round).and_modify(|n| n + 1).or_insert(1);
                    assert!((1..=THREADS).contains(&after));
                }
            });
        }
    });
    let m = map.pin();
    for round in 0..ROUNDS {
        assert_eq!(m.get(&round), Some(&THREADS), "key {round}");
    }
}

/// A modifying chain on a key an open shadow insert holds waits for it, offering its made
/// value again each time it looks; the shadow is aborted, and the chain inserts that value:
/// `make` ran once (a chain that dropped the value it offered would need `make` again,
/// which has run: it would panic).
#[test]
fn a_chain_waiting_on_a_shadow_inserts_the_value_it_made_once() {
    let map = Map::<u64, u64>::new();
    let made = AtomicUsize::new(0);
    let waiting = Barrier::new(2);
    std::thread::scope(|scope| {
        let m = map.pin();
        let Ok(shadow) = m.insert_shadow(9, 99) else {
            panic!("9 is absent");
        };
        let (map, made, waiting) = (&map, &made, &waiting);
        let chain = scope.spawn(move || {
            let m = map.pin();
            waiting.wait();
            *m.entry(9).and_modify(|n| n + 1).or_insert_with(|| {
                made.fetch_add(1, Ordering::Relaxed);
                7
            })
        });
        waiting.wait();
        std::thread::sleep(std::time::Duration::from_millis(50));
        shadow.abort();
        assert_eq!(chain.join().unwrap(), 7);
    });
    assert_eq!(made.load(Ordering::Relaxed), 1);
    assert_eq!(map.pin().get(&9), Some(&7));
}
