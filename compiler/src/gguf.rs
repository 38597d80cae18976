//! GGUF reader: header, metadata, tensor table, alignment, tensor data.
//!
//! Written to be fuzz-safe: every read is bounds-checked, counts are checked against the bytes that remain
//! before anything is allocated, and every error names the file and what was wrong. The file is memory-mapped;
//! tensor data is handed out as slices of the map.
//!
//! Format (little-endian, versions 2 and 3): magic "GGUF", u32 version, u64 tensor count, u64 metadata count,
//! metadata key/value pairs, tensor infos (name, dims, ggml type, offset), then the tensor data, starting at
//! the next multiple of `general.alignment` (default 32) after the infos.

use memmap2::Mmap;
use opu_hw::numerics::weights::{dequantize_row, WeightFormat};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest nesting of metadata arrays accepted (real files use 1).
const MAX_ARRAY_DEPTH: u32 = 4;
/// Most dimensions of a tensor (ggml's GGML_MAX_DIMS).
const MAX_DIMS: u32 = 4;

/// What went wrong reading a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a GGUF file (magic is {found:02x?}, expected \"GGUF\")")]
    BadMagic { path: PathBuf, found: Vec<u8> },
    #[error("{path}: GGUF version {version} is not supported (expected 2 or 3)")]
    Version { path: PathBuf, version: u32 },
    #[error("{path}: truncated GGUF: {what} needs {need} bytes at offset {offset}, the file has {len}")]
    Truncated { path: PathBuf, what: String, offset: u64, need: u64, len: u64 },
    #[error("{path}: malformed GGUF: {what}")]
    Malformed { path: PathBuf, what: String },
    #[error("{path}: metadata `{key}`: {what}")]
    Metadata { path: PathBuf, key: String, what: String },
    #[error("{path}: tensor `{name}`: {what}")]
    Tensor { path: PathBuf, name: String, what: String },
}

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
    fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }
}

/// ggml tensor types (the ones this reader knows by name; others keep their number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    BF16,
    Other(u32),
}

impl GgmlType {
    fn from_u32(v: u32) -> Self {
        match v {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            9 => GgmlType::Q8_1,
            10 => GgmlType::Q2K,
            11 => GgmlType::Q3K,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            15 => GgmlType::Q8K,
            30 => GgmlType::BF16,
            other => GgmlType::Other(other),
        }
    }

    /// (elements per block, bytes per block), if known.
    pub fn block(self) -> Option<(u64, u64)> {
        Some(match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q8_1 => (32, 36),
            GgmlType::Q2K => (256, 84),
            GgmlType::Q3K => (256, 110),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
            GgmlType::Q8K => (256, 292),
            GgmlType::Other(_) => return None,
        })
    }

    /// The overlay weight format that holds this type with no loss, if any.
    pub fn weight_format(self) -> Option<WeightFormat> {
        match self {
            GgmlType::Q4_1 => Some(WeightFormat::W4Min),
            GgmlType::Q4_0 => Some(WeightFormat::W4),
            GgmlType::Q8_0 => Some(WeightFormat::W8),
            GgmlType::F16 => Some(WeightFormat::F16),
            _ => None,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgmlType::Other(v) => write!(f, "ggml type {v}"),
            t => write!(f, "{t:?}"),
        }
    }
}

/// One entry of the tensor table.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// GGUF order: `dims[0]` is the fastest-varying (the row length of a matrix).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
    /// Bytes of data (known types only).
    pub bytes: u64,
}

impl TensorInfo {
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
    /// (rows, row length) of a matrix stored row-major as GGUF does (a 1-D tensor is one row).
    pub fn matrix_shape(&self) -> (u64, u64) {
        let cols = self.dims.first().copied().unwrap_or(1);
        (self.elements() / cols.max(1), cols)
    }
}

/// An open GGUF file.
pub struct Gguf {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    data_offset: u64,
    map: Mmap,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        let end = (self.at as u64).checked_add(n).filter(|&e| e <= self.b.len() as u64);
        match end {
            Some(end) => {
                let s = &self.b[self.at..end as usize];
                self.at = end as usize;
                Ok(s)
            }
            None => Err(GgufError::Truncated {
                path: self.path.into(),
                what: what(),
                offset: self.at as u64,
                need: n,
                len: self.b.len() as u64,
            }),
        }
    }
    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        Ok(self.take(N as u64, what)?.try_into().unwrap())
    }
    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| GgufError::Malformed { path: self.path.into(), what: format!("{} is not UTF-8", what()) })
    }
    fn remaining(&self) -> u64 {
        (self.b.len() - self.at) as u64
    }
    fn value(&mut self, ty: u32, depth: u32, what: &dyn Fn() -> String) -> Result<Value, GgufError> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>(what)?[0]),
            1 => Value::I8(self.array::<1>(what)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            7 => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(GgufError::Malformed { path: self.path.into(), what: format!("{}: bool byte {b}", what()) }),
            },
            8 => Value::String(self.string(what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::Malformed { path: self.path.into(), what: format!("{}: arrays nested too deep", what()) });
                }
                let elem = self.u32(what)?;
                let count = self.u64(what)?;
                // Every element takes at least one byte: a count beyond the remaining bytes is a lie.
                if count > self.remaining() {
                    return Err(GgufError::Truncated {
                        path: self.path.into(),
                        what: format!("{} ({count} array elements)", what()),
                        offset: self.at as u64,
                        need: count,
                        len: self.b.len() as u64,
                    });
                }
                let mut v = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    v.push(self.value(elem, depth + 1, what)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            t => return Err(GgufError::Malformed { path: self.path.into(), what: format!("{}: unknown value type {t}", what()) }),
        })
    }
}

impl Gguf {
    /// Opens and parses a GGUF file (the tensor data stays mapped, unread).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.into(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process; a file truncated under us by another
        // process is the one hazard, as for every memory-mapped reader.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::parse(path, map)
    }

    fn parse(path: &Path, map: Mmap) -> Result<Self, GgufError> {
        let mut r = Reader { b: &map, at: 0, path };
        let magic = r.take(4, &|| "the magic".into()).map_err(|_| GgufError::BadMagic { path: path.into(), found: map.to_vec() })?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { path: path.into(), found: magic.to_vec() });
        }
        let version = r.u32(&|| "the version".into())?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version { path: path.into(), version });
        }
        let n_tensors = r.u64(&|| "the tensor count".into())?;
        let n_kv = r.u64(&|| "the metadata count".into())?;
        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = r.string(&|| format!("metadata key {i}"))?;
            let what = || format!("metadata `{key}`");
            let ty = r.u32(&what)?;
            let v = r.value(ty, 0, &what)?;
            metadata.insert(key, v);
        }
        // A tensor info takes at least 8 + 4 + 4 + 8 bytes.
        if n_tensors > r.remaining() / 24 {
            return Err(GgufError::Truncated {
                path: path.into(),
                what: format!("the tensor table ({n_tensors} tensors)"),
                offset: r.at as u64,
                need: n_tensors.saturating_mul(24),
                len: map.len() as u64,
            });
        }
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = r.string(&|| format!("tensor {i} name"))?;
            let what = || format!("tensor `{name}`");
            let n_dims = r.u32(&what)?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::Tensor { path: path.into(), name, what: format!("{n_dims} dimensions (expected 1..=4)") });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64(&what)?);
            }
            let ggml_type = GgmlType::from_u32(r.u32(&what)?);
            let offset = r.u64(&what)?;
            let elements = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let bytes = match (elements, ggml_type.block()) {
                (Some(n), Some((be, bb))) => {
                    if n % be != 0 || dims[0] % be != 0 {
                        return Err(GgufError::Tensor {
                            path: path.into(),
                            name,
                            what: format!("row length {} is not a multiple of the {ggml_type} block of {be}", dims[0]),
                        });
                    }
                    match (n / be).checked_mul(bb) {
                        Some(b) => b,
                        None => return Err(GgufError::Tensor { path: path.into(), name, what: format!("dimensions {dims:?} overflow") }),
                    }
                }
                (None, _) => return Err(GgufError::Tensor { path: path.into(), name, what: format!("dimensions {dims:?} overflow") }),
                (_, None) => 0,
            };
            tensors.push(TensorInfo { name, dims, ggml_type, offset, bytes });
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() => a,
                _ => {
                    return Err(GgufError::Metadata {
                        path: path.into(),
                        key: "general.alignment".into(),
                        what: "expected a power of two".into(),
                    })
                }
            },
        };
        let data_offset = (r.at as u64).div_ceil(alignment) * alignment;
        let len = map.len() as u64;
        for t in &tensors {
            if t.ggml_type.block().is_none() {
                continue; // reported when someone asks for its data
            }
            let start = data_offset.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(t.bytes));
            if t.offset % alignment != 0 || end.is_none_or(|e| e > len) {
                return Err(GgufError::Truncated {
                    path: path.into(),
                    what: format!("data of tensor `{}` ({} {:?})", t.name, t.ggml_type, t.dims),
                    offset: start.unwrap_or(u64::MAX),
                    need: t.bytes,
                    len,
                });
            }
        }
        Ok(Gguf { path: path.into(), version, metadata, tensors, alignment, data_offset, map })
    }

    /// A metadata value, or an error naming the missing key.
    pub fn get(&self, key: &str) -> Result<&Value, GgufError> {
        self.metadata.get(key).ok_or_else(|| GgufError::Metadata { path: self.path.clone(), key: key.into(), what: "missing".into() })
    }

    fn typed<'s, T>(&'s self, key: &str, f: impl Fn(&'s Value) -> Option<T>, expected: &str) -> Result<T, GgufError> {
        let v = self.get(key)?;
        f(v).ok_or_else(|| GgufError::Metadata {
            path: self.path.clone(),
            key: key.into(),
            what: format!("expected {expected}, found {}", v.type_name()),
        })
    }

    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.typed(key, Value::as_u64, "an unsigned integer")
    }
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        self.typed(key, Value::as_f64, "a number")
    }
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        self.typed(key, |v| v.as_str(), "a string")
    }
    /// A metadata array of strings.
    pub fn get_strings(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.typed(key, |v| v.as_array()?.iter().map(Value::as_str).collect(), "an array of strings")
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of a tensor.
    pub fn tensor_data(&self, t: &TensorInfo) -> Result<&[u8], GgufError> {
        if t.ggml_type.block().is_none() {
            return Err(self.tensor_error(t, format!("unknown tensor type ({})", t.ggml_type)));
        }
        let start = (self.data_offset + t.offset) as usize; // checked at open
        Ok(&self.map[start..start + t.bytes as usize])
    }

    fn tensor_error(&self, t: &TensorInfo, what: String) -> GgufError {
        GgufError::Tensor { path: self.path.clone(), name: t.name.clone(), what }
    }

    /// The tensor dequantized to f32, row-major (`dims[0]` fastest). F32, F16, BF16, Q4_0, Q4_1 and Q8_0 are
    /// exact (each weight is `q * d + m` as `opu_hw::numerics::weights` defines it); other types are an error.
    pub fn dequantize(&self, t: &TensorInfo) -> Result<Vec<f32>, GgufError> {
        let data = self.tensor_data(t)?;
        let mut out = Vec::with_capacity(t.elements() as usize);
        match t.ggml_type {
            GgmlType::F32 => out.extend(data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()))),
            GgmlType::BF16 => out.extend(data.chunks_exact(2).map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))),
            ty => match ty.weight_format() {
                Some(fmt) => dequantize_row(fmt, data, &mut out),
                None => return Err(self.tensor_error(t, format!("tensor type {ty} is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0)"))),
            },
        }
        Ok(out)
    }
}

impl fmt::Debug for Gguf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gguf")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Parses GGUF bytes held in memory (for tests and fuzzing): the bytes are copied into an anonymous map.
pub fn parse_bytes(bytes: &[u8], name: &str) -> Result<Gguf, GgufError> {
    let path = Path::new(name);
    let mut anon = memmap2::MmapMut::map_anon(bytes.len().max(1)).map_err(|source| GgufError::Io { path: path.into(), source })?;
    anon[..bytes.len()].copy_from_slice(bytes);
    let map = anon.make_read_only().map_err(|source| GgufError::Io { path: path.into(), source })?;
    // An empty input still maps one zero byte: parse a view of the true length.
    if bytes.is_empty() {
        return Err(GgufError::BadMagic { path: path.into(), found: Vec::new() });
    }
    Gguf::parse(path, map)
}

/// Builds GGUF files: for tests (truncation, corruption, tiny models) and tools.
#[derive(Default)]
pub struct GgufWriter {
    kv: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn kv(&mut self, key: &str, v: Value) -> &mut Self {
        self.kv.push((key.into(), v));
        self
    }
    /// Adds a tensor: GGUF dims (fastest first), the ggml type number and its bytes.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ggml_type: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.into(), dims.to_vec(), ggml_type, data));
        self
    }

    fn put_value(out: &mut Vec<u8>, v: &Value) {
        match v {
            Value::U8(x) => out.push(*x),
            Value::I8(x) => out.push(*x as u8),
            Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(x) => out.push(u8::from(*x)),
            Value::String(s) => {
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Value::Array(a) => {
                let elem = a.first().map(Self::type_code).unwrap_or(4);
                out.extend_from_slice(&elem.to_le_bytes());
                out.extend_from_slice(&(a.len() as u64).to_le_bytes());
                for x in a {
                    Self::put_value(out, x);
                }
            }
        }
    }

    fn type_code(v: &Value) -> u32 {
        match v {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(_) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            Self::put_value(&mut out, &Value::String(k.clone()));
            out.extend_from_slice(&Self::type_code(v).to_le_bytes());
            Self::put_value(&mut out, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for (name, dims, ty, data) in &self.tensors {
            Self::put_value(&mut out, &Value::String(name.clone()));
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len() as u64).div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT;
        }
        let data_start = out.len().div_ceil(DEFAULT_ALIGNMENT as usize) * DEFAULT_ALIGNMENT as usize;
        out.resize(data_start, 0);
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off as usize, 0);
            out.extend_from_slice(data);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", Value::String("llama".into()))
            .kv("llama.block_count", Value::U32(2))
            .kv("tokenizer.ggml.tokens", Value::Array(vec![Value::String("a".into()), Value::String("b".into())]))
            .tensor("norm", &[4], 0, [1.0f32, 2.0, -3.0, 0.5].iter().flat_map(|x| x.to_le_bytes()).collect());
        let mut q8 = vec![0u8; 34];
        q8[0..2].copy_from_slice(&0x3800u16.to_le_bytes()); // d = 0.5
        q8[2] = 4;
        q8[33] = (-2i8) as u8;
        w.tensor("m", &[32, 1], 8, q8);
        w.to_bytes()
    }

    #[test]
    fn reads_metadata_and_tensors() {
        let g = parse_bytes(&sample(), "t.gguf").unwrap();
        assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
        assert_eq!(g.get_u64("llama.block_count").unwrap(), 2);
        assert_eq!(g.get_strings("tokenizer.ggml.tokens").unwrap(), vec!["a", "b"]);
        assert_eq!(g.dequantize(g.tensor("norm").unwrap()).unwrap(), vec![1.0, 2.0, -3.0, 0.5]);
        let m = g.dequantize(g.tensor("m").unwrap()).unwrap();
        assert_eq!((m[0], m[1], m[31]), (2.0, 0.0, -1.0));
        let e = g.get_u64("general.architecture").unwrap_err().to_string();
        assert!(e.contains("t.gguf") && e.contains("expected an unsigned integer, found string"), "{e}");
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let bytes = sample();
        for cut in 0..bytes.len() {
            let e = parse_bytes(&bytes[..cut], "cut.gguf").unwrap_err().to_string();
            assert!(e.contains("cut.gguf"), "{e}");
            assert!(e.contains("truncated") || e.contains("not a GGUF file"), "cut {cut}: {e}");
        }
    }

    #[test]
    fn corrupted_fields_are_errors() {
        let mut b = sample();
        b[0] = b'X';
        assert!(parse_bytes(&b, "x").unwrap_err().to_string().contains("not a GGUF file"));
        let mut b = sample();
        b[4] = 9;
        assert!(parse_bytes(&b, "x").unwrap_err().to_string().contains("version 9"));
        // A metadata count far beyond the file.
        let mut b = sample();
        b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse_bytes(&b, "x").is_err());
        // A tensor count far beyond the file.
        let mut b = sample();
        b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(parse_bytes(&b, "x").unwrap_err().to_string().contains("the tensor table (1099511627776 tensors)"));
    }

    #[test]
    fn unknown_tensor_types_are_reported_when_used() {
        let mut w = GgufWriter::new();
        w.tensor("odd", &[32], 99, vec![0; 64]);
        let g = parse_bytes(&w.to_bytes(), "odd.gguf").unwrap();
        let e = g.dequantize(g.tensor("odd").unwrap()).unwrap_err().to_string();
        assert!(e.contains("odd.gguf") && e.contains("`odd`") && e.contains("unknown tensor type (ggml type 99)"), "{e}");
        let mut w = GgufWriter::new();
        w.tensor("k", &[256], 14, vec![0; 210]);
        let g = parse_bytes(&w.to_bytes(), "k.gguf").unwrap();
        assert!(g.dequantize(g.tensor("k").unwrap()).unwrap_err().to_string().contains("Q6K is not supported"));
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let base = sample();
        for _ in 0..20_000 {
            let mut b = base.clone();
            for _ in 0..rng.gen_range(1..8) {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
            let _ = parse_bytes(&b, "fuzz.gguf").map(|g| {
                for t in g.tensors.clone() {
                    let _ = g.dequantize(&t);
                }
            });
        }
    }
}
