//! Tests of `trace`.

use super::*;

fn read(text: &str, block_tokens: u32) -> Result<KvTrace, TraceError> {
    read_mooncake_str(text, Path::new("t.jsonl"), block_tokens)
}

fn line(input: u64, ids: &[u64]) -> String {
    format!(
            "{{\"timestamp\": 5, \"input_length\": {input}, \"output_length\": 3, \"hash_ids\": {ids:?}}}\n"
        )
}

#[test]
fn reads_requests_and_block_token_counts() {
    let text = line(1100, &[0, 1, 2]) + "\n" + &line(512, &[0]);
    let trace = read(&text, 512).unwrap();
    assert_eq!(trace.requests.len(), 2);
    let r = &trace.requests[0];
    assert_eq!(
        (r.arrival_ms, r.input_tokens, r.output_tokens),
        (5, 1100, 3)
    );
    // 1100 = 512 + 512 + 76.
    let counts: Vec<u32> = (0..3).map(|i| r.block_token_count(i, 512)).collect();
    assert_eq!(counts, [512, 512, 76]);
    assert_eq!(trace.total_tokens(), 1612);
    assert_eq!(trace.block_references(), 4);
}

fn error(text: &str, block_tokens: u32) -> String {
    let e = read(text, block_tokens).unwrap_err().to_string();
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn bad_lines_name_file_line_and_fix() {
    let e = error(&(line(10, &[0]) + "{\"timestamp\": 1}\n"), 512);
    assert!(e.starts_with("t.jsonl:2: not a trace request"), "{e}");
    let e = error(&line(10, &[0]).replace("}", ", \"extra\": 1}"), 512);
    assert!(e.contains("unknown field `extra`"), "{e}");
    // 1100 tokens are 3 blocks of 512 but 5 of 256.
    let e = error(&line(1100, &[0, 1, 2]), 256);
    assert!(
            e.starts_with("t.jsonl:1: 3 hash_ids for input_length 1100, which at 256 tokens per block is 5 blocks; give --block-tokens"),
            "{e}"
        );
    let e = error(&line(2000, &[0, 1, 0, 2]), 512);
    assert!(
        e.starts_with("t.jsonl:1: hash_ids repeats block id 0;"),
        "{e}"
    );
    let e = error(&(line(1024, &[0, 1]) + &line(1024, &[2, 1])), 512);
    assert!(
        e.starts_with("t.jsonl:2: block id 1 follows block 2 here but block 0 on line 1;"),
        "{e}"
    );
    let e = error("\n", 512);
    assert!(e.starts_with("t.jsonl: the trace has no requests;"), "{e}");
    assert!(error(&line(1, &[0]), 0).contains("--block-tokens 0"));
}
