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
        // memcached flags that do not apply, refused by name with the reason.
        &["-s", "/tmp/memcached.sock"],
        &["-A"],
        &["-f", "1.25"],
        &["-n", "48"],
        &["-R", "20"],
        &["-C"],
        &["-S"],
        &["-F"],
        &["-Z"],
        &["-B", "binary"],
        &["-D", "ab"],
        &["-D", " "],
        &["-o", "slab_reassign"],
        &["-o", "hashpower=99"],
        &["-b", "0"],
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

/// A port outside the kernel's ephemeral range (where the other tests' `-p 0` servers land),
/// free when asked: for a server whose log cannot say which port it took (`-d`).
fn fixed_free_port() -> u16 {
    let range =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let lowest_ephemeral: u16 = range
        .split_whitespace()
        .next()
        .and_then(|low| low.parse().ok())
        .unwrap_or(32768);
    let start = 20000 + (std::process::id() % 5000) as u16;
    (start..lowest_ephemeral)
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("a free port below the ephemeral range")
}

/// The process `pid` is gone (or a zombie) within ten seconds.
fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name in parentheses.
        let state = state.rsplit(')').next().unwrap_or("").trim_start();
        if state.is_empty() || state.starts_with('Z') {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{pid} still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Debian's `/etc/memcached.conf` flags: `-d` returns at once with the server running in the
/// background, `-P` holds its pid while it runs (gone after a clean stop), `-u` (as root)
/// makes it run as that user; an unknown user is a usage error.
#[test]
fn daemon_pidfile_and_user_as_debian_runs_memcached() {
    let dir = std::env::temp_dir().join(format!("floe-server-daemon-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // As Debian's /run/memcached, writable by the user the server becomes.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let pidfile = dir.join("memcached.pid");
    let port = fixed_free_port();
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"));
    let status = server()
        .args(["-d", "-m", "16", "-p", &port.to_string(), "-l", "127.0.0.1"])
        .args(["-u", "nobody", "-P"])
        .arg(&pidfile)
        .status()
        .unwrap();
    assert!(status.success(), "-d: {status}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "no pid file 10 s after -d");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut writer, mut reader) = connect("127.0.0.1", port);
    writer.write_all(b"version\r\n").unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("VERSION "), "{line:?}");
    let uid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|line| line.starts_with("Uid:"))
        .and_then(|line| line.split_whitespace().nth(2).map(str::to_string))
        .unwrap();
    if root {
        assert_eq!(uid, "65534", "-u nobody as root");
    }
    // SAFETY: signalling the daemon this test started.
    assert_eq!(unsafe { libc_kill(pid as i32, 15) }, 0);
    wait_gone(pid);
    assert!(!pidfile.exists(), "the pid file outlived a clean stop");
    let out = server()
        .args(["-p", "0", "-u", "no-such-user-here"])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    if root {
        assert_eq!(out.status.code(), Some(2), "-u no-such-user-here");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pid file that cannot be written (its directory missing, as a fresh /run/memcached) is
/// reported and the server serves on, as memcached does; one naming a running process is
/// warned about and replaced.
#[test]
fn an_unwritable_pid_file_is_reported_and_the_server_runs_on() {
    let (mut child, port, mut log) = start(&["-P", "/nonexistent-floe-dir/memcached.pid"]);
    let mut line = String::new();
    log.read_line(&mut line).unwrap();
    assert!(
        line.contains("could not write the pid file /nonexistent-floe-dir/memcached.pid"),
        "{line:?}"
    );
    let (mut writer, mut reader) = connect("127.0.0.1", port);
    writer.write_all(b"version\r\n").unwrap();
    let mut reply = String::new();
    reader.read_line(&mut reply).unwrap();
    assert!(reply.starts_with("VERSION "), "{reply:?}");
    child.kill().unwrap();
    child.wait().unwrap();

    // A pid file left by a running process (this test's own pid stands for one).
    let dir = std::env::temp_dir().join(format!("floe-server-pid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pidfile = dir.join("memcached.pid");
    std::fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
    let (mut child, _port, mut log) = start(&["-P", pidfile.to_str().unwrap()]);
    let mut line = String::new();
    log.read_line(&mut line).unwrap();
    assert!(line.contains("(running) pid"), "{line:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&pidfile).unwrap().trim() != child.id().to_string() {
        assert!(Instant::now() < deadline, "the pid file was not replaced");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!dir.join("memcached.pid.tmp").exists());
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// memcached's flags that apply are taken: a backlog, core dumps, locked memory, large pages,
/// no dumping or watch (which floe-server lacks anyway), `-o hashpower`, `-B auto`; `-i`
/// prints the license.
#[test]
fn memcached_flags_that_apply_are_taken() {
    let (mut child, port, _log) = start(&[
        "-m",
        "16",
        "-b",
        "64",
        "-r",
        "-k",
        "-L",
        "-X",
        "-W",
        "-o",
        "hashpower=16",
        "-B",
        "auto",
        "-D",
        "/",
    ]);
    let (mut writer, mut reader) = connect("127.0.0.1", port);
    let mut roundtrip = |request: &[u8], lines: usize| {
        writer.write_all(request).unwrap();
        (0..lines)
            .map(|_| {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                line
            })
            .collect::<String>()
    };
    assert_eq!(roundtrip(b"set k/1 0 0 1\r\nv\r\n", 1), "STORED\r\n");
    // -X: no dumps, as memcached refuses them.
    assert_eq!(
        roundtrip(b"lru_crawler metadump all\r\n", 1),
        "ERROR metadump not allowed\r\n"
    );
    assert_eq!(
        roundtrip(b"stats cachedump 1 0\r\n", 1),
        "CLIENT_ERROR stats cachedump not allowed\r\n"
    );
    // -D: per-prefix counts on from the start, with its delimiter.
    assert_eq!(
        roundtrip(b"stats detail dump\r\n", 2),
        "PREFIX k get 0 hit 0 set 1 del 0\r\nEND\r\n"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let license = server().arg("-i").output().unwrap();
    assert!(license.status.success());
    assert!(String::from_utf8_lossy(&license.stdout).contains("MIT OR Apache-2.0"));
}

/// Log lines carry a timestamp and a level; `-vv` logs each command line and its reply's
/// first line, as memcached's `-vv` does (`<fd line`, `>fd line`).
#[test]
fn verbose_logs_each_command_with_timestamps_and_levels() {
    let (mut child, port, mut log) = start(&["-vv"]);
    let (mut writer, mut reader) = connect("127.0.0.1", port);
    writer
        .write_all(b"set logged 0 0 1\r\nv\r\nget logged\r\n")
        .unwrap();
    let mut replies = String::new();
    while !replies.ends_with("END\r\n") {
        reader.read_line(&mut replies).unwrap();
    }
    drop((writer, reader));
    // The close is logged by the worker once it sees the end of the stream.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut log, &mut text).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let find = |needle: &str| {
        lines
            .iter()
            .find(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
    };
    let set = find("set logged 0 0 1");
    // `2026-11-28T14:07:18.915678Z DEBUG <12 set logged 0 0 1`
    let (stamp, rest) = set.split_once(' ').unwrap();
    assert!(
        stamp.len() >= 20 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "{set}"
    );
    assert!(rest.trim_start().starts_with("DEBUG <"), "{set}");
    let descriptor = rest.trim_start()["DEBUG <".len()..]
        .split(' ')
        .next()
        .unwrap();
    find(&format!(">{descriptor} STORED"));
    find(&format!("<{descriptor} get logged"));
    find(&format!("<{descriptor} connection closed"));
}

/// `--config` reads flags in the format of Debian's /etc/memcached.conf (skipping -d and
/// `logfile`, as Debian's service wrapper does); the command line's flags win. A file that is
/// missing, not a regular file (a FIFO would block the start) or holds a line that is not a
/// flag is refused with exit code 2.
#[test]
fn config_file_in_memcached_conf_format() {
    let dir = std::env::temp_dir().join(format!("floe-server-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("floe-server.conf");
    std::fs::write(
        &config,
        "# as Debian ships memcached.conf\n-d\nlogfile /var/log/memcached.log\n\
         -m 32 # megabytes\n-t 3\n\n-c 77\n",
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();
    let (mut child, port, _log) = start(&["--config", config_arg, "-m", "48"]);
    let (mut writer, reader) = connect("127.0.0.1", port);
    writer.write_all(b"stats settings\r\n").unwrap();
    let settings: Vec<String> = reader
        .lines()
        .map(Result::unwrap)
        .take_while(|line| line != "END")
        .collect();
    for expected in [
        "STAT maxbytes 50331648",
        "STAT num_threads 3",
        "STAT maxconns 77",
    ] {
        assert!(
            settings.iter().any(|line| line == expected),
            "{expected} not in {settings:?}"
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let fifo = dir.join("fifo.conf");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo reads it only.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let unknown = dir.join("unknown.conf");
    std::fs::write(&unknown, "-m 64\nmaxconns 10\n").unwrap();
    for (file, says) in [
        (dir.join("missing.conf"), "No such file"),
        (fifo.clone(), "not a regular file"),
        (dir.clone(), "not a regular file"),
        (unknown.clone(), "line 2: unknown directive \"maxconns\""),
    ] {
        let output = server()
            .args(["--config", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", file.display());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{}: {stderr}", file.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The manual page is generated from the flags' definitions.
#[test]
fn manual_page_lists_the_flags() {
    let output = server().arg("--man").output().unwrap();
    assert!(output.status.success());
    let page = String::from_utf8(output.stdout).unwrap();
    assert!(page.contains(".TH floe-server 1"), "{page}");
    for flag in [
        "\\-\\-memory\\-limit",
        "\\-\\-config",
        "\\-\\-persist",
        "\\-\\-listen",
    ] {
        assert!(page.contains(flag), "{flag} not in the manual page");
    }
}
