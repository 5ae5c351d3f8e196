//! `floe-server`: a memcached-compatible cache. Flags as memcached's; see `--help`.

use std::{
    ffi::CString,
    net::{IpAddr, SocketAddr, ToSocketAddrs},
    path::{Path, PathBuf},
    process::ExitCode,
    sync::{atomic::AtomicBool, Arc},
    time::Duration,
};

use clap::{ArgAction, Parser};
use floe_server::{
    cache::{Cache, OpenError, Settings},
    log,
    persist::StoreOptions,
    server::{checkpoint, Config, Server},
};

/// A memcached-compatible cache server on floe's lock-free hash map.
#[derive(Parser, Debug)]
#[command(
    name = "floe-server",
    version,
    about,
    disable_version_flag = true,
    args_override_self = true
)]
struct Args {
    /// Read flags from this file first, in the format of Debian's /etc/memcached.conf (one
    /// or more flags a line, `#` comments); flags on the command line come after, so they
    /// win. As Debian's service wrapper does, lines with -d or -h and `logfile` lines are
    /// skipped: the service manager runs the server and keeps its log.
    #[arg(long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the manual page (roff) and exit.
    #[arg(long = "man", hide = true)]
    man: bool,
    /// TCP port to listen on.
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,
    /// Interfaces to listen on: addresses or host names (every address a name resolves to),
    /// comma separated or given again, as memcached takes them; `[::1]` brackets allowed
    /// (memcached's default: every interface; here 0.0.0.0).
    #[arg(
        short = 'l',
        long = "listen",
        default_value = "0.0.0.0",
        value_delimiter = ',',
        action = ArgAction::Append
    )]
    listen: Vec<String>,
    /// Worker threads (one event loop each).
    #[arg(short = 't', long = "threads", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,
    /// Most simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    max_connections: usize,
    /// Item memory in megabytes.
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=(1 << 24)))]
    memory_mb: u64,
    /// Return an error when memory is full instead of evicting.
    #[arg(short = 'M', long = "disable-evictions")]
    no_evictions: bool,
    /// Largest item (bytes, or with a k or m suffix; 1k to 1g, at most half of -m).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    max_item_size: usize,
    /// More verbose logging to stderr (-v, -vv, -vvv).
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Accept keys with control characters in the text protocol, as memcached does (its
    /// protocol forbids them; memcaslap sends them).
    #[arg(long)]
    lenient_keys: bool,
    /// Keep the items in this directory (created if need be) and restore them at the next
    /// start, after a clean stop or a crash: a warm restart (memcached's -e names a file
    /// for its item memory; here it is a directory of journals and snapshots).
    #[arg(
        short = 'e',
        long = "persist",
        alias = "memory-file",
        value_name = "DIR"
    )]
    persist: Option<PathBuf>,
    /// With -e: sync the journals to the disk every this many milliseconds (what a power
    /// loss may take; a process crash takes nothing acknowledged). 0: only at snapshots.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    persist_sync: u64,
    /// With -e: write a snapshot (and drop the journals) once they hold this many
    /// megabytes and more than the last snapshot.
    #[arg(long, default_value_t = 64, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..=(1 << 30)))]
    persist_compact: u64,
    /// With -e: start from a directory whose journals are refused as damaged (a record that
    /// fails, a journal cut short or missing): each journal is cut at its first record that
    /// fails, and what was dropped is logged. Values written after the damage may come back
    /// older or not at all.
    #[arg(long)]
    persist_repair: bool,
    /// Run in the background (memcached's -d): detached from the terminal, its working
    /// directory `/`, standard streams on /dev/null (so only exit codes and -P tell of it).
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// When started as root, run as this user (memcached's -u); ignored otherwise, as
    /// memcached does. Done before the listening sockets and -e's directory are opened.
    #[arg(short = 'u', long = "user", value_name = "USER")]
    user: Option<String>,
    /// Write the process id to this file once listening (memcached's -P); removed at a
    /// clean stop. A file that cannot be written is reported and the server runs on, as
    /// memcached's does.
    #[arg(short = 'P', long = "pidfile", value_name = "FILE")]
    pidfile: Option<PathBuf>,
    /// The listen queue's length (memcached's -b).
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024, value_parser = clap::value_parser!(i32).range(1..=65535))]
    backlog: i32,
    /// Raise the core file limit to its maximum (memcached's -r).
    #[arg(short = 'r', long = "enable-coredumps")]
    coredumps: bool,
    /// Lock all memory, present and future, into RAM (memcached's -k; a warning if the
    /// limit refuses it, and the server runs on). As with memcached, allocations past the
    /// locked-memory limit (`ulimit -l`; none for root) then fail: raise it first.
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// Large memory pages (memcached's -L): floe's tables ask for them at any rate.
    #[arg(short = 'L', long = "enable-largepages")]
    large_pages: bool,
    /// Protocol (memcached's -B): only auto, each connection's first byte decides.
    #[arg(short = 'B', long = "protocol", default_value = "auto")]
    protocol: String,
    /// Disable `stats cachedump` and `lru_crawler metadump` (memcached's -X).
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,
    /// The character that ends a key's prefix for `stats detail` (memcached's -D; ':' by
    /// default). Giving it turns per-prefix counting on from the start.
    #[arg(short = 'D', value_name = "CHAR", value_parser = parse_delimiter)]
    delimiter: Option<u8>,
    /// Disable `watch` (memcached's -W): floe-server has none, so this always holds.
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,
    /// memcached's extended options, comma separated: `hashpower=N` (room for 2^N items at
    /// the start) is taken; the others are refused, by name.
    #[arg(short = 'o', long = "extended", value_delimiter = ',', action = ArgAction::Append)]
    extended: Vec<String>,
    /// Print the license and exit (memcached's -i).
    #[arg(short = 'i', long = "license")]
    license: bool,
    /// memcached flags that do not apply here, taken only to refuse them with the reason.
    #[command(flatten)]
    refused: RefusedFlags,
    /// UDP port (memcached's -U): only 0 (off) is supported.
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,
    /// Print the version.
    #[arg(short = 'V', long = "version", action = ArgAction::Version)]
    version: Option<bool>,
}

/// memcached 1.6 flags floe-server does not take: parsed (hidden) so that using one is a
/// usage error that names it and says why, not clap's "unexpected argument".
#[derive(clap::Args, Debug)]
struct RefusedFlags {
    #[arg(short = 's', long = "unix-socket", hide = true)]
    unix_socket: Option<String>,
    #[arg(short = 'a', long = "unix-mask", hide = true)]
    unix_mask: Option<String>,
    #[arg(short = 'A', long = "enable-shutdown", hide = true)]
    enable_shutdown: bool,
    #[arg(short = 'f', long = "slab-growth-factor", hide = true)]
    slab_growth_factor: Option<String>,
    #[arg(short = 'n', long = "slab-min-size", hide = true)]
    slab_min_size: Option<String>,
    #[arg(short = 'R', long = "max-reqs-per-event", hide = true)]
    max_reqs_per_event: Option<String>,
    #[arg(short = 'C', long = "disable-cas", hide = true)]
    disable_cas: bool,
    #[arg(short = 'S', long = "enable-sasl", hide = true)]
    enable_sasl: bool,
    #[arg(short = 'F', long = "disable-flush-all", hide = true)]
    disable_flush_all: bool,
    #[arg(short = 'Y', long = "auth-file", hide = true)]
    auth_file: Option<String>,
    #[arg(short = 'Z', long = "enable-ssl", hide = true)]
    enable_ssl: bool,
    #[arg(short = 'N', long = "napi_ids", hide = true)]
    napi_ids: Option<String>,
}

impl RefusedFlags {
    /// The first refused flag given, with why it is refused.
    fn reason(&self) -> Option<&'static str> {
        let refusals = [
            (self.unix_socket.is_some() || self.unix_mask.is_some(),
             "-s/-a: unix sockets are not supported; listen on 127.0.0.1 with -l"),
            (self.enable_shutdown,
             "-A: the shutdown command is not supported; stop the server with SIGTERM"),
            (self.slab_growth_factor.is_some() || self.slab_min_size.is_some(),
             "-f/-n: floe-server has no slab classes (each item takes its own size)"),
            (self.max_reqs_per_event.is_some(),
             "-R: a connection's turn is bounded by its unsent output (4 MiB), not a request count"),
            (self.disable_cas, "-C: CAS uniques are always kept"),
            (self.enable_sasl || self.auth_file.is_some(),
             "-S/-Y: authentication (SASL, auth files) is not supported"),
            (self.disable_flush_all, "-F: flush_all cannot be turned off"),
            (self.enable_ssl, "-Z: TLS is not supported"),
            (self.napi_ids.is_some(), "-N: NAPI ids are not supported"),
        ];
        refusals
            .into_iter()
            .find(|(given, _)| *given)
            .map(|(_, why)| why)
    }
}

/// The initial room `-o` asks for (`hashpower=N`: 2^N items), or why an option is refused.
fn extended_options(options: &[String]) -> Result<Option<usize>, String> {
    let mut initial_keys = None;
    for option in options.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
        let (name, value) = option.split_once('=').unwrap_or((option, ""));
        match name {
            "hashpower" => {
                let power: u32 = value
                    .parse()
                    .ok()
                    .filter(|p| (12..=40).contains(p))
                    .ok_or_else(|| format!("-o hashpower={value}: a number from 12 to 40"))?;
                initial_keys = Some(1usize << power);
            }
            _ => return Err(format!("-o {name}: not supported by floe-server")),
        }
    }
    Ok(initial_keys)
}

/// memcached takes the first character of -D's argument; here it must be one ASCII
/// character (a longer one is a mistake, not a prefix delimiter).
fn parse_delimiter(text: &str) -> Result<u8, String> {
    match text.as_bytes() {
        [byte] if byte.is_ascii() && !byte.is_ascii_whitespace() => Ok(*byte),
        _ => Err(format!("{text:?}: one ASCII character that is not a space")),
    }
}

fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&text[..i], 1 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&text[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    let value: usize = digits
        .parse()
        .map_err(|_| format!("not a size: {text:?}"))?;
    value
        .checked_mul(unit)
        .ok_or_else(|| format!("too large: {text:?}"))
}

/// The socket addresses `-l` names: each entry an IP address (IPv6 with or without
/// brackets) or a host name, resolved to every address it has. Duplicates dropped, in order.
fn listen_addresses(entries: &[String], port: u16) -> Result<Vec<SocketAddr>, String> {
    let mut addresses = Vec::new();
    for entry in entries {
        let entry = entry.trim();
        let bare = entry
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(entry);
        let resolved: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) if bare.is_empty() => return Err("an empty address in -l".into()),
            Err(_) => (bare, port)
                .to_socket_addrs()
                .map_err(|error| format!("cannot resolve {bare:?} (-l): {error}"))?
                .collect(),
        };
        if resolved.is_empty() {
            return Err(format!("{bare:?} has no address (-l)"));
        }
        for address in resolved {
            if !addresses.contains(&address) {
                addresses.push(address);
            }
        }
    }
    Ok(addresses)
}

/// Detach into the background (`daemon(3)`: fork, the parent exits 0, a new session,
/// working directory `/`, standard streams on /dev/null).
fn daemonize() -> std::io::Result<()> {
    // SAFETY: called while the process has one thread (before the cache, the signal
    // handlers and the server start any), so the forked child holds every lock it needs.
    if unsafe { libc::daemon(0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Become `user` (its uid, gid and groups) if running as root; otherwise nothing, as
/// memcached's -u.
fn become_user(user: &str) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let name = CString::new(user).map_err(|_| format!("not a user name: {user:?} (-u)"))?;
    // SAFETY: `passwd` is plain data (integers and pointers), valid zeroed.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut strings = vec![0 as libc::c_char; 1 << 14];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the strings `entry` points to live in
    // `strings`, which outlives every use of `entry` below.
    let status = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut entry,
            strings.as_mut_ptr(),
            strings.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() {
        return Err(format!("no user {user:?} to switch to (-u)"));
    }
    let (uid, gid) = (entry.pw_uid, entry.pw_gid);
    let failed = |what: &str| {
        format!(
            "cannot {what} for {user:?} (-u): {}",
            std::io::Error::last_os_error()
        )
    };
    // Groups, then the group, then the user (after which the first two are not allowed).
    // SAFETY: a valid C string and an integer.
    if unsafe { libc::initgroups(name.as_ptr(), gid) } != 0 {
        return Err(failed("set the groups"));
    }
    // SAFETY: a plain system call on an integer.
    if unsafe { libc::setgid(gid) } != 0 {
        return Err(failed("set the group"));
    }
    // SAFETY: a plain system call on an integer.
    if unsafe { libc::setuid(uid) } != 0 {
        return Err(failed("set the user"));
    }
    Ok(())
}

/// Raise the soft core file limit to the hard one (memcached's -r).
fn raise_core_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to an rlimit for both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_CORE, &limit);
        }
    }
}

/// `path` made absolute against the working directory (before -d moves it to `/`).
fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|error| format!("{}: {error}", path.display()))
}

/// The largest configuration file read: a few flags, not a data file.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The flags a configuration file gives (see `--config`).
fn config_flags(path: &Path) -> Result<Vec<String>, String> {
    let failed = |error: &dyn std::fmt::Display| format!("{} (--config): {error}", path.display());
    // A FIFO or a device would block the start or never end: only a regular file is read.
    let metadata = std::fs::metadata(path).map_err(|e| failed(&e))?;
    if !metadata.is_file() {
        return Err(failed(&"not a regular file"));
    }
    if metadata.len() > MAX_CONFIG_BYTES {
        return Err(failed(&format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| failed(&e))?;
    let mut flags = Vec::new();
    for (number, line) in text.lines().enumerate() {
        // A comment runs from a `#` not escaped by a backslash to the end of the line.
        let bytes = line.as_bytes();
        let comment =
            (0..bytes.len()).find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1] != b'\\'));
        let line = line[..comment.unwrap_or(line.len())].trim();
        if line.is_empty() || line.starts_with("-d") || line.starts_with("-h") {
            continue;
        }
        if !line.starts_with('-') {
            match line.split_whitespace().next() {
                Some("logfile") => continue,
                Some(other) => {
                    return Err(failed(&format!(
                        "line {}: unknown directive {other:?} (flags start with -)",
                        number + 1
                    )))
                }
                None => continue,
            }
        }
        flags.extend(line.split_whitespace().map(str::to_owned));
    }
    Ok(flags)
}

/// The command line with the flags of `--config`'s file (if given) put first.
fn command_line() -> Result<Vec<String>, String> {
    let given: Vec<String> = std::env::args().collect();
    let mut config = None;
    for (i, arg) in given.iter().enumerate().skip(1) {
        if arg == "--" {
            break;
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            config = Some(path.to_owned());
        } else if arg == "--config" {
            config = given.get(i + 1).cloned();
        }
    }
    let Some(config) = config else {
        return Ok(given);
    };
    let mut line = vec![given[0].clone()];
    line.extend(config_flags(Path::new(&config))?);
    line.extend(given.into_iter().skip(1));
    Ok(line)
}

fn main() -> ExitCode {
    let usage = |message: &str| {
        eprintln!("floe-server: {message}");
        ExitCode::from(2)
    };
    let args = match command_line() {
        Ok(line) => Args::parse_from(line),
        Err(message) => return usage(&message),
    };
    if args.man {
        let page = clap_mangen::Man::new(<Args as clap::CommandFactory>::command());
        return match page.render(&mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("floe-server: cannot write the manual page: {error}");
                ExitCode::FAILURE
            }
        };
    }
    if args.license {
        println!(
            "floe-server {}: MIT OR Apache-2.0",
            env!("CARGO_PKG_VERSION")
        );
        return ExitCode::SUCCESS;
    }
    if let Some(why) = args.refused.reason() {
        return usage(why);
    }
    if args.protocol != "auto" {
        return usage(&format!(
            "-B {}: only auto: each connection's first byte says which protocol it speaks",
            args.protocol
        ));
    }
    let initial_keys = match extended_options(&args.extended) {
        Ok(keys) => keys.unwrap_or(1 << 16),
        Err(message) => return usage(&message),
    };
    if args.udp_port != 0 {
        return usage("UDP is not supported (-U 0 is the only accepted value)");
    }
    let memory_limit = (args.memory_mb as usize) << 20;
    if args.max_item_size < 1024 {
        return usage("item max size cannot be less than 1024 bytes (-I)");
    }
    if args.max_item_size > 1 << 30 {
        return usage("cannot set item size limit higher than 1 gigabyte (-I)");
    }
    if args.max_item_size > memory_limit / 2 {
        return usage("cannot set item size limit higher than 1/2 of memory max (-I, -m)");
    }
    if args.max_connections == 0 {
        return usage("the connection limit must be at least 1 (-c)");
    }
    let listen = match listen_addresses(&args.listen, args.port) {
        Ok(listen) => listen,
        Err(message) => return usage(&message),
    };
    let (persist, pidfile) = match (
        args.persist.as_deref().map(absolute).transpose(),
        args.pidfile.as_deref().map(absolute).transpose(),
    ) {
        (Ok(persist), Ok(pidfile)) => (persist, pidfile),
        (Err(message), _) | (_, Err(message)) => return usage(&message),
    };
    if args.daemon {
        if let Err(error) = daemonize() {
            eprintln!("floe-server: cannot run in the background (-d): {error}");
            return ExitCode::FAILURE;
        }
    }
    if let Some(user) = &args.user {
        if let Err(message) = become_user(user) {
            return usage(&message);
        }
    }
    if args.coredumps {
        raise_core_limit();
    }
    if args.lock_memory {
        // SAFETY: mlockall takes flags only.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            eprintln!(
                "floe-server: warning: -k failed to lock down all paged memory: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    // -L, -X, -W: what they ask for holds already (each flag's doc says why).
    let _ = (args.large_pages, args.disable_watch);
    if args.disable_dumping {
        floe_server::crawler::disable_dumping();
    }
    if let Some(delimiter) = args.delimiter {
        floe_server::detail::set_delimiter(delimiter);
        floe_server::detail::set_enabled(true);
    }
    log::init();
    log::set_verbosity(args.verbose);
    floe_server::text::set_lenient_keys(args.lenient_keys);
    let settings = Settings {
        memory_limit,
        evict: !args.no_evictions,
        max_item_size: args.max_item_size,
        workers: args.threads as usize,
        initial_keys,
    };
    let opened = match &persist {
        None => Cache::new(settings).map(Arc::new).map_err(OpenError::Map),
        Some(dir) => {
            let options = StoreOptions {
                compact_bytes: args.persist_compact << 20,
                repair: args.persist_repair,
            };
            Cache::open(settings, dir, options).map(|(cache, replayed)| {
                log!(
                    1,
                    "restoring {} items from {} ({} records in {} files, {} bytes; {} torn bytes dropped; read in {:.3} s)",
                    replayed.items,
                    dir.display(),
                    replayed.records,
                    replayed.files,
                    replayed.bytes,
                    replayed.torn_bytes,
                    replayed.read_seconds
                );
                cache
            })
        }
    };
    let cache = match opened {
        Ok(cache) => cache,
        // A directory that is foreign, damaged or held by another server is bad input.
        Err(error @ OpenError::Store(_)) => return usage(&error.to_string()),
        Err(error) => {
            eprintln!("floe-server: {error}");
            return ExitCode::FAILURE;
        }
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(error) = signal_hook::flag::register(signal, Arc::clone(&shutdown)) {
            eprintln!("floe-server: cannot handle signal {signal}: {error}");
            return ExitCode::FAILURE;
        }
    }
    let config = Config {
        listen,
        backlog: args.backlog,
        max_connections: args.max_connections,
        housekeeping: true,
        sync_ms: args.persist_sync,
    };
    let mut server = match Server::start(Arc::clone(&cache), &config, Arc::clone(&shutdown)) {
        Ok(server) => server,
        Err(error) => {
            let addresses: Vec<String> = config.listen.iter().map(|a| a.to_string()).collect();
            eprintln!(
                "floe-server: cannot listen on {}: {error}",
                addresses.join(" and ")
            );
            return ExitCode::FAILURE;
        }
    };
    let addresses: Vec<String> = server.addresses().iter().map(|a| a.to_string()).collect();
    log!(
        1,
        "listening on {} with {} threads",
        addresses.join(" and "),
        args.threads
    );
    // As memcached: a pid file that cannot be written is reported and the server runs on (a
    // missing /run/memcached must not take the cache down); one it wrote is removed at a clean
    // stop.
    let pidfile = pidfile.filter(|path| match write_pid_file(path) {
        Ok(()) => true,
        Err(error) => {
            eprintln!(
                "floe-server: could not write the pid file {} (-P): {error}; running without it",
                path.display()
            );
            false
        }
    });
    while !shutdown.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    log!(1, "shutting down");
    server.join();
    // A clean stop leaves one snapshot, the quickest to restore.
    checkpoint(&cache);
    if let Some(path) = &pidfile {
        let _ = std::fs::remove_file(path);
    }
    ExitCode::SUCCESS
}

/// Write this process's pid to `path` as memcached does: into `path.tmp`, then renamed over
/// `path` (a reader never sees a half-written file), after a warning if `path` names a process
/// that is still running (another server started with the same `-P`).
fn write_pid_file(path: &std::path::Path) -> std::io::Result<()> {
    if let Some(old) = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok())
    {
        // SAFETY: kill with signal 0 sends nothing; it only asks whether the pid exists.
        if old > 0 && old != std::process::id() as i32 && unsafe { libc::kill(old, 0) } == 0 {
            eprintln!(
                "floe-server: WARNING: the pid file contained the following (running) pid: {old}"
            );
        }
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    std::fs::write(&temporary, format!("{}\n", std::process::id()))?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}
