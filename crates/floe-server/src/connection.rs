//! A connection's requests, independent of its socket: the bytes read and not yet
//! answered, what is left to discard, and which protocol it speaks. The server's event
//! loop feeds it what it reads; tests and the fuzz target feed it directly.
//!
//! Answering is paced by the output: [`Requests::answer`] is given room for so many bytes
//! of replies and stops once they passed it ([`Requests::waiting`] then says requests are
//! left); the caller sends the output and answers again.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::{
    binary,
    cache::Worker,
    protocol::MAX_GET_LINE,
    text::{self, TextState},
};

/// Capacity an idle connection keeps of each of its buffers, input and output
/// ([`give_back`]): a large request or reply (a value of up to the item size limit) must not
/// stay allocated for the connection's life, so that idle connections cost about what
/// memcached's do (it shrinks a read buffer above 8 KiB when a connection goes idle), not
/// their largest request each.
pub const IDLE_BUFFER_CAPACITY: usize = 4 << 10;

/// A buffer larger than this is given back as soon as it is empty, not only when its
/// connection goes quiet: a megabyte request held by each of a thousand connections until
/// the sweep would take a gigabyte at the peak, which the allocator then keeps. Smaller ones
/// wait for the sweep, so a stream of (say) 16-value multi-gets of 16 KiB does not reallocate
/// its 256 KiB reply every time (that measured 2.6x slower).
pub const LARGE_BUFFER: usize = 512 << 10;

/// Give back an empty buffer's capacity beyond [`IDLE_BUFFER_CAPACITY`] if it holds more than
/// `above` bytes (the one rule for input and output).
pub fn give_back(buffer: &mut Vec<u8>, above: usize) {
    debug_assert!(buffer.is_empty());
    if buffer.capacity() > above.max(IDLE_BUFFER_CAPACITY) {
        if buffer.capacity() >= TRIM_AFTER {
            GAVE_BACK_LARGE.store(true, Ordering::Relaxed);
        }
        *buffer = Vec::with_capacity(IDLE_BUFFER_CAPACITY);
    }
}

/// A buffer this large given back asks for [`trim_heap`].
const TRIM_AFTER: usize = 128 << 10;

/// Whether a large buffer was given back since the last [`trim_heap`].
static GAVE_BACK_LARGE: AtomicBool = AtomicBool::new(false);

/// Hand the heap's free pages back to the kernel if a large buffer was given back since the
/// last call (the housekeeping thread calls it every second). glibc serves a block of 128 KiB
/// or more by `mmap` only until the first such block is freed; then it raises that threshold
/// (up to 32 MiB) and serves later ones from the heap, where freed blocks stay: 1000 clients
/// that each sent and read a 1 MB value then held 120 MiB at rest (memcached 47). Keeping
/// every large block an `mmap` of its own instead (a fixed `M_MMAP_THRESHOLD`) cost 3-4x the
/// throughput of 256 KiB and 1 MB values (a `munmap` and fresh page faults per value); a
/// trim once the buffers are given back costs the requests nothing.
pub fn trim_heap() {
    if !GAVE_BACK_LARGE.swap(false, Ordering::Relaxed) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes an integer (the padding to keep) and walks the allocator's
    // own state under its locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The unanswered input of one connection.
#[derive(Default)]
pub struct Requests {
    input: Vec<u8>,
    start: usize,
    /// Bytes still to discard from the input (a refused value's data).
    swallow: usize,
    /// Set by the connection's first byte: `0x80` for the binary protocol.
    binary: Option<bool>,
    text: TextState,
    /// The last answer stopped for want of output room: complete requests (or the rest of
    /// a get line) may be waiting.
    stopped: bool,
}

impl Requests {
    /// The requests of connection number `connection` (its number in the logs: the server
    /// gives its socket's descriptor, as memcached's logs do).
    pub fn for_connection(connection: usize) -> Self {
        let mut requests = Requests::default();
        requests.text.connection = connection;
        requests
    }

    /// The connection's number in the logs.
    pub fn connection(&self) -> usize {
        self.text.connection
    }

    /// Bytes read and not yet answered.
    pub fn pending(&self) -> usize {
        self.input.len() - self.start
    }

    /// Take bytes read from the client (discarding what a refused store left to swallow).
    pub fn take(&mut self, mut bytes: &[u8]) {
        if self.swallow > 0 {
            let skip = self.swallow.min(bytes.len());
            self.swallow -= skip;
            bytes = &bytes[skip..];
        }
        self.input.extend_from_slice(bytes);
    }

    /// Bytes allocated for input (tests: what an idle connection holds).
    pub fn input_capacity(&self) -> usize {
        self.input.capacity()
    }

    /// The connection has gone quiet: if every byte read is answered, give back input
    /// capacity beyond [`IDLE_BUFFER_CAPACITY`]. Not done after each request: a client
    /// sending large values in a stream would reallocate (and fault in) its buffer every time.
    pub fn release_idle(&mut self) {
        if self.pending() == 0 {
            self.input.clear();
            self.start = 0;
            give_back(&mut self.input, 0);
        }
    }

    /// Whether the last [`answer`](Self::answer) stopped for want of output room, leaving
    /// requests to answer (call it again once the output has drained, before taking more).
    pub fn waiting(&self) -> bool {
        self.stopped
    }

    /// Answer the complete requests taken so far, appending the replies to `out`, until
    /// they pass `room` bytes (one request, or one key of a multi-get, is answered at
    /// least); `true` when the connection should be closed once `out` is written.
    pub fn answer(&mut self, worker: &mut Worker, out: &mut Vec<u8>, room: usize) -> bool {
        self.stopped = false;
        if self.pending() == 0 {
            return false;
        }
        let input = &self.input[self.start..];
        let binary = *self.binary.get_or_insert(input[0] == 0x80);
        let mut session = worker.session();
        let served = if binary {
            binary::serve(input, out, &mut session, room)
        } else {
            text::serve(input, out, &mut session, &mut self.text, room)
        };
        drop(session);
        self.start += served.consumed;
        self.swallow = served.swallow;
        self.stopped = served.stopped;
        if self.start == self.input.len() {
            self.input.clear();
            self.start = 0;
            give_back(&mut self.input, LARGE_BUFFER);
        } else if self.start > self.input.len() / 2 {
            self.input.drain(..self.start);
            self.start = 0;
        }
        if served.close {
            return true;
        }
        if self.pending() > input_limit(worker.cache().settings().max_item_size) {
            // Cannot happen for well-formed input (lines and blocks are bounded before they
            // are buffered); a guard against unbounded growth all the same.
            out.extend_from_slice(b"SERVER_ERROR request too large\r\n");
            return true;
        }
        false
    }
}

/// The most unanswered input a connection may hold: the longest line and the largest
/// value's data block, with room for the reads that brought them.
fn input_limit(max_item_size: usize) -> usize {
    MAX_GET_LINE + max_item_size + 2 + (1 << 20)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cache::{Cache, Settings};

    /// A megabyte value read in pieces takes a megabyte of input; once the connection is idle
    /// it keeps at most `IDLE_BUFFER_CAPACITY`, and a request still arriving is kept whole.
    #[test]
    fn an_answered_large_request_gives_its_input_back() {
        let cache = Arc::new(Cache::with_manual_clock(Settings::default()).expect("cache"));
        let mut worker = cache.worker(0);
        let mut requests = Requests::default();
        let mut out = Vec::new();
        let value = vec![b'v'; 1 << 20];
        requests.take(format!("set big 0 0 {}\r\n", value.len()).as_bytes());
        for piece in value.chunks(64 << 10) {
            requests.take(piece);
            assert!(!requests.answer(&mut worker, &mut out, usize::MAX));
        }
        assert!(requests.input_capacity() >= 1 << 20);
        requests.take(b"\r\nget big\r\nset half 0 0 4\r\nab");
        assert!(!requests.answer(&mut worker, &mut out, usize::MAX));
        // The half-read set waits, whole, through a release.
        requests.release_idle();
        assert_eq!(requests.pending(), b"set half 0 0 4\r\nab".len());
        requests.take(b"cd\r\n");
        assert!(!requests.answer(&mut worker, &mut out, usize::MAX));
        assert_eq!(requests.pending(), 0);
        requests.release_idle();
        assert!(
            requests.input_capacity() <= IDLE_BUFFER_CAPACITY,
            "an idle connection holds {} bytes of input",
            requests.input_capacity()
        );
        assert!(out.starts_with(b"STORED\r\nVALUE big 0 1048576\r\n"));
        assert!(out.ends_with(b"\r\nEND\r\nSTORED\r\n"));
    }
}
