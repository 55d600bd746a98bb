//! Tests of `disk`.

use super::*;

fn block(n: u8, len: u64) -> DiskBlock {
    DiskBlock {
        key: BlockKey([n; KEY_BYTES]),
        parent: (n > 1).then_some(BlockKey([n - 1; KEY_BYTES])),
        tokens: 64,
        len,
    }
}

#[test]
fn blocks_round_trip_with_their_header() {
    let dir = tempfile::tempdir().unwrap();
    let (disk, found, report) = DiskDir::open(dir.path()).unwrap();
    assert!(found.is_empty() && report == OpenReport::default());
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    disk.write(&block(2, 1000), &payload).unwrap();
    assert_eq!(
        disk.read(&block(2, 0).key).unwrap(),
        (block(2, 1000), payload)
    );
    let file = std::fs::read(disk.path(&block(2, 0).key)).unwrap();
    assert_eq!(file.len(), HEADER_BYTES + 1000);
    // The layout by hand: magic, version 1, flags 1, 64 tokens, length.
    assert_eq!(&file[..4], b"RKVB");
    assert_eq!(file[4..16], [1, 0, 0, 0, 1, 0, 0, 0, 64, 0, 0, 0]);
    assert_eq!(file[16..24], 1000u64.to_le_bytes());
    let (_, found, report) = DiskDir::open(dir.path()).unwrap();
    assert_eq!(found, [block(2, 1000)]);
    assert_eq!(report.blocks, 1);
}

#[test]
fn corrupt_partial_and_temporary_files_are_discarded_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let (disk, _, _) = DiskDir::open(dir.path()).unwrap();
    let payload = vec![5u8; 300];
    for n in 1..=6 {
        disk.write(&block(n, 300), &payload).unwrap();
    }
    let path = |n: u8| disk.path(&BlockKey([n; KEY_BYTES]));
    let edit = |n: u8, f: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = std::fs::read(path(n)).unwrap();
        f(&mut bytes);
        std::fs::write(path(n), bytes).unwrap();
    };
    edit(1, &|b| b.truncate(HEADER_BYTES + 100)); // cut short
    edit(2, &|b| *b.last_mut().unwrap() ^= 1); // a flipped payload bit
    edit(3, &|b| b[12] = 65); // the tokens field: the checksum covers it
    edit(4, &|b| b.truncate(10)); // shorter than a header
                                  // 5 under another block's name.
    std::fs::rename(path(5), path(9)).unwrap();
    std::fs::write(dir.path().join(".abc.tmp77"), b"partial").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"not ours").unwrap();
    let (disk, found, report) = DiskDir::open(dir.path()).unwrap();
    assert_eq!(found, [block(6, 300)]);
    assert_eq!(report.temporaries_removed, 1);
    let mut why = report.discarded.clone();
    why.sort();
    assert_eq!(why.len(), 5, "{why:?}");
    assert!(why
        .iter()
        .any(|w| w.contains("says 300 bytes of KV, the file holds 100")));
    assert!(
        why.iter()
            .filter(|w| w.ends_with("checksum mismatch"))
            .count()
            == 2
    );
    assert!(why
        .iter()
        .any(|w| w.contains("shorter than the 88-byte header")));
    assert!(why.iter().any(|w| w.contains("the name says 09090909")));
    // Deleted, never served; what is not ours is left alone.
    assert!(disk.read(&BlockKey([2; KEY_BYTES])).is_err());
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [format!("{}.kvb", block(6, 0).key), "notes.txt".into()]
    );
    // A read verifies too: corruption after the open is caught.
    edit(6, &|b| b[HEADER_BYTES] ^= 0x80);
    let problem = disk.read(&block(6, 0).key).unwrap_err();
    assert!(problem.ends_with("checksum mismatch"), "{problem}");
}
