//! What the binary's tests share: starting `floe-server` and signalling it.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

/// The binary under test.
pub fn server() -> Command {
    Command::new(env!("CARGO_BIN_EXE_floe-server"))
}

/// Start the server on port 0 with `-v` and `args`; the child, the port it says it listens
/// on, and the rest of its log. (A port picked free beforehand can be taken meanwhile by
/// another test's server: a test once talked to the SIGTERM test's server and read a
/// connection reset.)
pub fn start(
    args: &[&str],
) -> (
    std::process::Child,
    u16,
    BufReader<std::process::ChildStderr>,
) {
    let (child, port, log, _) = start_logged(args);
    (child, port, log)
}

/// [`start`], also returning what the server logged before it listened.
// The child goes back to the caller, which waits for it; a failed read here ends the test.
#[allow(clippy::zombie_processes)]
pub fn start_logged(
    args: &[&str],
) -> (
    std::process::Child,
    u16,
    BufReader<std::process::ChildStderr>,
    String,
) {
    let mut child = server()
        .args(["-p", "0", "-l", "127.0.0.1", "-v"])
        .args(args)
        // Not the harness's stdout: a server a failed test left running would hold it open.
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut before = String::new();
    loop {
        let mut line = String::new();
        if log.read_line(&mut line).unwrap() == 0 {
            let status = child.wait().unwrap();
            panic!("the server never listened: {status}: {before}");
        }
        if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
            let port = rest.split_whitespace().next().unwrap().parse().unwrap();
            return (child, port, log, before);
        }
        before.push_str(&line);
    }
}

/// Kills a server if the test panics before it stopped it (dropped while unwinding).
pub struct Reaper(pub u32);

impl Drop for Reaper {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // SAFETY: signalling a child of ours; at worst it has exited and is a zombie.
            unsafe { libc_kill(self.0 as i32, 9) };
        }
    }
}

extern "C" {
    /// libc's `kill(2)`.
    #[link_name = "kill"]
    pub fn libc_kill(pid: i32, signal: i32) -> i32;
    /// libc's `mkfifo(3)`.
    #[link_name = "mkfifo"]
    #[allow(dead_code)] // not every test binary makes FIFOs
    pub fn libc_mkfifo(path: *const core::ffi::c_char, mode: u32) -> i32;
}
