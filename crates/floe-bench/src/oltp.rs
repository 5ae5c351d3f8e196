//! `floe-bench oltp`: the multi-key transactions of DLHT's evaluation (§5.3.5), Smallbank
//! (write-heavy) and TATP (read-heavy), over floe and over the Rust peers, in one run.
//!
//! **Tables.** Every table of a benchmark lives in one map of 64-bit words, as DLHT keeps
//! them in its index: a row's key names its table and primary key, its value packs the row's
//! columns (a row too wide for a word, TATP's subscriber, is four keys). So each engine is
//! one table of words and one lock table, and every engine stores the same words.
//!
//! **Concurrency control.** Two-phase locking with one exclusive lock per customer
//! (Smallbank) or subscriber (TATP), taken all at once in key order before the transaction
//! reads, released after its writes: a transaction that finds a lock taken releases what it
//! took and retries (counted as a conflict), so no two wait on each other in a cycle, and
//! every schedule is serializable. On floe the locks are keys of a `FlatSet` taken in one
//! order-preserving batch that stops at the first lock held elsewhere (`lock_manager.rs`'s
//! scheme, DLHT §5.3.3), a transaction's reads are one `get_many` and its writes one
//! `run_each` batch; the peers do the same one key at a time (`dashmap`: entries of a
//! `DashMap`; `papaya`: `try_insert` into a `papaya::HashMap`), with ahash.
//!
//! **Smallbank** (H-Store's, as OLTPBench runs it): `--accounts` customers, each an ACCOUNTS
//! row (its name) and a SAVINGS and a CHECKING balance (cents, 10,000.00 to 50,000.00 at the
//! start). The mix: Amalgamate 15% (move all of one customer's money into another's
//! checking), Balance 15% (read-only), DepositChecking 15% (+1.30), SendPayment 25% (5.00
//! between two checking accounts, refused if the payer's is short), TransactSavings 15%
//! (-20.20 from savings, refused if it would go negative), WriteCheck 15% (-5.00 from
//! checking, -5.01 when savings and checking together are short). Customers are uniform, or
//! 90% of picks from the first `--hotspot` accounts. Checked at the end: the money in the
//! bank is the money at the start plus every committed deposit and minus every committed
//! withdrawal, no savings balance is negative, every ACCOUNTS row is there, no lock is held.
//!
//! **TATP** (the Telecom Application Transaction Processing benchmark): `--subscribers`
//! subscribers, each a SUBSCRIBER row (10 bits, 10 hex digits, 10 bytes, two locations: four
//! words) and its `sub_nbr` index entry, 1-4 ACCESS_INFO rows, 1-4 SPECIAL_FACILITY rows
//! (85% active) and 0-3 CALL_FORWARDING rows for each of those. The mix: GetSubscriberData
//! 35%, GetNewDestination 10%, GetAccessData 35% (the read-only 80%), UpdateSubscriberData
//! 2%, UpdateLocation 14% (by `sub_nbr`, through the index), InsertCallForwarding 2% and
//! DeleteCallForwarding 2%; subscriber ids drawn by TATP's non-uniform rule. Checked at the
//! end: referential integrity (every CALL_FORWARDING row's SPECIAL_FACILITY row exists, every
//! subscriber has its four words and its index entry), every column in its domain, the
//! CALL_FORWARDING rows are those at the start plus the committed inserts minus the
//! committed deletes, and no lock is held.
//!
//! DLHT reports 129M Smallbank and 175M TATP transactions/s on 64 threads of a two-socket
//! Xeon Gold 6254 (2.0M and 2.7M a thread); the report sets each engine's rate a thread
//! beside those, a different machine named as such.

use std::{
    fmt::Write as _,
    hint::black_box,
    time::{Duration, Instant},
};

use clap::{Args, ValueEnum};
use floe::{FlatMap, FlatSet, Insert, Request, Response};

use crate::{
    keys::{mix, Rng},
    machine::machine,
    maps::AHASH,
    measure::{median, Workers},
};

#[derive(Args, Debug, Clone)]
pub struct OltpArgs {
    /// Benchmarks, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "smallbank,tatp"
    )]
    pub benchmarks: Vec<Benchmark>,
    /// Engines, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "floe,dashmap,papaya"
    )]
    pub engines: Vec<Engine>,
    /// Smallbank's customers (DLHT's: 10 million).
    #[arg(long, default_value_t = 10_000_000)]
    pub accounts: u64,
    /// Smallbank's hotspot: 90% of the customers picked come from this many (0: uniform).
    #[arg(long, default_value_t = 0)]
    pub hotspot: u64,
    /// TATP's subscribers (DLHT's: 1 million).
    #[arg(long, default_value_t = 1_000_000)]
    pub subscribers: u64,
    /// Threads [default: all cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seconds of each timed run.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Timed runs of each engine, interleaved (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Benchmark {
    Smallbank,
    Tatp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    Floe,
    Dashmap,
    Papaya,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Floe => "floe",
            Engine::Dashmap => "dashmap",
            Engine::Papaya => "papaya",
        }
    }
}

/// DLHT's transactions per second a thread (Fig. 19, 64 threads, Xeon Gold 6254).
const DLHT_SMALLBANK_PER_THREAD: f64 = 129e6 / 64.0;
const DLHT_TATP_PER_THREAD: f64 = 175e6 / 64.0;

/// Refuse flags that cannot make a run (exit code 2).
pub fn check(args: &OltpArgs) -> Result<(), String> {
    if args.benchmarks.is_empty() || args.engines.is_empty() {
        return Err("--benchmarks and --engines need at least one each".into());
    }
    if !(2..=1 << 40).contains(&args.accounts) {
        return Err(format!(
            "--accounts {} is out of range (2 to 2^40: Amalgamate and SendPayment need two)",
            args.accounts
        ));
    }
    if args.hotspot == 1 || args.hotspot > args.accounts {
        return Err(format!(
            "--hotspot {} must be 0 (uniform) or 2 to --accounts",
            args.hotspot
        ));
    }
    if !(1..=1 << 40).contains(&args.subscribers) {
        return Err(format!(
            "--subscribers {} is out of range (1 to 2^40)",
            args.subscribers
        ));
    }
    if args.threads == Some(0) || args.threads.is_some_and(|t| t > 1024) {
        return Err("--threads must be 1 to 1024".into());
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 3600.0) {
        return Err(format!("--seconds {} must be in (0, 3600]", args.seconds));
    }
    if args.repeat == 0 {
        return Err("--repeat must be at least 1".into());
    }
    Ok(())
}

// -------------------------------------------------------------------------------------------
// The engines
// -------------------------------------------------------------------------------------------

/// What a transaction needs of an engine: one table of words and a lock table.
pub(crate) trait Store: Sync {
    /// Take the locks of `ids` (sorted, distinct), all or none: `true` if taken.
    fn try_lock(&self, ids: &[u64]) -> bool;
    /// Release locks this thread holds.
    fn unlock(&self, ids: &[u64]);
    /// The values of `keys`, `None` where absent.
    fn read(&self, keys: &[u64], values: &mut [Option<u64>]);
    /// Replace the values of present keys.
    fn write(&self, pairs: &[(u64, u64)]);
    /// Insert if absent: `true` if inserted.
    fn insert_new(&self, key: u64, value: u64) -> bool;
    /// `true` if the key was there.
    fn remove(&self, key: u64) -> bool;
    /// Add rows (before timing; keys not present).
    fn load(&self, rows: &[(u64, u64)]);
    /// Every row (after timing, for the checks).
    fn each(&self, visit: &mut dyn FnMut(u64, u64));
    fn locks_held(&self) -> usize;
}

/// Locks a transaction takes at most.
const MAX_LOCKS: usize = 2;

pub(crate) struct FloeStore {
    data: FlatMap<u64, u64>,
    locks: FlatSet<u64>,
}

impl FloeStore {
    pub(crate) fn new(rows: usize, threads: usize) -> Self {
        FloeStore {
            data: FlatMap::with_capacity(rows),
            locks: FlatSet::with_capacity(64 * threads),
        }
    }
}

impl Store for FloeStore {
    fn try_lock(&self, ids: &[u64]) -> bool {
        debug_assert!(ids.len() <= MAX_LOCKS);
        let mut requests = [Request::InsertNew(0, ()); MAX_LOCKS];
        for (request, &id) in requests.iter_mut().zip(ids) {
            *request = Request::InsertNew(id, ());
        }
        // One ordered batch that stops at the first lock someone else holds.
        let mut taken = 0;
        self.locks.as_map().batch().stop_on_failure(true).run_each(
            &requests[..ids.len()],
            |i, response| {
                if !response.is_failure() {
                    taken = i + 1;
                }
            },
        );
        if taken == ids.len() {
            return true;
        }
        self.unlock(&ids[..taken]);
        false
    }

    fn unlock(&self, ids: &[u64]) {
        let mut requests = [Request::Remove(0); MAX_LOCKS];
        for (request, &id) in requests.iter_mut().zip(ids) {
            *request = Request::Remove(id);
        }
        self.locks
            .as_map()
            .batch()
            .run_each(&requests[..ids.len()], |_, released| {
                assert_eq!(released, Response::Remove(Some(())), "released a free lock");
            });
    }

    fn read(&self, keys: &[u64], values: &mut [Option<u64>]) {
        self.data
            .batch()
            .get_many(keys, values)
            .expect("as many values as keys");
    }

    fn write(&self, pairs: &[(u64, u64)]) {
        let mut requests = [Request::Put(0, 0); 4];
        for (request, &(key, value)) in requests.iter_mut().zip(pairs) {
            *request = Request::Put(key, value);
        }
        self.data
            .batch()
            .run_each(&requests[..pairs.len()], |_, response| {
                assert!(!response.is_failure(), "wrote a row that is not there");
            });
    }

    fn insert_new(&self, key: u64, value: u64) -> bool {
        self.data.insert_new(key, value) == Insert::Inserted
    }

    fn remove(&self, key: u64) -> bool {
        self.data.remove(&key).is_some()
    }

    fn load(&self, rows: &[(u64, u64)]) {
        let requests: Vec<_> = rows
            .iter()
            .map(|&(k, v)| Request::InsertNew(k, v))
            .collect();
        self.data.batch().run_each(&requests, |_, response| {
            assert!(
                !response.is_failure(),
                "a row loaded twice, or the map is full"
            );
        });
    }

    fn each(&self, visit: &mut dyn FnMut(u64, u64)) {
        self.data.for_each(visit);
    }

    fn locks_held(&self) -> usize {
        self.locks.len()
    }
}

type AhashState = ahash::RandomState;

pub(crate) struct DashStore {
    data: dashmap::DashMap<u64, u64, AhashState>,
    locks: dashmap::DashMap<u64, (), AhashState>,
}

impl DashStore {
    pub(crate) fn new(rows: usize) -> Self {
        DashStore {
            data: dashmap::DashMap::with_capacity_and_hasher(rows, AHASH.clone()),
            locks: dashmap::DashMap::with_hasher(AHASH.clone()),
        }
    }
}

impl Store for DashStore {
    fn try_lock(&self, ids: &[u64]) -> bool {
        for (i, &id) in ids.iter().enumerate() {
            // The entry holds its shard's lock: let it go before releasing what was taken
            // (which may be in the same shard).
            let taken = match self.locks.entry(id) {
                dashmap::Entry::Vacant(vacant) => {
                    vacant.insert(());
                    true
                }
                dashmap::Entry::Occupied(_) => false,
            };
            if !taken {
                self.unlock(&ids[..i]);
                return false;
            }
        }
        true
    }

    fn unlock(&self, ids: &[u64]) {
        for id in ids {
            assert!(self.locks.remove(id).is_some(), "released a free lock");
        }
    }

    fn read(&self, keys: &[u64], values: &mut [Option<u64>]) {
        for (value, key) in values.iter_mut().zip(keys) {
            *value = self.data.get(key).map(|v| *v);
        }
    }

    fn write(&self, pairs: &[(u64, u64)]) {
        for &(key, value) in pairs {
            *self
                .data
                .get_mut(&key)
                .expect("wrote a row that is not there") = value;
        }
    }

    fn insert_new(&self, key: u64, value: u64) -> bool {
        match self.data.entry(key) {
            dashmap::Entry::Vacant(vacant) => {
                vacant.insert(value);
                true
            }
            dashmap::Entry::Occupied(_) => false,
        }
    }

    fn remove(&self, key: u64) -> bool {
        self.data.remove(&key).is_some()
    }

    fn load(&self, rows: &[(u64, u64)]) {
        for &(key, value) in rows {
            assert!(self.data.insert(key, value).is_none(), "a row loaded twice");
        }
    }

    fn each(&self, visit: &mut dyn FnMut(u64, u64)) {
        for row in self.data.iter() {
            visit(*row.key(), *row.value());
        }
    }

    fn locks_held(&self) -> usize {
        self.locks.len()
    }
}

pub(crate) struct PapayaStore {
    data: papaya::HashMap<u64, u64, AhashState>,
    locks: papaya::HashMap<u64, (), AhashState>,
}

impl PapayaStore {
    pub(crate) fn new(rows: usize) -> Self {
        PapayaStore {
            data: papaya::HashMap::with_capacity_and_hasher(rows, AHASH.clone()),
            locks: papaya::HashMap::with_hasher(AHASH.clone()),
        }
    }
}

impl Store for PapayaStore {
    fn try_lock(&self, ids: &[u64]) -> bool {
        let locks = self.locks.pin();
        for (i, &id) in ids.iter().enumerate() {
            if locks.try_insert(id, ()).is_err() {
                drop(locks);
                self.unlock(&ids[..i]);
                return false;
            }
        }
        true
    }

    fn unlock(&self, ids: &[u64]) {
        let locks = self.locks.pin();
        for id in ids {
            assert!(locks.remove(id).is_some(), "released a free lock");
        }
    }

    fn read(&self, keys: &[u64], values: &mut [Option<u64>]) {
        let data = self.data.pin();
        for (value, key) in values.iter_mut().zip(keys) {
            *value = data.get(key).copied();
        }
    }

    fn write(&self, pairs: &[(u64, u64)]) {
        let data = self.data.pin();
        for &(key, value) in pairs {
            assert!(
                data.update(key, |_| value).is_some(),
                "wrote a row that is not there"
            );
        }
    }

    fn insert_new(&self, key: u64, value: u64) -> bool {
        self.data.pin().try_insert(key, value).is_ok()
    }

    fn remove(&self, key: u64) -> bool {
        self.data.pin().remove(&key).is_some()
    }

    fn load(&self, rows: &[(u64, u64)]) {
        let data = self.data.pin();
        for &(key, value) in rows {
            assert!(data.insert(key, value).is_none(), "a row loaded twice");
        }
    }

    fn each(&self, visit: &mut dyn FnMut(u64, u64)) {
        for (&key, &value) in self.data.pin().iter() {
            visit(key, value);
        }
    }

    fn locks_held(&self) -> usize {
        self.locks.len()
    }
}

/// Load `rows` into `store` on `threads` threads (each a contiguous share).
fn load_parallel(store: &dyn Store, rows: &[(u64, u64)], threads: usize) {
    let share = rows.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for part in rows.chunks(share) {
            s.spawn(move || {
                for chunk in part.chunks(1 << 16) {
                    store.load(chunk);
                }
            });
        }
    });
}

/// Take `ids`' locks (sorted, distinct), retrying while another transaction holds one.
/// Returns 1 if it had to wait (a conflict), else 0.
#[inline]
fn lock(store: &impl Store, ids: &[u64]) -> u64 {
    if store.try_lock(ids) {
        return 0;
    }
    while !store.try_lock(ids) {
        std::hint::spin_loop();
    }
    1
}

/// Two distinct ids in key order (the order locks are taken in).
fn two_sorted(a: u64, b: u64) -> [u64; 2] {
    [a.min(b), a.max(b)]
}

/// What one thread's transactions did (or, summed, a run's).
#[derive(Clone, Copy, Default, Debug)]
struct Tally {
    /// Per transaction type (the benchmark's `MIX` order): done (committed, or succeeded)
    /// and not (a business rule refused it, or TATP's expected failures: a row not found, a
    /// key taken), either way with nothing left half done.
    done: [u64; 7],
    not_done: [u64; 7],
    /// Transactions that found a lock taken and waited.
    conflicts: u64,
    /// Smallbank: the money into the bank (deposits) minus the money out (withdrawals,
    /// checks) of committed transactions. TATP: CALL_FORWARDING rows inserted minus deleted.
    net: i64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        for i in 0..self.done.len() {
            self.done[i] += other.done[i];
            self.not_done[i] += other.not_done[i];
        }
        self.conflicts += other.conflicts;
        self.net += other.net;
    }

    fn transactions(&self) -> u64 {
        self.done.iter().chain(&self.not_done).sum()
    }

    fn count(&mut self, kind: usize, done: bool) {
        if done {
            self.done[kind] += 1;
        } else {
            self.not_done[kind] += 1;
        }
    }
}

// -------------------------------------------------------------------------------------------
// Smallbank
// -------------------------------------------------------------------------------------------

mod smallbank {
    /// Row keys: a customer's ACCOUNTS row (its name), SAVINGS and CHECKING balances.
    pub fn account(id: u64) -> u64 {
        id * 4
    }
    pub fn savings(id: u64) -> u64 {
        id * 4 + 1
    }
    pub fn checking(id: u64) -> u64 {
        id * 4 + 2
    }
    /// A customer's name, as a word (never 0: the check tells it from a missing row).
    pub fn name(id: u64) -> u64 {
        crate::keys::mix(id) | 1
    }
    /// Cents.
    pub const MIN_BALANCE: i64 = 1_000_000;
    pub const MAX_BALANCE: i64 = 5_000_000;
    pub const DEPOSIT: i64 = 130;
    pub const SAVINGS_WITHDRAWAL: i64 = 2_020;
    pub const CHECK: i64 = 500;
    pub const PAYMENT: i64 = 500;
    /// Transactions, with their share of the mix in percent (OLTPBench's defaults).
    pub const MIX: [(&str, u64); 6] = [
        ("Amalgamate", 15),
        ("Balance", 15),
        ("DepositChecking", 15),
        ("SendPayment", 25),
        ("TransactSavings", 15),
        ("WriteCheck", 15),
    ];
}

/// The initial rows of Smallbank, and the money in them.
fn smallbank_rows(accounts: u64) -> (Vec<(u64, u64)>, i64) {
    let mut rng = Rng(0x5a11_ba4c);
    let span = (smallbank::MAX_BALANCE - smallbank::MIN_BALANCE + 1) as u64;
    let mut total = 0i64;
    let mut rows = Vec::with_capacity(3 * accounts as usize);
    for id in 0..accounts {
        let saving = smallbank::MIN_BALANCE + rng.below(span) as i64;
        let check = smallbank::MIN_BALANCE + rng.below(span) as i64;
        total += saving + check;
        rows.push((smallbank::account(id), smallbank::name(id)));
        rows.push((smallbank::savings(id), saving as u64));
        rows.push((smallbank::checking(id), check as u64));
    }
    (rows, total)
}

struct Bank {
    accounts: u64,
    hotspot: u64,
}

impl Bank {
    fn customer(&self, rng: &mut Rng) -> u64 {
        if self.hotspot > 0 && rng.below(100) < 90 {
            rng.below(self.hotspot)
        } else {
            rng.below(self.accounts)
        }
    }

    fn two_customers(&self, rng: &mut Rng) -> (u64, u64) {
        let first = self.customer(rng);
        loop {
            let second = self.customer(rng);
            if second != first {
                return (first, second);
            }
        }
    }

    /// Run one transaction drawn from the mix.
    fn transaction(&self, store: &impl Store, rng: &mut Rng, tally: &mut Tally) {
        use smallbank::*;
        let mut draw = rng.below(100);
        let mut kind = 0;
        while draw >= MIX[kind].1 {
            draw -= MIX[kind].1;
            kind += 1;
        }
        let mut values = [None; 6];
        let balance = |v: Option<u64>| v.expect("a balance row is there") as i64;
        let committed = match kind {
            // Amalgamate: all of a's money into b's checking.
            0 => {
                let (a, b) = self.two_customers(rng);
                let ids = two_sorted(a, b);
                tally.conflicts += lock(store, &ids);
                let keys = [account(a), account(b), savings(a), checking(a), checking(b)];
                store.read(&keys, &mut values[..5]);
                assert!(
                    values[0].is_some() && values[1].is_some(),
                    "customers exist"
                );
                let total = balance(values[2]) + balance(values[3]);
                store.write(&[
                    (savings(a), 0),
                    (checking(a), 0),
                    (checking(b), (balance(values[4]) + total) as u64),
                ]);
                store.unlock(&ids);
                true
            }
            // Balance: read-only.
            1 => {
                let a = self.customer(rng);
                tally.conflicts += lock(store, &[a]);
                store.read(&[account(a), savings(a), checking(a)], &mut values[..3]);
                assert!(values[0].is_some(), "the customer exists");
                black_box(balance(values[1]) + balance(values[2]));
                store.unlock(&[a]);
                true
            }
            // DepositChecking.
            2 => {
                let a = self.customer(rng);
                tally.conflicts += lock(store, &[a]);
                store.read(&[account(a), checking(a)], &mut values[..2]);
                assert!(values[0].is_some(), "the customer exists");
                store.write(&[(checking(a), (balance(values[1]) + DEPOSIT) as u64)]);
                store.unlock(&[a]);
                tally.net += DEPOSIT;
                true
            }
            // SendPayment: refused if the payer's checking is short.
            3 => {
                let (a, b) = self.two_customers(rng);
                let ids = two_sorted(a, b);
                tally.conflicts += lock(store, &ids);
                let keys = [account(a), account(b), checking(a), checking(b)];
                store.read(&keys, &mut values[..4]);
                assert!(
                    values[0].is_some() && values[1].is_some(),
                    "customers exist"
                );
                let (from, to) = (balance(values[2]), balance(values[3]));
                let ok = from >= PAYMENT;
                if ok {
                    store.write(&[
                        (checking(a), (from - PAYMENT) as u64),
                        (checking(b), (to + PAYMENT) as u64),
                    ]);
                }
                store.unlock(&ids);
                ok
            }
            // TransactSavings: refused if savings would go negative.
            4 => {
                let a = self.customer(rng);
                tally.conflicts += lock(store, &[a]);
                store.read(&[account(a), savings(a)], &mut values[..2]);
                assert!(values[0].is_some(), "the customer exists");
                let left = balance(values[1]) - SAVINGS_WITHDRAWAL;
                let ok = left >= 0;
                if ok {
                    store.write(&[(savings(a), left as u64)]);
                    tally.net -= SAVINGS_WITHDRAWAL;
                }
                store.unlock(&[a]);
                ok
            }
            // WriteCheck: a penalty of one cent when savings and checking are short.
            _ => {
                let a = self.customer(rng);
                tally.conflicts += lock(store, &[a]);
                store.read(&[account(a), savings(a), checking(a)], &mut values[..3]);
                assert!(values[0].is_some(), "the customer exists");
                let (saving, check) = (balance(values[1]), balance(values[2]));
                let charge = if saving + check < CHECK {
                    CHECK + 1
                } else {
                    CHECK
                };
                store.write(&[(checking(a), (check - charge) as u64)]);
                store.unlock(&[a]);
                tally.net -= charge;
                true
            }
        };
        tally.count(kind, committed);
    }
}

/// Smallbank's invariants on `store` after transactions whose committed external flows sum
/// to `external` (module docs).
pub(crate) fn check_bank(
    store: &dyn Store,
    accounts: u64,
    initial: i64,
    external: i64,
) -> Result<(), String> {
    let (mut money, mut names, mut rows) = (0i64, 0u64, 0u64);
    let mut problems = Vec::new();
    store.each(&mut |key, value| {
        rows += 1;
        let id = key / 4;
        if id >= accounts {
            problems.push(format!("a row of no customer: key {key}"));
            return;
        }
        match key % 4 {
            0 if value == smallbank::name(id) => names += 1,
            0 => problems.push(format!("customer {id}'s name is {value:#x}")),
            1 => {
                let saving = value as i64;
                if saving < 0 {
                    problems.push(format!("customer {id}'s savings are negative: {saving}"));
                }
                money += saving;
            }
            2 => money += value as i64,
            _ => problems.push(format!("a row of no table: key {key}")),
        }
    });
    if names != accounts || rows != 3 * accounts {
        problems.push(format!(
            "{names} ACCOUNTS rows of {accounts}, {rows} rows of {}",
            3 * accounts
        ));
    }
    if money != initial + external {
        problems.push(format!(
            "the bank holds {money} cents; it started with {initial} and took in {external} net"
        ));
    }
    if store.locks_held() != 0 {
        problems.push(format!("{} locks still held", store.locks_held()));
    }
    match problems.first() {
        None => Ok(()),
        Some(first) => Err(format!(
            "Smallbank's invariants fail ({} problems), first: {first}",
            problems.len()
        )),
    }
}

// -------------------------------------------------------------------------------------------
// TATP
// -------------------------------------------------------------------------------------------

mod tatp {
    const SUBSCRIBER: u64 = 1 << 60;
    const SUB_NBR: u64 = 2 << 60;
    const ACCESS_INFO: u64 = 3 << 60;
    const SPECIAL_FACILITY: u64 = 4 << 60;
    const CALL_FORWARDING: u64 = 5 << 60;
    const TABLE: u64 = 0xF << 60;

    /// Word `w` (0..4) of subscriber `s`'s row: 0 the ten bits and ten hex digits, 1 and 2 the
    /// ten bytes, 3 the MSC and VLR locations.
    pub fn subscriber(s: u64, w: u64) -> u64 {
        SUBSCRIBER | s << 2 | w
    }
    /// The `sub_nbr` index: the 15-digit number (s's digits) to `s`.
    pub fn sub_nbr(number: u64) -> u64 {
        SUB_NBR | number
    }
    /// Types are 1..=4.
    pub fn access_info(s: u64, ai_type: u64) -> u64 {
        ACCESS_INFO | s << 2 | (ai_type - 1)
    }
    pub fn special_facility(s: u64, sf_type: u64) -> u64 {
        SPECIAL_FACILITY | s << 2 | (sf_type - 1)
    }
    /// Start times are 0, 8 and 16.
    pub fn call_forwarding(s: u64, sf_type: u64, start: u64) -> u64 {
        CALL_FORWARDING | s << 4 | (sf_type - 1) << 2 | (start / 8)
    }

    /// The table of a key and its parts.
    pub enum Row {
        Subscriber { s: u64, word: u64 },
        SubNbr { number: u64 },
        AccessInfo { s: u64 },
        SpecialFacility { s: u64, sf_type: u64 },
        CallForwarding { s: u64, sf_type: u64, start: u64 },
        Unknown,
    }

    pub fn row_of(key: u64) -> Row {
        let rest = key & !TABLE;
        match key & TABLE {
            SUBSCRIBER => Row::Subscriber {
                s: rest >> 2,
                word: rest & 3,
            },
            SUB_NBR => Row::SubNbr { number: rest },
            ACCESS_INFO => Row::AccessInfo { s: rest >> 2 },
            SPECIAL_FACILITY => Row::SpecialFacility {
                s: rest >> 2,
                sf_type: (rest & 3) + 1,
            },
            CALL_FORWARDING if rest & 3 < 3 => Row::CallForwarding {
                s: rest >> 4,
                sf_type: ((rest >> 2) & 3) + 1,
                start: (rest & 3) * 8,
            },
            _ => Row::Unknown,
        }
    }

    /// Five bits a letter (`A`-`Z`).
    pub fn letters(rng: &mut crate::keys::Rng, n: u32) -> u64 {
        (0..n).fold(0, |word, i| word | rng.below(26) << (5 * i))
    }
    pub fn letters_valid(word: u64, n: u32) -> bool {
        word >> (5 * n) == 0 && (0..n).all(|i| (word >> (5 * i)) & 31 < 26)
    }

    /// ACCESS_INFO: data1, data2 (0..=255), data3 (3 letters), data4 (5 letters).
    pub fn access_value(rng: &mut crate::keys::Rng) -> u64 {
        rng.below(256) | rng.below(256) << 8 | letters(rng, 3) << 16 | letters(rng, 5) << 31
    }
    pub fn access_valid(v: u64) -> bool {
        letters_valid((v >> 16) & ((1 << 15) - 1), 3) && letters_valid(v >> 31, 5)
    }

    /// SPECIAL_FACILITY: is_active (bit 0), error_cntrl, data_a (0..=255), data_b (5
    /// letters).
    pub fn facility_value(rng: &mut crate::keys::Rng) -> u64 {
        u64::from(rng.below(100) < 85)
            | rng.below(256) << 1
            | rng.below(256) << 9
            | letters(rng, 5) << 17
    }
    pub fn facility_active(v: u64) -> bool {
        v & 1 == 1
    }
    pub fn with_data_a(v: u64, data_a: u64) -> u64 {
        (v & !(0xFF << 9)) | data_a << 9
    }
    pub fn facility_valid(v: u64) -> bool {
        letters_valid(v >> 17, 5)
    }

    /// CALL_FORWARDING: end_time (start + 1..=8) and numberx (15 digits).
    pub const NUMBERS: u64 = 1_000_000_000_000_000;
    pub fn forwarding_value(end: u64, numberx: u64) -> u64 {
        end | numberx << 5
    }
    pub fn forwarding_end(v: u64) -> u64 {
        v & 31
    }
    pub fn forwarding_valid(v: u64, start: u64) -> bool {
        (start + 1..=start + 8).contains(&forwarding_end(v)) && v >> 5 < NUMBERS
    }

    /// Ten bits and ten hex digits in word 0: bit_1 is bit 0.
    pub const WORD0_BITS: u64 = 50;

    /// Transactions, with their share of the mix in percent (TATP's).
    pub const MIX: [(&str, u64); 7] = [
        ("GetSubscriberData", 35),
        ("GetNewDestination", 10),
        ("GetAccessData", 35),
        ("UpdateSubscriberData", 2),
        ("UpdateLocation", 14),
        ("InsertCallForwarding", 2),
        ("DeleteCallForwarding", 2),
    ];
}

/// `n` distinct values of `1..=4` in random order (1 <= n <= 4).
fn some_types(rng: &mut Rng, n: usize) -> [u64; 4] {
    let mut types = [1, 2, 3, 4];
    for i in 0..n {
        let j = i + rng.below((4 - i) as u64) as usize;
        types.swap(i, j);
    }
    types
}

/// The initial rows of TATP and how many CALL_FORWARDING rows they hold.
fn tatp_rows(subscribers: u64) -> (Vec<(u64, u64)>, u64) {
    let mut rng = Rng(0x7a7b);
    let mut rows = Vec::with_capacity(14 * subscribers as usize);
    let mut forwardings = 0;
    for s in 1..=subscribers {
        rows.push((
            tatp::subscriber(s, 0),
            rng.next() >> (64 - tatp::WORD0_BITS),
        ));
        rows.push((tatp::subscriber(s, 1), rng.next()));
        rows.push((tatp::subscriber(s, 2), rng.next() & 0xFFFF));
        rows.push((tatp::subscriber(s, 3), rng.next()));
        rows.push((tatp::sub_nbr(s), s));
        let n = 1 + rng.below(4) as usize;
        for &ai_type in &some_types(&mut rng, n)[..n] {
            rows.push((tatp::access_info(s, ai_type), tatp::access_value(&mut rng)));
        }
        let n = 1 + rng.below(4) as usize;
        for &sf_type in &some_types(&mut rng, n)[..n] {
            rows.push((
                tatp::special_facility(s, sf_type),
                tatp::facility_value(&mut rng),
            ));
            let mut starts = [0, 8, 16];
            let calls = rng.below(4) as usize;
            for i in 0..calls {
                let j = i + rng.below((3 - i) as u64) as usize;
                starts.swap(i, j);
            }
            for &start in &starts[..calls] {
                let end = start + 1 + rng.below(8);
                let value = tatp::forwarding_value(end, rng.below(tatp::NUMBERS));
                rows.push((tatp::call_forwarding(s, sf_type, start), value));
                forwardings += 1;
            }
        }
    }
    (rows, forwardings)
}

struct Telecom {
    subscribers: u64,
    /// TATP's non-uniform constant A for this population.
    a: u64,
}

impl Telecom {
    fn new(subscribers: u64) -> Self {
        let a = if subscribers <= 1_000_000 {
            65_535
        } else if subscribers <= 10_000_000 {
            1_048_575
        } else {
            2_097_151
        };
        Telecom { subscribers, a }
    }

    /// TATP's subscriber id: `(rand(0, A) | rand(1, P)) % P + 1`.
    fn subscriber(&self, rng: &mut Rng) -> u64 {
        ((rng.below(self.a + 1) | (1 + rng.below(self.subscribers))) % self.subscribers) + 1
    }

    /// A subscriber through its `sub_nbr` (the index is never written after loading).
    fn by_number(&self, store: &impl Store, rng: &mut Rng) -> u64 {
        let number = self.subscriber(rng);
        let mut found = [None];
        store.read(&[tatp::sub_nbr(number)], &mut found);
        found[0].expect("every sub_nbr is indexed")
    }

    fn transaction(&self, store: &impl Store, rng: &mut Rng, tally: &mut Tally) {
        use tatp::*;
        let mut draw = rng.below(100);
        let mut kind = 0;
        while draw >= MIX[kind].1 {
            draw -= MIX[kind].1;
            kind += 1;
        }
        let mut values = [None; 4];
        let succeeded = match kind {
            // GetSubscriberData: the whole row.
            0 => {
                let s = self.subscriber(rng);
                tally.conflicts += lock(store, &[s]);
                let keys = [0, 1, 2, 3].map(|w| subscriber(s, w));
                store.read(&keys, &mut values);
                store.unlock(&[s]);
                assert!(values.iter().all(Option::is_some), "subscriber {s}'s row");
                black_box(values);
                true
            }
            // GetNewDestination: an active facility's forwarding covering the interval.
            1 => {
                let s = self.subscriber(rng);
                let sf_type = 1 + rng.below(4);
                let start = rng.below(3) * 8;
                let end = 1 + rng.below(24);
                tally.conflicts += lock(store, &[s]);
                let keys = [
                    special_facility(s, sf_type),
                    call_forwarding(s, sf_type, 0),
                    call_forwarding(s, sf_type, 8),
                    call_forwarding(s, sf_type, 16),
                ];
                store.read(&keys, &mut values);
                store.unlock(&[s]);
                values[0].is_some_and(facility_active)
                    && [0, 8, 16].iter().zip(&values[1..]).any(|(&cf_start, v)| {
                        v.is_some_and(|v| cf_start <= start && end < forwarding_end(v))
                    })
            }
            // GetAccessData.
            2 => {
                let s = self.subscriber(rng);
                let ai_type = 1 + rng.below(4);
                tally.conflicts += lock(store, &[s]);
                store.read(&[access_info(s, ai_type)], &mut values[..1]);
                store.unlock(&[s]);
                black_box(values[0]).is_some()
            }
            // UpdateSubscriberData: bit_1 and a facility's data_a, or nothing if the
            // facility is not there.
            3 => {
                let s = self.subscriber(rng);
                let sf_type = 1 + rng.below(4);
                let (bit, data_a) = (rng.below(2), rng.below(256));
                tally.conflicts += lock(store, &[s]);
                store.read(
                    &[subscriber(s, 0), special_facility(s, sf_type)],
                    &mut values[..2],
                );
                let found = values[1].is_some();
                if let (Some(word), Some(facility)) = (values[0], values[1]) {
                    store.write(&[
                        (subscriber(s, 0), (word & !1) | bit),
                        (special_facility(s, sf_type), with_data_a(facility, data_a)),
                    ]);
                }
                store.unlock(&[s]);
                found
            }
            // UpdateLocation: the VLR location, by sub_nbr.
            4 => {
                let s = self.by_number(store, rng);
                let vlr = rng.next() >> 32;
                tally.conflicts += lock(store, &[s]);
                store.read(&[subscriber(s, 3)], &mut values[..1]);
                let word = values[0].expect("subscriber's locations");
                store.write(&[(subscriber(s, 3), (word & 0xFFFF_FFFF) | vlr << 32)]);
                store.unlock(&[s]);
                true
            }
            // InsertCallForwarding: refused without the facility (a foreign key) or when
            // the forwarding exists (the primary key).
            5 => {
                let s = self.by_number(store, rng);
                let sf_type = 1 + rng.below(4);
                let start = rng.below(3) * 8;
                let end = start + 1 + rng.below(8);
                let numberx = rng.below(NUMBERS);
                tally.conflicts += lock(store, &[s]);
                let keys = [1, 2, 3, 4].map(|t| special_facility(s, t));
                store.read(&keys, &mut values);
                let inserted = values[sf_type as usize - 1].is_some()
                    && store.insert_new(
                        call_forwarding(s, sf_type, start),
                        forwarding_value(end, numberx),
                    );
                store.unlock(&[s]);
                inserted
            }
            // DeleteCallForwarding.
            _ => {
                let s = self.by_number(store, rng);
                let sf_type = 1 + rng.below(4);
                let start = rng.below(3) * 8;
                tally.conflicts += lock(store, &[s]);
                let removed = store.remove(call_forwarding(s, sf_type, start));
                store.unlock(&[s]);
                removed
            }
        };
        if succeeded && kind == 5 {
            tally.net += 1;
        } else if succeeded && kind == 6 {
            tally.net -= 1;
        }
        tally.count(kind, succeeded);
    }
}

/// TATP's invariants on `store` (module docs), with `forwardings` CALL_FORWARDING rows
/// expected.
pub(crate) fn check_telecom(
    store: &dyn Store,
    subscribers: u64,
    forwardings: u64,
) -> Result<(), String> {
    let mut facilities = std::collections::HashSet::new();
    let mut calls = Vec::new();
    let (mut words, mut numbers, mut found_calls) = (0u64, 0u64, 0u64);
    let mut problems = Vec::new();
    let in_range = |s: u64| (1..=subscribers).contains(&s);
    store.each(&mut |key, value| match tatp::row_of(key) {
        tatp::Row::Subscriber { s, word } if in_range(s) => {
            words += 1;
            let bad = match word {
                0 => value >> tatp::WORD0_BITS != 0,
                2 => value >> 16 != 0,
                _ => false,
            };
            if bad {
                problems.push(format!("subscriber {s}'s word {word} is {value:#x}"));
            }
        }
        tatp::Row::SubNbr { number } if in_range(number) && value == number => numbers += 1,
        tatp::Row::AccessInfo { s } if in_range(s) && tatp::access_valid(value) => {}
        tatp::Row::SpecialFacility { s, sf_type } if in_range(s) && tatp::facility_valid(value) => {
            facilities.insert((s, sf_type));
        }
        tatp::Row::CallForwarding { s, sf_type, start }
            if in_range(s) && tatp::forwarding_valid(value, start) =>
        {
            found_calls += 1;
            calls.push((s, sf_type));
        }
        _ => problems.push(format!("a row out of its domain: {key:#x} -> {value:#x}")),
    });
    if words != 4 * subscribers || numbers != subscribers {
        problems.push(format!(
            "{words} SUBSCRIBER words of {} and {numbers} sub_nbr entries of {subscribers}",
            4 * subscribers
        ));
    }
    if let Some((s, t)) = calls.iter().find(|call| !facilities.contains(call)) {
        problems.push(format!(
            "subscriber {s} forwards calls of facility {t}, which it does not have"
        ));
    }
    if found_calls != forwardings {
        problems.push(format!(
            "{found_calls} CALL_FORWARDING rows; the start's plus the inserts minus the deletes make {forwardings}"
        ));
    }
    if store.locks_held() != 0 {
        problems.push(format!("{} locks still held", store.locks_held()));
    }
    match problems.first() {
        None => Ok(()),
        Some(first) => Err(format!(
            "TATP's invariants fail ({} problems), first: {first}",
            problems.len()
        )),
    }
}

// -------------------------------------------------------------------------------------------
// Runs
// -------------------------------------------------------------------------------------------

/// One timed run of `transaction` on `threads` threads for `duration`: each thread's tally.
fn timed<T: Default + Send>(
    workers: &Workers,
    threads: usize,
    duration: Duration,
    seed: u64,
    transaction: impl Fn(&mut Rng, &mut T) + Sync,
) -> (Duration, Vec<T>) {
    workers.run(threads, |i| {
        let mut rng = Rng(mix(seed ^ (i as u64 + 1)));
        let mut tally = T::default();
        let start = Instant::now();
        loop {
            for _ in 0..256 {
                transaction(&mut rng, &mut tally);
            }
            if start.elapsed() >= duration {
                return tally;
            }
        }
    })
}

fn make_store(engine: Engine, rows: usize, threads: usize) -> Box<dyn StoreOf> {
    match engine {
        Engine::Floe => Box::new(FloeStore::new(rows, threads)),
        Engine::Dashmap => Box::new(DashStore::new(rows)),
        Engine::Papaya => Box::new(PapayaStore::new(rows)),
    }
}

/// A store the runs can hand to the monomorphised transaction loops.
trait StoreOf: Store {
    fn as_store(&self) -> &dyn Store;
    fn run_bank(
        &self,
        bank: &Bank,
        w: &Workers,
        t: usize,
        d: Duration,
        seed: u64,
    ) -> (Duration, Vec<Tally>);
    fn run_telecom(
        &self,
        tel: &Telecom,
        w: &Workers,
        t: usize,
        d: Duration,
        seed: u64,
    ) -> (Duration, Vec<Tally>);
}

impl<S: Store> StoreOf for S {
    fn as_store(&self) -> &dyn Store {
        self
    }
    fn run_bank(
        &self,
        bank: &Bank,
        workers: &Workers,
        threads: usize,
        duration: Duration,
        seed: u64,
    ) -> (Duration, Vec<Tally>) {
        timed(workers, threads, duration, seed, |rng, tally| {
            bank.transaction(self, rng, tally)
        })
    }
    fn run_telecom(
        &self,
        telecom: &Telecom,
        workers: &Workers,
        threads: usize,
        duration: Duration,
        seed: u64,
    ) -> (Duration, Vec<Tally>) {
        timed(workers, threads, duration, seed, |rng, tally| {
            telecom.transaction(self, rng, tally)
        })
    }
}

/// One engine's runs of one benchmark.
struct Measured {
    engine: Engine,
    /// Transactions per second, one per repeat.
    rates: Vec<f64>,
    /// Every run's transactions.
    total: Tally,
    load_seconds: f64,
}

/// The table of one benchmark's runs: each engine's rate, floe's ratio to the best peer,
/// and the mix the first engine ran.
fn write_report(
    out: &mut String,
    title: &str,
    threads: usize,
    measured: &[Measured],
    mix_names: &[&str],
    dlht_per_thread: f64,
) {
    let _ = writeln!(out, "\n{title}");
    let best_peer = measured
        .iter()
        .filter(|m| m.engine != Engine::Floe)
        .map(|m| median(m.rates.clone()))
        .fold(0.0, f64::max);
    let _ = writeln!(
        out,
        "{:<9} {:>10} {:>8} {:>8} {:>12} {:>14} {:>9} {:>10} {:>8}",
        "engine",
        "M txn/s",
        "min",
        "max",
        "a thread",
        "x DLHT/thread",
        "x peer",
        "conflicts",
        "load s"
    );
    for m in measured {
        let rate = median(m.rates.clone());
        let lo = m.rates.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = m.rates.iter().copied().fold(0.0, f64::max);
        let versus = if m.engine == Engine::Floe && best_peer > 0.0 {
            format!("{:.2}x", rate / best_peer)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "{:<9} {:>10.3} {:>8.3} {:>8.3} {:>12.3} {:>14.2} {:>9} {:>10} {:>8.1}",
            m.engine.name(),
            rate / 1e6,
            lo / 1e6,
            hi / 1e6,
            rate / threads as f64 / 1e6,
            rate / threads as f64 / dlht_per_thread,
            versus,
            m.total.conflicts,
            m.load_seconds
        );
    }
    if let Some(m) = measured.first() {
        let total = m.total.transactions();
        let _ = write!(out, "mix run on {}:", m.engine.name());
        for (k, kind) in mix_names.iter().enumerate() {
            let all = m.total.done[k] + m.total.not_done[k];
            let _ = write!(
                out,
                " {kind} {:.1}% ({:.1}% done)",
                100.0 * all as f64 / total.max(1) as f64,
                100.0 * m.total.done[k] as f64 / all.max(1) as f64
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "x DLHT/thread: against DLHT's {:.2}M a thread (64 threads, two-socket Xeon Gold 6254; a different machine)",
        dlht_per_thread / 1e6
    );
}

pub fn main(args: OltpArgs) -> Result<(), String> {
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let duration = Duration::from_secs_f64(args.seconds);
    let workers = Workers::new();
    println!("{}", machine());
    let mut out = String::new();
    for &benchmark in &args.benchmarks {
        // The rows, and the money in them (Smallbank) or their CALL_FORWARDING rows (TATP).
        let (rows, money, calls, mix_names, dlht_per_thread): (_, i64, u64, Vec<&str>, f64) =
            match benchmark {
                Benchmark::Smallbank => {
                    let (rows, money) = smallbank_rows(args.accounts);
                    let mix = smallbank::MIX.iter().map(|m| m.0).collect();
                    (rows, money, 0, mix, DLHT_SMALLBANK_PER_THREAD)
                }
                Benchmark::Tatp => {
                    let (rows, calls) = tatp_rows(args.subscribers);
                    let mix = tatp::MIX.iter().map(|m| m.0).collect();
                    (rows, 0, calls, mix, DLHT_TATP_PER_THREAD)
                }
            };
        let name = match benchmark {
            Benchmark::Smallbank => format!("Smallbank, {} customers", args.accounts),
            Benchmark::Tatp => format!("TATP, {} subscribers", args.subscribers),
        };
        println!("{name}: loading {} rows into each engine", rows.len());
        let mut stores = Vec::new();
        let mut measured = Vec::new();
        for &engine in &args.engines {
            let store = make_store(engine, rows.len(), threads);
            let start = Instant::now();
            load_parallel(store.as_store(), &rows, threads);
            measured.push(Measured {
                engine,
                rates: Vec::new(),
                total: Tally::default(),
                load_seconds: start.elapsed().as_secs_f64(),
            });
            stores.push(store);
        }
        drop(rows);
        let bank = Bank {
            accounts: args.accounts,
            hotspot: args.hotspot,
        };
        let telecom = Telecom::new(args.subscribers);
        for round in 0..args.repeat {
            for (e, store) in stores.iter().enumerate() {
                let seed = (round * 1000 + e) as u64;
                let m = &mut measured[e];
                let (elapsed, tallies) = match benchmark {
                    Benchmark::Smallbank => {
                        store.run_bank(&bank, &workers, threads, duration, seed)
                    }
                    Benchmark::Tatp => {
                        store.run_telecom(&telecom, &workers, threads, duration, seed)
                    }
                };
                let mut sum = Tally::default();
                tallies.iter().for_each(|t| sum.add(t));
                m.total.add(&sum);
                let rate = sum.transactions() as f64 / elapsed.as_secs_f64();
                println!(
                    "  round {} {:<8} {:>8.3} M transactions/s",
                    round + 1,
                    m.engine.name(),
                    rate / 1e6
                );
                m.rates.push(rate);
            }
        }
        for (e, store) in stores.iter().enumerate() {
            let checked = match benchmark {
                Benchmark::Smallbank => check_bank(
                    store.as_store(),
                    args.accounts,
                    money,
                    measured[e].total.net,
                ),
                Benchmark::Tatp => check_telecom(
                    store.as_store(),
                    args.subscribers,
                    u64::try_from(calls as i64 + measured[e].total.net)
                        .map_err(|_| "fewer than no rows")?,
                ),
            };
            checked.map_err(|why| format!("{}: {why}", measured[e].engine.name()))?;
        }
        write_report(
            &mut out,
            &format!(
                "{name}, {threads} threads, {} s a run, median of {} (invariants hold on every engine)",
                args.seconds, args.repeat
            ),
            threads,
            &measured,
            &mix_names,
            dlht_per_thread,
        );
    }
    print!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stores() -> Vec<Box<dyn StoreOf>> {
        [Engine::Floe, Engine::Dashmap, Engine::Papaya]
            .into_iter()
            .map(|e| make_store(e, 1 << 12, 2))
            .collect()
    }

    #[test]
    fn smallbank_keeps_the_money_on_every_engine_and_the_check_sees_a_lost_cent() {
        let accounts = 64;
        let (rows, money) = smallbank_rows(accounts);
        let workers = Workers::new();
        // A hotspot of 4 customers: the two threads meet on their locks.
        let bank = Bank {
            accounts,
            hotspot: 4,
        };
        for store in stores() {
            load_parallel(store.as_store(), &rows, 2);
            check_bank(store.as_store(), accounts, money, 0).expect("as loaded");
            let (_, tallies) = store.run_bank(&bank, &workers, 2, Duration::from_millis(50), 7);
            let mut sum = Tally::default();
            tallies.iter().for_each(|t| sum.add(t));
            assert!(sum.done[..6].iter().all(|&c| c > 0), "{sum:?}");
            check_bank(store.as_store(), accounts, money, sum.net).expect("kept");
            // A cent gone from one account is seen.
            let mut values = [None];
            store.read(&[smallbank::checking(3)], &mut values);
            store.write(&[(smallbank::checking(3), values[0].unwrap().wrapping_sub(1))]);
            let error = check_bank(store.as_store(), accounts, money, sum.net)
                .expect_err("a cent is missing");
            assert!(error.contains("cents"), "{error}");
        }
    }

    #[test]
    fn tatp_keeps_its_references_on_every_engine_and_the_check_sees_an_orphan() {
        let subscribers = 200;
        let (rows, calls) = tatp_rows(subscribers);
        let workers = Workers::new();
        let telecom = Telecom::new(subscribers);
        for store in stores() {
            load_parallel(store.as_store(), &rows, 2);
            check_telecom(store.as_store(), subscribers, calls).expect("as loaded");
            let (_, tallies) =
                store.run_telecom(&telecom, &workers, 2, Duration::from_millis(50), 9);
            let mut sum = Tally::default();
            tallies.iter().for_each(|t| sum.add(t));
            assert!(sum.done.iter().all(|&s| s > 0), "{sum:?}");
            assert_eq!(sum.net, sum.done[5] as i64 - sum.done[6] as i64);
            let now = (calls as i64 + sum.net) as u64;
            check_telecom(store.as_store(), subscribers, now).expect("kept");
            // A forwarding whose facility is gone is seen.
            let (s, t) = (1..=subscribers)
                .flat_map(|s| (1..=4).map(move |t| (s, t)))
                .find(|&(s, t)| {
                    let mut v = [None];
                    store.read(&[tatp::special_facility(s, t)], &mut v);
                    v[0].is_some()
                })
                .expect("some facility");
            for start in [0, 8, 16] {
                store.remove(tatp::call_forwarding(s, t, start));
            }
            let removed_calls = {
                let mut n = 0;
                store.each(&mut |key, _| {
                    if matches!(tatp::row_of(key), tatp::Row::CallForwarding { .. }) {
                        n += 1;
                    }
                });
                n
            };
            assert!(store.remove(tatp::special_facility(s, t)));
            assert!(store.insert_new(tatp::call_forwarding(s, t, 8), tatp::forwarding_value(9, 1)));
            let error = check_telecom(store.as_store(), subscribers, removed_calls + 1)
                .expect_err("an orphan forwarding");
            assert!(error.contains("does not have"), "{error}");
        }
    }

    #[test]
    fn the_mixes_add_up_to_a_hundred_and_the_subscriber_rule_stays_in_range() {
        assert_eq!(smallbank::MIX.iter().map(|m| m.1).sum::<u64>(), 100);
        assert_eq!(tatp::MIX.iter().map(|m| m.1).sum::<u64>(), 100);
        let telecom = Telecom::new(1000);
        let mut rng = Rng(1);
        for _ in 0..10_000 {
            assert!((1..=1000).contains(&telecom.subscriber(&mut rng)));
        }
    }
}
