//! The shared library's ELF SONAME, so programs linked against it keep working across
//! compatible upgrades and refuse incompatible ones: `libfloe_capi.so.MAJOR`, or
//! `libfloe_capi.so.0.MINOR` while the major version is 0 (where a minor version may break
//! the ABI, as cargo-c names them). `install.sh` installs the library under the full version
//! with the SONAME and the unversioned name as links to it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let elf = matches!(
        os.as_str(),
        "linux"
            | "android"
            | "freebsd"
            | "netbsd"
            | "openbsd"
            | "dragonfly"
            | "illumos"
            | "solaris"
    );
    if !elf {
        return;
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    // Only the cdylib's link: the static library and the rlib have no SONAME.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfloe_capi.so.{abi}");
}
