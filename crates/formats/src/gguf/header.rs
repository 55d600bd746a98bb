//! One GGUF file's header (versions 2 and 3, little-endian): the metadata
//! key/values, the tensor infos and where the data starts. Only the header
//! is read, never the tensor data; every count and length is checked
//! against what is left of the file before anything is allocated, and every
//! tensor's bytes must lie inside the file.

use super::ggml_type::GgmlType;
use residency_core::error::PlannerError;
use residency_core::plan::sha256_hex;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    /// The value as a whole number, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Uint(v) => Some(v),
            Value::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

/// A value as an error line shows it: numbers and booleans as they are,
/// strings quoted, arrays by their length.
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Uint(v) => write!(f, "{v}"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(items) => write!(f, "an array of {}", items.len()),
        }
    }
}

/// One tensor's info: its name, dimensions (innermost first), type and the
/// byte range of its data in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the file.
    pub file_offset: u64,
    pub bytes: u64,
}

/// A GGUF file's header.
#[derive(Debug, Clone)]
pub struct Header {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    /// sha256 of the header's bytes: the file's identity without reading
    /// its data.
    pub sha256: String,
}

impl Header {
    /// Reads the header of the GGUF file at `path`.
    pub fn read(path: &Path) -> Result<Header, PlannerError> {
        let file = File::open(path).map_err(|e| {
            PlannerError::input(
                path,
                "file",
                format!("cannot be opened: {e}"),
                "give the path of a GGUF file",
            )
        })?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut r = Reader {
            inner: BufReader::with_capacity(1 << 20, file),
            path,
            at: 0,
            len,
            read: Vec::new(),
        };
        r.header()
    }
}

/// A bounded little-endian reader that names the byte offset in errors.
struct Reader<'a> {
    inner: BufReader<File>,
    path: &'a Path,
    at: u64,
    len: u64,
    /// The header's bytes so far, for its sha256.
    read: Vec<u8>,
}

impl Reader<'_> {
    fn bad(&self, problem: impl Into<String>, fix: &str) -> PlannerError {
        PlannerError::input(self.path, format!("byte {}", self.at), problem, fix)
    }

    /// A metadata key or tensor name at byte `at` that came before: llama.cpp
    /// refuses such a file, and which one counts would be a guess.
    fn duplicate(&self, at: u64, what: &str, name: &str) -> PlannerError {
        PlannerError::input(
            self.path,
            format!("byte {at}"),
            format!("repeats the {what} `{name}`"),
            "convert the model again with llama.cpp",
        )
    }

    fn truncated(&self, what: &str) -> PlannerError {
        self.bad(
            format!("ends inside the header ({what}): the file is truncated"),
            "download or convert the file again",
        )
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>, PlannerError> {
        if n > self.len.saturating_sub(self.at) {
            return Err(self.truncated(what));
        }
        let mut buf = vec![0u8; n as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|_| self.truncated(what))?;
        self.at += n;
        self.read.extend_from_slice(&buf);
        Ok(buf)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], PlannerError> {
        let b = self.bytes(N as u64, what)?;
        Ok(b.try_into().expect("read N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32, PlannerError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, PlannerError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, PlannerError> {
        let n = self.u64(what)?;
        let b = self.bytes(n, what)?;
        String::from_utf8(b).map_err(|_| {
            self.bad(
                format!("{what} is not UTF-8"),
                "download or convert the file again",
            )
        })
    }

    fn header(&mut self) -> Result<Header, PlannerError> {
        let version = self.version()?;
        let tensor_count = self.u64("tensor count")?;
        let kv_count = self.u64("metadata count")?;
        let mut metadata = BTreeMap::new();
        for _ in 0..kv_count {
            let at = self.at;
            let key = self.string("metadata key")?;
            let kind = self.u32("metadata type")?;
            let value = self.value(kind, &key)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(self.duplicate(at, "metadata key", &key));
            }
        }
        let alignment = self.alignment(&metadata)?;
        let mut infos = Vec::new();
        let mut names = std::collections::HashSet::new();
        for _ in 0..tensor_count {
            let at = self.at;
            let info = self.tensor_info()?;
            if !names.insert(info.0.clone()) {
                return Err(self.duplicate(at, "tensor", &info.0));
            }
            infos.push(info);
        }
        let data_start = self.at.div_ceil(alignment) * alignment;
        let tensors = infos
            .into_iter()
            .map(|info| self.locate(info, data_start, alignment))
            .collect::<Result<_, _>>()?;
        Ok(Header {
            path: self.path.to_path_buf(),
            version,
            metadata,
            tensors,
            sha256: sha256_hex(&self.read),
        })
    }

    /// The magic and a version this reader knows (2 or 3).
    fn version(&mut self) -> Result<u32, PlannerError> {
        let magic = self.array::<4>("magic")?;
        if &magic != MAGIC {
            return Err(PlannerError::input(
                self.path,
                "byte 0",
                format!(
                    "starts with {:?}, not the GGUF magic \"GGUF\"",
                    String::from_utf8_lossy(&magic)
                ),
                "give a GGUF file (llama.cpp's model format)",
            ));
        }
        match self.u32("version")? {
            v @ (2 | 3) => Ok(v),
            1 => Err(self.bad(
                "is GGUF version 1, whose 32-bit counts no current llama.cpp reads",
                "convert the model again with a current llama.cpp",
            )),
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => Err(self.bad(
                "is a big-endian GGUF file",
                "use the little-endian file llama.cpp's converter writes by default",
            )),
            v => Err(self.bad(
                format!("has GGUF version {v}; versions 2 and 3 are read"),
                "convert the model again with llama.cpp",
            )),
        }
    }

    /// `general.alignment`, else GGUF's default of 32 bytes.
    fn alignment(&self, metadata: &BTreeMap<String, Value>) -> Result<u64, PlannerError> {
        match metadata.get("general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() => Ok(a),
                _ => Err(self.bad(
                    format!("general.alignment is {v:?}, not a power of two"),
                    "convert the model again with llama.cpp",
                )),
            },
        }
    }

    /// A tensor's bytes and where they lie, which must be inside the file.
    fn locate(
        &self,
        (name, dims, ggml_type, offset): (String, Vec<u64>, GgmlType, u64),
        data_start: u64,
        alignment: u64,
    ) -> Result<TensorInfo, PlannerError> {
        let place = |problem: String, fix: &str| {
            PlannerError::input(self.path, format!("tensor {name}"), problem, fix)
        };
        if offset % alignment != 0 {
            return Err(place(
                format!("has data offset {offset}, not a multiple of the alignment {alignment}"),
                "convert the model again with llama.cpp",
            ));
        }
        let bytes = ggml_type
            .tensor_bytes(&dims)
            .map_err(|p| place(p, "convert the model again with llama.cpp"))?;
        let file_offset = data_start.checked_add(offset);
        match (file_offset, file_offset.and_then(|o| o.checked_add(bytes))) {
            (Some(file_offset), Some(end)) if end <= self.len => Ok(TensorInfo {
                name,
                dims,
                ggml_type,
                file_offset,
                bytes,
            }),
            _ => Err(place(
                format!(
                    "has its {bytes} bytes at offset {offset} of the data, past the end of the {}-byte file",
                    self.len
                ),
                "the file is truncated: download or convert it again",
            )),
        }
    }

    fn tensor_info(&mut self) -> Result<(String, Vec<u64>, GgmlType, u64), PlannerError> {
        let name = self.string("tensor name")?;
        let n_dims = self.u32("tensor dimensions")?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(self.bad(
                format!("tensor {name} has {n_dims} dimensions; ggml allows 1 to {MAX_DIMS}"),
                "convert the model again with llama.cpp",
            ));
        }
        let dims = (0..n_dims)
            .map(|_| self.u64("tensor dimension"))
            .collect::<Result<Vec<_>, _>>()?;
        let id = self.u32("tensor type")?;
        let ggml_type = GgmlType::from_id(id).ok_or_else(|| {
            self.bad(
                format!("tensor {name} has ggml type {id}, which this version does not know"),
                "requantize the model to a listed type (F16, BF16, Q4_0 ... Q8_0, the K-quants, IQ types, MXFP4), or update residency",
            )
        })?;
        let offset = self.u64("tensor offset")?;
        Ok((name, dims, ggml_type, offset))
    }

    fn value(&mut self, kind: u32, key: &str) -> Result<Value, PlannerError> {
        Ok(match kind {
            0 => Value::Uint(self.array::<1>(key)?[0] as u64),
            1 => Value::Int(self.array::<1>(key)?[0] as i8 as i64),
            2 => Value::Uint(u16::from_le_bytes(self.array(key)?) as u64),
            3 => Value::Int(i16::from_le_bytes(self.array(key)?) as i64),
            4 => Value::Uint(self.u32(key)? as u64),
            5 => Value::Int(i32::from_le_bytes(self.array(key)?) as i64),
            6 => Value::Float(f32::from_le_bytes(self.array(key)?) as f64),
            7 => Value::Bool(self.array::<1>(key)?[0] != 0),
            8 => Value::String(self.string(key)?),
            9 => {
                let item = self.u32(key)?;
                let count = self.u64(key)?;
                // Every item takes a byte at least: a count beyond the
                // file is a truncation, not an allocation.
                if count > self.len.saturating_sub(self.at) {
                    return Err(self.truncated(key));
                }
                let mut items = Vec::with_capacity(count.min(1 << 20) as usize);
                for _ in 0..count {
                    items.push(self.value(item, key)?);
                }
                Value::Array(items)
            }
            10 => Value::Uint(self.u64(key)?),
            11 => Value::Int(i64::from_le_bytes(self.array(key)?)),
            12 => Value::Float(f64::from_le_bytes(self.array(key)?)),
            k => {
                return Err(self.bad(
                    format!("metadata `{key}` has value type {k}, which GGUF does not define"),
                    "convert the model again with llama.cpp",
                ))
            }
        })
    }
}
