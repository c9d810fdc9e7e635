//! HPACK (RFC 7541): decoding the header blocks of an answer, and the two
//! encoding primitives our own request's block is written with.
//!
//! Why not a general HPACK crate: the one this binary used first built its
//! Huffman tree in a hash map for every Huffman string it decoded, which
//! was the largest single cost of a submit process in `perf` (BENCHMARKS.md,
//! "Slurm peer"). Here Huffman strings go to `httlib-huffman`, whose decoder
//! walks static tables four bits at a time, and the rest of HPACK (integers,
//! the static and dynamic tables, the five representations) is below.
//!
//! Bounds: integers past [`INTEGER_MAX`] are refused, and the dynamic table
//! holds at most [`TABLE_BYTES_MAX`] (HPACK's size, entries' bytes plus 32
//! each), the default this side never raises.

use std::collections::VecDeque;

/// The dynamic table's size limit: SETTINGS_HEADER_TABLE_SIZE's initial
/// value, which this side keeps.
pub const TABLE_BYTES_MAX: usize = 4_096;
/// Largest integer accepted: no index, length or size in a header block of
/// at most 64 KiB comes near it.
const INTEGER_MAX: usize = 1 << 24;
/// What an entry adds to the table's size beyond its bytes (RFC 7541 §4.1).
const ENTRY_OVERHEAD_BYTES: usize = 32;

/// RFC 7541 Appendix A: index 1 is the first entry.
const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// A decoded name and value, and the rest of the block after them.
type Literal<'b> = (Vec<u8>, Vec<u8>, &'b [u8]);

/// Why a header block could not be decoded.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("the block ends inside a field")]
    Truncated,
    #[error("an integer larger than {INTEGER_MAX}")]
    IntegerTooLarge,
    #[error("index {0} is in neither table")]
    BadIndex(usize),
    #[error("a Huffman string that does not decode")]
    Huffman,
    #[error("a table size of {0}, past the {TABLE_BYTES_MAX} allowed")]
    TableTooLarge(usize),
    #[error("a table size update after a field")]
    LateSizeUpdate,
}

/// The decoding context of one connection: its dynamic table.
pub struct Decoder {
    /// Newest first: index 62 is `dynamic[0]`.
    dynamic: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// HPACK's size of the entries in `dynamic`.
    size: usize,
    /// The size the encoder set last, at most [`TABLE_BYTES_MAX`].
    size_max: usize,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            dynamic: VecDeque::new(),
            size: 0,
            size_max: TABLE_BYTES_MAX,
        }
    }

    /// Decodes one whole header block, calling `field` with each name and
    /// value in order. On an error the connection must be dropped: the
    /// table may be partly updated.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut rest = block;
        let mut fields_seen = false;
        while let Some(&first) = rest.first() {
            if first & 0x80 != 0 {
                let (index, after) = integer(rest, 7)?;
                rest = after;
                let (name, value) = self.entry(index)?;
                field(name, value);
            } else if first & 0x40 != 0 {
                let (name, value, after) = self.literal(rest, 6)?;
                rest = after;
                field(&name, &value);
                self.insert(name, value);
            } else if first & 0x20 != 0 {
                if fields_seen {
                    return Err(HpackError::LateSizeUpdate);
                }
                let (size, after) = integer(rest, 5)?;
                rest = after;
                if size > TABLE_BYTES_MAX {
                    return Err(HpackError::TableTooLarge(size));
                }
                self.size_max = size;
                self.evict_to(size);
                continue;
            } else {
                // Without indexing (0000) or never indexed (0001): the same
                // to a decoder that forwards nothing.
                let (name, value, after) = self.literal(rest, 4)?;
                rest = after;
                field(&name, &value);
            }
            fields_seen = true;
        }
        Ok(())
    }

    /// The name and value at `index` of the static table, then the dynamic.
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        if index == 0 {
            return Err(HpackError::BadIndex(index));
        }
        if let Some((name, value)) = STATIC_TABLE.get(index - 1) {
            return Ok((name.as_bytes(), value.as_bytes()));
        }
        self.dynamic
            .get(index - 1 - STATIC_TABLE.len())
            .map(|(name, value)| (name.as_slice(), value.as_slice()))
            .ok_or(HpackError::BadIndex(index))
    }

    /// A literal field whose name index has a `prefix_bits` prefix (0: the
    /// name follows as a string), and what follows it.
    fn literal<'b>(&self, block: &'b [u8], prefix_bits: u8) -> Result<Literal<'b>, HpackError> {
        let (index, rest) = integer(block, prefix_bits)?;
        let (name, rest) = if index == 0 {
            string(rest)?
        } else {
            (self.entry(index)?.0.to_vec(), rest)
        };
        let (value, rest) = string(rest)?;
        Ok((name, value, rest))
    }

    /// Adds an entry as the newest, evicting the oldest to make room; an
    /// entry larger than the whole table empties it (RFC 7541 §4.4).
    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let entry_size = name.len() + value.len() + ENTRY_OVERHEAD_BYTES;
        if entry_size > self.size_max {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.size_max - entry_size);
        self.size += entry_size;
        self.dynamic.push_front((name, value));
        debug_assert!(self.size <= self.size_max);
    }

    /// Drops the oldest entries until the table's size is at most `size`.
    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some((name, value)) = self.dynamic.pop_back() else {
                break;
            };
            self.size -= name.len() + value.len() + ENTRY_OVERHEAD_BYTES;
        }
    }
}

/// An HPACK integer with an `prefix_bits`-bit prefix after `pattern`'s
/// high bits (RFC 7541 §5.1).
pub fn put_integer(out: &mut Vec<u8>, pattern: u8, prefix_bits: u8, value: usize) {
    let limit = (1usize << prefix_bits) - 1;
    if value < limit {
        out.push(pattern | value as u8);
        return;
    }
    out.push(pattern | limit as u8);
    let mut rest = value - limit;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// An HPACK string literal, not Huffman coded (RFC 7541 §5.2).
pub fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    put_integer(out, 0x00, 7, bytes.len());
    out.extend_from_slice(bytes);
}

/// An integer with a `prefix_bits`-bit prefix (RFC 7541 §5.1), and what
/// follows it.
fn integer(block: &[u8], prefix_bits: u8) -> Result<(usize, &[u8]), HpackError> {
    let (&first, mut rest) = block.split_first().ok_or(HpackError::Truncated)?;
    let limit = (1usize << prefix_bits) - 1;
    let mut value = usize::from(first) & limit;
    if value < limit {
        return Ok((value, rest));
    }
    let mut shift = 0u32;
    loop {
        let (&byte, after) = rest.split_first().ok_or(HpackError::Truncated)?;
        rest = after;
        value += usize::from(byte & 0x7f) << shift;
        if value > INTEGER_MAX {
            return Err(HpackError::IntegerTooLarge);
        }
        if byte & 0x80 == 0 {
            return Ok((value, rest));
        }
        shift += 7;
        // Continuation bytes past this one could only encode a value past
        // INTEGER_MAX, or zeros nobody sends.
        if shift > 21 {
            return Err(HpackError::IntegerTooLarge);
        }
    }
}

/// A string literal (RFC 7541 §5.2), Huffman-decoded when marked so, and
/// what follows it.
fn string(block: &[u8]) -> Result<(Vec<u8>, &[u8]), HpackError> {
    let huffman = block.first().is_some_and(|b| b & 0x80 != 0);
    let (length, rest) = integer(block, 7)?;
    if length > rest.len() {
        return Err(HpackError::Truncated);
    }
    let (bytes, rest) = rest.split_at(length);
    if !huffman {
        return Ok((bytes.to_vec(), rest));
    }
    // Huffman codes are at least 5 bits, so a byte decodes to at most 1.6.
    let mut decoded = Vec::with_capacity(length * 8 / 5 + 1);
    httlib_huffman::decode(bytes, &mut decoded, httlib_huffman::DecoderSpeed::FourBits)
        .map_err(|_| HpackError::Huffman)?;
    Ok((decoded, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(
        decoder: &mut Decoder,
        block: &[u8],
    ) -> Result<Vec<(String, String)>, HpackError> {
        let mut fields = Vec::new();
        decoder.decode(block, |n, v| {
            fields.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })?;
        Ok(fields)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// A literal with incremental indexing and a new name, not Huffman coded.
    fn indexed_literal(name: &str, value: &str) -> Vec<u8> {
        let mut out = vec![0x40];
        put_string(&mut out, name.as_bytes());
        put_string(&mut out, value.as_bytes());
        out
    }

    #[test]
    fn integers_encode_as_rfc_7541_shows() {
        // RFC 7541 C.1.1-C.1.3.
        let mut out = Vec::new();
        put_integer(&mut out, 0x00, 5, 10);
        assert_eq!(out, [0x0a]);
        out.clear();
        put_integer(&mut out, 0x00, 5, 1337);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
        out.clear();
        put_integer(&mut out, 0x00, 8, 42);
        assert_eq!(out, [0x2a]);
    }

    #[test]
    fn the_static_table_agrees_with_another_decoder() {
        for index in 1..=61u8 {
            let ours = decode_all(&mut Decoder::new(), &[0x80 | index]).unwrap();
            let theirs = loona_hpack::Decoder::new().decode(&[0x80 | index]).unwrap();
            let theirs: Vec<(String, String)> = theirs
                .into_iter()
                .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
                .collect();
            assert_eq!(ours, theirs, "static index {index}");
        }
    }

    #[test]
    fn rfc_7541_c_4_1_decodes() {
        // A request with Huffman-coded `:authority`, inserted in the table.
        let block = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ];
        let mut decoder = Decoder::new();
        assert_eq!(
            decode_all(&mut decoder, &block).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ])
        );
        // The next block refers to it as dynamic entry 62 (0xbe).
        assert_eq!(
            decode_all(&mut decoder, &[0xbe]).unwrap(),
            pairs(&[(":authority", "www.example.com")])
        );
        assert_eq!(decoder.size, 57);
    }

    #[test]
    fn the_dynamic_table_evicts_the_oldest_and_obeys_size_updates() {
        let mut decoder = Decoder::new();
        // Size 100: two entries of 40 (8 bytes plus 32) fit.
        let mut block = vec![0x3f, 100 - 31];
        block.extend(indexed_literal("a", "1234567"));
        block.extend(indexed_literal("b", "7654321"));
        decode_all(&mut decoder, &block).unwrap();
        assert_eq!(decoder.dynamic.len(), 2);
        assert_eq!(decoder.size, 80);
        // One of 53 needs the oldest's room: 62 is the newest, 63 the one kept.
        block = indexed_literal("c", &"x".repeat(20));
        decode_all(&mut decoder, &block).unwrap();
        assert_eq!(
            decode_all(&mut decoder, &[0x80 | 62]).unwrap(),
            pairs(&[("c", &"x".repeat(20))])
        );
        assert_eq!(
            decode_all(&mut decoder, &[0x80 | 63]).unwrap(),
            pairs(&[("b", "7654321")])
        );
        assert_eq!(
            decode_all(&mut decoder, &[0x80 | 64]),
            Err(HpackError::BadIndex(64))
        );
        // Shrinking the table evicts; an entry larger than it empties it.
        decode_all(&mut decoder, &[0x20 | 10]).unwrap();
        assert!(decoder.dynamic.is_empty());
        assert_eq!(decoder.size, 0);
        decode_all(&mut decoder, &indexed_literal("d", "e")).unwrap();
        assert!(decoder.dynamic.is_empty());
    }

    #[test]
    fn malformed_blocks_are_named_and_never_panic() {
        let cases: [(&[u8], HpackError); 8] = [
            (&[0x80], HpackError::BadIndex(0)),
            (&[0xff], HpackError::Truncated),
            (
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
                HpackError::IntegerTooLarge,
            ),
            (&[0x40, 0x05, b'a'], HpackError::Truncated),
            (&[0x00, 0x81, 0xff, 0x00], HpackError::Huffman),
            (
                &[0xff, 0x80, 0x80, 0x80, 0x80, 0x00],
                HpackError::IntegerTooLarge,
            ),
            (&[0x3f, 0xe2, 0x1f], HpackError::TableTooLarge(4_097)),
            (&[0x82, 0x20], HpackError::LateSizeUpdate),
        ];
        for (block, want) in cases {
            let got = decode_all(&mut Decoder::new(), block);
            assert_eq!(got, Err(want), "{block:02x?}");
        }
        // Every prefix of a good block fails cleanly or decodes.
        let good = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ];
        for end in 0..good.len() {
            let _ = decode_all(&mut Decoder::new(), &good[..end]);
        }
    }

    #[test]
    fn random_blocks_never_panic_and_keep_the_table_within_its_size() {
        // Seeded: the same blocks every run.
        let mut next = crate::seeded_numbers(0x9e37_79b9_7f4a_7c15u64);
        let mut decoder = Decoder::new();
        for round in 0..20_000 {
            if round % 50 == 0 {
                decoder = Decoder::new();
            }
            let length = (next() % 48) as usize;
            let block: Vec<u8> = (0..length)
                .map(|i| {
                    let r = next();
                    // Mostly small lengths and indexes, so fields complete.
                    if i % 3 == 1 {
                        (r % 12) as u8
                    } else {
                        r as u8
                    }
                })
                .collect();
            let _ = decoder.decode(&block, |_, _| {});
            let entries: usize = decoder
                .dynamic
                .iter()
                .map(|(n, v)| n.len() + v.len() + ENTRY_OVERHEAD_BYTES)
                .sum();
            assert_eq!(entries, decoder.size);
            assert!(decoder.size <= decoder.size_max && decoder.size_max <= TABLE_BYTES_MAX);
        }
    }
}
