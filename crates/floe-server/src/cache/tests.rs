//! The cache's unit tests.

use core::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;
use super::{counters::*, eviction::*, session::*, shared::*};
use crate::persist::StoreOptions;

/// `COUNTERS` names every counter once, in the enum's order (each counter's slot is its
/// discriminant), with distinct names.
#[test]
fn every_counter_is_listed_once() {
    for (i, (counter, _)) in COUNTERS.iter().enumerate() {
        assert_eq!(*counter as usize, i, "{counter:?} out of place");
    }
    let names: std::collections::HashSet<_> = COUNTERS.iter().map(|(_, n)| n).collect();
    assert_eq!(names.len(), COUNTERS.len());
}

/// A cache of one worker, 1 MiB, on the manual clock.
fn one_worker_cache() -> Arc<Cache> {
    Arc::new(
        Cache::with_manual_clock(Settings {
            workers: 1,
            memory_limit: 1 << 20,
            max_item_size: 64 << 10,
            ..Settings::default()
        })
        .expect("cache"),
    )
}

/// A cache of two workers on the manual clock.
fn two_worker_cache() -> Arc<Cache> {
    Arc::new(
        Cache::with_manual_clock(Settings {
            workers: 2,
            ..Settings::default()
        })
        .expect("cache"),
    )
}

/// The split adapts: a read that misses a key evicted unread from small grows the small
/// queue's share, once per eviction of that key however often it is asked for; one that
/// misses a key evicted from main shrinks it; a key never stored moves nothing.
#[test]
fn misses_of_recently_evicted_keys_move_the_split() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let share = || cache.small_share.load(Ordering::Relaxed);
    assert_eq!(share(), SMALL_SHARE_START);
    let value = [b'v'; 1000];
    let mut session = worker.session();
    // 2 MB into 1 MiB: the first keys are evicted from small, unread.
    for i in 0..2000u32 {
        let stored = session.store(
            StoreMode::Set,
            format!("k{i}").as_bytes(),
            0,
            0,
            &value,
            None,
        );
        assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
    }
    // The ghost remembers the last evictions (S3-FIFO sizes it as main, at least 64).
    let last = (0..2000u32)
        .rev()
        .find(|i| session.index.get(format!("k{i}").as_bytes()).is_none())
        .expect("evictions");
    let (last, before_last) = (format!("k{last}"), format!("k{}", last - 1));
    session.missed(b"never-stored");
    assert_eq!(share(), SMALL_SHARE_START);
    session.missed(last.as_bytes());
    assert_eq!(share(), SMALL_SHARE_START + SMALL_SHARE_STEP);
    for _ in 0..10 {
        session.missed(last.as_bytes());
    }
    assert_eq!(
        share(),
        SMALL_SHARE_START + SMALL_SHARE_STEP,
        "once per eviction"
    );
    session.missed(before_last.as_bytes());
    assert_eq!(share(), SMALL_SHARE_START + 2 * SMALL_SHARE_STEP);
    // Keys read while in small go on to main; 3 MB of them overflow main, which evicts.
    drop(session);
    let mut session = worker.session();
    for i in 0..3000u32 {
        let key = format!("hot{i}");
        let stored = session.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, None);
        assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
        if let Some(item) = session.index.get(key.as_bytes()) {
            session.mark_read(item);
        }
    }
    assert!(
        !lock(&cache.queues[0]).main_ghost.members.is_empty(),
        "evictions from main are remembered"
    );
    // A miss of a key main evicted shrinks the share (its ghost entry set by hand: which
    // hot key main evicted last depends on the queues' order).
    lock(&cache.queues[0])
        .main_ghost
        .insert(cache.hash(b"gone"), 64);
    let before = share();
    session.missed(b"gone");
    assert_eq!(share(), before - SMALL_SHARE_STEP);
}

/// A later write has a larger CAS unique than an earlier one whichever worker made
/// either: `ms I` stores a value whose unique is older than the item's as stale, and a
/// worker that wrote little must not hand out uniques smaller than one that wrote much
/// (per-worker counters did: an `md I` on the quiet worker gave the item a smaller unique
/// than the one the client held, and the client's `ms I` was refused).
#[test]
fn uniques_grow_across_workers() {
    let cache = two_worker_cache();
    let (mut busy, mut quiet) = (cache.worker(0), cache.worker(1));
    let mut last = 0;
    for i in 0..100u32 {
        let mut session = busy.session();
        let key = format!("k{i}");
        let Stored::Stored(cas) = session.store(StoreMode::Set, key.as_bytes(), 0, 0, b"v", None)
        else {
            panic!("not stored");
        };
        assert!(cas > last);
        last = cas;
    }
    let mut session = quiet.session();
    let Stored::Stored(cas) = session.store(StoreMode::Set, b"q", 0, 0, b"v", None) else {
        panic!("not stored");
    };
    assert!(cas > last, "{cas} after {last}");
}

/// A read that found an item expired unlinks it only if the item there is still expired
/// at the read's time: a `touch` whose session began before the clock moved finds the
/// item valid, publishes a copy with the same CAS unique and a new expiry, and answers
/// TOUCHED; the read's unlink, coming after, must leave that copy.
#[test]
fn an_expired_read_leaves_the_item_a_touch_published() {
    let cache = two_worker_cache();
    let (mut reader, mut toucher) = (cache.worker(0), cache.worker(1));
    {
        let mut session = reader.session();
        let exptime = cache.server_time(10, session.now());
        let stored = session.store(StoreMode::Set, b"k", 0, exptime, b"v", None);
        assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
    }
    let touching = toucher.session();
    cache.advance_clock(11);
    let reading = reader.session();
    let found = reading.index.get(&b"k"[..]).expect("stored");
    assert!(cache.validity(found, reading.now()).is_err());
    let touched = touching
        .touch(b"k", cache.server_time(100, touching.now()))
        .expect("valid at the touch's time");
    assert_eq!(touched.cas(), found.cas());
    assert!(cache.validity(touched, reading.now()).is_ok());
    assert!(reading.valid(b"k", found).is_none(), "expired when read");
    assert_eq!(cache.counter(Counter::GetExpired), 0, "nothing unlinked");
    drop((touching, reading));
    assert_eq!(cache.items(), 1, "the touched item stays");
    let session = reader.session();
    assert_eq!(session.peek(b"k").map(Item::exptime), Some(102));
}
/// A directory of its own under the system's temporary one, empty.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("floe-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// An insert into an absent key takes its sequence number in its decision; a write and a
/// removal of the key between that decision and its publication come later in the
/// counter, and the map still lets the insert land (the key is absent again when it does).
/// The journal must still restore the insert, which came last: before the removal clocks,
/// replay chose what came between and the key came back absent (`persist.rs`, "An absent
/// key has no version"). Each removal, journaled or not (a delete; an expired item
/// unlinked by a read), before each write that inserts into an absent key (a set; an
/// `incr` that creates).
#[test]
fn an_insert_decided_before_a_write_and_removal_of_its_key_is_restored_after_them() {
    for (creating_incr, expiring) in [(false, false), (true, false), (false, true), (true, true)] {
        let name = format!("absent-insert-{creating_incr}-{expiring}");
        let expected: &[u8] = if creating_incr { b"7" } else { b"last" };
        assert_eq!(
            overtaken_insert_restores_as(&name, creating_incr, expiring, false),
            Some(expected.to_vec()),
            "restored what the key held after the writes between"
        );
    }
}

/// As above, with a third write (an append) replacing the overtaken insert's item after its
/// publication, and a crash before that write's session appends its record: the insert's
/// own session replied first, so the record that outnumbers the delete must be in its
/// journal. Re-sequencing only the insert's own item (and giving up when another had
/// replaced it) restored the key absent, under a read that had seen the insert's value.
#[test]
fn an_overtaken_insert_replaced_before_its_check_journals_what_replaced_it() {
    for creating_incr in [false, true] {
        let name = format!("replaced-insert-{creating_incr}");
        let expected: &[u8] = if creating_incr { b"7+" } else { b"last+" };
        assert_eq!(
            overtaken_insert_restores_as(&name, creating_incr, false, true),
            Some(expected.to_vec())
        );
    }
}

/// Open a persistent cache in a scratch directory, and have worker 0 insert into the
/// absent key `k` (a set of `last`, or an `incr` creating 7) while, between its decision
/// and its publication, worker 1 sets `k` and removes it (a delete, or, `expiring`, a set
/// expired at once and the read that unlinks it). With `replaced`, worker 1 then appends
/// `+` to the published item before the insert looks at its removal clock, and its session
/// ends only after the crash. The crash: the journals copied as they are then (no
/// snapshot), and opened again. Returns what `k` holds after the restore.
fn overtaken_insert_restores_as(
    name: &str,
    creating_incr: bool,
    expiring: bool,
    replaced: bool,
) -> Option<Vec<u8>> {
    let dir = scratch_dir(name);
    let settings = || Settings {
        workers: 2,
        ..Settings::default()
    };
    let (cache, _) = Cache::open(settings(), &dir, StoreOptions::default()).expect("open");
    cache.wait_restored();
    let between = Arc::clone(&cache);
    let replacer = Arc::clone(&cache);
    // The replacing session, held open until the crash is taken.
    let (crashed, crash) = std::sync::mpsc::channel::<()>();
    let replacing_slot = std::rc::Rc::new(core::cell::RefCell::new(None));
    let slot = std::rc::Rc::clone(&replacing_slot);
    hooks::on_next_absent_insert(
        move || {
            std::thread::spawn(move || {
                let mut worker = between.worker(1);
                let mut session = worker.session();
                // Expired at once (a negative time), and unlinked by the read below.
                let exptime = if expiring {
                    between.server_time(-1, session.now())
                } else {
                    0
                };
                let stored = session.store(StoreMode::Set, b"k", 0, exptime, b"between", None);
                assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
                if expiring {
                    assert!(session.peek(b"k").is_none());
                    assert_eq!(between.counter(Counter::GetExpired), 1, "unlinked");
                } else {
                    assert_eq!(session.delete(b"k", None), Deleted::Deleted);
                }
            })
            .join()
            .expect("the writes between");
        },
        move || {
            if !replaced {
                return;
            }
            let (appended, done) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                let mut worker = replacer.worker(1);
                let mut session = worker.session();
                let stored = session.store(StoreMode::Append, b"k", 0, 0, b"+", None);
                assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
                appended.send(()).expect("the test waits");
                // The session (and its append to the journal) ends after the crash.
                // (The test drops the sender once it has taken the crash.)
                let _ = crash.recv();
            });
            done.recv().expect("appended");
            *slot.borrow_mut() = Some(thread);
        },
    );
    let mut worker = cache.worker(0);
    {
        let mut session = worker.session();
        if creating_incr {
            let created = session.delta(b"k", true, 1, None, Some((7, 0)), false, None);
            assert!(matches!(created, Delta::Value(7, _, true)), "{created:?}");
        } else {
            let stored = session.store(StoreMode::Set, b"k", 0, 0, b"last", None);
            assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
        }
    }
    let replacing = replacing_slot.borrow_mut().take();
    let held = worker.session().peek(b"k").map(|item| item.data().to_vec());
    // A crash now: the journals as the sessions that ended left them, no snapshot.
    let copy = scratch_dir(&format!("{name}-copy"));
    for file in std::fs::read_dir(&dir).expect("read the directory") {
        let path = file.expect("directory entry").path();
        std::fs::copy(&path, copy.join(path.file_name().unwrap())).expect("copy");
    }
    drop(crashed);
    if let Some(thread) = replacing {
        thread.join().expect("the replacing session");
    }
    let (restarted, _) = Cache::open(settings(), &copy, StoreOptions::default()).expect("reopen");
    restarted.wait_restored();
    let mut worker = restarted.worker(0);
    let restored = worker.session().peek(b"k").map(|item| item.data().to_vec());
    assert_eq!(restored, held, "the restore differs from what the key held");
    drop((cache, restarted));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&copy);
    restored
}

/// Store `key` with a 100-byte value (expiring `ttl` seconds from now, 0 for never) and
/// delete it if `delete`; the bytes its queue node stays charged (`node_charge`) when it is
/// deleted.
fn store_then(session: &mut Session<'_>, key: &str, ttl: i64, delete: bool) -> usize {
    let exptime = session.cache().server_time(ttl, session.now());
    let stored = session.store(
        StoreMode::Set,
        key.as_bytes(),
        0,
        exptime,
        &[b'v'; 100],
        None,
    );
    assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
    if delete {
        assert_eq!(session.delete(key.as_bytes(), None), Deleted::Deleted);
    }
    node_charge()
}

/// What `-m` should count for the items present: each item's charge and its node's (no
/// item here took over another's node).
fn charged_for_items(cache: &Cache) -> usize {
    let mut total = 0;
    cache.for_each_item(usize::MAX, |_, item| {
        total += item.charge() + node_charge();
        true
    });
    total
}

/// Deletes leave their queue nodes behind, and a node holds no key: each stale node stays
/// charged its 16-byte slot alone until eviction reaches it, so stores after many deletes of
/// long keys (210 bytes each here) find room without evicting the live items queued ahead
/// of the stale nodes. Nodes that held their keys would have charged 272 bytes each, 1.2 MB
/// in all, and pushed the cache past its 1 MiB. No housekeeping pass is needed for it.
#[test]
fn stale_nodes_of_deletes_hold_only_their_slot_and_evict_nothing_live() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    for i in 0..500u32 {
        store_then(&mut session, &format!("live{i}"), 0, false);
    }
    let live_bytes = cache.bytes();
    assert_eq!(live_bytes, charged_for_items(&cache));
    let long = "x".repeat(210);
    let slot = core::mem::size_of::<Node>();
    assert_eq!(slot, 16, "a node is a hash, an id and a charge");
    for round in 1..=3usize {
        let stale: usize = (0..1500u32)
            .map(|i| store_then(&mut session, &format!("{long}{round}-{i}"), 0, true))
            .sum();
        assert_eq!(stale, 1500 * slot);
        assert_eq!(
            cache.bytes(),
            live_bytes + round * 1500 * slot,
            "round {round}: the deletes left their slots charged, nothing else"
        );
        assert_eq!(cache.reclaim_expired(), 0, "nothing expires");
    }
    let evicted = (0..500u32)
        .filter(|i| session.peek(format!("live{i}").as_bytes()).is_none())
        .count();
    assert_eq!(evicted, 0, "live items evicted for stale nodes");
    assert_eq!(
        cache.counter(Counter::CrawlerStarts),
        0,
        "no crawler run without an expiry"
    );
}

/// What `-m` counts for a 100-byte value under a 20-byte key (the hit-ratio benchmark's
/// small items): one allocation of the 48-byte header, the key and the value (168 bytes, a
/// 176-byte chunk), and a 16-byte queue node: 192, memcached's slab class for the same item.
#[test]
fn a_small_item_and_its_node_cost_192_bytes() {
    assert_eq!(item::HEADER, 48);
    assert_eq!(item_charge(20, 100), 176);
    assert_eq!(item_charge(20, 100) + node_charge(), 192);
    assert_eq!(
        item_charge(0, 0),
        64,
        "a 48-byte request takes a 64-byte chunk"
    );
    assert_eq!(item_charge(250, 100), 416);
    // The charge is what the item's allocation is.
    let item = ItemBox::new(&[b'k'; 20], &[&[b'v'; 60], &[b'w'; 40]], fields());
    assert_eq!(item.charge(), item_charge(20, 100));
    assert_eq!(item.key(), &[b'k'; 20]);
    assert_eq!(&item.data()[..60], &[b'v'; 60]);
    assert_eq!(&item.data()[60..], &[b'w'; 40]);
}

/// Header fields any test item may take.
fn fields() -> item::Fields {
    item::Fields {
        cas: 7,
        seq: 9,
        flags: 0xdead_beef,
        exptime: 11,
        time: 13,
        generation: 15,
        last_access: 17,
        node: 19,
        binary_key: false,
        stale: false,
        token_sent: false,
    }
}

/// An item reads back every field it was made with, its key and value of every length
/// (none, and the longest key), through its owner and through the index's word; its marks
/// are independent bits, and the win token goes to one taker.
#[test]
fn an_item_holds_what_it_was_made_with() {
    for (key_len, value_len) in [(0, 0), (1, 0), (0, 1), (20, 100), (250, 4096)] {
        let key: Vec<u8> = (0..key_len).map(|i| i as u8).collect();
        let value: Vec<u8> = (0..value_len).map(|i| (i * 3) as u8).collect();
        for (binary_key, stale, token_sent) in [
            (false, false, false),
            (true, false, true),
            (false, true, false),
        ] {
            let made = ItemBox::new(
                &key,
                &[&value],
                item::Fields {
                    binary_key,
                    stale,
                    token_sent,
                    ..fields()
                },
            );
            let word = made.into_word();
            // SAFETY: the word just made; the item is freed below, after its last read.
            let item = unsafe { Item::at(word) };
            assert_eq!((item.key(), item.data()), (&key[..], &value[..]));
            assert_eq!(
                (item.cas(), item.seq, item.flags(), item.exptime()),
                (7, 9, 0xdead_beef, 11)
            );
            assert_eq!(
                (item.time, item.generation, item.last_access(), item.node),
                (13, 15, 17, 19)
            );
            assert_eq!(
                (item.binary_key(), item.is_stale(), item.win_token_taken()),
                (binary_key, stale, token_sent)
            );
            assert_eq!(item.take_win_token(), !token_sent);
            assert!(!item.take_win_token(), "one taker");
            assert_eq!(
                (item.binary_key(), item.is_stale()),
                (binary_key, stale),
                "the token leaves the other marks"
            );
            // SAFETY: made above, read no more.
            let mut owned = unsafe { ItemBox::from_word(word) };
            owned.set_stale(!stale);
            owned.set_token_sent(false);
            assert_eq!(
                (
                    owned.is_stale(),
                    owned.win_token_taken(),
                    owned.binary_key()
                ),
                (!stale, false, binary_key)
            );
            let copy = owned.with_exptime(99);
            assert_eq!(
                (copy.key(), copy.data(), copy.exptime(), copy.cas()),
                (&key[..], &value[..], 99, 7)
            );
            assert_eq!(copy.is_stale(), !stale);
        }
    }
}

/// A cache whose index hashes every key alike (`Index::crowded`).
fn crowded_cache() -> Arc<Cache> {
    let mut cache = Cache::with_manual_clock(Settings {
        workers: 1,
        memory_limit: 1 << 20,
        ..Settings::default()
    })
    .expect("cache");
    cache.index.crowded = true;
    Arc::new(cache)
}

/// Two keys with one hash: a store of the second displaces the first's item as an eviction
/// (uncharged, counted), and a read, a write or a delete of either never touches the
/// other's item: the one displaced reads as a miss.
#[test]
fn a_key_with_anothers_hash_displaces_it_and_never_reads_it() {
    let cache = crowded_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    assert!(matches!(
        session.store(StoreMode::Set, b"a", 0, 0, b"1", None),
        Stored::Stored(_)
    ));
    assert_eq!(session.peek(b"a").map(|item| item.data()), Some(&b"1"[..]));
    assert!(session.peek(b"b").is_none(), "a's item is not b's");
    assert_eq!(session.delete(b"b", None), Deleted::NotFound);
    assert_eq!(
        session.store(StoreMode::Replace, b"b", 0, 0, b"2", None),
        Stored::NotStored
    );
    assert!(matches!(
        session.delta(b"b", true, 1, None, None, false, None),
        Delta::NotFound
    ));
    assert!(session.touch(b"b", 5).is_none());
    assert_eq!(
        session.peek(b"a").map(|item| item.data()),
        Some(&b"1"[..]),
        "a kept"
    );
    // b's store takes the hash.
    assert!(matches!(
        session.store(StoreMode::Add, b"b", 0, 0, b"22", None),
        Stored::Stored(_)
    ));
    assert!(session.peek(b"a").is_none());
    assert_eq!(session.peek(b"b").map(|item| item.data()), Some(&b"22"[..]));
    assert_eq!(cache.counter(Counter::Evictions), 1);
    assert_eq!(cache.items(), 1);
    assert_eq!(
        cache.bytes(),
        charged_for_items(&cache) + node_charge(),
        "a's node only is stale"
    );
    assert!(matches!(
        session.delta(b"a", true, 1, None, Some((5, 0)), false, None),
        Delta::Value(5, _, true)
    ));
    assert!(session.peek(b"b").is_none());
    assert_eq!(session.delete(b"a", None), Deleted::Deleted);
    assert_eq!(cache.items(), 0);
    assert_eq!(
        cache.bytes(),
        3 * node_charge(),
        "the three nodes are stale"
    );
}

/// Many keys on one hash, written and read in a random order: a read answers the key's own
/// last value or a miss, never another key's, and the charge stays exact.
#[test]
fn crowded_keys_never_answer_each_others_values() {
    let cache = crowded_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    let mut last = std::collections::HashMap::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for step in 0..if cfg!(miri) { 200 } else { 2000u32 } {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let key = format!("k{}", state % 8);
        match state >> 60 {
            0..=7 => {
                let value = format!("{step}");
                session.store(StoreMode::Set, key.as_bytes(), 0, 0, value.as_bytes(), None);
                last.insert(key.clone(), value);
            }
            8..=9 => {
                session.delete(key.as_bytes(), None);
                last.remove(&key);
            }
            _ => {}
        }
        for k in 0..8 {
            let key = format!("k{k}");
            if let Some(item) = session.peek(key.as_bytes()) {
                assert_eq!(
                    Some(item.data()),
                    last.get(&key).map(|v| v.as_bytes()),
                    "{key} at {step}"
                );
            }
        }
        assert!(cache.items() <= 1);
    }
    assert!(cache.bytes() >= charged_for_items(&cache));
}

/// `-m` counts exactly each present item's charge and one node per key through every kind
/// of write that replaces an item (overwrite, append, prepend, `incr` padded and not, touch,
/// `md ... x` and `md ... I`), for keys inline and not; once every key is deleted only the
/// nodes' slots stay charged, and once eviction has run past them nothing does.
#[test]
fn every_write_keeps_the_charge_exact() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    let keys: Vec<Vec<u8>> = [1, 5, 22, 23, 100, 250]
        .iter()
        .map(|&len| (0..len).map(|i| b'a' + (i % 26) as u8).collect())
        .collect();
    let exact = |cache: &Cache| {
        assert_eq!(cache.bytes(), charged_for_items(cache));
    };
    for key in &keys {
        let stored = session.store(StoreMode::Set, key, 0, 0, b"12", None);
        assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
        exact(&cache);
        let stored = session.store(StoreMode::Set, key, 1, 0, &[b'7'; 300], None);
        assert!(matches!(stored, Stored::Stored(_)));
        session.store(StoreMode::Set, key, 0, 0, b"41", None);
        session.store(StoreMode::Append, key, 0, 0, b"00", None);
        session.store(StoreMode::Prepend, key, 0, 0, b"9", None);
        exact(&cache);
        assert!(matches!(
            session.delta(key, true, 1, None, None, false, None),
            Delta::Value(94101, _, false)
        ));
        assert!(matches!(
            session.delta(key, false, 94000, None, None, true, None),
            Delta::Value(101, _, false)
        ));
        exact(&cache);
        assert!(session.touch(key, 0).is_some());
        let stale = Tombstone {
            stale: true,
            ..Tombstone::default()
        };
        assert_eq!(session.tombstone(key, None, stale), Deleted::Deleted);
        exact(&cache);
        let empty = Tombstone {
            empty: Some((3, 0)),
            ..Tombstone::default()
        };
        assert_eq!(session.tombstone(key, None, empty), Deleted::Deleted);
        exact(&cache);
    }
    assert_eq!(cache.items(), keys.len());
    for key in &keys {
        assert_eq!(session.delete(key, None), Deleted::Deleted);
    }
    assert_eq!(
        cache.bytes(),
        keys.len() * node_charge(),
        "only the nodes' slots"
    );
    // A cache's worth of other items runs eviction past the stale nodes.
    for i in 0..12_000u32 {
        store_then(&mut session, &format!("filler{i}"), 0, false);
    }
    exact(&cache);
}

/// Stale nodes that reach a queue's head are freed with their slot's charge, and the split
/// still drains a small queue that holds only stale slots: once evictions have run past
/// them, `-m` counts exactly the items present and their nodes.
#[test]
fn stale_nodes_reaching_the_head_free_their_slots() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    for i in 0..2000u32 {
        store_then(&mut session, &format!("gone{i}"), 0, true);
    }
    assert_eq!(cache.bytes(), 2000 * core::mem::size_of::<Node>());
    // 2 MB of live items into 1 MiB: evictions reach every stale node, then live items.
    for i in 0..8000u32 {
        store_then(&mut session, &format!("live{i}"), 0, false);
    }
    assert!(session.peek(b"live0").is_none(), "evictions ran");
    assert_eq!(cache.bytes(), charged_for_items(&cache));
}

/// The pass unlinks the expired items and counts one crawler run; their nodes, like the
/// deletes', stay charged their slots until eviction reaches them.
#[test]
fn the_pass_unlinks_expired_items_and_leaves_stale_slots() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    let mut expiring = 0;
    for i in 0..300u32 {
        store_then(&mut session, &format!("brief{i}"), 10, false);
        expiring += core::mem::size_of::<Node>();
    }
    for i in 0..1500u32 {
        store_then(&mut session, &format!("gone{i}"), 0, true);
    }
    cache.advance_clock(11);
    let slot = core::mem::size_of::<Node>();
    assert_eq!(cache.reclaim_expired(), 300);
    assert_eq!(cache.counter(Counter::CrawlerStarts), 1);
    assert_eq!(cache.counter(Counter::CrawlerReclaimed), 300);
    assert_eq!(
        cache.bytes(),
        1500 * slot + expiring,
        "the expired items uncharged, every node's slot still charged"
    );
    assert_eq!(cache.reclaim_expired(), 0, "nothing left to unlink");
    assert_eq!(cache.bytes(), 1500 * slot + expiring);
}
