//! Section queues: single-producer single-consumer rings whose shared positions move a
//! section at a time (DRAMHiT §3.3, after the section queues of its references 22 and 47).
//!
//! A Lamport queue shares its head and tail on every message, so each message costs a
//! cross-core transfer of the line holding the other side's position. Here each side keeps
//! its own position in a private word and shares it only at section boundaries:
//!
//! * The producer writes messages into slots and stores `tail` (its published end) when a
//!   section is complete or when it is told to flush. It reads the consumer's `head` only
//!   when the room it last learned of is used up (its cached `limit`).
//! * The consumer reads `tail` only when it has used up what it last saw, copies out up to a
//!   batch of messages, and stores `head` once it has *finished* with them (the owner applies
//!   them first: `head` passing a message means the message took effect, which is what
//!   `flush` waits for).
//!
//! So a section of `S` messages costs two shared-line transfers, not `2 S`. The price is
//! latency: a message reaches the consumer when its section is complete or flushed.
//!
//! # Why it is race-free
//!
//! Slots are plain memory (`UnsafeCell`); positions grow without bound (`usize` wraps only
//! after 2^64 messages) and slot `i` is `i % capacity`.
//!
//! 1. The producer writes slot `i` only while `i < head + capacity`, with `head` read by an
//!    `Acquire` load that pairs with the consumer's `Release` store of that `head`: every read
//!    the consumer made of the slot's previous occupant (`i - capacity < head`) happened
//!    before the store of `head`, hence before the overwrite.
//! 2. The consumer reads slot `i` only while `i < tail`, with `tail` read by an `Acquire` load
//!    that pairs with the producer's `Release` store of that `tail`: the write of message `i`
//!    happened before the store, hence before the read.
//! 3. One producer and one consumer per ring (the owners of a [`Producer`] and a
//!    [`Consumer`], made by `unsafe fn`s whose callers promise it), so each position has one
//!    writer and the private copies never disagree with the shared ones they published.
//!
//! The loom model at the bottom checks both pairings: weakening either `Release` store or
//! either `Acquire` load to `Relaxed` makes loom report the slot accesses as a data race
//! (checked by mutation).

use core::{
    mem::{size_of, MaybeUninit},
    ptr::NonNull,
};

use crossbeam_utils::CachePadded;

use crate::{
    raw::prefetch_line,
    sync::{AtomicUsize, Ordering, UnsafeCell},
};

/// Bytes of a cache line.
const LINE: usize = 64;

/// One ring's shared state: the two published positions, each on its own line, and the slots.
pub(crate) struct Ring<M> {
    /// The producer's published end: messages below it are written. Written only by the
    /// producer.
    tail: CachePadded<AtomicUsize>,
    /// The consumer's published end: messages below it are finished with (applied). Written
    /// only by the consumer.
    head: CachePadded<AtomicUsize>,
    /// `capacity` slots (a power of two, or zero for a ring nobody uses).
    slots: Box<[UnsafeCell<MaybeUninit<M>>]>,
    /// Messages a producer writes before it publishes (a power of two dividing `capacity`).
    section: usize,
}

// SAFETY: a ring moves `M`s from one thread to another (so `M: Send`), and the slots are
// accessed only under the protocol of the module docs (one producer, one consumer, positions
// ordered by Acquire/Release), so sharing the ring between those two threads is sound.
unsafe impl<M: Send> Sync for Ring<M> {}
// SAFETY: as above; the ring owns its messages.
unsafe impl<M: Send> Send for Ring<M> {}

impl<M: Copy> Ring<M> {
    /// A ring of `capacity` slots published `section` at a time. `capacity` is zero (a ring
    /// that is never used: a thread does not queue to itself) or a power of two that
    /// `section`, also a power of two, divides.
    pub(crate) fn new(capacity: usize, section: usize) -> Self {
        debug_assert!(section.is_power_of_two());
        debug_assert!(capacity == 0 || capacity.is_power_of_two() && capacity >= section);
        Ring {
            tail: CachePadded::new(AtomicUsize::new(0)),
            head: CachePadded::new(AtomicUsize::new(0)),
            slots: (0..capacity)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            section,
        }
    }

    fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn slot(&self, position: usize) -> &UnsafeCell<MaybeUninit<M>> {
        &self.slots[position & (self.capacity() - 1)]
    }

    /// Start loading the line of slot `position`.
    #[inline(always)]
    fn prefetch_slot(&self, position: usize) {
        self.slot(position).with(|p| prefetch_line(p.cast()));
    }

    /// Bytes of memory the ring holds (slots and positions).
    pub(crate) fn bytes(&self) -> usize {
        self.capacity() * size_of::<M>() + 2 * size_of::<CachePadded<AtomicUsize>>()
    }
}

/// The producer's side of one ring: its private positions. One per ring at a time.
pub(crate) struct Producer<M> {
    /// Invariant: points to a ring that outlives this producer (constructor contract).
    ring: NonNull<Ring<M>>,
    /// The next position to write.
    next: usize,
    /// Positions below this are free to write (`head + capacity` as last read).
    limit: usize,
    /// The last `tail` stored.
    published: usize,
}

// SAFETY: a producer is its ring's one writing side; moving it to another thread moves that
// role (the ring is `Sync` for `M: Send`).
unsafe impl<M: Send> Send for Producer<M> {}

impl<M: Copy> Producer<M> {
    /// The producer of `ring`, taking up where the last one left off.
    ///
    /// # Safety
    /// No other `Producer` of `ring` may be used while this one lives (one producer per ring),
    /// the last one must have published everything it wrote ([`publish`](Self::publish)), and
    /// `ring` must outlive the producer at its address.
    pub(crate) unsafe fn new(ring: &Ring<M>) -> Self {
        // Acquire on both: pairs with the previous producer's and consumer's Release stores,
        // whichever threads they ran on (a new round of handles may run on new threads).
        let next = ring.tail.load(Ordering::Acquire);
        let limit = ring.head.load(Ordering::Acquire) + ring.capacity();
        Producer {
            ring: NonNull::from(ring),
            next,
            limit,
            published: next,
        }
    }

    #[inline(always)]
    fn ring(&self) -> &Ring<M> {
        // SAFETY: the ring outlives this producer (constructor contract).
        unsafe { self.ring.as_ref() }
    }

    /// Write `message`, or hand it back if the ring is full (as far as the consumer has
    /// published). Returns `Ok(true)` when this write completed a section and published it.
    #[inline]
    pub(crate) fn push(&mut self, message: M) -> Result<bool, M> {
        if self.next == self.limit && self.room(1) == 0 {
            return Err(message);
        }
        self.ring().slot(self.next).with_mut(|slot| {
            // SAFETY: `next < limit = head + capacity` for a `head` read with Acquire (rule 1
            // of the module docs): the consumer has finished with the slot's last occupant,
            // and no one else writes it (one producer, the constructor's contract).
            unsafe { slot.write(MaybeUninit::new(message)) }
        });
        self.next += 1;
        if self.next.is_multiple_of(self.ring().section) {
            self.publish();
            return Ok(true);
        }
        let offset = (self.next & (self.ring().capacity() - 1)) * size_of::<M>();
        if offset % LINE < size_of::<M>() {
            // The next message starts a new line: have the one after it on its way (the
            // queue keeps two lines hot, DRAMHiT §3.3).
            self.ring()
                .prefetch_slot(self.next + LINE / size_of::<M>().max(1));
        }
        if self.limit - self.next == self.ring().section {
            // One section of believed room left: fetch the consumer's position ahead of
            // needing it.
            prefetch_line((&*self.ring().head as *const AtomicUsize).cast());
        }
        Ok(false)
    }

    /// Slots free to write, re-reading the consumer's position if fewer than `wanted` are
    /// known to be.
    #[inline]
    pub(crate) fn room(&mut self, wanted: usize) -> usize {
        if self.limit - self.next < wanted {
            // Acquire: pairs with the consumer's Release store of `head` (rule 1).
            self.limit = self.ring().head.load(Ordering::Acquire) + self.ring().capacity();
        }
        self.limit - self.next
    }

    /// Publish what was written since the last publication (a partial section).
    #[inline]
    pub(crate) fn publish(&mut self) {
        if self.published != self.next {
            // Release: pairs with the consumer's Acquire load of `tail` (rule 2): the writes
            // of the messages below `next` happen before its reads of them.
            self.ring().tail.store(self.next, Ordering::Release);
            self.published = self.next;
        }
    }

    /// Whether the consumer has finished with everything written (and published).
    #[inline]
    pub(crate) fn drained(&self) -> bool {
        // Acquire: pairs with the consumer's Release store of `head`, so what the consumer
        // did before it (applying the messages, answering them) is visible to the caller.
        self.published == self.next && self.ring().head.load(Ordering::Acquire) == self.next
    }
}

/// The consumer's side of one ring: its private positions. One per ring at a time.
pub(crate) struct Consumer<M> {
    /// Invariant: points to a ring that outlives this consumer (constructor contract).
    ring: NonNull<Ring<M>>,
    /// The next position to read.
    next: usize,
    /// Positions below this are written (`tail` as last read).
    available: usize,
    /// The last `head` stored.
    released: usize,
}

// SAFETY: as for `Producer`.
unsafe impl<M: Send> Send for Consumer<M> {}

impl<M: Copy> Consumer<M> {
    /// The consumer of `ring`, taking up where the last one left off.
    ///
    /// # Safety
    /// No other `Consumer` of `ring` may be used while this one lives (one consumer per ring),
    /// the last one must have released everything it read ([`release`](Self::release)), and
    /// `ring` must outlive the consumer at its address.
    pub(crate) unsafe fn new(ring: &Ring<M>) -> Self {
        // Acquire: pairs with the previous consumer's Release store (another thread's, in a
        // new round of handles).
        let next = ring.head.load(Ordering::Acquire);
        Consumer {
            ring: NonNull::from(ring),
            next,
            available: next,
            released: next,
        }
    }

    #[inline(always)]
    fn ring(&self) -> &Ring<M> {
        // SAFETY: the ring outlives this consumer (constructor contract).
        unsafe { self.ring.as_ref() }
    }

    /// Start loading this ring's published end and its next message, ahead of a
    /// [`pop_into`](Self::pop_into).
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        if self.ring().capacity() != 0 {
            prefetch_line((&*self.ring().tail as *const AtomicUsize).cast());
            self.ring().prefetch_slot(self.next);
        }
    }

    /// Copy up to `max` published messages to `out` (appended). Returns how many.
    #[inline]
    pub(crate) fn pop_into(&mut self, out: &mut Vec<M>, max: usize) -> usize {
        if self.next == self.available {
            if self.ring().capacity() == 0 {
                return 0;
            }
            // Acquire: pairs with the producer's Release store of `tail` (rule 2).
            self.available = self.ring().tail.load(Ordering::Acquire);
        }
        let count = (self.available - self.next).min(max);
        for position in self.next..self.next + count {
            let message = self.ring().slot(position).with(|slot| {
                // SAFETY: `position < available = tail` for a `tail` read with Acquire (rule
                // 2 of the module docs): the message was written and the write happened
                // before this read; the producer will not overwrite it before `head` passes
                // it (rule 1), which only this consumer moves.
                unsafe { (*slot).assume_init() }
            });
            out.push(message);
        }
        self.next += count;
        count
    }

    /// Tell the producer that everything read so far is finished with.
    #[inline]
    pub(crate) fn release(&mut self) {
        if self.released != self.next {
            // Release: pairs with the producer's Acquire loads of `head` (rule 1, and
            // `Producer::drained`): the reads of the slots, and whatever the owner did with
            // the messages, happen before the producer reuses the slots or learns they took
            // effect.
            self.ring().head.store(self.next, Ordering::Release);
            self.released = self.next;
        }
    }
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    use super::*;

    #[test]
    fn messages_arrive_in_order_across_wraps_and_only_once_published() {
        let ring = Ring::<u64>::new(8, 4);
        // SAFETY: the only producer and consumer of `ring`, on this thread.
        let (mut producer, mut consumer) = unsafe { (Producer::new(&ring), Consumer::new(&ring)) };
        let mut out = Vec::new();
        let mut sent = 0u64;
        for round in 0..10 {
            // Three messages: not a whole section, so nothing is visible until published.
            for _ in 0..3 {
                assert_eq!(producer.push(sent), Ok(false));
                sent += 1;
            }
            assert_eq!(consumer.pop_into(&mut out, 100), 0, "round {round}");
            // The fourth completes the section and publishes it.
            assert_eq!(producer.push(sent), Ok(true));
            sent += 1;
            assert!(!producer.drained());
            assert_eq!(consumer.pop_into(&mut out, 3), 3);
            assert_eq!(consumer.pop_into(&mut out, 100), 1);
            assert!(!producer.drained(), "read but not released");
            consumer.release();
            assert!(producer.drained());
            assert_eq!(consumer.pop_into(&mut out, 100), 0);
        }
        // A partial section is published by `publish`.
        assert_eq!(producer.push(sent), Ok(false));
        sent += 1;
        assert_eq!(consumer.pop_into(&mut out, 100), 0);
        producer.publish();
        assert_eq!(consumer.pop_into(&mut out, 100), 1);
        assert_eq!(out, (0..sent).collect::<Vec<_>>());
    }

    #[test]
    fn a_full_ring_refuses_until_the_consumer_releases() {
        let ring = Ring::<u32>::new(4, 2);
        // SAFETY: the only producer and consumer of `ring`, on this thread.
        let (mut producer, mut consumer) = unsafe { (Producer::new(&ring), Consumer::new(&ring)) };
        assert_eq!(producer.push(1), Ok(false));
        assert_eq!(producer.push(2), Ok(true), "a whole section publishes");
        assert_eq!(producer.push(3), Ok(false));
        assert_eq!(producer.push(4), Ok(true));
        assert_eq!(producer.push(5), Err(5));
        let mut out = Vec::new();
        assert_eq!(consumer.pop_into(&mut out, 3), 3);
        assert_eq!(producer.push(5), Err(5), "read is not yet released");
        consumer.release();
        assert_eq!(producer.room(1), 3);
        assert_eq!(producer.push(5), Ok(false));
        producer.publish();
        // What was seen published (up to 4) first; the position is re-read once used up.
        assert_eq!(consumer.pop_into(&mut out, 10), 1);
        assert_eq!(consumer.pop_into(&mut out, 10), 1);
        assert_eq!(out, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_new_producer_and_consumer_take_up_where_the_last_left_off() {
        let ring = Ring::<u8>::new(4, 4);
        let mut out = Vec::new();
        for value in 0..9u8 {
            // SAFETY: one producer and one consumer at a time, each publishing or releasing
            // all before it is dropped.
            let (mut producer, mut consumer) =
                unsafe { (Producer::new(&ring), Consumer::new(&ring)) };
            producer.push(value).unwrap();
            producer.publish();
            consumer.pop_into(&mut out, 4);
            consumer.release();
        }
        assert_eq!(out, (0..9).collect::<Vec<_>>());
    }

    #[test]
    fn an_unused_ring_is_always_empty() {
        let ring = Ring::<u64>::new(0, 1);
        // SAFETY: the only consumer.
        let mut consumer = unsafe { Consumer::new(&ring) };
        let mut out = Vec::new();
        assert_eq!(consumer.pop_into(&mut out, 10), 0);
        consumer.prefetch();
    }
}

#[cfg(all(test, floe_loom))]
mod model {
    //! The queue under loom (`ci/loom.sh`): a producer and a consumer on two threads, a ring
    //! small enough to wrap. loom checks every interleaving and the stale values each load may
    //! return; a slot read and write not ordered by the positions is reported as a data race.
    //! Weakening any of the four orderings in rules 1 and 2 to `Relaxed` fails this model
    //! (checked by mutation).

    use loom::{sync::Arc, thread};

    use super::{Consumer, Producer, Ring};

    #[test]
    fn every_message_arrives_once_in_order_and_no_slot_is_raced() {
        loom::model(|| {
            let ring = Arc::new(Ring::<u64>::new(2, 1));
            let sender = {
                let ring = Arc::clone(&ring);
                thread::spawn(move || {
                    // SAFETY: the only producer of the ring.
                    let mut producer = unsafe { Producer::new(&ring) };
                    for message in 1..=3u64 {
                        let mut message = message;
                        loop {
                            match producer.push(message) {
                                Ok(_) => break,
                                Err(back) => {
                                    message = back;
                                    thread::yield_now();
                                }
                            }
                        }
                    }
                    producer.publish();
                    while !producer.drained() {
                        thread::yield_now();
                    }
                })
            };
            // SAFETY: the only consumer of the ring.
            let mut consumer = unsafe { Consumer::new(&ring) };
            let mut out = Vec::new();
            while out.len() < 3 {
                if consumer.pop_into(&mut out, 1) == 0 {
                    thread::yield_now();
                }
                consumer.release();
            }
            sender.join().unwrap();
            assert_eq!(out, [1, 2, 3]);
        });
    }
}
