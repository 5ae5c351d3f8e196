//! Facts about the machine a run measured on, for every report and memory figure.

use serde::{Deserialize, Serialize};

/// What the report says about the machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub l1d: String,
    pub l2: String,
    pub l3: String,
    pub thp: String,
    pub kernel: String,
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "machine: {}; {} cores; L1d {} L2 {} L3 {}; THP {}; kernel {}",
            self.cpu, self.cores, self.l1d, self.l2, self.l3, self.thp, self.kernel
        )
    }
}

/// CPU model, cores, caches, THP state and kernel, for the record.
pub fn machine() -> Machine {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    };
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cache = |index: u32| {
        read(&format!(
            "/sys/devices/system/cpu/cpu0/cache/index{index}/size"
        ))
    };
    Machine {
        cpu,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        l1d: cache(0),
        l2: cache(2),
        l3: cache(3),
        thp: read("/sys/kernel/mm/transparent_hugepage/enabled"),
        kernel: read("/proc/sys/kernel/osrelease"),
    }
}

/// Resident set size of this process in bytes (Linux), for memory per key of maps that do not
/// report their table size.
pub fn rss_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident * 4096)
}
