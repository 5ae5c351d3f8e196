//! Memory-aware batching: many requests per call, their cache lines loaded ahead of use.
//!
//! A random access to a table far larger than the caches costs a DRAM round trip (~200 ns on
//! the machines floe is measured on), while the memory system serves many lines at once. One
//! operation at a time keeps only as many misses in flight as the core's reorder window
//! happens to overlap; naming the next requests' lines ahead of time (software prefetch) keeps
//! many more in flight. floe offers two interfaces for this, from the two papers that do it:
//!
//! * [`Batch`] (DLHT's batches): a slice of mixed requests executed **in order**, with the bins
//!   of the next `depth` requests prefetched while the current one runs, and the chained link
//!   buckets of the request `depth / 2` ahead prefetched once its bin has had time to arrive.
//!   Results come back in request order, exactly as if the requests had been called one by one
//!   (they are: only the loads are moved earlier). Optionally stops at the first request that
//!   fails (lock managers: acquire all or stop).
//! * [`Pipeline`] (DRAMHiT's asynchronous pipeline): requests with a caller's tag enter a
//!   bounded window; each is prefetched on entry, and once the window is full each new
//!   submission completes the oldest request whose lines should have arrived. A request whose
//!   bin chains link buckets is sent round once more, after prefetching them, so requests
//!   complete out of order, except that requests on the same key always complete in the
//!   order they were submitted. Completions carry their tags; [`Pipeline::flush`] completes
//!   the rest. No allocation after construction.
//!
//! Why both: a batch preserves program order (needed when requests depend on each other, and
//! what a lock manager wants), the pipeline never waits on a request that needs a second line
//! (only the order of requests on the same key is kept, see [`Pipeline`]).
//!
//! When the table fits in the cache, prefetching only adds instructions: [`Prefetch::Auto`]
//! (the default) prefetches only for tables of at least [`PREFETCH_THRESHOLD_BYTES`], a
//! threshold measured with `floe-bench sweep --param keys` (BENCHMARKS.md).

use core::{fmt, hash::BuildHasher};
use std::collections::VecDeque;

use crate::{
    raw::layouts::{Driver, PinnedDriver},
    Counter, Error, FlatMap, Inline, InlineKey, Insert,
};

/// What batches and the pipeline need of a map: every facade implements it, and nothing here
/// reaches into a facade past it.
pub(crate) trait BatchTarget {
    /// The facade's key type.
    type Key: Copy;
    /// The facade's value type.
    type Value: Copy;
    /// The table driver (prefetches, the table's size).
    fn raw(&self) -> &Driver;
    /// The key's hash and word.
    fn locate(&self, key: Self::Key) -> (u64, u64);
    /// Run `request` on the located key.
    fn execute_at(
        &self,
        hash: u64,
        word: u64,
        request: Request<Self::Key, Self::Value>,
    ) -> Response<Self::Value>;
    /// Gets of the located keys into `out` as value words, `depth` prefetched ahead
    /// (`RawMap::get_batch`).
    fn get_words_at(&self, located: &[(u64, u64)], depth: usize, out: &mut [Option<u64>]);
}

/// Tables at least this large are prefetched under [`Prefetch::Auto`] (bytes of bins and link
/// buckets). Measured (BENCHMARKS.md, "table-size sweep"): batched gets with prefetch ran at
/// 0.62-0.73x of the same batches without it on tables of 0.2 and 0.7 MiB, and 1.10-1.96x on
/// tables of 4.3 MiB and more; the crossover lies between, around the size of the L2 (2 MiB
/// per core on the machine measured).
pub const PREFETCH_THRESHOLD_BYTES: usize = 2 << 20;

/// Deepest prefetch window a [`Batch`] keeps.
pub const MAX_DEPTH: usize = 128;

/// One operation of a batch or pipeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Request<K, V> {
    /// [`FlatMap::get`].
    Get(K),
    /// [`FlatMap::insert`]: only if absent.
    Insert(K, V),
    /// [`FlatMap::upsert`]: insert or overwrite.
    Upsert(K, V),
    /// [`FlatMap::put`]: only if present.
    Put(K, V),
    /// [`FlatMap::fetch_add`]; build it with [`Request::fetch_add`].
    FetchAdd(K, Delta<V>),
    /// [`FlatMap::remove`].
    Remove(K),
}

/// The amount of a [`Request::FetchAdd`], with the addition of its counter type.
#[derive(Clone, Copy)]
pub struct Delta<V> {
    delta: V,
    add: fn(V, V) -> V,
}

impl<V: Counter> Delta<V> {
    /// Add `delta`.
    pub fn new(delta: V) -> Self {
        Delta { delta, add: V::add }
    }
}

impl<V> Delta<V> {
    /// The amount and the addition (for a request sent as words, `delegate`).
    pub(crate) fn into_parts(self) -> (V, fn(V, V) -> V) {
        (self.delta, self.add)
    }

    /// The inverse of [`into_parts`](Self::into_parts).
    pub(crate) fn from_parts(delta: V, add: fn(V, V) -> V) -> Self {
        Delta { delta, add }
    }
}

impl<V: fmt::Debug> fmt::Debug for Delta<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.delta.fmt(f)
    }
}

impl<V: PartialEq> PartialEq for Delta<V> {
    fn eq(&self, other: &Self) -> bool {
        self.delta == other.delta
    }
}

impl<K: Copy, V> Request<K, V> {
    /// The key the request is about.
    #[inline]
    pub fn key(&self) -> K {
        match *self {
            Request::Get(k)
            | Request::Insert(k, _)
            | Request::Upsert(k, _)
            | Request::Put(k, _)
            | Request::FetchAdd(k, _)
            | Request::Remove(k) => k,
        }
    }
}

impl<K, V: Counter> Request<K, V> {
    /// A counting upsert of `delta` on `key`.
    pub fn fetch_add(key: K, delta: V) -> Self {
        Request::FetchAdd(key, Delta::new(delta))
    }
}

/// The result of one [`Request`], as the matching single-key method returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response<V> {
    /// Of [`Request::Get`].
    Get(Option<V>),
    /// Of [`Request::Insert`].
    Insert(Result<Insert<V>, Error>),
    /// Of [`Request::Upsert`]: the previous value.
    Upsert(Result<Option<V>, Error>),
    /// Of [`Request::Put`]: the previous value, `None` if absent (nothing written).
    Put(Option<V>),
    /// Of [`Request::FetchAdd`]: the previous value.
    FetchAdd(Result<Option<V>, Error>),
    /// Of [`Request::Remove`]: the removed value.
    Remove(Option<V>),
}

impl<V> Response<V> {
    /// Whether the request did not do what it asked: a get or put or remove that found no
    /// key, an insert that found the key present, or any [`Error`] (a full bin). This is what
    /// [`Batch::stop_on_failure`] stops at.
    pub fn is_failure(&self) -> bool {
        match self {
            Response::Get(v) | Response::Put(v) | Response::Remove(v) => v.is_none(),
            Response::Insert(r) => !matches!(r, Ok(Insert::Inserted)),
            Response::Upsert(r) | Response::FetchAdd(r) => r.is_err(),
        }
    }
}

/// Whether batches and pipelines prefetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Prefetch {
    /// Prefetch when the table is at least [`PREFETCH_THRESHOLD_BYTES`].
    #[default]
    Auto,
    /// Always prefetch.
    Always,
    /// Never prefetch (requests still run in one call).
    Never,
}

impl Prefetch {
    pub(crate) fn enabled(self, table_bytes: usize) -> bool {
        match self {
            Prefetch::Auto => table_bytes >= PREFETCH_THRESHOLD_BYTES,
            Prefetch::Always => true,
            Prefetch::Never => false,
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> FlatMap<K, V, S> {
    /// Run one request (what a batch does for each of its requests).
    ///
    /// ```
    /// use floe::{Request, Response};
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(10);
    /// assert_eq!(map.execute(Request::Upsert(1, 5)), Response::Upsert(Ok(None)));
    /// assert_eq!(map.execute(Request::fetch_add(1, 2)), Response::FetchAdd(Ok(Some(5))));
    /// assert_eq!(map.execute(Request::Get(1)), Response::Get(Some(7)));
    /// ```
    #[inline(always)]
    pub fn execute(&self, request: Request<K, V>) -> Response<V> {
        let (hash, word) = self.locate(request.key());
        BatchTarget::execute_at(self, hash, word, request)
    }

    /// A handle that runs slices of requests in order with their lines prefetched ahead.
    ///
    /// ```
    /// use floe::{Request, Response, Insert};
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(1000);
    /// let requests = [Request::Insert(1, 10), Request::Get(1), Request::Remove(1), Request::Get(1)];
    /// let mut responses = Vec::new();
    /// map.batch().run(&requests, &mut responses);
    /// assert_eq!(responses, [
    ///     Response::Insert(Ok(Insert::Inserted)),
    ///     Response::Get(Some(10)),
    ///     Response::Remove(Some(10)),
    ///     Response::Get(None),
    /// ]);
    /// ```
    pub fn batch(&self) -> Batch<'_, K, V, S> {
        Batch {
            map: self,
            settings: BatchSettings::default(),
        }
    }

    /// An asynchronous pipeline keeping up to `window` requests in flight (at least 1).
    ///
    /// ```
    /// use floe::{Request, Response};
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(1000);
    /// let mut pipeline = map.pipeline::<u32>(8);
    /// let mut done = Vec::new();
    /// for i in 0..100u32 {
    ///     if let Some(completion) = pipeline.submit(i, Request::Upsert(u64::from(i), 1)) {
    ///         done.push(completion);
    ///     }
    /// }
    /// pipeline.flush(|tag, response| done.push((tag, response)));
    /// assert_eq!(done.len(), 100);
    /// assert!(done.iter().all(|(_, r)| *r == Response::Upsert(Ok(None))));
    /// ```
    ///
    /// The window is clamped to `1..=`[`MAX_PIPELINE_WINDOW`]: tens of requests cover the memory
    /// latency (DRAMHiT uses 16 to 64), and the queue is allocated up front.
    pub fn pipeline<T>(&self, window: usize) -> Pipeline<'_, K, V, S, T> {
        let window = window.clamp(1, MAX_PIPELINE_WINDOW);
        Pipeline {
            map: self,
            window,
            prefetch: Prefetch::Auto.enabled(FlatMap::raw(self).table_bytes()),
            queue: VecDeque::with_capacity(window),
            submitted: 0,
            out_of_order: 0,
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> BatchTarget for FlatMap<K, V, S> {
    type Key = K;
    type Value = V;

    #[inline(always)]
    fn raw(&self) -> &Driver {
        FlatMap::raw(self)
    }

    #[inline(always)]
    fn locate(&self, key: K) -> (u64, u64) {
        FlatMap::locate(self, key)
    }

    #[inline(always)]
    fn execute_at(&self, hash: u64, word: u64, request: Request<K, V>) -> Response<V> {
        match request {
            Request::Get(_) => Response::Get(self.get_at(hash, word)),
            Request::Insert(_, v) => Response::Insert(self.insert_at(hash, word, v)),
            Request::Upsert(_, v) => Response::Upsert(self.upsert_at(hash, word, v)),
            Request::Put(_, v) => Response::Put(self.put_at(hash, word, v)),
            Request::FetchAdd(_, d) => {
                Response::FetchAdd(self.fetch_add_at(hash, word, d.delta, d.add))
            }
            Request::Remove(_) => Response::Remove(self.remove_at(hash, word)),
        }
    }

    #[inline(always)]
    fn get_words_at(&self, located: &[(u64, u64)], depth: usize, out: &mut [Option<u64>]) {
        FlatMap::get_words_at(self, located, depth, out);
    }
}

/// Keys a [`Batch::get_many`] hashes ahead of each call into the engine's batch loop. The
/// prefetch window restarts at each of these chunks: one memory latency per 512 gets.
const GET_CHUNK: usize = 512;

/// Runs slices of requests in order, prefetching ahead. Made by [`FlatMap::batch`]; cheap to
/// make (per call or per thread) and reusable.
#[derive(Clone, Copy)]
pub struct Batch<'m, K, V, S> {
    map: &'m FlatMap<K, V, S>,
    settings: BatchSettings,
}

/// The settings (the map's contents are its own `Debug`'s business).
impl<K, V, S> fmt::Debug for Batch<'_, K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.debug("Batch", f)
    }
}

/// What a batch handle of either map is set to ([`Batch`], [`MapBatch`](crate::MapBatch)).
#[derive(Clone, Copy)]
pub(crate) struct BatchSettings {
    /// Requests ahead a bin is prefetched (at most [`MAX_DEPTH`]).
    pub(crate) depth: usize,
    pub(crate) prefetch: Prefetch,
    pub(crate) stop_on_failure: bool,
}

impl Default for BatchSettings {
    fn default() -> Self {
        BatchSettings {
            depth: 16,
            prefetch: Prefetch::Auto,
            stop_on_failure: false,
        }
    }
}

impl BatchSettings {
    pub(crate) fn with_depth(self, depth: usize) -> Self {
        BatchSettings {
            depth: depth.min(MAX_DEPTH),
            ..self
        }
    }

    /// Whether to stop after a response that `failure` says is one (or is not).
    #[inline(always)]
    pub(crate) fn stops_at(&self, failure: bool) -> bool {
        self.stop_on_failure && failure
    }

    pub(crate) fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("depth", &self.depth)
            .field("prefetch", &self.prefetch)
            .field("stop_on_failure", &self.stop_on_failure)
            .finish_non_exhaustive()
    }
}

impl<'m, K: InlineKey, V: Inline, S: BuildHasher> Batch<'m, K, V, S> {
    /// How many requests ahead to prefetch (default 16, at most [`MAX_DEPTH`]). 0 turns
    /// prefetching off.
    pub fn depth(mut self, depth: usize) -> Self {
        self.settings = self.settings.with_depth(depth);
        self
    }

    /// When to prefetch (default [`Prefetch::Auto`]).
    pub fn prefetch(mut self, prefetch: Prefetch) -> Self {
        self.settings.prefetch = prefetch;
        self
    }

    /// Stop at the first request whose response [`is_failure`](Response::is_failure); the
    /// requests after it are not run.
    pub fn stop_on_failure(mut self, stop: bool) -> Self {
        self.settings.stop_on_failure = stop;
        self
    }

    /// The prefetch distance this batch uses on its map.
    fn effective_depth(&self) -> usize {
        if self.settings.prefetch.enabled(self.map.raw().table_bytes()) {
            self.settings.depth
        } else {
            0
        }
    }

    /// Run `requests` in order, appending one response per request run to `responses`.
    /// Returns how many were run: all of them, or up to and including the first failure
    /// under [`stop_on_failure`](Self::stop_on_failure).
    ///
    /// The responses are exactly those of calling the single-key methods one by one in this
    /// order on this thread (each request is one linearizable operation; other threads'
    /// operations may fall between two requests of a batch).
    pub fn run(&self, requests: &[Request<K, V>], responses: &mut Vec<Response<V>>) -> usize {
        responses.reserve(requests.len());
        self.run_each(requests, |_, response| responses.push(response))
    }

    /// As [`run`](Self::run), handing each response to `each(index, response)` as soon as it
    /// is known instead of collecting them (no buffer; the consumer inlines into the loop).
    ///
    /// ```
    /// use floe::{Request, Response};
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(100);
    /// let requests: Vec<_> = (0..10).map(|k| Request::Upsert(k, k)).collect();
    /// let mut inserted = 0;
    /// map.batch().run_each(&requests, |_, r| inserted += usize::from(r == Response::Upsert(Ok(None))));
    /// assert_eq!(inserted, 10);
    /// ```
    #[inline]
    pub fn run_each(
        &self,
        requests: &[Request<K, V>],
        mut each: impl FnMut(usize, Response<V>),
    ) -> usize {
        let map = self.map;
        let depth = self.effective_depth();
        // Without prefetch (cache-resident tables under `Prefetch::Auto`) requests skip the
        // window: on a 1 MiB table with mixed requests that measured 0.96-0.97x of one call
        // per request, against 0.91-0.95x through `Lookahead` with depth 0.
        let mut ahead = (depth > 0).then(|| {
            // A batch that writes pins the map as a writer: past a snapshot's gate, so its
            // requests (nested in the pin) are held back by the snapshot with it.
            let writes = requests.iter().any(|r| !matches!(r, Request::Get(_)));
            Lookahead::new(map, depth, requests.len(), writes, |i| requests[i].key())
        });
        for (i, &request) in requests.iter().enumerate() {
            let (hash, word) = match ahead.as_mut() {
                Some(ahead) => ahead.take(i, |j| requests[j].key()),
                None => BatchTarget::locate(map, request.key()),
            };
            let response = BatchTarget::execute_at(map, hash, word, request);
            let stop = self.settings.stops_at(response.is_failure());
            each(i, response);
            if stop {
                return i + 1;
            }
        }
        requests.len()
    }

    /// Gets of `keys` into `values` (same length), in order, prefetched ahead: the common
    /// all-gets batch without building requests.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] if `keys` and `values` differ in length (nothing is read).
    pub fn get_many(&self, keys: &[K], values: &mut [Option<V>]) -> Result<(), Error> {
        if keys.len() != values.len() {
            return Err(Error::LengthMismatch {
                keys: keys.len(),
                values: values.len(),
            });
        }
        let map = self.map;
        let depth = self.effective_depth();
        // Hash a chunk, then run its gets in one call of the engine's batch loop (compiled
        // for the backend, one reader announcement, no call per key): 1.12-1.17x the per-key
        // path on a cache-resident table (BENCHMARKS, issue 12 part 4).
        let mut located = [(0u64, 0u64); GET_CHUNK];
        let mut words = [None::<u64>; GET_CHUNK];
        for (keys, values) in keys.chunks(GET_CHUNK).zip(values.chunks_mut(GET_CHUNK)) {
            let (located, words) = (&mut located[..keys.len()], &mut words[..keys.len()]);
            for (place, &key) in located.iter_mut().zip(keys) {
                *place = BatchTarget::locate(map, key);
            }
            BatchTarget::get_words_at(map, located, depth, words);
            for (value, word) in values.iter_mut().zip(words.iter()) {
                *value = word.map(V::from_word);
            }
        }
        Ok(())
    }
}

/// The prefetch-ahead window of a batch over `n` keys (`key(i)` is the i-th): request i's bin
/// is located and prefetched `depth` requests before it runs, and its link buckets
/// `depth / 2` before, once the bin's line has had time to arrive. With `depth` 0 it only
/// locates.
struct Lookahead<'m, M> {
    map: &'m M,
    /// The table prefetched into, held for the batch (operations follow a growth on their
    /// own; a prefetch into a replaced table is only a wasted hint).
    pinned: PinnedDriver<'m>,
    depth: usize,
    n: usize,
    /// `located[i % MAX_DEPTH]` holds request i's (hash, key word) from the time it was
    /// prefetched until it runs: at most `depth` <= MAX_DEPTH requests ahead.
    located: [(u64, u64); MAX_DEPTH],
}

impl<'m, M: BatchTarget> Lookahead<'m, M> {
    #[inline(always)]
    fn new(
        map: &'m M,
        depth: usize,
        n: usize,
        writes: bool,
        key: impl Fn(usize) -> M::Key,
    ) -> Self {
        debug_assert!(depth <= MAX_DEPTH);
        let raw = map.raw();
        let mut ahead = Lookahead {
            map,
            pinned: if writes { raw.pin_writer() } else { raw.pin() },
            depth,
            n,
            located: [(0, 0); MAX_DEPTH],
        };
        for i in 0..depth.min(n) {
            ahead.prefetch(i, key(i));
        }
        ahead
    }

    #[inline(always)]
    fn prefetch(&mut self, i: usize, key: M::Key) {
        let (hash, word) = self.map.locate(key);
        self.pinned.prefetch_bin(hash);
        self.located[i % MAX_DEPTH] = (hash, word);
    }

    /// Request i's (hash, key word), advancing the window. Call for i = 0, 1, 2, ...
    #[inline(always)]
    fn take(&mut self, i: usize, key: impl Fn(usize) -> M::Key) -> (u64, u64) {
        if self.depth == 0 {
            return self.map.locate(key(i));
        }
        // Read this request's slot before request i + depth (the same slot when depth is
        // MAX_DEPTH) takes it.
        let here = self.located[i % MAX_DEPTH];
        let ahead = i + self.depth;
        if ahead < self.n {
            self.prefetch(ahead, key(ahead));
        }
        let half = i + self.depth / 2;
        if self.depth >= 2 && half < self.n {
            self.pinned.prefetch_chain(self.located[half % MAX_DEPTH].0);
        }
        here
    }
}

/// The largest window [`FlatMap::pipeline`] keeps.
pub const MAX_PIPELINE_WINDOW: usize = 4096;

/// A request waiting in a [`Pipeline`].
struct InFlight<K, V, T> {
    tag: T,
    request: Request<K, V>,
    hash: u64,
    word: u64,
    /// Submission number: the order requests on one key must complete in.
    seq: u64,
    /// Its link buckets were prefetched (it is sent round for them at most once).
    chain_prefetched: bool,
    /// Sent to the back of the queue at least once, so it may be behind later submissions.
    out_of_order: bool,
}

/// An asynchronous, bounded window of requests completed out of order (DRAMHiT's pipeline).
/// Made by [`FlatMap::pipeline`]; one per thread.
///
/// [`submit`](Self::submit) prefetches the request's bin and queues it; once `window` requests
/// are waiting, it first completes one: the oldest, unless the oldest's bin chains link
/// buckets it has not yet waited for, in which case those are prefetched and it goes to the
/// back of the queue (at most once) and the next oldest is tried.
///
/// **Order.** Requests on different keys complete in any order; requests on the same key
/// complete in submission order. Whether a request is sent round depends on the table it
/// looks at: after a growth, a key whose old bin chained link buckets usually has an
/// unchained bin, so a later request on it would not be sent round while an earlier one was.
/// So before a request runs, the pipeline checks whether an earlier request on the same key
/// is still queued (only requests sent round can be behind later ones, so the check runs only
/// while some are queued, over the queue); if so, the request is sent round behind it.
pub struct Pipeline<'m, K, V, S, T> {
    map: &'m FlatMap<K, V, S>,
    window: usize,
    prefetch: bool,
    queue: VecDeque<InFlight<K, V, T>>,
    /// Requests submitted so far (the next sequence number).
    submitted: u64,
    /// Queued requests with `out_of_order` set.
    out_of_order: usize,
}

impl<'m, K: InlineKey, V: Inline, S: BuildHasher, T> Pipeline<'m, K, V, S, T> {
    /// Prefetch or not (default: [`Prefetch::Auto`], by table size).
    pub fn prefetch(mut self, prefetch: Prefetch) -> Self {
        self.prefetch = prefetch.enabled(self.map.raw().table_bytes());
        self
    }

    /// Requests submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Queue `request` under `tag`. If the window was full, one earlier request completes
    /// first and is returned with its tag.
    #[inline]
    pub fn submit(&mut self, tag: T, request: Request<K, V>) -> Option<(T, Response<V>)> {
        let completed = if self.queue.len() >= self.window {
            self.complete_one()
        } else {
            None
        };
        let (hash, word) = BatchTarget::locate(self.map, request.key());
        if self.prefetch {
            self.map.raw().prefetch(hash);
        }
        self.queue.push_back(InFlight {
            tag,
            request,
            hash,
            word,
            seq: self.submitted,
            chain_prefetched: false,
            out_of_order: false,
        });
        self.submitted += 1;
        completed
    }

    /// Complete every queued request, calling `done(tag, response)` for each.
    pub fn flush(&mut self, mut done: impl FnMut(T, Response<V>)) {
        while let Some((tag, response)) = self.complete_one() {
            done(tag, response);
        }
    }

    /// Complete the oldest request that is ready (see the type's docs); `None` if empty.
    #[inline]
    fn complete_one(&mut self) -> Option<(T, Response<V>)> {
        // Bounded: a request is sent round for its chain at most once, and for an earlier
        // request on its key only while that one is queued. The queued request submitted
        // first is never held back by another, so it completes within two turns of the
        // queue: at most 2 * len + 1 passes.
        loop {
            let mut entry = self.queue.pop_front()?;
            if entry.out_of_order {
                self.out_of_order -= 1;
            }
            let waits_for_earlier = self.out_of_order > 0
                && self
                    .queue
                    .iter()
                    .any(|e| e.out_of_order && e.word == entry.word && e.seq < entry.seq);
            let sent_for_chain = !waits_for_earlier
                && self.prefetch
                && !entry.chain_prefetched
                && self.map.raw().prefetch_chain(entry.hash);
            if waits_for_earlier || sent_for_chain {
                entry.chain_prefetched |= sent_for_chain;
                entry.out_of_order = true;
                self.out_of_order += 1;
                self.queue.push_back(entry);
                continue;
            }
            let response = BatchTarget::execute_at(self.map, entry.hash, entry.word, entry.request);
            return Some((entry.tag, response));
        }
    }
}

impl<K, V, S, T> fmt::Debug for Pipeline<'_, K, V, S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("window", &self.window)
            .field("in_flight", &self.queue.len())
            .field("prefetch", &self.prefetch)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! Small runs of every path, so Miri (`ci/miri.sh`, the library's unit tests) checks the
    //! batch and pipeline code too; `tests/batch.rs` has the differential tests.

    use super::*;

    fn map() -> FlatMap<u64, u64> {
        FlatMap::<u64, u64>::builder()
            .bins(4)
            .link_buckets(8)
            .build()
            .expect("tiny map")
    }

    #[test]
    fn batch_paths_agree_with_single_calls() {
        let single = map();
        let requests: Vec<Request<u64, u64>> = (0..40u64)
            .map(|i| match i % 5 {
                0 => Request::Insert(i % 13, i),
                1 => Request::Get(i % 13),
                2 => Request::fetch_add(i % 13, 1),
                3 => Request::Put(i % 13, i),
                _ => Request::Remove(i % 7),
            })
            .collect();
        let expected: Vec<_> = requests.iter().map(|&r| single.execute(r)).collect();
        for depth in [0, 1, 3, MAX_DEPTH] {
            let fresh = map();
            let mut got = Vec::new();
            let ran = fresh
                .batch()
                .depth(depth)
                .prefetch(Prefetch::Always)
                .run(&requests, &mut got);
            assert_eq!((ran, &got), (requests.len(), &expected), "depth {depth}");
        }
        let keys: Vec<u64> = (0..13).collect();
        let mut values = vec![None; keys.len()];
        single
            .batch()
            .prefetch(Prefetch::Always)
            .depth(4)
            .get_many(&keys, &mut values)
            .expect("same lengths");
        let mismatch = single.batch().get_many(&keys, &mut values[1..]);
        assert_eq!(
            mismatch,
            Err(Error::LengthMismatch {
                keys: 13,
                values: 12
            })
        );
        assert_eq!(
            mismatch.unwrap_err().to_string(),
            "13 keys but 12 value slots"
        );
        for (k, v) in keys.iter().zip(values) {
            assert_eq!(v, single.get(k));
        }
    }

    #[test]
    fn pipeline_keeps_per_key_order_across_a_growth() {
        // Key 0's bin chains a link bucket, so its first upsert is sent round; the fillers
        // behind it grow the map, where key 0's new bin chains nothing. The second upsert of
        // key 0 must still complete after the first (issue 11: it used to overtake it).
        let map = FlatMap::<u64, u64>::builder()
            .bins(2)
            .link_buckets(1)
            .build()
            .expect("tiny map");
        let key = 0u64;
        let bin_of = |k: u64| map.hasher().hash_one(k) >> 63;
        for k in (1..).filter(|&k| bin_of(k) == bin_of(key)).take(3) {
            assert!(map.try_insert(k, k).expect("room").is_inserted());
        }
        assert!(map.try_insert(key, 0).expect("room").is_inserted());
        let mut pipeline = map
            .pipeline::<u64>(MAX_PIPELINE_WINDOW)
            .prefetch(Prefetch::Always);
        let mut done = Vec::new();
        let mut submit = |tag, request| done.extend(pipeline.submit(tag, request));
        submit(0, Request::Upsert(key, 1));
        for filler in 1..200 {
            submit(filler, Request::Upsert(1000 + filler, 0));
        }
        submit(200, Request::Upsert(key, 2));
        pipeline.flush(|tag, response| done.push((tag, response)));
        assert!(map.stats().bins > 2, "the fillers grew the map");
        let order: Vec<u64> = done
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| [0, 200].contains(t))
            .collect();
        assert_eq!(order, [0, 200]);
        assert_eq!(map.get(&key), Some(2));
    }

    #[test]
    fn pipeline_windows_are_clamped() {
        let map = map();
        for window in [
            0,
            1,
            MAX_PIPELINE_WINDOW,
            MAX_PIPELINE_WINDOW + 1,
            usize::MAX,
        ] {
            let mut pipeline = map.pipeline::<usize>(window);
            for tag in 0..10 {
                let _ = pipeline.submit(tag, Request::Get(tag as u64));
                assert!(pipeline.in_flight() <= window.clamp(1, MAX_PIPELINE_WINDOW));
            }
            let mut n = 0;
            pipeline.flush(|_, _| n += 1);
            assert_eq!(pipeline.in_flight(), 0);
        }
    }

    #[test]
    fn pipeline_completes_everything_once() {
        let map = map();
        let mut pipeline = map.pipeline::<usize>(3).prefetch(Prefetch::Always);
        let mut seen = [0u8; 30];
        for tag in 0..30 {
            if let Some((t, _)) = pipeline.submit(tag, Request::Upsert(tag as u64 % 11, 1)) {
                seen[t] += 1;
            }
            assert!(pipeline.in_flight() <= 3);
        }
        pipeline.flush(|t, _| seen[t] += 1);
        assert!(seen.iter().all(|&n| n == 1));
        assert_eq!(map.len(), 11);
    }
}
