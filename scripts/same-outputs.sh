#!/usr/bin/env bash
# Runs README's `plan`, `bench` and `replay` examples with two `residency`
# binaries and compares their standard output, standard error and JSON
# reports byte for byte, with timing fields masked (seconds, tok/s,
# microseconds, GB/s: what the machine measures, not what the code decides).
#
#   scripts/same-outputs.sh BASE NEW
#
# BASE and NEW are each a `residency` binary or a git revision of this
# repository; a revision is exported with `git archive` and built in
# release under $SAME_OUTPUTS_TARGET (default /tmp/same-outputs-target),
# one target directory per revision. Shared data sets come from
# ../shared (the tests' own). Exit 0 when the outputs are the same.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BASE NEW (each a residency binary or a git revision)" >&2
    exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SAME_OUTPUTS_SHARED:-$repo/../shared}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A binary path as given, or the release binary of a revision, built once.
binary_of() {
    if [ -x "$1" ] && [ -f "$1" ]; then
        realpath "$1"
        return
    fi
    local rev
    rev=$(git -C "$repo" rev-parse --short "$1")
    local src="$work/src-$rev"
    local target="${SAME_OUTPUTS_TARGET:-/tmp/same-outputs-target}/$rev"
    mkdir -p "$src"
    git -C "$repo" archive "$rev" | tar -x -C "$src"
    CARGO_TARGET_DIR="$target" cargo build --release --quiet \
        --manifest-path "$src/Cargo.toml" --bin residency >&2
    echo "$target/release/residency"
}

# A tiny Mixtral-shaped int4 model (two MoE layers of 8 experts, top-2),
# the bench tests' CPU-only profile and a 60-token routing trace in two
# categories.
write_fixture() {
    cat > "$1/tiny.yaml" <<'YAML'
name: Mixtral-tiny
layers: 2
moe_layers: "0..=1"
experts: 8
top_k: 2
hidden: 64
expert_intermediate: 32
formats:
  bf16: 12288
  int4: { bits: 4, group: 32 }
tiers: { gpu: bf16, ram: bf16, disk: bf16 }
trunk:
  - { name: attn, layers: "0..=1", bytes: 40960, stage: dense }
  - { name: lm_head, bytes: 12800, stage: head }
YAML
    cp "$repo/tests/bench/cpu-only.yaml" "$1/cpu.yaml"
    local t category base
    : > "$1/trace.jsonl"
    for t in $(seq 0 59); do
        if [ "$t" -lt 30 ]; then category=a base=0; else category=b base=4; fi
        printf '{"seq":"%s","pos":%d,"category":"%s","routes":[[%d,%d],[%d,%d]]}\n' \
            "$category" "$t" "$category" \
            $((base + (t + 1) % 4)) $((((base + (t + 1) % 4) + 1 - base) % 4 + base)) \
            $((base + (t * 3 + 3) % 4)) $((((base + (t * 3 + 3) % 4) + 2 - base) % 4 + base)) \
            >> "$1/trace.jsonl"
    done
}

# Every example, run by binary $1 in directory $2; each step's standard
# output and error land in $2/NAME.out and $2/NAME.err.
run_examples() {
    local bin=$1 dir=$2
    mkdir -p "$dir"
    write_fixture "$dir"
    cd "$dir"
    step() {
        local name=$1
        shift
        "$bin" "$@" > "$name.out" 2> "$name.err" || echo "exit $?" >> "$name.err"
    }
    step plan-readme plan \
        --profile "$repo/profiles/hardware/threadripper-3945wx-rtx3070-quadro4000.yaml" \
        --model "$repo/profiles/models/qwen3-30b-a3b.yaml" \
        --heat "$shared/data/traces/qwen3_30b_a3b_cross_lang" \
        --out plan.json --export coli-place,llama-cpp
    step explain-readme explain plan.json \
        --profile "$repo/profiles/hardware/threadripper-3945wx-rtx3070-quadro4000.yaml" \
        --model "$repo/profiles/models/qwen3-30b-a3b.yaml" \
        --heat "$shared/data/traces/qwen3_30b_a3b_cross_lang"
    step plan-default plan --out default-plan.yaml
    step gen gen-checkpoint --model tiny.yaml --out ckpt --family mixtral --dtype int4
    step plan-ckpt plan --model ckpt --profile cpu.yaml --out tiny-plan.json
    step bench bench --plan tiny-plan.json --checkpoint ckpt --profile cpu.yaml \
        --tokens 16 --json bench.json
    step bench-trace bench --plan tiny-plan.json --checkpoint ckpt --profile cpu.yaml \
        --trace trace.jsonl --tokens 16
    step replay replay --checkpoint ckpt --trace trace.jsonl \
        --policy lru,cost,replan,uniform,dynamic-offline,dynamic,resident \
        --ram-budget 25% --train-categories a --json replay.json
    step replay-vram replay --checkpoint ckpt --trace trace.jsonl \
        --policy lru,replan --vram-budget 10% --rounds 2 --per-category
    cd - > /dev/null
}

# Timing fields masked. Everywhere: the run's own directory, and the
# seconds a solve took. In `bench` and `replay` outputs (their measured
# runs): every number with a decimal point but sizes (`307.12 KiB`) and
# checksums, so counts, bytes, misses, checksums and the order of rows are
# compared; their JSON reports: the fields of seconds and rates.
mask() {
    python3 - "$1" "$2" <<'PY'
import re, sys
path, root = sys.argv[1], sys.argv[2]
name = path.rsplit('/', 1)[-1]
text = open(path, errors='replace').read().replace(root, '<dir>')
text = re.sub(r'(\bin )[0-9.]+( s of )', r'\1<t>\2', text)
text = re.sub(r'((?:solve_)?seconds"?: *)[0-9.eE+-]+', r'\1<t>', text)
measured = name.startswith(('bench', 'replay'))
if measured and name.endswith('.json'):
    text = re.sub(r'("[a-z0-9_]*(?:seconds|_ms|per_s|ratio)[a-z0-9_]*": *)-?[0-9.eE+-]+', r'\1<t>', text)
elif measured:
    out = []
    for line in text.split('\n'):
        if 'checksum' not in line:
            line = re.sub(r'(?<![0-9.])[0-9]+\.[0-9]+(e[-+]?[0-9]+)?(?![0-9.])(?! ?[KMGT]?i?B\b(?!/))', '<t>', line)
            line = re.sub(r' +', ' ', line)
        out.append(line)
    text = '\n'.join(out)
sys.stdout.write(text)
PY
}

base_bin=$(binary_of "$1")
new_bin=$(binary_of "$2")
run_examples "$base_bin" "$work/base"
run_examples "$new_bin" "$work/new"

status=0
for file in $(cd "$work/base" && ls | grep -v '^ckpt$' | sort); do
    [ -f "$work/base/$file" ] || continue
    if [ ! -f "$work/new/$file" ]; then
        echo "missing in NEW: $file"
        status=1
        continue
    fi
    if ! diff <(mask "$work/base/$file" "$work/base") <(mask "$work/new/$file" "$work/new") > "$work/diff"; then
        echo "differs: $file"
        head -20 "$work/diff"
        status=1
    fi
done
for file in $(cd "$work/new" && ls); do
    [ -e "$work/base/$file" ] || { echo "missing in BASE: $file"; status=1; }
done
if [ "$status" -eq 0 ]; then
    echo "same outputs: $(ls "$work/base" | grep -vc '^ckpt$') files of $base_bin and $new_bin (timings masked)"
fi
exit "$status"
