//! The oracle the tests compare floe-kmer with: a naive counter over the sequences as
//! strings, with nothing of floe-kmer's (no 2-bit codes, no parser, no table).
#![allow(dead_code, reason = "each test file uses part of it")]

use std::{
    collections::HashMap,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// The dump (`KMER COUNT` lines, sorted) of the k-mers of `sequences`: every window of `k`
/// letters of `ACGT` (in either case, counted in upper case) that no other letter
/// interrupts, or with `canonical` the smaller (as a string) of the window and its reverse
/// complement.
pub fn naive_dump<S: AsRef<[u8]>>(sequences: &[S], k: usize, canonical: bool) -> String {
    // The runs of bases, upper-cased, and the reverse complement of each.
    let runs: Vec<Vec<u8>> = sequences
        .iter()
        .flat_map(|s| {
            s.as_ref()
                .split(|b| !b"ACGTacgt".contains(b))
                .map(|run| run.to_ascii_uppercase())
                .collect::<Vec<_>>()
        })
        .filter(|run| run.len() >= k)
        .collect();
    let reversed: Vec<Vec<u8>> = runs
        .iter()
        .map(|run| {
            run.iter()
                .rev()
                .map(|b| match b {
                    b'A' => b'T',
                    b'C' => b'G',
                    b'G' => b'C',
                    _ => b'A',
                })
                .collect()
        })
        .collect();
    let mut counts: HashMap<&[u8], u64> = HashMap::new();
    for (run, reverse) in runs.iter().zip(&reversed) {
        let n = run.len();
        for i in 0..=n - k {
            let window = &run[i..i + k];
            // The reverse complement of run[i..i + k] is reverse[n - i - k..n - i].
            let kmer = if canonical {
                window.min(&reverse[n - i - k..n - i])
            } else {
                window
            };
            *counts.entry(kmer).or_default() += 1;
        }
    }
    let mut sorted: Vec<_> = counts.into_iter().collect();
    sorted.sort_unstable();
    sorted
        .iter()
        .map(|(kmer, count)| format!("{} {count}\n", String::from_utf8_lossy(kmer)))
        .collect()
}

/// A deterministic stream of pseudo-random numbers (xorshift64*), for test inputs that are
/// the same on every run without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `len` random letters of `alphabet`.
    pub fn text(&mut self, alphabet: &[u8], len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize])
            .collect()
    }
}

/// What a run of the binary printed and returned.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn floe_kmer(args: &[&str], stdin: &[u8]) -> Ran {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floe-kmer"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // A run that fails before reading stdin closes it early: a broken pipe here is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    Ran {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Runs with `args` (paths as strings) and no stdin.
pub fn run(args: &[&str]) -> Ran {
    floe_kmer(args, b"")
}

pub fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, data).unwrap();
    path
}

/// A FIFO at `path` (`mkfifo`).
pub fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.unwrap().success(), "mkfifo {}", path.display());
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), Default::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

pub fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// floe-kmer's dump (`KMER COUNT` lines, sorted) of `input` counted by `settings`, in the word
/// its k needs (`u64` up to 32, `u128` above); and the k-mers counted.
pub fn floe_dump(
    input: floe_kmer::parse::Input,
    settings: &floe_kmer::count::Settings,
) -> (Vec<u8>, u64) {
    if settings.k <= 32 {
        dump_as::<u64>(input, settings)
    } else {
        dump_as::<u128>(input, settings)
    }
}

fn dump_as<W: floe_kmer::count::CountWord>(
    input: floe_kmer::parse::Input,
    settings: &floe_kmer::count::Settings,
) -> (Vec<u8>, u64) {
    let counts = floe_kmer::count::count::<W>(input, settings).unwrap();
    let total = counts.total;
    let mut dump = Vec::new();
    floe_kmer::output::write_dump(
        &mut counts.into_kmers(),
        settings.k,
        &Default::default(),
        &mut dump,
    )
    .unwrap();
    (dump, total)
}
