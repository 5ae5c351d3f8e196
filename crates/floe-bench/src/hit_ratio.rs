//! `floe-bench server --hit-ratio`: how many reads an evicting cache answers, floe-server
//! against memcached on the same request streams (issue 44: "eviction never worse than
//! memcached's LRU").
//!
//! Each trace runs on a fresh server with `-m` from `--memory-mb`, one connection, requests
//! pipelined in batches of [`BATCH`] (a batch's gets, then the sets of its misses), so both
//! servers see the same stream in the same order and the ratios are deterministic but for
//! memcached's background LRU maintainer. Sizes are in items of memcached's cost (value,
//! 20-byte key, a ~56-byte header): `cap` items fill `-m`.
//!
//! | trace | stream | ratio of |
//! |---|---|---|
//! | `recency:F` | sets of new keys; each key read once after `F·cap` later sets (the "read once after D MiB of other writes") | those reads, once the cache is full |
//! | `zipf` | cache-aside (get; set on a miss) over `10·cap` keys, zipf 0.99 | gets of the second half |
//! | `scan` | cache-aside: 70% zipf 0.99 over `cap/2` hot keys, 30% a sequential scan of keys never seen again | hot gets of the second half |
//! | `one-hit` | cache-aside: 50% zipf 0.99 over `cap` keys, 50% keys used once | zipf gets of the second half |
//! | `sets-gets` | 50% sets, 50% gets, uniform over `0.9·cap` keys, after one set of each (memcaslap's shape) | gets |

use std::{
    io::{self, BufRead, BufReader, Read, Write},
    net::TcpStream,
    time::Duration,
};

use crate::{
    dist::Dist,
    server_load::{key, start_server, ServerArgs},
};

/// Requests written before their replies are read.
const BATCH: usize = 64;

/// memcached's cost of an item beyond its value: the 20-byte key and a ~56-byte header.
const ITEM_OVERHEAD: u64 = 20 + 56;

/// The traces, as `--traces` names them.
pub const TRACES: &[&str] = &[
    "recency:0.15",
    "recency:0.3",
    "recency:0.6",
    "zipf",
    "scan",
    "one-hit",
    "sets-gets",
];

/// One blocking connection that pipelines gets and sets.
struct Client {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    value: Vec<u8>,
    out: Vec<u8>,
    line: Vec<u8>,
}

impl Client {
    fn connect(address: std::net::SocketAddr, value_bytes: usize) -> io::Result<Client> {
        let stream = TcpStream::connect(address)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            writer: stream.try_clone()?,
            reader: BufReader::with_capacity(1 << 20, stream),
            value: vec![b'h'; value_bytes],
            out: Vec::with_capacity(1 << 20),
            line: Vec::new(),
        })
    }

    /// Get each key; whether each was there.
    fn gets(&mut self, keys: &[u64], found: &mut Vec<bool>) -> io::Result<()> {
        self.out.clear();
        for &k in keys {
            self.out.extend_from_slice(b"get ");
            self.out.extend_from_slice(&key(k));
            self.out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&self.out)?;
        found.clear();
        for _ in keys {
            let mut hit = false;
            loop {
                self.read_line()?;
                if self.line == b"END\r\n" {
                    break;
                }
                let text = String::from_utf8_lossy(&self.line).into_owned();
                let length: usize = text
                    .strip_prefix("VALUE ")
                    .and_then(|rest| rest.split_whitespace().nth(2))
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| io::Error::other(format!("unexpected reply {text:?}")))?;
                let mut data = vec![0; length + 2];
                self.reader.read_exact(&mut data)?;
                hit = true;
            }
            found.push(hit);
        }
        Ok(())
    }

    /// Set each key (waiting for every answer: a refused store is an error).
    fn sets(&mut self, keys: &[u64]) -> io::Result<()> {
        self.out.clear();
        for &k in keys {
            self.out.extend_from_slice(b"set ");
            self.out.extend_from_slice(&key(k));
            let _ = write!(self.out, " 0 0 {}\r\n", self.value.len());
            self.out.extend_from_slice(&self.value);
            self.out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&self.out)?;
        for _ in keys {
            self.read_line()?;
            if self.line != b"STORED\r\n" {
                return Err(io::Error::other(format!(
                    "set answered {:?}",
                    String::from_utf8_lossy(&self.line)
                )));
            }
        }
        Ok(())
    }

    fn read_line(&mut self) -> io::Result<()> {
        self.line.clear();
        if self.reader.read_until(b'\n', &mut self.line)? == 0 {
            return Err(io::Error::other("the server closed the connection"));
        }
        Ok(())
    }
}

/// Reads counted and reads answered.
#[derive(Default)]
struct Tally {
    reads: u64,
    hits: u64,
}

/// A request of a cache-aside stream: a key, and whether its read is counted.
type Request = (u64, bool);

/// Run a cache-aside stream: batches of gets, then sets of the misses.
fn cache_aside(client: &mut Client, stream: &[Request]) -> io::Result<Tally> {
    let mut tally = Tally::default();
    let mut found = Vec::with_capacity(BATCH);
    let mut keys = Vec::with_capacity(BATCH);
    let mut misses = Vec::with_capacity(BATCH);
    for batch in stream.chunks(BATCH) {
        keys.clear();
        keys.extend(batch.iter().map(|&(k, _)| k));
        client.gets(&keys, &mut found)?;
        misses.clear();
        for (&(k, counted), &hit) in batch.iter().zip(&found) {
            if counted {
                tally.reads += 1;
                tally.hits += u64::from(hit);
            }
            if !hit && !misses.contains(&k) {
                misses.push(k);
            }
        }
        client.sets(&misses)?;
    }
    Ok(tally)
}

/// The request stream of `trace` (not `recency` or `sets-gets`, which are not cache-aside).
fn cache_aside_stream(trace: &str, cap: u64) -> Vec<Request> {
    let total = 4 * cap;
    let mut stream = Vec::with_capacity(total as usize);
    let (hot_keys, hot_share) = match trace {
        // Ten times the cache: zipf 0.99 over fewer keys touches fewer distinct keys than fit,
        // and every miss is a first reference (both servers then tie whatever they evict).
        "zipf" => (10 * cap, 1.0),
        "scan" => (cap / 2, 0.7),
        _ => (cap, 0.5), // one-hit
    };
    let mut zipf = Dist::Zipf { theta: 0.99 }.sampler(hot_keys.max(1), 7);
    let mut coin = Dist::Uniform.sampler(1 << 20, 11);
    // Keys past the hot ones, each used once (a scan, or one-hit wonders).
    let mut once = hot_keys;
    for i in 0..total {
        let hot = coin.next_index() < (hot_share * (1u64 << 20) as f64) as u64;
        let counted_half = i >= total / 2;
        if hot {
            stream.push((zipf.next_index(), counted_half));
        } else {
            stream.push((once, false));
            once += 1;
        }
    }
    stream
}

/// `recency:F`: sets of new keys, each read once `F·cap` sets later.
fn recency(client: &mut Client, cap: u64, fraction: f64) -> io::Result<Tally> {
    let distance = ((fraction * cap as f64) as u64).max(1);
    let writes = 2 * cap + distance;
    let mut tally = Tally::default();
    let mut found = Vec::new();
    let mut next = 0;
    while next < writes {
        let end = (next + BATCH as u64).min(writes);
        let sets: Vec<u64> = (next..end).collect();
        client.sets(&sets)?;
        let reads: Vec<u64> = (next..end)
            .filter(|&k| k >= distance)
            .map(|k| k - distance)
            .collect();
        client.gets(&reads, &mut found)?;
        for (&k, &hit) in reads.iter().zip(&found) {
            // Counted once the cache is full (eviction under way).
            if k + distance >= cap {
                tally.reads += 1;
                tally.hits += u64::from(hit);
            }
        }
        next = end;
    }
    Ok(tally)
}

/// `sets-gets`: every key set once, then 50% sets and 50% gets, uniform.
fn sets_gets(client: &mut Client, cap: u64) -> io::Result<Tally> {
    let keys = (cap * 9 / 10).max(1);
    let all: Vec<u64> = (0..keys).collect();
    for batch in all.chunks(BATCH) {
        client.sets(batch)?;
    }
    let mut pick = Dist::Uniform.sampler(keys, 13);
    let mut coin = Dist::Uniform.sampler(2, 17);
    let mut tally = Tally::default();
    let mut found = Vec::new();
    for _ in 0..(4 * cap).div_ceil(BATCH as u64) {
        let (mut sets, mut gets) = (Vec::new(), Vec::new());
        for _ in 0..BATCH {
            let k = pick.next_index();
            if coin.next_index() == 0 {
                sets.push(k);
            } else {
                gets.push(k);
            }
        }
        client.sets(&sets)?;
        client.gets(&gets, &mut found)?;
        tally.reads += found.len() as u64;
        tally.hits += found.iter().filter(|&&hit| hit).count() as u64;
    }
    Ok(tally)
}

/// Run every trace of `traces` on every server; print hit ratios side by side.
pub fn run(args: &ServerArgs, traces: &[String], cpu: &str) -> Result<(), String> {
    for trace in traces {
        if !TRACES.contains(&trace.as_str()) && !trace.starts_with("recency:") {
            return Err(format!(
                "unknown trace {trace:?} (known: {})",
                TRACES.join(", ")
            ));
        }
    }
    println!(
        "# floe-bench server --hit-ratio: -m {} MiB, -t {}, one connection, batches of {BATCH}; CPU {cpu}",
        args.memory_mb, args.server_threads
    );
    println!("value_B\ttrace\tserver\treads\thit%\tpoints_vs_first");
    for &bytes in &args.value_bytes {
        let cap = ((args.memory_mb as u64) << 20) / (bytes as u64 + ITEM_OVERHEAD);
        for trace in traces {
            let mut first = None;
            for name in &args.servers {
                let server = start_server(name, args, args.memory_mb, &[])?;
                let mut client = Client::connect(server.address, bytes)
                    .map_err(|e| format!("{name}: connect: {e}"))?;
                let tally = match trace.as_str() {
                    t if t.starts_with("recency:") => {
                        let fraction: f64 = t["recency:".len()..]
                            .parse()
                            .ok()
                            .filter(|f| (0.0..=1.0).contains(f))
                            .ok_or_else(|| format!("{t}: a fraction of the cache, 0 to 1"))?;
                        recency(&mut client, cap, fraction)
                    }
                    "sets-gets" => sets_gets(&mut client, cap),
                    other => cache_aside(&mut client, &cache_aside_stream(other, cap)),
                }
                .map_err(|e| format!("{name}, {trace}: {e}"))?;
                let ratio = tally.hits as f64 / tally.reads.max(1) as f64 * 100.0;
                let points = first.map_or(String::new(), |f: f64| format!("{:+.2}", ratio - f));
                first.get_or_insert(ratio);
                println!(
                    "{bytes}\t{trace}\t{name}\t{}\t{ratio:.2}\t{points}",
                    tally.reads
                );
            }
        }
    }
    Ok(())
}
