//! floe-server's binary protocol over real sockets: the multi-get idiom (quiet gets ended by
//! a noop), stores with CAS, counters with initial values, stats, and bad input.

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::{atomic::AtomicBool, Arc},
    time::Duration,
};

use floe_server::{
    cache::{Cache, Settings},
    server::{Config, Server},
};

fn start(settings: Settings) -> Server {
    let cache = Arc::new(Cache::with_manual_clock(settings).expect("cache"));
    let config = Config {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        backlog: 1024,
        max_connections: 64,
        housekeeping: true,
        sync_ms: 0,
    };
    Server::start(cache, &config, Arc::new(AtomicBool::new(false))).expect("server")
}

fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.address()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// A request frame.
fn request(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
    let mut frame = vec![0x80, opcode];
    frame.extend_from_slice(&(key.len() as u16).to_be_bytes());
    frame.push(extras.len() as u8);
    frame.extend_from_slice(&[0, 0, 0]);
    frame.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    frame.extend_from_slice(&opaque.to_be_bytes());
    frame.extend_from_slice(&cas.to_be_bytes());
    frame.extend_from_slice(extras);
    frame.extend_from_slice(key);
    frame.extend_from_slice(value);
    frame
}

#[derive(Debug, PartialEq)]
struct Response {
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn response(stream: &mut TcpStream) -> Response {
    let mut header = [0; 24];
    stream.read_exact(&mut header).expect("a response header");
    assert_eq!(header[0], 0x81, "response magic");
    let key_len = u16::from_be_bytes([header[2], header[3]]) as usize;
    let extras_len = header[4] as usize;
    let body_len = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
    let mut body = vec![0; body_len];
    stream.read_exact(&mut body).unwrap();
    Response {
        opcode: header[1],
        status: u16::from_be_bytes([header[6], header[7]]),
        opaque: u32::from_be_bytes(header[12..16].try_into().unwrap()),
        cas: u64::from_be_bytes(header[16..24].try_into().unwrap()),
        extras: body[..extras_len].to_vec(),
        key: body[extras_len..extras_len + key_len].to_vec(),
        value: body[extras_len + key_len..].to_vec(),
    }
}

fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

#[test]
fn quiet_multi_get_ended_by_noop() {
    let server = start(Settings {
        workers: 2,
        ..Settings::default()
    });
    let mut s = connect(&server);
    // Quiet sets: no replies.
    for i in 0..10u32 {
        s.write_all(&request(
            0x11,
            format!("k{i}").as_bytes(),
            &set_extras(i, 0),
            format!("v{i}").as_bytes(),
            i,
            0,
        ))
        .unwrap();
    }
    // GetKQ for k0..k19 (half missing), then a noop: hits only, in order, then the noop.
    let mut batch = Vec::new();
    for i in 0..20u32 {
        batch.extend(request(
            0x0d,
            format!("k{i}").as_bytes(),
            &[],
            &[],
            100 + i,
            0,
        ));
    }
    batch.extend(request(0x0a, &[], &[], &[], 999, 0));
    s.write_all(&batch).unwrap();
    for i in 0..10u32 {
        let r = response(&mut s);
        assert_eq!((r.opcode, r.status, r.opaque), (0x0d, 0, 100 + i));
        assert_eq!(r.key, format!("k{i}").as_bytes());
        assert_eq!(r.value, format!("v{i}").as_bytes());
        assert_eq!(r.extras, i.to_be_bytes());
        assert_ne!(r.cas, 0);
    }
    let noop = response(&mut s);
    assert_eq!((noop.opcode, noop.status, noop.opaque), (0x0a, 0, 999));
    // A plain get of a missing key answers "not found".
    s.write_all(&request(0x00, b"missing", &[], &[], 7, 0))
        .unwrap();
    let r = response(&mut s);
    assert_eq!(
        (r.status, r.opaque, r.value.as_slice()),
        (1, 7, &b"Not found"[..])
    );
}

#[test]
fn stores_with_cas_and_counters() {
    let server = start(Settings {
        workers: 2,
        ..Settings::default()
    });
    let mut s = connect(&server);
    s.write_all(&request(0x01, b"a", &set_extras(5, 0), b"one", 1, 0))
        .unwrap();
    let stored = response(&mut s);
    assert_eq!(stored.status, 0);
    // Set with the wrong CAS: exists; with the right one: stored.
    s.write_all(&request(
        0x01,
        b"a",
        &set_extras(0, 0),
        b"two",
        2,
        stored.cas + 1,
    ))
    .unwrap();
    assert_eq!(response(&mut s).status, 2);
    s.write_all(&request(
        0x01,
        b"a",
        &set_extras(0, 0),
        b"two",
        3,
        stored.cas,
    ))
    .unwrap();
    assert_eq!(response(&mut s).status, 0);
    // Add of a present key: exists; replace of an absent one: not found; append keeps flags.
    s.write_all(&request(0x02, b"a", &set_extras(0, 0), b"x", 4, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 2);
    s.write_all(&request(0x03, b"nope", &set_extras(0, 0), b"x", 5, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 1);
    s.write_all(&request(0x0e, b"nope", &[], b"x", 6, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 5);
    s.write_all(&request(0x0f, b"a", &[], b">", 7, 0)).unwrap();
    assert_eq!(response(&mut s).status, 0);
    s.write_all(&request(0x00, b"a", &[], &[], 8, 0)).unwrap();
    let r = response(&mut s);
    assert_eq!(
        (r.value.as_slice(), r.extras.as_slice()),
        (&b">two"[..], &0u32.to_be_bytes()[..])
    );
    // Increment: absent with expiry all ones is not created; otherwise starts at initial.
    let incr = |delta: u64, initial: u64, expiry: u32| {
        [
            delta.to_be_bytes().as_slice(),
            &initial.to_be_bytes(),
            &expiry.to_be_bytes(),
        ]
        .concat()
    };
    s.write_all(&request(0x05, b"n", &incr(1, 10, u32::MAX), &[], 9, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 1);
    s.write_all(&request(0x05, b"n", &incr(1, 10, 0), &[], 10, 0))
        .unwrap();
    assert_eq!(response(&mut s).value, 10u64.to_be_bytes());
    s.write_all(&request(0x05, b"n", &incr(u64::MAX, 0, 0), &[], 11, 0))
        .unwrap();
    assert_eq!(response(&mut s).value, 9u64.to_be_bytes());
    s.write_all(&request(0x06, b"n", &incr(100, 0, 0), &[], 12, 0))
        .unwrap();
    assert_eq!(response(&mut s).value, 0u64.to_be_bytes());
    s.write_all(&request(0x05, b"a", &incr(1, 0, 0), &[], 13, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 6);
    // Delete, then a miss; touch and gat.
    s.write_all(&request(0x04, b"a", &[], &[], 14, 0)).unwrap();
    assert_eq!(response(&mut s).status, 0);
    s.write_all(&request(0x04, b"a", &[], &[], 15, 0)).unwrap();
    assert_eq!(response(&mut s).status, 1);
    s.write_all(&request(0x1c, b"n", &100u32.to_be_bytes(), &[], 16, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 0);
    s.write_all(&request(0x23, b"n", &100u32.to_be_bytes(), &[], 17, 0))
        .unwrap();
    let r = response(&mut s);
    assert_eq!(
        (r.status, r.key.as_slice(), r.value.as_slice()),
        (0, &b"n"[..], &b"0 "[..]) // padded in place, as memcached
    );
    // Version, stats (ended by an empty response), unknown opcode.
    s.write_all(&request(0x0b, &[], &[], &[], 18, 0)).unwrap();
    assert_eq!(
        response(&mut s).value,
        floe_server::protocol::VERSION.as_bytes()
    );
    s.write_all(&request(0x10, &[], &[], &[], 19, 0)).unwrap();
    let mut stats = 0;
    loop {
        let r = response(&mut s);
        if r.key.is_empty() {
            break;
        }
        stats += 1;
    }
    assert!(stats > 10);
    s.write_all(&request(0x21, b"PLAIN", &[], &[], 20, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 0x81);
}

#[test]
fn bad_binary_input() {
    let server = start(Settings {
        workers: 2,
        max_item_size: 1024,
        ..Settings::default()
    });
    let mut s = connect(&server);
    // A value over -I: "too large", its body discarded as it arrives; the connection goes on.
    let frame = request(0x01, b"big", &set_extras(0, 0), &vec![b'x'; 5000], 1, 0);
    s.write_all(&frame[..3000]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    s.write_all(&frame[3000..]).unwrap();
    assert_eq!(response(&mut s).status, 3);
    // Malformed requests: a get with extras, a set without them, a key over 250 bytes.
    s.write_all(&request(0x00, b"k", &[1, 2, 3, 4], &[], 2, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 4);
    s.write_all(&request(0x01, b"k", &[], b"v", 3, 0)).unwrap();
    assert_eq!(response(&mut s).status, 4);
    s.write_all(&request(0x00, &[b'k'; 251], &[], &[], 4, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 4);
    // A request split at every byte.
    let frame = request(0x01, b"split", &set_extras(1, 0), b"value", 5, 0);
    for byte in &frame {
        s.write_all(std::slice::from_ref(byte)).unwrap();
    }
    assert_eq!(response(&mut s).status, 0);
    // A header with the wrong magic closes the connection (as memcached does).
    let mut garbage = request(0x00, b"k", &[], &[], 6, 0);
    garbage[0] = 0x42;
    s.write_all(&garbage).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty());
    // The server still serves others.
    let mut other = connect(&server);
    other
        .write_all(&request(0x0a, &[], &[], &[], 7, 0))
        .unwrap();
    assert_eq!(response(&mut other).opaque, 7);
}

/// An append or prepend that would grow an item past `-I` is refused "not stored", quiet or
/// not, as memcached 1.6 answers it (measured); `stat reset` answers the end of the stats.
#[test]
fn appends_past_the_size_limit_and_stats_reset() {
    let server = start(Settings {
        workers: 2,
        max_item_size: 1024,
        ..Settings::default()
    });
    let mut s = connect(&server);
    s.write_all(&request(0x01, b"a", &set_extras(0, 0), &[b'x'; 600], 1, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 0);
    // Append, prepend, then the quiet appendq and a noop.
    for (opcode, opaque) in [(0x0e, 2), (0x0f, 3), (0x19, 4)] {
        s.write_all(&request(opcode, b"a", &[], &[b'y'; 600], opaque, 0))
            .unwrap();
        let refused = response(&mut s);
        assert_eq!((refused.opcode, refused.status), (opcode, 0x0005));
        assert_eq!(
            (refused.opaque, &refused.value[..]),
            (opaque, &b"Not stored."[..])
        );
    }
    s.write_all(&request(0x00, b"a", &[], &[], 5, 0)).unwrap();
    assert_eq!(response(&mut s).value, vec![b'x'; 600]);
    s.write_all(&request(0x0e, b"a", &[], &[b'y'; 424], 6, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 0);

    s.write_all(&request(0x10, b"reset", &[], &[], 7, 0))
        .unwrap();
    let end = response(&mut s);
    assert_eq!((end.status, end.opaque), (0, 7));
    assert!(end.key.is_empty() && end.value.is_empty(), "{end:?}");
    s.write_all(&request(0x10, b"", &[], &[], 8, 0)).unwrap();
    loop {
        let stat = response(&mut s);
        if stat.key.is_empty() {
            break;
        }
        if stat.key == b"cmd_set" || stat.key == b"get_hits" {
            assert_eq!(stat.value, b"0", "{}", String::from_utf8_lossy(&stat.key));
        }
    }
}

/// memcached reads the binary protocol's expiry as an unsigned 32-bit number: 2^31 and above
/// are absolute Unix times in 2038-2106, far ahead, not already past (memcached 1.6.18 serves
/// every item below; floe expired them at once, and a flush with such a delay emptied it).
#[test]
fn binary_expiry_times_are_unsigned() {
    let server = start(Settings::default());
    let mut s = connect(&server);
    let get = |s: &mut TcpStream, key: &[u8]| {
        s.write_all(&request(0x00, key, &[], &[], 0, 0)).unwrap();
        response(s).status
    };
    for (i, exptime) in [1u32 << 31, (1 << 31) + 5, u32::MAX]
        .into_iter()
        .enumerate()
    {
        let key = format!("k{i}");
        s.write_all(&request(
            0x01,
            key.as_bytes(),
            &set_extras(0, exptime),
            b"v",
            0,
            0,
        ))
        .unwrap();
        assert_eq!(response(&mut s).status, 0, "set with expiry {exptime:#x}");
        assert_eq!(
            get(&mut s, key.as_bytes()),
            0,
            "served with expiry {exptime:#x}"
        );
    }
    // A touch to such a time keeps the item too.
    s.write_all(&request(
        0x1c,
        b"k0",
        &(1u32 << 31).to_be_bytes(),
        &[],
        0,
        0,
    ))
    .unwrap();
    assert_eq!(response(&mut s).status, 0);
    assert_eq!(get(&mut s, b"k0"), 0);
    // A flush delayed to such a time empties nothing now.
    s.write_all(&request(0x08, &[], &(1u32 << 31).to_be_bytes(), &[], 0, 0))
        .unwrap();
    assert_eq!(response(&mut s).status, 0);
    assert_eq!(
        get(&mut s, b"k1"),
        0,
        "a flush delayed to 2038 emptied the cache"
    );
    // While an expiry in the past still expires at once.
    s.write_all(&request(
        0x01,
        b"past",
        &set_extras(0, 31 * 24 * 3600),
        b"v",
        0,
        0,
    ))
    .unwrap();
    assert_eq!(response(&mut s).status, 0);
    assert_eq!(get(&mut s, b"past"), 1);
}
