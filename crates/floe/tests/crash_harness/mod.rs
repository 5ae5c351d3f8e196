//! What the crash tests share (`persist.rs`, `persistent_map.rs`): scratch directories, a
//! deterministic generator, and children (this test binary again, one `child_*` test
//! selected) whose report lines the parent reads until the child dies or is killed.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::Instant,
};

/// A fresh directory under the system's temporary directory, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "floe-crash-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small deterministic generator (xorshift*), so children replay what parents expect.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

/// Spawn this binary running test `child` with `env`; its stdout piped.
pub fn spawn_child(child: &str, env: &[(&str, String)]) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args([child, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().expect("spawn the child")
}

/// Hand a child's report to `take`, line by line, until it ends (killing the child with
/// SIGKILL at `deadline`); whole lines only (a line cut by the kill is dropped).
pub fn read_report(
    child: &mut std::process::Child,
    deadline: Option<Instant>,
    mut take: impl FnMut(&str),
) {
    let stdout = child.stdout.take().expect("piped");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    let mut killed = false;
    loop {
        if let Some(deadline) = deadline {
            if !killed && Instant::now() >= deadline {
                child.kill().expect("SIGKILL the child");
                killed = true;
            }
        }
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.ends_with('\n') => take(line.trim_end()),
            Ok(_) => break, // cut short by the kill
        }
    }
    let _ = child.wait();
}

/// Crash points (feature `crash-points`): run test `child` once per crash point, from the
/// first with step `stride`, each in a fresh directory (named to the child by `dir_var`) and
/// crashing at that point (`FLOE_CRASH_AT`); its report goes through `take` into a fresh
/// model. `check` gets the point, the directory, the model and whether the child crashed;
/// the first run that reaches no crash point (the child succeeds) is checked and ends the
/// loop. Returns how many runs crashed and the last point tried.
pub fn for_each_crash_point<M>(
    child: &str,
    dir_var: &str,
    stride: u64,
    new_model: impl Fn() -> M,
    take: impl Fn(&mut M, &str),
    mut check: impl FnMut(u64, &Path, M, bool),
) -> (u64, u64) {
    let mut point = 1;
    let mut crashed = 0;
    loop {
        let scratch = Scratch::new("point");
        let mut model = new_model();
        let mut running = spawn_child(
            child,
            &[
                (dir_var, scratch.path().display().to_string()),
                ("FLOE_CRASH_AT", point.to_string()),
            ],
        );
        read_report(&mut running, None, |line| take(&mut model, line));
        let finished = running.wait().expect("wait").success();
        check(point, scratch.path(), model, !finished);
        if finished {
            return (crashed, point);
        }
        crashed += 1;
        point += stride;
    }
}

/// Copy the files of the directory `from` into a fresh scratch directory.
#[allow(dead_code)] // not every test binary copies directories
pub fn copy_map(from: &Path, name: &str) -> Scratch {
    let copy = Scratch::new(name);
    std::fs::create_dir_all(copy.path()).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    copy
}

/// Run `open` on a thread of its own and give its answer, failing the test if it has none
/// within ten seconds (a FIFO once blocked an open for ever).
#[allow(dead_code)] // not every test binary opens with a deadline
pub fn within_seconds<T: Send + 'static>(open: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(open());
    });
    receiver
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the open blocked")
}

/// Make a FIFO at `path` (where a file of a map's should be).
#[allow(dead_code)] // not every test binary makes FIFOs
pub fn make_fifo(path: &Path) {
    let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path; the result is checked.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
}
