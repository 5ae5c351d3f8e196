//! Partitioned delegation for skewed, write-heavy work (DRAMHiT-P, `dramhit.txt` §3.2-§3.3).
//!
//! # What it is
//!
//! A [`Partitioned`] map is `n` [`FlatMap`]s (partitions) and `n` [`Handle`]s, one per thread
//! taking part. A key belongs to one partition (a keyed hash of the key, independent of the
//! partitions' own hasher), and each partition has an owner: the handle of the same index.
//! Any thread reads any partition directly ([`Partitioned::get`]), as a get on a `FlatMap`
//! does: no write, no message.
//!
//! An update on a handle (`insert`, `insert_new`, `put`, `fetch_add`, `remove`) becomes a 24-byte
//! message in a single-producer single-consumer *section queue* from the sending handle to
//! the key's partition (`queue.rs`: positions shared once per section, the next queue line
//! prefetched). Updates of the handle's own partition skip the queue. A partition is served
//! in rounds: take what has arrived in each of its queues, run it as one
//! [`Batch`](crate::Batch) on the partition (in order, the next bins prefetched), queue the
//! responses to [`Handle::submit`]ted requests back to their senders.
//!
//! Who serves: a partition's queues (the consuming side of the queues into it, the producing
//! side of the reply queues out of it) sit behind a lock, taken with `try_lock`. The owner
//! takes it on each of its turns (when it sends a whole section, polls, flushes, or waits),
//! so in the steady state the owner alone writes its partition and its hot lines stay in its
//! cache. A handle that waits for a partition (its queue there is full, or it is flushing)
//! takes the partition's lock itself and serves a round when the owner is not serving, once
//! the owner has closed its handle or has not made room within a backoff (some spins and
//! yields: helping sooner would write the partition's hot lines from a second core): so no
//! wait depends on a thread that has stopped calling its handle, or closed it, and closing
//! needs no barrier. The lock is what keeps each ring single-consumer and
//! single-producer.
//!
//! # When to use it (and when not)
//!
//! Under high skew a shared table's hot keys are written by every thread: each write pulls
//! the key's line into the writer's cache exclusively, and the threads take turns on it (a
//! cross-core transfer, 100-400 cycles, per write; DRAMHiT Fig. 2). Delegation replaces those
//! transfers with messages: the hot lines stay in their owner's cache, and a message costs a
//! few tens of cycles of queue work plus its share of one line transfer per section. That
//! pays when writes dominate and a few keys take most of them (k-mer counting, zipf-like
//! counters; the paper's Fig. 8 gains start around zipf 0.8).
//!
//! It does not pay on uniform keys (no line is contended, and the queue work is added to the
//! same DRAM misses: batches on a shared [`FlatMap`] are faster), for read-mostly work (reads
//! never conflict in the first place), or where a writer needs its update's effect at once.
//! And the threads should take part evenly: a handle serves its partition on its turns, so
//! the messages to the partition of a thread that is busy elsewhere wait until their senders'
//! queues fill or they flush (then the senders serve it themselves).
//!
//! # What is promised
//!
//! - Every update sent through a handle is applied exactly once (one round, under the
//!   partition's lock), in the order that handle sent it relative to the handle's other updates (all of one
//!   handle's updates of one key keep their order; updates from different handles interleave
//!   in some order).
//! - Updates are asynchronous: they take effect some time after the call returns. After
//!   [`Handle::flush`] returns, every update that handle sent before it has taken effect and
//!   is visible to every later get on any thread, and every response it asked for has been
//!   delivered.
//! - Each update, once applied, is one linearizable operation on the partition.
//! - A partition that cannot take a key ([`Error::Full`]: capped with
//!   [`Builder::max_bins`]) is marked full by its owner; from then on an update that may add
//!   a key is refused at the call with `Err(Error::Full)` (nothing sent) until a remove
//!   succeeds in that partition. Updates already on their way when it filled fail at the owner:
//!   a submitted request gets its error as its response, a fire-and-forget one is counted and
//!   reported by the sender's next `flush` as [`Error::Undelivered`]. Nothing fails silently.
//!
//! # Reading order
//!
//! `queue.rs` (the rings and why they are race-free), then [`Partitioned`] and its `serve`
//! (a round), then [`Handle`]'s `send` and [`Handle::flush`] (waiting without deadlock: every
//! wait loop serves the partition it waits for).

mod queue;

use core::{fmt, hash::BuildHasher};
use std::{
    collections::VecDeque,
    sync::{Mutex, OnceLock, TryLockError},
};

use crossbeam_utils::{Backoff, CachePadded};

use self::queue::{Consumer, Producer, Ring};
use crate::{
    hash::{fastrange, DefaultHashBuilder, WyHash},
    sync::{AtomicBool, AtomicUsize, Ordering},
    Builder, Counter, Delta, Error, FlatMap, Inline, InlineKey, Request, Response,
};

/// Most handles (and partitions) one map takes: the queues grow with the square of it.
pub const MAX_THREADS: usize = 256;

/// One message: an update (or a get) for the owner of its key. Keys and values travel as
/// their words (`Inline::to_word`), so every map's messages are the same 24 bytes and the
/// queue code is compiled once.
#[derive(Clone, Copy, Debug)]
struct Message {
    key: u64,
    value: u64,
    /// The sender's tag, if it wants the response back.
    tag: u32,
    answer: bool,
    op: Op,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get,
    Insert,
    Upsert,
    Put,
    FetchAdd,
    Remove,
}

impl Op {
    /// Whether the operation may add a key (and so is refused by a full partition).
    fn may_add(self) -> bool {
        matches!(self, Op::Insert | Op::Upsert | Op::FetchAdd)
    }
}

/// An owner's answer to a message: the response to a submitted request, or the notice that a
/// fire-and-forget update failed.
#[derive(Clone, Copy, Debug)]
struct Reply<V> {
    /// `None` for a notice.
    tag: Option<u32>,
    response: Response<V>,
}

/// A partition: one map, the flag its owner raises when it is full, and the owner's side of
/// its queues.
struct Partition<K, V, S> {
    map: FlatMap<K, V, S>,
    /// Raised by the owner when an update failed for want of room, lowered by its next
    /// successful remove; read by senders before an update that may add a key. Read-mostly,
    /// so on its own line.
    full: CachePadded<AtomicBool>,
    /// Raised when the owner handle closes (lowered by `handles` for the next round): a
    /// sender waiting for this partition serves it at once instead of giving the owner a
    /// backoff's time first.
    abandoned: AtomicBool,
    /// The consuming side of the queues into this partition and the producing side of the
    /// reply queues out of it. Whoever holds the lock serves the partition: its owner handle
    /// on each of its turns, another handle only to help when the owner falls behind or has
    /// closed (so no wait depends on a thread that has stopped calling its handle). The lock
    /// is what makes each ring single-consumer and single-producer (`queue.rs`, rule 3).
    owner: Mutex<Owner<K, V>>,
}

impl<K, V, S> Partition<K, V, S> {
    /// Whether a sender waiting for this partition should serve it itself now: its owner
    /// has closed, or has not made room within the sender's backoff (helping sooner would
    /// write the partition's hot lines from a second core, which is what delegation is there
    /// to avoid).
    #[inline]
    fn help_now(&self, backoff: &Backoff) -> bool {
        backoff.is_completed() || self.abandoned.load(Ordering::Relaxed)
    }
}

/// The serving side of one partition (behind [`Partition::owner`]).
struct Owner<K, V> {
    /// From each sender (the partition's own index unused: a zero-sized ring).
    inbound: Box<[Consumer<Message>]>,
    /// Replies to each sender.
    answers_out: Box<[Producer<Reply<V>>]>,
    /// Scratch of a round: its messages, their senders, their requests.
    round: Vec<Message>,
    round_from: Vec<u32>,
    requests: Vec<Request<K, V>>,
}

/// A map split into partitions, each written by its owner thread, with updates from other
/// threads delegated to the owner through queues. See the [module docs](self) for when this
/// beats a shared [`FlatMap`] (skewed, write-heavy work) and when it does not.
///
/// ```
/// use floe::delegate::Partitioned;
///
/// let counts = Partitioned::<u64, u64>::builder(2).build()?;
/// std::thread::scope(|s| {
///     for mut handle in counts.handles()? {
///         s.spawn(move || {
///             for i in 0..10_000u64 {
///                 handle.fetch_add(i % 100, 1)?; // fire and forget
///             }
///             handle.close(|_, _| {}) // waits until this thread's updates are applied
///         });
///     }
///     Ok::<_, floe::Error>(())
/// })?;
/// assert_eq!(counts.get(&7), Some(200));
/// assert_eq!(counts.len(), 100);
/// # Ok::<(), floe::Error>(())
/// ```
pub struct Partitioned<K, V, S = DefaultHashBuilder> {
    // Field order: the partitions (whose owners point into the rings) drop before the rings.
    partitions: Box<[Partition<K, V, S>]>,
    /// The request queue from handle `from` to partition `to` is `requests[from * n + to]`
    /// (the diagonal is unused: a handle applies its own partition's updates itself).
    ///
    /// A `Vec`, not a `Box`: the serving sides hold pointers into it, and moving a `Box`
    /// asserts unique access to its contents (Stacked Borrows), which would invalidate them
    /// whenever the map moves; moving a `Vec` does not.
    requests: Vec<Ring<Message>>,
    /// The reply queue from partition `from` to handle `to` is `replies[from * n + to]`
    /// (a `Vec` for the same reason).
    replies: Vec<Ring<Reply<V>>>,
    /// Messages per section (a power of two).
    section: usize,
    /// Picks a key's partition; keyed at random, independent of the partitions' hasher.
    router: WyHash,
    /// The addition of `V` if it is a [`Counter`], recorded by the first `fetch_add` sent
    /// (the owner's code is generic over any `V` and needs it to apply one).
    add: OnceLock<fn(V, V) -> V>,
    /// Handles out and not closed; `handles` hands out a new set only at zero.
    open: AtomicUsize,
}

/// Configures a [`Partitioned`] map: [`Partitioned::builder`].
#[derive(Clone, Debug)]
pub struct PartitionedBuilder<K, V, S = DefaultHashBuilder> {
    threads: usize,
    map: Builder<K, V, S>,
    section: usize,
    sections: usize,
}

impl<K: InlineKey, V: Inline> Partitioned<K, V> {
    /// Configure a map for `threads` handles (and so `threads` partitions).
    pub fn builder(threads: usize) -> PartitionedBuilder<K, V> {
        PartitionedBuilder {
            threads,
            map: FlatMap::builder(),
            section: 32,
            sections: 4,
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> PartitionedBuilder<K, V, S> {
    /// How each partition is built. Its `capacity` is the whole map's (divided among the
    /// partitions); `max_bins` caps each partition; the hasher is cloned for each.
    pub fn map<S2: BuildHasher + Clone>(
        self,
        map: Builder<K, V, S2>,
    ) -> PartitionedBuilder<K, V, S2> {
        PartitionedBuilder {
            threads: self.threads,
            map,
            section: self.section,
            sections: self.sections,
        }
    }

    /// Messages a sender writes before it publishes them to the owner (a power of two,
    /// default 32; 24 bytes each). Larger sections share the queue positions less often and
    /// deliver later.
    pub fn section(mut self, messages: usize) -> Self {
        self.section = messages;
        self
    }

    /// Sections per queue (a power of two of at least 2, default 4): how far a sender may run
    /// ahead of the owner before it waits.
    pub fn sections(mut self, sections: usize) -> Self {
        self.sections = sections;
        self
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher + Clone> PartitionedBuilder<K, V, S> {
    /// Allocate the partitions and the queues.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for 0 or more than [`MAX_THREADS`] threads, or a section or
    /// section count that is not a power of two (or fewer than 2 sections); the map
    /// builder's errors ([`Builder::build`]) for the partitions.
    pub fn build(self) -> Result<Partitioned<K, V, S>, Error> {
        let n = self.threads;
        if n == 0 || n > MAX_THREADS {
            return Err(Error::InvalidConfig(
                "a partitioned map takes 1 to 256 threads",
            ));
        }
        if !self.section.is_power_of_two() || self.section > 1 << 16 {
            return Err(Error::InvalidConfig(
                "a section is a power of two of at most 65536 messages",
            ));
        }
        if !self.sections.is_power_of_two() || !(2..=1 << 16).contains(&self.sections) {
            return Err(Error::InvalidConfig(
                "a queue holds a power of two of 2 to 65536 sections",
            ));
        }
        let capacity = self.section * self.sections;
        let rings = |i: usize| {
            let (from, to) = (i / n, i % n);
            if from == to {
                0
            } else {
                capacity
            }
        };
        let requests: Vec<Ring<Message>> = (0..n * n)
            .map(|i| Ring::new(rings(i), self.section))
            .collect();
        let replies: Vec<Ring<Reply<V>>> = (0..n * n)
            .map(|i| Ring::new(rings(i), self.section))
            .collect();
        let per_partition = self.map.config.capacity.div_ceil(n);
        let partitions = (0..n)
            .map(|p| {
                Ok(Partition {
                    map: self.map.clone().capacity(per_partition).build()?,
                    full: CachePadded::new(AtomicBool::new(false)),
                    abandoned: AtomicBool::new(false),
                    owner: Mutex::new(Owner {
                        // SAFETY: partition `p`'s owner state is the only consumer of the
                        // rings into `p` and the only producer of the rings out of it (one
                        // `Owner` per partition, used under its lock); the rings are fresh;
                        // they live in vectors the map keeps (moving a vector moves neither
                        // them nor asserts unique access to them) and drop after the
                        // partitions (field order).
                        inbound: (0..n)
                            .map(|from| unsafe { Consumer::new(ring_at(&requests, n, from, p)) })
                            .collect(),
                        // SAFETY: as above.
                        answers_out: (0..n)
                            .map(|to| unsafe { Producer::new(ring_at(&replies, n, p, to)) })
                            .collect(),
                        round: Vec::new(),
                        round_from: Vec::new(),
                        requests: Vec::new(),
                    }),
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(Partitioned {
            partitions,
            requests,
            replies,
            section: self.section,
            router: WyHash::new(),
            add: OnceLock::new(),
            open: AtomicUsize::new(0),
        })
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Partitioned<K, V, S> {
    /// The handles, one per thread: handle `i` owns partition `i`. Move each to its thread;
    /// close each ([`Handle::close`], or drop it) when its thread is done. The handles may be
    /// taken again once all have closed.
    ///
    /// # Errors
    /// [`Error::HandlesOut`] if handles are out and not all closed.
    pub fn handles(&self) -> Result<Vec<Handle<'_, K, V, S>>, Error> {
        let n = self.threads();
        // Acquire on success: pairs with the Release decrement of the last handle of the
        // previous round to close, so the positions it published are what the new handles
        // read.
        if self
            .open
            .compare_exchange(0, n, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(Error::HandlesOut);
        }
        for partition in self.partitions.iter() {
            // Relaxed: the handles reach their threads through a spawn or a channel, which
            // orders this before their loads.
            partition.abandoned.store(false, Ordering::Relaxed);
        }
        Ok((0..n)
            .map(|me| Handle {
                map: self,
                me,
                // SAFETY: handle `me` is the only producer of the rings from `me` and the
                // only consumer of the reply rings to `me` (this round's handles are made
                // here, once; the last round's all closed, `open`, having published and
                // released everything, `close`); the rings outlive the handle, which
                // borrows the map.
                outbound: (0..n)
                    .map(|to| unsafe { Producer::new(ring_at(&self.requests, n, me, to)) })
                    .collect(),
                // SAFETY: as above.
                answers_in: (0..n)
                    .map(|from| unsafe { Consumer::new(ring_at(&self.replies, n, from, me)) })
                    .collect(),
                local: Vec::with_capacity(self.section),
                local_requests: Vec::with_capacity(self.section),
                received: Vec::new(),
                replies: VecDeque::new(),
                awaiting: 0,
                undelivered: 0,
                closed: false,
            })
            .collect())
    }

    /// Handles (and partitions).
    pub fn threads(&self) -> usize {
        self.partitions.len()
    }

    /// The partition `key` belongs to (its owner is the handle of the same index).
    #[inline]
    pub fn partition_of(&self, key: &K) -> usize {
        fastrange(self.router.hash_one(key.to_word()), self.partitions.len())
    }

    /// Partition `index`'s map, to read (writing it directly while handles are out mixes
    /// with the delegated updates in no defined order). `None` past the last partition.
    pub fn partition(&self, index: usize) -> Option<&FlatMap<K, V, S>> {
        self.partitions.get(index).map(|p| &p.map)
    }

    /// The value of `key`, read directly from its partition on the calling thread. Updates
    /// still in queues are not seen (see [`Handle::flush`]).
    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        self.partitions[self.partition_of(key)].map.get(key)
    }

    /// Whether `key` is present (as [`get`](Self::get)).
    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Keys in all partitions (a sum of their counts, not a snapshot while handles write).
    pub fn len(&self) -> usize {
        self.partitions.iter().map(|p| p.map.len()).sum()
    }

    /// Whether no partition holds a key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Visit every key and value, partition by partition (as [`FlatMap::for_each`] on each).
    pub fn for_each(&self, mut visit: impl FnMut(K, V)) {
        for partition in self.partitions.iter() {
            partition.map.for_each(&mut visit);
        }
    }

    /// The partitions' maps, for use as plain maps (no handle can be out: this takes the map
    /// by value).
    pub fn into_partitions(self) -> Vec<FlatMap<K, V, S>> {
        let Partitioned { partitions, .. } = self;
        partitions.into_vec().into_iter().map(|p| p.map).collect()
    }

    /// Bytes of the queues (request and reply rings), besides the partitions' tables.
    pub fn queue_bytes(&self) -> usize {
        self.requests.iter().map(Ring::bytes).sum::<usize>()
            + self.replies.iter().map(Ring::bytes).sum::<usize>()
    }

    /// The message for `request` (recording the addition of a counter for the owners).
    #[inline]
    fn message(&self, request: Request<K, V>, tag: Option<u32>) -> Message {
        let (op, key, value) = match request {
            Request::Get(k) => (Op::Get, k, None),
            Request::InsertNew(k, v) => (Op::Insert, k, Some(v)),
            Request::Insert(k, v) => (Op::Upsert, k, Some(v)),
            Request::Put(k, v) => (Op::Put, k, Some(v)),
            Request::FetchAdd(k, delta) => {
                let (delta, add) = delta.into_parts();
                self.add.get_or_init(|| add);
                (Op::FetchAdd, k, Some(delta))
            }
            Request::Remove(k) => (Op::Remove, k, None),
        };
        Message {
            key: key.to_word(),
            value: value.map_or(0, Inline::to_word),
            tag: tag.unwrap_or(0),
            answer: tag.is_some(),
            op,
        }
    }

    /// The request a message carries.
    #[inline]
    fn request(&self, message: &Message) -> Request<K, V> {
        let key = K::from_word(message.key);
        let value = V::from_word(message.value);
        match message.op {
            Op::Get => Request::Get(key),
            Op::Insert => Request::InsertNew(key, value),
            Op::Upsert => Request::Insert(key, value),
            Op::Put => Request::Put(key, value),
            Op::FetchAdd => {
                // A fetch-add message is made only by `message`, which records the addition
                // first; the message reaches its applier through a queue whose
                // Release/Acquire pair orders that record before this read (or on the same
                // thread).
                let add = *self
                    .add
                    .get()
                    .expect("the addition is recorded before any fetch_add is sent");
                Request::FetchAdd(key, Delta::from_parts(value, add))
            }
            Op::Remove => Request::Remove(key),
        }
    }

    /// Apply `requests` (from `messages`) to `partition` as one batch, in order, handing each
    /// message that needs a reply (it asked for one, or it failed) to `reply(index, reply)`.
    fn apply(
        &self,
        partition: &Partition<K, V, S>,
        messages: &[Message],
        requests: &[Request<K, V>],
        mut reply: impl FnMut(usize, Reply<V>),
    ) {
        partition.map.batch().run_each(requests, |i, response| {
            let message = &messages[i];
            let failed = matches!(
                response,
                Response::InsertNew(Err(_)) | Response::Insert(Err(_)) | Response::FetchAdd(Err(_))
            );
            if failed {
                // Relaxed: a hint for senders, who learn of each failure exactly through its
                // reply anyway.
                partition.full.store(true, Ordering::Relaxed);
            } else if matches!(response, Response::Remove(Some(_)))
                && partition.full.load(Ordering::Relaxed)
            {
                partition.full.store(false, Ordering::Relaxed);
            }
            if message.answer || failed {
                let tag = message.answer.then_some(message.tag);
                reply(i, Reply { tag, response });
            }
        });
    }

    /// Serve partition `index` once if no one else is (a round: take what has arrived from
    /// every sender, at most a section each and no more than the reply queue back to that
    /// sender has room for, so answering never waits; run it as one batch; queue and publish
    /// the replies; then release the messages). Returns whether it served.
    fn serve(&self, index: usize) -> bool {
        let partition = &self.partitions[index];
        let mut owner = match partition.owner.try_lock() {
            Ok(owner) => owner,
            // A panic while serving (in the hasher) left the rounds' state consistent: a
            // round's messages are released only after it is applied.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        let owner = &mut *owner;
        let n = self.threads();
        owner.round.clear();
        owner.round_from.clear();
        for from in 0..n {
            if from == index {
                continue; // the unused diagonal ring
            }
            if let Some(next) = owner.inbound.get(from + 1) {
                next.prefetch();
            }
            let room = owner.answers_out[from].room(self.section);
            let taken = owner.inbound[from].pop_into(&mut owner.round, self.section.min(room));
            owner
                .round_from
                .extend(core::iter::repeat_n(from as u32, taken));
        }
        if owner.round.is_empty() {
            return true;
        }
        owner.requests.clear();
        owner
            .requests
            .extend(owner.round.iter().map(|message| self.request(message)));
        let (round_from, answers_out) = (&owner.round_from, &mut owner.answers_out);
        self.apply(partition, &owner.round, &owner.requests, |i, reply| {
            let pushed = answers_out[round_from[i] as usize].push(reply);
            debug_assert!(
                pushed.is_ok(),
                "a round takes no more than its replies' room"
            );
        });
        // Publish the replies before releasing their messages: a sender that sees its
        // messages released (`Producer::drained`) finds their replies queued.
        for producer in owner.answers_out.iter_mut() {
            producer.publish();
        }
        for consumer in owner.inbound.iter_mut() {
            consumer.release();
        }
        true
    }
}

impl<K, V, S> fmt::Debug for Partitioned<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partitioned")
            .field("threads", &self.partitions.len())
            .field("section", &self.section)
            .finish_non_exhaustive()
    }
}

/// One thread's part in a [`Partitioned`] map: it sends updates to their partitions' owners
/// and owns partition [`index`](Self::index), applying what others send it. Made by
/// [`Partitioned::handles`]; used by one thread at a time (its methods take `&mut self`).
///
/// A handle serves its partition (applies the messages waiting for it) whenever it sends a
/// full section, [`poll`](Self::poll)s, [`flush`](Self::flush)es, or waits for room in a
/// queue; while it waits it also serves the partition it waits for, once that partition's
/// owner has closed or has not made room within a backoff, so no handle waits for long on a
/// thread that has stopped calling its handle or has closed it. Still, call it regularly:
/// messages to a partition whose owner is busy elsewhere wait until its queues fill.
pub struct Handle<'p, K: InlineKey, V: Inline, S: BuildHasher = DefaultHashBuilder> {
    map: &'p Partitioned<K, V, S>,
    me: usize,
    /// To each partition (index = partition; the own entry a zero-sized ring, unused).
    outbound: Box<[Producer<Message>]>,
    /// Replies from each partition.
    answers_in: Box<[Consumer<Reply<V>>]>,
    /// Updates of the own partition not yet applied (applied a section at a time, as one
    /// batch, so they get the batch's prefetching too).
    local: Vec<Message>,
    local_requests: Vec<Request<K, V>>,
    /// Scratch of `collect_replies`.
    received: Vec<Reply<V>>,
    /// Responses received and not yet handed to the caller.
    replies: VecDeque<(u32, Response<V>)>,
    /// Submitted requests whose responses have not arrived.
    awaiting: usize,
    /// Fire-and-forget updates that failed at their partition since the last `flush`.
    undelivered: usize,
    closed: bool,
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Handle<'_, K, V, S> {
    /// The partition this handle owns.
    pub fn index(&self) -> usize {
        self.me
    }

    /// The value of `key`, read directly (as [`Partitioned::get`]): this handle's own updates
    /// still in queues are not seen.
    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        self.map.get(key)
    }

    /// Insert `key` with `value` only if absent (fire and forget); [`insert`](Self::insert)
    /// replaces a present value.
    ///
    /// # Errors
    /// [`Error::Full`] if the key's partition is full (nothing is sent).
    #[inline]
    pub fn insert_new(&mut self, key: K, value: V) -> Result<(), Error> {
        self.send(Request::InsertNew(key, value), None)
    }

    /// Insert, or overwrite a present value, as std's `HashMap::insert` does (fire and
    /// forget).
    ///
    /// # Errors
    /// [`Error::Full`] if the key's partition is full (nothing is sent).
    #[inline]
    pub fn insert(&mut self, key: K, value: V) -> Result<(), Error> {
        self.send(Request::Insert(key, value), None)
    }

    /// [`insert`](Self::insert)'s former name.
    ///
    /// # Errors
    /// As [`insert`](Self::insert).
    #[deprecated(
        since = "0.2.0",
        note = "`insert` now replaces a present value, as std's does"
    )]
    #[inline]
    pub fn upsert(&mut self, key: K, value: V) -> Result<(), Error> {
        self.insert(key, value)
    }

    /// Overwrite `key`'s value if present (fire and forget).
    ///
    /// # Errors
    /// None today (a put adds no key); `Result` for symmetry with the others.
    #[inline]
    pub fn put(&mut self, key: K, value: V) -> Result<(), Error> {
        self.send(Request::Put(key, value), None)
    }

    /// Remove `key` (fire and forget).
    ///
    /// # Errors
    /// None today (a remove adds no key); `Result` for symmetry with the others.
    #[inline]
    pub fn remove(&mut self, key: K) -> Result<(), Error> {
        self.send(Request::Remove(key), None)
    }

    /// Add `delta` to `key`'s counter, inserting it with `delta` if absent (fire and forget).
    ///
    /// # Errors
    /// [`Error::Full`] if the key's partition is full (nothing is sent).
    #[inline]
    pub fn fetch_add(&mut self, key: K, delta: V) -> Result<(), Error>
    where
        V: Counter,
    {
        self.send(Request::fetch_add(key, delta), None)
    }

    /// Send `request` to its partition and have the response delivered, with `tag`, to a
    /// later [`poll`](Self::poll), [`flush`](Self::flush) or [`close`](Self::close). A `Get`
    /// sent this way is ordered after this handle's earlier updates of the key.
    ///
    /// # Errors
    /// [`Error::Full`] for a request that may add a key to a full partition (nothing is sent,
    /// no response will come).
    #[inline]
    pub fn submit(&mut self, tag: u32, request: Request<K, V>) -> Result<(), Error> {
        self.send(request, Some(tag))
    }

    #[inline]
    fn send(&mut self, request: Request<K, V>, tag: Option<u32>) -> Result<(), Error> {
        let map = self.map;
        let partition = map.partition_of(&request.key());
        let message = map.message(request, tag);
        if message.op.may_add() && map.partitions[partition].full.load(Ordering::Relaxed) {
            return Err(Error::Full);
        }
        self.awaiting += usize::from(tag.is_some());
        if partition == self.me {
            self.local.push(message);
            if self.local.len() >= map.section {
                self.serve();
            }
            return Ok(());
        }
        let mut message = message;
        let backoff = Backoff::new();
        loop {
            match self.outbound[partition].push(message) {
                // A section went out: take the turn to serve too, so an owner that mostly
                // sends still applies what it is sent.
                Ok(true) => {
                    self.serve();
                    return Ok(());
                }
                Ok(false) => return Ok(()),
                Err(back) => {
                    // The partition's server is behind: serve our own (it may be waiting on
                    // us), help that one if it is time to, and retry.
                    message = back;
                    self.serve();
                    if map.partitions[partition].help_now(&backoff) {
                        map.serve(partition);
                    }
                    backoff.snooze();
                }
            }
        }
    }

    /// Serve this handle's partition (apply what has arrived) and hand the responses that
    /// have arrived to `on_reply(tag, response)`. Returns how many responses it handed over.
    pub fn poll(&mut self, mut on_reply: impl FnMut(u32, Response<V>)) -> usize {
        self.serve();
        self.deliver(&mut on_reply)
    }

    /// Publish every partial section, wait until every update this handle sent has taken
    /// effect, and hand every response to `on_reply(tag, response)`. While it waits it serves
    /// this handle's partition and helps serve the partitions it waits for.
    ///
    /// # Errors
    /// [`Error::Undelivered`] with the number of fire-and-forget updates sent since the last
    /// flush that failed at their partition (it was full); the rest took effect.
    pub fn flush(&mut self, mut on_reply: impl FnMut(u32, Response<V>)) -> Result<(), Error> {
        for producer in self.outbound.iter_mut() {
            producer.publish();
        }
        let map = self.map;
        let backoff = Backoff::new();
        loop {
            self.serve();
            let mut waiting = false;
            for (partition, producer) in self.outbound.iter().enumerate() {
                // `drained` reads the partition's `head` with Acquire: the server applied the
                // messages and queued their replies before it released them.
                if !producer.drained() {
                    waiting = true;
                    if map.partitions[partition].help_now(&backoff) {
                        map.serve(partition);
                    }
                }
            }
            if !waiting && self.local.is_empty() {
                break;
            }
            backoff.snooze();
        }
        self.collect_replies();
        debug_assert_eq!(self.awaiting, 0, "every reply is queued before its release");
        self.deliver(&mut on_reply);
        match core::mem::take(&mut self.undelivered) {
            0 => Ok(()),
            updates => Err(Error::Undelivered { updates }),
        }
    }

    /// Flush, then give the handle up. Its partition stays served: the other handles serve
    /// it when they wait for it. Once every handle is closed, [`Partitioned::handles`] hands
    /// out a new set. Dropping a handle closes it too (discarding the responses and the
    /// flush's error).
    ///
    /// # Errors
    /// As [`flush`](Self::flush).
    pub fn close(mut self, on_reply: impl FnMut(u32, Response<V>)) -> Result<(), Error> {
        self.close_with(on_reply)
    }

    fn close_with(&mut self, on_reply: impl FnMut(u32, Response<V>)) -> Result<(), Error> {
        let result = self.flush(on_reply);
        self.closed = true;
        // Relaxed: a hint; a sender that misses it helps after its backoff anyway.
        self.map.partitions[self.me]
            .abandoned
            .store(true, Ordering::Relaxed);
        // Release: the last handle's decrement hands every handle's published positions
        // (each decremented after its flush; the RMWs form a release sequence) to the
        // Acquire in the next `handles`.
        self.map.open.fetch_sub(1, Ordering::Release);
        result
    }

    /// This handle's turn at serving: its own updates, its partition (unless another handle
    /// is serving it), the replies that arrived.
    fn serve(&mut self) {
        let map = self.map;
        if !self.local.is_empty() {
            self.local_requests.clear();
            self.local_requests
                .extend(self.local.iter().map(|message| map.request(message)));
            let (replies, undelivered, awaiting) =
                (&mut self.replies, &mut self.undelivered, &mut self.awaiting);
            map.apply(
                &map.partitions[self.me],
                &self.local,
                &self.local_requests,
                |_, reply| receive(reply, replies, undelivered, awaiting),
            );
            self.local.clear();
        }
        map.serve(self.me);
        self.collect_replies();
    }

    /// Move the replies that arrived into `replies` (responses) and `undelivered` (notices).
    fn collect_replies(&mut self) {
        for consumer in self.answers_in.iter_mut() {
            while consumer.pop_into(&mut self.received, usize::MAX) > 0 {}
            consumer.release();
            for reply in self.received.drain(..) {
                receive(
                    reply,
                    &mut self.replies,
                    &mut self.undelivered,
                    &mut self.awaiting,
                );
            }
        }
    }

    fn deliver(&mut self, on_reply: &mut impl FnMut(u32, Response<V>)) -> usize {
        let count = self.replies.len();
        for (tag, response) in self.replies.drain(..) {
            on_reply(tag, response);
        }
        count
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> Drop for Handle<'_, K, V, S> {
    fn drop(&mut self) {
        if !self.closed {
            // An error here is the flush's: a caller who wants it calls `close`.
            let _ = self.close_with(|_, _| {});
        }
    }
}

impl<K: InlineKey, V: Inline, S: BuildHasher> fmt::Debug for Handle<'_, K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("index", &self.me)
            .field("awaiting", &self.awaiting)
            .finish_non_exhaustive()
    }
}

/// The ring from `from` to `to` among `n` handles.
fn ring_at<M>(rings: &[Ring<M>], n: usize, from: usize, to: usize) -> &Ring<M> {
    &rings[from * n + to]
}

/// File one reply: a response for the caller, or a notice of a failed update.
fn receive<V>(
    reply: Reply<V>,
    replies: &mut VecDeque<(u32, Response<V>)>,
    undelivered: &mut usize,
    awaiting: &mut usize,
) {
    match reply.tag {
        Some(tag) => {
            *awaiting -= 1;
            replies.push_back((tag, reply.response));
        }
        None => *undelivered += 1,
    }
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    //! The handles' plumbing on one thread (Miri runs these: the rings' pointers into the
    //! map's vectors, the slots' cells, the serving lock handed between handles).

    use super::Partitioned;
    use crate::{Request, Response};

    #[test]
    fn messages_cross_the_queues_and_replies_come_back() {
        let map = Partitioned::<u64, u64>::builder(2)
            .section(2)
            .sections(2)
            .build()
            .unwrap();
        let mut handles = map.handles().unwrap();
        let (first, rest) = handles.split_at_mut(1);
        let (a, b) = (&mut first[0], &mut rest[0]);
        // Enough to fill a's queue to b's partition several times over while b is idle: a
        // serves it itself.
        for key in 0..40u64 {
            a.fetch_add(key, 2).unwrap();
            b.insert(key + 100, key).unwrap();
        }
        a.submit(1, Request::Get(3)).unwrap();
        a.submit(2, Request::Remove(4)).unwrap();
        let mut replies = Vec::new();
        a.flush(|tag, response| replies.push((tag, response)))
            .unwrap();
        replies.sort_by_key(|&(tag, _)| tag);
        assert_eq!(
            replies,
            [(1, Response::Get(Some(2))), (2, Response::Remove(Some(2)))]
        );
        b.flush(|_, _| unreachable!("b asked for nothing")).unwrap();
        drop(handles);
        assert_eq!(map.len(), 79);
        assert_eq!(map.get(&139), Some(39));
        // A second round takes up where the first left off.
        let mut handles = map.handles().unwrap();
        handles[1].remove(139).unwrap();
        drop(handles);
        assert_eq!(map.get(&139), None);
    }
}
