//! Warm restarts (`-e DIR`): items, flags, CAS uniques and expiry times come back after a
//! clean stop and after SIGKILL at a random instant (every acknowledged write kept, the one in
//! flight whole or absent, compactions included); foreign, damaged, locked and unwritable
//! directories are refused with exit code 2 and left as they were; a disk that fills up turns
//! persistence off (and empties the directory) rather than let a restart be stale.

mod common;

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, ChildStderr, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
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
        let fields: Vec<&str> = header.split_whitespace().collect();
        assert_eq!(fields[0], "VALUE", "{header:?}");
        let len: usize = fields[3].parse().unwrap();
        let mut data = vec![0; len + 2];
        self.reader.read_exact(&mut data)?;
        data.truncate(len);
        assert_eq!(self.read_line()?, "END\r\n");
        Ok(Some((
            data,
            fields[2].parse().unwrap(),
            fields[4].parse().unwrap(),
        )))
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
    let rounds: u64 = std::env::var("FLOE_SERVER_KILL_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(6);
    let seed = std::env::var("FLOE_SERVER_KILL_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("FLOE_SERVER_KILL_SEED={seed}");
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
            (
                entry.file_name().into_string().unwrap(),
                fs::read(entry.path()).unwrap(),
            )
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
    let journal = contents(&dir)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("journal-"))
        .max_by_key(|name| fs::metadata(dir.join(name)).unwrap().len())
        .unwrap();
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(dir.join(&journal))
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
    assert_eq!(
        left,
        ["lock"],
        "a failed directory must not restore stale items"
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
