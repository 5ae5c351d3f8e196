//! No request makes the server build unbounded output: a 256 KiB `get big big ...` line
//! naming a 1 MiB value 65,000 times (64 GiB of replies), pipelined gets and binary quiet
//! gets, sent by clients that never read, leave the resident memory of a spawned
//! `floe-server` bounded; other clients are served meanwhile, and a client that reads gets
//! every byte of its long reply, in order.

use std::{
    io::{ErrorKind, Read, Write},
    net::TcpStream,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Resident memory the hogs may add to the server's: each holds at most the output limit
/// (4 MiB) plus one value, in a buffer that may have grown by doubling, and its input.
const RSS_BOUND: usize = 64 << 20;

const VALUE_LEN: usize = 1 << 20;

/// The server process, killed when the test ends (or fails).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// Resident memory (`VmRSS`), in bytes.
    fn rss(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))
            .expect("/proc/<pid>/status");
        let line = status
            .lines()
            .find(|line| line.starts_with("VmRSS:"))
            .expect("VmRSS");
        let kib: usize = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .expect("VmRSS in kB");
        kib << 10
    }

    /// Panic (and so kill the server) if it grew past the bound: checked often, so that a
    /// server building unbounded output is stopped before it takes the machine's memory.
    fn check_rss(&self, baseline: usize, when: &str) {
        let rss = self.rss();
        assert!(
            rss < baseline + RSS_BOUND,
            "{when}: the server's resident memory grew from {} MiB to {} MiB",
            baseline >> 20,
            rss >> 20
        );
    }

    /// Wait `duration`, checking its memory all along.
    fn watch(&self, baseline: usize, duration: Duration, when: &str) {
        let end = Instant::now() + duration;
        while Instant::now() < end {
            self.check_rss(baseline, when);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

fn read_line(stream: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0];
    while !line.ends_with(b"\r\n") {
        stream.read_exact(&mut byte).expect("a reply line");
        line.push(byte[0]);
    }
    String::from_utf8(line).unwrap()
}

fn stat(stream: &mut TcpStream, name: &str) -> u64 {
    stream.write_all(b"stats\r\n").unwrap();
    let mut found = None;
    loop {
        let line = read_line(stream);
        if line == "END\r\n" {
            return found.unwrap_or_else(|| panic!("no stat {name}"));
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        if parts.nth(1) == Some(name) {
            found = parts.next().and_then(|v| v.parse().ok());
        }
    }
}

/// `get_hits` once it has stopped growing: the hogs, which never read, are answered no more
/// once their replies have filled their sockets' buffers and passed the output limit, and
/// the hits of their gets stop there (the count of a later request is then exact).
fn settled_hits(stream: &mut TcpStream) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut hits = stat(stream, "get_hits");
    let mut since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = stat(stream, "get_hits");
        if now != hits {
            hits = now;
            since = Instant::now();
        } else if since.elapsed() >= Duration::from_millis(500) {
            return hits;
        }
        assert!(
            Instant::now() < deadline,
            "the hogs' get_hits never stopped growing"
        );
    }
}

/// Write `request` over and over, without reading, until the server stops taking it (the
/// socket's buffers are full) or a second has passed; returns the bytes sent.
fn send_without_reading(stream: &mut TcpStream, request: &[u8]) -> usize {
    stream.set_nonblocking(true).unwrap();
    let mut sent = 0;
    let mut blocked_since = None;
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        match stream.write(&request[sent % request.len()..]) {
            Ok(n) => {
                sent += n;
                blocked_since = None;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(200) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("{e}"),
        }
    }
    sent
}

/// A binary protocol request for `key` with no extras or value.
fn binary_get(opcode: u8, key: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x80, opcode];
    frame.extend_from_slice(&(key.len() as u16).to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(&(key.len() as u32).to_be_bytes());
    frame.extend_from_slice(&[0; 12]);
    frame.extend_from_slice(key);
    frame
}

#[test]
fn output_stays_bounded_whatever_is_asked() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_floe-server"))
            .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-t", "2"])
            .args(["-m", "64", "-I", "1m"])
            .stdout(Stdio::null())
            .spawn()
            .expect("floe-server"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut client = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(_) => break connect(port),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("the server never listened: {e}"),
        }
    };
    // A value whose bytes say where they are, so that a reply cut or shifted shows.
    let value: Vec<u8> = (0..VALUE_LEN).map(|i| (i % 251) as u8).collect();
    client
        .write_all(format!("set big 0 0 {VALUE_LEN}\r\n").as_bytes())
        .unwrap();
    client.write_all(&value).unwrap();
    client.write_all(b"\r\nset small 0 0 1\r\ns\r\n").unwrap();
    assert_eq!(read_line(&mut client), "STORED\r\n");
    assert_eq!(read_line(&mut client), "STORED\r\n");
    let baseline = server.rss();

    // One line of 65,000 keys: 64 GiB of replies.
    let mut one_line = Vec::from(&b"get"[..]);
    for _ in 0..65_000 {
        one_line.extend_from_slice(b" big");
    }
    one_line.extend_from_slice(b"\r\n");
    assert!(one_line.len() <= floe_server::protocol::MAX_GET_LINE);
    let mut line_hog = connect(port);
    line_hog.write_all(&one_line).unwrap();
    server.watch(baseline, Duration::from_millis(500), "one long get line");

    // Pipelined single-key gets, and the binary multi-get idiom (quiet gets, then a noop).
    let mut pipeline_hog = connect(port);
    let sent = send_without_reading(&mut pipeline_hog, &b"get big\r\n".repeat(1000));
    assert!(sent > 9 * 100, "sent only {sent} bytes");
    server.check_rss(baseline, "pipelined gets");
    let mut binary_hog = connect(port);
    let mut quiet_gets = binary_get(0x0d, b"big").repeat(1000);
    quiet_gets.extend(binary_get(0x0a, b""));
    let sent = send_without_reading(&mut binary_hog, &quiet_gets);
    assert!(sent > quiet_gets.len() / 10, "sent only {sent} bytes");
    server.watch(baseline, Duration::from_millis(500), "binary quiet gets");

    // Others are served meanwhile, and the server counts what it holds for the hogs.
    let start = Instant::now();
    client.write_all(b"get small\r\n").unwrap();
    assert_eq!(read_line(&mut client), "VALUE small 0 1\r\n");
    assert_eq!(read_line(&mut client), "s\r\n");
    assert_eq!(read_line(&mut client), "END\r\n");
    assert!(start.elapsed() < Duration::from_secs(5));
    let pending = stat(&mut client, "pending_output_bytes") as usize;
    let per_connection = floe_server::server::OUTPUT_HIGH_WATER + VALUE_LEN + 1024;
    assert!(
        (VALUE_LEN..=3 * per_connection).contains(&pending),
        "{pending} bytes of output held for three hogs"
    );

    // A client that reads gets all of a long reply (300 MiB), in order, byte for byte.
    let hits_before = settled_hits(&mut client);
    let mut reader = connect(port);
    let copies = 300;
    let mut request = Vec::from(&b"get"[..]);
    for _ in 0..copies {
        request.extend_from_slice(b" big");
    }
    request.extend_from_slice(b" small\r\n");
    reader.write_all(&request).unwrap();
    let mut got = vec![0; VALUE_LEN + 2];
    for copy in 0..copies {
        assert_eq!(
            read_line(&mut reader),
            format!("VALUE big 0 {VALUE_LEN}\r\n"),
            "copy {copy}"
        );
        reader.read_exact(&mut got).unwrap();
        assert!(
            got[..VALUE_LEN] == value[..] && got[VALUE_LEN..] == b"\r\n"[..],
            "copy {copy} differs"
        );
        if copy % 50 == 0 {
            server.check_rss(baseline, "a client reading a long reply");
        }
    }
    assert_eq!(read_line(&mut reader), "VALUE small 0 1\r\n");
    assert_eq!(read_line(&mut reader), "s\r\n");
    assert_eq!(read_line(&mut reader), "END\r\n");
    // The reply is counted key by key, as it was answered: a hit for each of the key's
    // occurrences (as memcached counts them) and one for `small`.
    assert_eq!(stat(&mut reader, "get_hits") - hits_before, copies + 1);
    server.check_rss(baseline, "at the end");
    drop((line_hog, pipeline_hog, binary_hog));
}
