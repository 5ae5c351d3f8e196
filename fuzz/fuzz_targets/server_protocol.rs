//! floe-server's protocol parsers (text, meta and binary) on arbitrary bytes: never a
//! panic, and the replies to a byte stream depend neither on how it was split into reads
//! nor on where answering paused for want of output room (the whole stream at once with
//! unbounded room against chunks of 1 to 17 bytes answered with a small room, each on a
//! fresh cache). Both caches hash with the same fixed seed (`Cache::with_manual_clock`), so
//! `stats cachedump` lists their items in the same order.

#![no_main]

use std::sync::Arc;

use floe_server::{
    cache::{Cache, Settings},
    connection::Requests,
};
use libfuzzer_sys::fuzz_target;

/// The replies to `chunks` taken one after the other, each answered with at most `room`
/// bytes of output at a time (the output is "sent" between answers, as the server does).
fn replies(settings: &Settings, chunks: &[&[u8]], room: usize) -> Vec<u8> {
    // The server's process-wide settings (`stats detail`, `lru_crawler`, `verbosity`) as a
    // fresh process has them: the first stream's commands must not reach the second.
    floe_server::detail::reset();
    floe_server::crawler::reset();
    floe_server::log::set_verbosity(0);
    let cache = Arc::new(Cache::with_manual_clock(settings.clone()).expect("cache"));
    let mut worker = cache.worker(0);
    let mut requests = Requests::default();
    let mut sent = Vec::new();
    let mut out = Vec::new();
    for chunk in chunks {
        requests.take(chunk);
        loop {
            let close = requests.answer(&mut worker, &mut out, room);
            sent.append(&mut out);
            if close {
                return sent;
            }
            if !requests.waiting() {
                break;
            }
        }
    }
    sent
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let settings = Settings {
        memory_limit: 64 << 10,
        evict: seed & 0x80 == 0,
        max_item_size: 4096,
        workers: 1,
        initial_keys: 64,
    };
    let whole = replies(&settings, &[input], usize::MAX);
    let chunks: Vec<&[u8]> = input.chunks(1 + (seed as usize & 0x7f) % 17).collect();
    // From no room at all (one request, or one key of a multi-get, per answer) to a few
    // values' worth.
    let room = (seed as usize & 0x7f) * 97;
    let split = replies(&settings, &chunks, room);
    assert!(
        whole == split,
        "replies differ:\nwhole: {:?}\nsplit: {:?}",
        String::from_utf8_lossy(&whole),
        String::from_utf8_lossy(&split)
    );
});
