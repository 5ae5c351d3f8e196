//! The validation engine (SimdHT-Bench §IV-B, Algorithms 1 and 2): which vectorized designs a
//! layout, its key and payload sizes and this CPU's vector widths allow, and why the others are
//! refused.
//!
//! * **Horizontal** (over a BCHT, m > 1; Algorithm 1's `HorV-Valid`): a vector of width w holds
//!   whole buckets, keys and payloads (`m × (K + V) ≤ w`); it takes as many of the key's N
//!   buckets as fit, rounded down to a power of two, and a width that holds no more buckets
//!   than a narrower one is not listed (its extra lanes would be empty). On an N-way table
//!   (m = 1) horizontal matching is the scalar lookup, so it is not listed.
//! * **Vertical** (over an N-way table; Algorithm 2's `VerV-Valid`): one key per lane, buckets
//!   fetched with gathers, which x86 has from AVX2 on (so not at 128 bits) and for 32- and
//!   64-bit lanes only: keys per iteration are `w / max(K, 32)` (the paper's `w / K` for 32-
//!   and 64-bit keys; 16-bit keys ride in 32-bit lanes).
//! * **Hybrid** (§V-F): the vertical kernel over a BCHT, gathering slot after slot of each
//!   bucket for the lanes still unmatched. Listed when asked for.
//!
//! These rules reproduce the paper's Listing 1 exactly for (K, V) = (32, 32); the test below
//! checks it.

use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

use super::layout::{Layout, Sizes, Width};

/// How a design uses the vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approach {
    Horizontal,
    Vertical,
    Hybrid,
}

impl Approach {
    /// The paper's tag.
    pub fn tag(self) -> &'static str {
        match self {
            Approach::Horizontal => "V-Hor",
            Approach::Vertical => "V-Ver",
            Approach::Hybrid => "V-Ver (hybrid)",
        }
    }
}

impl std::str::FromStr for Approach {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "horizontal" | "hor" => Ok(Approach::Horizontal),
            "vertical" | "ver" => Ok(Approach::Vertical),
            "hybrid" => Ok(Approach::Hybrid),
            _ => Err(format!(
                "'{text}': approaches are horizontal, vertical and hybrid"
            )),
        }
    }
}

/// One viable vectorized design.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Design {
    pub approach: Approach,
    pub width: Width,
    /// Buckets per vector (horizontal) or keys per iteration (vertical, hybrid).
    pub per_vector: usize,
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.approach {
            Approach::Horizontal => write!(
                f,
                "{} bit - {} bucket/vec",
                self.width.bits(),
                self.per_vector
            ),
            _ => write!(f, "{} bit - {} keys/it", self.width.bits(), self.per_vector),
        }
    }
}

/// A design the engine refused, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub approach: Approach,
    pub width: Width,
    pub reason: String,
}

/// The horizontal verdict for one width (`previous`: buckets per vector of the next narrower
/// viable width).
fn horizontal(
    layout: Layout,
    sizes: Sizes,
    width: Width,
    previous: usize,
) -> Result<usize, String> {
    if !layout.is_bucketized() {
        return Err("m = 1: horizontal matching of a 1-slot bucket is the scalar lookup".into());
    }
    let bucket_bits = layout.slots as u32 * (sizes.key_bits + sizes.payload_bits);
    if bucket_bits > width.bits() {
        return Err(format!(
            "a bucket ({bucket_bits} bits: {} x ({}+{})) does not fit in {} bits",
            layout.slots,
            sizes.key_bits,
            sizes.payload_bits,
            width.bits()
        ));
    }
    let fit = ((width.bits() / bucket_bits) as usize).min(layout.ways);
    let buckets = 1 << fit.ilog2();
    if buckets <= previous {
        return Err(format!(
            "holds no more of the key's {} buckets than a narrower vector ({buckets})",
            layout.ways
        ));
    }
    Ok(buckets)
}

/// The vertical (or hybrid) verdict for one width.
fn vertical(
    layout: Layout,
    sizes: Sizes,
    width: Width,
    approach: Approach,
) -> Result<usize, String> {
    match approach {
        Approach::Vertical if layout.is_bucketized() => {
            return Err(
                "m > 1: vertical over a BCHT is the hybrid design (--approach hybrid)".into(),
            )
        }
        Approach::Hybrid if !layout.is_bucketized() => {
            return Err("m = 1: the hybrid design is plain vertical on an N-way table".into())
        }
        _ => {}
    }
    if width == Width::W128 {
        return Err("vertical designs gather, and x86 gathers start with AVX2 (256 bits)".into());
    }
    if width.bits() <= sizes.key_bits + sizes.payload_bits {
        return Err(format!(
            "a {}-bit vector is not wider than one key and payload",
            width.bits()
        ));
    }
    Ok((width.bits() / sizes.vertical_lane_bits()) as usize)
}

/// Every design of `approaches` over `layout` at `widths` (narrowest first): the viable ones
/// and the refusals with their reasons.
pub fn designs(
    layout: Layout,
    sizes: Sizes,
    widths: &[Width],
    approaches: &[Approach],
) -> (Vec<Design>, Vec<Refusal>) {
    let mut viable = Vec::new();
    let mut refused = Vec::new();
    for &approach in approaches {
        let mut previous = 0;
        for &width in widths {
            let verdict = match approach {
                Approach::Horizontal => horizontal(layout, sizes, width, previous),
                _ => vertical(layout, sizes, width, approach),
            };
            match verdict {
                Ok(per_vector) => {
                    previous = per_vector;
                    viable.push(Design {
                        approach,
                        width,
                        per_vector,
                    });
                }
                Err(reason) => refused.push(Refusal {
                    approach,
                    width,
                    reason,
                }),
            }
        }
    }
    (viable, refused)
}

/// The listing in the paper's form (Listing 1): one line per layout with its viable designs.
/// A layout with none gets the reasons instead.
pub fn listing(
    sizes: Sizes,
    layouts: &[Layout],
    widths: &[Width],
    approaches: &[Approach],
) -> String {
    let mut out = String::new();
    let list: Vec<String> = widths.iter().map(|w| w.bits().to_string()).collect();
    let _ = writeln!(
        out,
        "*(k,v) = ({}, {}); 'w' = {}",
        sizes.key_bits,
        sizes.payload_bits,
        list.join(", ")
    );
    for &layout in layouts {
        let (viable, refused) = designs(layout, sizes, widths, approaches);
        let _ = write!(out, "*{layout} ->");
        if viable.is_empty() {
            // The widest width's reason per approach says the most.
            let reasons: Vec<String> = approaches
                .iter()
                .filter_map(|a| refused.iter().rev().find(|r| r.approach == *a))
                .map(|r| r.reason.clone())
                .collect();
            let _ = writeln!(out, " none: {}", reasons.join("; "));
            continue;
        }
        let mut approach = None;
        for d in &viable {
            if approach != Some(d.approach) {
                let sep = if approach.is_some() { ";" } else { "" };
                let _ = write!(out, "{sep} {}", d.approach.tag());
                approach = Some(d.approach);
                let _ = write!(out, ", Opts: {d}");
            } else {
                let _ = write!(out, ", Opts: {d}");
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layouts(text: &str) -> Vec<Layout> {
        text.split_whitespace()
            .map(|l| l.parse().unwrap())
            .collect()
    }

    const STANDARD: [Approach; 2] = [Approach::Horizontal, Approach::Vertical];

    #[test]
    fn reproduces_the_papers_listing_1() {
        let text = listing(
            "32,32".parse().unwrap(),
            &layouts("2x1 3x1 4x1 2x2 2x4 2x8 3x2 3x4 3x8"),
            &Width::ALL,
            &STANDARD,
        );
        let expected = "\
*(k,v) = (32, 32); 'w' = 128, 256, 512
*(2,1) -> V-Ver, Opts: 256 bit - 8 keys/it, Opts: 512 bit - 16 keys/it
*(3,1) -> V-Ver, Opts: 256 bit - 8 keys/it, Opts: 512 bit - 16 keys/it
*(4,1) -> V-Ver, Opts: 256 bit - 8 keys/it, Opts: 512 bit - 16 keys/it
*(2,2) -> V-Hor, Opts: 128 bit - 1 bucket/vec, Opts: 256 bit - 2 bucket/vec
*(2,4) -> V-Hor, Opts: 256 bit - 1 bucket/vec, Opts: 512 bit - 2 bucket/vec
*(2,8) -> V-Hor, Opts: 512 bit - 1 bucket/vec
*(3,2) -> V-Hor, Opts: 128 bit - 1 bucket/vec, Opts: 256 bit - 2 bucket/vec
*(3,4) -> V-Hor, Opts: 256 bit - 1 bucket/vec, Opts: 512 bit - 2 bucket/vec
*(3,8) -> V-Hor, Opts: 512 bit - 1 bucket/vec
";
        assert_eq!(text, expected);
    }

    #[test]
    fn other_sizes_and_cpus() {
        let avx2_only = [Width::W128, Width::W256];
        // 64-bit keys: 4 keys per AVX2 gather, 8 per AVX-512; a (2,8) bucket of 1024 bits
        // fits nowhere.
        let text = listing(
            "64,64".parse().unwrap(),
            &layouts("3x1 2x8 2x2"),
            &Width::ALL,
            &STANDARD,
        );
        assert!(
            text.contains("*(3,1) -> V-Ver, Opts: 256 bit - 4 keys/it, Opts: 512 bit - 8 keys/it")
        );
        assert!(text.contains(
            "*(2,8) -> none: a bucket (1024 bits: 8 x (64+64)) does not fit in 512 bits; \
             m > 1: vertical over a BCHT is the hybrid design (--approach hybrid)\n"
        ));
        assert!(text.contains(
            "*(2,2) -> V-Hor, Opts: 256 bit - 1 bucket/vec, Opts: 512 bit - 2 bucket/vec"
        ));
        // 16-bit keys ride in 32-bit lanes; a (2,8) bucket of (16,32) is 384 bits.
        let (viable, _) = designs(
            "2x8".parse().unwrap(),
            "16,32".parse().unwrap(),
            &Width::ALL,
            &STANDARD,
        );
        assert_eq!(
            viable,
            vec![Design {
                approach: Approach::Horizontal,
                width: Width::W512,
                per_vector: 1
            }]
        );
        let (viable, _) = designs(
            "3x1".parse().unwrap(),
            "16,16".parse().unwrap(),
            &avx2_only,
            &STANDARD,
        );
        assert_eq!(viable.len(), 1);
        assert_eq!(viable[0].per_vector, 8);
        // Four 64-bit buckets per 256-bit vector when N = 4.
        let (viable, _) = designs(
            "4x2".parse().unwrap(),
            "16,16".parse().unwrap(),
            &Width::ALL,
            &STANDARD,
        );
        let per: Vec<usize> = viable.iter().map(|d| d.per_vector).collect();
        assert_eq!(per, vec![2, 4]);
        // No gathers without AVX2.
        let (viable, refused) = designs(
            "3x1".parse().unwrap(),
            "32,32".parse().unwrap(),
            &[Width::W128],
            &STANDARD,
        );
        assert!(viable.is_empty());
        assert!(refused.iter().any(|r| r.reason.contains("AVX2")));
    }

    #[test]
    fn hybrid_is_vertical_over_buckets() {
        let (viable, refused) = designs(
            "2x2".parse().unwrap(),
            "32,32".parse().unwrap(),
            &Width::ALL,
            &[Approach::Hybrid, Approach::Vertical],
        );
        assert_eq!(viable.len(), 2);
        assert!(viable.iter().all(|d| d.approach == Approach::Hybrid));
        assert!(refused
            .iter()
            .any(|r| r.approach == Approach::Vertical && r.reason.contains("hybrid")));
        let text = listing(
            "32,32".parse().unwrap(),
            &layouts("2x2"),
            &Width::ALL,
            &[Approach::Horizontal, Approach::Hybrid],
        );
        assert_eq!(
            text.lines().nth(1).unwrap(),
            "*(2,2) -> V-Hor, Opts: 128 bit - 1 bucket/vec, Opts: 256 bit - 2 bucket/vec; \
             V-Ver (hybrid), Opts: 256 bit - 8 keys/it, Opts: 512 bit - 16 keys/it"
        );
    }
}
