//! `PersistentMap` (feature `serde`): reopening, a kill harness (SIGKILL at random instants,
//! compactions and checkpoints running), every crash point of a write and a compaction
//! (feature `crash-points`), a model check against `std::collections::HashMap`, and damaged,
//! foreign, locked and full directories.
//!
//! The crash tests run the map in a child process (this test binary again, with one of the
//! `child_*` tests selected and its instructions in the environment). Writer threads own the
//! keys congruent to their index, so each key has one history; before each write the child
//! prints the key's state the write leaves (`B key state`), after it `A key`. A reader thread
//! reads any key and prints `r key` before the read and `S key state` after it, so the parent
//! can check that what a returned read saw survives the crash (durable linearizability).

#![cfg(all(unix, feature = "serde"))]

mod crash_harness;

use crash_harness::{
    copy_map, env_u64, make_fifo, read_report, spawn_child, within_seconds, Rng, Scratch,
};
use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, Instant},
};

use floe::{Compute, Error, Insert, Layout, Map, Operation, PersistentMap, StorageErrorKind};

type Persistent = PersistentMap<String, String>;

fn key_name(key: u64) -> String {
    format!("key-{key}")
}

/// A state as the report spells it: the value, or `-` for absent.
fn spell(state: Option<&String>) -> String {
    state.cloned().unwrap_or_else(|| "-".to_string())
}

/// One write on a key whose state the writer knows (it owns the key).
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert,
    Upsert,
    Remove,
    RemoveIf,
    Update,
}

impl Op {
    fn random(rng: &mut Rng) -> Op {
        match rng.below(10) {
            0..=1 => Op::Insert,
            2..=4 => Op::Upsert,
            5..=6 => Op::Remove,
            7 => Op::RemoveIf,
            _ => Op::Update,
        }
    }

    /// The state this op leaves, from `before`, writing `value`.
    fn after(self, before: Option<&String>, value: &str) -> Option<String> {
        match self {
            Op::Insert => Some(before.cloned().unwrap_or_else(|| value.to_string())),
            Op::Upsert => Some(value.to_string()),
            Op::Remove => None,
            // Removes only values of even length.
            Op::RemoveIf => before.filter(|v| v.len() % 2 == 1).cloned(),
            Op::Update => before.map(|_| value.to_string()),
        }
    }

    /// Apply to the map; returns the state it reports having left.
    fn run(self, map: &Persistent, key: &str, value: String) -> Option<String> {
        let map = map.pin();
        match self {
            Op::Insert => match map
                .insert_new(key.to_string(), value.clone())
                .expect("insert")
            {
                Insert::Inserted => Some(value),
                Insert::Present(present) => Some(present.clone()),
                Insert::Shadowed => unreachable!(),
            },
            Op::Upsert => {
                map.insert(key.to_string(), value.clone()).expect("upsert");
                Some(value)
            }
            Op::Remove => {
                map.remove(key).expect("remove");
                None
            }
            Op::RemoveIf => {
                let removed = map.remove_if(key, |v| v.len() % 2 == 0).expect("remove_if");
                match removed {
                    Some(_) => None,
                    None => map.get(key).cloned(),
                }
            }
            Op::Update => {
                let outcome = map
                    .compute(key.to_string(), |present| match present {
                        Some(_) => Operation::Insert(value.clone()),
                        None => Operation::Abort(()),
                    })
                    .expect("compute");
                match outcome {
                    Compute::Updated { new, .. } => Some(new.clone()),
                    Compute::Aborted(()) => None,
                    other => panic!("update answered {other:?}"),
                }
            }
        }
    }
}

/// The parent's knowledge: each key's state after its last acknowledged write, the write in
/// flight and where its report began, and what reads saw.
#[derive(Default)]
struct Model {
    acked: HashMap<String, Option<String>>,
    /// key -> (state the write leaves, report line of its start)
    in_flight: HashMap<String, (Option<String>, u64)>,
    /// Reads begun (line number) and not yet reported, per reader key.
    reads_begun: HashMap<String, u64>,
    /// key -> states that completed reads saw, with the line their read began at.
    seen: HashMap<String, Vec<(Option<String>, u64)>>,
    line: u64,
    /// The shared counter every writer increments: increments acknowledged (in all rounds),
    /// in flight, and the largest value a returned read saw.
    counter_acked: u64,
    counter_in_flight: u64,
    counter_seen: u64,
    /// The shared flag every writer toggles (insert a value of its own if absent, remove
    /// whatever is there): values whose insert or removal was acknowledged, toggles in flight.
    flag_inserted: std::collections::HashSet<String>,
    flag_removed: std::collections::HashSet<String>,
    flag_in_flight: usize,
}

fn parse_state(word: &str) -> Option<String> {
    (word != "-").then(|| word.to_string())
}

impl Model {
    fn take(&mut self, line: &str) {
        self.line += 1;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["B", key, state] => {
                self.in_flight
                    .insert(key.to_string(), (parse_state(state), self.line));
            }
            ["A", key] => {
                let (state, _) = self
                    .in_flight
                    .remove(*key)
                    .expect("an acknowledged write began");
                self.acked.insert(key.to_string(), state);
            }
            ["r", key] => {
                self.reads_begun.insert(key.to_string(), self.line);
            }
            ["Bc"] => self.counter_in_flight += 1,
            ["Bt"] => self.flag_in_flight += 1,
            ["T+", value] => {
                self.flag_in_flight -= 1;
                self.flag_inserted.insert(value.to_string());
            }
            ["T-", value] => {
                self.flag_in_flight -= 1;
                self.flag_removed.insert(value.to_string());
            }
            ["C", _] => {
                self.counter_in_flight -= 1;
                self.counter_acked += 1;
            }
            ["c", value] => self.counter_seen = self.counter_seen.max(value.parse().unwrap()),
            ["S", key, state] => {
                let begun = self.reads_begun.remove(*key).expect("a read began");
                self.seen
                    .entry(key.to_string())
                    .or_default()
                    .push((parse_state(state), begun));
            }
            _ => {} // the test harness's own lines
        }
    }

    /// Check the reopened map: every key as acknowledged, or as its write in flight left it;
    /// the latter if a returned read saw that state after the write began.
    fn check(&mut self, map: &Persistent) {
        let state: HashMap<String, String> = map
            .pin()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(map.len(), state.len());
        self.check_state(&state);
    }

    /// `check` of the reopened map's contents.
    fn check_state(&mut self, state: &HashMap<String, String>) {
        let mut keys: Vec<String> = self
            .acked
            .keys()
            .chain(self.in_flight.keys())
            .cloned()
            .collect();
        keys.sort();
        keys.dedup();
        for key in &keys {
            let found = state.get(key).cloned();
            let acked = self.acked.get(key).cloned().flatten();
            let in_flight = self.in_flight.get(key);
            let allowed_in_flight = in_flight.is_some_and(|(state, _)| *state == found);
            assert!(
                found == acked || allowed_in_flight,
                "key {key}: reopened as {found:?}, acknowledged {acked:?}, in flight {in_flight:?}"
            );
            if let Some((state, begun)) = in_flight {
                if *state != acked {
                    let seen = self
                        .seen
                        .get(key)
                        .into_iter()
                        .flatten()
                        .any(|(saw, read_begun)| {
                            saw == state && (saw.is_some() || read_begun > begun)
                        });
                    assert!(
                        !seen || found == *state,
                        "key {key}: a returned read saw {state:?} (in flight), reopened as {found:?}"
                    );
                }
            }
        }
        // The counter: every acknowledged increment and every value a read saw survive; at
        // most the increments in flight more.
        let counter: u64 = state.get(COUNTER).map_or(0, |v| v.parse().unwrap());
        assert!(
            counter >= self.counter_acked && counter >= self.counter_seen,
            "counter reopened at {counter}: {} increments acknowledged, {} seen",
            self.counter_acked,
            self.counter_seen
        );
        assert!(
            counter <= self.counter_acked + self.counter_in_flight,
            "counter reopened at {counter}: {} acknowledged, {} in flight",
            self.counter_acked,
            self.counter_in_flight
        );
        self.counter_acked = counter;
        self.counter_in_flight = 0;
        // The flag: values inserted and not removed (acknowledged) must be gone only by
        // toggles in flight; a value present is one of them or an insert in flight's.
        let flag = state.get(FLAG).cloned();
        let mut left: Vec<&String> = self.flag_inserted.difference(&self.flag_removed).collect();
        if let Some(value) = &flag {
            assert!(
                !self.flag_removed.contains(value),
                "flag reopened as {value}, whose removal was acknowledged"
            );
            let known = left.iter().position(|v| *v == value);
            match known {
                Some(at) => {
                    left.remove(at);
                }
                None => assert!(
                    self.flag_in_flight > 0,
                    "flag reopened as {value}: no acknowledged insert and none in flight"
                ),
            }
        }
        let in_flight_left = self.flag_in_flight
            - usize::from(
                flag.as_ref()
                    .is_some_and(|v| !self.flag_inserted.contains(v)),
            );
        assert!(
            left.len() <= in_flight_left,
            "flag reopened as {flag:?}: {left:?} inserted and not removed, {} toggles in flight",
            self.flag_in_flight
        );
        self.flag_inserted = flag.iter().cloned().collect();
        self.flag_removed.clear();
        self.flag_in_flight = 0;
        let expected = keys.iter().filter(|key| state.contains_key(*key)).count()
            + usize::from(counter > 0)
            + usize::from(flag.is_some());
        assert_eq!(state.len(), expected, "keys nobody wrote are in the map");
        // The reopened state is the new acknowledged one.
        self.acked = keys
            .iter()
            .map(|key| (key.clone(), state.get(key).cloned()))
            .collect();
        self.in_flight.clear();
        self.reads_begun.clear();
        self.seen.clear();
    }
}

fn say(out: &Mutex<std::io::Stdout>, line: std::fmt::Arguments<'_>) {
    let mut out = out.lock().unwrap();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Open the map in `dir`, or make it.
fn open_or_build(dir: &Path) -> Persistent {
    match Map::<String, String>::builder().open_or_create(dir) {
        Ok((map, _)) => map,
        Err(error) => panic!("open or create: {error}"),
    }
}

/// The state the child starts from, as the map holds it (the child owns every key).
fn current_states(map: &Persistent) -> HashMap<String, String> {
    map.pin()
        .iter()
        .filter(|(k, _)| k.as_str() != COUNTER && k.as_str() != FLAG)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The key every writer increments (contention on one key: lost races, voided records).
const COUNTER: &str = "counter";

/// The key every writer toggles (contention with removals and inserts from absence).
const FLAG: &str = "flag";

/// Toggle the flag: insert `value` if absent, else remove what is there. Returns whether it
/// inserted, and the value inserted or removed.
fn toggle(map: &Persistent, value: String) -> (bool, String) {
    let pinned = map.pin();
    let mut offered = Some(value.clone());
    let outcome = pinned
        .compute::<()>(FLAG.to_string(), |present| match present {
            None => Operation::Insert(offered.take().unwrap_or_else(|| value.clone())),
            Some(_) => Operation::Remove,
        })
        .expect("toggle");
    match outcome {
        Compute::Inserted(new) => (true, new.clone()),
        Compute::Removed(old) => (false, old.clone()),
        other => panic!("toggle answered {other:?}"),
    }
}

/// Increment the counter; returns the value stored.
fn increment(map: &Persistent) -> u64 {
    let pinned = map.pin();
    let outcome = pinned
        .compute::<()>(COUNTER.to_string(), |value| {
            let value: u64 = value.map_or(0, |v| v.parse().unwrap());
            Operation::Insert((value + 1).to_string())
        })
        .expect("increment");
    match outcome {
        Compute::Inserted(new) | Compute::Updated { new, .. } => new.parse().unwrap(),
        other => panic!("increment answered {other:?}"),
    }
}

/// A value unique to writer `t`'s `n`-th write, of random length.
fn value_for(rng: &mut Rng, t: u64, n: u64) -> String {
    let pad = rng.below(200) as usize;
    format!("{t}.{n}.{}", "x".repeat(pad))
}

/// The child of `kill_harness`: writers, a reader, and a thread compacting and checkpointing.
#[test]
fn child_kill_workload() {
    let Ok(dir) = std::env::var("FLOE_PMAP_CHILD") else {
        return;
    };
    let seed = env_u64("FLOE_PMAP_SEED").unwrap_or(1);
    let writers = 3u64;
    let keys = 48u64;
    let map = open_or_build(Path::new(&dir));
    let start = current_states(&map);
    let out = Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for t in 0..writers {
            let (map, out, start) = (&map, &out, &start);
            s.spawn(move || {
                let mut rng = Rng(seed * 7919 + t + 1);
                let mut states: HashMap<String, String> = start
                    .iter()
                    .filter(|(k, _)| {
                        k.trim_start_matches("key-").parse::<u64>().unwrap() % writers == t
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for n in 0.. {
                    if rng.below(4) == 0 {
                        say(out, format_args!("Bc"));
                        let value = increment(map);
                        say(out, format_args!("C {value}"));
                        continue;
                    }
                    if rng.below(4) == 0 {
                        say(out, format_args!("Bt"));
                        let (inserted, value) = toggle(map, format!("{seed}.{t}.{n}"));
                        let sign = if inserted { '+' } else { '-' };
                        say(out, format_args!("T{sign} {value}"));
                        continue;
                    }
                    let key = key_name(rng.below(keys / writers) * writers + t);
                    let op = Op::random(&mut rng);
                    let value = value_for(&mut rng, seed * 1000 + t, n);
                    let after = op.after(states.get(&key), &value);
                    say(out, format_args!("B {key} {}", spell(after.as_ref())));
                    let left = op.run(map, &key, value);
                    assert_eq!(left, after, "{op:?} on {key}");
                    say(out, format_args!("A {key}"));
                    match after {
                        Some(v) => states.insert(key, v),
                        None => states.remove(&key),
                    };
                }
            });
        }
        let (map, out) = (&map, &out);
        s.spawn(move || {
            let mut rng = Rng(seed * 31 + 17);
            loop {
                if rng.below(3) == 0 {
                    let value = map
                        .pin()
                        .get(COUNTER)
                        .map_or(0, |v| v.parse::<u64>().unwrap());
                    say(out, format_args!("c {value}"));
                    continue;
                }
                let key = key_name(rng.below(keys));
                say(out, format_args!("r {key}"));
                let state = map.pin().get(key.as_str()).cloned();
                say(out, format_args!("S {key} {}", spell(state.as_ref())));
            }
        });
        s.spawn(move || {
            for round in 0u64.. {
                std::thread::sleep(Duration::from_millis(15));
                if round % 3 == 0 {
                    // `k` before, `K` after: what was acknowledged before a `k` whose `K`
                    // came must survive a power loss (the power-loss test reads them).
                    say(out, format_args!("k"));
                    map.checkpoint().expect("checkpoint");
                    say(out, format_args!("K"));
                } else {
                    map.compact().expect("compact");
                }
            }
        });
    });
}

/// The kill harness: rounds of a child applying random writes from three threads while a
/// fourth reads and a fifth compacts and checkpoints, killed with SIGKILL at a random
/// instant; after each, the map is reopened and every key checked against the acknowledged
/// history and what returned reads saw. `FLOE_PMAP_KILL_ROUNDS` sets the rounds (default 12).
#[test]
fn kill_harness() {
    let rounds = env_u64("FLOE_PMAP_KILL_ROUNDS").unwrap_or(12);
    let scratch = Scratch::new("kill");
    let mut model = Model::default();
    let mut rng = Rng(0x5eed);
    let mut records = 0;
    for round in 0..rounds {
        let mut child = spawn_child(
            "child_kill_workload",
            &[
                ("FLOE_PMAP_CHILD", scratch.path().display().to_string()),
                ("FLOE_PMAP_SEED", (round + 1).to_string()),
            ],
        );
        let deadline = Instant::now() + Duration::from_millis(100 + rng.below(500));
        read_report(&mut child, Some(deadline), |line| model.take(line));
        if round % 2 == 1 {
            // Reopened by a child that reports the state and crashes at once: the replayed
            // journals are settled but not compacted (or half), so the next round's child
            // replays them again under its own records.
            let mut checker = spawn_child(
                "child_check_and_crash",
                &[("FLOE_PMAP_CHILD", scratch.path().display().to_string())],
            );
            let mut state = HashMap::new();
            let mut ended = false;
            read_report(&mut checker, None, |line| {
                let words: Vec<&str> = line.splitn(3, ' ').collect();
                match words.as_slice() {
                    ["K", key, value] => {
                        state.insert(key.to_string(), value.to_string());
                    }
                    ["END", replayed] => {
                        records += replayed.parse::<usize>().unwrap();
                        ended = true;
                    }
                    _ => {}
                }
            });
            assert!(ended, "round {round}: the checker did not reopen the map");
            model.check_state(&state);
            continue;
        }
        let (map, recovery) = Map::<String, String>::builder()
            .open(scratch.path())
            .unwrap_or_else(|error| panic!("round {round}: reopen failed: {error}"));
        assert_eq!(recovery.torn, 0, "a process crash tears no record");
        records += recovery.records;
        model.check(&map);
        map.close().expect("close");
    }
    assert!(records > 0, "the children journaled nothing");
    eprintln!("{rounds} kills, {records} journal records replayed");
}

/// The checker child of `kill_harness`: reopen, print every key and value, then crash.
#[test]
fn child_check_and_crash() {
    let Ok(dir) = std::env::var("FLOE_PMAP_CHILD") else {
        return;
    };
    let (map, recovery) = Map::<String, String>::builder()
        .open(&dir)
        .unwrap_or_else(|error| panic!("reopen failed: {error}"));
    assert_eq!(recovery.torn, 0, "a process crash tears no record");
    let out = Mutex::new(std::io::stdout());
    for (key, value) in map.pin().iter() {
        say(&out, format_args!("K {key} {value}"));
    }
    say(&out, format_args!("END {}", recovery.records));
    std::process::abort();
}

/// The child of `every_crash_point_recovers`: one thread, a fixed script of writes on a few
/// keys with compactions between them.
#[test]
fn child_crash_script() {
    let Ok(dir) = std::env::var("FLOE_PMAP_CHILD") else {
        return;
    };
    let map = open_or_build(Path::new(&dir));
    let out = Mutex::new(std::io::stdout());
    let mut rng = Rng(99);
    let mut states: HashMap<String, String> = HashMap::new();
    for n in 0..120 {
        let key = key_name(rng.below(12));
        let op = Op::random(&mut rng);
        let value = value_for(&mut rng, 0, n);
        let after = op.after(states.get(&key), &value);
        say(&out, format_args!("B {key} {}", spell(after.as_ref())));
        op.run(&map, &key, value);
        say(&out, format_args!("A {key}"));
        match after {
            Some(v) => states.insert(key, v),
            None => states.remove(&key),
        };
        if n % 40 == 39 {
            map.compact().expect("compact");
        }
    }
    // Not `close`: the crash points of a close's compaction are counted in the script above.
    map.abandon();
}

/// Every crash point (feature `crash-points`) of the script: between a write's record and its
/// swap, its swap and its confirmation, and a compaction's switch and its snapshot. Each in a
/// fresh directory; reopen and check. `FLOE_CRASH_STRIDE` sets the step (default 3).
#[cfg(feature = "crash-points")]
#[test]
fn every_crash_point_recovers() {
    let stride = env_u64("FLOE_CRASH_STRIDE").unwrap_or(3).max(1);
    let (crashed, _) = crash_harness::for_each_crash_point(
        "child_crash_script",
        "FLOE_PMAP_CHILD",
        stride,
        Model::default,
        Model::take,
        |point, dir, mut model, _| {
            let map = PersistentMap::<String, String>::open(dir)
                .unwrap_or_else(|error| panic!("crash point {point}: reopen failed: {error}"));
            model.check(&map);
        },
    );
    assert!(crashed > 50, "only {crashed} crash points");
    eprintln!("{crashed} crash points checked, every {stride}th");
}

/// Random operations with random reopens against `std::collections::HashMap`.
/// On both table layouts (the journals do not depend on it).
#[test]
fn agrees_with_std_across_reopens() {
    for layout in [Layout::Bins, Layout::Dense] {
        agrees_with_std_across_reopens_on(layout);
    }
}

fn agrees_with_std_across_reopens_on(layout: Layout) {
    let scratch = Scratch::new("model");
    let mut rng = Rng(4242);
    let mut model: HashMap<String, String> = HashMap::new();
    let reopen = |dir: &Path| {
        let (map, _) = Map::<String, String>::builder()
            .layout(layout)
            .open(dir)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(map.layout(), layout);
        map
    };
    let mut map = Map::<String, String>::builder()
        .layout(layout)
        .build_persistent(scratch.path())
        .unwrap();
    for n in 0..6000u64 {
        let key = key_name(rng.below(300));
        let value = value_for(&mut rng, 9, n);
        let op = Op::random(&mut rng);
        let after = op.after(model.get(&key), &value);
        assert_eq!(op.run(&map, &key, value), after, "{op:?} {key}");
        match after {
            Some(v) => model.insert(key, v),
            None => model.remove(&key),
        };
        match rng.below(1000) {
            0..=2 => {
                map.close().unwrap();
                map = reopen(scratch.path());
            }
            3..=4 => {
                // Forget without closing: the journals replay (as after a crash of a process
                // whose threads were all between writes).
                map.abandon();
                release_locks(scratch.path());
                map = reopen(scratch.path());
            }
            5..=9 => map.compact().unwrap(),
            13 => {
                map.pin().clear().unwrap();
                model.clear();
            }
            14..=15 => {
                // Keep the values of even length.
                map.pin().retain(|_, v| v.len() % 2 == 0).unwrap();
                model.retain(|_, v| v.len() % 2 == 0);
            }
            10..=12 => map.checkpoint().unwrap(),
            _ => {}
        }
    }
    let pinned = map.pin();
    assert_eq!(map.len(), model.len());
    for (key, value) in &model {
        assert_eq!(pinned.get(key.as_str()), Some(value));
    }
}

/// The files of `dir`, name and contents, sorted.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            // Not read if not a file (a FIFO would block the read).
            let bytes = match e.file_type().unwrap().is_file() {
                true => std::fs::read(e.path()).unwrap(),
                false => b"not a regular file".to_vec(),
            };
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

/// A map of 500 keys in `dir`, left as a crash leaves it (journals, no close), and the
/// pairs it holds.
fn crashed_map(dir: &Path, checkpoint: bool) -> HashMap<String, String> {
    let map = Map::<String, String>::builder()
        .build_persistent(dir)
        .unwrap();
    let mut pairs = HashMap::new();
    for n in 0..500u64 {
        let (key, value) = (key_name(n), format!("value-{n}"));
        assert!(map
            .pin()
            .insert_new(key.clone(), value.clone())
            .unwrap()
            .is_inserted());
        pairs.insert(key, value);
    }
    if checkpoint {
        map.checkpoint().unwrap();
    }
    map.abandon();
    // The lock goes with the process's descriptors; here, with the forgotten map's: release
    // it by hand as a dying process would.
    release_locks(dir);
    pairs
}

/// Release a forgotten map's directory lock, as the death of its process would (a flock
/// lives with its open file description: close the descriptor, found through /proc).
fn release_locks(dir: &Path) {
    // The lock is the directory's own (`floe::durable::DirLock`): close the descriptors of
    // the directory that the forgotten map left open.
    let dir = std::fs::canonicalize(dir).unwrap();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|target| target == dir) {
            let fd: i32 = entry.file_name().to_string_lossy().parse().unwrap();
            // SAFETY: the forgotten map's lock descriptor, which nothing uses again (a
            // descriptor of the directory some other test opened for a moment would be its
            // own directory, not this one).
            unsafe { libc::close(fd) };
        }
    }
    // A child being spawned by a concurrent test holds a copy of every descriptor from its
    // fork to its exec (where close-on-exec drops it): wait for the lock to be free (taken
    // and released again by the lock's own drop, an unlock that releases every copy).
    for _ in 0..1000 {
        if floe::durable::DirLock::acquire(&dir).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the forgotten map's lock is still held");
}

fn journal_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("journal-")
        })
        .collect();
    files.sort();
    files
}

/// Open the map in `dir` as `K -> V`, waiting out a lock that is not ours: a child that a
/// concurrent test is spawning holds a copy of the last open's lock descriptor from its fork
/// to its exec.
fn open_unlocked<K, V>(dir: &Path) -> Result<PersistentMap<K, V>, Error>
where
    K: std::hash::Hash
        + Eq
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    V: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    for _ in 0..1000 {
        match PersistentMap::open(dir) {
            Err(error) if error.storage_kind() == Some(StorageErrorKind::Locked) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            other => return other,
        }
    }
    PersistentMap::open(dir)
}

fn refused(dir: &Path, check: impl Fn(&Error) -> bool) {
    let before = contents(dir);
    let error = open_unlocked::<String, String>(dir).expect_err("the open should fail");
    assert!(check(&error), "unexpected error: {error}");
    assert_eq!(contents(dir), before, "a failed open changed the files");
}

#[test]
fn reopens_after_close_and_after_a_crash() {
    let scratch = Scratch::new("reopen");
    let pairs = crashed_map(scratch.path(), false);
    let (map, recovery) = Map::<String, String>::builder()
        .open(scratch.path())
        .unwrap();
    assert!(!recovery.clean);
    assert_eq!(recovery.keys, 500);
    assert_eq!(recovery.records, 500);
    assert_eq!(map.len(), 500);
    for (key, value) in &pairs {
        assert_eq!(map.pin().get(key.as_str()), Some(value));
    }
    map.pin().remove("key-7").unwrap();
    map.close().unwrap();
    assert!(
        journal_files(scratch.path()).is_empty(),
        "a close leaves a snapshot only"
    );
    let (map, recovery) = Map::<String, String>::builder()
        .open(scratch.path())
        .unwrap();
    assert!(recovery.clean);
    assert_eq!(map.len(), 499);
    assert_eq!(map.pin().get("key-7"), None);
}

#[test]
fn missing_existing_foreign_mistyped_and_locked_directories_are_refused() {
    let scratch = Scratch::new("refused");
    let dir = scratch.path();
    let missing = PersistentMap::<String, String>::open(dir).unwrap_err();
    assert!(
        matches!(missing.storage_kind(), Some(StorageErrorKind::Missing)),
        "{missing}"
    );
    let map = Map::<String, String>::builder()
        .build_persistent(dir)
        .unwrap();
    assert!(map
        .pin()
        .insert_new("a".into(), "b".into())
        .unwrap()
        .is_inserted());
    let locked = PersistentMap::<String, String>::open(dir).unwrap_err();
    assert!(
        matches!(locked.storage_kind(), Some(StorageErrorKind::Locked)),
        "{locked}"
    );
    let exists = Map::<String, String>::builder()
        .build_persistent(dir)
        .unwrap_err();
    assert!(
        matches!(
            exists.storage_kind(),
            Some(StorageErrorKind::Locked | StorageErrorKind::Exists)
        ),
        "{exists}"
    );
    map.close().unwrap();
    let mut exists = Map::<String, String>::builder()
        .build_persistent(dir)
        .unwrap_err();
    for _ in 0..1000 {
        // The fork of a concurrent test's child may hold the closed map's lock a moment.
        if !matches!(exists.storage_kind(), Some(StorageErrorKind::Locked)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
        exists = Map::<String, String>::builder()
            .build_persistent(dir)
            .unwrap_err();
    }
    assert!(
        matches!(exists.storage_kind(), Some(StorageErrorKind::Exists)),
        "{exists}"
    );
    let before = contents(dir);
    let other = open_unlocked::<String, u64>(dir).unwrap_err();
    assert!(
        matches!(
            other.storage_kind(),
            Some(StorageErrorKind::TypeMismatch("value"))
        ),
        "{other}"
    );
    let other = open_unlocked::<u64, String>(dir).unwrap_err();
    assert!(
        matches!(
            other.storage_kind(),
            Some(StorageErrorKind::TypeMismatch("key"))
        ),
        "{other}"
    );
    assert_eq!(contents(dir), before);
    // A meta file cut short behind a checksum that matches.
    let mut short = b"FLOEPMAP".to_vec();
    short.extend_from_slice(&crc32fast::hash(&short).to_le_bytes());
    std::fs::write(dir.join("floe-map.meta"), &short).unwrap();
    refused(dir, |e| {
        matches!(e.storage_kind(), Some(StorageErrorKind::Corrupt(_)))
    });
    // A foreign meta file.
    std::fs::write(dir.join("floe-map.meta"), b"not a floe map at all").unwrap();
    refused(dir, |e| {
        matches!(e.storage_kind(), Some(StorageErrorKind::Foreign))
    });
}

/// Make a map of `keys` keys in `dir` and close it; the path of the snapshot it leaves.
fn closed_map(dir: &Path, keys: u64) -> PathBuf {
    let map = Map::<String, String>::builder()
        .build_persistent(dir)
        .unwrap();
    for n in 0..keys {
        assert!(map
            .pin()
            .insert_new(key_name(n), format!("v{n}"))
            .unwrap()
            .is_inserted());
    }
    map.close().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snapshot-")
        })
        .unwrap()
}

#[test]
fn damaged_snapshots_and_journals_are_refused_unchanged() {
    // Every byte of a snapshot flipped in turn: refused, the files unchanged.
    let scratch = Scratch::new("damaged-snapshot");
    let dir = scratch.path();
    let snapshot = closed_map(dir, 20);
    let good = std::fs::read(&snapshot).unwrap();
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(&snapshot, &bad).unwrap();
        refused(dir, |e| {
            matches!(
                e.storage_kind(),
                Some(StorageErrorKind::Corrupt(_) | StorageErrorKind::Version { .. })
            )
        });
    }
    // Cut short, or zeroed.
    std::fs::write(&snapshot, &good[..good.len() / 2]).unwrap();
    refused(dir, |e| {
        matches!(e.storage_kind(), Some(StorageErrorKind::Corrupt(_)))
    });
    std::fs::write(&snapshot, vec![0; good.len()]).unwrap();
    refused(dir, |e| {
        matches!(e.storage_kind(), Some(StorageErrorKind::Corrupt(_)))
    });
    std::fs::write(&snapshot, &good).unwrap();
    assert_eq!(
        PersistentMap::<String, String>::open(dir).unwrap().len(),
        20
    );

    // A journal damaged below its checkpointed mark: refused, unchanged.
    let scratch = Scratch::new("damaged-journal");
    let dir = scratch.path();
    crashed_map(dir, true);
    let journal = journal_files(dir).remove(0);
    let good = std::fs::read(&journal).unwrap();
    // The first record (at 64): its length and checksum, sequence number, predecessor, key
    // length, kind, and body.
    for at in [64, 68, 72, 80, 88, 92, 96, 97, 100] {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        std::fs::write(&journal, &bad).unwrap();
        refused(dir, |e| {
            matches!(e.storage_kind(), Some(StorageErrorKind::Corrupt(_)))
        });
    }
    std::fs::write(&journal, &good).unwrap();
    assert_eq!(
        PersistentMap::<String, String>::open(dir).unwrap().len(),
        500
    );
}

/// Every file the manifest lists is needed: a cleanly closed map's snapshot removed, a
/// crashed map's journal removed, emptied, cut short, extended, overwritten with garbage,
/// with eight bytes flipped in a record, with a 4 KiB block zeroed in its middle, or replaced
/// by a FIFO; the manifest itself removed or damaged: each refused, the files unchanged (no
/// checkpoint, so nothing below a synced mark protects them). Before, each opened with 0 keys.
#[test]
fn missing_and_damaged_files_are_refused_not_opened_empty() {
    let scratch = Scratch::new("missing-snapshot");
    let dir = scratch.path();
    let snapshot = closed_map(dir, 2000);
    let good = std::fs::read(&snapshot).unwrap();
    std::fs::remove_file(&snapshot).unwrap();
    refused(dir, |e| {
        matches!(e.storage_kind(), Some(StorageErrorKind::Corrupt(_)))
    });
    std::fs::write(&snapshot, &good).unwrap();
    assert_eq!(
        PersistentMap::<String, String>::open(dir).unwrap().len(),
        2000
    );

    let scratch = Scratch::new("damaged-journals");
    let dir = scratch.path();
    let pairs = crashed_map(dir, false);
    let journal = journal_files(dir).remove(0);
    let good = std::fs::read(&journal).unwrap();
    let manifest = dir.join("floe-map.manifest");
    let good_manifest = std::fs::read(&manifest).unwrap();
    let records_end = good.len() - good.iter().rev().take_while(|&&b| b == 0).count();
    type Damage<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let damages: Vec<Damage> = vec![
        (
            "removed",
            Box::new(|| std::fs::remove_file(&journal).unwrap()),
        ),
        (
            "emptied",
            Box::new(|| std::fs::write(&journal, b"").unwrap()),
        ),
        (
            "cut in half",
            Box::new(|| std::fs::write(&journal, &good[..good.len() / 2]).unwrap()),
        ),
        (
            "extended",
            Box::new(|| {
                let mut longer = good.clone();
                longer.extend_from_slice(&[0; 4096]);
                std::fs::write(&journal, longer).unwrap()
            }),
        ),
        (
            "garbage",
            Box::new(|| {
                let garbage: Vec<u8> = (0..good.len()).map(|i| (i * 7 + 3) as u8).collect();
                std::fs::write(&journal, garbage).unwrap()
            }),
        ),
        (
            "eight bytes flipped",
            Box::new(|| {
                let mut bad = good.clone();
                for byte in &mut bad[records_end / 2..records_end / 2 + 8] {
                    *byte ^= 0xa5;
                }
                std::fs::write(&journal, bad).unwrap()
            }),
        ),
        (
            "a block zeroed",
            Box::new(|| {
                let mut bad = good.clone();
                let block = (records_end / 2) & !4095;
                bad[block..block + 4096].fill(0);
                std::fs::write(&journal, bad).unwrap()
            }),
        ),
        (
            "a FIFO",
            Box::new(|| {
                std::fs::remove_file(&journal).unwrap();
                make_fifo(&journal);
            }),
        ),
        (
            "the manifest removed",
            Box::new(|| std::fs::remove_file(&manifest).unwrap()),
        ),
        (
            "the manifest damaged",
            Box::new(|| {
                let mut bad = good_manifest.clone();
                bad[20] ^= 1;
                std::fs::write(&manifest, bad).unwrap()
            }),
        ),
    ];
    for (what, damage) in damages {
        damage();
        let before = contents(dir);
        let opening = dir.to_path_buf();
        let opened =
            within_seconds(move || open_unlocked::<String, String>(&opening).map(|map| map.len()));
        assert!(
            matches!(
                opened.as_ref().map_err(Error::storage_kind),
                Err(Some(
                    StorageErrorKind::Corrupt(_) | StorageErrorKind::Io { .. }
                ))
            ),
            "{what}: {opened:?}"
        );
        assert_eq!(
            contents(dir),
            before,
            "{what}: the refused open changed the files"
        );
        let _ = std::fs::remove_file(&journal);
        std::fs::write(&journal, &good).unwrap();
        std::fs::write(&manifest, &good_manifest).unwrap();
    }
    let (map, recovery) = Map::<String, String>::builder().open(dir).unwrap();
    assert_eq!(recovery.keys, pairs.len());
    for (key, value) in &pairs {
        assert_eq!(map.pin().get(key.as_str()), Some(value));
    }
}

/// A record past the last checkpoint that fails its checksum, with whole records after it:
/// refused on the machine that wrote it (no crash leaves that), and after a restart dropped as
/// a power loss's tail with everything after it, reported; the records before it are kept.
#[test]
fn a_damaged_tail_past_the_checkpoint_is_dropped() {
    let scratch = Scratch::new("torn");
    let dir = scratch.path();
    let map = Map::<String, String>::builder()
        .build_persistent(dir)
        .unwrap();
    for n in 0..100u64 {
        assert!(map
            .pin()
            .insert_new(key_name(n), format!("v{n}"))
            .unwrap()
            .is_inserted());
    }
    map.checkpoint().unwrap();
    // Lanes: one thread writes through one lane, so its journal holds everything.
    for n in 100..200u64 {
        assert!(map
            .pin()
            .insert_new(key_name(n), format!("v{n}"))
            .unwrap()
            .is_inserted());
    }
    map.abandon();
    release_locks(dir);
    let journal = journal_files(dir)
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&journal).unwrap();
    // Damage the checksum of record 149 (counting from 0): the 50th past the checkpoint.
    let mut at = 64;
    for _ in 0..149 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 32 + len.next_multiple_of(8);
    }
    bytes[at + 5] ^= 0xff;
    std::fs::write(&journal, &bytes).unwrap();
    // On the machine that wrote it, without a restart, no crash leaves a record that fails
    // with whole ones after it: damage, refused unchanged.
    let before = std::fs::read(&journal).unwrap();
    assert!(matches!(
        Map::<String, String>::builder()
            .open(dir)
            .map_err(|error| error.storage_kind()),
        Err(Some(StorageErrorKind::Corrupt(_)))
    ));
    assert_eq!(std::fs::read(&journal).unwrap(), before);
    // After a restart it may be a power loss's (and `repair(true)` asks for that reading on
    // the same machine): what follows the damaged record is dropped, and reported.
    let copy = copy_map(dir, "torn-repaired");
    let repaired = Map::<String, String>::builder()
        .repair(true)
        .open(copy.path());
    for (map, recovery) in [
        floe::durable::assume_rebooted(|| Map::<String, String>::builder().open(dir)).unwrap(),
        repaired.unwrap(),
    ] {
        assert_eq!(recovery.torn, 1);
        let pinned = map.pin();
        for n in 0..100u64 {
            assert_eq!(
                pinned.get(key_name(n).as_str()),
                Some(&format!("v{n}")),
                "checkpointed key {n} lost"
            );
        }
        assert_eq!(
            map.len(),
            149,
            "the records before the damaged one are kept, none after"
        );
        drop(pinned);
        // The hole is compacted away before this boot is recorded as the map's: a crash
        // now leaves a directory that opens under this boot's rule.
        assert!(map
            .pin()
            .insert_new(key_name(500), "after".into())
            .unwrap()
            .is_inserted());
        map.abandon();
    }
    for dir in [dir, copy.path()] {
        release_locks(dir);
        let (map, recovery) = Map::<String, String>::builder().open(dir).unwrap();
        assert_eq!((recovery.torn, map.len()), (0, 150));
    }
}

/// The child of `a_full_disk_fails_the_write_and_loses_nothing`: a file size limit of 4 MiB
/// stands in for a full disk: small writes fit in 2 MiB journal files, one 5 MiB value does
/// not (its journal file cannot be made), and writes after it go on.
#[test]
fn child_full_disk() {
    let Ok(dir) = std::env::var("FLOE_PMAP_CHILD") else {
        return;
    };
    let map = Map::<String, String>::builder()
        .build_persistent(&dir)
        .unwrap();
    // SAFETY: libc calls on this process's own limits and signal disposition.
    unsafe {
        // A write past the limit is EFBIG, not the default SIGXFSZ (which would kill us).
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let limit = libc::rlimit {
            rlim_cur: 4 << 20,
            rlim_max: 4 << 20,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let out = Mutex::new(std::io::stdout());
    for n in 0..4000u64 {
        let key = key_name(n);
        let big = n == 2000;
        let value = format!("{n}-{}", "y".repeat(if big { 5 << 20 } else { 1000 }));
        match map.pin().insert(key.clone(), value.clone()) {
            Ok(_) => say(&out, format_args!("A {key} {value}")),
            Err(error) => {
                assert!(big, "write {n} failed: {error}");
                say(&out, format_args!("E {error}"));
                assert_eq!(
                    map.pin().get(key.as_str()),
                    None,
                    "a failed write changed the map"
                );
            }
        }
    }
    map.abandon();
}

#[test]
fn a_full_disk_fails_the_write_and_loses_nothing() {
    let scratch = Scratch::new("full");
    let mut child = spawn_child(
        "child_full_disk",
        &[("FLOE_PMAP_CHILD", scratch.path().display().to_string())],
    );
    let mut expected = HashMap::new();
    let mut error = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.splitn(3, ' ').collect();
        match words.as_slice() {
            ["A", key, value] => {
                expected.insert(key.to_string(), value.to_string());
            }
            ["E", ..] => error = Some(line.clone()),
            _ => {}
        }
    }
    assert!(child.wait().unwrap().success(), "the child failed");
    let error = error.expect("no write failed");
    assert!(error.contains("journal"), "{error}");
    assert!(
        expected.len() > 1000,
        "{} keys before the disk filled",
        expected.len()
    );
    let map = PersistentMap::<String, String>::open(scratch.path()).unwrap();
    assert_eq!(map.len(), expected.len());
    for (key, value) in &expected {
        assert_eq!(map.pin().get(key.as_str()), Some(value));
    }
}

/// Compactions unmap the journal files they delete (through the map's collector, once no
/// reader can be confirming a record in one): deleted files do not pile up in the address
/// space, even when compactions run on a thread that retires nothing else (as the
/// background compactor is).
#[test]
fn compactions_unmap_the_journals_they_delete() {
    let scratch = Scratch::new("unmap");
    let map = Map::<String, String>::builder()
        .build_persistent(scratch.path())
        .unwrap();
    let dir = scratch.path().display().to_string();
    let (go, rounds) = std::sync::mpsc::channel::<()>();
    let (done, finished) = std::sync::mpsc::channel::<usize>();
    std::thread::scope(|s| {
        let map = &map;
        s.spawn(move || {
            let mut deleted = 0;
            for () in rounds {
                map.compact().unwrap();
                let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
                deleted = maps
                    .lines()
                    .filter(|line| line.contains(&dir) && line.ends_with("(deleted)"))
                    .count();
            }
            done.send(deleted).unwrap();
        });
        for round in 0..10u64 {
            for n in 0..50 {
                map.pin()
                    .insert(key_name(n), format!("{round}.{n}"))
                    .unwrap();
            }
            go.send(()).unwrap();
        }
        drop(go);
        let deleted = finished.recv().unwrap();
        assert!(deleted <= 2, "{deleted} deleted journal files still mapped");
    });
    map.close().unwrap();
}

/// Per key, the states its acknowledged writes left, in order, and the in-flight one; and the
/// index of each key's state at the start of the last checkpoint that returned.
#[derive(Default)]
struct Histories {
    states: HashMap<String, Vec<Option<String>>>,
    in_flight: HashMap<String, Option<String>>,
    starting: HashMap<String, usize>,
    durable: HashMap<String, usize>,
}

impl Histories {
    fn take(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["B", key, state] => {
                self.in_flight.insert(key.to_string(), parse_state(state));
            }
            ["A", key] => {
                let state = self.in_flight.remove(*key).expect("a write began");
                self.states
                    .entry(key.to_string())
                    .or_insert_with(|| vec![None])
                    .push(state);
            }
            ["k"] => {
                self.starting = self
                    .states
                    .iter()
                    .map(|(key, states)| (key.clone(), states.len() - 1))
                    .collect();
            }
            ["K"] => self.durable = std::mem::take(&mut self.starting),
            _ => {}
        }
    }
}

/// Copy `dir` to `image` as a power loss could leave it: the journals as far as the last
/// checkpoint synced them (the manifest's synced lengths; a chunk's header is synced when it
/// is made), and of every 4 KiB page after that, each kept or lost (zeroed) at random; a
/// journal the manifest does not list yet may be gone entirely.
/// Snapshots and the small files are written by rename after a sync: kept.
fn power_loss_image(dir: &Path, image: &Path, rng: &mut Rng) {
    std::fs::create_dir_all(image).unwrap();
    // The manifest's list: file name -> synced length (`journal.rs`: magic and version).
    let mut synced = HashMap::new();
    if let Ok(bytes) = std::fs::read(dir.join("floe-map.manifest")) {
        let manifest = floe::durable::Manifest::decode(&bytes, *b"FLOEMANI", 2).unwrap();
        for (name, listed) in manifest.files {
            synced.insert(name, listed.synced as usize);
        }
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tmp") {
            continue;
        }
        let mut bytes = std::fs::read(entry.path()).unwrap();
        if name.starts_with("journal-") {
            let Some(&kept) = synced.get(&name) else {
                // Not listed: made just before the crash, its directory entry perhaps never
                // on the disk.
                if rng.below(2) == 0 {
                    continue;
                }
                std::fs::write(image.join(&name), &bytes).unwrap();
                continue;
            };
            // A listed chunk's header was synced when it was made.
            let kept = kept.max(64);
            let first_page = kept / 4096;
            for page in first_page..bytes.len().div_ceil(4096) {
                if rng.below(2) == 0 {
                    let start = (page * 4096).max(kept);
                    let end = ((page + 1) * 4096).min(bytes.len());
                    bytes[start..end].fill(0);
                }
            }
        }
        std::fs::write(image.join(&name), &bytes).unwrap();
    }
}

/// Power loss, simulated: a child runs the kill harness's workload (checkpoints and
/// compactions included) and is killed; an image of its directory keeps what the last
/// checkpoint synced and a random subset of the pages written after it. Reopened, every key
/// must hold a state of its history no older than the one it had when that checkpoint began
/// (a prefix of its history, each write whole). `FLOE_PMAP_POWER_ROUNDS` (default 8).
#[test]
fn power_loss_keeps_every_checkpointed_write() {
    let rounds = env_u64("FLOE_PMAP_POWER_ROUNDS").unwrap_or(8);
    let mut rng = Rng(0xb0b);
    let mut checked = 0;
    for round in 0..rounds {
        let scratch = Scratch::new("power");
        let image = Scratch::new("power-image");
        let mut histories = Histories::default();
        let mut child = spawn_child(
            "child_kill_workload",
            &[
                ("FLOE_PMAP_CHILD", scratch.path().display().to_string()),
                ("FLOE_PMAP_SEED", (round + 100).to_string()),
            ],
        );
        let deadline = Instant::now() + Duration::from_millis(150 + rng.below(400));
        read_report(&mut child, Some(deadline), |line| histories.take(line));
        power_loss_image(scratch.path(), image.path(), &mut rng);
        // A power loss is a restart of the machine: the open applies the rule for one.
        let (map, _) =
            floe::durable::assume_rebooted(|| Map::<String, String>::builder().open(image.path()))
                .unwrap_or_else(|error| panic!("round {round}: the image does not open: {error}"));
        let pinned = map.pin();
        for (key, states) in &histories.states {
            let found = pinned.get(key.as_str()).cloned();
            let floor = histories.durable.get(key).copied().unwrap_or(0);
            let in_flight = histories.in_flight.get(key);
            let allowed = states[floor..].contains(&found) || in_flight == Some(&found);
            assert!(
                allowed,
                "round {round}, key {key}: reopened as {found:?}, not one of the {} states since \
                 the last checkpoint began (the key's state {floor} of {})",
                states.len() - floor,
                states.len()
            );
            checked += 1;
        }
        drop(pinned);
        map.close().unwrap();
    }
    assert!(checked > 0);
    eprintln!("{rounds} power losses, {checked} keys checked");
}
