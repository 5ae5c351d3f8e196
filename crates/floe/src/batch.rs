//! Memory-aware batching: many requests per call, their cache lines loaded ahead of use.
//!
//! A random access to a table far larger than the caches costs a DRAM round trip (~100-200 ns
//! on the machines floe is measured on), while the memory system serves many lines at once.
//! One operation at a time keeps only as many misses in flight as the core's reorder window
//! happens to overlap; naming the next requests' lines ahead of time (software prefetch) keeps
//! many more in flight. Both interfaces here run their requests through one lookahead ring
//! (`raw::ring`: each request's bin is prefetched `depth` requests before it runs, into the L2
//! cache, and its chained link buckets half a window before), from the two papers that batch:
//!
//! * [`Batch`] (DLHT's batches): a slice of mixed requests executed **in order**. Results
//!   come back in request order, exactly as if the requests had been called one by one (they
//!   are: only the loads are moved earlier). Optionally stops at the first request that fails
//!   (lock managers: acquire all or stop). [`Batch::get_many`] runs all-get slices inside the
//!   engine's SIMD entry point, with no call per key, and the typed batches
//!   ([`Batch::insert_each`], [`Batch::insert_new_each`], [`Batch::fetch_add_each`]) run
//!   slices of one kind of write there with no request to build or decode.
//! * [`Pipeline`] (DRAMHiT's asynchronous pipeline): requests with a caller's tag enter a
//!   bounded window one at a time; once the window is full each new submission completes the
//!   oldest, whose lines have arrived by then. Completions carry their tags, in submission
//!   order; [`Pipeline::flush`] completes the rest. No allocation after construction.
//!
//! Why both: a batch suits a slice known up front (and a lock manager's acquire-all), the
//! pipeline a stream of requests arriving one by one (a server's, a join's probe side).
//!
//! When the table fits in the cache, prefetching only adds instructions: [`Prefetch::Auto`]
//! (the default) prefetches only for tables of at least [`PREFETCH_THRESHOLD_BYTES`] (on AMD
//! CPUs, of a quarter of a core complex's L3, within 2 and 8 MiB), thresholds measured with
//! `floe-bench sweep --param keys` and a lab sweep (BENCHMARKS.md).

use core::{fmt, hash::BuildHasher};

use crate::{
    raw::{
        driver::{PinnedDriver, TableDriver},
        ring::{self, Locate, Stages, Stream},
        Inserted, Stopped, WordDone, WordOp,
    },
    Counter, Error, FlatMap, Inline, InlineKey, Insert,
};

/// What batches and the pipeline need of a map: nothing here reaches into a facade past it.
/// `FlatMap` implements it (the sets batch through their `FlatMap`); `Map`'s batches are
/// `any_batch.rs`, on the same ring, since a `Map` request reads a second line (its entry)
/// whose address is known only once the bin has arrived.
pub(crate) trait BatchTarget {
    /// The facade's key type.
    type Key: Copy;
    /// The facade's value type.
    type Value: Copy;
    /// The key's hash and word.
    fn locate(&self, key: Self::Key) -> (u64, u64);
    /// Run `request` on the located key.
    fn execute_at(
        &self,
        hash: u64,
        word: u64,
        request: Request<Self::Key, Self::Value>,
    ) -> Response<Self::Value>;
    /// Gets of requests `0..n` through the engine's lookahead ring `far` deep
    /// (`RawMap::get_batch`): `locate(i)` is request i's located key, `answer(i, word)` takes
    /// its answer as a value word.
    fn get_batch(
        &self,
        n: usize,
        far: usize,
        locate: impl Locate,
        answer: impl FnMut(usize, Option<u64>),
    );
}

/// Tables at least this large are prefetched under [`Prefetch::Auto`] (bytes of bins and link
/// buckets); on AMD CPUs from a quarter of a core complex's L3, within 2 and 8 MiB. Measured
/// (BENCHMARKS.md, "table-size sweep"): batched gets with prefetch ran at 0.62-0.73x of the
/// same batches without it on tables of 0.2 and 0.7 MiB, and 1.10-1.96x on tables of 4.3 MiB
/// and more; the crossover lies between, around the size of the L2 (2 MiB per core on the
/// Intel machine measured). On an AMD EPYC with 32 MiB of L3 a complex it lies near 7 MB
/// (BENCHMARKS.md, "The prefetch threshold per CPU").
pub const PREFETCH_THRESHOLD_BYTES: usize = 2 << 20;

/// Deepest prefetch window a [`Batch`] keeps.
pub const MAX_DEPTH: usize = ring::MAX_DEPTH;

/// The window a [`Batch`] and a [`MapBatch`](crate::MapBatch) keep unless told otherwise:
/// requests ahead whose bins are being loaded. Measured (BENCHMARKS.md, "DRAM speed"): 64 ran
/// batched gets fastest on the AMD EPYC hosts (48 to 128 within noise, 32 a tenth slower, 16
/// a third slower).
pub const DEFAULT_DEPTH: usize = ring::DEFAULT_DEPTH;

/// One operation of a batch or pipeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Request<K, V> {
    /// [`FlatMap::get`].
    Get(K),
    /// [`FlatMap::insert`]: only if absent.
    InsertNew(K, V),
    /// [`FlatMap::insert`]: insert or overwrite.
    Insert(K, V),
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
            | Request::InsertNew(k, _)
            | Request::Insert(k, _)
            | Request::Put(k, _)
            | Request::FetchAdd(k, _)
            | Request::Remove(k) => k,
        }
    }
}

impl<K, V: Inline> Request<K, V> {
    /// What the engine's batch loop runs for this request (`RawTable::run_batch`).
    #[inline(always)]
    fn word_op(&self) -> WordOp {
        match *self {
            Request::Get(_) => WordOp::Get,
            Request::InsertNew(_, v) => WordOp::Insert(v.to_word()),
            Request::Insert(_, v) => WordOp::Upsert(v.to_word()),
            Request::Put(_, v) => WordOp::Put(v.to_word()),
            Request::FetchAdd(_, d) => WordOp::Add(d.delta.to_word()),
            Request::Remove(_) => WordOp::Remove,
        }
    }

    /// A `FetchAdd`'s new value over `old` (the value word present), as a word.
    #[inline(always)]
    fn added_to(&self, old: u64) -> u64 {
        match *self {
            Request::FetchAdd(_, d) => (d.add)(V::from_word(old), d.delta).to_word(),
            _ => unreachable!("the engine adds only for a FetchAdd"),
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
    InsertNew(Result<Insert<V>, Error>),
    /// Of [`Request::Insert`]: the previous value.
    Insert(Result<Option<V>, Error>),
    /// Of [`Request::Put`]: the previous value, `None` if absent (nothing written).
    Put(Option<V>),
    /// Of [`Request::FetchAdd`]: the previous value.
    FetchAdd(Result<Option<V>, Error>),
    /// Of [`Request::Remove`]: the removed value.
    Remove(Option<V>),
}

impl<V: Inline> Response<V> {
    /// The response of what the engine's batch loop did, as the single-key method answers
    /// it (`FlatMap::insert_at` and the others).
    #[inline(always)]
    fn of_words(done: WordDone) -> Self {
        let value = |word: Option<u64>| word.map(V::from_word);
        match done {
            WordDone::Get(word) => Response::Get(value(word)),
            WordDone::Insert(Inserted::New) => Response::InsertNew(Ok(Insert::Inserted)),
            WordDone::Insert(Inserted::Exists(word)) => {
                Response::InsertNew(Ok(Insert::Present(V::from_word(word))))
            }
            WordDone::Insert(Inserted::Shadowed) => Response::InsertNew(Ok(Insert::Shadowed)),
            WordDone::Upsert(word) => Response::Insert(Ok(value(word))),
            WordDone::Put(word) => Response::Put(value(word)),
            WordDone::Add(word) => Response::FetchAdd(Ok(value(word))),
            WordDone::Remove(word) => Response::Remove(value(word)),
        }
    }
}

impl<V> Response<V> {
    /// Whether the request did not do what it asked: a get or put or remove that found no
    /// key, an insert that found the key present, or any [`Error`] (a full bin). This is what
    /// [`Batch::stop_on_failure`] stops at.
    pub fn is_failure(&self) -> bool {
        match self {
            Response::Get(v) | Response::Put(v) | Response::Remove(v) => v.is_none(),
            Response::InsertNew(r) => !matches!(r, Ok(Insert::Inserted)),
            Response::Insert(r) | Response::FetchAdd(r) => r.is_err(),
        }
    }
}

/// Whether batches and pipelines prefetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Prefetch {
    /// Prefetch when the table is at least the running CPU's threshold:
    /// [`PREFETCH_THRESHOLD_BYTES`], or on AMD CPUs a quarter of a core complex's L3 within 2
    /// and 8 MiB (the measurements are at `raw::prefetch::auto_threshold`).
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
            Prefetch::Auto => table_bytes >= crate::raw::auto_threshold(),
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
    /// assert_eq!(map.execute(Request::Insert(1, 5)), Response::Insert(Ok(None)));
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
    /// let requests = [Request::InsertNew(1, 10), Request::Get(1), Request::Remove(1), Request::Get(1)];
    /// let mut responses = Vec::new();
    /// map.batch().run(&requests, &mut responses);
    /// assert_eq!(responses, [
    ///     Response::InsertNew(Ok(Insert::Inserted)),
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
    ///     if let Some(completion) = pipeline.submit(i, Request::Insert(u64::from(i), 1)) {
    ///         done.push(completion);
    ///     }
    /// }
    /// pipeline.flush(|tag, response| done.push((tag, response)));
    /// assert_eq!(done.len(), 100);
    /// assert!(done.iter().all(|(_, r)| *r == Response::Insert(Ok(None))));
    /// ```
    ///
    /// The window is clamped to `1..=`[`MAX_PIPELINE_WINDOW`]: tens of requests cover the memory
    /// latency (DRAMHiT uses 16 to 64), and the queue is allocated up front.
    pub fn pipeline<T>(&self, window: usize) -> Pipeline<'_, K, V, S, T> {
        Pipeline {
            map: self,
            prefetch: Prefetch::Auto.enabled(FlatMap::raw(self).table_bytes()),
            ring: Stream::new(window.clamp(1, MAX_PIPELINE_WINDOW)),
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> BatchTarget for FlatMap<K, V, S> {
    type Key = K;
    type Value = V;

    #[inline(always)]
    fn locate(&self, key: K) -> (u64, u64) {
        FlatMap::locate(self, key)
    }

    #[inline(always)]
    fn execute_at(&self, hash: u64, word: u64, request: Request<K, V>) -> Response<V> {
        match request {
            Request::Get(_) => Response::Get(self.get_at(hash, word)),
            Request::InsertNew(_, v) => Response::InsertNew(self.insert_at(hash, word, v)),
            Request::Insert(_, v) => Response::Insert(self.upsert_at(hash, word, v)),
            Request::Put(_, v) => Response::Put(self.put_at(hash, word, v)),
            Request::FetchAdd(_, d) => {
                Response::FetchAdd(self.fetch_add_at(hash, word, d.delta, d.add))
            }
            Request::Remove(_) => Response::Remove(self.remove_at(hash, word)),
        }
    }

    #[inline(always)]
    fn get_batch(
        &self,
        n: usize,
        far: usize,
        locate: impl Locate,
        answer: impl FnMut(usize, Option<u64>),
    ) {
        FlatMap::get_batch_at(self, n, far, locate, answer);
    }
}

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
            depth: DEFAULT_DEPTH,
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
    /// How many requests ahead to prefetch (default [`DEFAULT_DEPTH`], at most
    /// [`MAX_DEPTH`]). 0 turns prefetching off.
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
    /// let requests: Vec<_> = (0..10).map(|k| Request::Insert(k, k)).collect();
    /// let mut inserted = 0;
    /// map.batch().run_each(&requests, |_, r| inserted += usize::from(r == Response::Insert(Ok(None))));
    /// assert_eq!(inserted, 10);
    /// ```
    #[inline]
    pub fn run_each(
        &self,
        requests: &[Request<K, V>],
        each: impl FnMut(usize, Response<V>),
    ) -> usize {
        self.run_as(requests, |request| *request, each)
    }

    /// std's [`insert`](FlatMap::insert) of each `(key, value)` in order: insert or
    /// overwrite, handing `each(index, previous value)` its answer as soon as it is known.
    /// Returns how many ran, as [`run`](Self::run) does (a failure is an [`Error`]: a bin that
    /// stays full, a table that cannot grow).
    ///
    /// The same operations as a [`run_each`](Self::run_each) of [`Request::Insert`]s, with no
    /// request to build and none to decode: the engine's loop is compiled for this one kind
    /// (the typed batches are the writers' fast path: BENCHMARKS.md, "DRAM speed").
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(100);
    /// map.insert(3, 0);
    /// let pairs: Vec<(u64, u64)> = (0..10).map(|k| (k, k * 10)).collect();
    /// let mut replaced = Vec::new();
    /// map.batch().insert_each(&pairs, |i, old| {
    ///     if let Ok(Some(old)) = old {
    ///         replaced.push((pairs[i].0, old));
    ///     }
    /// });
    /// assert_eq!(replaced, [(3, 0)]);
    /// assert_eq!(map.get(&3), Some(30));
    /// ```
    #[inline]
    pub fn insert_each(
        &self,
        pairs: &[(K, V)],
        mut each: impl FnMut(usize, Result<Option<V>, Error>),
    ) -> usize {
        self.run_as(
            pairs,
            |&(key, value)| Request::Insert(key, value),
            |i, response| match response {
                Response::Insert(previous) => each(i, previous),
                _ => unreachable!("an Insert request answers Response::Insert"),
            },
        )
    }

    /// [`insert_new`](FlatMap::insert_new) of each `(key, value)` in order: insert only where
    /// the key is absent (DLHT's insert), handing `each(index, outcome)` its answer. The typed
    /// form of a [`run_each`](Self::run_each) of [`Request::InsertNew`]s, as
    /// [`insert_each`](Self::insert_each) is of inserts; under
    /// [`stop_on_failure`](Self::stop_on_failure) a present key stops it.
    ///
    /// ```
    /// use floe::Insert;
    /// let map = floe::FlatMap::<u64, u64>::with_capacity(100);
    /// map.insert(3, 0);
    /// let pairs: Vec<(u64, u64)> = (0..10).map(|k| (k, k * 10)).collect();
    /// let mut inserted = 0;
    /// map.batch().insert_new_each(&pairs, |_, outcome| {
    ///     inserted += usize::from(outcome == Ok(Insert::Inserted));
    /// });
    /// assert_eq!(inserted, 9);
    /// assert_eq!(map.get(&3), Some(0));
    /// ```
    #[inline]
    pub fn insert_new_each(
        &self,
        pairs: &[(K, V)],
        mut each: impl FnMut(usize, Result<Insert<V>, Error>),
    ) -> usize {
        self.run_as(
            pairs,
            |&(key, value)| Request::InsertNew(key, value),
            |i, response| match response {
                Response::InsertNew(outcome) => each(i, outcome),
                _ => unreachable!("an InsertNew request answers Response::InsertNew"),
            },
        )
    }

    /// Run `items` in order as the requests `request` makes of them, answering `each` as
    /// [`run_each`](Self::run_each) does. `request` is compiled into the engine's loop: for the
    /// typed batches it makes one kind of request, so the loop reads no request kind.
    #[inline(always)]
    fn run_as<T>(
        &self,
        items: &[T],
        request: impl Fn(&T) -> Request<K, V> + Copy,
        mut each: impl FnMut(usize, Response<V>),
    ) -> usize {
        let map = self.map;
        let depth = self.effective_depth();
        let settings = self.settings;
        // Runs of requests go through the engine's batch loop (one backend call, no
        // single-key path per request); a request it cannot run there (a full bin, a moved
        // bin, a shadowed key) runs through the single-key path, which grows, follows and
        // waits, and the batch resumes after it.
        let mut start = 0;
        while start < items.len() {
            let rest = &items[start..];
            let located = KeysOf {
                map,
                keys: rest,
                key: |item: &T| request(item).key(),
            };
            let batch = map.raw().run_batch(
                rest.len(),
                depth,
                &located,
                |i| request(request_at(rest, i)).word_op(),
                |i, old| request(request_at(rest, i)).added_to(old),
                |i, done| {
                    let response = Response::of_words(done);
                    let stop = settings.stops_at(response.is_failure());
                    each(start + i, response);
                    !stop
                },
                &map.rehash(),
            );
            match batch {
                None => {
                    return start
                        + self.run_in_ring(rest, request, depth, |i, r| each(start + i, r))
                }
                Some(Ok(())) => return items.len(),
                Some(Err(Stopped { at, ran: true })) => return start + at + 1,
                Some(Err(Stopped { at, ran: false })) => {
                    let i = start + at;
                    let (hash, word) = located.locate(at);
                    let response = BatchTarget::execute_at(map, hash, word, request(&items[i]));
                    let stop = settings.stops_at(response.is_failure());
                    each(i, response);
                    if stop {
                        return i + 1;
                    }
                    start = i + 1;
                }
            }
        }
        items.len()
    }

    /// `run_as` through the lookahead ring at this level, each request through the
    /// single-key path: for what the engine's batch loops do not take (a migrating table,
    /// one that writes its lines back).
    fn run_in_ring<T>(
        &self,
        items: &[T],
        request: impl Fn(&T) -> Request<K, V>,
        depth: usize,
        each: impl FnMut(usize, Response<V>),
    ) -> usize {
        let map = self.map;
        let raw = map.raw();
        let pinned = (depth > 0).then(|| {
            // A batch that writes pins the map as a writer: past a snapshot's gate, so its
            // requests (nested in the pin) are held back by the snapshot with it.
            if items
                .iter()
                .any(|item| !matches!(request(item), Request::Get(_)))
            {
                raw.pin_writer()
            } else {
                raw.pin()
            }
        });
        let mut stages = Requests {
            map,
            pinned: pinned.as_ref(),
            items,
            request,
            each,
            settings: self.settings,
        };
        match ring::run(&mut stages, items.len(), depth) {
            Ok(()) => items.len(),
            Err(stopped) => stopped + 1,
        }
    }

    /// Gets of `keys` into `values` (same length), in order, through the lookahead ring: the
    /// common all-gets batch without building requests, run inside the engine's entry point
    /// compiled for the CPU's SIMD backend (one reader announcement, no call per key).
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
        BatchTarget::get_batch(
            map,
            keys.len(),
            self.effective_depth(),
            KeysOf {
                map,
                keys,
                key: |key: &K| *key,
            },
            // Through `request_at`'s bound: `values` is as long as `keys` (checked above).
            |i, word| *request_at_mut(values, i) = word.map(V::from_word),
        );
        Ok(())
    }
}

impl<K: InlineKey, V: Counter, S: BuildHasher> Batch<'_, K, V, S> {
    /// [`fetch_add`](FlatMap::fetch_add) of each `(key, delta)` in order (a counting upsert:
    /// an absent key is inserted with `delta`), handing `each(index, previous value)` its
    /// answer. The typed form of a [`run_each`](Self::run_each) of [`Request::FetchAdd`]s, as
    /// [`insert_each`](Self::insert_each) is of inserts: a k-mer counter's or a histogram's
    /// batch.
    ///
    /// ```
    /// let map = floe::FlatMap::<u64, u32>::with_capacity(100);
    /// let words = [7u64, 3, 7, 7, 3];
    /// let pairs: Vec<(u64, u32)> = words.iter().map(|&w| (w, 1)).collect();
    /// let ran = map.batch().fetch_add_each(&pairs, |_, previous| assert!(previous.is_ok()));
    /// assert_eq!(ran, words.len());
    /// assert_eq!((map.get(&7), map.get(&3)), (Some(3), Some(2)));
    /// ```
    #[inline]
    pub fn fetch_add_each(
        &self,
        pairs: &[(K, V)],
        mut each: impl FnMut(usize, Result<Option<V>, Error>),
    ) -> usize {
        self.run_as(
            pairs,
            |&(key, delta)| Request::fetch_add(key, delta),
            |i, response| match response {
                Response::FetchAdd(previous) => each(i, previous),
                _ => unreachable!("a FetchAdd request answers Response::FetchAdd"),
            },
        )
    }
}

/// The keys of a slice (of keys, or of requests) as the engine's batch loops locate them: the
/// key's hashing compiled into the loop (`ring::Locate`).
struct KeysOf<'a, M, T, F> {
    map: &'a M,
    keys: &'a [T],
    key: F,
}

impl<M: BatchTarget, T, F: Fn(&T) -> M::Key> Locate for KeysOf<'_, M, T, F> {
    #[inline(always)]
    fn locate(&self, i: usize) -> (u64, u64) {
        self.map.locate((self.key)(request_at(self.keys, i)))
    }
}

/// Item `i` of a batch the engine runs, without a bounds check: the engine's batch loops
/// (`RawTable::get_batch`, `run_batch` and the dense layout's) call their `locate`, `op`, `add`
/// and `answer` only for requests `0..n` (`raw::ring::run`), and every batch here passes
/// `n = items.len()` (or answers a stopped request `at < n`). The check cost 5 of an insert's
/// 163 instructions in a typed batch (callgrind), where the compiler cannot see the bound
/// across the engine's entry point.
#[inline(always)]
fn request_at<T>(items: &[T], i: usize) -> &T {
    debug_assert!(i < items.len(), "request {i} of a batch of {}", items.len());
    // SAFETY: `i < items.len()` (above).
    unsafe { items.get_unchecked(i) }
}

/// [`request_at`] of an answer slot (`get_many`'s values, as long as its keys).
#[inline(always)]
fn request_at_mut<T>(items: &mut [T], i: usize) -> &mut T {
    debug_assert!(i < items.len(), "request {i} of a batch of {}", items.len());
    // SAFETY: `i < items.len()` (above).
    unsafe { items.get_unchecked_mut(i) }
}

/// A batch's requests in the lookahead ring: each located when it enters, its bin prefetched
/// then and its link buckets half a window later (`raw::ring`), run when it leaves.
struct Requests<'r, 'm, M: BatchTarget, T, R, E> {
    map: &'m M,
    /// The table the prefetches go to, held for the batch (operations follow a growth on
    /// their own; a prefetch into a replaced table is only a wasted hint). `None` without
    /// prefetch.
    pinned: Option<&'r PinnedDriver<'m>>,
    items: &'r [T],
    /// The request an item is.
    request: R,
    each: E,
    settings: BatchSettings,
}

impl<M, T, R, E> Stages for Requests<'_, '_, M, T, R, E>
where
    M: BatchTarget,
    R: Fn(&T) -> Request<M::Key, M::Value>,
    E: FnMut(usize, Response<M::Value>),
{
    /// The request's hash and key word.
    type Slot = (u64, u64);

    #[inline(always)]
    fn locate(&mut self, i: usize) -> (u64, u64) {
        self.map.locate((self.request)(&self.items[i]).key())
    }

    #[inline(always)]
    fn prefetch(&mut self, &(hash, _): &(u64, u64)) {
        if let Some(pinned) = self.pinned {
            pinned.prefetch_bin(hash);
        }
    }

    #[inline(always)]
    fn chase(&mut self, &mut (hash, _): &mut (u64, u64)) {
        if let Some(pinned) = self.pinned {
            pinned.prefetch_chain(hash);
        }
    }

    #[inline(always)]
    fn run(&mut self, i: usize, (hash, word): (u64, u64)) -> Result<(), ()> {
        let response = self
            .map
            .execute_at(hash, word, (self.request)(&self.items[i]));
        let stop = self.settings.stops_at(response.is_failure());
        (self.each)(i, response);
        if stop {
            Err(())
        } else {
            Ok(())
        }
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
}

/// An asynchronous, bounded window of requests (DRAMHiT's pipeline). Made by
/// [`FlatMap::pipeline`]; one per thread.
///
/// [`submit`](Self::submit) locates the request and prefetches its bin; once `window`
/// requests wait, it first takes out the oldest, and runs it after the new one entered. A
/// request's chained link buckets are prefetched half a window after its bin (the lookahead
/// ring of `raw::ring`), so no request waits for a second line.
///
/// **Order.** Requests complete in submission order, each with its tag: a request runs
/// `window` submissions after its own (or at [`flush`](Self::flush)), and every request is
/// one linearizable operation, run on this thread.
pub struct Pipeline<'m, K, V, S, T> {
    map: &'m FlatMap<K, V, S>,
    prefetch: bool,
    ring: Stream<InFlight<K, V, T>>,
}

/// What a pipeline's ring does to a request before it runs (the tag type only names the
/// slots it holds).
struct Prefetches<'m, K, V, S, T> {
    map: &'m FlatMap<K, V, S>,
    prefetch: bool,
    tags: core::marker::PhantomData<fn(T)>,
}

impl<K: InlineKey, V: Inline, S: BuildHasher, T> Stages for Prefetches<'_, K, V, S, T> {
    type Slot = InFlight<K, V, T>;

    #[inline(always)]
    fn locate(&mut self, _: usize) -> InFlight<K, V, T> {
        unreachable!("a pipeline's requests enter located")
    }

    #[inline(always)]
    fn prefetch(&mut self, entry: &InFlight<K, V, T>) {
        if self.prefetch {
            self.map.raw().prefetch(entry.hash);
        }
    }

    #[inline(always)]
    fn chase(&mut self, entry: &mut InFlight<K, V, T>) {
        if self.prefetch {
            self.map.raw().prefetch_chain(entry.hash);
        }
    }

    #[inline(always)]
    fn run(&mut self, _: usize, _: InFlight<K, V, T>) -> Result<(), ()> {
        unreachable!("a pipeline runs what its ring hands back")
    }
}

impl<'m, K: InlineKey, V: Inline, S: BuildHasher, T> Pipeline<'m, K, V, S, T> {
    /// Prefetch or not (default: [`Prefetch::Auto`], by table size).
    pub fn prefetch(mut self, prefetch: Prefetch) -> Self {
        self.prefetch = prefetch.enabled(self.map.raw().table_bytes());
        self
    }

    /// Requests submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.ring.waiting()
    }

    /// Queue `request` under `tag`. If the window was full, the oldest request completes
    /// and is returned with its tag.
    #[inline]
    pub fn submit(&mut self, tag: T, request: Request<K, V>) -> Option<(T, Response<V>)> {
        let (hash, word) = BatchTarget::locate(self.map, request.key());
        let entry = InFlight {
            tag,
            request,
            hash,
            word,
        };
        let mut stages = self.stages();
        let oldest = self.ring.push(&mut stages, entry)?;
        Some(self.complete(oldest))
    }

    /// Complete every queued request, calling `done(tag, response)` for each, in submission
    /// order.
    pub fn flush(&mut self, mut done: impl FnMut(T, Response<V>)) {
        let mut stages = self.stages();
        while let Some(entry) = self.ring.pop(&mut stages) {
            let (tag, response) = self.complete(entry);
            done(tag, response);
        }
    }

    /// What the ring does to a request before it runs (the map and the setting, copied out
    /// so the ring can be borrowed beside them).
    #[inline(always)]
    fn stages(&self) -> Prefetches<'m, K, V, S, T> {
        Prefetches {
            map: self.map,
            prefetch: self.prefetch,
            tags: core::marker::PhantomData,
        }
    }

    #[inline(always)]
    fn complete(&self, entry: InFlight<K, V, T>) -> (T, Response<V>) {
        let response = BatchTarget::execute_at(self.map, entry.hash, entry.word, entry.request);
        (entry.tag, response)
    }
}

impl<K, V, S, T> fmt::Debug for Pipeline<'_, K, V, S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("window", &self.ring.far())
            .field("in_flight", &self.ring.waiting())
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
                0 => Request::InsertNew(i % 13, i),
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
        // Key 0's bin chains a link bucket (a pipeline that sent such requests round once let
        // a later one on the same key overtake it, issue 11); the fillers behind it grow the
        // map, where key 0's new bin chains nothing. The second upsert of key 0 must still
        // complete after the first.
        let map = FlatMap::<u64, u64>::builder()
            .bins(2)
            .link_buckets(1)
            .build()
            .expect("tiny map");
        let key = 0u64;
        let bin_of = |k: u64| map.hasher().hash_one(k) >> 63;
        for k in (1..).filter(|&k| bin_of(k) == bin_of(key)).take(3) {
            assert!(map.try_insert_new(k, k).expect("room").is_inserted());
        }
        assert!(map.try_insert_new(key, 0).expect("room").is_inserted());
        let mut pipeline = map
            .pipeline::<u64>(MAX_PIPELINE_WINDOW)
            .prefetch(Prefetch::Always);
        let mut done = Vec::new();
        let mut submit = |tag, request| done.extend(pipeline.submit(tag, request));
        submit(0, Request::Insert(key, 1));
        for filler in 1..200 {
            submit(filler, Request::Insert(1000 + filler, 0));
        }
        submit(200, Request::Insert(key, 2));
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
            if let Some((t, _)) = pipeline.submit(tag, Request::Insert(tag as u64 % 11, 1)) {
                seen[t] += 1;
            }
            assert!(pipeline.in_flight() <= 3);
        }
        pipeline.flush(|t, _| seen[t] += 1);
        assert!(seen.iter().all(|&n| n == 1));
        assert_eq!(map.len(), 11);
    }
}
