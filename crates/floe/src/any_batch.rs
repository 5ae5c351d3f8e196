//! Batches and the pipeline for [`Map`](crate::Map): each request's bin is prefetched, then
//! the entry its slot points to, then the request runs on cached lines.
//!
//! A `Map` request reads two lines a table far larger than the caches rarely has cached: the
//! bin, and the entry behind a matching hash word (a hit's key is compared with the entry's,
//! and a get returns a reference into it). The entry's address is known only once the bin has
//! arrived, so one prefetch ahead is not enough. Each request passes three stages while it
//! waits in a window of `w` requests:
//!
//! 1. **on entry** its bin is prefetched;
//! 2. **`w / 2` requests later**, when the bin has had time to arrive, the bin is searched for
//!    the request's hash word and the entry (or collision list) of a match is prefetched. For
//!    a write, and for a get in a batch, this search is a hint: its answer is thrown away (the
//!    key is not compared, and the slot may change before the request runs);
//! 3. **when it leaves the window** it runs as the single-key method, on lines now cached.
//!
//! The window is the lookahead ring every batch of floe runs on (`raw::ring`): stage 2 is its
//! chase. Requests leave the window in submission order (stage 2 reads a bin's link buckets
//! in passing, a rare case at the loads the map grows at). In a [`MapBatch`] every request takes effect when it leaves, so
//! the responses are exactly those of calling the single-key methods one by one in order on
//! this thread (other threads' operations may fall between two requests). A [`MapPipeline`]
//! lets a get take effect at its stage 2, answered from that search, when no write on its key
//! is waiting: one bin search per get instead of two, at the price of program order across
//! keys (see its docs). Stages 1 and 2 write nothing, so a request that never leaves (a batch
//! stopped at a failure, a pipeline dropped) had no effect.
//!
//! [`MapBatch`] runs a sequence of requests through such a window and returns; [`MapPipeline`]
//! keeps one open across calls, with a caller's tag on each request (DRAMHiT's asynchronous
//! interface). A string key's bytes are a third line, behind the entry: it is not prefetched
//! (its address is in the entry), so a batch of `Map<String, _>` requests waits on it once per
//! hit.

use core::{borrow::Borrow, fmt, hash::BuildHasher, hash::Hash, marker::PhantomData};

use seize::{Guard, LocalGuard};

use crate::{
    batch::{BatchSettings, Prefetch, MAX_PIPELINE_WINDOW},
    raw::ring::{Stages, Stream},
    Error, Insert, MapRef,
};

/// One operation of a [`MapBatch`] or [`MapPipeline`]. Gets and removes borrow their key as
/// `Q` (`&str` for a `Map<String, _>`, as [`MapRef::get`]); inserts own theirs. Where no
/// get or remove names `Q`, Rust cannot infer it: name it (`MapRequest::<_, _, str>`, or
/// `K` itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapRequest<'q, K, V, Q: ?Sized = K> {
    /// [`MapRef::get`].
    Get(&'q Q),
    /// [`MapRef::try_insert`]: only if absent.
    InsertNew(K, V),
    /// [`MapRef::try_insert`]: insert or replace.
    Insert(K, V),
    /// [`MapRef::put`]: replace only if present.
    Put(K, V),
    /// [`MapRef::remove`].
    Remove(&'q Q),
}

/// The result of one [`MapRequest`], as the single-key method returns it; references live as
/// long as the [`MapRef`] the batch or pipeline was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapResponse<'h, V> {
    /// Of [`MapRequest::Get`].
    Get(Option<&'h V>),
    /// Of [`MapRequest::Insert`].
    InsertNew(Result<Insert<&'h V>, Error>),
    /// Of [`MapRequest::Insert`]: the previous value.
    Insert(Result<Option<&'h V>, Error>),
    /// Of [`MapRequest::Put`]: the previous value, `None` if absent (nothing written).
    Put(Option<&'h V>),
    /// Of [`MapRequest::Remove`]: the removed value.
    Remove(Option<&'h V>),
}

impl<V> MapResponse<'_, V> {
    /// Whether the request did not do what it asked: a get, put or remove that found no key, an
    /// insert that found the key present, or any [`Error`]. What
    /// [`MapBatch::stop_on_failure`] stops at.
    pub fn is_failure(&self) -> bool {
        match self {
            MapResponse::Get(v) | MapResponse::Put(v) | MapResponse::Remove(v) => v.is_none(),
            MapResponse::InsertNew(r) => !matches!(r, Ok(Insert::Inserted)),
            MapResponse::Insert(r) => r.is_err(),
        }
    }
}

impl<'h, K: Hash + Eq, V, S: BuildHasher, G: Guard> MapRef<'h, K, V, S, G> {
    /// The hash word of a request's key.
    #[inline(always)]
    fn request_word<Q>(&self, request: &MapRequest<'_, K, V, Q>) -> u64
    where
        Q: Hash + ?Sized,
    {
        match request {
            MapRequest::Get(key) | MapRequest::Remove(key) => self.hash_word(*key),
            MapRequest::InsertNew(key, _)
            | MapRequest::Insert(key, _)
            | MapRequest::Put(key, _) => self.hash_word(key),
        }
    }

    /// Run `request`, whose key's hash word is `word`.
    #[inline(always)]
    fn execute_hashed<Q>(
        &'h self,
        word: u64,
        request: MapRequest<'_, K, V, Q>,
    ) -> MapResponse<'h, V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match request {
            MapRequest::Get(key) => MapResponse::Get(self.get_by(word, |k| k.borrow() == key)),
            MapRequest::InsertNew(key, value) => {
                MapResponse::InsertNew(self.try_insert_new_hashed(word, key, value))
            }
            MapRequest::Insert(key, value) => {
                MapResponse::Insert(self.try_insert_hashed(word, key, value))
            }
            MapRequest::Put(key, value) => MapResponse::Put(self.put_hashed(word, key, value)),
            MapRequest::Remove(key) => {
                MapResponse::Remove(self.remove_if_by(word, |k| k.borrow() == key, |_| true))
            }
        }
    }

    /// Run one request (what a batch does for each of its requests).
    ///
    /// ```
    /// use floe::{MapRequest, MapResponse};
    /// let map = floe::Map::<String, u32>::new();
    /// let m = map.pin();
    /// let insert = MapRequest::<_, _, str>::Insert("a".to_string(), 1);
    /// assert_eq!(m.execute(insert), MapResponse::Insert(Ok(None)));
    /// assert_eq!(m.execute(MapRequest::<_, _, str>::Get("a")), MapResponse::Get(Some(&1)));
    /// ```
    pub fn execute<Q>(&'h self, request: MapRequest<'_, K, V, Q>) -> MapResponse<'h, V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.execute_hashed(self.request_word(&request), request)
    }

    /// A handle that runs sequences of requests in order, each request's bin and then its
    /// entry prefetched ahead (module docs of `any_batch.rs`).
    ///
    /// ```
    /// use floe::{Insert, MapRequest, MapResponse};
    /// let map = floe::Map::<String, Vec<u8>>::new();
    /// let m = map.pin();
    /// let requests = [
    ///     MapRequest::InsertNew("a".to_string(), vec![1]),
    ///     MapRequest::Get("a"),
    ///     MapRequest::Remove("a"),
    ///     MapRequest::Get("a"),
    /// ];
    /// let mut responses = Vec::new();
    /// m.batch().run(requests, &mut responses);
    /// assert_eq!(responses, [
    ///     MapResponse::InsertNew(Ok(Insert::Inserted)),
    ///     MapResponse::Get(Some(&vec![1])),
    ///     MapResponse::Remove(Some(&vec![1])),
    ///     MapResponse::Get(None),
    /// ]);
    /// ```
    pub fn batch(&'h self) -> MapBatch<'h, K, V, S, G> {
        MapBatch {
            map: self,
            settings: BatchSettings::default(),
        }
    }

    /// An asynchronous window keeping up to `window` requests in flight (clamped to
    /// `1..=`[`MAX_PIPELINE_WINDOW`]); responses come back with their tags, in submission
    /// order. Gets may take effect before earlier writes on other keys ([`MapPipeline`]).
    ///
    /// ```
    /// use floe::{MapRequest, MapResponse};
    /// let map = floe::Map::<u64, String>::new();
    /// let m = map.pin();
    /// let mut pipeline = m.pipeline::<u64, u64>(8);
    /// let mut done = Vec::new();
    /// for k in 0..100 {
    ///     done.extend(pipeline.submit(k, MapRequest::Insert(k, k.to_string())));
    /// }
    /// pipeline.flush(|tag, response| done.push((tag, response)));
    /// assert_eq!(done.len(), 100);
    /// assert!(done.iter().enumerate().all(|(i, (tag, r))| *tag == i as u64 && *r == MapResponse::Insert(Ok(None))));
    /// ```
    pub fn pipeline<'q, Q, T>(&'h self, window: usize) -> MapPipeline<'h, 'q, K, V, S, Q, T, G>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let window = window.clamp(1, MAX_PIPELINE_WINDOW);
        MapPipeline::new(self, window, self.prefetch_enabled(Prefetch::Auto), true)
    }
}

/// Runs sequences of [`MapRequest`]s in order, prefetching ahead. Made by [`MapRef::batch`];
/// cheap to make and reusable.
pub struct MapBatch<'h, K, V, S, G = LocalGuard<'h>> {
    map: &'h MapRef<'h, K, V, S, G>,
    settings: BatchSettings,
}

impl<K, V, S, G> Clone for MapBatch<'_, K, V, S, G> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V, S, G> Copy for MapBatch<'_, K, V, S, G> {}

/// The settings (the map's contents are its own `Debug`'s business).
impl<K, V, S, G> fmt::Debug for MapBatch<'_, K, V, S, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.debug("MapBatch", f)
    }
}

impl<'h, K: Hash + Eq, V, S: BuildHasher, G: Guard> MapBatch<'h, K, V, S, G> {
    /// How many requests ahead a bin is prefetched (default
    /// [`DEFAULT_DEPTH`](crate::batch::DEFAULT_DEPTH), at most
    /// [`MAX_DEPTH`](crate::batch::MAX_DEPTH)); its entry is prefetched `depth / 2` requests
    /// ahead. 0 turns prefetching off.
    pub fn depth(mut self, depth: usize) -> Self {
        self.settings = self.settings.with_depth(depth);
        self
    }

    /// When to prefetch (default [`Prefetch::Auto`]: when the table and its entries take at
    /// least the CPU's threshold, [`PREFETCH_THRESHOLD_BYTES`](crate::batch::PREFETCH_THRESHOLD_BYTES)
    /// or on AMD CPUs a quarter of a core complex's L3 within 2 and 8 MiB).
    pub fn prefetch(mut self, prefetch: Prefetch) -> Self {
        self.settings.prefetch = prefetch;
        self
    }

    /// Stop at the first request whose response [`is_failure`](MapResponse::is_failure); the
    /// requests after it are not run (those already taken from the sequence are dropped).
    pub fn stop_on_failure(mut self, stop: bool) -> Self {
        self.settings.stop_on_failure = stop;
        self
    }

    /// Run `requests` in order, appending one response per request run to `responses`.
    /// Returns how many were run: all of them, or up to and including the first failure
    /// under [`stop_on_failure`](Self::stop_on_failure). The responses are those of calling
    /// [`MapRef::execute`] on each request in this order.
    pub fn run<'q, Q>(
        &self,
        requests: impl IntoIterator<Item = MapRequest<'q, K, V, Q>>,
        responses: &mut Vec<MapResponse<'h, V>>,
    ) -> usize
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + 'q,
    {
        let requests = requests.into_iter();
        responses.reserve(requests.size_hint().0);
        self.run_each(requests, |_, response| responses.push(response))
    }

    /// As [`run`](Self::run), handing each response to `each(index, response)` as soon as it
    /// is known.
    pub fn run_each<'q, Q>(
        &self,
        requests: impl IntoIterator<Item = MapRequest<'q, K, V, Q>>,
        mut each: impl FnMut(usize, MapResponse<'h, V>),
    ) -> usize
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + 'q,
    {
        let mut ran = 0;
        let mut answer = |i: usize, response: MapResponse<'h, V>| {
            let stop = self.settings.stops_at(response.is_failure());
            each(i, response);
            ran = i + 1;
            !stop
        };
        let depth = self.settings.depth;
        if depth == 0 || !self.map.prefetch_enabled(self.settings.prefetch) {
            for (i, request) in requests.into_iter().enumerate() {
                if !answer(i, self.map.execute(request)) {
                    break;
                }
            }
            return ran;
        }
        // No early gets: a batch keeps program order across keys too.
        let mut window = MapPipeline::new(self.map, depth, true, false);
        for (i, request) in requests.into_iter().enumerate() {
            if let Some((j, response)) = window.submit(i, request) {
                if !answer(j, response) {
                    return ran;
                }
            }
        }
        while let Some((j, response)) = window.complete_one() {
            if !answer(j, response) {
                break;
            }
        }
        ran
    }
}

/// A request waiting in a [`MapPipeline`], with its key's hash word.
struct Waiting<'q, K, V, Q: ?Sized, T> {
    tag: T,
    request: MapRequest<'q, K, V, Q>,
    word: u64,
    /// A get's value word as stage 2 read it, when the get takes effect there.
    read: Option<Option<u64>>,
}

/// Buckets of [`MapPipeline::waiting_writes`] (by the hash word's top byte).
const WRITE_BUCKETS: usize = 256;

/// A bounded window of [`MapRequest`]s, each prefetched in two stages while it waits
/// (module docs of `any_batch.rs`), and answered in submission order. Made by
/// [`MapRef::pipeline`]; one per thread.
///
/// **Order.** Writes take effect in submission order, when they leave the window. A get takes
/// effect at its stage 2, when it searches its bin, if no write on a key of its hash word is
/// waiting then (it is answered from that search, with no second one); otherwise when it
/// leaves. So requests on the same key take effect in submission order, while a get may take
/// effect before writes on other keys submitted before it (DRAMHiT's asynchronous interface).
/// Where a thread needs its gets ordered after its writes to other keys, use a [`MapBatch`],
/// which keeps program order.
///
/// Dropping a pipeline drops the requests still waiting without running them: call
/// [`flush`](Self::flush) first.
pub struct MapPipeline<'h, 'q, K, V, S, Q: ?Sized, T, G = LocalGuard<'h>> {
    map: &'h MapRef<'h, K, V, S, G>,
    prefetch: bool,
    /// Gets take effect at stage 2 when they can (not in a batch, which keeps program order).
    early_gets: bool,
    /// The lookahead ring (`raw::ring`): stage 1 when a request enters, stage 2 half a window
    /// later (its chase), and it leaves a window later.
    ring: Stream<Waiting<'q, K, V, Q, T>>,
    /// Waiting writes, counted by the bucket of their hash word: a get reads early only when
    /// its bucket counts none, so no write on its key is waiting.
    waiting_writes: [u16; WRITE_BUCKETS],
}

/// Names the slots a [`WindowStages`] handles, owning none.
type SlotsOf<'q, K, V, Q, T> = fn() -> Waiting<'q, K, V, Q, T>;

/// What a [`MapPipeline`]'s ring does to a request while it waits (the last parameters only
/// name the slots it holds).
struct WindowStages<'a, 'h, 'q, K, V, S, Q: ?Sized, T, G> {
    map: &'h MapRef<'h, K, V, S, G>,
    prefetch: bool,
    early_gets: bool,
    waiting_writes: &'a [u16; WRITE_BUCKETS],
    slots: PhantomData<SlotsOf<'q, K, V, Q, T>>,
}

impl<'a, 'h, K, V, S, Q: ?Sized, T, G> WindowStages<'a, 'h, '_, K, V, S, Q, T, G> {
    /// The stages of a pipeline of `map` with these settings and waiting writes (a pipeline's
    /// fields, borrowed apart from its ring).
    fn new(
        map: &'h MapRef<'h, K, V, S, G>,
        prefetch: bool,
        early_gets: bool,
        waiting_writes: &'a [u16; WRITE_BUCKETS],
    ) -> Self {
        WindowStages {
            map,
            prefetch,
            early_gets,
            waiting_writes,
            slots: PhantomData,
        }
    }
}

impl<'q, K, V, S, Q, T, G: Guard> Stages for WindowStages<'_, '_, 'q, K, V, S, Q, T, G>
where
    K: Hash + Eq + Borrow<Q>,
    S: BuildHasher,
    Q: Hash + Eq + ?Sized + 'q,
{
    type Slot = Waiting<'q, K, V, Q, T>;

    fn locate(&mut self, _: usize) -> Self::Slot {
        unreachable!("a pipeline's requests enter located")
    }

    /// Stage 1: the bin.
    #[inline(always)]
    fn prefetch(&mut self, waiting: &Self::Slot) {
        if self.prefetch {
            self.map.prefetch_bin(waiting.word);
        }
    }

    /// Stage 2: the bin is searched for the hash word and the entry of a match prefetched; a
    /// get with no write of its key waiting keeps what it read.
    #[inline(always)]
    fn chase(&mut self, waiting: &mut Self::Slot) {
        if !self.prefetch {
            return;
        }
        let value = self.map.read_ahead(waiting.word);
        if self.early_gets
            && matches!(waiting.request, MapRequest::Get(_))
            && self.waiting_writes[bucket(waiting.word)] == 0
        {
            waiting.read = Some(value);
        }
    }

    fn run(&mut self, _: usize, _: Self::Slot) -> Result<(), ()> {
        unreachable!("a pipeline runs what its ring hands back")
    }
}

impl<'h, 'q, K, V, S, Q, T, G: Guard> MapPipeline<'h, 'q, K, V, S, Q, T, G>
where
    K: Hash + Eq + Borrow<Q>,
    S: BuildHasher,
    Q: Hash + Eq + ?Sized,
{
    fn new(
        map: &'h MapRef<'h, K, V, S, G>,
        window: usize,
        prefetch: bool,
        early_gets: bool,
    ) -> Self {
        // The counts fit: at most `MAX_PIPELINE_WINDOW` requests wait.
        const { assert!(MAX_PIPELINE_WINDOW <= u16::MAX as usize) };
        MapPipeline {
            map,
            prefetch,
            early_gets,
            ring: Stream::new(window),
            waiting_writes: [0; WRITE_BUCKETS],
        }
    }

    /// Prefetch or not (default [`Prefetch::Auto`], by the size of the table and entries).
    /// Without prefetching, every request takes effect when it leaves the window.
    pub fn prefetch(mut self, prefetch: Prefetch) -> Self {
        self.prefetch = self.map.prefetch_enabled(prefetch);
        self
    }

    /// Requests submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.ring.waiting()
    }

    /// Queue `request` under `tag`. If the window was full, the oldest request completes
    /// and is returned with its tag.
    #[inline]
    pub fn submit(
        &mut self,
        tag: T,
        request: MapRequest<'q, K, V, Q>,
    ) -> Option<(T, MapResponse<'h, V>)> {
        let word = self.map.request_word(&request);
        if !matches!(request, MapRequest::Get(_)) {
            self.waiting_writes[bucket(word)] += 1;
        }
        let waiting = Waiting {
            tag,
            request,
            word,
            read: None,
        };
        let mut stages = WindowStages::new(
            self.map,
            self.prefetch,
            self.early_gets,
            &self.waiting_writes,
        );
        let oldest = self.ring.push(&mut stages, waiting)?;
        Some(self.complete(oldest))
    }

    /// Complete every waiting request, calling `done(tag, response)` for each, in submission
    /// order.
    pub fn flush(&mut self, mut done: impl FnMut(T, MapResponse<'h, V>)) {
        while let Some((tag, response)) = self.complete_one() {
            done(tag, response);
        }
    }

    /// Complete the oldest waiting request; `None` if none waits.
    #[inline]
    fn complete_one(&mut self) -> Option<(T, MapResponse<'h, V>)> {
        let mut stages = WindowStages::new(
            self.map,
            self.prefetch,
            self.early_gets,
            &self.waiting_writes,
        );
        let oldest = self.ring.pop(&mut stages)?;
        Some(self.complete(oldest))
    }

    /// Run a request that left the window (or answer a get from its stage 2).
    #[inline(always)]
    fn complete(&mut self, oldest: Waiting<'q, K, V, Q, T>) -> (T, MapResponse<'h, V>) {
        let response = match (oldest.request, oldest.read) {
            // SAFETY: `value` was read under the handle's guard (`read_ahead`).
            (MapRequest::Get(key), Some(value)) => MapResponse::Get(
                value.and_then(|value| unsafe { self.map.value_in(value, |k| k.borrow() == key) }),
            ),
            (request, _) => {
                let write = !matches!(request, MapRequest::Get(_));
                let response = self.map.execute_hashed(oldest.word, request);
                // Counted out only now that it took effect: a get reading early after this
                // point sees it.
                if write {
                    self.waiting_writes[bucket(oldest.word)] -= 1;
                }
                response
            }
        };
        (oldest.tag, response)
    }
}

/// The [`MapPipeline::waiting_writes`] bucket of a hash word.
#[inline(always)]
fn bucket(word: u64) -> usize {
    (word >> 56) as usize
}

impl<K, V, S, Q: ?Sized, T, G> fmt::Debug for MapPipeline<'_, '_, K, V, S, Q, T, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapPipeline")
            .field("window", &self.ring.far())
            .field("in_flight", &self.ring.waiting())
            .field("prefetch", &self.prefetch)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    //! Small runs of every path for Miri; `tests/any_batch.rs` has the differential tests.

    use super::*;
    use crate::{batch::MAX_DEPTH, Map};

    fn requests(n: u64) -> Vec<MapRequest<'static, String, Vec<u8>, str>> {
        const KEYS: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];
        (0..n)
            .map(|i| {
                let key = KEYS[(i % 7) as usize];
                match i % 5 {
                    0 => MapRequest::InsertNew(key.to_string(), vec![i as u8]),
                    1 => MapRequest::Get(key),
                    2 => MapRequest::Insert(key.to_string(), vec![i as u8; 3]),
                    3 => MapRequest::Put(key.to_string(), vec![i as u8; 2]),
                    _ => MapRequest::Remove(KEYS[(i % 6) as usize]),
                }
            })
            .collect()
    }

    fn owned(response: MapResponse<'_, Vec<u8>>) -> String {
        format!("{response:?}")
    }

    #[test]
    fn batches_and_pipelines_answer_as_single_calls() {
        let n = if cfg!(miri) { 24 } else { 200 };
        let single = Map::<String, Vec<u8>>::builder().bins(2).build().unwrap();
        let expected: Vec<String> = {
            let m = single.pin();
            requests(n)
                .into_iter()
                .map(|r| owned(m.execute(r)))
                .collect()
        };
        for depth in [0, 1, 2, 5, MAX_DEPTH] {
            let map = Map::<String, Vec<u8>>::builder().bins(2).build().unwrap();
            let m = map.pin();
            let mut got = Vec::new();
            let ran = m
                .batch()
                .depth(depth)
                .prefetch(Prefetch::Always)
                .run(requests(n), &mut got);
            let got: Vec<String> = got.into_iter().map(owned).collect();
            assert_eq!((ran, &got), (n as usize, &expected), "batch depth {depth}");
        }
        for window in [1, 2, 7, 64] {
            let map = Map::<String, Vec<u8>>::builder().bins(2).build().unwrap();
            let m = map.pin();
            let mut pipeline = m.pipeline(window).prefetch(Prefetch::Always);
            let mut got = Vec::new();
            for (tag, request) in requests(n).into_iter().enumerate() {
                got.extend(pipeline.submit(tag, request));
                assert!(pipeline.in_flight() <= window);
            }
            pipeline.flush(|tag, response| got.push((tag, response)));
            assert!(got.iter().enumerate().all(|(i, (tag, _))| i == *tag));
            let got: Vec<String> = got.into_iter().map(|(_, r)| owned(r)).collect();
            assert_eq!(got, expected, "pipeline window {window}");
        }
    }

    #[test]
    fn a_stopped_batch_runs_nothing_after_the_failure() {
        let map = Map::<String, u32>::new();
        let m = map.pin();
        assert!(m.insert_new("taken".to_string(), 0).is_inserted());
        let requests = [
            MapRequest::<_, _, str>::InsertNew("a".to_string(), 1),
            MapRequest::InsertNew("taken".to_string(), 2),
            MapRequest::InsertNew("b".to_string(), 3),
        ];
        let mut got = Vec::new();
        let ran = m
            .batch()
            .depth(4)
            .prefetch(Prefetch::Always)
            .stop_on_failure(true)
            .run(requests, &mut got);
        assert_eq!(ran, 2);
        assert_eq!(got[1], MapResponse::InsertNew(Ok(Insert::Present(&0))));
        assert_eq!(
            m.get("b"),
            None,
            "the request after the failure did not run"
        );
        assert_eq!(m.get("a"), Some(&1));
    }
}
