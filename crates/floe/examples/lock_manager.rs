//! A database lock manager on floe, after DLHT §5.3.3: a lock is a key in a `FlatSet`
//! (insert = lock, remove = unlock), a transaction takes all its locks in one order-preserving
//! batch (sorted keys, stopping at the first lock someone else holds, so two transactions never
//! wait on each other in a cycle), and a transaction that creates a row claims the row's key
//! with a *shadow insert*: the key is taken (a concurrent creator of the same key is refused)
//! but invisible until the transaction commits, and gone without a trace if it aborts.
//!
//! The workload is a bank: transfers between random accounts (four locks each) and account
//! openings (a shadow insert of the new account, funded from a locked existing one; one in
//! four is aborted by the "client"). At the end it checks that no money was made or lost,
//! that exactly the committed openings exist, and that every lock was released.
//!
//! ```sh
//! cargo run --release -p floe --example lock_manager -- --threads 4 --transactions 200000
//! ```

use std::{
    process::ExitCode,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use floe::{FlatMap, FlatSet, Request, Response};

/// Money each initial account starts with, and what an opening moves into the new account.
const INITIAL_BALANCE: u64 = 1_000;
const OPENING_DEPOSIT: u64 = 100;
/// New accounts get ids from a small shared range, so openings collide and the shadow insert
/// has competitors to refuse.
const NEW_ACCOUNT_BASE: u64 = 1 << 40;
const NEW_ACCOUNT_IDS: u64 = 1 << 15;
/// Locks a transfer takes.
const LOCKS_PER_TRANSFER: usize = 4;

struct Options {
    threads: usize,
    transactions: u64,
    accounts: u64,
}

fn usage() -> &'static str {
    "usage: lock_manager [--threads N (default 4)] [--transactions N per thread (default 200000)] [--accounts N (default 65536, at least 8)]"
}

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        threads: 4,
        transactions: 200_000,
        accounts: 1 << 16,
    };
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number: u64 = value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a number"))?;
        match flag.as_str() {
            "--threads" if (1..=1024).contains(&number) => options.threads = number as usize,
            "--transactions" => options.transactions = number,
            "--accounts" if (8..=1 << 32).contains(&number) => options.accounts = number,
            "--threads" | "--accounts" => return Err(format!("{flag} {number} is out of range")),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

/// The locks: one key per locked record.
struct LockManager {
    locks: FlatSet<u64>,
}

impl LockManager {
    /// Lock every key of `keys` (sorted, distinct) in order, in one batch that stops at the
    /// first key someone else holds; then release the ones taken and answer `false`.
    fn try_lock_all(&self, keys: &[u64], responses: &mut Vec<Response<()>>) -> bool {
        let requests: Vec<Request<u64, ()>> =
            keys.iter().map(|&k| Request::InsertNew(k, ())).collect();
        responses.clear();
        let ran = self
            .locks
            .as_map()
            .batch()
            .stop_on_failure(true)
            .run(&requests, responses);
        if ran == keys.len() && !responses[ran - 1].is_failure() {
            return true;
        }
        // `ran - 1` locks were taken before the refused one.
        self.unlock_all(&keys[..ran - 1]);
        false
    }

    /// Release `keys`, in one batch.
    fn unlock_all(&self, keys: &[u64]) {
        let requests: Vec<Request<u64, ()>> = keys.iter().map(|&k| Request::Remove(k)).collect();
        self.locks
            .as_map()
            .batch()
            .run_each(&requests, |_, released| {
                assert!(!released.is_failure(), "released a lock nobody held");
            });
    }
}

/// What the threads counted.
#[derive(Default)]
struct Tally {
    transfers: AtomicU64,
    openings: AtomicU64,
    aborted_openings: AtomicU64,
    refused_openings: AtomicU64,
    lock_conflicts: AtomicU64,
}

/// SplitMix64: a small, fast, seedable generator (the example has no dependencies).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

struct Bank<'a> {
    accounts: &'a FlatMap<u64, u64>,
    locks: &'a LockManager,
    tally: &'a Tally,
    initial_accounts: u64,
}

impl Bank<'_> {
    /// Move money between `LOCKS_PER_TRANSFER` distinct random accounts under their locks:
    /// each of the first ones pays one unit (if it can) to the last.
    fn transfer(&self, rng: &mut Rng, responses: &mut Vec<Response<()>>) {
        let mut keys = [0u64; LOCKS_PER_TRANSFER];
        loop {
            for i in 0..keys.len() {
                keys[i] = loop {
                    let candidate = rng.below(self.initial_accounts);
                    if !keys[..i].contains(&candidate) {
                        break candidate;
                    }
                };
            }
            keys.sort_unstable();
            if self.locks.try_lock_all(&keys, responses) {
                break;
            }
            self.tally.lock_conflicts.fetch_add(1, Ordering::Relaxed);
            std::hint::spin_loop();
        }
        let payee = keys[keys.len() - 1];
        let mut received = 0;
        for &payer in &keys[..keys.len() - 1] {
            let balance = self.accounts.get(&payer).expect("initial accounts exist");
            if balance > 0 {
                // Under the lock, nobody else writes this account: a plain put suffices.
                self.accounts.put(payer, balance - 1);
                received += 1;
            }
        }
        let balance = self.accounts.get(&payee).expect("initial accounts exist");
        self.accounts.put(payee, balance + received);
        self.locks.unlock_all(&keys);
        self.tally.transfers.fetch_add(1, Ordering::Relaxed);
    }

    /// Open an account with a deposit from a locked existing one: the new account's key is
    /// claimed by a shadow insert (refused if another opening holds or made it), then the
    /// opening commits (debit, then make the account visible) or, one time in four, aborts.
    fn open_account(&self, rng: &mut Rng, responses: &mut Vec<Response<()>>) {
        let funder = rng.below(self.initial_accounts);
        if !self.locks.try_lock_all(&[funder], responses) {
            self.tally.lock_conflicts.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let balance = self.accounts.get(&funder).expect("initial accounts exist");
        let new_id = NEW_ACCOUNT_BASE + rng.below(NEW_ACCOUNT_IDS);
        if balance < OPENING_DEPOSIT {
            self.locks.unlock_all(&[funder]);
            return;
        }
        match self.accounts.insert_shadow(new_id, OPENING_DEPOSIT) {
            Err(_taken) => {
                self.tally.refused_openings.fetch_add(1, Ordering::Relaxed);
            }
            Ok(opening) if rng.below(4) == 0 => {
                opening.abort();
                self.tally.aborted_openings.fetch_add(1, Ordering::Relaxed);
            }
            Ok(opening) => {
                self.accounts.put(funder, balance - OPENING_DEPOSIT);
                opening.commit();
                self.tally.openings.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.locks.unlock_all(&[funder]);
    }
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(why) => {
            eprintln!("lock_manager: {why}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    let accounts = FlatMap::<u64, u64>::with_capacity(options.accounts as usize);
    for id in 0..options.accounts {
        accounts.insert(id, INITIAL_BALANCE);
    }
    let locks = LockManager {
        locks: FlatSet::new(),
    };
    let tally = Tally::default();
    let bank = Bank {
        accounts: &accounts,
        locks: &locks,
        tally: &tally,
        initial_accounts: options.accounts,
    };
    let started = Instant::now();
    std::thread::scope(|s| {
        for thread in 0..options.threads {
            let bank = &bank;
            s.spawn(move || {
                let mut rng = Rng(thread as u64 + 1);
                let mut responses = Vec::new();
                for _ in 0..options.transactions {
                    if rng.below(10) == 0 {
                        bank.open_account(&mut rng, &mut responses);
                    } else {
                        bank.transfer(&mut rng, &mut responses);
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed().as_secs_f64();

    let total: u64 = accounts.values().sum();
    let opened = tally.openings.load(Ordering::Relaxed);
    let expected_total = options.accounts * INITIAL_BALANCE;
    let transactions = options.threads as u64 * options.transactions;
    println!(
        "{transactions} transactions on {} threads in {elapsed:.2} s: {:.0} per second",
        options.threads,
        transactions as f64 / elapsed
    );
    println!(
        "transfers {}, accounts opened {opened}, openings aborted {}, refused (id taken) {}, lock conflicts {}",
        tally.transfers.load(Ordering::Relaxed),
        tally.aborted_openings.load(Ordering::Relaxed),
        tally.refused_openings.load(Ordering::Relaxed),
        tally.lock_conflicts.load(Ordering::Relaxed),
    );
    let mut failures = Vec::new();
    if total != expected_total {
        failures.push(format!("money: {total}, expected {expected_total}"));
    }
    if accounts.len() as u64 != options.accounts + opened {
        failures.push(format!(
            "accounts: {}, expected {} + {opened} opened",
            accounts.len(),
            options.accounts
        ));
    }
    if !locks.locks.is_empty() {
        failures.push(format!("{} locks still held", locks.locks.len()));
    }
    if failures.is_empty() {
        println!("checked: no money made or lost, exactly the committed accounts exist, every lock released");
        ExitCode::SUCCESS
    } else {
        eprintln!("lock_manager: FAILED: {}", failures.join("; "));
        ExitCode::FAILURE
    }
}
