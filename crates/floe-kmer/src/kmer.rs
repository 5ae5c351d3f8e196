//! K-mers as 2-bit codes packed into a `u64`, and their rolling extraction from a sequence.
//!
//! A base is two bits: A = 0, C = 1, G = 2, T = 3. A k-mer of k <= 32 bases is the number whose
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

/// The largest k a `u64` holds.
pub const MAX_K: usize = 32;

/// The mask of a k-mer's 2k low bits.
#[inline]
pub fn mask(k: usize) -> u64 {
    debug_assert!((1..=MAX_K).contains(&k));
    u64::MAX >> (64 - 2 * k)
}

/// The reverse complement of the k-mer `kmer`.
///
/// Complement every base (`!kmer`), then reverse the order of the 32 two-bit groups of the
/// word (swap neighbouring groups, then neighbouring nibbles, then the bytes); the k-mer now
/// fills the top 2k bits, and the shift brings it down. For k = 3, `AAC` (`00 00 01`):
/// complemented `11 11 10` (TTG, low bits), reversed it is `10 11 11` at the top, shifted
/// down `GTT`.
///
/// ```
/// use floe_kmer::kmer::{encode, reverse_complement};
/// let aac = encode(b"AAC").unwrap();
/// assert_eq!(reverse_complement(aac, 3), encode(b"GTT").unwrap());
/// ```
#[inline]
pub fn reverse_complement(kmer: u64, k: usize) -> u64 {
    let x = !kmer;
    let x = ((x >> 2) & 0x3333_3333_3333_3333) | ((x & 0x3333_3333_3333_3333) << 2);
    let x = ((x >> 4) & 0x0f0f_0f0f_0f0f_0f0f) | ((x & 0x0f0f_0f0f_0f0f_0f0f) << 4);
    x.swap_bytes() >> (64 - 2 * k)
}

/// The canonical form: the smaller of the k-mer and its reverse complement (jellyfish's
/// `-C`), so a k-mer and its reverse complement, read from either strand, are counted as one.
#[inline]
pub fn canonical(kmer: u64, k: usize) -> u64 {
    kmer.min(reverse_complement(kmer, k))
}

/// The k-mer of `bases` (1 to 32 of `ACGTacgt`), or `None` if it has another byte or is too
/// long or empty.
///
/// ```
/// assert_eq!(floe_kmer::kmer::encode(b"ACGT"), Some(0b00_01_10_11));
/// assert_eq!(floe_kmer::kmer::encode(b"ACNT"), None);
/// ```
pub fn encode(bases: &[u8]) -> Option<u64> {
    if !(1..=MAX_K).contains(&bases.len()) {
        return None;
    }
    bases.iter().try_fold(0u64, |kmer, &b| {
        let code = CODES[usize::from(b)];
        (code < 4).then_some(kmer << 2 | u64::from(code))
    })
}

/// Writes the k bases of `kmer` into `out[..k]`, as uppercase letters.
///
/// ```
/// let mut text = [0u8; 4];
/// floe_kmer::kmer::decode(27, 4, &mut text);
/// assert_eq!(&text, b"ACGT");
/// ```
#[inline]
pub fn decode(kmer: u64, k: usize, out: &mut [u8]) {
    for (i, letter) in out[..k].iter_mut().enumerate() {
        let code = (kmer >> (2 * (k - 1 - i))) & 3;
        *letter = b"ACGT"[code as usize];
    }
}

/// The k-mers of a sequence of codes, in order: one for every window of k consecutive bases
/// that no [`BREAK`] interrupts, canonical or as read.
///
/// ```
/// use floe_kmer::kmer::{CODES, Kmers, encode};
/// let codes: Vec<u8> = b"ACGTNAC".iter().map(|&b| CODES[usize::from(b)]).collect();
/// let kmers: Vec<u64> = Kmers::new(&codes, 3, false).collect();
/// assert_eq!(kmers, [encode(b"ACG").unwrap(), encode(b"CGT").unwrap()]);
/// ```
#[derive(Clone, Debug)]
pub struct Kmers<'a> {
    codes: core::slice::Iter<'a, u8>,
    k: usize,
    mask: u64,
    /// The last bases read, as read (only the low 2k bits are kept).
    forward: u64,
    /// Their reverse complement: each base enters complemented at the top of the 2k bits and
    /// moves down as the next ones arrive.
    reverse: u64,
    /// Bases read since the last break; a k-mer is complete from k on. Only then do
    /// `forward` and `reverse` hold nothing from before the break: k bases have shifted
    /// every older bit out of the 2k bits.
    run: usize,
    canonical: bool,
}

impl<'a> Kmers<'a> {
    /// The k-mers of `codes` (as made by [`CODES`]); `k` is 1 to 32.
    ///
    /// # Panics
    /// If `k` is out of range.
    pub fn new(codes: &'a [u8], k: usize, canonical: bool) -> Self {
        assert!((1..=MAX_K).contains(&k), "k = {k} is not in 1..=32");
        Kmers {
            codes: codes.iter(),
            k,
            mask: mask(k),
            forward: 0,
            reverse: 0,
            run: 0,
            canonical,
        }
    }
}

impl Iterator for Kmers<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        let top = 2 * (self.k - 1);
        for &code in self.codes.by_ref() {
            if code > 3 {
                self.run = 0;
                continue;
            }
            let code = u64::from(code);
            self.forward = (self.forward << 2 | code) & self.mask;
            self.reverse = self.reverse >> 2 | (code ^ 3) << top;
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
        let mut kmers: Vec<u64> = words.iter().map(|w| encode(w).unwrap()).collect();
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
        let text = b"ACGTTGCAAGGCTTACCGATCGGATCCATGACTAGCAT";
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
            let mut back = [0u8; MAX_K];
            decode(kmer, k, &mut back);
            assert_eq!(&back[..k], word);
        }
        // The extremes of k = 32: all A and all T are each other's reverse complement.
        assert_eq!(reverse_complement(0, 32), u64::MAX);
        assert_eq!(reverse_complement(u64::MAX, 32), 0);
    }

    #[test]
    fn encode_refuses_what_is_not_a_kmer() {
        assert_eq!(encode(b""), None);
        assert_eq!(encode(&[b'A'; 33]), None);
        assert_eq!(encode(&[b'T'; 32]), Some(u64::MAX));
        assert_eq!(encode(b"acgt"), encode(b"ACGT"));
        assert_eq!(encode(b"AC-T"), None);
    }

    #[test]
    fn breaks_end_runs_and_the_rolling_state_forgets_them() {
        // After the N, the first k-mer must be made of the new bases only.
        let kmers: Vec<u64> = Kmers::new(&codes(b"TTTTNAAAC"), 3, false).collect();
        let expected: Vec<u64> = [&b"TTT"[..], b"TTT", b"AAA", b"AAC"]
            .iter()
            .map(|w| encode(w).unwrap())
            .collect();
        assert_eq!(kmers, expected);
        assert_eq!(Kmers::new(&codes(b"ACNGTRA"), 3, false).count(), 0);
        assert_eq!(Kmers::new(&codes(b""), 1, true).count(), 0);
    }

    #[test]
    fn canonical_kmers_are_the_same_on_both_strands() {
        let text = b"GATTACAGATTACACCGGTTAACCGGTACGATCGATCGTAGCTAGCTAGGGATTTAAACCC";
        let reverse = revcomp_text(text);
        for k in 1..=MAX_K {
            let mut a: Vec<u64> = Kmers::new(&codes(text), k, true).collect();
            let mut b: Vec<u64> = Kmers::new(&codes(&reverse), k, true).collect();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "k = {k}");
            assert_eq!(a.len(), text.len() - k + 1);
        }
    }
}
