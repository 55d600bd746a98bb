//! The mutators: text inputs have numbers, lines and spans swapped for
//! hostile values and other seeds' pieces; binary ones have bytes and
//! little-endian integers flipped.

/// Numbers that break parsers and arithmetic: zero, negatives, overflow at
/// every width, the ends of f64, NaN and infinity in YAML's and JSON's
/// spellings, sizes and rates with units.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1e308",
    "-1e308",
    "1e-300",
    "nan",
    ".nan",
    "inf",
    ".inf",
    "-.inf",
    "4294967296",
    "4294967295",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "1e19",
    "0.0",
    "1000000000",
    "1e300 s",
    "1e-300 B/s",
    "16 EiB",
    "1e300 GB/s",
];

/// Integers at the edges of the widths a binary header uses.
const BINARY_NUMBERS: &[u64] = &[
    0,
    1,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    1 << 31,
    u64::MAX,
    i64::MAX as u64,
    1 << 40,
    1_000_000_000,
];

/// Byte ranges of the numbers in `text` (digits, with a sign, a point and
/// an exponent).
fn number_spans(text: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < text.len() {
        if text[i].is_ascii_digit() {
            let start = if i > 0 && text[i - 1] == b'-' {
                i - 1
            } else {
                i
            };
            while i < text.len() && (text[i].is_ascii_digit() || b".eE+-".contains(&text[i])) {
                i += 1;
            }
            spans.push((start, i));
        } else {
            i += 1;
        }
    }
    spans
}

fn line_spans(text: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, &b) in text.iter().enumerate() {
        if b == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < text.len() {
        spans.push((start, text.len()));
    }
    spans
}

/// One to four text mutations of `input`: a number replaced by an edge
/// value, a byte changed, a range or line deleted, a line repeated or
/// taken from another seed, deep nesting, control bytes, a truncation.
pub(super) fn mutate_text(rng: &mut fastrand::Rng, input: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.usize(1..=4) {
        let len = out.len();
        match rng.u8(0..10) {
            0..=2 => {
                let spans = number_spans(&out);
                if let Some(&(a, b)) = spans.get(rng.usize(0..spans.len().max(1))) {
                    let n = NUMBERS[rng.usize(0..NUMBERS.len())];
                    out.splice(a..b, n.bytes());
                }
            }
            3 if len > 0 => out[rng.usize(0..len)] = rng.u8(..),
            4 if len > 0 => {
                let a = rng.usize(0..len);
                let b = (a + rng.usize(1..64)).min(len);
                out.drain(a..b);
            }
            5 => {
                let lines = line_spans(&out);
                if !lines.is_empty() {
                    let (a, b) = lines[rng.usize(0..lines.len())];
                    let line = out[a..b].to_vec();
                    if rng.bool() {
                        out.drain(a..b);
                    } else {
                        out.splice(b..b, line);
                    }
                }
            }
            6 => {
                let other = &seeds[rng.usize(0..seeds.len())];
                let lines = line_spans(other);
                if !lines.is_empty() {
                    let (a, b) = lines[rng.usize(0..lines.len())];
                    let at = rng.usize(0..=len);
                    out.splice(at..at, other[a..b].iter().copied());
                }
            }
            7 => {
                // Mostly shallow, sometimes far deeper than any real file.
                let depth = if rng.u8(0..10) == 0 {
                    rng.usize(1000..20_000)
                } else {
                    rng.usize(1..200)
                };
                let open: &[u8] = [b"[".as_slice(), b"{a: ", b"- "][rng.usize(0..3)];
                let at = rng.usize(0..=len);
                let nest: Vec<u8> = open.repeat(depth);
                out.splice(at..at, nest);
            }
            8 => {
                let at = rng.usize(0..=len);
                let bytes: &[u8] =
                    [b"\x00".as_slice(), b"\x1b[31m", b"\xff\xfe", b"\t"][rng.usize(0..4)];
                out.splice(at..at, bytes.iter().copied());
            }
            _ if len > 0 => out.truncate(rng.usize(0..len)),
            _ => {}
        }
    }
    out
}

/// One to four binary mutations: an edge integer written over 4 or 8
/// bytes, a byte changed, a range deleted or repeated, a truncation.
pub(super) fn mutate_binary(rng: &mut fastrand::Rng, input: &[u8], _seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.usize(1..=4) {
        let len = out.len();
        if len < 8 {
            break;
        }
        match rng.u8(0..6) {
            0..=2 => {
                let n = BINARY_NUMBERS[rng.usize(0..BINARY_NUMBERS.len())];
                let bytes = n.to_le_bytes();
                let width = if rng.bool() { 4 } else { 8 };
                let at = rng.usize(0..=len - width);
                out[at..at + width].copy_from_slice(&bytes[..width]);
            }
            3 => out[rng.usize(0..len)] = rng.u8(..),
            4 => {
                let a = rng.usize(0..len);
                let b = (a + rng.usize(1..64)).min(len);
                if rng.bool() {
                    out.drain(a..b);
                } else {
                    let chunk = out[a..b].to_vec();
                    out.splice(b..b, chunk);
                }
            }
            _ => out.truncate(rng.usize(0..len)),
        }
    }
    out
}
