//! floe-server's protocol parsers (text, meta and binary) on arbitrary bytes: never a
//! panic, and the replies to a byte stream do not depend on how it was split into reads
//! (the whole stream at once against chunks of 1 to 17 bytes, each on a fresh cache).

#![no_main]

use std::sync::Arc;

use floe_server::{
    cache::{Cache, Settings},
    connection::Requests,
};
use libfuzzer_sys::fuzz_target;

fn replies(settings: &Settings, chunks: &[&[u8]]) -> Vec<u8> {
    let cache = Arc::new(Cache::with_manual_clock(settings.clone()).expect("cache"));
    let mut worker = cache.worker(0);
    let mut requests = Requests::default();
    let mut out = Vec::new();
    for chunk in chunks {
        requests.take(chunk);
        if requests.answer(&mut worker, &mut out) {
            break;
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, input)) = data.split_first() else { return };
    let settings = Settings {
        memory_limit: 64 << 10,
        evict: seed & 0x80 == 0,
        max_item_size: 4096,
        workers: 1,
        initial_keys: 64,
    };
    let whole = replies(&settings, &[input]);
    let chunks: Vec<&[u8]> = input.chunks(1 + (seed as usize & 0x7f) % 17).collect();
    let split = replies(&settings, &chunks);
    assert!(
        whole == split,
        "replies differ:\nwhole: {:?}\nsplit: {:?}",
        String::from_utf8_lossy(&whole),
        String::from_utf8_lossy(&split)
    );
});
