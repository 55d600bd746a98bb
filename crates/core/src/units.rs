//! Units at the API boundary: bytes, rates and times, and their text forms
//! (docs/design.md §3.0). Sizes accept SI (`KB` = 1000) and binary (`KiB` = 1024)
//! units; rates are a size unit followed by `/s`; times need `s`, `ms`, `us`
//! or `ns`. Parsing is strict: a wrong kind of unit, a negative, NaN or
//! infinite value is an error that says what was expected.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;

/// A size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub u64);

/// A bandwidth in bytes per second (finite, > 0 once validated).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct BytesPerSecond(pub f64);

/// A duration in seconds (finite, >= 0).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Seconds(pub f64);

const SIZE_UNITS: [(&str, f64); 9] = [
    ("B", 1.0),
    ("KB", 1e3),
    ("MB", 1e6),
    ("GB", 1e9),
    ("TB", 1e12),
    ("KiB", 1024.0),
    ("MiB", 1048576.0),
    ("GiB", 1073741824.0),
    ("TiB", 1099511627776.0),
];
const TIME_UNITS: [(&str, f64); 4] = [("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)];

/// Splits `"12.5 GiB"` into `(12.5, "GiB")`; the number must be finite and >= 0.
fn split_number(text: &str) -> Result<(f64, &str), String> {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(text.len());
    // `e` may start a unit only in no unit we accept, so a trailing `e` is part of the number.
    let (number, unit) = text.split_at(end);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a number"))?;
    if !value.is_finite() {
        return Err(format!("`{text}` is not a finite number"));
    }
    if value < 0.0 {
        return Err(format!("`{text}` is negative"));
    }
    Ok((value, unit.trim()))
}

fn unit_factor(unit: &str, table: &[(&str, f64)]) -> Option<f64> {
    table
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, f)| *f)
}

/// Parses a size such as `8 GiB`, `128MiB` or `4096 B`; fractions round down.
///
/// ```
/// use residency_core::units::{parse_size, Bytes};
/// assert_eq!(parse_size("8 GiB"), Ok(Bytes(8 * 1024 * 1024 * 1024)));
/// assert_eq!(parse_size("1.5 KB"), Ok(Bytes(1500)));
/// assert!(parse_size("8 GB/s").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<Bytes, String> {
    let (value, unit) = split_number(text)?;
    if unit.ends_with("/s") {
        return Err(format!(
            "`{text}` is a rate; a size is wanted here, e.g. `8 GiB`"
        ));
    }
    if unit_factor(unit, &TIME_UNITS).is_some() {
        return Err(format!(
            "`{text}` is a time; a size is wanted here, e.g. `8 GiB`"
        ));
    }
    let factor = match unit {
        "" => 1.0,
        _ => unit_factor(unit, &SIZE_UNITS).ok_or_else(|| {
            format!("`{text}` has unknown size unit `{unit}`; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB")
        })?,
    };
    let bytes = (value * factor).floor();
    if bytes > u64::MAX as f64 {
        return Err(format!("`{text}` is too large"));
    }
    Ok(Bytes(bytes as u64))
}

/// Parses a rate such as `25 GB/s`; a bare number is rejected.
pub fn parse_rate(text: &str) -> Result<BytesPerSecond, String> {
    let (value, unit) = split_number(text)?;
    let Some(size_unit) = unit.strip_suffix("/s") else {
        return Err(format!(
            "`{text}` is not a rate; write a size unit per second, e.g. `25 GB/s`"
        ));
    };
    let factor = unit_factor(size_unit.trim(), &SIZE_UNITS).ok_or_else(|| {
        format!("`{text}` has unknown rate unit `{unit}`; use e.g. MB/s, GB/s or GiB/s")
    })?;
    Ok(BytesPerSecond(value * factor))
}

/// Parses a time such as `120 us` or `0 s`; a bare number is rejected.
pub fn parse_time(text: &str) -> Result<Seconds, String> {
    let (value, unit) = split_number(text)?;
    let factor = unit_factor(unit, &TIME_UNITS).ok_or_else(|| {
        format!("`{text}` is not a time; write a number with s, ms, us or ns, e.g. `120 us`")
    })?;
    Ok(Seconds(value * factor))
}

impl Bytes {
    pub fn get(self) -> u64 {
        self.0
    }
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        let (value, unit) = [
            (1099511627776.0, "TiB"),
            (1073741824.0, "GiB"),
            (1048576.0, "MiB"),
            (1024.0, "KiB"),
        ]
        .into_iter()
        .find(|(scale, _)| b >= *scale)
        .map(|(scale, unit)| (b / scale, unit))
        .unwrap_or((b, "B"));
        if unit == "B" {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{value:.2} {unit}")
        }
    }
}

impl fmt::Display for BytesPerSecond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} GB/s", self.0 / 1e9)
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s == 0.0 || s >= 1.0 {
            write!(f, "{s:.3} s")
        } else if s >= 1e-3 {
            write!(f, "{:.3} ms", s * 1e3)
        } else {
            write!(f, "{:.1} us", s * 1e6)
        }
    }
}

/// Accepts an integer or a string with a unit, as its parser says.
struct UnitVisitor<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
    from_integer: Option<fn(u64) -> T>,
}

impl<'de, T> Visitor<'de> for UnitVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        match self.from_integer {
            Some(make) => Ok(make(v)),
            None => Err(E::custom(format!(
                "bare number {v} has no unit; expected {}",
                self.expecting
            ))),
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        if v < 0 {
            return Err(E::custom(format!(
                "{v} is negative; expected {}",
                self.expecting
            )));
        }
        self.visit_u64(v as u64)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Err(E::custom(format!(
            "bare number {v} has no unit; expected {}",
            self.expecting
        )))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor {
            expecting: "a size such as `8 GiB` or a whole number of bytes",
            parse: parse_size,
            from_integer: Some(Bytes),
        })
    }
}

impl<'de> Deserialize<'de> for BytesPerSecond {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor {
            expecting: "a rate such as `25 GB/s`",
            parse: parse_rate,
            from_integer: None,
        })
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor {
            expecting: "a time such as `120 us`",
            parse: parse_time,
            from_integer: None,
        })
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl Serialize for BytesPerSecond {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{} B/s", self.0))
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{} s", self.0))
    }
}

// JSON Schemas of the text forms (docs/design.md §3.0), for the generated files in
// `schemas/`. The patterns follow the parsers above: an unsigned decimal number
// (optionally with an `e` exponent), optional spaces, then the unit.
const NUMBER_PATTERN: &str = r"\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)(e[+-]?[0-9]+)?\s*";
const SIZE_UNIT_PATTERN: &str = "(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)";

fn size_pattern() -> String {
    format!("^{NUMBER_PATTERN}{SIZE_UNIT_PATTERN}?\\s*$")
}

fn rate_pattern() -> String {
    format!("^{NUMBER_PATTERN}{SIZE_UNIT_PATTERN}\\s*/s\\s*$")
}

fn time_pattern() -> String {
    format!("^{NUMBER_PATTERN}(s|ms|us|ns)\\s*$")
}

/// `JsonSchema` for a unit read from text: the type's name and id, and
/// `schema`, the JSON Schema of what it reads.
macro_rules! text_schema {
    ($Type:ident, $schema:tt) => {
        impl schemars::JsonSchema for $Type {
            fn schema_name() -> Cow<'static, str> {
                stringify!($Type).into()
            }
            fn schema_id() -> Cow<'static, str> {
                concat!(module_path!(), "::", stringify!($Type)).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!($schema)
            }
        }
    };
}

text_schema!(
    Bytes,
    {
        "description": "A size in bytes: a whole number of bytes, or a string `<number><unit>` \
            (a space between is allowed) with B, KB, MB, GB, TB (powers of 1000) or \
            KiB, MiB, GiB, TiB (powers of 1024), e.g. `8 GiB` = 8589934592 bytes; \
            fractional sizes round down to whole bytes.",
        "anyOf": [
            { "type": "integer", "minimum": 0 },
            { "type": "string", "pattern": size_pattern() }
        ],
        "examples": [4096, "128 MiB", "8 GiB", "3 GB"]
    }
);

text_schema!(
    BytesPerSecond,
    {
        "description": "A rate in bytes per second: a string `<number> <size unit>/s` with \
            B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), \
            e.g. `25 GB/s`; a bare number is rejected.",
        "type": "string",
        "pattern": rate_pattern(),
        "examples": ["25 GB/s", "12 GiB/s", "350 GB/s"]
    }
);

text_schema!(
    Seconds,
    {
        "description": "A duration: a string `<number> <unit>` with s, ms, us or ns, \
            e.g. `120 us`; a bare number is rejected.",
        "type": "string",
        "pattern": time_pattern(),
        "examples": ["120 us", "2 ms", "0 s"]
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_si_and_binary_powers() {
        // docs/design.md §3.0: `8 GiB` = 8 * 1024^3 = 8589934592.
        assert_eq!(parse_size("8 GiB").unwrap(), Bytes(8589934592));
        assert_eq!(parse_size("128MiB").unwrap(), Bytes(128 * 1024 * 1024));
        assert_eq!(parse_size("3 GB").unwrap(), Bytes(3_000_000_000));
        assert_eq!(parse_size("4096").unwrap(), Bytes(4096));
        // 1.2 GiB = 1288490188.8 bytes, rounded down.
        assert_eq!(parse_size("1.2 GiB").unwrap(), Bytes(1288490188));
    }

    #[test]
    fn wrong_kinds_of_unit_are_rejected() {
        assert!(parse_size("8 GB/s").unwrap_err().contains("rate"));
        assert!(parse_size("8 ms").unwrap_err().contains("time"));
        assert!(parse_size("-1 GiB").unwrap_err().contains("negative"));
        assert!(parse_size("8 furlongs").unwrap_err().contains("unknown"));
        assert!(parse_rate("25").unwrap_err().contains("not a rate"));
        assert!(parse_time("120").unwrap_err().contains("not a time"));
        assert!(parse_rate("NaN GB/s").is_err());
        assert!(parse_rate("inf GB/s").is_err());
    }

    #[test]
    fn rates_and_times() {
        assert_eq!(parse_rate("25 GB/s").unwrap(), BytesPerSecond(25e9));
        assert_eq!(parse_rate("1 GiB/s").unwrap(), BytesPerSecond(1073741824.0));
        assert!((parse_time("120 us").unwrap().0 - 120e-6).abs() < 1e-18);
        assert_eq!(parse_time("2 ms").unwrap(), Seconds(0.002));
        assert_eq!(parse_time("0 s").unwrap(), Seconds(0.0));
    }

    #[test]
    fn deserialize_from_yaml() {
        #[derive(Deserialize)]
        struct Row {
            size: Bytes,
            rate: BytesPerSecond,
            time: Seconds,
        }
        let row: Row = serde_norway::from_str("size: 1024\nrate: 1 MB/s\ntime: 5 ns").unwrap();
        assert_eq!(row.size, Bytes(1024));
        assert_eq!(row.rate, BytesPerSecond(1e6));
        assert!((row.time.0 - 5e-9).abs() < 1e-20);
        assert!(serde_norway::from_str::<Row>("size: 1\nrate: 3\ntime: 1 s").is_err());
    }
}
