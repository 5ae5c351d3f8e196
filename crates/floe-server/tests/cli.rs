//! The `floe-server` binary: memcached's flags, usage errors (exit code 2), and a clean
//! shutdown on SIGTERM.

mod common;

use std::{
    io::{BufRead, BufReader, Write},
    net::TcpStream,
    process::Stdio,
    time::{Duration, Instant},
};

use common::{libc_kill, server, start};

/// A connection to the server on `address`, for writing and for reading lines.
fn connect(address: &str, port: u16) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect((address, port))
        .unwrap_or_else(|e| panic!("nothing listens on {address} port {port}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    (stream.try_clone().unwrap(), BufReader::new(stream))
}

#[test]
fn help_and_usage_errors() {
    let help = server().arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    for flag in ["-p", "-l", "-t", "-c", "-m", "-M", "-I", "-v"] {
        assert!(
            text.contains(&format!("{flag},")),
            "--help does not list {flag}:\n{text}"
        );
    }
    for bad in [
        &["-I", "512"][..],
        &["-I", "2g"],
        &["-m", "1", "-I", "1m"],
        &["-I", "lots"],
        &["-U", "11211"],
        &["-t", "0"],
        &["-c", "0"],
        &["-p", "70000"],
        &["--no-such-flag"],
        &["-l", "not-an-address"],
    ] {
        let out = server().args(bad).stderr(Stdio::piped()).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stderr.is_empty(), "{bad:?} says nothing");
    }
}

#[test]
fn serves_then_shuts_down_cleanly_on_sigterm() {
    let (mut child, port, mut log) = start(&["-t", "2", "-m", "16"]);
    let (mut writer, mut reader) = connect("127.0.0.1", port);
    writer.write_all(b"set k 0 0 1\r\nv\r\nget k\r\n").unwrap();
    let mut lines = Vec::new();
    for _ in 0..4 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        lines.push(line);
    }
    assert_eq!(lines, ["STORED\r\n", "VALUE k 0 1\r\n", "v\r\n", "END\r\n"]);
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc_kill(child.id() as i32, 15) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let mut rest_of_log = String::new();
    std::io::Read::read_to_string(&mut log, &mut rest_of_log).unwrap();
    assert!(rest_of_log.contains("shutting down"), "{rest_of_log}");
    // The connection was closed by the shutdown.
    let mut rest = String::new();
    assert_eq!(reader.read_line(&mut rest).unwrap_or(0), 0);
}

/// `--lenient-keys` accepts keys with control characters (memcaslap's), which are refused
/// by default.
#[test]
fn lenient_keys_accept_control_characters() {
    for (flag, expected) in [
        (None, "CLIENT_ERROR bad command line format\r\n"),
        (Some("--lenient-keys"), "STORED\r\n"),
    ] {
        let (mut child, port, _log) =
            start(&["-t", "1"].into_iter().chain(flag).collect::<Vec<_>>());
        let (mut writer, mut reader) = connect("127.0.0.1", port);
        writer.write_all(b"set \x10\x10key 0 0 1\r\nv\r\n").unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(line, expected, "{flag:?}");
    }
}

/// `-l` as memcached takes it: given again, comma lists, host names (every address they have)
/// and bracketed IPv6; the server answers on each address, on one port.
#[test]
fn listens_on_every_address_l_names() {
    // `start` passes `-l 127.0.0.1` first; localhost adds nothing new beside it.
    let (mut child, port, _log) = start(&["-t", "2", "-l", "[::1],localhost"]);
    for address in ["127.0.0.1", "::1"] {
        let (mut writer, mut reader) = connect(address, port);
        writer.write_all(b"version\r\n").unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("VERSION "), "{address}: {line:?}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // An empty entry, and a name that resolves to nothing, are usage errors.
    for bad in ["127.0.0.1,", "[]", "no-such-host.invalid"] {
        let out = server()
            .args(["-p", "0", "-l", bad])
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "-l {bad:?}");
        assert!(!out.stderr.is_empty(), "-l {bad:?} says nothing");
    }
}
