//! Persistent maps: reopening, recovery after a crash at a random instant (a kill harness) and
//! at every crash point of the write protocols, a simulated power loss, and damaged, foreign
//! or locked files.
//!
//! The crash tests run the map in a child process: this test binary again, with one of the
//! `child_*` tests selected and its instructions in the environment. The child writes to
//! stdout, before each operation, a line saying what it is about to do, and after it the
//! answer, so the parent knows every acknowledged operation and the one (per thread) in flight
//! when the child died. Each thread owns the keys congruent to its index, so per key there is
//! one history and at most one operation in flight.

#![cfg(unix)]

mod crash_harness;

use crash_harness::{
    copy_map, env_u64, make_fifo, read_report, spawn_child, within_seconds, Rng, Scratch,
};
use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use floe::{Error, FlatMap, Insert, StorageErrorKind};

type Persistent = FlatMap<u64, u64>;

/// One write operation on a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Insert(u64),
    Upsert(u64),
    Put(u64),
    Remove,
    FetchAdd(u64),
    CompareExchange(u64, u64),
}

impl Op {
    fn random(rng: &mut Rng, present: Option<u64>) -> Op {
        let value = rng.below(1 << 40);
        match rng.below(10) {
            0..=2 => Op::Insert(value),
            3 => Op::Upsert(value),
            4 => Op::Put(value),
            5 | 6 => Op::Remove,
            7 => Op::FetchAdd(rng.below(100) + 1),
            _ => Op::CompareExchange(present.unwrap_or(value), value + 1),
        }
    }

    /// The key's value after this operation, from `before`.
    fn apply(self, before: Option<u64>) -> Option<u64> {
        match self {
            Op::Insert(value) => before.or(Some(value)),
            Op::Upsert(value) => Some(value),
            Op::Put(value) => before.map(|_| value),
            Op::Remove => None,
            Op::FetchAdd(delta) => Some(before.unwrap_or(0).wrapping_add(delta)),
            Op::CompareExchange(expected, new) => match before {
                Some(now) if now == expected => Some(new),
                other => other,
            },
        }
    }

    /// Run it on the map; the answer as the value before (every operation here reports it).
    fn run(self, map: &Persistent, key: u64) -> Option<u64> {
        match self {
            Op::Insert(value) => match map.insert_new(key, value) {
                Insert::Inserted => None,
                Insert::Present(now) => Some(now),
                Insert::Shadowed => unreachable!("no shadow inserts here"),
            },
            Op::Upsert(value) => map.insert(key, value),
            Op::Put(value) => map.put(key, value),
            Op::Remove => map.remove(&key),
            Op::FetchAdd(delta) => map.fetch_add(key, delta),
            Op::CompareExchange(expected, new) => match map.compare_exchange(&key, expected, new) {
                Ok(before) => Some(before),
                Err(floe::CompareExchangeError::Absent) => None,
                Err(floe::CompareExchangeError::Mismatch(now)) => Some(now),
            },
        }
    }

    fn encode(self) -> String {
        match self {
            Op::Insert(v) => format!("i {v}"),
            Op::Upsert(v) => format!("u {v}"),
            Op::Put(v) => format!("p {v}"),
            Op::Remove => "r".into(),
            Op::FetchAdd(d) => format!("f {d}"),
            Op::CompareExchange(e, n) => format!("c {e} {n}"),
        }
    }

    fn decode(words: &[&str]) -> Option<Op> {
        let number = |index: usize| words.get(index)?.parse::<u64>().ok();
        Some(match *words.first()? {
            "i" => Op::Insert(number(1)?),
            "u" => Op::Upsert(number(1)?),
            "p" => Op::Put(number(1)?),
            "r" => Op::Remove,
            "f" => Op::FetchAdd(number(1)?),
            "c" => Op::CompareExchange(number(1)?, number(2)?),
            _ => return None,
        })
    }
}

/// The parent's knowledge of the map: each key's value after its last acknowledged operation,
/// and the operations in flight.
#[derive(Default)]
struct Model {
    values: HashMap<u64, u64>,
    in_flight: HashMap<u64, Op>,
}

impl Model {
    /// Take one line of a child's report ("I key op..." before, "A key answer" after).
    fn take(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["I", key, rest @ ..] => {
                let key = key.parse().expect("key");
                let op = Op::decode(rest).expect("op");
                assert!(
                    self.in_flight.insert(key, op).is_none(),
                    "two operations in flight on key {key}"
                );
            }
            ["A", key, answer] => {
                let key: u64 = key.parse().expect("key");
                let op = self
                    .in_flight
                    .remove(&key)
                    .expect("an answer to no operation");
                let before = self.values.get(&key).copied();
                let answer = match *answer {
                    "-" => None,
                    number => Some(number.parse().expect("answer")),
                };
                assert_eq!(answer, before, "key {key}: {op:?} answered wrongly");
                match op.apply(before) {
                    Some(value) => self.values.insert(key, value),
                    None => self.values.remove(&key),
                };
            }
            _ => {} // a line the kill cut short: its operation stays in flight
        }
    }

    /// Check the reopened map against the model: every key at its acknowledged value, or for
    /// a key with an operation in flight, at the value before or after it (wholly one or the
    /// other). Afterwards the model holds what the map holds.
    fn check(&mut self, map: &Persistent) {
        let live = map.check_invariants();
        let mut seen = 0;
        for (key, value) in map.iter() {
            seen += 1;
            let before = self.values.get(&key).copied();
            match self.in_flight.get(&key) {
                Some(op) => assert!(
                    Some(value) == before || Some(value) == op.apply(before),
                    "key {key}: {value} is neither before ({before:?}) nor after {op:?}"
                ),
                None => assert_eq!(Some(value), before, "key {key}"),
            }
        }
        assert_eq!(seen, live);
        for (&key, &value) in &self.values {
            if map.get(&key).is_none() {
                let op = self.in_flight.get(&key);
                assert!(
                    op.is_some_and(|op| op.apply(Some(value)).is_none()),
                    "key {key} (value {value}) was lost; in flight: {op:?}"
                );
            }
        }
        // Each operation in flight went one way or the other: follow the map.
        for key in std::mem::take(&mut self.in_flight).into_keys() {
            match map.get(&key) {
                Some(value) => self.values.insert(key, value),
                None => self.values.remove(&key),
            };
        }
    }
}

/// What a child does: `threads` threads applying random operations on their keys (key space
/// `keys`), reporting each, from `seed`; with `sizing`, occasional reserves and shrinks.
fn child_workload(dir: &Path, seed: u64, threads: u64, keys: u64, ops: u64, sizing: bool) {
    // `FLOE_PERSIST_FLUSH`: at `Durability::Flush`, each line written back logged
    // (`FLOE_FLUSH_LOG`, feature `crash-points`) for `flush_level_keeps_what_returned`.
    let durability = match std::env::var_os("FLOE_PERSIST_FLUSH") {
        Some(_) => floe::Durability::Flush,
        None => floe::Durability::Process,
    };
    let builder = FlatMap::<u64, u64>::builder().durability(durability);
    let map = if dir.join("floe.super").exists() {
        builder.open(dir).expect("reopen").0
    } else {
        builder.capacity(64).build_persistent(dir).expect("create")
    };
    // Stdout writes a line at a time: an intent is out before its operation starts.
    let out = std::sync::Mutex::new(std::io::stdout());
    // `FLOE_PERSIST_CHECKPOINT_MS`: a thread checkpointing that often, reporting "C b" before
    // each checkpoint and "C e" after it returned (`power_loss_during_growth`).
    let checkpoint_every = env_u64("FLOE_PERSIST_CHECKPOINT_MS").map(Duration::from_millis);
    std::thread::scope(|scope| {
        if let Some(every) = checkpoint_every {
            let (map, out) = (&map, &out);
            scope.spawn(move || loop {
                std::thread::sleep(every);
                writeln!(out.lock().unwrap(), "C b").unwrap();
                map.checkpoint().expect("checkpoint");
                writeln!(out.lock().unwrap(), "C e").unwrap();
            });
        }
        for thread in 0..threads {
            let (map, out) = (&map, &out);
            scope.spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((thread + 1) * 77));
                for _ in 0..ops {
                    let key = rng.below(keys / threads) * threads + thread;
                    if sizing && rng.below(3000) == 0 {
                        if rng.below(2) == 0 {
                            map.reserve(map.len()).expect("reserve");
                        } else {
                            map.shrink_to_fit().expect("shrink");
                        }
                    }
                    let op = Op::random(&mut rng, map.get(&key));
                    reported(out, map, key, op);
                }
            });
        }
    });
    drop(map);
}

/// Run `op` on `key`, with its intent reported before and its answer after.
fn reported(out: &std::sync::Mutex<std::io::Stdout>, map: &Persistent, key: u64, op: Op) {
    writeln!(out.lock().unwrap(), "I {key} {}", op.encode()).unwrap();
    let answer = op.run(map, key);
    let answer = answer.map_or("-".to_string(), |v| v.to_string());
    writeln!(out.lock().unwrap(), "A {key} {answer}").unwrap();
}

/// In a child (`FLOE_PERSIST_CHILD` names its directory): the directory, and a new persistent
/// map there sized for `capacity` keys. `None` when run as a test of its own.
fn child_map(capacity: usize) -> Option<(PathBuf, Persistent)> {
    let dir = PathBuf::from(std::env::var("FLOE_PERSIST_CHILD").ok()?);
    let map = FlatMap::<u64, u64>::builder()
        .capacity(capacity)
        .build_persistent(&dir)
        .expect("create");
    Some((dir, map))
}

/// The child of `kill_harness` (does nothing when run as a test of its own).
#[test]
fn child_kill_workload() {
    let Ok(dir) = std::env::var("FLOE_PERSIST_CHILD") else {
        return;
    };
    let seed = env_u64("FLOE_PERSIST_SEED").unwrap_or(1);
    let keys = env_u64("FLOE_PERSIST_KEYS").unwrap_or(4096);
    child_workload(Path::new(&dir), seed, 2, keys, u64::MAX / 4, true);
}

/// The kill harness: rounds of a child process applying random operations from two threads
/// (growing the map over the rounds, with reserves and shrinks), killed with SIGKILL at a
/// random instant; after each, the map is reopened and every key checked against the
/// acknowledged history. `FLOE_KILL_ROUNDS` sets the rounds (default 40).
#[test]
fn kill_harness() {
    let scratch = Scratch::new("kill");
    let rounds = env_u64("FLOE_KILL_ROUNDS").unwrap_or(40);
    let mut model = Model::default();
    let mut rng = Rng(0x5eed);
    let started = Instant::now();
    for round in 0..rounds {
        let keys = 2048 * (1 + round % 16);
        let mut child = spawn_child(
            "child_kill_workload",
            &[
                ("FLOE_PERSIST_CHILD", scratch.path().display().to_string()),
                ("FLOE_PERSIST_SEED", (round + 1).to_string()),
                ("FLOE_PERSIST_KEYS", keys.to_string()),
            ],
        );
        let life = Duration::from_millis(20 + rng.below(120));
        read_report(&mut child, Some(Instant::now() + life), |line| {
            model.take(line)
        });
        let (map, recovery) = FlatMap::<u64, u64>::builder()
            .open(scratch.path())
            .unwrap_or_else(|error| panic!("round {round}: reopen failed: {error}"));
        assert_eq!(recovery.damaged, 0, "round {round}");
        model.check(&map);
        drop(map);
    }
    eprintln!(
        "kill harness: {rounds} rounds in {:?}, {} keys at the end",
        started.elapsed(),
        model.values.len()
    );
}

/// The child of `every_crash_point_recovers`: one thread, a fixed script from a small map
/// through several growths, a shrink and a reserve.
#[test]
fn child_crash_script() {
    let Some((_, map)) = child_map(8) else {
        return;
    };
    let out = std::sync::Mutex::new(std::io::stdout());
    let keys = env_u64("FLOE_CRASH_KEYS").unwrap_or(200);
    for key in 0..keys {
        reported(&out, &map, key, Op::Insert(key * 10));
    }
    map.reserve(keys as usize * 4).expect("reserve");
    for key in (0..keys).step_by(3) {
        reported(&out, &map, key, Op::Upsert(key + 1));
    }
    for key in 0..keys * 3 / 4 {
        reported(&out, &map, key, Op::Remove);
    }
    map.shrink_to_fit().expect("shrink");
    for key in 0..keys / 4 {
        reported(&out, &map, key, Op::Insert(key));
    }
    drop(map);
}

/// Crash points (feature `crash-points`): run the script once for every crash point it
/// reaches (insert, remove, chaining, bin moves, publishing, the superblock's updates), each
/// in a fresh directory, crash there, reopen, check. `FLOE_CRASH_STRIDE` sets the step
/// between the points tried (default 17, so the test suite stays short; `ci/stress.sh` runs
/// every one).
#[cfg(feature = "crash-points")]
#[test]
fn every_crash_point_recovers() {
    let stride = env_u64("FLOE_CRASH_STRIDE").unwrap_or(17).max(1);
    let (crashed, last) = crash_harness::for_each_crash_point(
        "child_crash_script",
        "FLOE_PERSIST_CHILD",
        stride,
        Model::default,
        Model::take,
        |point, dir, mut model, crashed| {
            let (map, recovery) = FlatMap::<u64, u64>::builder()
                .open(dir)
                .unwrap_or_else(|error| panic!("crash point {point}: reopen failed: {error}"));
            assert_eq!(recovery.damaged, 0);
            if crashed {
                model.check(&map);
            } else {
                // The script ran past every point. Its final removes and shrink are not
                // reported; check only what is left agrees.
                assert_eq!(map.check_invariants(), map.len());
            }
        },
    );
    assert!(
        crashed > 0,
        "no crash point was reached: is the feature on?"
    );
    eprintln!(
        "{crashed} crash points checked, every {stride}th of {}",
        last - 1
    );
}

/// Power loss at `Durability::Flush` on a DAX mapping, simulated: the media keeps exactly the
/// lines written back (`clwb`) as they were when written back, nothing else; a table file
/// starts as zeroes (its blocks reserved, never written through the page cache here), and the
/// superblock is as the child last wrote it (synced). Each round a fresh child applies random
/// operations from two threads (the map growing from 64 keys, with reserves and shrinks) at
/// `Flush`, logging every write-back, and is killed at a random instant; the image built
/// from the log must recover to a map holding every acknowledged operation, and each one in
/// flight wholly or not at all. (With the write-back before an operation returns left out,
/// this fails on the first round.)
#[cfg(feature = "crash-points")]
#[test]
fn flush_level_keeps_what_returned() {
    let mut rng = Rng(0xf1a5);
    for round in 0..6 {
        let scratch = Scratch::new("flush");
        let log = Scratch::new("flush-log");
        let mut model = Model::default();
        let mut child = spawn_child(
            "child_kill_workload",
            &[
                ("FLOE_PERSIST_CHILD", scratch.path().display().to_string()),
                ("FLOE_PERSIST_SEED", (round + 1).to_string()),
                ("FLOE_PERSIST_KEYS", "6000".into()),
                ("FLOE_PERSIST_FLUSH", "1".into()),
                ("FLOE_FLUSH_LOG", log.path().display().to_string()),
            ],
        );
        let life = Duration::from_millis(100 + rng.below(400));
        read_report(&mut child, Some(Instant::now() + life), |line| {
            model.take(line)
        });
        let image = Scratch::new("flush-image");
        let lines = written_back_image(scratch.path(), log.path(), image.path());
        let (map, recovery) = FlatMap::<u64, u64>::builder()
            .open(image.path())
            .unwrap_or_else(|error| panic!("round {round}: reopen failed: {error}"));
        assert_eq!(recovery.damaged, 0, "round {round}");
        let acknowledged = model.values.len();
        eprintln!(
            "round {round}: {recovery:?}, files {:?}",
            std::fs::read_dir(scratch.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect::<Vec<_>>()
        );
        model.check(&map);
        eprintln!(
            "round {round}: {lines} lines written back, {acknowledged} keys acknowledged, \
             {} recovered, {} moves rebuilt",
            recovery.keys, recovery.moves_rebuilt
        );
    }
}

/// Build in `image` the media a power loss leaves when only written-back lines survive: the
/// superblock of `dir`, and each table file it holds as zeroes overlaid, in order, by the
/// lines the write-back log at `log` recorded for it (80-byte records: generation, offset,
/// 64 bytes; a record the kill cut short is dropped). The lines applied.
#[cfg(feature = "crash-points")]
fn written_back_image(dir: &Path, log: &Path, image: &Path) -> usize {
    std::fs::create_dir_all(image).unwrap();
    std::fs::copy(dir.join("floe.super"), image.join("floe.super")).unwrap();
    let records = std::fs::read(log).unwrap_or_default();
    let word = |record: &[u8], index: usize| {
        u64::from_le_bytes(record[8 * index..8 * index + 8].try_into().unwrap())
    };
    let mut applied = 0;
    for (gen, name, path) in table_files(dir) {
        let mut bytes = vec![0u8; std::fs::metadata(&path).unwrap().len() as usize];
        for record in records
            .chunks_exact(80)
            .filter(|record| word(record, 0) == gen)
        {
            let offset = word(record, 1) as usize;
            bytes[offset..offset + 64].copy_from_slice(&record[16..80]);
            applied += 1;
        }
        std::fs::write(image.join(&name), bytes).unwrap();
    }
    applied
}

/// The table files of the map in `dir`: generation, file name, path.
#[cfg(feature = "crash-points")]
fn table_files(dir: &Path) -> Vec<(u64, String, PathBuf)> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name()?.to_str()?.to_string();
            let gen = name
                .strip_prefix("table-")?
                .strip_suffix(".floe")
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())?;
            Some((gen, name, path))
        })
        .collect()
}

/// A persistent map churned at a constant size spends its link pool on buckets chained by keys
/// since deleted; its table is then refreshed at its own size (a migration into a new table
/// file of the same bins, which the superblock records and recovery accepts), and it closes
/// and reopens with every live key.
#[test]
fn a_churned_persistent_map_refreshes_and_reopens() {
    const LIVE: u64 = 5_000;
    let scratch = Scratch::new("refresh");
    let map = FlatMap::<u64, u64>::builder()
        .capacity(LIVE as usize)
        .build_persistent(scratch.path())
        .unwrap();
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for i in 0..LIVE {
        assert!(map.insert_new(key(i), i).is_inserted());
    }
    let bins = map.stats().bins;
    let (mut refreshes, mut chained) = (0, map.stats().link_buckets_used);
    for i in 0..60_000 {
        assert_eq!(map.remove(&key(i)), Some(i));
        assert!(map.insert_new(key(i + LIVE), i + LIVE).is_inserted());
        let now = map.stats().link_buckets_used;
        refreshes += usize::from(now < chained);
        chained = now;
    }
    assert_eq!(map.stats().bins, bins, "the table grew under churn");
    assert!(refreshes > 0, "the link pool never ran out");
    map.close().unwrap();
    let (map, recovery) = FlatMap::<u64, u64>::builder().open(scratch.path()).unwrap();
    assert!(recovery.clean);
    assert_eq!(recovery.keys, LIVE as usize);
    assert_eq!(map.stats().bins, bins);
    for i in 60_000..60_000 + LIVE {
        assert_eq!(map.get(&key(i)), Some(i));
    }
    // Churn on until an insert leaves a refresh under way (each insert moves only its own
    // bin), then copy the files as a crash would leave them: the copy opens, finishing the
    // refresh, with every live key.
    let mut i = 60_000;
    let copy = loop {
        assert!(i < 200_000, "no refresh began");
        assert_eq!(map.remove(&key(i)), Some(i));
        assert!(map.insert_new(key(i + LIVE), i + LIVE).is_inserted());
        i += 1;
        if map.stats().migrating && map.stats().bins == bins {
            break copy_map(scratch.path(), "mid-refresh");
        }
    };
    drop(map);
    let (map, recovery) = FlatMap::<u64, u64>::builder()
        .open(copy.path())
        .unwrap_or_else(|error| panic!("a map copied mid-refresh: {error}"));
    assert!(!recovery.clean);
    assert_eq!(map.check_invariants(), LIVE as usize);
    assert_eq!(map.stats().bins, bins);
    for i in i..i + LIVE {
        assert_eq!(map.get(&key(i)), Some(i));
    }
}

/// A round trip through close and open, with growth, keeps every key; so does a drop without
/// an explicit close; and an open after a clean close sweeps nothing.
#[test]
fn a_closed_map_reopens_with_every_key() {
    let scratch = Scratch::new("roundtrip");
    let mut model = HashMap::new();
    let map = FlatMap::<u64, u64>::builder()
        .capacity(16)
        .build_persistent(scratch.path())
        .unwrap();
    assert!(map.is_persistent());
    let mut rng = Rng(7);
    for _ in 0..60_000 {
        let key = rng.below(20_000);
        let op = Op::random(&mut rng, model.get(&key).copied());
        assert_eq!(op.run(&map, key), model.get(&key).copied());
        match op.apply(model.get(&key).copied()) {
            Some(value) => model.insert(key, value),
            None => model.remove(&key),
        };
    }
    let grown = map.stats().bins;
    map.close().unwrap();
    let (map, recovery) = FlatMap::<u64, u64>::builder().open(scratch.path()).unwrap();
    assert!(recovery.clean);
    assert_eq!((recovery.keys, recovery.freed), (model.len(), 0));
    assert_eq!(map.stats().bins, grown);
    assert_eq!(map.len(), model.len());
    for (&key, &value) in &model {
        assert_eq!(map.get(&key), Some(value));
    }
    assert!(map.insert_new(1 << 50, 5).is_inserted());
    drop(map);
    let map = Persistent::open(scratch.path()).unwrap();
    assert_eq!(map.get(&(1 << 50)), Some(5));
    assert_eq!(map.len(), model.len() + 1);
}

fn file_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

fn restore(files: &[(PathBuf, Vec<u8>)]) {
    for (path, bytes) in files {
        std::fs::write(path, bytes).unwrap();
    }
}

fn table_file(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|e| e == "floe"))
        .expect("a table file")
}

/// The kind of storage error `result` is, checking that the error names a path and that its
/// message does.
fn storage_error<T>(result: Result<T, Error>) -> StorageErrorKind {
    match result {
        Err(Error::Storage(error)) => {
            let path = error.path().expect("a storage error names its path");
            assert!(
                error.to_string().contains(&path.display().to_string()),
                "{error}"
            );
            error.kind()
        }
        Err(other) => panic!("expected a storage error, got {other}"),
        Ok(_) => panic!("expected a storage error, got a map"),
    }
}

/// Missing, existing, locked, foreign, damaged and mistyped files are refused with the error
/// that says so, and a refused open leaves the files as they were.
#[test]
fn bad_files_are_refused_unchanged() {
    let scratch = Scratch::new("bad");
    let dir = scratch.path();
    assert_eq!(
        storage_error(Persistent::open(dir)),
        StorageErrorKind::Missing
    );
    let map = FlatMap::<u64, u64>::builder()
        .capacity(1000)
        .build_persistent(dir)
        .unwrap();
    for key in 0..500 {
        assert!(map.insert_new(key, key * 3).is_inserted());
    }
    assert_eq!(
        storage_error(Persistent::open(dir)),
        StorageErrorKind::Locked
    );
    assert_eq!(
        storage_error(FlatMap::<u64, u64>::builder().build_persistent(dir)),
        StorageErrorKind::Locked
    );
    map.close().unwrap();
    assert_eq!(
        storage_error(FlatMap::<u64, u64>::builder().build_persistent(dir)),
        StorageErrorKind::Exists
    );
    assert_eq!(
        storage_error(FlatMap::<u64, u32>::open(dir)),
        StorageErrorKind::TypeMismatch("value")
    );
    assert_eq!(
        storage_error(FlatMap::<i64, u64>::open(dir)),
        StorageErrorKind::TypeMismatch("key")
    );
    assert_eq!(
        storage_error(FlatMap::<u64, u64, floe::hash::WyHash>::open(dir)),
        StorageErrorKind::TypeMismatch("hasher")
    );
    let good = file_bytes(dir);
    let superblock = dir.join("floe.super");
    let table = table_file(dir);
    let original_super = std::fs::read(&superblock).unwrap();
    let original_table = std::fs::read(&table).unwrap();

    // Each damage, the error it gets, and the files unchanged by the refused open.
    type Damage<'a> = (&'a str, Box<dyn Fn() + 'a>, fn(StorageErrorKind) -> bool);
    let damages: Vec<Damage> = vec![
        (
            "foreign superblock",
            Box::new(|| std::fs::write(&superblock, b"#!/bin/sh\necho hello\n").unwrap()),
            |e| e == StorageErrorKind::Foreign,
        ),
        (
            "zeroed superblock",
            Box::new(|| std::fs::write(&superblock, vec![0u8; original_super.len()]).unwrap()),
            |e| e == StorageErrorKind::Foreign,
        ),
        (
            "truncated superblock",
            Box::new(|| std::fs::write(&superblock, &original_super[..40]).unwrap()),
            |e| matches!(e, StorageErrorKind::Corrupt(_)),
        ),
        (
            "bit-flipped superblock",
            Box::new(|| {
                let mut bytes = original_super.clone();
                bytes[70] ^= 4;
                std::fs::write(&superblock, bytes).unwrap()
            }),
            |e| matches!(e, StorageErrorKind::Corrupt(_)),
        ),
        (
            "missing superblock",
            Box::new(|| std::fs::remove_file(&superblock).unwrap()),
            |e| e == StorageErrorKind::Missing,
        ),
        (
            "truncated table",
            Box::new(|| std::fs::write(&table, &original_table[..4096]).unwrap()),
            |e| matches!(e, StorageErrorKind::Corrupt(_)),
        ),
        (
            "zero-filled table",
            Box::new(|| std::fs::write(&table, vec![0u8; original_table.len()]).unwrap()),
            |e| matches!(e, StorageErrorKind::Corrupt(_)),
        ),
        (
            "bit-flipped table header",
            Box::new(|| {
                let mut bytes = original_table.clone();
                // A link word of some bin pointing far outside the pool.
                bytes[64 * 3 + 15] ^= 0x40;
                std::fs::write(&table, bytes).unwrap()
            }),
            |e| matches!(e, StorageErrorKind::Corrupt(_)),
        ),
        (
            "missing table",
            Box::new(|| std::fs::remove_file(&table).unwrap()),
            |e| matches!(e, StorageErrorKind::Corrupt(_)),
        ),
        (
            // Every byte counts after a clean close (the checksum written then): a value's
            // bit, which no structural check could tell from a written value.
            "a value's bit flipped",
            Box::new(|| {
                let mut bytes = original_table.clone();
                let (first_bin_slot_value, bin) = (24, 64 * 5);
                bytes[bin + first_bin_slot_value] ^= 0x01;
                std::fs::write(&table, bytes).unwrap()
            }),
            |e| matches!(e, StorageErrorKind::Corrupt(_)),
        ),
        (
            "a byte of the never-written tail",
            Box::new(|| {
                let mut bytes = original_table.clone();
                let last = bytes.len() - 1;
                bytes[last] = 7;
                std::fs::write(&table, bytes).unwrap()
            }),
            |e| matches!(e, StorageErrorKind::Corrupt(_)),
        ),
    ];
    for (what, damage, expected) in damages {
        damage();
        let before = file_bytes(dir);
        let error = storage_error(Persistent::open(dir));
        assert!(expected(error), "{what}: {error:?}");
        assert_eq!(
            file_bytes(dir),
            before,
            "{what}: the refused open changed the files"
        );
        restore(&good);
    }
    let map = Persistent::open(dir).unwrap();
    assert_eq!(map.len(), 500);
    assert_eq!(map.get(&7), Some(21));
}

/// A path that cannot hold a map gets an I/O error, not a panic.
#[test]
fn unwritable_paths_are_errors() {
    let error =
        storage_error(FlatMap::<u64, u64>::builder().build_persistent("/proc/floe-cannot-be-here"));
    assert!(matches!(error, StorageErrorKind::Io { .. }), "{error:?}");
    // The operating system's refusal is the error's source, for callers that inspect it (or
    // print the chain); the path is the one asked for.
    let refused = FlatMap::<u64, u64>::builder()
        .build_persistent("/proc/floe-cannot-be-here")
        .expect_err("refused");
    let source = std::error::Error::source(&refused).expect("an I/O error has a source");
    let io = source
        .downcast_ref::<std::io::Error>()
        .expect("the source is the std::io::Error");
    assert!(io.raw_os_error().is_some(), "{io:?}");
    let Error::Storage(storage) = &refused else {
        panic!("{refused:?}")
    };
    assert_eq!(
        storage.path(),
        Some(std::path::Path::new("/proc/floe-cannot-be-here"))
    );
    // Errors that are not the system's own have none.
    assert!(std::error::Error::source(&Error::Full).is_none());
    let scratch = Scratch::new("file");
    std::fs::write(scratch.path(), b"a file, not a directory").unwrap();
    let error = storage_error(FlatMap::<u64, u64>::builder().build_persistent(scratch.path()));
    assert!(matches!(error, StorageErrorKind::Io { .. }), "{error:?}");
    assert_eq!(
        storage_error(Persistent::open(scratch.path())),
        StorageErrorKind::Missing
    );
}

/// Power loss, simulated: after a checkpoint, more operations; the disk then holds, per
/// 512-byte sector (a device writes sectors whole), either the checkpoint's content or the
/// latest, at random. Recovery must give a consistent map that keeps every checkpointed
/// operation: each key at its checkpointed value or a later one.
#[test]
fn power_loss_keeps_the_checkpoint() {
    let scratch = Scratch::new("power");
    let dir = scratch.path();
    let map = FlatMap::<u64, u64>::builder()
        .capacity(40_000)
        .build_persistent(dir)
        .unwrap();
    let mut rng = Rng(99);
    let mut model: HashMap<u64, u64> = HashMap::new();
    let apply = |map: &Persistent, rng: &mut Rng, model: &mut HashMap<u64, u64>| {
        let key = rng.below(30_000);
        let op = Op::random(rng, model.get(&key).copied());
        op.run(map, key);
        match op.apply(model.get(&key).copied()) {
            Some(value) => model.insert(key, value),
            None => model.remove(&key),
        };
        key
    };
    for _ in 0..40_000 {
        apply(&map, &mut rng, &mut model);
    }
    let bins = map.stats().bins;
    map.checkpoint().unwrap();
    let checkpointed = file_bytes(dir);
    let at_checkpoint = model.clone();
    // Later states each key may be found in.
    let mut later: HashMap<u64, Vec<Option<u64>>> = HashMap::new();
    for _ in 0..20_000 {
        let key = apply(&map, &mut rng, &mut model);
        later.entry(key).or_default().push(model.get(&key).copied());
    }
    assert_eq!(
        map.stats().bins,
        bins,
        "the test wants no growth after the checkpoint"
    );
    let latest = file_bytes(dir);
    drop(map);
    for trial in 0..6 {
        let image = Scratch::new("power-image");
        std::fs::create_dir_all(image.path()).unwrap();
        for ((path, old), (_, new)) in checkpointed.iter().zip(&latest) {
            let name = path.file_name().unwrap();
            // The superblock is as of the checkpoint (the open since then changed nothing).
            let bytes = if name == "floe.super" {
                old.clone()
            } else {
                old.chunks(512)
                    .zip(new.chunks(512))
                    .flat_map(|(old, new)| if rng.below(2) == 0 { old } else { new })
                    .copied()
                    .collect()
            };
            std::fs::write(image.path().join(name), bytes).unwrap();
        }
        let map = Persistent::open(image.path()).unwrap();
        map.check_invariants();
        for (key, value) in map.iter() {
            let fine = at_checkpoint.get(&key) == Some(&value)
                || later
                    .get(&key)
                    .is_some_and(|states| states.contains(&Some(value)));
            assert!(
                fine,
                "trial {trial}: key {key} holds {value}, never one of its values"
            );
        }
        for (key, &value) in &at_checkpoint {
            if map.get(key).is_none() {
                assert!(
                    later.get(key).is_some_and(|states| states.contains(&None)),
                    "trial {trial}: key {key} (checkpointed as {value}) was lost"
                );
            }
        }
    }
}

/// What a power loss may leave of each key: every state the child acknowledged, in order,
/// with the operations in flight, and where the last checkpoint that returned began.
#[cfg(feature = "crash-points")]
#[derive(Default)]
struct PowerModel {
    /// Acknowledged operations so far (the clock of `history`).
    acknowledged: u64,
    /// Per key, each state an acknowledged operation left, with the count it was acknowledged
    /// at.
    history: HashMap<u64, Vec<(u64, Option<u64>)>>,
    in_flight: HashMap<u64, Op>,
    /// `acknowledged` when the checkpoint in progress began.
    began: Option<u64>,
    /// `acknowledged` when the last checkpoint that returned began.
    checkpointed: u64,
    checkpoints: u64,
}

#[cfg(feature = "crash-points")]
impl PowerModel {
    fn take(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["C", "b"] => self.began = Some(self.acknowledged),
            ["C", "e"] => {
                self.checkpointed = self.began.take().expect("a checkpoint that never began");
                self.checkpoints += 1;
            }
            ["I", key, rest @ ..] => {
                let op = Op::decode(rest).expect("op");
                assert!(self
                    .in_flight
                    .insert(key.parse().expect("key"), op)
                    .is_none());
            }
            ["A", key, answer] => {
                let key: u64 = key.parse().expect("key");
                let op = self
                    .in_flight
                    .remove(&key)
                    .expect("an answer to no operation");
                let states = self.history.entry(key).or_default();
                let before = states.last().and_then(|&(_, state)| state);
                let answer = match *answer {
                    "-" => None,
                    number => Some(number.parse().expect("answer")),
                };
                assert_eq!(answer, before, "key {key}: {op:?} answered wrongly");
                self.acknowledged += 1;
                states.push((self.acknowledged, op.apply(before)));
            }
            _ => {} // a line the kill cut short
        }
    }

    /// The states key `key` may be found in after a power loss: the one it had when the last
    /// checkpoint that returned began, and every later one (acknowledged or in flight).
    fn allowed(&self, key: u64) -> Vec<Option<u64>> {
        let states = self.history.get(&key).map_or(&[][..], Vec::as_slice);
        let since = states.partition_point(|&(at, _)| at <= self.checkpointed);
        let mut allowed = vec![since.checked_sub(1).and_then(|at| states[at].1)];
        allowed.extend(states[since..].iter().map(|&(_, state)| state));
        if let Some(op) = self.in_flight.get(&key) {
            allowed.push(op.apply(states.last().and_then(|&(_, state)| state)));
        }
        allowed
    }

    fn check(&self, map: &Persistent, what: &str) {
        map.check_invariants();
        for (key, value) in map.iter() {
            let allowed = self.allowed(key);
            assert!(
                allowed.contains(&Some(value)),
                "{what}: key {key} holds {value}, allowed {allowed:?}"
            );
        }
        for key in self.history.keys().chain(self.in_flight.keys()) {
            let allowed = self.allowed(*key);
            if map.get(key).is_none() {
                assert!(
                    allowed.contains(&None),
                    "{what}: key {key} was lost, allowed {allowed:?}"
                );
            }
        }
    }
}

/// Build in `image` the disk a power loss leaves: the superblock as `dir` holds it (each of
/// its writes is synced before it replaces the last), and each table file of `dir`, per
/// 512-byte sector (a disk writes sectors whole), either as the last sync logged for its page
/// wrote it (`FLOE_SYNC_LOG` records: generation, page offset, 4096 bytes; `base` where no
/// sync was logged: what the file held on disk before, or zeroes for a file made since) or
/// as the process left it, at random.
#[cfg(feature = "crash-points")]
fn synced_image(dir: &Path, log: &Path, base: Option<&Path>, image: &Path, rng: &mut Rng) {
    const RECORD: usize = 16 + 4096;
    std::fs::create_dir_all(image).unwrap();
    std::fs::copy(dir.join("floe.super"), image.join("floe.super")).unwrap();
    let records = std::fs::read(log).unwrap_or_default();
    let word = |record: &[u8], index: usize| {
        u64::from_le_bytes(record[8 * index..8 * index + 8].try_into().unwrap())
    };
    for (gen, name, path) in table_files(dir) {
        let latest = std::fs::read(&path).unwrap();
        let mut synced = base
            .and_then(|base| std::fs::read(base.join(&name)).ok())
            .filter(|bytes| bytes.len() == latest.len())
            .unwrap_or_else(|| vec![0u8; latest.len()]);
        for record in records
            .chunks_exact(RECORD)
            .filter(|record| word(record, 0) == gen)
        {
            let offset = word(record, 1) as usize;
            synced[offset..offset + 4096].copy_from_slice(&record[16..]);
        }
        let bytes: Vec<u8> = synced
            .chunks(512)
            .zip(latest.chunks(512))
            .flat_map(|(old, new)| if rng.below(2) == 0 { old } else { new })
            .copied()
            .collect();
        std::fs::write(image.join(&name), bytes).unwrap();
    }
}

/// Power loss on a disk during growths, shrinks and reserves, simulated: a child applies
/// random operations from two threads to a map growing from 64 keys, with a thread
/// checkpointing every few milliseconds, logging what each sync of a table file writes
/// (`FLOE_SYNC_LOG`), and is killed at a random instant. Each image of the disk the kill
/// may leave (`synced_image`) must reopen to a map whose every key holds the state it had when
/// the last checkpoint that returned began, or a later one. Then the power fails again during
/// that recovery (a second child opening the image, killed at a random instant), and the disk
/// it leaves must reopen to the same promise. (Without the ordered moves of a growth, which
/// sync a chunk's copies before retiring their old slots, this loses keys within a few
/// rounds.) `FLOE_POWER_GROWTH_ROUNDS` sets the rounds (default 10).
#[cfg(feature = "crash-points")]
#[test]
fn power_loss_during_growth_keeps_the_checkpoint() {
    let rounds = env_u64("FLOE_POWER_GROWTH_ROUNDS").unwrap_or(10);
    let mut rng = Rng(0x90fe);
    let (mut images, mut rebuilt) = (0, 0);
    for round in 0..rounds {
        let scratch = Scratch::new("power-growth");
        let log = Scratch::new("power-growth-log");
        let mut model = PowerModel::default();
        let mut child = spawn_child(
            "child_kill_workload",
            &[
                ("FLOE_PERSIST_CHILD", scratch.path().display().to_string()),
                ("FLOE_PERSIST_SEED", (round + 11).to_string()),
                ("FLOE_PERSIST_KEYS", (4096 * (1 + round % 4)).to_string()),
                (
                    "FLOE_PERSIST_CHECKPOINT_MS",
                    (2 + rng.below(20)).to_string(),
                ),
                ("FLOE_SYNC_LOG", log.path().display().to_string()),
            ],
        );
        let life = Duration::from_millis(50 + rng.below(400));
        read_report(&mut child, Some(Instant::now() + life), |line| {
            model.take(line)
        });
        for trial in 0..3 {
            let image = Scratch::new("power-growth-image");
            synced_image(scratch.path(), log.path(), None, image.path(), &mut rng);
            let what = format!(
                "round {round} trial {trial} ({} checkpoints)",
                model.checkpoints
            );
            let (map, recovery) = FlatMap::<u64, u64>::builder()
                .open(image.path())
                .unwrap_or_else(|error| panic!("{what}: reopen failed: {error}"));
            model.check(&map, &what);
            drop(map);
            images += 1;
            rebuilt += recovery.moves_rebuilt;
            if trial > 0 {
                continue;
            }
            // The power fails again while the first image is being recovered.
            let before = Scratch::new("power-growth-before");
            synced_image(
                scratch.path(),
                log.path(),
                None,
                before.path(),
                &mut Rng(round),
            );
            let again = Scratch::new("power-growth-again");
            copy_dir(before.path(), again.path());
            let log2 = Scratch::new("power-growth-log2");
            // Stopped at one of the first crash points of the open (the recovery's own, then
            // the moves of the growth it finishes), or killed if it gets past them.
            let mut reopening = spawn_child(
                "child_reopen",
                &[
                    ("FLOE_PERSIST_CHILD", again.path().display().to_string()),
                    ("FLOE_SYNC_LOG", log2.path().display().to_string()),
                    ("FLOE_CRASH_AT", (1 + rng.below(8)).to_string()),
                ],
            );
            std::thread::sleep(Duration::from_millis(200));
            let _ = reopening.kill();
            reopening.wait().expect("the child");
            let twice = Scratch::new("power-growth-twice");
            synced_image(
                again.path(),
                log2.path(),
                Some(before.path()),
                twice.path(),
                &mut rng,
            );
            let what = format!("{what}, power lost again during its recovery");
            let (map, _) = FlatMap::<u64, u64>::builder()
                .open(twice.path())
                .unwrap_or_else(|error| panic!("{what}: reopen failed: {error}"));
            model.check(&map, &what);
        }
    }
    eprintln!("{images} images recovered, {rebuilt} interrupted moves rebuilt");
}

/// Copy the files of directory `from` into `to` (created).
#[cfg(feature = "crash-points")]
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

/// The child of `power_loss_during_growth_keeps_the_checkpoint`'s second power loss: open the
/// map in `FLOE_PERSIST_CHILD` (recovering it), then wait to be killed.
#[test]
fn child_reopen() {
    let Ok(dir) = std::env::var("FLOE_PERSIST_CHILD") else {
        return;
    };
    let _map = FlatMap::<u64, u64>::builder().open(Path::new(&dir));
    std::thread::sleep(Duration::from_secs(60));
}

/// The child of `recovery_threads_agree`: two threads insert keys (and remove every fifth
/// they inserted before) into a map that grows from 64 keys, until the parent kills it.
#[test]
fn child_fill_until_killed() {
    let Some((_, map)) = child_map(64) else {
        return;
    };
    std::thread::scope(|scope| {
        for thread in 0..2u64 {
            let map = &map;
            scope.spawn(move || {
                for step in 0u64.. {
                    let key = (step * 2 + thread).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    assert!(map.insert_new(key, step).is_inserted());
                    if step.is_multiple_of(5) && step > 0 {
                        map.remove(&(step / 2 * 2 + thread).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    }
                }
            });
        }
    });
}

/// Recovery on several threads gives exactly the map and the report recovery on one gives:
/// maps killed at random instants while two threads fill them (some mid-growth, so the moves
/// a crash interrupted are rebuilt in parallel too), each recovered from two copies of the
/// same files, on one thread and on four.
#[test]
fn recovery_threads_agree() {
    let mut rng = Rng(0x7417);
    let (mut large, mut rebuilt) = (0, 0);
    for round in 0..5 {
        let scratch = Scratch::new("threads");
        let mut child = spawn_child(
            "child_fill_until_killed",
            &[("FLOE_PERSIST_CHILD", scratch.path().display().to_string())],
        );
        std::thread::sleep(Duration::from_millis(300 + rng.below(900)));
        child.kill().expect("SIGKILL the child");
        child.wait().expect("wait");
        let copies = [
            copy_map(scratch.path(), "one"),
            copy_map(scratch.path(), "four"),
        ];
        let [(one, by_one), (four, by_four)] =
            [(&copies[0], 1), (&copies[1], 4)].map(|(copy, threads)| {
                FlatMap::<u64, u64>::builder()
                    .recovery_threads(threads)
                    .open(copy.path())
                    .unwrap_or_else(|error| panic!("round {round}: reopen failed: {error}"))
            });
        assert_eq!(by_one, by_four, "round {round}");
        assert_eq!(by_one.damaged, 0, "round {round}");
        assert_eq!(one.check_invariants(), four.check_invariants());
        let mut keys_one: Vec<(u64, u64)> = one.iter().collect();
        let mut keys_four: Vec<(u64, u64)> = four.iter().collect();
        keys_one.sort_unstable();
        keys_four.sort_unstable();
        assert_eq!(keys_one.len(), by_one.keys, "round {round}");
        assert!(keys_one == keys_four, "round {round}: the maps differ");
        assert_eq!(one.stats().bins, four.stats().bins);
        large += usize::from(one.stats().bins >= 1 << 16);
        rebuilt += by_one.moves_rebuilt;
        eprintln!(
            "round {round}: {} keys in {} bins, {} moves rebuilt",
            by_one.keys,
            one.stats().bins,
            by_one.moves_rebuilt
        );
    }
    assert!(
        large > 0,
        "no map grew past a few sweep chunks: the threads were not tried"
    );
    eprintln!("{rebuilt} moves rebuilt in all");
}

/// The child of `full_disk_on_growth`: a map whose files may not grow past its first table
/// (`RLIMIT_FSIZE`, SIGXFSZ ignored so the limit is an error, not a signal), filled until an
/// insert needs a growth; it reports each acknowledged insert ("A key value"), then the error
/// ("E kind: message"), then checks that the map still answers and takes writes at its size.
#[test]
fn child_full_disk() {
    let Some((dir, map)) = child_map(2000) else {
        return;
    };
    let table = std::fs::metadata(table_file(&dir)).unwrap().len();
    // SAFETY: setrlimit and signal with valid arguments; this process is the test's child,
    // which only this test runs in.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let limit = libc::rlimit {
            rlim_cur: table,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let mut out = std::io::stdout().lock();
    let mut acknowledged = Vec::new();
    let error = (0u64..)
        .map(|key| key.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .find_map(|key| match map.try_insert_new(key, key ^ 1) {
            Ok(_) => {
                writeln!(out, "A {key} {}", key ^ 1).unwrap();
                acknowledged.push(key);
                None
            }
            Err(error) => Some(error),
        })
        .unwrap();
    let kind = match error {
        Error::Storage(ref storage) => match storage.kind() {
            StorageErrorKind::Io { kind, .. } => format!("{kind:?}"),
            other => format!("{other:?}"),
        },
        ref other => format!("{other:?}"),
    };
    writeln!(out, "E {kind}: {error}").unwrap();
    // Still usable at its size: every key there, updates and removes work, and the room a
    // remove makes takes an insert again.
    assert_eq!(map.len(), acknowledged.len());
    for &key in &acknowledged {
        assert_eq!(map.get(&key), Some(key ^ 1));
    }
    let last = *acknowledged.last().unwrap();
    assert_eq!(map.put(last, 7), Some(last ^ 1));
    writeln!(out, "A {last} 7").unwrap();
    let gone = acknowledged[0];
    assert_eq!(map.remove(&gone), Some(gone ^ 1));
    writeln!(out, "R {gone}").unwrap();
    assert!(map.try_insert_new(gone, 5).is_ok());
    writeln!(out, "A {gone} 5").unwrap();
    map.check_invariants();
    drop(map);
}

/// A full disk on growth: the insert that needs the new table gets an error saying so, the
/// map stays usable at its size, no half-made table file is left behind, and the files reopen
/// with every acknowledged write (and can grow once there is room). The child's files may not
/// grow past `RLIMIT_FSIZE`, which a growth's new table meets where a full device would;
/// `ci/full-disk.sh` fills a real (tmpfs) device as well.
#[test]
fn full_disk_on_growth() {
    let scratch = Scratch::new("full");
    let mut child = spawn_child(
        "child_full_disk",
        &[("FLOE_PERSIST_CHILD", scratch.path().display().to_string())],
    );
    let mut expected = HashMap::new();
    let mut error = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["A", key, value] => {
                expected.insert(key.parse::<u64>().unwrap(), value.parse::<u64>().unwrap());
            }
            ["R", key] => {
                expected.remove(&key.parse::<u64>().unwrap());
            }
            ["E", ..] => error = Some(line.clone()),
            _ => {} // the test harness's own lines
        }
    }
    assert!(child.wait().unwrap().success(), "the child failed");
    let error = error.expect("the growth never failed");
    assert!(
        error.starts_with("E FileTooLarge: ") && error.contains("reserve the disk blocks"),
        "{error}"
    );
    // It names the map's directory (not the new table's file: each attempt of a growth
    // takes a new one, and an error's path is kept for the rest of the process).
    let named = format!("{}: could not reserve", scratch.path().display());
    assert!(error.contains(&named), "{error}");
    assert!(
        expected.len() > 1000,
        "{} keys before the growth",
        expected.len()
    );
    let tables = std::fs::read_dir(scratch.path())
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|e| e == "floe")
        })
        .count();
    assert_eq!(tables, 1, "a failed growth left a table file");
    let (map, recovery) = FlatMap::<u64, u64>::builder().open(scratch.path()).unwrap();
    assert!(recovery.clean);
    assert_eq!(map.check_invariants(), expected.len());
    for (key, value) in &expected {
        assert_eq!(map.get(key), Some(*value));
    }
    let bins = map.stats().bins;
    for key in 0..20_000u64 {
        assert!(map.insert_new(key << 1 | 1, key).is_inserted());
    }
    assert!(map.stats().bins > bins, "the reopened map did not grow");
}

/// A full device on growth, for real (`ci/full-disk.sh` mounts a small tmpfs at
/// `FLOE_FULL_DISK_DIR`, which needs root): a map filled until its growth's new table does not
/// fit on the device gets `StorageFull` from that insert (with the table files' blocks left
/// as holes, it was a SIGBUS on a store instead), stays usable, and reopens with every key
/// once room is made.
#[test]
#[ignore = "needs a small file system of its own: run by ci/full-disk.sh"]
fn full_device_on_growth() {
    let root = PathBuf::from(std::env::var("FLOE_FULL_DISK_DIR").expect("FLOE_FULL_DISK_DIR"));
    let dir = root.join("map");
    // Room to free once the device is full, so the superblock can be written again.
    let filler = root.join("filler");
    std::fs::write(&filler, vec![1u8; 1 << 20]).unwrap();
    let map = FlatMap::<u64, u64>::builder()
        .capacity(1000)
        .build_persistent(&dir)
        .unwrap();
    let mut inserted = 0u64;
    let error = loop {
        match map.try_insert_new(inserted, inserted + 3) {
            Ok(_) => inserted += 1,
            Err(error) => break error,
        }
    };
    eprintln!("after {inserted} keys: {error}");
    assert!(
        matches!(
            error.storage_kind(),
            Some(StorageErrorKind::Io {
                kind: std::io::ErrorKind::StorageFull,
                ..
            })
        ),
        "{error:?}"
    );
    assert_eq!(map.len() as u64, inserted);
    assert_eq!(map.get(&(inserted - 1)), Some(inserted + 2));
    assert_eq!(map.remove(&0), Some(3));
    assert!(map.try_insert_new(0, 4).is_ok());
    std::fs::remove_file(&filler).unwrap();
    map.close().unwrap();
    let (map, recovery) = FlatMap::<u64, u64>::builder().open(&dir).unwrap();
    assert!(recovery.clean);
    assert_eq!(map.check_invariants() as u64, inserted);
    for key in 1..inserted {
        assert_eq!(map.get(&key), Some(key + 3));
    }
    assert_eq!(map.get(&0), Some(4));
}

/// A persistent map used through `LocalMap` grows there too (one thread, plain stores): its
/// growths must be recorded as a shared growth's are, so the files reopen with every key.
#[test]
fn a_local_map_of_a_persistent_map_grows_persistently() {
    let scratch = Scratch::new("local");
    let map = FlatMap::<u64, u64>::builder()
        .capacity(16)
        .build_persistent(scratch.path())
        .unwrap();
    let mut local = floe::LocalMap::from(map);
    for key in 0..50_000u64 {
        local.insert(key, key * 3);
    }
    for key in (0..50_000u64).step_by(7) {
        local.remove(&key);
    }
    let map = local.into_shared();
    let bins = map.stats().bins;
    assert!(bins > 16, "the map never grew");
    map.close().unwrap();
    let map = Persistent::open(scratch.path()).unwrap();
    assert_eq!(map.stats().bins, bins);
    for key in 0..50_000u64 {
        let expected = (key % 7 != 0).then_some(key * 3);
        assert_eq!(map.get(&key), expected, "key {key}");
    }
    // Grown again through a `LocalMap` made from the reopened map.
    let mut local = floe::LocalMap::from(map);
    for key in 50_000..120_000u64 {
        local.insert(key, key);
    }
    local.into_shared().close().unwrap();
    let map = Persistent::open(scratch.path()).unwrap();
    assert_eq!(map.len(), 50_000 - 50_000usize.div_ceil(7) + 70_000);
    assert_eq!(map.get(&119_999), Some(119_999));
}

/// A map closed and reopened at once, again and again, while another thread of the process
/// spawns children: every reopen finds the directory's lock free. (Closing the lock's
/// descriptor alone left the lock held by a child forked meanwhile until its exec, and the
/// reopen was refused as `Locked`; the lock is now released by an unlock, which frees every
/// copy of the descriptor.)
#[test]
#[cfg_attr(miri, ignore = "files and processes")]
fn reopens_at_once_while_another_thread_spawns_children() {
    use std::sync::atomic::{AtomicBool, Ordering};
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let scratch = Scratch::new("reopen-spawn");
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = std::process::Command::new("true").status();
            }
        });
        // Stops the spawner however this thread leaves (a failed reopen panics).
        let _stop = StopOnDrop(&stop);
        let mut map = FlatMap::<u64, u64>::builder()
            .capacity(64)
            .build_persistent(scratch.path())
            .unwrap();
        for round in 0..300u64 {
            assert!(map.insert_new(round, round).is_inserted());
            map.close().unwrap();
            map = FlatMap::open(scratch.path()).unwrap_or_else(|e| panic!("reopen {round}: {e}"));
        }
        assert_eq!(map.len(), 300);
    });
}

/// Replace bin 0's state in the table file of the map in `dir` with `state` (the header's two
/// bits at 30), returning the original bytes.
fn set_bin_state(dir: &Path, state: u64) -> Vec<u8> {
    let table = table_file(dir);
    let original = std::fs::read(&table).unwrap();
    let mut bytes = original.clone();
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let changed = (header & !(3 << 30)) | (state << 30);
    bytes[..8].copy_from_slice(&changed.to_le_bytes());
    std::fs::write(&table, bytes).unwrap();
    original
}

/// A bin state no crash leaves where it is found (a bin moved or being moved in a table no
/// growth involves; frozen after a clean close) is refused before anything is written, in a
/// cleanly closed map and in a crashed one; a crashed map's frozen bin (a shrink that was
/// deciding) is thawed and the map serves every key. Before, `open` accepted all of them and
/// the first get of a key of the bin panicked or spun for ever.
#[test]
fn impossible_bin_states_are_refused() {
    let scratch = Scratch::new("states");
    let dir = scratch.path();
    let map = FlatMap::<u64, u64>::builder()
        .capacity(1000)
        .build_persistent(dir)
        .unwrap();
    for key in 0..300 {
        assert!(map.insert_new(key, key + 1).is_inserted());
    }
    // Copied while open: the superblock says open, so this image is a crashed map's.
    let crashed = copy_map(dir, "states-crashed");
    map.close().unwrap();
    for (image, clean) in [(dir, true), (crashed.path(), false)] {
        for (state, name, refused) in [
            (1, "InTransfer", true),
            (2, "DoneTransfer", true),
            (3, "Frozen", clean),
        ] {
            let original = set_bin_state(image, state);
            let before = file_bytes(image);
            let opened = Persistent::open(image);
            if refused {
                let error = storage_error(opened);
                assert!(
                    matches!(error, StorageErrorKind::Corrupt(_)),
                    "{name}, clean {clean}: {error:?}"
                );
                assert_eq!(file_bytes(image), before, "{name}: the refused open wrote");
            } else {
                let map = opened.unwrap();
                assert_eq!(map.len(), 300);
                for key in 0..300 {
                    assert_eq!(map.get(&key), Some(key + 1), "{name}: key {key}");
                }
                assert_eq!(map.insert_new(1000, 1), Insert::Inserted);
                assert_eq!(map.iter().count(), 301);
                drop(map);
            }
            std::fs::write(table_file(image), original).unwrap();
        }
    }
    let map = Persistent::open(dir).unwrap();
    assert_eq!(map.len(), 300);
}

/// A FIFO (or anything else not a regular file) where the superblock or a table should be is
/// refused at once, and the directory is free again afterwards.
#[test]
fn fifos_where_files_should_be_are_refused_at_once() {
    let scratch = Scratch::new("fifo");
    let dir = scratch.path().to_path_buf();
    let map = FlatMap::<u64, u64>::builder()
        .capacity(100)
        .build_persistent(&dir)
        .unwrap();
    assert!(map.insert_new(1, 2).is_inserted());
    map.close().unwrap();
    let good = file_bytes(&dir);
    for victim in [dir.join("floe.super"), table_file(&dir)] {
        std::fs::remove_file(&victim).unwrap();
        make_fifo(&victim);
        let opening = dir.clone();
        let error = storage_error(within_seconds(move || Persistent::open(&opening)));
        assert!(
            matches!(
                error,
                StorageErrorKind::Io {
                    kind: std::io::ErrorKind::InvalidInput,
                    ..
                } | StorageErrorKind::Corrupt(_)
            ),
            "{}: {error:?}",
            victim.display()
        );
        std::fs::remove_file(&victim).unwrap();
        restore(&good);
    }
    assert_eq!(Persistent::open(&dir).unwrap().get(&1), Some(2));
}

/// The child of `a_second_process_is_refused`: open the map in `FLOE_PERSIST_CHILD`, say so,
/// and wait to be killed.
#[test]
fn child_hold_open() {
    let Ok(dir) = std::env::var("FLOE_PERSIST_CHILD") else {
        return;
    };
    let map = Persistent::open(Path::new(&dir)).unwrap();
    println!("open {}", map.len());
    std::thread::sleep(Duration::from_secs(60));
}

/// Two processes: while one has the map open, another's open is refused as locked, even with
/// every file but the map's own removed from the directory meanwhile (the lock is the
/// directory's, not a file's); once the first is gone, the map opens.
#[test]
fn a_second_process_is_refused() {
    let scratch = Scratch::new("two");
    let dir = scratch.path();
    let map = FlatMap::<u64, u64>::builder()
        .capacity(100)
        .build_persistent(dir)
        .unwrap();
    assert!(map.insert_new(5, 6).is_inserted());
    map.close().unwrap();
    let mut child = spawn_child(
        "child_hold_open",
        &[("FLOE_PERSIST_CHILD", dir.display().to_string())],
    );
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("open") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the child ended");
    }
    assert_eq!(line.trim(), "open 1");
    assert_eq!(
        storage_error(Persistent::open(dir)),
        StorageErrorKind::Locked
    );
    let _ = std::fs::remove_file(dir.join("floe.lock"));
    assert_eq!(
        storage_error(Persistent::open(dir)),
        StorageErrorKind::Locked
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(Persistent::open(dir).unwrap().get(&5), Some(6));
}
