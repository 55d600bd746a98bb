//! PyTorch's `.pt` files, read and written without Python: the zip
//! container `torch.save` writes (stored entries under one folder:
//! `data.pkl`, `byteorder`, `data/<key>` with each storage's raw
//! little-endian elements, `version`), its pickle ([`pickle`]) and integer
//! or float tensors (int64, int32, float32, float64), views included
//! (storage offset and strides). Enough for the count tensors engines
//! exchange, no more: other dtypes and any other object are refused.

mod pickle;
#[cfg(test)]
mod tests;

pub use pickle::Value;
use std::io::{Cursor, Read, Write};

/// What is wrong and where in the file; callers add the file and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{place}: {problem}")]
pub struct PtError {
    pub place: String,
    pub problem: String,
}

impl PtError {
    fn new(place: impl Into<String>, problem: impl Into<String>) -> Self {
        PtError {
            place: place.into(),
            problem: problem.into(),
        }
    }
}

/// The element types read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    Int64,
    Int32,
    Float32,
    Float64,
}

impl DType {
    /// The storage class `torch.save` names for the dtype.
    fn storage(self) -> &'static str {
        match self {
            DType::Int64 => "LongStorage",
            DType::Int32 => "IntStorage",
            DType::Float32 => "FloatStorage",
            DType::Float64 => "DoubleStorage",
        }
    }

    fn from_storage(name: &str) -> Option<DType> {
        [DType::Int64, DType::Int32, DType::Float32, DType::Float64]
            .into_iter()
            .find(|d| d.storage() == name)
    }

    fn size_bytes(self) -> usize {
        match self {
            DType::Int64 | DType::Float64 => 8,
            DType::Int32 | DType::Float32 => 4,
        }
    }

    fn decode(self, raw: &[u8]) -> f64 {
        match self {
            DType::Int64 => i64::from_le_bytes(raw.try_into().expect("8 bytes")) as f64,
            DType::Int32 => i32::from_le_bytes(raw.try_into().expect("4 bytes")).into(),
            DType::Float32 => f32::from_le_bytes(raw.try_into().expect("4 bytes")).into(),
            DType::Float64 => f64::from_le_bytes(raw.try_into().expect("8 bytes")),
        }
    }

    fn encode(self, v: f64, out: &mut Vec<u8>) {
        match self {
            DType::Int64 => out.extend((v as i64).to_le_bytes()),
            DType::Int32 => out.extend((v as i32).to_le_bytes()),
            DType::Float32 => out.extend((v as f32).to_le_bytes()),
            DType::Float64 => out.extend(v.to_le_bytes()),
        }
    }
}

/// A dense tensor: `values` in row-major order of `shape` (integers exact
/// up to 2^53, far above any count).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub values: Vec<f64>,
}

/// The bytes every zip file starts with (a local file header).
pub const ZIP_MAGIC: &[u8; 4] = b"PK\x03\x04";

/// Reads the object a `.pt` file holds from its bytes.
pub fn read(bytes: &[u8]) -> Result<Value, PtError> {
    if !bytes.starts_with(ZIP_MAGIC) {
        let problem = if bytes.first() == Some(&0x80) {
            "a torch file in the legacy format (torch before 1.6, or _use_new_zipfile_serialization=False)"
        } else {
            "not a torch file (no zip header)"
        };
        return Err(PtError::new("byte 0", problem));
    }
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| PtError::new("zip", format!("not a readable zip: {e}")))?;
    let pickle_name = zip
        .file_names()
        .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .map(str::to_string)
        .ok_or_else(|| PtError::new("zip", "no data.pkl: a zip, but not one torch.save wrote"))?;
    let prefix = pickle_name.trim_end_matches("data.pkl").to_string();
    let mut record = |name: &str| -> Result<Option<Vec<u8>>, PtError> {
        let full = format!("{prefix}{name}");
        let mut entry = match zip.by_name(&full) {
            Ok(entry) => entry,
            Err(zip::result::ZipError::FileNotFound) => return Ok(None),
            Err(e) => return Err(PtError::new(full, format!("unreadable: {e}"))),
        };
        let mut out = Vec::with_capacity(entry.size().min(1 << 30) as usize);
        entry
            .read_to_end(&mut out)
            .map_err(|e| PtError::new(full, format!("unreadable: {e}")))?;
        Ok(Some(out))
    };
    if let Some(order) = record("byteorder")? {
        if order.trim_ascii() != b"little" {
            return Err(PtError::new(
                format!("{prefix}byteorder"),
                format!(
                    "`{}`: written on a big-endian machine",
                    String::from_utf8_lossy(&order).trim()
                ),
            ));
        }
    }
    let pickle = record("data.pkl")?.expect("its name was listed");
    pickle::load(&pickle, &mut |dtype, key| {
        let name = format!("data/{key}");
        let raw = record(&name)?.ok_or_else(|| {
            PtError::new(format!("{prefix}{name}"), "missing: the tensor's storage")
        })?;
        if raw.len() % dtype.size_bytes() != 0 {
            return Err(PtError::new(
                format!("{prefix}{name}"),
                format!(
                    "{} bytes, not whole {}-byte elements",
                    raw.len(),
                    dtype.size_bytes()
                ),
            ));
        }
        Ok(raw
            .chunks_exact(dtype.size_bytes())
            .map(|c| dtype.decode(c))
            .collect())
    })
}

/// The `.pt` bytes of a dict of named tensors, as `torch.save({name:
/// tensor, ...}, path)` writes it: `torch.load(path)` returns that dict.
pub fn write(entries: &[(&str, &Tensor)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    // torch aligns every record to 64 bytes, so a storage can be mapped.
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .with_alignment(64);
    let mut add = |name: &str, bytes: &[u8]| {
        zip.start_file(format!("archive/{name}"), options)
            .and_then(|()| zip.write_all(bytes).map_err(Into::into))
            .expect("writing to memory does not fail");
    };
    add("data.pkl", &pickle::dump(entries));
    add("byteorder", b"little");
    for (i, (_, tensor)) in entries.iter().enumerate() {
        debug_assert_eq!(tensor.values.len(), tensor.shape.iter().product::<usize>());
        let mut raw = Vec::with_capacity(tensor.values.len() * tensor.dtype.size_bytes());
        for &v in &tensor.values {
            tensor.dtype.encode(v, &mut raw);
        }
        add(&format!("data/{i}"), &raw);
    }
    add("version", b"3\n");
    zip.finish()
        .expect("writing to memory does not fail")
        .into_inner()
}
