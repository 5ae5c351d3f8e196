//! `floe-bench server`: floe-server against memcached, each started by the bench with the
//! same threads and memory, under one load generator (SimdHT-Bench §VI's setup: a cache
//! server under multi-get load).
//!
//! The load generator is one thread driving `--connections` non-blocking connections from
//! one mio loop, closed-loop (each connection has one request in flight: a get of
//! `--multiget` keys or a set), so a request's latency is its round trip. Keys are 20 bytes
//! (`key:` and 16 digits) drawn uniform or zipf from `--keys`, all preloaded. Every reply is
//! parsed (values skipped by their length, hits counted), so a server that answered wrongly
//! would show as misses or a parse error, not as speed. With `--pin` (default) the servers
//! run on core 0 (`taskset`) and the load generator on core 1: on this 2-core machine the
//! two never share a core, and the server gets one.
//!
//! `--cache-aside` measures the hit ratio under eviction instead: a get, and on a miss a set
//! of the key (the pattern caches serve), with a key space of `--keys` whose items take
//! twice `-m`, over a fixed number of requests per server.

use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream as StdStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use clap::Args;
use hdrhistogram::Histogram;
use mio::{net::TcpStream, Events, Interest, Poll, Token};

use crate::{dist::Dist, keys::parse_count, measure::median};

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Servers to measure: floe (floe-server), floe-persist (floe-server -e, its directory
    /// in --state-dir), memcached, and floe=PATH or floe-persist=PATH for another
    /// floe-server build (compared in the same run).
    #[arg(long, value_delimiter = ',', default_value = "floe,memcached")]
    pub servers: Vec<String>,
    /// Worker threads of each server (-t).
    #[arg(long, default_value_t = 1)]
    pub server_threads: usize,
    /// Item memory of each server in MiB (-m).
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: usize,
    /// Keys preloaded and drawn from.
    #[arg(long, default_value = "100000", value_parser = parse_count)]
    pub keys: u64,
    /// Value sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "32,1024")]
    pub value_bytes: Vec<usize>,
    /// Keys per get request.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub multiget: Vec<usize>,
    /// Fraction of requests that are gets (the rest are sets of one key).
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// Key popularity: uniform or zipf:THETA.
    #[arg(long, value_delimiter = ',', default_value = "uniform,zipf:0.99")]
    pub dist: Vec<Dist>,
    /// Client connections.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Requests each connection sends in one write before it waits for their replies
    /// (memtier's --pipeline; latency is then the round trip of the write).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Seconds per timed run.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Runs per configuration and server (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Run the servers on core 0 and the load generator on core 1.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub pin: bool,
    /// The floe-server binary [default: beside this one].
    #[arg(long)]
    pub floe_server: Option<PathBuf>,
    /// The memcached binary.
    #[arg(long, default_value = "memcached")]
    pub memcached: PathBuf,
    /// Measure the hit ratio under eviction (cache-aside) instead of speed.
    #[arg(long)]
    pub cache_aside: bool,
    /// Measure hit ratios on the eviction traces of `hit_ratio.rs` instead of speed (one
    /// connection per server, `--memory-mb`, each `--value-bytes`; list memcached first: the
    /// others are reported in points against it).
    #[arg(long)]
    pub hit_ratio: bool,
    /// The traces of `--hit-ratio`: recency:F (each key read once after F of the cache's
    /// worth of later sets), zipf, scan, one-hit, sets-gets.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "recency:0.15,recency:0.3,recency:0.6,zipf,scan,one-hit,sets-gets"
    )]
    pub traces: Vec<String>,
    /// Requests per server in the cache-aside run.
    #[arg(long, default_value = "2000000", value_parser = parse_count)]
    pub requests: u64,
    /// Measure warm restarts instead of speed (`warm_restart.rs`): fill, stop, start again
    /// on the same state (floe-server -e, memcached -e), time until the first hit and until
    /// every key hits.
    #[arg(long)]
    pub warm_restart: bool,
    /// Where the warm-restart runs keep their state (a tmpfs by default, as memcached asks
    /// for its memory file).
    #[arg(long, default_value = "/dev/shm")]
    pub state_dir: PathBuf,
}

/// A server process started by the bench; killed on drop.
pub(crate) struct Running {
    pub(crate) name: String,
    child: Child,
    pub(crate) address: SocketAddr,
    /// Stopped and waited for already (`stop_with`).
    stopped: bool,
    /// A directory of its own to remove once it has stopped (floe-persist's).
    state: Option<PathBuf>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
        if let Some(state) = self.state.take() {
            let _ = std::fs::remove_dir_all(state);
        }
    }
}

impl Running {
    /// Stop the server (unless stopped already): SIGTERM, then SIGKILL after 3 s.
    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        // SIGTERM first (floe-server shuts down cleanly on it), then make sure.
        // SAFETY: `kill` on a child we started and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Send `signal` and wait for the server to exit; how long that took.
    pub(crate) fn stop_with(&mut self, signal: i32) -> Result<Duration, String> {
        let began = Instant::now();
        // SAFETY: `kill` on a child we started and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        self.child
            .wait()
            .map_err(|e| format!("waiting for {}: {e}", self.name))?;
        self.stopped = true;
        Ok(began.elapsed())
    }

    /// CPU seconds (user, system) the server has used so far, from `/proc`.
    fn cpu_seconds(&self) -> (f64, f64) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())) else {
            return (f64::NAN, f64::NAN);
        };
        // Fields after the command name (which is in parentheses and may hold spaces).
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            return (f64::NAN, f64::NAN);
        };
        let fields: Vec<&str> = after.split(' ').collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
        (ticks(11) / hz, ticks(12) / hz)
    }
}

fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Start server `name` (floe, memcached, floe=PATH) with the bench's flags and `extra`, and
/// wait until it listens.
pub(crate) fn start_server(
    name: &str,
    args: &ServerArgs,
    memory_mb: usize,
    extra: &[&str],
) -> Result<Running, String> {
    let port = free_port().map_err(|e| format!("no free port: {e}"))?;
    let binary = match name {
        "floe" | "floe-persist" => match &args.floe_server {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .map_err(|e| e.to_string())?
                .with_file_name("floe-server"),
        },
        "memcached" => args.memcached.clone(),
        // Another floe-server build, to compare two builds in one run (with -e: persisting).
        other if other.starts_with("floe=") => PathBuf::from(&other["floe=".len()..]),
        other if other.starts_with("floe-persist=") => {
            PathBuf::from(&other["floe-persist=".len()..])
        }
        other => {
            return Err(format!(
                "unknown server {other:?} (floe, floe-persist, memcached, floe=PATH, floe-persist=PATH)"
            ))
        }
    };
    let persisting = name == "floe-persist" || name.starts_with("floe-persist=");
    let mut command = if args.pin {
        let mut c = Command::new("taskset");
        c.args(["-c", "0"]).arg(&binary);
        c
    } else {
        Command::new(&binary)
    };
    command.args([
        "-p",
        &port.to_string(),
        "-l",
        "127.0.0.1",
        "-t",
        &args.server_threads.to_string(),
        "-m",
        &memory_mb.to_string(),
        "-c",
        "4096",
        "-U",
        "0",
    ]);
    command.args(extra);
    // floe-server with its items kept in a directory (-e) that starts empty: what journaling
    // every write costs, beside the same server without it.
    let persist_dir = args
        .state_dir
        .join(format!("floe-bench-{}-{port}", std::process::id()));
    if persisting {
        let _ = std::fs::remove_dir_all(&persist_dir);
        command.arg("-e").arg(&persist_dir);
    }
    // SAFETY: geteuid has no preconditions.
    if name == "memcached" && unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {}: {e} (is it installed? ci/server.sh installs memcached)",
                binary.display()
            )
        })?;
    let address: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut running = Running {
        name: name.to_string(),
        child,
        address,
        stopped: false,
        state: persisting.then_some(persist_dir),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while StdStream::connect(address).is_err() {
        if Instant::now() > deadline || matches!(running.child.try_wait(), Ok(Some(_))) {
            return Err(format!("{name} did not start listening on {address}"));
        }
        // Short: the warm-restart runs time how soon a server listens.
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(running)
}

pub(crate) fn key(i: u64) -> [u8; 20] {
    let mut key = *b"key:0000000000000000";
    let mut rest = i;
    for digit in key[4..].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    key
}

/// Draws made before timing, used in a cycle: key indexes from the run's distribution and
/// get-or-set coins (uniform), so the load generator's loop only copies bytes.
struct Draws {
    keys: Vec<[u8; 20]>,
    indexes: Vec<u32>,
    gets: Vec<bool>,
    next_index: usize,
    next_coin: usize,
}

impl Draws {
    fn new(load: &Load<'_>) -> Draws {
        const DRAWS: usize = 1 << 21;
        let mut sampler = load.dist.sampler(load.keys, load.seed);
        let mut coin = Dist::Uniform.sampler(1 << 20, load.seed ^ 0x5eed);
        let threshold = (load.args.get_ratio * (1 << 20) as f64) as u64;
        Draws {
            keys: (0..load.keys).map(key).collect(),
            indexes: (0..DRAWS).map(|_| sampler.next_index() as u32).collect(),
            gets: (0..DRAWS / 4)
                .map(|_| coin.next_index() < threshold)
                .collect(),
            next_index: 0,
            next_coin: 0,
        }
    }

    fn index(&mut self) -> u64 {
        self.next_index = (self.next_index + 1) % self.indexes.len();
        self.indexes[self.next_index] as u64
    }

    fn is_get(&mut self) -> bool {
        self.next_coin = (self.next_coin + 1) % self.gets.len();
        self.gets[self.next_coin]
    }
}

/// CPU seconds (user + system) this thread has used.
fn thread_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct we pass; RUSAGE_THREAD is Linux's.
    let usage = unsafe {
        let mut usage = core::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Store every key with a value of `bytes` (pipelined, `noreply`, then one synchronous
/// request so the load is complete when this returns).
pub(crate) fn preload(address: SocketAddr, keys: u64, bytes: usize) -> io::Result<()> {
    let mut stream = StdStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let value = vec![b'v'; bytes];
    let mut buffer = Vec::with_capacity(1 << 20);
    for i in 0..keys {
        buffer.extend_from_slice(b"set ");
        buffer.extend_from_slice(&key(i));
        buffer.extend_from_slice(format!(" 0 0 {bytes} noreply\r\n").as_bytes());
        buffer.extend_from_slice(&value);
        buffer.extend_from_slice(b"\r\n");
        if buffer.len() > (1 << 20) - bytes - 64 {
            stream.write_all(&buffer)?;
            buffer.clear();
        }
    }
    buffer.extend_from_slice(b"version\r\n");
    stream.write_all(&buffer)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 256];
    while !reply.ends_with(b"\r\n") {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    if !reply.starts_with(b"VERSION") {
        return Err(io::Error::other(format!(
            "preload answered {:?}",
            String::from_utf8_lossy(&reply)
        )));
    }
    Ok(())
}

/// A get's or a set's reply, parsed as far as `buffer` goes: `Some((consumed, hits))` when
/// complete. Errors on anything a correct server would not send.
fn parse_reply(buffer: &[u8], get: bool) -> io::Result<Option<(usize, usize)>> {
    let bad = |what: &[u8]| {
        io::Error::other(format!(
            "unexpected reply {:?}",
            String::from_utf8_lossy(&what[..what.len().min(80)])
        ))
    };
    if !get {
        return match buffer.iter().position(|&b| b == b'\n') {
            None => Ok(None),
            Some(end) if &buffer[..=end] == b"STORED\r\n" => Ok(Some((end + 1, 0))),
            Some(end) => Err(bad(&buffer[..=end])),
        };
    }
    let mut pos = 0;
    let mut hits = 0;
    loop {
        let rest = &buffer[pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Ok(None);
        };
        let line = &rest[..=end];
        if line == b"END\r\n" {
            return Ok(Some((pos + end + 1, hits)));
        }
        if !line.starts_with(b"VALUE ") {
            return Err(bad(line));
        }
        let length: usize = std::str::from_utf8(&line[..line.len() - 2])
            .ok()
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| bad(line))?;
        let block = end + 1 + length + 2;
        if rest.len() < block {
            return Ok(None);
        }
        pos += block;
        hits += 1;
    }
}

struct Connection {
    stream: TcpStream,
    input: Vec<u8>,
    sent_at: Instant,
    /// The requests of the write in flight (get or set), and how many are answered.
    gets: Vec<bool>,
    answered: usize,
    /// The key of a cache-aside get, to set on a miss.
    pending_key: u64,
}

/// What one timed run measured.
struct Measured {
    requests: u64,
    keys: u64,
    gets: u64,
    hits: u64,
    seconds: f64,
    /// The load generator's CPU use, percent of one core (near 100: the client, not the
    /// server, may be the limit).
    client_cpu: f64,
    latency: Histogram<u64>,
}

/// The load of one run.
struct Load<'a> {
    args: &'a ServerArgs,
    keys: u64,
    value: Vec<u8>,
    multiget: usize,
    dist: Dist,
    seed: u64,
    /// Stop after this many requests instead of after `seconds`.
    requests: Option<u64>,
    cache_aside: bool,
    /// Requests before hits and gets are counted (the cache-aside run's warm-up).
    warmup: u64,
}

fn drive(address: SocketAddr, load: &Load<'_>) -> io::Result<Measured> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut connections = Vec::new();
    for i in 0..load.args.connections {
        let std = StdStream::connect(address)?;
        std.set_nodelay(true)?;
        std.set_nonblocking(true)?;
        let mut stream = TcpStream::from_std(std);
        poll.registry()
            .register(&mut stream, Token(i), Interest::READABLE)?;
        connections.push(Connection {
            stream,
            input: Vec::new(),
            sent_at: Instant::now(),
            gets: Vec::new(),
            answered: 0,
            pending_key: 0,
        });
    }
    let mut draws = Draws::new(load);
    let mut latency = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("bounds");
    let mut measured = Measured {
        requests: 0,
        keys: 0,
        gets: 0,
        hits: 0,
        seconds: 0.0,
        client_cpu: 0.0,
        latency: Histogram::new(3).expect("histogram"),
    };
    let mut request = Vec::with_capacity(64 * 30);
    let set_tail = format!(" 0 0 {}\r\n", load.value.len()).into_bytes();
    let pipeline = if load.cache_aside {
        1
    } else {
        load.args.pipeline
    };
    // One write per connection: `pipeline` requests (or the set after a cache-aside miss).
    let mut send =
        |connection: &mut Connection, draws: &mut Draws, miss: Option<u64>| -> io::Result<()> {
            request.clear();
            connection.gets.clear();
            connection.answered = 0;
            for _ in 0..if miss.is_some() { 1 } else { pipeline } {
                if let Some(k) = miss {
                    // Cache-aside: the value was missing; store it.
                    connection.gets.push(false);
                    request.extend_from_slice(b"set ");
                    request.extend_from_slice(&draws.keys[k as usize]);
                    request.extend_from_slice(&set_tail);
                    request.extend_from_slice(&load.value);
                    request.extend_from_slice(b"\r\n");
                } else if load.cache_aside || draws.is_get() {
                    connection.gets.push(true);
                    request.extend_from_slice(b"get");
                    for _ in 0..load.multiget {
                        let k = draws.index();
                        connection.pending_key = k;
                        request.push(b' ');
                        request.extend_from_slice(&draws.keys[k as usize]);
                    }
                    request.extend_from_slice(b"\r\n");
                } else {
                    connection.gets.push(false);
                    request.extend_from_slice(b"set ");
                    let k = draws.index();
                    request.extend_from_slice(&draws.keys[k as usize]);
                    request.extend_from_slice(&set_tail);
                    request.extend_from_slice(&load.value);
                    request.extend_from_slice(b"\r\n");
                }
            }
            connection.sent_at = Instant::now();
            // Requests are far smaller than a socket buffer: written whole or the run fails.
            connection.stream.write_all(&request)
        };
    for connection in &mut connections {
        send(connection, &mut draws, None)?;
    }
    let start = Instant::now();
    let cpu_start = thread_cpu_seconds();
    let deadline = start + Duration::from_secs_f64(load.args.seconds);
    let mut chunk = vec![0u8; 256 << 10];
    'run: loop {
        poll.poll(&mut events, Some(Duration::from_millis(100)))?;
        for event in events.iter() {
            let connection = &mut connections[event.token().0];
            loop {
                match connection.stream.read(&mut chunk) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => connection.input.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            let mut miss = None;
            let mut offset = 0;
            while connection.answered < connection.gets.len() {
                let get = connection.gets[connection.answered];
                let Some((consumed, hits)) = parse_reply(&connection.input[offset..], get)? else {
                    break;
                };
                offset += consumed;
                connection.answered += 1;
                measured.requests += 1;
                if get {
                    if measured.requests > load.warmup {
                        measured.gets += load.multiget as u64;
                        measured.hits += hits as u64;
                    }
                    measured.keys += load.multiget as u64;
                    if load.cache_aside && hits == 0 {
                        miss = Some(connection.pending_key);
                    }
                } else {
                    measured.keys += 1;
                }
            }
            connection.input.drain(..offset);
            if connection.answered < connection.gets.len() {
                continue;
            }
            // The round trip of the whole pipelined write.
            let took = connection.sent_at.elapsed().as_nanos() as u64;
            latency.record(took.max(1)).expect("in bounds");
            if let Some(limit) = load.requests {
                if measured.requests >= limit {
                    break 'run;
                }
            } else if Instant::now() >= deadline {
                break 'run;
            }
            send(connection, &mut draws, miss)?;
        }
        if load.requests.is_none() && Instant::now() >= deadline + Duration::from_secs(5) {
            return Err(io::Error::other("no reply for 5 seconds"));
        }
    }
    measured.seconds = start.elapsed().as_secs_f64();
    measured.client_cpu = (thread_cpu_seconds() - cpu_start) / measured.seconds * 100.0;
    measured.latency = latency;
    Ok(measured)
}

/// Check `floe-bench server`'s flags and pin this process (the load generator) if asked:
/// what every mode of the subcommand does first (`main.rs` picks the mode).
pub(crate) fn prepare(args: &ServerArgs) -> Result<(), String> {
    if args.servers.is_empty()
        || args.value_bytes.is_empty()
        || args.multiget.is_empty()
        || args.dist.is_empty()
    {
        return Err("nothing to measure".into());
    }
    if !(0.0..=1.0).contains(&args.get_ratio) {
        return Err(format!("--get-ratio {} is outside [0, 1]", args.get_ratio));
    }
    if args.connections == 0
        || args.repeat == 0
        || args.keys == 0
        || args.pipeline == 0
        || args.multiget.contains(&0)
    {
        return Err(
            "--connections, --pipeline, --repeat, --keys and --multiget must be at least 1".into(),
        );
    }
    if args.pin {
        if let Some(core) = core_affinity::get_core_ids().and_then(|ids| ids.into_iter().nth(1)) {
            core_affinity::set_for_current(core);
        }
    }
    Ok(())
}

/// The load mode: throughput and latency of each server under the mixes asked for.
pub(crate) fn main(args: &ServerArgs, cpu: &str) -> Result<(), String> {
    println!(
        "# floe-bench server: {} keys of 20 bytes, {:.0}% gets, {} connections x {} pipelined requests, servers -t {} -m {}{}, {} s per run, median of {}; CPU {cpu}",
        args.keys,
        args.get_ratio * 100.0,
        args.connections,
        args.pipeline,
        args.server_threads,
        args.memory_mb,
        if args.pin { ", servers on core 0 and the load generator on core 1" } else { "" },
        args.seconds,
        args.repeat
    );
    println!("value_B\tmultiget\tdist\tserver\tMkeys/s\tkreq/s\thit%\tp50_us\tp99_us\tp99.9_us\tuser%\tsys%\tclient%\tfloe/memcached");
    for &bytes in &args.value_bytes {
        let servers: Vec<Running> = args
            .servers
            .iter()
            .map(|name| start_server(name, args, args.memory_mb, &[]))
            .collect::<Result<_, _>>()?;
        for server in &servers {
            preload(server.address, args.keys, bytes)
                .map_err(|e| format!("preloading {}: {e}", server.name))?;
        }
        for &multiget in &args.multiget {
            for &dist in &args.dist {
                // samples[server] = (keys/s, req/s, hit ratio, p50, p99, p99.9, server user and
                // system CPU %, load generator CPU %) per run.
                let mut samples = vec![Vec::new(); servers.len()];
                for round in 0..args.repeat {
                    for (s, server) in servers.iter().enumerate() {
                        let load = Load {
                            args,
                            keys: args.keys,
                            value: vec![b'w'; bytes],
                            multiget,
                            dist,
                            seed: 1 + round as u64,
                            requests: None,
                            cache_aside: false,
                            warmup: 0,
                        };
                        let cpu_before = server.cpu_seconds();
                        let m = drive(server.address, &load)
                            .map_err(|e| format!("{}: {e}", server.name))?;
                        let cpu_after = server.cpu_seconds();
                        let user = (cpu_after.0 - cpu_before.0) / m.seconds * 100.0;
                        let system = (cpu_after.1 - cpu_before.1) / m.seconds * 100.0;
                        let q = |p: f64| m.latency.value_at_quantile(p) as f64 / 1000.0;
                        samples[s].push([
                            m.keys as f64 / m.seconds / 1e6,
                            m.requests as f64 / m.seconds / 1e3,
                            if m.gets > 0 {
                                m.hits as f64 / m.gets as f64 * 100.0
                            } else {
                                0.0
                            },
                            q(0.5),
                            q(0.99),
                            q(0.999),
                            user,
                            system,
                            m.client_cpu,
                        ]);
                    }
                }
                let medians: Vec<[f64; 9]> = samples
                    .iter()
                    .map(|runs| {
                        core::array::from_fn(|i| median(runs.iter().map(|r| r[i]).collect()))
                    })
                    .collect();
                let floe = servers.iter().position(|s| s.name == "floe");
                let memcached = servers.iter().position(|s| s.name == "memcached");
                for (s, server) in servers.iter().enumerate() {
                    let m = medians[s];
                    let ratio = match (floe, memcached) {
                        (Some(f), Some(mc)) if s == f => {
                            format!("{:.2}", medians[f][0] / medians[mc][0])
                        }
                        _ => String::new(),
                    };
                    println!(
                        "{bytes}\t{multiget}\t{dist}\t{}\t{:.3}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.0}\t{:.0}\t{:.0}\t{ratio}",
                        server.name, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8]
                    );
                }
            }
        }
    }
    Ok(())
}

/// Hit ratio under eviction: items of `--keys` keys take twice `-m`.
pub(crate) fn cache_aside(args: &ServerArgs, cpu: &str) -> Result<(), String> {
    println!(
        "# floe-bench server --cache-aside: get, set on a miss; {} requests per server (hit ratio of the second half); -m {} MiB; key space twice -m; CPU {cpu}",
        args.requests, args.memory_mb
    );
    println!("value_B\tdist\tserver\tkeys\thit%\tkreq/s\tp99_us");
    for &bytes in &args.value_bytes {
        // The key space is sized on memcached's cost per item (a header of about 50 bytes
        // beyond the ~20-byte key and the value), the same for both servers. floe-server's
        // items cost more, not about the same: 224 bytes for a 100-byte value under a
        // 20-byte key against memcached's 192 (map entry with the key inline, value
        // allocation, queue node: BENCHMARKS.md), so a smaller share of the keys fits in its
        // -m.
        let per_item = bytes as u64 + 20 + 56;
        let keys = ((2 * args.memory_mb as u64) << 20) / per_item;
        for &dist in &args.dist {
            for name in &args.servers {
                let server = start_server(name, args, args.memory_mb, &[])?;
                let load = Load {
                    args,
                    keys,
                    value: vec![b'c'; bytes],
                    multiget: 1,
                    dist,
                    seed: 7,
                    requests: Some(args.requests),
                    cache_aside: true,
                    // The first half fills the cache; the hit ratio is of the second half.
                    warmup: args.requests / 2,
                };
                let m = drive(server.address, &load).map_err(|e| format!("{name}: {e}"))?;
                println!(
                    "{bytes}\t{dist}\t{name}\t{keys}\t{:.2}\t{:.1}\t{:.1}",
                    m.hits as f64 / m.gets.max(1) as f64 * 100.0,
                    m.requests as f64 / m.seconds / 1e3,
                    m.latency.value_at_quantile(0.99) as f64 / 1000.0
                );
            }
        }
    }
    Ok(())
}
