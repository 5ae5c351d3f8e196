//! Key popularity: which of `n` keys an operation touches.
//!
//! `uniform` draws every key with the same probability. `zipf:THETA` draws key rank `r` (1-based)
//! with probability proportional to `1 / r^THETA`, for any THETA in [0, 1.5) (0 is uniform;
//! YCSB's default skew is 0.99), using rand_distr's rejection-inversion sampler, which costs O(1)
//! per draw for every n and THETA. `hot:KEYS:PERCENT` is DLHT's hot set: the first KEYS keys
//! receive PERCENT% of the accesses, the others share the rest uniformly.
//!
//! Ranks are indexes into the workload's key array, whose keys are already pseudo-random, so the
//! popular keys are spread over the whole table. Draws are made before timing, into per-thread
//! arrays.

use std::{fmt, str::FromStr};

use rand::{rngs::SmallRng, Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};

/// A key popularity distribution, as given on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Dist {
    Uniform,
    Zipf { theta: f64 },
    Hot { keys: u64, percent: f64 },
}

impl FromStr for Dist {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let usage = "expected uniform, zipf:THETA (0 <= THETA < 1.5) or hot:KEYS:PERCENT";
        let mut parts = text.trim().split(':');
        let dist = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("uniform"), None, None, None) => Dist::Uniform,
            (Some("zipf"), Some(theta), None, None) => {
                let theta: f64 = theta
                    .parse()
                    .map_err(|_| format!("'{text}': THETA is not a number ({usage})"))?;
                if !(0.0..1.5).contains(&theta) {
                    return Err(format!("'{text}': THETA must be in [0, 1.5)"));
                }
                Dist::Zipf { theta }
            }
            (Some("hot"), Some(keys), Some(percent), None) => {
                let keys = crate::keys::parse_count(keys)
                    .map_err(|e| format!("'{text}': hot KEYS: {e}"))?;
                let percent: f64 = percent
                    .parse()
                    .map_err(|_| format!("'{text}': PERCENT is not a number ({usage})"))?;
                if keys == 0 {
                    return Err(format!("'{text}': the hot set needs at least one key"));
                }
                if !(0.0..=100.0).contains(&percent) {
                    return Err(format!("'{text}': PERCENT must be in [0, 100]"));
                }
                Dist::Hot { keys, percent }
            }
            _ => return Err(format!("'{text}': unknown distribution ({usage})")),
        };
        Ok(dist)
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dist::Uniform => write!(f, "uniform"),
            Dist::Zipf { theta } => write!(f, "zipf:{theta}"),
            Dist::Hot { keys, percent } => write!(f, "hot:{keys}:{percent}"),
        }
    }
}

impl From<Dist> for String {
    fn from(dist: Dist) -> String {
        dist.to_string()
    }
}

impl TryFrom<String> for Dist {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl Dist {
    /// Check the distribution against a key count (a hot set must be smaller than the keys).
    pub fn check(&self, n: u64) -> Result<(), String> {
        match *self {
            Dist::Hot { keys, .. } if keys >= n => Err(format!(
                "the hot set ({keys} keys) must be smaller than the keys drawn from ({n})"
            )),
            _ => Ok(()),
        }
    }

    /// A sampler of indexes in `0..n`, seeded.
    pub fn sampler(&self, n: u64, seed: u64) -> Sampler {
        assert!(n > 0, "sampling from no keys");
        let kind = match *self {
            Dist::Uniform => SamplerKind::Uniform,
            Dist::Zipf { theta: 0.0 } => SamplerKind::Uniform,
            Dist::Zipf { theta } => SamplerKind::Zipf(
                Zipf::new(n as f64, theta).expect("n >= 1 and theta >= 0 were checked"),
            ),
            Dist::Hot { keys, percent } => SamplerKind::Hot {
                keys: keys.min(n),
                probability: percent / 100.0,
            },
        };
        Sampler {
            n,
            kind,
            rng: SmallRng::seed_from_u64(seed),
        }
    }
}

enum SamplerKind {
    Uniform,
    Zipf(Zipf<f64>),
    Hot { keys: u64, probability: f64 },
}

/// Draws indexes in `0..n` from a [`Dist`].
pub struct Sampler {
    n: u64,
    kind: SamplerKind,
    rng: SmallRng,
}

impl Sampler {
    pub fn next_index(&mut self) -> u64 {
        match &self.kind {
            SamplerKind::Uniform => self.rng.random_range(0..self.n),
            // Ranks are 1..=n as floats; rank 1 is index 0.
            SamplerKind::Zipf(zipf) => (zipf.sample(&mut self.rng) as u64 - 1).min(self.n - 1),
            SamplerKind::Hot { keys, probability } => {
                if *keys == self.n || self.rng.random_bool(*probability) {
                    self.rng.random_range(0..*keys)
                } else {
                    self.rng.random_range(*keys..self.n)
                }
            }
        }
    }

    /// Uniform in `0..n` regardless of the distribution (for choices that are not key picks).
    pub fn uniform_below(&mut self, n: u64) -> u64 {
        self.rng.random_range(0..n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for (text, dist) in [
            ("uniform", Dist::Uniform),
            ("zipf:0.99", Dist::Zipf { theta: 0.99 }),
            ("zipf:0", Dist::Zipf { theta: 0.0 }),
            (
                "hot:1K:90",
                Dist::Hot {
                    keys: 1024,
                    percent: 90.0,
                },
            ),
        ] {
            assert_eq!(text.parse::<Dist>(), Ok(dist));
            assert_eq!(dist.to_string().parse::<Dist>(), Ok(dist));
        }
        for bad in [
            "",
            "zipf",
            "zipf:",
            "zipf:1.5",
            "zipf:-0.1",
            "zipf:x",
            "hot:10",
            "hot:0:50",
            "hot:10:101",
            "hot:10:x",
            "gauss",
            "uniform:1",
        ] {
            let err = bad.parse::<Dist>().expect_err(bad);
            assert!(err.contains(bad.trim()) || bad.is_empty(), "{err}");
        }
        assert!(Dist::Hot {
            keys: 10,
            percent: 50.0
        }
        .check(10)
        .is_err());
    }

    /// The empirical frequency of the top ranks matches 1/r^theta normalized by the generalized
    /// harmonic number, within a few standard deviations.
    #[test]
    fn zipf_frequencies_follow_the_law() {
        for theta in [0.5, 0.99, 1.2] {
            let n = 1000u64;
            let draws = 400_000;
            let mut counts = vec![0u64; n as usize];
            let mut sampler = Dist::Zipf { theta }.sampler(n, 42);
            for _ in 0..draws {
                counts[sampler.next_index() as usize] += 1;
            }
            let harmonic: f64 = (1..=n).map(|r| (r as f64).powf(-theta)).sum();
            for rank in [1u64, 2, 3, 10, 100] {
                let p = (rank as f64).powf(-theta) / harmonic;
                let expected = p * draws as f64;
                let sd = (draws as f64 * p * (1.0 - p)).sqrt();
                let got = counts[rank as usize - 1] as f64;
                assert!(
                    (got - expected).abs() < 5.0 * sd + 1.0,
                    "theta {theta} rank {rank}: {got} draws, expected {expected:.0} ± {sd:.0}"
                );
            }
            // Monotone on average: the first decile outweighs the last by the law's ratio.
            let head: u64 = counts[..100].iter().sum();
            let tail: u64 = counts[900..].iter().sum();
            assert!(head > tail * 3, "theta {theta}: head {head} tail {tail}");
        }
    }

    #[test]
    fn zipf_zero_is_uniform_and_indexes_stay_in_range() {
        let mut sampler = Dist::Zipf { theta: 0.0 }.sampler(10, 1);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[sampler.next_index() as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
        let mut sampler = Dist::Zipf { theta: 1.4 }.sampler(3, 1);
        assert!((0..10_000).all(|_| sampler.next_index() < 3));
    }

    #[test]
    fn hot_set_gets_its_share() {
        let n = 100_000;
        let mut sampler = Dist::Hot {
            keys: 100,
            percent: 90.0,
        }
        .sampler(n, 7);
        let draws = 200_000;
        let hot = (0..draws).filter(|_| sampler.next_index() < 100).count();
        let share = hot as f64 / draws as f64;
        // 90% to the hot set exactly; the cold part never lands in the hot set.
        assert!((share - 0.90).abs() < 0.005, "hot share {share}");
    }
}
