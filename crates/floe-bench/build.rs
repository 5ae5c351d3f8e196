//! Builds the C++ peers (`cpp/peers.cpp`) with the `cc` crate: every peer whose library this
//! machine has, found by compiling and linking a small program against it first. A peer that
//! is missing is left out (never failing the build), and the bench says why when asked to run
//! it: the reason is passed to the crate as `FLOE_PEER_<NAME>` (see `src/maps/cpp.rs`).
//!
//! Where the libraries come from: Debian's `libtbb-dev`, `libcuckoo-dev` and `libabsl-dev`
//! (found through pkg-config, or by their usual names), and Boost 1.83+ for
//! `concurrent_flat_map`, which Debian 12 does not have (1.74): its headers are taken from
//! `FLOE_BOOST_INCLUDE` if set, else from the `boost-headers` Python package
//! (`boost_headers.get_include()`), else from the compiler's own include path.
//! `FLOE_NO_CPP_PEERS=1` builds none.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

/// One peer: its name (the `--maps` entry), the probe that must compile and link, and where
/// its headers and libraries are.
struct Peer {
    name: &'static str,
    probe: &'static str,
    include: Vec<PathBuf>,
    /// `-l` names and `-L` directories.
    libs: Vec<String>,
    search: Vec<PathBuf>,
    /// Why the libraries could not even be looked for, if so.
    unsearched: Option<String>,
}

const BOOST_PROBE: &str = r#"
#define BOOST_UNORDERED_DISABLE_PARALLEL_ALGORITHMS
#include <boost/unordered/concurrent_flat_map.hpp>
int main() { boost::concurrent_flat_map<unsigned long, unsigned long> m; m.emplace(1, 2);
  unsigned long k[1] = {1}; return m.cvisit(k, k + 1, [](const auto&) {}) == 1 ? 0 : 1; }
"#;
const TBB_PROBE: &str = r#"
#include <oneapi/tbb/concurrent_hash_map.h>
int main() { tbb::concurrent_hash_map<unsigned long, unsigned long> m; return m.insert({1, 2}) ? 0 : 1; }
"#;
const LIBCUCKOO_PROBE: &str = r#"
#include <libcuckoo/cuckoohash_map.hh>
int main() { libcuckoo::cuckoohash_map<unsigned long, unsigned long> m; return m.insert(1, 2) ? 0 : 1; }
"#;
const ABSL_PROBE: &str = r#"
#include <absl/container/flat_hash_map.h>
int main() { absl::flat_hash_map<unsigned long, unsigned long> m; return m.try_emplace(1, 2).second ? 0 : 1; }
"#;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(floe_cpp)");
    println!("cargo::rerun-if-changed=cpp/peers.cpp");
    println!("cargo::rerun-if-changed=build.rs");
    for var in [
        "FLOE_BOOST_INCLUDE",
        "FLOE_NO_CPP_PEERS",
        "CXX",
        "PKG_CONFIG_PATH",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let peers = [
        Peer {
            name: "boost",
            probe: BOOST_PROBE,
            include: boost_include().into_iter().collect(),
            libs: vec![],
            search: vec![],
            unsearched: None,
        },
        pkg_config("tbb", "tbb", TBB_PROBE, &["tbb"]),
        Peer {
            name: "libcuckoo",
            probe: LIBCUCKOO_PROBE,
            include: vec![],
            libs: vec!["pthread".into()],
            search: vec![],
            unsearched: None,
        },
        pkg_config(
            "absl",
            "absl_flat_hash_map",
            ABSL_PROBE,
            &[
                "absl_raw_hash_set",
                "absl_hash",
                "absl_city",
                "absl_low_level_hash",
            ],
        ),
    ];
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("cpp/peers.cpp")
        .warnings(true)
        // The peers at their best on the machine that builds the bench (absl's SSSE3
        // probing, for one); floe chooses its SIMD at run time instead.
        .flag_if_supported("-march=native");
    if env::var_os("FLOE_NO_CPP_PEERS").is_some_and(|v| v != "0") {
        for peer in &peers {
            report(
                peer.name,
                "FLOE_NO_CPP_PEERS was set when floe-bench was built",
            );
        }
        return;
    }
    let compiler = match build.try_get_compiler() {
        Ok(compiler) => compiler,
        Err(error) => {
            for peer in &peers {
                report(peer.name, &format!("no C++ compiler ({error})"));
            }
            return;
        }
    };
    // Link lines wait for the harness: with `--as-needed`, a shared library must come after
    // the archive that uses it.
    let mut links = Vec::new();
    for peer in &peers {
        let missing = match &peer.unsearched {
            Some(why) => Some(why.clone()),
            None => probe(&compiler, peer, &out).err(),
        };
        match missing {
            None => {
                build.define(&format!("FLOE_PEER_{}", peer.name.to_uppercase()), None);
                for dir in &peer.include {
                    build.include(dir);
                }
                for dir in &peer.search {
                    links.push(format!("cargo::rustc-link-search=native={}", dir.display()));
                }
                for lib in &peer.libs {
                    links.push(format!("cargo::rustc-link-lib={lib}"));
                }
                report(peer.name, "ok");
            }
            Some(why) => report(peer.name, &why),
        }
    }
    match build.try_compile("floe_peers") {
        Ok(()) => {
            println!("cargo::rustc-cfg=floe_cpp");
            for link in links {
                println!("{link}");
            }
        }
        Err(error) => {
            // The probes passed but the harness did not build: say so for every peer (and
            // keep the compiler's message in the build log).
            println!("cargo::warning=floe-bench: the C++ peers did not build: {error}");
            for peer in &peers {
                report(peer.name, &format!("cpp/peers.cpp did not build: {error}"));
            }
        }
    }
}

/// Tell the crate (at compile time) what became of a peer: "ok", or why it is missing.
fn report(name: &str, status: &str) {
    let status = status.replace(['\n', '\r'], " ");
    println!(
        "cargo::rustc-env=FLOE_PEER_{}={status}",
        name.to_uppercase()
    );
    if status != "ok" {
        println!("cargo::warning=floe-bench: C++ peer {name} left out: {status}");
    }
}

/// The headers of a Boost with `concurrent_flat_map` (see the crate docs above).
fn boost_include() -> Option<PathBuf> {
    if let Some(dir) = env::var_os("FLOE_BOOST_INCLUDE") {
        return Some(dir.into());
    }
    let output = Command::new("python3")
        .args([
            "-c",
            "import boost_headers; print(boost_headers.get_include())",
        ])
        .output()
        .ok()?;
    let dir = String::from_utf8(output.stdout).ok()?;
    let dir = Path::new(dir.trim());
    (output.status.success() && dir.is_dir()).then(|| dir.to_path_buf())
}

/// A peer whose flags pkg-config knows (`package`), or, without pkg-config, the libraries
/// `fallback` on the default search path.
fn pkg_config(name: &'static str, package: &str, probe: &'static str, fallback: &[&str]) -> Peer {
    let mut peer = Peer {
        name,
        probe,
        include: vec![],
        libs: fallback.iter().map(|l| l.to_string()).collect(),
        search: vec![],
        unsearched: None,
    };
    let Ok(output) = Command::new("pkg-config")
        .args(["--cflags", "--libs", package])
        .output()
    else {
        return peer;
    };
    if !output.status.success() {
        peer.unsearched = Some(format!(
            "pkg-config does not know {package}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
        return peer;
    }
    peer.libs.clear();
    for flag in String::from_utf8_lossy(&output.stdout).split_whitespace() {
        if let Some(lib) = flag.strip_prefix("-l") {
            peer.libs.push(lib.to_string());
        } else if let Some(dir) = flag.strip_prefix("-L") {
            peer.search.push(dir.into());
        } else if let Some(dir) = flag.strip_prefix("-I") {
            peer.include.push(dir.into());
        }
        // Other flags (`-Wl,--as-needed` around libatomic, defines) are not needed to link
        // the peer's code into the bench.
    }
    peer
}

/// Compile and link the peer's probe program with its flags; the compiler's complaint if not.
fn probe(compiler: &cc::Tool, peer: &Peer, out: &Path) -> Result<(), String> {
    let source = out.join(format!("probe_{}.cpp", peer.name));
    let binary = out.join(format!("probe_{}", peer.name));
    fs::write(&source, peer.probe).map_err(|e| e.to_string())?;
    let mut command = compiler.to_command();
    command
        .arg("-std=c++17")
        .arg(&source)
        .arg("-o")
        .arg(&binary);
    for dir in &peer.include {
        command.arg("-I").arg(dir);
    }
    for dir in &peer.search {
        command.arg("-L").arg(dir);
    }
    for lib in &peer.libs {
        command.arg(format!("-l{lib}"));
    }
    let output = command
        .output()
        .map_err(|e| format!("running the compiler: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let complaint = String::from_utf8_lossy(&output.stderr);
    let first = complaint
        .lines()
        .find(|l| l.contains("error"))
        .unwrap_or("the probe program did not compile");
    Err(format!(
        "{} (the probe against it failed: {first})",
        what_is_needed(peer.name)
    ))
}

/// What to install for a peer.
fn what_is_needed(name: &str) -> &'static str {
    match name {
        "boost" => "needs Boost 1.83+ headers: pip install boost-headers, or FLOE_BOOST_INCLUDE",
        "tbb" => "needs oneTBB: apt-get install libtbb-dev",
        "libcuckoo" => "needs libcuckoo: apt-get install libcuckoo-dev",
        _ => "needs abseil: apt-get install libabsl-dev",
    }
}
