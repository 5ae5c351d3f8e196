//! Key generation (done before any timing) and count parsing.

/// Parse a count: `33554432`, `2^25`, `32M`, `64K`, `1G` (binary multiples).
pub fn parse_count(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("'{text}' is not a count (examples: 1000000, 2^26, 64M, 512K, 1G)");
    if let Some((base, exp)) = t.split_once('^') {
        let base: u64 = base.trim().parse().map_err(|_| bad())?;
        let exp: u32 = exp.trim().parse().map_err(|_| bad())?;
        return base.checked_pow(exp).ok_or_else(bad);
    }
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// `33554432` as `2^25`, `50331648` as `48M`, else the number.
pub fn pretty_count(n: u64) -> String {
    if n.is_power_of_two() {
        format!("2^{}", n.trailing_zeros())
    } else if n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else {
        n.to_string()
    }
}

/// SplitMix64's finalizer: a bijection on u64, so distinct inputs give distinct keys.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small fast generator for per-thread index streams.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in `0..n` (fastrange).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse() {
        assert_eq!(parse_count("2^26"), Ok(1 << 26));
        assert_eq!(parse_count("64M"), Ok(64 << 20));
        assert_eq!(parse_count("512k"), Ok(512 << 10));
        assert_eq!(parse_count("1G"), Ok(1 << 30));
        assert_eq!(parse_count(" 1000 "), Ok(1000));
        for bad in [
            "",
            "M",
            "2^",
            "x",
            "2^99",
            "-5",
            "1.5M",
            "99999999999999999999G",
        ] {
            assert!(parse_count(bad).is_err(), "{bad}");
        }
        assert_eq!(pretty_count(1 << 25), "2^25");
        assert_eq!(pretty_count(48 << 20), "48M");
    }
}
