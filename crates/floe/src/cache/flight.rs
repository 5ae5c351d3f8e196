//! One loader per key ([`Cache::get_with`](super::Cache::get_with),
//! [`FlatCache::get_with`](super::FlatCache::get_with)): the first caller to miss a key
//! registers a flight for it in a sharded table and loads; later callers for that key wait on
//! the flight and take its value. A loader that panics abandons its flight (its waiters try
//! again, one of them loading); a loader that fails hands its error, shared, to those waiting.

use core::{any::Any, hash::Hash};
use std::{
    collections::HashMap,
    sync::{Arc, Condvar, Mutex},
};

/// What a flight came to.
pub(super) enum Landing<V> {
    Flying,
    Value(V),
    /// The loader's error (an `Arc<E>`, shared by every waiter).
    Failed(Arc<dyn Any + Send + Sync>),
    /// The loader panicked: waiters try again.
    Abandoned,
}

/// One loader's run for one key, waited on by the key's other callers.
pub(super) struct Flight<V> {
    landing: Mutex<Landing<V>>,
    landed: Condvar,
}

/// The flights of one shard, by key.
pub(super) type Flights<K, V> = Mutex<HashMap<K, Arc<Flight<V>>>>;

/// The value of a load that cannot fail.
pub(super) fn infallible<V>(loaded: Result<V, Arc<core::convert::Infallible>>) -> V {
    match loaded {
        Ok(value) => value,
        Err(never) => match *never {},
    }
}

/// The value of `key`: `read`'s if it has one; else the first caller leads a flight and runs
/// `lead` (which checks the cache once more, then loads and publishes), while the key's other
/// callers wait for its value (or its error, shared) and callers after it read the cache.
pub(super) fn load_once<K: Hash + Eq + Clone, V: Clone, E: Send + Sync + 'static>(
    flights: &Flights<K, V>,
    key: &K,
    read: impl Fn() -> Option<V>,
    lead: impl FnOnce() -> Result<V, E>,
) -> Result<V, Arc<E>> {
    let mut lead = Some(lead);
    loop {
        if let Some(value) = read() {
            return Ok(value);
        }
        let (flight, leader) = {
            let mut flights = flights
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match flights.get(key) {
                Some(flight) => (flight.clone(), false),
                None => {
                    let flight = Arc::new(Flight {
                        landing: Mutex::new(Landing::Flying),
                        landed: Condvar::new(),
                    });
                    flights.insert(key.clone(), flight.clone());
                    (flight, true)
                }
            }
        };
        if !leader {
            let mut landing = flight
                .landing
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            while matches!(*landing, Landing::Flying) {
                landing = flight
                    .landed
                    .wait(landing)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            match &*landing {
                Landing::Value(value) => return Ok(value.clone()),
                Landing::Failed(error) => {
                    if let Ok(error) = error.clone().downcast::<E>() {
                        return Err(error);
                    }
                    // A loader of another error type failed: try on our own.
                }
                Landing::Abandoned | Landing::Flying => {}
            }
            continue;
        }
        let mut pilot = Pilot {
            flights,
            key,
            flight: &flight,
            landing: Landing::Abandoned,
        };
        let lead = lead.take().expect("a caller leads one flight at most");
        return match lead() {
            Ok(value) => {
                pilot.landing = Landing::Value(value.clone());
                Ok(value)
            }
            Err(error) => {
                let error = Arc::new(error);
                pilot.landing = Landing::Failed(error.clone());
                Err(error)
            }
        };
    }
}

/// The leader of a flight: lands it when dropped (as abandoned if the loader panicked), and
/// takes it out of the table so that later callers read the cache.
struct Pilot<'a, K: Hash + Eq, V> {
    flights: &'a Flights<K, V>,
    key: &'a K,
    flight: &'a Arc<Flight<V>>,
    landing: Landing<V>,
}

impl<K: Hash + Eq, V> Drop for Pilot<'_, K, V> {
    fn drop(&mut self) {
        // Landed before it leaves the table: a caller that found the flight gets its value,
        // and one that comes after finds the cache filled (or loads again if it failed).
        let landing = core::mem::replace(&mut self.landing, Landing::Abandoned);
        *self
            .flight
            .landing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = landing;
        self.flight.landed.notify_all();
        self.flights
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(self.key);
    }
}
