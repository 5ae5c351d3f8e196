//! Warm restarts (`-e DIR`): items, flags, CAS uniques and expiry times come back after a
//! clean stop and after SIGKILL at a random instant (every acknowledged write kept, the one in
//! flight whole or absent, compactions included; a key that writers race on comes back as some
//! linearization of its acknowledged history leaves it); foreign, damaged, locked and
//! unwritable directories are refused with exit code 2 and left as they were; a disk that
//! fills up turns persistence off (and empties the directory) rather than let a restart be
//! stale.

mod common;

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, ChildStderr, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use common::{libc_kill, server, start, start_logged, Reaper};

/// A fresh directory under the system's temporary one.
fn scratch_dir(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "floe-server-persist-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// A blocking text-protocol client.
struct Client {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    /// Send `request`, read one reply line.
    fn line(&mut self, request: &[u8]) -> std::io::Result<String> {
        self.writer.write_all(request)?;
        self.read_line()
    }

    fn read_line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line)
    }

    /// `gets key`: the value, flags and CAS unique, if present.
    fn gets(&mut self, key: &str) -> std::io::Result<Option<(Vec<u8>, u32, u64)>> {
        let header = self.line(format!("gets {key}\r\n").as_bytes())?;
        if header == "END\r\n" {
            return Ok(None);
        }
        let (fields, data) = self.value(&header)?;
        assert_eq!(self.read_line()?, "END\r\n");
        Ok(Some((
            data,
            fields[2].parse().unwrap(),
            fields[4].parse().unwrap(),
        )))
    }

    /// `get` of many keys (50 to a request): the values of those present.
    fn values(&mut self, keys: &[String]) -> std::io::Result<HashMap<String, Vec<u8>>> {
        let mut found = HashMap::new();
        for chunk in keys.chunks(50) {
            let mut header = self.line(format!("get {}\r\n", chunk.join(" ")).as_bytes())?;
            while header != "END\r\n" {
                let (fields, data) = self.value(&header)?;
                found.insert(fields[1].to_string(), data);
                header = self.read_line()?;
            }
        }
        Ok(found)
    }

    /// The fields of `header`, a `VALUE key flags bytes [cas]` line, and the data after it.
    fn value<'h>(&mut self, header: &'h str) -> std::io::Result<(Vec<&'h str>, Vec<u8>)> {
        let fields: Vec<&str> = header.split_whitespace().collect();
        assert_eq!(fields[0], "VALUE", "{header:?}");
        let len: usize = fields[3].parse().unwrap();
        let mut data = vec![0; len + 2];
        self.reader.read_exact(&mut data)?;
        data.truncate(len);
        Ok((fields, data))
    }
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: signalling our own child, which has not been waited for.
    assert_eq!(unsafe { libc_kill(child.id() as i32, signal) }, 0);
}

/// Stop the server with SIGTERM and return its log; it must exit 0.
fn stop(mut child: Child, mut log: BufReader<ChildStderr>) -> String {
    signal(&child, 15);
    let status = child.wait().unwrap();
    let mut rest = String::new();
    log.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{status}: {rest}");
    rest
}

fn dir_arg(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

/// A `stats` value.
fn stat(port: u16, name: &str) -> Option<String> {
    let mut client = Client::connect(port);
    client.writer.write_all(b"stats\r\n").unwrap();
    let mut value = None;
    loop {
        let line = client.read_line().unwrap();
        if line == "END\r\n" {
            return value;
        }
        if let Some(rest) = line.strip_prefix(&format!("STAT {name} ")) {
            value = Some(rest.trim().to_string());
        }
    }
}

/// Wait until the server has restored its items (it serves meanwhile: reads miss what is not
/// restored yet, writes wait).
fn wait_restored(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while stat(port, "persist_restoring").as_deref() != Some("0") {
        assert!(
            std::time::Instant::now() < deadline,
            "still restoring after 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The items the server holds (`stats`' `curr_items`), once it has restored them.
fn restored_items(port: u16) -> usize {
    wait_restored(port);
    let mut client = Client::connect(port);
    client.writer.write_all(b"stats\r\n").unwrap();
    loop {
        let line = client.read_line().unwrap();
        if let Some(n) = line.strip_prefix("STAT curr_items ") {
            return n.trim().parse().unwrap();
        }
        assert_ne!(line, "END\r\n", "no curr_items in stats");
    }
}

#[test]
fn a_restart_brings_back_items_flags_cas_and_expiry() {
    let dir = scratch_dir("restart");
    let (child, port, log) = start(&["-t", "2", "-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    let mut client = Client::connect(port);
    for request in [
        &b"set plain 5 0 5\r\nhello\r\n"[..],
        b"set lasting 6 3600 4\r\nlong\r\n",
        b"set brief 7 1 5\r\nshort\r\n",
        b"set gone 0 0 1\r\nx\r\n",
        b"set counter 0 0 2\r\n41\r\n",
        b"set grows 9 0 3\r\nabc\r\n",
        b"set touched 0 0 1\r\nt\r\n",
    ] {
        assert_eq!(client.line(request).unwrap(), "STORED\r\n");
    }
    assert_eq!(client.line(b"delete gone\r\n").unwrap(), "DELETED\r\n");
    assert_eq!(client.line(b"incr counter 1\r\n").unwrap(), "42\r\n");
    assert_eq!(
        client.line(b"append grows 0 0 3\r\ndef\r\n").unwrap(),
        "STORED\r\n"
    );
    assert_eq!(
        client.line(b"touch touched 3600\r\n").unwrap(),
        "TOUCHED\r\n"
    );
    let before: HashMap<&str, _> = ["plain", "lasting", "counter", "grows", "touched"]
        .into_iter()
        .map(|key| (key, client.gets(key).unwrap().unwrap()))
        .collect();
    assert!(client.gets("brief").unwrap().is_some());
    let log = stop(child, log);
    assert!(log.contains("snapshot of"), "{log}");

    // `brief` expires while the server is down: its expiry is a Unix time on disk.
    std::thread::sleep(Duration::from_millis(2100));
    let (child, port, log) = start(&["-t", "3", "-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    let mut client = Client::connect(port);
    for (key, item) in &before {
        assert_eq!(client.gets(key).unwrap().as_ref(), Some(item), "{key}");
    }
    assert_eq!(client.gets("brief").unwrap(), None);
    assert_eq!(client.gets("gone").unwrap(), None);
    // The expiry came back: about an hour left.
    let meta = client.line(b"mg lasting t\r\n").unwrap();
    let ttl: i64 = meta.trim().strip_prefix("HD t").unwrap().parse().unwrap();
    assert!((3500..=3600).contains(&ttl), "{meta:?}");
    // New CAS uniques are larger than every restored one (`ms ... I` compares them).
    assert_eq!(
        client.line(b"set fresh 0 0 1\r\nf\r\n").unwrap(),
        "STORED\r\n"
    );
    let fresh = client.gets("fresh").unwrap().unwrap().2;
    assert!(before.values().all(|item| item.2 < fresh));
    // A flush before the next restart is kept too; what is stored after it stays.
    assert_eq!(client.line(b"flush_all\r\n").unwrap(), "OK\r\n");
    assert_eq!(
        client.line(b"set after 3 0 1\r\na\r\n").unwrap(),
        "STORED\r\n"
    );
    let after = client.gets("after").unwrap();
    // Killed this time: the journals, not a snapshot, carry the flush and the store.
    signal(&child, 9);
    let mut child = child;
    child.wait().unwrap();
    drop(log);
    let (child, port, log) = start(&["-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    let mut client = Client::connect(port);
    for key in before.keys() {
        assert_eq!(client.gets(key).unwrap(), None, "{key} survived a flush");
    }
    assert_eq!(client.gets("after").unwrap(), after);
    stop(child, log);
    fs::remove_dir_all(&dir).unwrap();
}

/// A small xorshift generator (the harness needs speed and a printed seed, not quality).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A number from the environment, if set.
fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|n| n.parse().ok())
}

/// The kill tests' seed: `FLOE_SERVER_KILL_SEED`, or the clock's; printed, to replay a failure.
fn kill_seed() -> u64 {
    let seed = env_number("FLOE_SERVER_KILL_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    eprintln!("FLOE_SERVER_KILL_SEED={seed}");
    seed
}

/// Each client thread's keys, their acknowledged values, and the write in flight when the
/// server died (the key and the value it would leave).
type Model = HashMap<String, Option<Vec<u8>>>;
type InFlight = Option<(String, Option<Vec<u8>>)>;

/// Random writes on keys of its own (`c<id>-<n>`) until the connection fails.
fn writer(port: u16, id: usize, seed: u64) -> (Model, InFlight) {
    let mut rng = Rng(seed | 1);
    let mut client = Client::connect(port);
    let mut model: Model = HashMap::new();
    let mut serial = 0u64;
    loop {
        let key = format!("c{id}-{}", rng.below(48));
        let present = model.get(&key).cloned().flatten();
        serial += 1;
        // Values of up to 3 KiB, so the journals pass the compaction threshold often.
        let (request, expect_new) = match rng.below(10) {
            0..=4 => {
                let mut value = format!("{id}:{serial}:").into_bytes();
                value.resize(value.len() + rng.below(3000) as usize, b'.');
                let mut request = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
                request.extend_from_slice(&value);
                request.extend_from_slice(b"\r\n");
                (request, Some(value))
            }
            5..=6 => (format!("delete {key}\r\n").into_bytes(), None),
            7..=8 => {
                let suffix = format!("+{serial}");
                let request =
                    format!("append {key} 0 0 {}\r\n{suffix}\r\n", suffix.len()).into_bytes();
                let new = present
                    .clone()
                    .map(|value| [value, suffix.into_bytes()].concat());
                (request, new)
            }
            _ => {
                let request = format!("set {key} 0 0 1\r\n7\r\n").into_bytes();
                (request, Some(b"7".to_vec()))
            }
        };
        let in_flight = Some((key.clone(), expect_new.clone()));
        let Ok(reply) = client.line(&request) else {
            return (model, in_flight);
        };
        match reply.as_str() {
            "STORED\r\n" | "DELETED\r\n" => {
                model.insert(key, expect_new);
            }
            "NOT_FOUND\r\n" | "NOT_STORED\r\n" => assert!(present.is_none(), "{key}: {reply}"),
            _ => panic!("{key}: unexpected reply {reply:?}"),
        }
    }
}

/// SIGKILL the server at a random instant while two clients write (compactions every few
/// hundred milliseconds), restart it on the same directory, and check every key against
/// what was acknowledged: the last acknowledged value, or the in-flight write's.
#[test]
fn sigkill_at_any_instant_loses_no_acknowledged_write() {
    let rounds = env_number("FLOE_SERVER_KILL_ROUNDS").unwrap_or(6);
    let seed = kill_seed();
    let mut rng = Rng(seed | 1);
    let dir = scratch_dir("kill");
    let mut expected: Model = HashMap::new();
    let mut compactions = 0;
    for round in 0..rounds {
        let (mut child, port, mut log) =
            start(&["-t", "2", "-e", dir_arg(&dir), "--persist-compact", "1"]);
        let _reaper = Reaper(child.id());
        wait_restored(port);
        // What survived the last kill is there.
        let mut client = Client::connect(port);
        for (key, value) in &expected {
            let found = client.gets(key).unwrap().map(|item| item.0);
            assert_eq!(&found, value, "round {round} key {key} (seed {seed})");
        }
        drop(client);
        let seeds = [rng.next(), rng.next()];
        let writers: Vec<_> = seeds
            .into_iter()
            .enumerate()
            .map(|(id, seed)| std::thread::spawn(move || writer(port, id, seed)))
            .collect();
        std::thread::sleep(Duration::from_millis(200 + rng.below(800)));
        signal(&child, 9);
        child.wait().unwrap();
        let mut rest = String::new();
        log.read_to_string(&mut rest).unwrap();
        compactions += rest.matches("snapshot of").count();
        let (child, port, log) = start(&["-t", "2", "-e", dir_arg(&dir)]);
        let _reaper = Reaper(child.id());
        wait_restored(port);
        let mut client = Client::connect(port);
        for thread in writers {
            let (model, in_flight) = thread.join().unwrap();
            for (key, value) in &model {
                expected.insert(key.clone(), value.clone());
            }
            // The write in flight: applied whole, or not at all.
            if let Some((key, new)) = in_flight {
                let found = client.gets(&key).unwrap().map(|item| item.0);
                let acknowledged = expected.get(&key).cloned().flatten();
                assert!(
                    found == acknowledged || found == new,
                    "round {round} key {key}: {:?} is neither the acknowledged {:?} nor the in-flight {:?} (seed {seed})",
                    found.as_deref().map(String::from_utf8_lossy),
                    acknowledged.as_deref().map(String::from_utf8_lossy),
                    new.as_deref().map(String::from_utf8_lossy),
                );
                expected.insert(key, found);
            }
        }
        for (key, value) in &expected {
            let found = client.gets(key).unwrap().map(|item| item.0);
            assert_eq!(&found, value, "round {round} key {key} (seed {seed})");
        }
        drop(client);
        stop(child, log);
    }
    eprintln!("{rounds} kills, {compactions} snapshots written by the killed servers");
    fs::remove_dir_all(&dir).unwrap();
}

/// The shared-key kill test's writers, how many keys they share at a time, and how long they
/// stay on one group of keys before all move to the next. A key's restored state can show two
/// writes numbered against the map's order only if they were its last: moving on every
/// millisecond keeps the contention on a few keys and ends thousands of keys a round on a
/// race.
const SHARED_WRITERS: usize = 4;
const SHARED_KEYS: usize = 8;
const SHARED_GROUP: Duration = Duration::from_millis(1);
/// A set stores `(writer + 1) * SET_WRITER + serial * SET_SERIAL`; the digits below
/// `SET_SERIAL` count the incrs applied to it since, so a value names the set it started from
/// and its place after it, and an incr's reply says which value it incremented.
const SET_WRITER: u64 = 1_000_000_000_000_000;
const SET_SERIAL: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SharedOp {
    /// `set` of this value.
    Set(u64),
    Delete,
    /// `incr` by 1.
    Incr,
    /// `get` (of a group's keys, by each writer as it leaves the group).
    Get,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SharedReply {
    /// `STORED` or `DELETED`.
    Done,
    /// An incr's new value, or the value a get found.
    Value(u64),
    /// `NOT_FOUND`, or a get's miss.
    NotFound,
}

/// One request of the shared-key kill test, as its writer saw it.
#[derive(Clone, Copy, Debug)]
struct Shared {
    writer: usize,
    serial: u64,
    /// The key's number in its round (`group * SHARED_KEYS + i`).
    key: usize,
    op: SharedOp,
    /// Taken before the request was sent.
    sent: Instant,
    /// The reply and when it was read; `None` for the write in flight when the server died.
    reply: Option<(SharedReply, Instant)>,
}

impl Shared {
    /// Acknowledged, and it left or found a value (a set, an incr or a get that found one).
    fn shows_value(&self) -> bool {
        matches!(
            (self.op, self.reply),
            (SharedOp::Set(_), Some(_)) | (_, Some((SharedReply::Value(_), _)))
        )
    }

    /// An acknowledged incr or get that replied a value made from the set of `base`.
    fn saw(&self, base: u64) -> bool {
        matches!(self.reply, Some((SharedReply::Value(v), _)) if v - v % SET_SERIAL == base)
    }

    /// The request and its times in microseconds after `start`, for a failure's message.
    fn describe(&self, start: Instant) -> String {
        let reply = match self.reply {
            Some((reply, at)) => format!("{reply:?} at {}", (at - start).as_micros()),
            None => "in flight".to_string(),
        };
        format!(
            "writer {} #{} {:?} sent at {}: {reply}",
            self.writer,
            self.serial,
            self.op,
            (self.sent - start).as_micros()
        )
    }
}

fn shared_key(round: u64, key: usize) -> String {
    format!("shared{round}-{key}")
}

/// A stored counter's value.
fn counter(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data).ok()?.trim_end().parse().ok()
}

/// A writer of the shared-key kill test: sets, deletes and incrs on the keys of the current
/// group (`SHARED_GROUP`s after `start`), and a `get` of a group's keys as it leaves it (after
/// its own last write there was acknowledged), until the connection fails; every request and
/// its times.
fn shared_writer(port: u16, id: usize, seed: u64, round: u64, start: Instant) -> Vec<Shared> {
    let mut rng = Rng(seed | 1);
    let mut client = Client::connect(port);
    let mut ops = Vec::new();
    let mut serial = 0;
    let mut on = None;
    loop {
        serial += 1;
        let group = (start.elapsed().as_nanos() / SHARED_GROUP.as_nanos()) as usize;
        if let Some(left) = on.filter(|&left| left != group) {
            let keys = left * SHARED_KEYS..(left + 1) * SHARED_KEYS;
            let names: Vec<_> = keys.clone().map(|key| shared_key(round, key)).collect();
            let sent = Instant::now();
            let Ok(found) = client.values(&names) else {
                return ops;
            };
            let read = Instant::now();
            for (key, name) in keys.zip(&names) {
                let reply = match found.get(name) {
                    Some(data) => SharedReply::Value(
                        counter(data).unwrap_or_else(|| panic!("{name}: {data:?}")),
                    ),
                    None => SharedReply::NotFound,
                };
                ops.push(Shared {
                    writer: id,
                    serial,
                    key,
                    op: SharedOp::Get,
                    sent,
                    reply: Some((reply, read)),
                });
            }
            serial += 1;
        }
        on = Some(group);
        let key = group * SHARED_KEYS + rng.below(SHARED_KEYS as u64) as usize;
        let name = shared_key(round, key);
        let (op, request) = match rng.below(10) {
            0..=2 => {
                let value = (id as u64 + 1) * SET_WRITER + serial * SET_SERIAL;
                let len = value.to_string().len();
                (
                    SharedOp::Set(value),
                    format!("set {name} 0 0 {len}\r\n{value}\r\n"),
                )
            }
            3 => (SharedOp::Delete, format!("delete {name}\r\n")),
            _ => (SharedOp::Incr, format!("incr {name} 1\r\n")),
        };
        let sent = Instant::now();
        // A line cut short by the kill is no reply.
        let line = client.line(request.as_bytes()).ok();
        let reply = line.filter(|line| line.ends_with("\r\n")).map(|line| {
            let reply = match (op, line.as_str()) {
                (SharedOp::Set(_), "STORED\r\n") | (SharedOp::Delete, "DELETED\r\n") => {
                    SharedReply::Done
                }
                (SharedOp::Delete | SharedOp::Incr, "NOT_FOUND\r\n") => SharedReply::NotFound,
                (SharedOp::Incr, number) => SharedReply::Value(
                    counter(number.as_bytes())
                        .unwrap_or_else(|| panic!("{name}: incr replied {line:?}")),
                ),
                _ => panic!("{name}: {op:?} replied {line:?}"),
            };
            (reply, Instant::now())
        });
        let in_flight = reply.is_none();
        ops.push(Shared {
            writer: id,
            serial,
            key,
            op,
            sent,
            reply,
        });
        if in_flight {
            return ops;
        }
    }
}

/// Whether a get saw a state that a kill must keep: one an acknowledged write made (its
/// record was written before its reply), or a miss with no delete in flight. A read can see
/// a write applied whose record is not written yet, which the kill may then lose lawfully.
fn durable(ops: &[Shared], get: &Shared) -> bool {
    match get.reply {
        Some((SharedReply::Value(v), _)) if v % SET_SERIAL == 0 => ops
            .iter()
            .any(|op| op.op == SharedOp::Set(v) && op.reply.is_some()),
        Some((SharedReply::Value(v), _)) => ops.iter().any(|op| {
            op.op == SharedOp::Incr
                && matches!(op.reply, Some((SharedReply::Value(w), _)) if w == v)
        }),
        _ => !ops
            .iter()
            .any(|op| op.op == SharedOp::Delete && op.reply.is_none()),
    }
}

/// Whether `restored`, a key's item after the kill and restart, is the state that some
/// linearization of the key's requests leaves: an order of every acknowledged write, any of
/// the writes in flight and the gets that saw a durable state (`durable`), in which a request
/// acknowledged before another was sent comes first, and each acknowledged request did what
/// its reply says. (If the sequence numbers follow the map's order, replay restores the
/// map's state after the last write whose record was written, and the map's own order cut
/// there is such a linearization: every write after it is unacknowledged.) An `Err` says why
/// not. What is checked:
///
/// - A value `B + n` is the state right after the set of `B` and `n` incrs on it, with no
///   write but those incrs after that set. It needs
///   - a set of `B` among the key's writes (acknowledged or in flight);
///   - no acknowledged incr or get that replied `B + m` with `m > n` (a later state);
///   - `n` no more than the largest such `m` (0 if none) plus the incrs in flight;
///   - every other acknowledged request (a set or a delete, an incr or get that replied
///     another value or a miss) ordered before the set of `B`, so sent before each
///     acknowledged request of that run (the set, the incrs and gets of `B + m`) was
///     acknowledged: one sent after that comes after it in every linearization.
/// - Absence needs, if an acknowledged request left or found a value, a delete that removed
///   the item (acknowledged DELETED, or in flight) after them all: not acknowledged before
///   any of them was sent.
///
/// In particular the state is one a write acknowledged or in flight left, and no acknowledged
/// write was sent after that write was acknowledged. Writes that overlap in time may be
/// ordered either way, so two sets swapped by the server show only through a later get
/// or incr: the values make those say which write they followed.
fn linearizable_end(ops: &[Shared], restored: Option<&[u8]>) -> Result<(), String> {
    let ops: Vec<&Shared> = ops
        .iter()
        .filter(|op| op.op != SharedOp::Get || durable(ops, op))
        .collect();
    let Some(data) = restored else {
        let Some(latest) = ops
            .iter()
            .filter(|op| op.shows_value())
            .map(|op| op.sent)
            .max()
        else {
            return Ok(());
        };
        let removed = ops.iter().any(|op| {
            op.op == SharedOp::Delete
                && match op.reply {
                    None => true,
                    Some((reply, at)) => reply == SharedReply::Done && at >= latest,
                }
        });
        return match removed {
            true => Ok(()),
            false => Err("absent, but no delete followed the acknowledged values".into()),
        };
    };
    let value = counter(data).ok_or("not a number")?;
    let (base, n) = (value - value % SET_SERIAL, value % SET_SERIAL);
    if !ops.iter().any(|op| op.op == SharedOp::Set(base)) {
        return Err(format!("no write of this key set {base}"));
    }
    let largest = ops
        .iter()
        .filter(|op| op.saw(base))
        .filter_map(|op| match op.reply {
            Some((SharedReply::Value(v), _)) => Some(v % SET_SERIAL),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    if largest > n {
        return Err(format!("a reply said {} later", base + largest));
    }
    let in_flight = ops
        .iter()
        .filter(|op| op.op == SharedOp::Incr && op.reply.is_none())
        .count() as u64;
    if n > largest + in_flight {
        return Err(format!("more incrs than were made on {base}"));
    }
    let in_run = |op: &Shared| op.op == SharedOp::Set(base) || op.saw(base);
    let first = ops
        .iter()
        .filter(|op| in_run(op))
        .filter_map(|op| op.reply.map(|(_, at)| at))
        .min();
    let Some(first) = first else {
        return Ok(());
    };
    match ops
        .iter()
        .find(|op| op.reply.is_some() && !in_run(op) && op.sent > first)
    {
        Some(late) => Err(format!(
            "writer {} #{} was sent after the restored state's run had begun, and was \
             acknowledged, but the run does not show it",
            late.writer, late.serial
        )),
        None => Ok(()),
    }
}

/// SIGKILL the server at a random instant while four clients race on the same few keys (sets,
/// deletes and incrs, all moving to a fresh group of `SHARED_KEYS` keys every `SHARED_GROUP`,
/// each reading back the group it leaves), restart it on the same directory, and check each
/// key against the times and replies of its requests (`linearizable_end`). What it tests is
/// that a key's sequence numbers follow the map's order of its writes (`persist.rs`): replay
/// keeps the largest, so a write numbered before one it followed in the map is lost when they
/// are the key's last two. Rounds for about 12 s, or `FLOE_SERVER_SHARED_KILL_ROUNDS` of them
/// (`FLOE_SERVER_KILL_SEED` seeds the kill instants and the writers).
///
/// Checked by mutation: with `cache/session.rs` taking a store's, an incr's or a delete's number
/// before its `compute` or `remove_if` (so a retried decision kept an older number), this
/// failed within its first three rounds in 25 runs of 25, mostly in the first. The groups of
/// 1 ms and the reads as a writer leaves one are what make it sharp: with 5 ms groups and no
/// reads the store mutation failed anywhere from the 1st round to the 14th (two sets swapped
/// show only to a read).
#[test]
fn sigkill_while_writers_race_on_shared_keys_restores_a_linearizable_state() {
    let rounds = env_number("FLOE_SERVER_SHARED_KILL_ROUNDS");
    let seed = kill_seed();
    let mut rng = Rng(seed | 1);
    let dir = scratch_dir("shared");
    let began = Instant::now();
    // The last round's keys as restored: a clean stop and start must keep them too.
    let mut previous: HashMap<String, Option<Vec<u8>>> = HashMap::new();
    let (mut round, mut keys, mut requests) = (0, 0, 0);
    while rounds.map_or(
        round == 0 || began.elapsed() < Duration::from_secs(12),
        |n| round < n,
    ) {
        let (mut child, port, log) =
            start(&["-t", "2", "-e", dir_arg(&dir), "--persist-compact", "1"]);
        let _reaper = Reaper(child.id());
        wait_restored(port);
        let mut client = Client::connect(port);
        let names: Vec<_> = previous.keys().cloned().collect();
        let found = client.values(&names).unwrap();
        for (name, value) in &previous {
            let (found, value) = (found.get(name), value.as_ref());
            assert_eq!(found, value, "round {round} {name} (seed {seed})");
        }
        // Each round restores its own keys only.
        assert_eq!(client.line(b"flush_all\r\n").unwrap(), "OK\r\n");
        drop(client);
        let opened = Instant::now();
        let writers: Vec<_> = (0..SHARED_WRITERS)
            .map(|id| {
                let seed = rng.next();
                std::thread::spawn(move || shared_writer(port, id, seed, round, opened))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200 + rng.below(800)));
        signal(&child, 9);
        child.wait().unwrap();
        drop(log);
        let (child, port, log) = start(&["-t", "2", "-e", dir_arg(&dir)]);
        let _reaper = Reaper(child.id());
        wait_restored(port);
        let mut by_key: HashMap<usize, Vec<Shared>> = HashMap::new();
        for thread in writers {
            for op in thread.join().unwrap() {
                requests += 1;
                by_key.entry(op.key).or_default().push(op);
            }
        }
        let names: Vec<_> = by_key.keys().map(|&key| shared_key(round, key)).collect();
        let found = Client::connect(port).values(&names).unwrap();
        let mut failures = Vec::new();
        for (key, ops) in &mut by_key {
            let name = shared_key(round, *key);
            let restored = found.get(&name).map(Vec::as_slice);
            if let Err(why) = linearizable_end(ops, restored) {
                ops.sort_by_key(|op| op.sent);
                let history: Vec<_> = ops.iter().map(|op| op.describe(opened)).collect();
                failures.push(format!(
                    "{name} restored as {:?}: {why}; its requests (times in µs):\n  {}",
                    restored.map(String::from_utf8_lossy),
                    history.join("\n  ")
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "round {round} (seed {seed}): {} of {} keys restored to no linearization of their \
             requests; the first:\n{}",
            failures.len(),
            by_key.len(),
            failures[..failures.len().min(3)].join("\n")
        );
        keys += by_key.len();
        previous = names
            .into_iter()
            .map(|name| {
                let value = found.get(&name).cloned();
                (name, value)
            })
            .collect();
        stop(child, log);
        round += 1;
    }
    eprintln!("{round} kills, {requests} requests raced on {keys} keys");
    fs::remove_dir_all(&dir).unwrap();
}

/// Start the server on `dir` expecting a refusal: exit code 2 and a message containing
/// `says`.
fn refused(dir: &Path, says: &str) {
    let out = server()
        .args(["-p", "0", "-l", "127.0.0.1", "-e", dir_arg(dir)])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(says), "expected {says:?} in {stderr:?}");
}

/// Every file of `dir` and its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            // Not read if not a file (a FIFO would block the read).
            let bytes = match entry.file_type().unwrap().is_file() {
                true => fs::read(entry.path()).unwrap(),
                false => b"not a regular file".to_vec(),
            };
            (entry.file_name().into_string().unwrap(), bytes)
        })
        .collect();
    files.sort();
    files
}

/// A directory holding a snapshot of two items (a clean stop), and the snapshot's name.
fn stopped_with_items(name: &str) -> (PathBuf, String) {
    let dir = scratch_dir(name);
    let (child, port, log) = start(&["-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    let mut client = Client::connect(port);
    assert_eq!(client.line(b"set a 0 0 1\r\n1\r\n").unwrap(), "STORED\r\n");
    assert_eq!(client.line(b"set b 0 0 1\r\n2\r\n").unwrap(), "STORED\r\n");
    stop(child, log);
    let snapshot = contents(&dir)
        .into_iter()
        .map(|(name, _)| name)
        .find(|name| name.starts_with("snapshot-"))
        .unwrap();
    (dir, snapshot)
}

#[test]
fn damaged_foreign_and_locked_directories_are_refused_unchanged() {
    // Every byte of a snapshot matters: flip one anywhere and the open is refused.
    let (dir, snapshot) = stopped_with_items("damaged");
    let path = dir.join(&snapshot);
    let good = fs::read(&path).unwrap();
    for at in [3, 8, 30, 40, good.len() / 2, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        fs::write(&path, &bad).unwrap();
        let before = contents(&dir);
        let says = match at {
            0..8 => "not a floe-server file",
            8..32 => "header is damaged",
            _ => "is damaged at byte",
        };
        refused(&dir, says);
        assert_eq!(
            contents(&dir),
            before,
            "a refused open changed the directory"
        );
    }
    // Cut short.
    fs::write(&path, &good[..good.len() - 20]).unwrap();
    refused(&dir, "damaged");
    // Zeroed.
    fs::write(&path, vec![0; good.len()]).unwrap();
    refused(&dir, "not a floe-server file");
    fs::write(&path, &good).unwrap();

    // A foreign file under a journal's name.
    let foreign = dir.join("journal-99-0");
    fs::write(
        &foreign,
        b"this is somebody else's file, long enough for a header",
    )
    .unwrap();
    refused(&dir, "not a floe-server file");
    fs::remove_file(&foreign).unwrap();

    // Held by another server.
    let (child, port, log) = start(&["-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    refused(&dir, "in use by another process");
    let mut client = Client::connect(port);
    assert_eq!(client.gets("a").unwrap().unwrap().0, b"1");
    stop(child, log);

    // A path that cannot be a directory.
    let file = dir.join("a-file");
    fs::write(&file, b"").unwrap();
    refused(&file.join("below"), "cannot create");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_torn_journal_end_is_dropped_and_the_rest_restored() {
    let dir = scratch_dir("torn");
    let (mut child, port, log) = start(&["-t", "1", "-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    let mut client = Client::connect(port);
    for i in 0..20 {
        let request = format!("set k{i} {i} 0 2\r\nv{}\r\n", i % 10);
        assert_eq!(client.line(request.as_bytes()).unwrap(), "STORED\r\n");
    }
    signal(&child, 9);
    child.wait().unwrap();
    drop(log);
    // A write cut short: half a record at the end of the journal.
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(largest_journal(&dir))
        .unwrap();
    file.write_all(&[0x55; 30]).unwrap();
    drop(file);
    let (child, port, log, startup) = start_logged(&["-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    assert!(
        startup.contains("30 bytes at its end are not whole records"),
        "{startup}"
    );
    assert!(startup.contains("restoring 20 items"), "{startup}");
    assert_eq!(restored_items(port), 20);
    let mut client = Client::connect(port);
    for i in 0..20 {
        let item = client.gets(&format!("k{i}")).unwrap().unwrap();
        assert_eq!((item.0, item.1), (format!("v{}", i % 10).into_bytes(), i));
    }
    stop(child, log);
    fs::remove_dir_all(&dir).unwrap();
}

/// A disk that fills up (here a file size limit, `ulimit -f`, with SIGXFSZ ignored: writes
/// past it fail with EFBIG): the server keeps serving, turns persistence off and empties the
/// directory, so its next start is cold rather than stale.
#[test]
fn a_full_disk_turns_persistence_off_and_leaves_no_stale_state() {
    let dir = scratch_dir("full");
    let binary = env!("CARGO_BIN_EXE_floe-server");
    // `trap '' XFSZ` is inherited across exec: ignored signals stay ignored.
    let mut child = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "trap '' XFSZ; ulimit -f 64; exec {binary} -p 0 -l 127.0.0.1 -v -t 1 -e {}",
                dir_arg(&dir)
            ),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _reaper = Reaper(child.id());
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let port: u16 = loop {
        let mut line = String::new();
        assert_ne!(log.read_line(&mut line).unwrap(), 0, "never listened");
        if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    let mut client = Client::connect(port);
    // 64 KiB of journal is 40-odd of these; go well past it.
    let value = vec![b'v'; 1500];
    for i in 0..200 {
        let mut request = format!("set k{i} 0 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        assert_eq!(client.line(&request).unwrap(), "STORED\r\n", "k{i}");
    }
    // Still serving everything from memory.
    for i in 0..200 {
        assert!(client.gets(&format!("k{i}")).unwrap().is_some(), "k{i}");
    }
    client.writer.write_all(b"stats\r\n").unwrap();
    let mut failed = None;
    loop {
        let line = client.read_line().unwrap();
        if let Some(flag) = line.strip_prefix("STAT persist_failed ") {
            failed = Some(flag.trim().to_string());
        }
        if line == "END\r\n" {
            break;
        }
    }
    assert_eq!(failed.as_deref(), Some("1"));
    signal(&child, 15);
    assert!(child.wait().unwrap().success());
    let mut text = String::new();
    log.read_to_string(&mut text).unwrap();
    assert!(text.contains("persistence is off"), "{text}");
    let left: Vec<_> = contents(&dir).into_iter().map(|(name, _)| name).collect();
    assert!(
        left.is_empty(),
        "a failed directory must not restore stale items: {left:?}"
    );
    // The next start is cold, and persistent again.
    let (child, port, log) = start(&["-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    assert_eq!(restored_items(port), 0);
    stop(child, log);
    fs::remove_dir_all(&dir).unwrap();
}

/// The server serves while it restores: a write made then waits for the restore, so the
/// restore never overwrites it (a newer value, a delete, a flush) with an older record; reads
/// made then see restored items or misses, never a value older than a write they follow.
#[test]
fn writes_during_the_restore_are_not_undone_by_it() {
    let dir = scratch_dir("during");
    let (child, port, log) = start(&["-t", "2", "-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    // Enough items that the restore takes a while (a debug build restores far slower).
    let mut client = Client::connect(port);
    let mut batch = Vec::new();
    for i in 0..100_000 {
        batch.extend_from_slice(format!("set k{i} 0 0 3 noreply\r\nold\r\n").as_bytes());
    }
    batch.extend_from_slice(b"set last 0 0 3\r\nold\r\n");
    assert_eq!(client.line(&batch).unwrap(), "STORED\r\n");
    stop(child, log);

    let (child, port, log) = start(&["-t", "2", "-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    let restoring = stat(port, "persist_restoring");
    let mut client = Client::connect(port);
    // Sent at once after the start: these run while (or after) the items go in.
    assert_eq!(
        client.line(b"set k1 0 0 3\r\nnew\r\n").unwrap(),
        "STORED\r\n"
    );
    assert_eq!(client.line(b"delete k2\r\n").unwrap(), "DELETED\r\n");
    assert_eq!(
        client.line(b"append k3 0 0 4\r\n+new\r\n").unwrap(),
        "STORED\r\n"
    );
    assert_eq!(client.gets("k1").unwrap().unwrap().0, b"new");
    wait_restored(port);
    assert_eq!(client.gets("k1").unwrap().unwrap().0, b"new");
    assert_eq!(client.gets("k2").unwrap(), None);
    assert_eq!(client.gets("k3").unwrap().unwrap().0, b"old+new");
    assert_eq!(client.gets("k99999").unwrap().unwrap().0, b"old");
    assert_eq!(restored_items(port), 100_000);
    eprintln!("persist_restoring right after the start: {restoring:?}");
    // A flush made during a restore empties the restored items too.
    stop(child, log);
    let (child, port, log) = start(&["-t", "2", "-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    let mut client = Client::connect(port);
    assert_eq!(client.line(b"flush_all\r\n").unwrap(), "OK\r\n");
    wait_restored(port);
    assert_eq!(client.gets("k5").unwrap(), None);
    assert_eq!(client.gets("last").unwrap(), None);
    stop(child, log);
    fs::remove_dir_all(&dir).unwrap();
}

/// The journal of `dir` with the most bytes (the one a single-threaded server wrote to).
fn largest_journal(dir: &Path) -> PathBuf {
    let name = contents(dir)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("journal-"))
        .max_by_key(|name| fs::metadata(dir.join(name)).unwrap().len())
        .unwrap();
    dir.join(name)
}

/// A server killed after 2500 sets, 500 overwrites and 100 deletes, once its housekeeping has
/// synced the journal (so the whole journal is promised); the directory and the journal.
fn killed_after_writes(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch_dir(name);
    let (mut child, port, log) = start(&["-t", "1", "--persist-sync", "100", "-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    wait_restored(port);
    let mut client = Client::connect(port);
    for i in 0..2500 {
        let request = format!("set k{i} 0 0 6\r\nfirst{}\r\n", i % 10);
        assert_eq!(client.line(request.as_bytes()).unwrap(), "STORED\r\n");
    }
    for i in 0..500 {
        let request = format!("set k{i} 0 0 5\r\nlater\r\n");
        assert_eq!(client.line(request.as_bytes()).unwrap(), "STORED\r\n");
    }
    for i in 500..600 {
        let request = format!("delete k{i}\r\n");
        assert_eq!(client.line(request.as_bytes()).unwrap(), "DELETED\r\n");
    }
    // Past a sync tick (100 ms, rounded to the housekeeping's).
    std::thread::sleep(Duration::from_millis(600));
    signal(&child, 9);
    child.wait().unwrap();
    drop(log);
    let journal = largest_journal(&dir);
    (dir, journal)
}

/// A journal damaged in the middle (a flipped byte, a zeroed block), cut in half, removed or
/// replaced by a FIFO, or the manifest removed: the server refuses to start (exit code 2),
/// leaves the directory as it was, and never serves an overwritten value or a deleted key.
/// Before, it started and served up to 500 stale values and 100 deleted keys.
#[test]
fn a_damaged_journal_is_refused_not_served_stale() {
    let (dir, journal) = killed_after_writes("stale");
    let good = fs::read(&journal).unwrap();
    let manifest = dir.join("manifest");
    let good_manifest = fs::read(&manifest).unwrap();
    let middle = good.len() / 2;
    type Damage<'a> = (&'a str, Box<dyn Fn() + 'a>, &'a str);
    let damages: Vec<Damage> = vec![
        (
            "a flipped byte",
            Box::new(|| {
                let mut bad = good.clone();
                bad[middle] ^= 0x08;
                fs::write(&journal, bad).unwrap()
            }),
            "is damaged at byte",
        ),
        (
            "a zeroed block",
            Box::new(|| {
                let mut bad = good.clone();
                bad[middle & !4095..(middle & !4095) + 4096].fill(0);
                fs::write(&journal, bad).unwrap()
            }),
            "is damaged at byte",
        ),
        (
            "cut in half",
            Box::new(|| fs::write(&journal, &good[..middle]).unwrap()),
            "shorter than its last sync",
        ),
        (
            "removed",
            Box::new(|| fs::remove_file(&journal).unwrap()),
            "missing",
        ),
        (
            "a FIFO",
            Box::new(|| {
                fs::remove_file(&journal).unwrap();
                let name = std::ffi::CString::new(journal.to_str().unwrap()).unwrap();
                // SAFETY: mkfifo with a NUL-terminated path; the result is checked.
                assert_eq!(unsafe { common::libc_mkfifo(name.as_ptr(), 0o600) }, 0);
            }),
            "not a regular file",
        ),
        (
            "the manifest removed",
            Box::new(|| fs::remove_file(&manifest).unwrap()),
            "may be stale",
        ),
    ];
    for (what, damage, says) in damages {
        damage();
        let before = contents(&dir);
        let out = server()
            .args(["-p", "0", "-l", "127.0.0.1", "-e", dir_arg(&dir)])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let _reaper = Reaper(out.id());
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(out.wait_with_output());
        });
        let out = receiver
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{what}: the server neither started nor refused"))
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(
            stderr.contains(says),
            "{what}: expected {says:?} in {stderr:?}"
        );
        assert_eq!(
            contents(&dir),
            before,
            "{what}: the refused start changed the directory"
        );
        let _ = fs::remove_file(&journal);
        fs::write(&journal, &good).unwrap();
        fs::write(&manifest, &good_manifest).unwrap();
    }
    // `--persist-repair` opens the flipped byte's directory as after a power loss: the
    // journal is cut at the damaged record, and the start says what it dropped.
    let repair = scratch_dir("stale-repair");
    fs::create_dir_all(&repair).unwrap();
    for (name, bytes) in contents(&dir) {
        fs::write(repair.join(&name), bytes).unwrap();
    }
    let mut bad = good.clone();
    bad[middle] ^= 0x08;
    fs::write(repair.join(journal.file_name().unwrap()), bad).unwrap();
    let (child, port, log, startup) = start_logged(&["--persist-repair", "-e", dir_arg(&repair)]);
    let _repairing = Reaper(child.id());
    assert!(startup.contains("are not whole records"), "{startup}");
    assert!(restored_items(port) > 0);
    stop(child, log);
    fs::remove_dir_all(&repair).unwrap();

    // Undamaged, every write is back as it was last acknowledged.
    let (child, port, log) = start(&["-e", dir_arg(&dir)]);
    let _reaper = Reaper(child.id());
    assert_eq!(restored_items(port), 2400);
    let mut client = Client::connect(port);
    for i in (0..2500).step_by(7) {
        let got = client.gets(&format!("k{i}")).unwrap().map(|item| item.0);
        let expected = match i {
            0..500 => Some(b"later".to_vec()),
            500..600 => None,
            _ => Some(format!("first{}", i % 10).into_bytes()),
        };
        assert_eq!(got, expected, "k{i}");
    }
    stop(child, log);
    fs::remove_dir_all(&dir).unwrap();
}
