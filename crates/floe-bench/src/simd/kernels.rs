//! Lookup kernels: a runnable lookup (`Kernel`), the scalar one (`scalar.rs`, the oracle every
//! vector kernel is tested against) or a vector one (`x86.rs`), chosen once per design.
//!
//! Every kernel answers a whole stream: `out[i]` is the payload of the first slot, in probe
//! order (way 0's bucket slot 0, 1, .., then way 1's bucket, ...), whose key equals query `i`,
//! or 0 when no slot does; the return value counts the queries that matched. Scalar and vector
//! kernels walk the same probe order, so their answers are equal even where a table holds a
//! 16-bit fingerprint twice.

use super::{
    layout::Sizes,
    scalar::{scalar_for, KernelFn},
    table::{Queries, Table},
    validate::{Approach, Design},
};

use super::scalar::Probe;

/// A runnable lookup: scalar, or a vector design this CPU supports.
#[derive(Clone, Copy)]
pub struct Kernel {
    /// `None` for the scalar lookup.
    pub design: Option<Design>,
    run: KernelFn,
}

impl Kernel {
    pub fn scalar(sizes: Sizes) -> Kernel {
        let run = match sizes.key_bits {
            16 => scalar_for::<u16>(sizes.payload_bits),
            32 => scalar_for::<u32>(sizes.payload_bits),
            _ => scalar_for::<u64>(sizes.payload_bits),
        };
        Kernel { design: None, run }
    }

    /// The kernel of `design` (which the validation engine produced for `sizes`).
    pub fn vector(design: Design, sizes: Sizes) -> Result<Kernel, String> {
        if !design.width.is_supported() {
            return Err(format!(
                "this CPU does not run {}-bit ({}) kernels",
                design.width.bits(),
                design.width.isa()
            ));
        }
        let run = match design.approach {
            Approach::Horizontal => {
                let sub_bits = design.width.bits() / design.per_vector as u32;
                super::x86::horizontal(design.width, sizes.key_bits, sub_bits)
            }
            Approach::Vertical | Approach::Hybrid => {
                super::x86::vertical(design.width, sizes.key_bits)
            }
        }
        .ok_or_else(|| format!("no kernel for {design:?} with {sizes} keys and payloads"))?;
        Ok(Kernel {
            design: Some(design),
            run,
        })
    }

    /// Answer every query of `queries` into `out` (module docs); returns the hits.
    pub fn run(&self, table: &Table, queries: &Queries, out: &mut [u64]) -> u64 {
        assert_eq!(out.len(), queries.len(), "one answer per query");
        assert_eq!(queries.narrow.len(), queries.len());
        let probe = Probe::new(table);
        // SAFETY: `vector` checked that this CPU has the kernel's instructions; the probe
        // covers the live table and its tail padding; `out` matches the queries.
        unsafe { (self.run)(&probe, queries, out) }
    }

    /// "scalar", "horizontal 256", "vertical 512"...
    pub fn name(&self) -> String {
        match self.design {
            None => "scalar".into(),
            Some(d) => format!("{} {}", approach_name(d.approach), d.width.bits()),
        }
    }
}

pub fn approach_name(a: Approach) -> &'static str {
    match a {
        Approach::Horizontal => "horizontal",
        Approach::Vertical => "vertical",
        Approach::Hybrid => "hybrid",
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::simd::{
        layout::{key_of, payload_of, Geometry, Layout, Width},
        table::{queries, Pattern},
        validate::designs,
    };

    const ALL_APPROACHES: [Approach; 3] =
        [Approach::Horizontal, Approach::Vertical, Approach::Hybrid];

    fn sizes(key_bits: u32, payload_bits: u32) -> Sizes {
        Sizes {
            key_bits,
            payload_bits,
        }
    }

    #[test]
    fn scalar_finds_every_inserted_key_and_no_other() {
        for (layout, s) in [
            ("3x1", sizes(32, 32)),
            ("2x4", sizes(64, 16)),
            ("2x2", sizes(32, 64)),
        ] {
            let g = Geometry::new(layout.parse().unwrap(), s, 32 << 10).unwrap();
            let table = Table::build(g, 0.85).unwrap();
            let n = table.items as u64;
            let wide: Vec<u64> = (0..n + 1000).map(|i| key_of(s, i)).collect();
            let q = Queries::new(wide);
            let mut out = vec![0; q.len()];
            let hits = Kernel::scalar(s).run(&table, &q, &mut out);
            assert_eq!(hits, n);
            for i in 0..n {
                assert_eq!(out[i as usize], payload_of(s, i));
            }
            assert!(out[n as usize..].iter().all(|&v| v == 0));
        }
    }

    /// Every viable design of the layout, run against the scalar oracle on the same queries;
    /// returns how many designs ran.
    fn check_all_designs(
        layout: Layout,
        s: Sizes,
        bytes: u64,
        lf: f64,
        hit: f64,
        len: usize,
        seed: u64,
    ) -> usize {
        let g = Geometry::new(layout, s, bytes).unwrap();
        let table = Table::build(g, lf).unwrap();
        let pattern = if seed.is_multiple_of(2) {
            Pattern::Uniform
        } else {
            Pattern::Mutilate
        };
        let q = queries(&table, pattern, hit, 1, len, seed).remove(0);
        let mut expected = vec![0; len];
        let want = Kernel::scalar(s).run(&table, &q, &mut expected);
        let (viable, _) = designs(layout, s, &Width::detected(), &ALL_APPROACHES);
        let count = viable.len();
        for design in viable {
            let kernel = Kernel::vector(design, s).unwrap();
            let mut got = vec![u64::MAX; len];
            let hits = kernel.run(&table, &q, &mut got);
            for i in 0..len {
                assert_eq!(
                    got[i], expected[i],
                    "{layout} {s} {design:?}: query {i} (key {:#x})",
                    q.wide[i]
                );
            }
            assert_eq!(hits, want, "{layout} {s} {design:?}");
        }
        count
    }

    #[test]
    fn every_vector_kernel_answers_like_scalar_on_many_layouts() {
        let mut ran = 0;
        for layout in [
            "2x1", "3x1", "4x1", "2x2", "2x4", "2x8", "3x2", "3x4", "3x8", "4x2", "4x4",
        ] {
            for (k, v) in [(32, 32), (16, 32), (64, 64), (16, 16), (64, 16), (32, 64)] {
                let layout = layout.parse().unwrap();
                ran += check_all_designs(layout, sizes(k, v), 64 << 10, 0.9, 0.9, 1000, 3);
            }
        }
        // Every kernel of every width this CPU has ran somewhere above.
        let widths = Width::detected();
        if widths.contains(&Width::W512) && widths.contains(&Width::W256) {
            assert!(ran > 100, "only {ran} designs ran");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn vector_kernels_equal_scalar(
            ways in 2usize..=4,
            slots in prop::sample::select(vec![1usize, 2, 4, 8]),
            key_bits in prop::sample::select(vec![16u32, 32, 64]),
            payload_bits in prop::sample::select(vec![16u32, 32, 64]),
            kib in 4u64..96,
            lf in 0.05f64..0.97,
            hit in 0.0f64..=1.0,
            len in 0usize..300,
            seed in any::<u64>(),
        ) {
            let _ = check_all_designs(
                Layout { ways, slots },
                sizes(key_bits, payload_bits),
                kib << 10,
                lf,
                hit,
                len,
                seed,
            );
        }
    }
}
