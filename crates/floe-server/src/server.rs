//! The network side: one mio event loop per worker thread, each with its own listening
//! socket on the same address (`SO_REUSEPORT`, so the kernel spreads connections over the
//! workers and no thread hands sockets to another), and the connections it accepted.
//!
//! A connection reads until the socket has nothing more (edge-triggered), answers the
//! complete requests in what it has (one cache session, so one pin of the index, per read),
//! and writes. **Back-pressure:** answering stops once a connection's unsent output passes
//! [`OUTPUT_HIGH_WATER`] (between two requests, or between two keys of a multi-get: see
//! `text`), and so does reading; both resume once the client has taken the output down to
//! [`OUTPUT_LOW_WATER`], the requests left waiting first. A client that sends and never
//! reads therefore holds at most that much output (plus one value) and its socket
//! buffers, whatever it asked for, and stalls no one else. Input is bounded by the longest
//! request: a line limit (`protocol::MAX_LINE`, `protocol::MAX_GET_LINE`) and `-I` for a data
//! block; a larger value's data is discarded as it arrives, never buffered whole.

use std::{
    io::{self, Read, Write},
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use mio::{
    net::{TcpListener, TcpStream},
    Events, Interest, Poll, Token,
};

use crate::{
    cache::{Cache, Counter, Worker},
    connection::{give_back, Requests, LARGE_BUFFER},
    log,
    stats::{CURR_CONNECTIONS, REJECTED_CONNECTIONS, TOTAL_CONNECTIONS},
};

/// Stop answering and reading for a connection with this much unsent output.
pub const OUTPUT_HIGH_WATER: usize = 4 << 20;
/// Resume reading once its unsent output is down to this.
pub const OUTPUT_LOW_WATER: usize = 1 << 20;
/// How often an event loop gives back the buffers of connections that were not served since
/// its last look (so a connection gives them back after one to two of these of quiet).
const IDLE_SWEEP: Duration = Duration::from_secs(1);

/// The token of listener `i` of an event loop: counted down from the top, far above any
/// connection's (a slab index).
fn listener_token(i: usize) -> Token {
    Token(usize::MAX - i)
}
const READ_CHUNK: usize = 64 << 10;

/// How the server runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Addresses to listen on, at least one (port 0: any free port, the same for every
    /// address: the first one's).
    pub listen: Vec<SocketAddr>,
    /// The listen queue's length (`-b`; memcached's default 1024).
    pub backlog: i32,
    /// Most connections open at once (`-c`); more are refused with an error line.
    pub max_connections: usize,
    /// Run the housekeeping thread, which unlinks expired items every 5 s
    /// ([`Cache::reclaim_expired`]). The `floe-server` binary always does; tests that call
    /// `reclaim_expired` themselves on a manual clock turn it off, so that no sweep of its
    /// own comes between theirs and their counts are exact.
    pub housekeeping: bool,
    /// With `-e`: sync the journals this often, in milliseconds (rounded up to the
    /// housekeeping thread's 100 ms tick; 0: never, only snapshots are synced).
    pub sync_ms: u64,
}

/// Write a snapshot of a persistent cache (a no-op without `-e`), logging what came of it.
pub fn checkpoint(cache: &Cache) {
    let started = Instant::now();
    match cache.checkpoint() {
        Ok(Some(bytes)) => log!(
            1,
            "snapshot of {bytes} bytes written in {:.3} s",
            started.elapsed().as_secs_f64()
        ),
        Ok(None) => {}
        Err(error) => log!(0, "cannot write a snapshot: {error}"),
    }
}

/// A running server: its address and a way to stop it.
pub struct Server {
    /// Non-empty.
    addresses: Vec<SocketAddr>,
    shutdown: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    /// Bind every worker's socket and start the workers and (unless `config` turns it off)
    /// the housekeeping thread.
    pub fn start(
        cache: Arc<Cache>,
        config: &Config,
        shutdown: Arc<AtomicBool>,
    ) -> io::Result<Server> {
        crate::stats::MAX_CONNECTIONS.store(config.max_connections as u64, Ordering::Relaxed);
        let workers = cache.settings().workers;
        let Some((&requested, others)) = config.listen.split_first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no address to listen on",
            ));
        };
        let first = bind(requested, config.backlog)?;
        let address = first.local_addr()?.as_socket().expect("an IP socket");
        crate::stats::TCP_PORT.store(address.port() as u64, Ordering::Relaxed);
        crate::stats::BACKLOG.store(config.backlog as u64, Ordering::Relaxed);
        // Every address on the first one's port unless it names its own.
        let addresses: Vec<SocketAddr> = std::iter::once(address)
            .chain(others.iter().map(|other| match other.port() {
                0 => SocketAddr::new(other.ip(), address.port()),
                _ => *other,
            }))
            .collect();
        // Each worker listens on every address (SO_REUSEPORT: the kernel spreads the
        // connections over the workers).
        let mut listeners = Vec::with_capacity(workers);
        let mut first = Some(first);
        for _ in 0..workers {
            let mut sockets = Vec::with_capacity(addresses.len());
            for (i, &address) in addresses.iter().enumerate() {
                sockets.push(match (i, first.take()) {
                    (0, Some(socket)) => socket,
                    _ => bind(address, config.backlog)?,
                });
            }
            listeners.push(sockets);
        }
        crate::stats::LISTENERS.store((workers * addresses.len()) as u64, Ordering::Relaxed);
        if let Ok(mut interfaces) = crate::stats::INTERFACES.lock() {
            *interfaces = addresses
                .iter()
                .map(|address| address.ip().to_string())
                .collect::<Vec<_>>()
                .join(",");
        }
        let open = Arc::new(core::sync::atomic::AtomicUsize::new(0));
        let mut threads = Vec::new();
        for (id, sockets) in listeners.into_iter().enumerate() {
            let listeners = sockets
                .into_iter()
                .map(|socket| TcpListener::from_std(socket.into()))
                .collect();
            let mut event_loop = EventLoop {
                poll: Poll::new()?,
                listeners,
                connections: slab::Slab::new(),
                worker: cache.worker(id),
                shutdown: Arc::clone(&shutdown),
                open: Arc::clone(&open),
                max_connections: config.max_connections,
                scratch: vec![0; READ_CHUNK],
                pending_output: 0,
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("floe-worker-{id}"))
                    .spawn(move || {
                        if let Err(error) = event_loop.run() {
                            log!(0, "worker {id} stopped: {error}");
                        }
                    })?,
            );
        }
        if config.housekeeping {
            let housekeeping_stop = Arc::clone(&shutdown);
            let sync_ticks = config.sync_ms.div_ceil(100);
            threads.push(
                std::thread::Builder::new()
                    .name("floe-housekeeping".into())
                    .spawn(move || {
                        // Unlink expired items every few seconds, so their memory comes back
                        // even if no one asks for them and nothing needs evicting; with `-e`,
                        // sync the journals every `sync_ms` and compact them once grown.
                        let mut ticks = 0u64;
                        while !housekeeping_stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(100));
                            ticks += 1;
                            // Every 5 s unless `lru_crawler disable`, and at the next tick
                            // after `lru_crawler crawl`.
                            let due = ticks.is_multiple_of(50);
                            if let Some(unlinked) = crate::crawler::sweep(&cache, due) {
                                if unlinked > 0 {
                                    log!(2, "reclaimed {unlinked} expired items");
                                }
                            }
                            if ticks.is_multiple_of(10) {
                                crate::connection::trim_heap();
                            }
                            if sync_ticks != 0 && ticks.is_multiple_of(sync_ticks) {
                                cache.sync();
                            }
                            if cache.wants_checkpoint() {
                                checkpoint(&cache);
                            }
                        }
                    })?,
            );
        }
        Ok(Server {
            addresses,
            shutdown,
            threads,
        })
    }

    /// The (first) address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.addresses[0]
    }

    /// Every address it listens on.
    pub fn addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// Stop every thread (open connections are closed) and wait for them.
    pub fn stop(mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        self.join();
    }

    /// Wait for the threads (they stop when the shutdown flag is raised).
    pub fn join(&mut self) {
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        self.join();
    }
}

fn bind(address: SocketAddr, backlog: i32) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
    if address.is_ipv6() {
        // `::` alone would take IPv4 too, and collide with `0.0.0.0` listed beside it.
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(backlog)?;
    Ok(socket)
}

struct EventLoop {
    poll: Poll,
    /// One per address, listener `i` registered as `listener_token(i)`.
    listeners: Vec<TcpListener>,
    connections: slab::Slab<Connection>,
    worker: Worker,
    shutdown: Arc<AtomicBool>,
    open: Arc<core::sync::atomic::AtomicUsize>,
    max_connections: usize,
    scratch: Vec<u8>,
    /// Unsent output over this loop's connections (reported to `stats`).
    pending_output: usize,
}

struct Connection {
    stream: TcpStream,
    requests: Requests,
    output: Vec<u8>,
    written: usize,
    /// Answering and reading are paused until the output drains (back-pressure).
    paused: bool,
    /// The client will send no more: close once every request is answered and written.
    eof: bool,
    /// Close once the output is written.
    closing: bool,
    /// Its unsent output as counted in the loop's `pending_output`.
    counted_output: usize,
    /// Served since the loop's last idle sweep (`EventLoop::release_idle`).
    served: bool,
}

impl EventLoop {
    fn run(&mut self) -> io::Result<()> {
        for (i, listener) in self.listeners.iter_mut().enumerate() {
            self.poll
                .registry()
                .register(listener, listener_token(i), Interest::READABLE)?;
        }
        let mut events = Events::with_capacity(256);
        let mut last_sweep = Instant::now();
        while !self.shutdown.load(Ordering::Relaxed) {
            if last_sweep.elapsed() >= IDLE_SWEEP {
                self.release_idle();
                last_sweep = Instant::now();
            }
            match self
                .poll
                .poll(&mut events, Some(Duration::from_millis(100)))
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                let listener = usize::MAX - event.token().0;
                if listener < self.listeners.len() {
                    self.accept(listener);
                    continue;
                }
                let id = event.token().0;
                if !self.connections.contains(id) {
                    continue;
                }
                self.connections[id].served = true;
                let keep = self.serve(id);
                self.count_output(id);
                if !keep {
                    self.close(id);
                }
            }
        }
        for id in self
            .connections
            .iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>()
        {
            self.close(id);
        }
        Ok(())
    }

    /// Give back the buffers of the connections not served since the last sweep that hold
    /// nothing unanswered or unsent (each to `connection::IDLE_BUFFER_CAPACITY`); a busy
    /// connection keeps its buffers between requests.
    fn release_idle(&mut self) {
        let (mut input, mut output, mut input_buffers) = (0, 0, 0);
        for (_, connection) in self.connections.iter_mut() {
            if !std::mem::take(&mut connection.served)
                && connection.written == connection.output.len()
            {
                connection.requests.release_idle();
                connection.output.clear();
                connection.written = 0;
                give_back(&mut connection.output, 0);
            }
            let capacity = connection.requests.input_capacity();
            input += capacity;
            input_buffers += usize::from(capacity > 0);
            output += connection.output.capacity();
        }
        self.worker.set_buffer_bytes(input, output, input_buffers);
    }

    fn accept(&mut self, listener: usize) {
        loop {
            match self.listeners[listener].accept() {
                Ok((mut stream, peer)) => {
                    if self.open.fetch_add(1, Ordering::Relaxed) >= self.max_connections {
                        self.open.fetch_sub(1, Ordering::Relaxed);
                        REJECTED_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                        log!(1, "refused {peer}: too many open connections");
                        // Best effort: the socket is fresh, so the line fits its buffer.
                        let _ = stream.write_all(b"ERROR Too many open connections\r\n");
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    // The connection's number in the logs, as memcached numbers them.
                    let descriptor = std::os::fd::AsRawFd::as_raw_fd(&stream) as usize;
                    let entry = self.connections.vacant_entry();
                    let token = Token(entry.key());
                    if let Err(error) = self.poll.registry().register(
                        &mut stream,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        log!(1, "cannot register {peer}: {error}");
                        self.open.fetch_sub(1, Ordering::Relaxed);
                        continue;
                    }
                    entry.insert(Connection {
                        stream,
                        requests: Requests::for_connection(descriptor),
                        output: Vec::new(),
                        written: 0,
                        paused: false,
                        eof: false,
                        closing: false,
                        counted_output: 0,
                        served: true,
                    });
                    CURR_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                    TOTAL_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                    log!(2, "<{descriptor} new connection from {peer}");
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors and the like: try again at the next event.
                    log!(0, "accept: {e}");
                    return;
                }
            }
        }
    }

    fn close(&mut self, id: usize) {
        let mut connection = self.connections.remove(id);
        log!(2, "<{} connection closed", connection.requests.connection());
        self.pending_output -= connection.counted_output;
        self.worker.set_pending_output(self.pending_output);
        let _ = self.poll.registry().deregister(&mut connection.stream);
        self.open.fetch_sub(1, Ordering::Relaxed);
        CURR_CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
    }

    /// Bring the loop's count of unsent output up to date with connection `id`'s.
    fn count_output(&mut self, id: usize) {
        let connection = &mut self.connections[id];
        let pending = connection.output.len() - connection.written;
        if pending != connection.counted_output {
            self.pending_output = self.pending_output - connection.counted_output + pending;
            connection.counted_output = pending;
            self.worker.set_pending_output(self.pending_output);
        }
    }

    /// Read, answer and write as far as the socket allows; `false` to close.
    fn serve(&mut self, id: usize) -> bool {
        let connection = &mut self.connections[id];
        loop {
            // Write first: it may lift the back-pressure.
            if flush(connection, &self.worker).is_err() {
                return false;
            }
            let pending = connection.output.len() - connection.written;
            if connection.closing {
                return pending > 0;
            }
            if connection.paused {
                if pending > OUTPUT_LOW_WATER {
                    // The socket is full: its next writable edge calls again.
                    return true;
                }
                connection.paused = false;
            }
            // Requests left waiting when the output filled up are answered before more is
            // read (which would only pile up behind them).
            let reading = !connection.requests.waiting() && !connection.eof;
            let mut read_any = false;
            // A read shorter than the buffer took everything the socket held: new data
            // will raise a new edge, so the read that would only say "would block" is
            // skipped (one syscall less per request).
            let mut drained = false;
            if reading {
                loop {
                    match connection.stream.read(&mut self.scratch) {
                        Ok(0) => {
                            connection.eof = true;
                            break;
                        }
                        Ok(n) => {
                            read_any = true;
                            self.worker.count(Counter::BytesRead, n as u64);
                            connection.requests.take(&self.scratch[..n]);
                            if n < self.scratch.len() {
                                drained = true;
                                break;
                            }
                            if connection.requests.pending() > READ_CHUNK * 4 {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            drained = true;
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(_) => return false,
                    }
                }
            }
            let room = OUTPUT_HIGH_WATER.saturating_sub(pending);
            if connection
                .requests
                .answer(&mut self.worker, &mut connection.output, room)
            {
                connection.closing = true;
                continue;
            }
            if connection.requests.waiting()
                || connection.output.len() - connection.written > OUTPUT_HIGH_WATER
            {
                connection.paused = true;
                continue;
            }
            if connection.eof {
                // Everything the client sent is answered: close once it is written.
                connection.closing = true;
                continue;
            }
            if !reading {
                // The waiting requests are answered: read what came meanwhile (it raised
                // no new edge if it came before the socket was drained).
                continue;
            }
            if drained || !read_any {
                return flush(connection, &self.worker).is_ok();
            }
        }
    }
}

/// Write as much output as the socket takes (counted in `worker`'s `bytes_written`).
fn flush(connection: &mut Connection, worker: &Worker) -> io::Result<()> {
    while connection.written < connection.output.len() {
        match connection
            .stream
            .write(&connection.output[connection.written..])
        {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                connection.written += n;
                worker.count(Counter::BytesWritten, n as u64);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    if connection.written == connection.output.len() {
        connection.output.clear();
        connection.written = 0;
        // A burst of output (up to the high water mark and a value) need not stay
        // allocated for the connection's whole life.
        give_back(&mut connection.output, LARGE_BUFFER);
    } else if connection.written > (1 << 20) {
        connection.output.drain(..connection.written);
        connection.written = 0;
    }
    Ok(())
}
