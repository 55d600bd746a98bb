//! The part of Python's pickle that `torch.save` emits for a dict, list or
//! tuple of tensors and plain values (protocols 2 to 5): a stack machine
//! that calls no code. The only callables it knows are torch's tensor
//! rebuild and `collections.OrderedDict`; anything else is refused.
//! Opcodes are those of CPython's `Lib/pickletools.py`.

use super::{DType, PtError, Tensor};
use std::collections::HashMap;

/// A value of the pickle. `Global` and `Storage` only live on the stack
/// until a rebuild consumes them.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    /// Keys and values in pickle order (a dict or an `OrderedDict`).
    Dict(Vec<(Value, Value)>),
    Tensor(Tensor),
    /// `module.name` of a GLOBAL.
    Global(String),
    /// A storage reference: `('storage', torch.XStorage, key, location, numel)`.
    Storage {
        dtype: DType,
        key: String,
    },
}

impl Value {
    /// What the value is, for errors: `a dict`, `a tensor`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an int",
            Value::Float(_) => "a float",
            Value::Str(_) => "a str",
            Value::Tuple(_) => "a tuple",
            Value::List(_) => "a list",
            Value::Dict(_) => "a dict",
            Value::Tensor(_) => "a tensor",
            Value::Global(_) => "a global",
            Value::Storage { .. } => "a storage",
        }
    }
}

const REBUILD_TENSOR: &str = "torch._utils._rebuild_tensor_v2";
const ORDERED_DICT: &str = "collections.OrderedDict";

/// Gives a storage's elements by dtype and key (`data/<key>` of the zip).
pub type Storages<'a> = dyn FnMut(DType, &str) -> Result<Vec<f64>, PtError> + 'a;

enum Slot {
    Mark,
    Value(Value),
}

/// Runs the pickle `bytes`; `storage(dtype, key)` gives a storage's values.
pub fn load(bytes: &[u8], storage: &mut Storages) -> Result<Value, PtError> {
    let mut m = Machine {
        bytes,
        at: 0,
        stack: Vec::new(),
        memo: HashMap::new(),
    };
    loop {
        let op_at = m.at;
        let op = m.take(1)?[0];
        if op == b'.' {
            return m.pop_value(op_at);
        }
        let done = m.scalar(op, op_at)? || m.memo_op(op, op_at)? || m.build(op, op_at, storage)?;
        if !done {
            return Err(err_at(
                op_at,
                format!("pickle opcode 0x{op:02x}, which torch.save does not write for tensors and plain values"),
            ));
        }
    }
}

/// A problem of the opcode at byte `op_at`.
fn err_at(op_at: usize, problem: String) -> PtError {
    PtError::new(format!("data.pkl byte {op_at}"), problem)
}

impl Machine<'_> {
    /// The protocol and frame, marks, and the values an opcode pushes: empty
    /// containers, None, bools, ints, floats, strings and globals; false for
    /// any other opcode.
    fn scalar(&mut self, op: u8, op_at: usize) -> Result<bool, PtError> {
        match op {
            0x80 => {
                let proto = self.take(1)?[0];
                if !(2..=5).contains(&proto) {
                    return Err(err_at(
                        op_at,
                        format!("pickle protocol {proto}; torch.save writes 2"),
                    ));
                }
            }
            0x95 => drop(self.take(8)?), // FRAME: a length hint
            b'(' => self.stack.push(Slot::Mark),
            b'}' => self.push(Value::Dict(Vec::new())),
            b']' => self.push(Value::List(Vec::new())),
            b')' => self.push(Value::Tuple(Vec::new())),
            b'N' => self.push(Value::None),
            0x88 => self.push(Value::Bool(true)),
            0x89 => self.push(Value::Bool(false)),
            b'K' => {
                let v = self.take(1)?[0];
                self.push(Value::Int(v.into()))
            }
            b'M' => {
                let v = u16::from_le_bytes(self.array()?);
                self.push(Value::Int(v.into()))
            }
            b'J' => {
                let v = i32::from_le_bytes(self.array()?);
                self.push(Value::Int(v.into()))
            }
            0x8a => {
                let n = self.take(1)?[0] as usize;
                let raw = self.take(n)?;
                if n > 8 {
                    return Err(err_at(op_at, format!("an integer of {n} bytes")));
                }
                // Two's complement, little-endian, sign-extended.
                let fill = if raw.last().is_some_and(|b| b & 0x80 != 0) {
                    0xff
                } else {
                    0
                };
                let mut le = [fill; 8];
                le[..n].copy_from_slice(raw);
                self.push(Value::Int(i64::from_le_bytes(le)))
            }
            b'G' => {
                let v = f64::from_be_bytes(self.array()?);
                self.push(Value::Float(v))
            }
            b'X' => {
                let n = u32::from_le_bytes(self.array()?) as usize;
                let s = self.text(n, op_at)?;
                self.push(Value::Str(s))
            }
            0x8c | b'U' => {
                let n = self.take(1)?[0] as usize;
                let s = self.text(n, op_at)?;
                self.push(Value::Str(s))
            }
            0x8d | b'T' => {
                let n = if op == b'T' {
                    u32::from_le_bytes(self.array()?) as usize
                } else {
                    usize::try_from(u64::from_le_bytes(self.array()?))
                        .map_err(|_| err_at(op_at, "a string longer than memory".into()))?
                };
                let s = self.text(n, op_at)?;
                self.push(Value::Str(s))
            }
            b'c' => {
                let module = self.line(op_at)?;
                let name = self.line(op_at)?;
                self.push(Value::Global(format!("{module}.{name}")))
            }
            0x93 => {
                let name = self.pop_str(op_at)?;
                let module = self.pop_str(op_at)?;
                self.push(Value::Global(format!("{module}.{name}")))
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The memo: the top of the stack put under a key, or a key's value
    /// pushed; false for any other opcode.
    fn memo_op(&mut self, op: u8, op_at: usize) -> Result<bool, PtError> {
        match op {
            b'q' => {
                let k = self.take(1)?[0].into();
                self.memo_put(k, op_at)?
            }
            b'r' => {
                let k = u32::from_le_bytes(self.array()?);
                self.memo_put(k, op_at)?
            }
            0x94 => {
                let k = self.memo.len() as u32;
                self.memo_put(k, op_at)?
            }
            b'h' | b'j' => {
                let k = if op == b'h' {
                    self.take(1)?[0].into()
                } else {
                    u32::from_le_bytes(self.array()?)
                };
                let v =
                    self.memo.get(&k).cloned().ok_or_else(|| {
                        err_at(op_at, format!("memo {k} read before it is written"))
                    })?;
                // The memo holds copies: a list or dict filled after it was
                // memoised would be read empty, so one read twice is refused.
                if matches!(v, Value::List(_) | Value::Dict(_)) {
                    return Err(err_at(op_at,
                            "a list or dict referenced twice, which torch.save does not write for tensors and plain values".into(),
                        ));
                }
                self.push(v)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Containers built and filled from the stack, persistent storages
    /// resolved, and globals called; false for any other opcode.
    fn build(&mut self, op: u8, op_at: usize, storage: &mut Storages) -> Result<bool, PtError> {
        match op {
            b't' => {
                let items = self.pop_mark(op_at)?;
                self.push(Value::Tuple(items))
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                if self.stack.len() < n {
                    return Err(err_at(
                        op_at,
                        "a tuple of more items than the stack holds".into(),
                    ));
                }
                let mut items = Vec::with_capacity(n);
                for slot in self.stack.split_off(self.stack.len() - n) {
                    match slot {
                        Slot::Value(v) => items.push(v),
                        Slot::Mark => return Err(err_at(op_at, "a mark inside a tuple".into())),
                    }
                }
                self.push(Value::Tuple(items))
            }
            b'a' => {
                let v = self.pop_value(op_at)?;
                self.extend_list(vec![v], op_at)?
            }
            b'e' => {
                let items = self.pop_mark(op_at)?;
                self.extend_list(items, op_at)?
            }
            b's' => {
                let v = self.pop_value(op_at)?;
                let k = self.pop_value(op_at)?;
                self.extend_dict(vec![k, v], op_at)?
            }
            b'u' => {
                let items = self.pop_mark(op_at)?;
                self.extend_dict(items, op_at)?
            }
            b'Q' => {
                let id = self.pop_value(op_at)?;
                let v = storage_ref(id).map_err(|problem| err_at(op_at, problem))?;
                self.push(v)
            }
            b'R' => {
                let args = self.pop_value(op_at)?;
                let callable = self.pop_value(op_at)?;
                let v = reduce(callable, args, storage).map_err(|e| match e {
                    Reduce::Bad(problem) => err_at(op_at, problem),
                    Reduce::Storage(e) => e,
                })?;
                self.push(v)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

struct Machine<'a> {
    bytes: &'a [u8],
    at: usize,
    stack: Vec<Slot>,
    memo: HashMap<u32, Value>,
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PtError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(PtError::new(
                "data.pkl",
                format!("ends at byte {} inside an opcode", self.bytes.len()),
            ));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PtError> {
        Ok(self.take(N)?.try_into().expect("N bytes taken"))
    }

    fn text(&mut self, n: usize, op_at: usize) -> Result<String, PtError> {
        let raw = self.take(n)?;
        String::from_utf8(raw.to_vec()).map_err(|_| {
            PtError::new(
                format!("data.pkl byte {op_at}"),
                "a string that is not UTF-8",
            )
        })
    }

    fn line(&mut self, op_at: usize) -> Result<String, PtError> {
        let rest = &self.bytes[self.at..];
        let n = rest.iter().position(|&b| b == b'\n').ok_or_else(|| {
            PtError::new(
                format!("data.pkl byte {op_at}"),
                "a GLOBAL without its newline",
            )
        })?;
        let s = self.text(n, op_at)?;
        self.at += 1;
        Ok(s)
    }

    fn push(&mut self, v: Value) {
        self.stack.push(Slot::Value(v));
    }

    fn pop_value(&mut self, op_at: usize) -> Result<Value, PtError> {
        match self.stack.pop() {
            Some(Slot::Value(v)) => Ok(v),
            _ => Err(PtError::new(
                format!("data.pkl byte {op_at}"),
                "an opcode takes a value from an empty stack",
            )),
        }
    }

    fn pop_str(&mut self, op_at: usize) -> Result<String, PtError> {
        match self.pop_value(op_at)? {
            Value::Str(s) => Ok(s),
            other => Err(PtError::new(
                format!("data.pkl byte {op_at}"),
                format!("STACK_GLOBAL on {}, not a str", other.kind()),
            )),
        }
    }

    /// The values above the topmost mark, which is removed.
    fn pop_mark(&mut self, op_at: usize) -> Result<Vec<Value>, PtError> {
        let Some(mark) = self.stack.iter().rposition(|s| matches!(s, Slot::Mark)) else {
            return Err(PtError::new(
                format!("data.pkl byte {op_at}"),
                "an opcode needs a mark that is not on the stack",
            ));
        };
        let items = self.stack.split_off(mark + 1);
        self.stack.pop();
        Ok(items
            .into_iter()
            .map(|s| match s {
                Slot::Value(v) => v,
                Slot::Mark => unreachable!("the topmost mark is below these"),
            })
            .collect())
    }

    fn memo_put(&mut self, k: u32, op_at: usize) -> Result<(), PtError> {
        match self.stack.last() {
            Some(Slot::Value(v)) => {
                self.memo.insert(k, v.clone());
                Ok(())
            }
            _ => Err(PtError::new(
                format!("data.pkl byte {op_at}"),
                "a memo put with no value on the stack",
            )),
        }
    }

    fn extend_list(&mut self, items: Vec<Value>, op_at: usize) -> Result<(), PtError> {
        match self.stack.last_mut() {
            Some(Slot::Value(Value::List(list))) => {
                list.extend(items);
                Ok(())
            }
            _ => Err(PtError::new(
                format!("data.pkl byte {op_at}"),
                "APPEND to something that is not a list",
            )),
        }
    }

    fn extend_dict(&mut self, items: Vec<Value>, op_at: usize) -> Result<(), PtError> {
        if !items.len().is_multiple_of(2) {
            return Err(PtError::new(
                format!("data.pkl byte {op_at}"),
                "SETITEMS with a key but no value",
            ));
        }
        match self.stack.last_mut() {
            Some(Slot::Value(Value::Dict(dict))) => {
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    dict.push((k, v));
                }
                Ok(())
            }
            _ => Err(PtError::new(
                format!("data.pkl byte {op_at}"),
                "SETITEM on something that is not a dict",
            )),
        }
    }
}

/// A persistent id: `('storage', torch.XStorage, key, location, numel)`.
fn storage_ref(id: Value) -> Result<Value, String> {
    let Value::Tuple(items) = id else {
        return Err(format!("a persistent id that is {}", id.kind()));
    };
    match items.as_slice() {
        [Value::Str(tag), Value::Global(class), Value::Str(key), _, _] if tag == "storage" => {
            let name = class.strip_prefix("torch.").unwrap_or(class);
            let dtype = DType::from_storage(name).ok_or_else(|| {
                format!(
                    "a tensor of {name}; only int64, int32, float32 and float64 tensors are read"
                )
            })?;
            Ok(Value::Storage {
                dtype,
                key: key.clone(),
            })
        }
        _ => Err("a persistent id that is not a torch storage".into()),
    }
}

enum Reduce {
    Bad(String),
    Storage(PtError),
}

/// Calls one of the two callables a tensor file holds.
fn reduce(callable: Value, args: Value, storage: &mut Storages) -> Result<Value, Reduce> {
    let Value::Global(name) = callable else {
        return Err(Reduce::Bad(format!("a call of {}", callable.kind())));
    };
    let Value::Tuple(args) = args else {
        return Err(Reduce::Bad(format!(
            "{name} called without an argument tuple"
        )));
    };
    match name.as_str() {
        ORDERED_DICT if args.is_empty() => Ok(Value::Dict(Vec::new())),
        REBUILD_TENSOR => {
            // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
            let [Value::Storage { dtype, key }, Value::Int(offset), Value::Tuple(size), Value::Tuple(stride), ..] =
                args.as_slice()
            else {
                return Err(Reduce::Bad(format!(
                    "{name} with arguments other than (storage, offset, size, stride, ...)"
                )));
            };
            let ints = |t: &[Value], what: &str| -> Result<Vec<usize>, Reduce> {
                t.iter()
                    .map(|v| match v {
                        Value::Int(i) if *i >= 0 => Ok(*i as usize),
                        _ => Err(Reduce::Bad(format!("a tensor {what} that is not a non-negative int"))),
                    })
                    .collect()
            };
            if *offset < 0 {
                return Err(Reduce::Bad(format!("a tensor at storage offset {offset}")));
            }
            let shape = ints(size, "size")?;
            let stride = ints(stride, "stride")?;
            if shape.len() != stride.len() {
                return Err(Reduce::Bad(format!(
                    "a tensor of {} dimensions with {} strides",
                    shape.len(),
                    stride.len()
                )));
            }
            let data = storage(*dtype, key).map_err(Reduce::Storage)?;
            let values = gather(&data, *offset as usize, &shape, &stride).ok_or_else(|| {
                Reduce::Bad(format!(
                    "a tensor view of storage {key} (offset {offset}, size {shape:?}, stride {stride:?}) reaches past its {} elements",
                    data.len()
                ))
            })?;
            Ok(Value::Tensor(Tensor {
                dtype: *dtype,
                shape,
                values,
            }))
        }
        _ => Err(Reduce::Bad(format!(
            "a call of {name}, which is not a tensor or a dict (a torch file of counts holds only those)"
        ))),
    }
}

/// The elements of a strided view, in row-major order of `shape`; `None`
/// where one falls outside `data`.
fn gather(data: &[f64], offset: usize, shape: &[usize], stride: &[usize]) -> Option<Vec<f64>> {
    let count: usize = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    if count == 0 {
        return Some(Vec::new());
    }
    // The view's last element, checked before any is read.
    let last = shape
        .iter()
        .zip(stride)
        .try_fold(offset, |a, (&d, &s)| a.checked_add((d - 1).checked_mul(s)?))?;
    if last >= data.len() {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    let mut index = vec![0usize; shape.len()];
    for _ in 0..count {
        let at: usize = offset + index.iter().zip(stride).map(|(i, s)| i * s).sum::<usize>();
        out.push(data[at]);
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Some(out)
}

/// A pickle (protocol 2, as `torch.save` writes) of a dict of tensors, the
/// `i`th tensor's storage named `i`.
pub fn dump(entries: &[(&str, &Tensor)]) -> Vec<u8> {
    let mut out = vec![0x80, 2, b'}'];
    if !entries.is_empty() {
        out.push(b'(');
    }
    for (i, (name, tensor)) in entries.iter().enumerate() {
        unicode(&mut out, name);
        global(&mut out, REBUILD_TENSOR);
        out.push(b'(');
        // The persistent id of the storage.
        out.push(b'(');
        unicode(&mut out, "storage");
        global(&mut out, &format!("torch.{}", tensor.dtype.storage()));
        unicode(&mut out, &i.to_string());
        unicode(&mut out, "cpu");
        int(&mut out, tensor.values.len() as i64);
        out.extend([b't', b'Q']);
        int(&mut out, 0);
        ints_tuple(&mut out, &tensor.shape);
        ints_tuple(&mut out, &contiguous_stride(&tensor.shape));
        out.push(0x89); // requires_grad = False
        global(&mut out, ORDERED_DICT);
        out.extend([b')', b'R']); // backward_hooks = OrderedDict()
        out.extend([b't', b'R']);
    }
    if !entries.is_empty() {
        out.push(b'u');
    }
    out.push(b'.');
    out
}

/// Row-major strides of `shape`, in elements.
fn contiguous_stride(shape: &[usize]) -> Vec<usize> {
    let mut stride = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        stride[d] = stride[d + 1] * shape[d + 1];
    }
    stride
}

fn unicode(out: &mut Vec<u8>, s: &str) {
    out.push(b'X');
    out.extend((s.len() as u32).to_le_bytes());
    out.extend(s.as_bytes());
}

fn global(out: &mut Vec<u8>, qualified: &str) {
    let (module, name) = qualified.rsplit_once('.').expect("module.name");
    out.push(b'c');
    out.extend(module.as_bytes());
    out.push(b'\n');
    out.extend(name.as_bytes());
    out.push(b'\n');
}

fn int(out: &mut Vec<u8>, v: i64) {
    match v {
        0..=0xff => out.extend([b'K', v as u8]),
        0x100..=0xffff => {
            out.push(b'M');
            out.extend((v as u16).to_le_bytes());
        }
        _ if i32::try_from(v).is_ok() => {
            out.push(b'J');
            out.extend((v as i32).to_le_bytes());
        }
        _ => {
            out.extend([0x8a, 8]);
            out.extend(v.to_le_bytes());
        }
    }
}

fn ints_tuple(out: &mut Vec<u8>, values: &[usize]) {
    out.push(b'(');
    for &v in values {
        int(out, v as i64);
    }
    out.push(b't');
}
