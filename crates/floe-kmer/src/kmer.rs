//! K-mers as 2-bit codes packed into a `u64` (k <= 32) or a `u128` (k <= 64), and their
//! rolling extraction from a sequence.
//!
//! A base is two bits: A = 0, C = 1, G = 2, T = 3. A k-mer of k bases is the number whose
//! base-4 digits are its bases, first base most significant: `ACGT` is `0b00_01_10_11` = 27.
//! Because A < C < G < T both as letters and as codes, sorting k-mers as numbers sorts them as
//! strings, which is how the dump is ordered without decoding anything. The complement of a
//! base is `3 - code` = `code ^ 0b11` (A <-> T, C <-> G), so complementing a k-mer is a XOR.
//!
//! The parser ([`crate::parse`]) translates text to codes through [`CODES`] as it copies a
//! sequence; [`Kmers`] then rolls over the codes, and every code that is not a base (N, IUPAC
//! ambiguity codes, `-`, `.`, the gap the parser puts between records) ends the current run of
//! bases, so no k-mer spans it, as jellyfish does.

/// The code of a byte that is not a base but may stand in a sequence (N, IUPAC codes, gaps,
/// punctuation): it ends the run of bases, and the parser also puts one between records.
pub const BREAK: u8 = 4;

/// The code of a byte that cannot stand in a sequence line at all (control characters other
/// than tab, bytes >= 0x7f): the input is binary or corrupt, and the parser reports it.
pub const INVALID: u8 = 5;

/// Every byte's code: `ACGT` and `acgt` are 0 to 3, other printable ASCII (with space and tab)
/// is [`BREAK`], the rest [`INVALID`].
pub static CODES: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut byte = 0x20;
    while byte < 0x7f {
        table[byte] = BREAK;
        byte += 1;
    }
    table[b'\t' as usize] = BREAK;
    let bases = *b"ACGT";
    let mut code = 0;
    while code < 4 {
        table[bases[code] as usize] = code as u8;
        table[bases[code].to_ascii_lowercase() as usize] = code as u8;
        code += 1;
    }
    table
};

/// The largest k floe-kmer counts: a `u128` holds 64 bases.
pub const MAX_K: usize = 64;

/// The integer a k-mer is packed in: `u64` for k up to 32, `u128` up to 64. Counting is
/// compiled once for each (`main.rs` picks by k), so k <= 32 does not do 128-bit arithmetic
/// per base; everything that reads a database or prints k-mers takes them as `u128`.
pub trait Word:
    Copy
    + Ord
    + Eq
    + core::hash::Hash
    + core::fmt::Debug
    + Default
    + Send
    + Sync
    + 'static
    + core::ops::Shl<u32, Output = Self>
    + core::ops::Shr<u32, Output = Self>
    + core::ops::BitAnd<Output = Self>
    + core::ops::BitOr<Output = Self>
    + core::ops::BitXor<Output = Self>
    + core::ops::Not<Output = Self>
    + From<u8>
    + Into<u128>
{
    /// Bits in the word.
    const BITS: u32;
    /// The largest k it holds (`BITS / 2`).
    const MAX_K: usize;
    /// All zeros.
    const ZERO: Self;
    /// All ones.
    const MAX: Self;

    /// The word's 2-bit groups in the reverse order (the first base last).
    fn reverse_bases(self) -> Self;

    /// The low `BITS` bits of `value`.
    fn truncate(value: u128) -> Self;

    /// The low 64 bits.
    fn low_u64(self) -> u64;

    /// `self * rhs` modulo 2^BITS.
    fn wrapping_mul(self, rhs: Self) -> Self;

    /// The word's bits folded into 64 well-mixed ones (a hash, not a bijection for `u128`).
    fn hash64(self) -> u64;
}

impl Word for u64 {
    const BITS: u32 = 64;
    const MAX_K: usize = 32;
    const ZERO: u64 = 0;
    const MAX: u64 = u64::MAX;

    /// Swap neighbouring groups, then neighbouring nibbles, then the bytes.
    #[inline(always)]
    fn reverse_bases(self) -> u64 {
        let x = ((self >> 2) & 0x3333_3333_3333_3333) | ((self & 0x3333_3333_3333_3333) << 2);
        let x = ((x >> 4) & 0x0f0f_0f0f_0f0f_0f0f) | ((x & 0x0f0f_0f0f_0f0f_0f0f) << 4);
        x.swap_bytes()
    }

    #[inline(always)]
    fn truncate(value: u128) -> u64 {
        value as u64
    }

    #[inline(always)]
    fn low_u64(self) -> u64 {
        self
    }

    #[inline(always)]
    fn wrapping_mul(self, rhs: u64) -> u64 {
        u64::wrapping_mul(self, rhs)
    }

    #[inline(always)]
    fn hash64(self) -> u64 {
        mix64(self)
    }
}

impl Word for u128 {
    const BITS: u32 = 128;
    const MAX_K: usize = 64;
    const ZERO: u128 = 0;
    const MAX: u128 = u128::MAX;

    /// Each half reversed, and the halves swapped.
    #[inline(always)]
    fn reverse_bases(self) -> u128 {
        let (high, low) = ((self >> 64) as u64, self as u64);
        u128::from(low.reverse_bases()) << 64 | u128::from(high.reverse_bases())
    }

    #[inline(always)]
    fn truncate(value: u128) -> u128 {
        value
    }

    #[inline(always)]
    fn low_u64(self) -> u64 {
        self as u64
    }

    #[inline(always)]
    fn wrapping_mul(self, rhs: u128) -> u128 {
        u128::wrapping_mul(self, rhs)
    }

    #[inline(always)]
    fn hash64(self) -> u64 {
        mix64(mix64(self as u64) ^ (self >> 64) as u64)
    }
}

/// splitmix64's finalizer: every input bit moves about half of the output's.
#[inline(always)]
fn mix64(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The mask of a k-mer's 2k low bits.
#[inline]
pub fn mask<W: Word>(k: usize) -> W {
    debug_assert!((1..=W::MAX_K).contains(&k));
    W::MAX >> (W::BITS - 2 * k as u32)
}

/// The k-mer's top 64 bits (the whole k-mer for k <= 32), an order-keeping key of k-mers of
/// any length: `a <= b` implies `prefix(a) <= prefix(b)`. Counts in passes cut the k-mers
/// into ranges of it.
#[inline]
pub fn prefix<W: Word>(kmer: W, k: usize) -> u64 {
    (kmer >> (2 * k as u32).saturating_sub(64)).low_u64()
}

/// The largest [`prefix`] of a k-mer of length `k`.
pub fn last_prefix(k: usize) -> u64 {
    mask::<u64>(k.min(32))
}

/// The reverse complement of the k-mer `kmer`.
///
/// Complement every base (`!kmer`), then reverse the order of the two-bit groups of the
/// word ([`Word::reverse_bases`]); the k-mer now fills the top 2k bits, and the shift brings
/// it down. For k = 3, `AAC` (`00 00 01`): complemented `11 11 10` (TTG, low bits), reversed
/// it is `10 11 11` at the top, shifted down `GTT`.
///
/// ```
/// use floe_kmer::kmer::{encode, reverse_complement};
/// let aac = encode(b"AAC").unwrap();
/// assert_eq!(reverse_complement(aac, 3), encode(b"GTT").unwrap());
/// ```
#[inline]
pub fn reverse_complement<W: Word>(kmer: W, k: usize) -> W {
    (!kmer).reverse_bases() >> (W::BITS - 2 * k as u32)
}

/// The canonical form: the smaller of the k-mer and its reverse complement (jellyfish's
/// `-C`), so a k-mer and its reverse complement, read from either strand, are counted as one.
#[inline]
pub fn canonical<W: Word>(kmer: W, k: usize) -> W {
    kmer.min(reverse_complement(kmer, k))
}

/// The k-mer of `bases` (1 to 64 of `ACGTacgt`), or `None` if it has another byte or is too
/// long or empty.
///
/// ```
/// assert_eq!(floe_kmer::kmer::encode(b"ACGT"), Some(0b00_01_10_11));
/// assert_eq!(floe_kmer::kmer::encode(b"ACNT"), None);
/// ```
pub fn encode(bases: &[u8]) -> Option<u128> {
    if !(1..=MAX_K).contains(&bases.len()) {
        return None;
    }
    bases.iter().try_fold(0u128, |kmer, &b| {
        let code = CODES[usize::from(b)];
        (code < 4).then_some(kmer << 2 | u128::from(code))
    })
}

/// Writes the k bases of `kmer` into `out[..k]`, as uppercase letters.
///
/// ```
/// let mut text = [0u8; 4];
/// floe_kmer::kmer::decode(27u64, 4, &mut text);
/// assert_eq!(&text, b"ACGT");
/// ```
#[inline]
pub fn decode<W: Word>(kmer: W, k: usize, out: &mut [u8]) {
    for (i, letter) in out[..k].iter_mut().enumerate() {
        let code = (kmer >> (2 * (k - 1 - i)) as u32).low_u64() & 3;
        *letter = b"ACGT"[code as usize];
    }
}

/// The k-mers of a sequence of codes, in order: one for every window of k consecutive bases
/// that no [`BREAK`] interrupts, canonical or as read, as `W`s.
///
/// ```
/// use floe_kmer::kmer::{CODES, Kmers, encode};
/// let codes: Vec<u8> = b"ACGTNAC".iter().map(|&b| CODES[usize::from(b)]).collect();
/// let kmers: Vec<u64> = Kmers::new(&codes, 3, false).collect();
/// assert_eq!(kmers, [encode(b"ACG").unwrap() as u64, encode(b"CGT").unwrap() as u64]);
/// ```
#[derive(Clone, Debug)]
pub struct Kmers<'a, W = u64> {
    codes: core::slice::Iter<'a, u8>,
    k: usize,
    mask: W,
    /// The last bases read, as read (only the low 2k bits are kept).
    forward: W,
    /// Their reverse complement: each base enters complemented at the top of the 2k bits and
    /// moves down as the next ones arrive.
    reverse: W,
    /// Bases read since the last break; a k-mer is complete from k on. Only then do
    /// `forward` and `reverse` hold nothing from before the break: k bases have shifted
    /// every older bit out of the 2k bits.
    run: usize,
    canonical: bool,
}

impl<'a, W: Word> Kmers<'a, W> {
    /// The k-mers of `codes` (as made by [`CODES`]); `k` is 1 to `W::MAX_K`.
    ///
    /// # Panics
    /// If `k` is out of range.
    pub fn new(codes: &'a [u8], k: usize, canonical: bool) -> Self {
        assert!(
            (1..=W::MAX_K).contains(&k),
            "k = {k} is not in 1..={}",
            W::MAX_K
        );
        Kmers {
            codes: codes.iter(),
            k,
            mask: mask(k),
            forward: W::ZERO,
            reverse: W::ZERO,
            run: 0,
            canonical,
        }
    }
}

impl<W: Word> Iterator for Kmers<'_, W> {
    type Item = W;

    #[inline]
    fn next(&mut self) -> Option<W> {
        let top = 2 * (self.k as u32 - 1);
        for &code in self.codes.by_ref() {
            if code > 3 {
                self.run = 0;
                continue;
            }
            self.forward = (self.forward << 2 | W::from(code)) & self.mask;
            self.reverse = self.reverse >> 2 | W::from(code ^ 3) << top;
            self.run += 1;
            if self.run >= self.k {
                return Some(if self.canonical {
                    self.forward.min(self.reverse)
                } else {
                    self.forward
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(text: &[u8]) -> Vec<u8> {
        text.iter().map(|&b| CODES[usize::from(b)]).collect()
    }

    /// The reverse complement of a string of `ACGT`, letter by letter (`ACGT`'s complements
    /// are `TGCA`).
    fn revcomp_text(text: &[u8]) -> Vec<u8> {
        let complement = |b: &u8| b"TGCA"[b"ACGT".iter().position(|x| x == b).unwrap()];
        text.iter().rev().map(complement).collect()
    }

    #[test]
    fn the_code_table_classifies_every_byte() {
        for byte in 0..=255u8 {
            let expected = match byte {
                b'A' | b'a' => 0,
                b'C' | b'c' => 1,
                b'G' | b'g' => 2,
                b'T' | b't' => 3,
                b'\t' | 0x20..=0x7e => BREAK,
                _ => INVALID,
            };
            assert_eq!(CODES[usize::from(byte)], expected, "byte {byte:#04x}");
        }
    }

    #[test]
    fn numeric_order_is_lexicographic_order() {
        let mut words: Vec<&[u8]> = vec![b"TTA", b"ACG", b"AAA", b"GCA", b"CAT", b"TTT"];
        let mut kmers: Vec<u128> = words.iter().map(|w| encode(w).unwrap()).collect();
        words.sort();
        kmers.sort();
        let mut text = [0u8; 3];
        for (word, kmer) in words.iter().zip(kmers) {
            decode(kmer, 3, &mut text);
            assert_eq!(&text, word);
        }
    }

    #[test]
    fn reverse_complement_matches_the_letters_for_every_k() {
        // A sequence with every base in several contexts; each k takes a different prefix.
        let text = b"ACGTTGCAAGGCTTACCGATCGGATCCATGACTAGCATTTGACCAGTAGGCATGCAACGTGATCCAGT";
        for k in 1..=MAX_K {
            let word = &text[..k];
            let kmer = encode(word).unwrap();
            let expected = encode(&revcomp_text(word)).unwrap();
            assert_eq!(reverse_complement(kmer, k), expected, "k = {k}");
            assert_eq!(
                reverse_complement(expected, k),
                kmer,
                "an involution, k = {k}"
            );
            assert_eq!(canonical(kmer, k), kmer.min(expected));
            if k <= 32 {
                // The narrow word agrees with the wide one.
                assert_eq!(u128::from(reverse_complement(kmer as u64, k)), expected);
            }
            let mut back = [0u8; MAX_K];
            decode(kmer, k, &mut back);
            assert_eq!(&back[..k], word);
        }
        // The extremes of each word: all A and all T are each other's reverse complement.
        assert_eq!(reverse_complement(0u64, 32), u64::MAX);
        assert_eq!(reverse_complement(u64::MAX, 32), 0);
        assert_eq!(reverse_complement(0u128, 64), u128::MAX);
        assert_eq!(reverse_complement(u128::MAX, 64), 0);
    }

    #[test]
    fn prefixes_keep_the_order_of_kmers() {
        let k = 40;
        let kmers = [0u128, 1, 1 << 16, (1 << 16) + 5, 1 << 79, mask::<u128>(k)];
        for pair in kmers.windows(2) {
            assert!(prefix(pair[0], k) <= prefix(pair[1], k));
        }
        assert_eq!(prefix(mask::<u128>(k), k), last_prefix(k));
        assert_eq!(prefix(12345u64, 20), 12345);
        assert_eq!(last_prefix(20), mask::<u64>(20));
    }

    #[test]
    fn encode_refuses_what_is_not_a_kmer() {
        assert_eq!(encode(b""), None);
        assert_eq!(encode(&[b'A'; 65]), None);
        assert_eq!(encode(&[b'T'; 32]), Some(u128::from(u64::MAX)));
        assert_eq!(encode(&[b'T'; 64]), Some(u128::MAX));
        assert_eq!(encode(b"acgt"), encode(b"ACGT"));
        assert_eq!(encode(b"AC-T"), None);
    }

    #[test]
    fn breaks_end_runs_and_the_rolling_state_forgets_them() {
        // After the N, the first k-mer must be made of the new bases only.
        let kmers: Vec<u128> = Kmers::new(&codes(b"TTTTNAAAC"), 3, false).collect();
        let expected: Vec<u128> = [&b"TTT"[..], b"TTT", b"AAA", b"AAC"]
            .iter()
            .map(|w| encode(w).unwrap())
            .collect();
        assert_eq!(kmers, expected);
        assert_eq!(Kmers::<u64>::new(&codes(b"ACNGTRA"), 3, false).count(), 0);
        assert_eq!(Kmers::<u64>::new(&codes(b""), 1, true).count(), 0);
    }

    #[test]
    fn canonical_kmers_are_the_same_on_both_strands() {
        let text = b"GATTACAGATTACACCGGTTAACCGGTACGATCGATCGTAGCTAGCTAGGGATTTAAACCCATTGACCGTAGGC";
        let reverse = revcomp_text(text);
        for k in 1..=MAX_K {
            let mut a: Vec<u128> = Kmers::new(&codes(text), k, true).collect();
            let mut b: Vec<u128> = Kmers::new(&codes(&reverse), k, true).collect();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "k = {k}");
            assert_eq!(a.len(), text.len() - k + 1);
            if k <= 32 {
                // Both words roll the same k-mers.
                let narrow: Vec<u128> = Kmers::<u64>::new(&codes(text), k, true)
                    .map(u128::from)
                    .collect();
                let wide: Vec<u128> = Kmers::new(&codes(text), k, true).collect();
                assert_eq!(narrow, wide, "k = {k}");
            }
        }
    }
}
