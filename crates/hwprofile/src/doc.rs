//! A hardware profile with its comments (`ProfileDoc`): what `detect` and
//! `calibrate` read and write.
//!
//! Every value's origin is a YAML comment (`# detected: ...`, `# measured:
//! ...`, `# default: ...`), so the file is written as text here rather than
//! serialised, in block style, one value a line. Comments of a file read
//! back are kept where they stood: lines above a key or list item, and the
//! comment after a value; a value calibration replaces gets its new origin
//! instead. Numbers are written in units (`25 GB/s`, `34 us`, `64 GiB`) by
//! the shortest text the planner's unit parser reads back as exactly the
//! same number, so a value no one measured is never changed by rewriting
//! it. `to_yaml_checked` parses the text back with the planner's reader and
//! compares, and `write` replaces the file atomically (temporary + rename).

use super::ProfileError;
use residency_core::error::write_atomic;
use residency_core::profile::{Drive, Gpu, HardwareProfile, Host, LlamaCppTiming, NumaNode};
use residency_core::units::{parse_rate, parse_size, parse_time, Bytes, BytesPerSecond, Seconds};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::Path;

/// Comments attached to one place of the file (a key, or a list item such
/// as `gpus[0]`): whole lines above it, and the comment after its value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Note {
    pub above: Vec<String>,
    pub after: Option<String>,
}

/// Where a value came from; written as the comment after it.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// Read from this machine (sysfs, procfs, the GPU driver).
    Detected(String),
    /// Timed on this machine, or derived from an engine's log of it.
    Measured(String),
    /// An assumption documented in profiles/README.md.
    Default(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, text) = match self {
            Origin::Detected(t) => ("detected", t),
            Origin::Measured(t) => ("measured", t),
            Origin::Default(t) => ("default", t),
        };
        write!(f, "{kind}: {}", text.replace('\n', " "))
    }
}

/// A profile, the comment lines at the top of its file, and the comments
/// of each place, by path (`name`, `numa[0].ram`, `gpus[1]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileDoc {
    pub profile: HardwareProfile,
    pub header: Vec<String>,
    pub notes: BTreeMap<String, Note>,
}

/// The path of field `key` of item `index` of list `section`: `numa[0].ram`.
pub fn field(section: &str, index: usize, key: &str) -> String {
    format!("{section}[{index}].{key}")
}

/// Column at which the comment after a value starts (when the value ends
/// before it).
const COMMENT_COLUMN: usize = 34;

impl ProfileDoc {
    /// A profile without comments yet.
    pub fn new(profile: HardwareProfile) -> ProfileDoc {
        ProfileDoc {
            profile,
            header: Vec::new(),
            notes: BTreeMap::new(),
        }
    }

    /// Reads a profile file with the planner's reader, and its comments.
    pub fn read(path: &Path) -> Result<ProfileDoc, ProfileError> {
        let text = super::read_input(
            path,
            "give a profile written by `residency profile detect --out FILE`, or one of profiles/hardware",
        )?;
        ProfileDoc::parse(&text, path)
    }

    /// Parses profile text (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<ProfileDoc, ProfileError> {
        let profile = HardwareProfile::from_yaml_str(text, path)?;
        let (header, notes) = scan_comments(text);
        Ok(ProfileDoc {
            profile,
            header,
            notes,
        })
    }

    /// Sets the origin of the value at `path`, replacing its comments.
    pub fn set(&mut self, path: &str, origin: Origin) {
        self.notes.insert(
            path.to_string(),
            Note {
                above: Vec::new(),
                after: Some(origin.to_string()),
            },
        );
    }

    /// Sets the comment lines above the list item `path` (`gpus[0]`).
    pub fn describe_item(&mut self, path: &str, lines: Vec<String>) {
        self.notes.entry(path.to_string()).or_default().above = lines;
    }

    /// The origin comment after the value at `path`, if any.
    pub fn origin(&self, path: &str) -> Option<&str> {
        self.notes.get(path)?.after.as_deref()
    }

    /// The file's text: header, then every field in the order of design
    /// §3.1, each with its comments.
    pub fn to_yaml(&self) -> String {
        let mut w = Writer {
            out: String::new(),
            notes: &self.notes,
        };
        w.comments(0, &self.header);
        // Destructured whole (each list item too, in its `*_fields`), so that
        // a field added to the profile types fails to compile here instead
        // of being dropped from the file.
        let HardwareProfile {
            name,
            source,
            numa,
            gpus,
            drives,
            io_overlaps_compute,
            felt_fraction,
            fixed_token_seconds,
            hosts,
            llama_cpp,
        } = &self.profile;
        w.line(0, "", "name", "name", &quoted(name));
        if let Some(source) = source {
            w.line(0, "", "source", "source", &quoted(source));
        }
        w.list("numa", numa, numa_fields);
        w.list("gpus", gpus, gpu_fields);
        w.list("drives", drives, drive_fields);
        w.line(
            0,
            "",
            "io_overlaps_compute",
            "io_overlaps_compute",
            &io_overlaps_compute.to_string(),
        );
        if let Some(f) = felt_fraction {
            w.line(0, "", "felt_fraction", "felt_fraction", &fraction_text(*f));
        }
        w.line(
            0,
            "",
            "fixed_token_seconds",
            "fixed_token_seconds",
            &time_text(*fixed_token_seconds),
        );
        if !hosts.is_empty() {
            w.list("hosts", hosts, host_fields);
        }
        if let Some(timing) = llama_cpp {
            w.line(0, "", "llama_cpp", "llama_cpp", "");
            for (key, value) in llama_cpp_fields(timing) {
                w.line(2, "", &format!("llama_cpp.{key}"), key, &value);
            }
        }
        w.out
    }

    /// `to_yaml`, checked: the planner's reader must read the text back as
    /// exactly this profile (`path` names it in the error).
    pub fn to_yaml_checked(&self, path: &Path) -> Result<String, ProfileError> {
        let text = self.to_yaml();
        let read = HardwareProfile::from_yaml_str(&text, path)?;
        if read != self.profile {
            return Err(ProfileError::input(
                path,
                "the profile text written reads back as a different profile",
                "this is a bug in residency's profile writer; report it with the input profile",
            ));
        }
        Ok(text)
    }

    /// Writes the checked text to `path` atomically (temporary + rename).
    pub fn write(&self, path: &Path) -> Result<(), ProfileError> {
        let text = self.to_yaml_checked(path)?;
        write_atomic(path, text.as_bytes())?;
        Ok(())
    }
}
/// A NUMA node's fields as written, in order.
fn numa_fields(n: &NumaNode) -> Vec<(&'static str, String)> {
    let NumaNode {
        id,
        ram,
        reserved,
        staging,
        cores,
        gemv_bandwidth,
        stage_overhead,
        host,
    } = n;
    let mut f = vec![
        ("id", id.to_string()),
        ("ram", size_text(*ram)),
        ("reserved", size_text(*reserved)),
        ("staging", size_text(*staging)),
        ("cores", cores.to_string()),
        ("gemv_bandwidth", rate_text(*gemv_bandwidth)),
    ];
    // Written once calibrate measures it: 0 is "not modelled".
    f.extend((stage_overhead.0 > 0.0).then(|| ("stage_overhead", time_text(*stage_overhead))));
    f.extend(host.as_ref().map(|h| ("host", quoted(h))));
    f
}

/// A GPU's fields as written, in order.
fn gpu_fields(g: &Gpu) -> Vec<(&'static str, String)> {
    let Gpu {
        id,
        name,
        vram,
        reserved,
        numa,
        gemv_bandwidth,
        upload_bandwidth,
        sync_overhead,
        gemv_overhead,
        host,
    } = g;
    let mut f = vec![
        ("id", id.to_string()),
        ("name", quoted(name)),
        ("vram", size_text(*vram)),
        ("reserved", size_text(*reserved)),
        ("numa", numa.to_string()),
        ("gemv_bandwidth", rate_text(*gemv_bandwidth)),
        ("upload_bandwidth", rate_text(*upload_bandwidth)),
        ("sync_overhead", time_text(*sync_overhead)),
    ];
    f.extend((gemv_overhead.0 > 0.0).then(|| ("gemv_overhead", time_text(*gemv_overhead))));
    f.extend(host.as_ref().map(|h| ("host", quoted(h))));
    f
}

/// llama.cpp's timing fields as written, in order.
fn llama_cpp_fields(t: &LlamaCppTiming) -> Vec<(&'static str, String)> {
    let LlamaCppTiming {
        source,
        cpu_bandwidth,
        gpu_layer_overhead,
        cpu_layer_overhead,
        crossing_overhead,
        cpu_matrix_overhead,
        token_overhead,
    } = t;
    let mut f: Vec<(&'static str, String)> = source.iter().map(|s| ("source", quoted(s))).collect();
    f.extend([
        ("cpu_bandwidth", rate_text(*cpu_bandwidth)),
        ("gpu_layer_overhead", time_text(*gpu_layer_overhead)),
        ("cpu_layer_overhead", time_text(*cpu_layer_overhead)),
        ("crossing_overhead", time_text(*crossing_overhead)),
    ]);
    // Written once fitted: a profile fitted to runs of one file reads as
    // before.
    f.extend(
        (cpu_matrix_overhead.0 > 0.0)
            .then(|| ("cpu_matrix_overhead", time_text(*cpu_matrix_overhead))),
    );
    f.push(("token_overhead", time_text(*token_overhead)));
    f
}

/// A drive's fields as written, in order.
fn drive_fields(d: &Drive) -> Vec<(&'static str, String)> {
    let Drive {
        id,
        name,
        numa,
        read_bandwidth,
        read_latency,
        read_concurrency,
    } = d;
    vec![
        ("id", id.to_string()),
        ("name", quoted(name)),
        ("numa", numa.to_string()),
        ("read_bandwidth", rate_text(*read_bandwidth)),
        ("read_latency", time_text(*read_latency)),
        ("read_concurrency", read_concurrency.to_string()),
    ]
}

/// A host's fields as written, in order.
fn host_fields(h: &Host) -> Vec<(&'static str, String)> {
    let Host {
        name,
        network_bandwidth,
        network_latency,
    } = h;
    vec![
        ("name", quoted(name)),
        ("network_bandwidth", rate_text(*network_bandwidth)),
        ("network_latency", time_text(*network_latency)),
    ]
}

struct Writer<'a> {
    out: String,
    notes: &'a BTreeMap<String, Note>,
}

impl Writer<'_> {
    fn comments(&mut self, indent: usize, lines: &[String]) {
        for line in lines {
            let _ = writeln!(self.out, "{:indent$}# {line}", "");
        }
    }

    /// `key: value` at `indent` (after `prefix`, `- ` for an item's first
    /// field), with the comments of `path` above and after it.
    fn line(&mut self, indent: usize, prefix: &str, path: &str, key: &str, value: &str) {
        let note = self.notes.get(path);
        if let Some(note) = note {
            self.comments(indent, &note.above);
        }
        let mut text = format!("{:indent$}{prefix}{key}:", "");
        if !value.is_empty() {
            text.push(' ');
            text.push_str(value);
        }
        match note.and_then(|n| n.after.as_deref()) {
            Some(comment) => {
                let _ = writeln!(
                    self.out,
                    "{text:<width$} # {comment}",
                    width = COMMENT_COLUMN.max(text.len() + 1)
                );
            }
            None => {
                let _ = writeln!(self.out, "{text}");
            }
        }
    }

    /// A list in block style, `section: []` when empty.
    fn list<T>(
        &mut self,
        section: &str,
        items: &[T],
        fields: impl Fn(&T) -> Vec<(&'static str, String)>,
    ) {
        if items.is_empty() {
            self.line(0, "", section, section, "[]");
            return;
        }
        self.line(0, "", section, section, "");
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{section}[{i}]");
            if let Some(note) = self.notes.get(&item_path) {
                let lines: Vec<String> = note.above.iter().chain(&note.after).cloned().collect();
                self.comments(2, &lines);
            }
            for (k, (key, value)) in fields(item).into_iter().enumerate() {
                let (indent, prefix) = if k == 0 { (2, "- ") } else { (4, "") };
                self.line(indent, prefix, &field(section, i, key), key, &value);
            }
        }
    }
}

/// The header comment lines and each place's comments of profile text,
/// by the paths `ProfileDoc::notes` uses. Comment lines attach to the next
/// key or list item; a flow-style item (`- { id: 0, ... }`) keeps its
/// comments as the item's.
fn scan_comments(text: &str) -> (Vec<String>, BTreeMap<String, Note>) {
    let mut header = Vec::new();
    let mut notes: BTreeMap<String, Note> = BTreeMap::new();
    let mut pending: Vec<String> = Vec::new();
    let mut seen_key = false;
    // The list being read, and the index of its current item.
    let mut section: Option<(String, usize)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            let comment = comment.strip_prefix(' ').unwrap_or(comment).to_string();
            if seen_key {
                pending.push(comment);
            } else {
                header.push(comment);
            }
            continue;
        }
        seen_key = true;
        let indent = line.len() - trimmed.len();
        let (code, after) = split_comment(trimmed);
        let key_of = |code: &str| code.split(':').next().unwrap_or("").trim().to_string();
        let path = if indent == 0 {
            let key = key_of(code);
            let value = code.split_once(':').map_or("", |(_, v)| v.trim());
            section = value.is_empty().then(|| (key.clone(), usize::MAX));
            key
        } else {
            let Some((name, index)) = section.as_mut() else {
                pending.clear();
                continue;
            };
            match code.strip_prefix('-') {
                Some(rest) => {
                    *index = index.wrapping_add(1);
                    let item = format!("{name}[{index}]");
                    let rest = rest.trim();
                    let above = std::mem::take(&mut pending);
                    if rest.starts_with('{') {
                        let lines: Vec<String> = above.into_iter().chain(after).collect();
                        if !lines.is_empty() {
                            notes.entry(item).or_default().above.extend(lines);
                        }
                        continue;
                    }
                    if !above.is_empty() {
                        notes.entry(item.clone()).or_default().above = above;
                    }
                    format!("{item}.{}", key_of(rest))
                }
                None => format!("{name}[{index}].{}", key_of(code)),
            }
        };
        let above = std::mem::take(&mut pending);
        if !above.is_empty() || after.is_some() {
            notes.insert(path, Note { above, after });
        }
    }
    (header, notes)
}

/// Splits `code  # comment` at the first `#` outside quotes that follows
/// whitespace.
fn split_comment(line: &str) -> (&str, Option<String>) {
    let (mut single, mut double, mut previous) = (false, false, ' ');
    for (at, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single && previous != '\\' => double = !double,
            '#' if !single && !double && previous.is_whitespace() => {
                let comment = line[at + 1..].strip_prefix(' ').unwrap_or(&line[at + 1..]);
                return (line[..at].trim_end(), Some(comment.trim_end().to_string()));
            }
            _ => {}
        }
        previous = c;
    }
    (line.trim_end(), None)
}

/// A YAML double-quoted string (JSON's escapes are YAML's).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("strings serialise")
}

const SIZE_UNITS: [(&str, f64); 8] = [
    ("TiB", 1099511627776.0),
    ("GiB", 1073741824.0),
    ("MiB", 1048576.0),
    ("KiB", 1024.0),
    ("TB", 1e12),
    ("GB", 1e9),
    ("MB", 1e6),
    ("KB", 1e3),
];
const RATE_UNITS: [(&str, f64); 4] = [("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)];
const TIME_UNITS: [(&str, f64); 4] = [("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)];

/// `x` with `digits` significant digits (fewer decimals for larger numbers).
fn significant(x: f64, digits: i32) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let decimals = (digits - 1 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.decimals$}")
}

/// The unit of `units` (largest first) in which `value` has one to three
/// digits before the point: the largest whose figure is at least 1, else
/// the smallest.
fn unit_for(value: f64, units: &[(&'static str, f64)]) -> (&'static str, f64) {
    units
        .iter()
        .copied()
        .find(|&(_, factor)| value / factor >= 1.0)
        .unwrap_or(units[units.len() - 1])
}

/// The shortest `<figure> <unit>` (fewest significant digits, units in the
/// order given) that `reads_back` accepts; `None` for zero, which the
/// callers write in their base unit.
fn exact_text(
    value: f64,
    units: &[(&'static str, f64)],
    reads_back: impl Fn(&str) -> bool,
) -> Option<String> {
    if value == 0.0 {
        return None;
    }
    let (first, _) = unit_for(value, units);
    let preferred = units.iter().position(|(u, _)| *u == first).unwrap_or(0);
    // The natural unit first, then the others (a size may be whole in GB
    // and not in GiB).
    let order = std::iter::once(units[preferred]).chain(
        units
            .iter()
            .copied()
            .enumerate()
            .filter(move |&(i, _)| i != preferred)
            .map(|(_, u)| u),
    );
    let order: Vec<_> = order.collect();
    (1..=9).find_map(|digits| {
        order.iter().find_map(|&(unit, factor)| {
            let figure = value / factor;
            if !(1.0..1000.0).contains(&figure) && unit != first {
                return None;
            }
            let text = format!("{} {unit}", significant(figure, digits));
            reads_back(&text).then_some(text)
        })
    })
}

/// A size as the shortest unit text that reads back as the same bytes
/// (`8 GiB`, `141 GB`), else the bare number of bytes.
pub fn size_text(size: Bytes) -> String {
    exact_text(size.0 as f64, &SIZE_UNITS, |t| parse_size(t) == Ok(size))
        .unwrap_or_else(|| size.0.to_string())
}

/// A rate as the shortest unit text that reads back as the same number.
pub fn rate_text(rate: BytesPerSecond) -> String {
    exact_text(rate.0, &RATE_UNITS, |t| parse_rate(t) == Ok(rate))
        .unwrap_or_else(|| format!("{} B/s", rate.0))
}

/// A time as the shortest unit text that reads back as the same number.
pub fn time_text(time: Seconds) -> String {
    exact_text(time.0, &TIME_UNITS, |t| parse_time(t) == Ok(time))
        .unwrap_or_else(|| format!("{} s", time.0))
}

/// A share written so that it reads back exactly (`0.0`, `0.322`).
fn fraction_text(f: f64) -> String {
    let text = f.to_string();
    if text.contains('.') || text.contains('e') {
        text
    } else {
        format!("{text}.0")
    }
}

/// A measured rate rounded to four significant digits in its unit; one
/// that is not finite (a division by a log's zero) is kept as it is, for
/// the profile's own check to refuse.
pub fn round_rate(bytes_per_s: f64) -> BytesPerSecond {
    if !bytes_per_s.is_finite() {
        return BytesPerSecond(bytes_per_s);
    }
    let (unit, factor) = unit_for(bytes_per_s, &RATE_UNITS);
    parse_rate(&format!("{} {unit}", significant(bytes_per_s / factor, 4)))
        .expect("a rate written in a known unit")
}

/// A measured time rounded to four significant digits in its unit; one
/// that is not finite is kept as it is, as `round_rate` keeps a rate.
pub fn round_time(seconds: f64) -> Seconds {
    if !seconds.is_finite() {
        return Seconds(seconds);
    }
    let (unit, factor) = unit_for(seconds, &TIME_UNITS);
    parse_time(&format!("{} {unit}", significant(seconds / factor, 4)))
        .expect("a time written in a known unit")
}

/// A size rounded to 0.01 GiB (whole MiB below 1 GiB), down for
/// capacities, up for reserves; written as such, it reads back exactly.
pub fn round_size(bytes: u64, up: bool) -> Bytes {
    let (unit_bytes, steps_per_unit, unit, decimals) = if bytes >= 1 << 30 {
        (1073741824.0, 100.0, "GiB", 2)
    } else {
        (1048576.0, 1.0, "MiB", 0)
    };
    let steps = bytes as f64 / unit_bytes * steps_per_unit;
    let steps = if up { steps.ceil() } else { steps.floor() };
    let figure = steps / steps_per_unit;
    parse_size(&format!("{figure:.decimals$} {unit}")).expect("a size written in a known unit")
}

/// What a measured figure counts, for its unit in comments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    BytesPerSecond,
    Seconds,
    /// A plain number (reads at once).
    Count,
}

const COUNT_UNITS: [(&str, f64); 1] = [("", 1.0)];

/// `value` and the figures `others` in the unit of `value`, for comments:
/// (`31.2`, [`30.1`, `32.0`], `GB/s`).
pub fn figures_in_unit(
    value: f64,
    others: &[f64],
    quantity: Quantity,
) -> (String, Vec<String>, &'static str) {
    let units: &[(&'static str, f64)] = match quantity {
        Quantity::BytesPerSecond => &RATE_UNITS,
        Quantity::Seconds => &TIME_UNITS,
        Quantity::Count => &COUNT_UNITS,
    };
    let (unit, factor) = unit_for(value, units);
    let main = significant(value / factor, 3);
    let decimals = main.split_once('.').map_or(0, |(_, d)| d.len());
    let others = others
        .iter()
        .map(|v| format!("{:.decimals$}", v / factor))
        .collect();
    (main, others, unit)
}

#[cfg(test)]
mod tests;
