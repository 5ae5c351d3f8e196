//! `floe-bench server --warm-restart`: how soon a restarted cache serves its items again,
//! floe-server (`-e DIR`) against memcached (`-e FILE`), on the same items.
//!
//! Each run starts a server with its state in `--state-dir`, preloads `--keys` items of the
//! first `--value-bytes`, stops it and starts it again on the same state, then times, from
//! the new process's spawn: when it listens, when a get of 100 keys spread over the key
//! space first hits, when the server has every item back (floe-server's `persist_restoring`
//! stat: it serves while it restores; memcached restores before it listens), and when a
//! sweep of multi-gets over every key has hit them all (the full hit ratio back, at full
//! speed; the first sweep's hit ratio is reported). The stops:
//! - floe-server, SIGTERM: a clean stop writes one snapshot, which the start reads;
//! - floe-server, SIGKILL: a crash; the start replays the journals the preload wrote;
//! - memcached, SIGUSR1: its restartable shutdown (it saves its memory file's metadata; a
//!   memcached killed any other way starts cold).
//!
//! The stop's duration, the state's size on disk, and a second sweep's time (the same gets
//! on a server whose items are all back and warm) are reported too. Medians of `--repeat`
//! runs.

use std::{
    io::{self, BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    time::{Duration, Instant},
};

use crate::{
    measure::median,
    server_load::{key, preload, start_server, ServerArgs},
};

/// One restart, timed.
struct Restart {
    stop_s: f64,
    state_bytes: u64,
    listen_s: f64,
    first_hit_s: f64,
    /// When the server had every item back (its `persist_restoring` stat 0, or its listening
    /// for a server without that stat).
    restored_s: f64,
    all_keys_s: f64,
    /// Keys the first sweep found.
    hits: u64,
    /// A second sweep's time, once everything is back and warm: what the first sweep would
    /// take on a server that had never stopped.
    warm_sweep_s: f64,
}

/// Bytes under `path` (a file, or a directory's files).
fn size_of_state(path: &Path) -> u64 {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok()?.metadata().ok())
                    .map(|meta| meta.len())
                    .sum()
            })
            .unwrap_or(0),
        Ok(meta) => meta.len(),
        Err(_) => 0,
    }
}

fn remove_state(path: &Path) {
    let _ = std::fs::remove_dir_all(path);
    let _ = std::fs::remove_file(path);
    // memcached's metadata file beside its memory file.
    let _ = std::fs::remove_file(path.with_extension("meta"));
}

/// One get of the keys numbered `keys`; how many hit.
fn sample(stream: &mut BufReader<TcpStream>, keys: &[u64]) -> io::Result<u64> {
    let mut request = b"get".to_vec();
    for &i in keys {
        request.push(b' ');
        request.extend_from_slice(&key(i));
    }
    request.extend_from_slice(b"\r\n");
    stream.get_mut().write_all(&request)?;
    read_values(stream)
}

/// Read one get's reply; how many values it held.
fn read_values(stream: &mut BufReader<TcpStream>) -> io::Result<u64> {
    let mut found = 0;
    let mut line = String::new();
    while next_line(stream, &mut line)? {
        let len: usize = line
            .split_whitespace()
            .nth(3)
            .filter(|_| line.starts_with("VALUE "))
            .and_then(|len| len.parse().ok())
            .ok_or_else(|| io::Error::other(format!("unexpected reply {line:?}")))?;
        let mut data = vec![0; len + 2];
        stream.read_exact(&mut data)?;
        found += 1;
    }
    Ok(found)
}

/// Read a reply line into `line`; `false` at `END`.
fn next_line(stream: &mut BufReader<TcpStream>, line: &mut String) -> io::Result<bool> {
    line.clear();
    if stream.read_line(line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line != "END\r\n")
}

/// Whether the server's `stats` says it is restoring (`persist_restoring 1`).
fn still_restoring(stream: &mut BufReader<TcpStream>) -> io::Result<bool> {
    stream.get_mut().write_all(b"stats\r\n")?;
    let mut restoring = false;
    let mut line = String::new();
    while next_line(stream, &mut line)? {
        restoring |= line.trim_end() == "STAT persist_restoring 1";
    }
    Ok(restoring)
}

/// Get every key, 100 per request; how many hit.
fn sweep(stream: &mut BufReader<TcpStream>, keys: u64) -> io::Result<u64> {
    let mut found = 0;
    let mut numbers = Vec::with_capacity(100);
    for first in (0..keys).step_by(100) {
        numbers.clear();
        numbers.extend(first..(first + 100).min(keys));
        found += sample(stream, &numbers)?;
    }
    Ok(found)
}

fn connect(address: SocketAddr) -> io::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    Ok(BufReader::with_capacity(1 << 16, stream))
}

fn restart_once(
    name: &str,
    signal: i32,
    args: &ServerArgs,
    state: &Path,
    bytes: usize,
) -> Result<Restart, String> {
    remove_state(state);
    let state_arg = state.to_str().ok_or("a state path that is not UTF-8")?;
    let extra = ["-e", state_arg];
    let failed = |e: io::Error| format!("{name}: {e}");
    let mut first = start_server(name, args, args.memory_mb, &extra)?;
    preload(first.address, args.keys, bytes).map_err(failed)?;
    let stop_s = first.stop_with(signal)?.as_secs_f64();
    drop(first);
    let state_bytes = size_of_state(state);
    // memcached refuses its saved state when restarted within the second of its stop (it
    // logs "restart incompatible due to setting for [stop_time]" and starts cold); a pause
    // before every restart keeps the comparison fair, and is not counted.
    std::thread::sleep(Duration::from_millis(1100));
    let began = Instant::now();
    let second = start_server(name, args, args.memory_mb, &extra)?;
    let listen_s = began.elapsed().as_secs_f64();
    let mut stream = connect(second.address).map_err(failed)?;
    // The first hit: gets of 100 keys spread over the key space (a server that restores
    // while it serves brings them back in its own order), repeated until one hits.
    let spread: Vec<u64> = (0..100).map(|i| i * args.keys / 100).collect();
    while sample(&mut stream, &spread).map_err(failed)? == 0 {
        if began.elapsed() > Duration::from_secs(60) {
            return Err(format!("{name} served no hit within 60 s of its restart"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let first_hit_s = began.elapsed().as_secs_f64();
    // When the server has every item back: floe-server says so in `stats` (it serves while
    // it restores); memcached restores before it listens (it has no such stat).
    while still_restoring(&mut stream).map_err(failed)? {
        if began.elapsed() > Duration::from_secs(120) {
            return Err(format!("{name} still restoring 120 s after its restart"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let restored_s = began.elapsed().as_secs_f64();
    // Sweeps of every key until one hits them all: the full hit ratio back.
    let hits = sweep(&mut stream, args.keys).map_err(failed)?;
    let mut last = hits;
    while last < args.keys {
        if began.elapsed() > Duration::from_secs(120) {
            return Err(format!(
                "{name} had {last} of {} keys back 120 s after its restart",
                args.keys
            ));
        }
        last = sweep(&mut stream, args.keys).map_err(failed)?;
    }
    let all_keys_s = began.elapsed().as_secs_f64();
    let warm = Instant::now();
    sweep(&mut stream, args.keys).map_err(failed)?;
    let warm_sweep_s = warm.elapsed().as_secs_f64();
    drop(second);
    remove_state(state);
    Ok(Restart {
        stop_s,
        state_bytes,
        listen_s,
        first_hit_s,
        restored_s,
        all_keys_s,
        hits,
        warm_sweep_s,
    })
}

pub fn run(args: &ServerArgs, cpu: &str) -> Result<(), String> {
    let bytes = args.value_bytes[0];
    println!(
        "# floe-bench server --warm-restart: {} keys of 20 bytes with {bytes}-byte values, servers -t {} -m {}, state in {}; times from the restarted process's spawn; median of {}; CPU {cpu}",
        args.keys,
        args.server_threads,
        args.memory_mb,
        args.state_dir.display(),
        args.repeat
    );
    println!("server\tstopped_by\tstop_s\tstate_MiB\tlisten_s\tfirst_hit_s\trestored_s\tall_keys_s\tfirst_sweep_hit%\twarm_sweep_s");
    let mut cases = Vec::new();
    for name in &args.servers {
        if name == "memcached" {
            cases.push((name.as_str(), libc::SIGUSR1, "SIGUSR1"));
        } else {
            cases.push((name.as_str(), libc::SIGTERM, "SIGTERM"));
            cases.push((name.as_str(), libc::SIGKILL, "SIGKILL"));
        }
    }
    for (name, signal, signal_name) in cases {
        let state = args
            .state_dir
            .join(format!("floe-bench-warm-{}-{name}", std::process::id()));
        let runs = (0..args.repeat)
            .map(|_| restart_once(name, signal, args, &state, bytes))
            .collect::<Result<Vec<_>, _>>()?;
        let column = |f: fn(&Restart) -> f64| {
            let values: Vec<f64> = runs.iter().map(f).collect();
            median(values)
        };
        println!(
            "{name}\t{signal_name}\t{:.3}\t{:.1}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{:.2}\t{:.3}",
            column(|r| r.stop_s),
            column(|r| r.state_bytes as f64) / (1 << 20) as f64,
            column(|r| r.listen_s),
            column(|r| r.first_hit_s),
            column(|r| r.restored_s),
            column(|r| r.all_keys_s),
            column(|r| r.hits as f64) * 100.0 / args.keys as f64,
            column(|r| r.warm_sweep_s),
        );
    }
    Ok(())
}
