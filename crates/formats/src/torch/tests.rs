//! The container and pickle against hand-made bytes and hand values; the
//! files torch itself wrote are read in `tests/torch_files.rs`.

use super::pickle::{self, Value};
use super::{read, write, DType, PtError, Tensor};

fn tensor(dtype: DType, shape: &[usize], values: &[f64]) -> Tensor {
    Tensor {
        dtype,
        shape: shape.to_vec(),
        values: values.to_vec(),
    }
}

fn dict(value: Value) -> Vec<(String, Value)> {
    let Value::Dict(items) = value else {
        panic!("not a dict: {value:?}")
    };
    items
        .into_iter()
        .map(|(k, v)| match k {
            Value::Str(k) => (k, v),
            other => panic!("key {other:?}"),
        })
        .collect()
}

#[test]
fn every_dtype_round_trips_through_the_file() {
    let a = tensor(DType::Int64, &[1, 2, 3], &[0.0, 1.0, 2.0, 3.0, -4.0, 1e15]);
    let b = tensor(DType::Int32, &[2, 2], &[7.0, -7.0, 0.0, 2147483647.0]);
    let c = tensor(DType::Float32, &[3], &[0.5, -1.25, 16777216.0]);
    let d = tensor(DType::Float64, &[2, 1], &[0.1, 1e300]);
    let bytes = write(&[("a", &a), ("b", &b), ("c", &c), ("d", &d)]);
    let got = dict(read(&bytes).unwrap());
    let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    for ((_, v), want) in got.iter().zip([&a, &b, &c, &d]) {
        assert_eq!(v, &Value::Tensor(want.clone()));
    }
}

#[test]
fn the_file_has_torch_s_records_stored_and_aligned() {
    let t = tensor(DType::Int64, &[2], &[1.0, 2.0]);
    let bytes = write(&[("x", &t)]);
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(&bytes[..])).unwrap();
    let names: Vec<String> = zip.file_names().map(str::to_string).collect();
    assert_eq!(
        names,
        [
            "archive/data.pkl",
            "archive/byteorder",
            "archive/data/0",
            "archive/version"
        ]
    );
    let storage = zip.by_name("archive/data/0").unwrap();
    assert_eq!(storage.compression(), zip::CompressionMethod::Stored);
    assert_eq!(storage.data_start() % 64, 0);
    drop(storage);
    // 1 and 2 as little-endian int64, written out by hand.
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut zip.by_name("archive/data/0").unwrap(), &mut raw).unwrap();
    assert_eq!(raw, [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
}

/// A pickle of `(['x', 1, -2, 3.5, None, True, 70000, {'k': 'x'}], 'x')`
/// in protocol 2, its bytes written by hand from pickletools' opcode table
/// ('x' memoised once and read back twice).
#[test]
fn plain_values_load() {
    let mut p = vec![0x80, 2, b']', b'('];
    p.extend(b"X\x01\x00\x00\x00xq\x05");
    p.extend(b"K\x01J\xfe\xff\xff\xff");
    p.push(b'G');
    p.extend(3.5f64.to_be_bytes());
    // 70000 does not fit BININT2: LONG1 of three bytes.
    p.extend(b"N\x88\x8a\x03\x70\x11\x01}X\x01\x00\x00\x00kh\x05seh\x05\x86.");
    let got = pickle::load(&p, &mut |_, _| unreachable!("no storage")).unwrap();
    let x = || Value::Str("x".into());
    let list = Value::List(vec![
        x(),
        Value::Int(1),
        Value::Int(-2),
        Value::Float(3.5),
        Value::None,
        Value::Bool(true),
        Value::Int(70000),
        Value::Dict(vec![(Value::Str("k".into()), x())]),
    ]);
    assert_eq!(got, Value::Tuple(vec![list, x()]));
    // A list memoised empty and read back after it was filled: refused,
    // not read as the empty copy.
    let shared = b"\x80\x02]q\x00K\x01ah\x00.";
    let err = pickle::load(shared, &mut |_, _| unreachable!()).unwrap_err();
    assert!(err.problem.contains("referenced twice"), "{err}");
}

#[test]
fn strided_views_gather_by_offset_and_stride() {
    // Storage 0..12 as a 3x4 matrix; the view is its transpose from
    // offset 1, size [3, 2], stride [1, 4]: elements 1, 5, 2, 6, 3, 7.
    let mut p = vec![0x80, 2];
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n(");
    p.extend(b"(X\x07\x00\x00\x00storagectorch\nDoubleStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x0ctQ");
    p.extend(b"K\x01K\x03K\x02\x86K\x01K\x04\x86\x89ccollections\nOrderedDict\n)RtR.");
    let storage: Vec<f64> = (0..12).map(f64::from).collect();
    let got = pickle::load(&p, &mut |dtype, key| {
        assert_eq!((dtype, key), (DType::Float64, "0"));
        Ok(storage.clone())
    })
    .unwrap();
    assert_eq!(
        got,
        Value::Tensor(tensor(
            DType::Float64,
            &[3, 2],
            &[1.0, 5.0, 2.0, 6.0, 3.0, 7.0]
        ))
    );
    // Offset 5 puts the last element at 5 + 2 + 4 = 11: inside; offset 6 is not.
    let past = [&p[..], b""].concat();
    let at = past.windows(4).position(|w| w == b"K\x01K\x03").unwrap();
    let mut past = past;
    past[at + 1] = 6;
    let err = pickle::load(&past, &mut |_, _| Ok(storage.clone())).unwrap_err();
    assert!(
        err.problem.contains("reaches past its 12 elements"),
        "{err}"
    );
}

#[test]
fn bad_files_are_refused_with_the_place() {
    let cases: [(&[u8], &str); 4] = [
        (b"", "no zip header"),
        (b"\x80\x02\x8a\x0alegacy", "legacy format"),
        (b"PK\x03\x04garbage", "not a readable zip"),
        (b"{\"logical_count\": []}", "no zip header"),
    ];
    for (bytes, want) in cases {
        let err: PtError = read(bytes).unwrap_err();
        assert!(err.problem.contains(want), "{want}: {err}");
    }
    // A call of anything but the tensor rebuild and OrderedDict.
    let evil = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00lsK\x00\x86R.";
    let err = pickle::load(evil, &mut |_, _| unreachable!()).unwrap_err();
    assert!(err.problem.contains("a call of os.system"), "{err}");
    // A half16 tensor's storage class.
    let half = b"\x80\x02(X\x07\x00\x00\x00storagectorch\nHalfStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQ.";
    let err = pickle::load(half, &mut |_, _| unreachable!()).unwrap_err();
    assert!(err.problem.contains("HalfStorage"), "{err}");
    // Cut short inside an opcode.
    let err = pickle::load(b"\x80\x02X\x05\x00\x00\x00ab", &mut |_, _| unreachable!()).unwrap_err();
    assert!(err.problem.contains("inside an opcode"), "{err}");
}
