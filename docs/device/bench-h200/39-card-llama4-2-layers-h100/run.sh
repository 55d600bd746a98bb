#!/bin/bash
# Llama-4 Maverick cut to 2 MoE layers, int4, on the card: ARMS (default lfru lru plan replan belady), one run each a round
# (A..E E..A), held out (train abstract_algebra; anatomy and astronomy served, 256 tokens each, seeded by the last 48 of the
# training category), RAM lru at 25 %. The profile calibrated on DeepSeek-V2-Lite's experts (4 layers): calibrate times
# stacked experts. Usage: run_l4.sh BUDGETS ROUNDS
# As run: two calls on one H100 machine, back to back: `run.sh 10% 3`, then `run.sh 50% 3` (the checkpoints and the profile kept).
cd "$(dirname "$0")/.."
B=.devbin/residency
mkdir -p /tmp/o/vramcmp
t=$(date +%s)
[ -f /tmp/p.yaml ] || $B profile detect --out /tmp/p.yaml > /tmp/o/detect.log 2>&1
[ -d /tmp/ds4 ] || $B gen-checkpoint --model profiles/models/deepseek-v2-lite.yaml --layers 4 --dtype int4 --out /tmp/ds4 -q
[ -d /tmp/llama4-maverick-2 ] || $B gen-checkpoint --model profiles/models/llama4-maverick.yaml --layers 2 --dtype int4 --out /tmp/llama4-maverick-2 -q
sync
[ -f /tmp/o/vramcmp/profile.yaml ] || $B profile calibrate /tmp/p.yaml --checkpoint /tmp/ds4 --seconds 20 --out /tmp/o/vramcmp/profile.yaml > /tmp/o/cal.log 2>&1
echo "prepared in $(( $(date +%s) - t )) s" | tee -a /tmp/o/log.txt
ARGS="--per-category --train-categories abstract_algebra --seed-tokens 48"
VRAM_MODEL=llama4-maverick VRAM_LAYERS=2 VRAM_ARMS="${ARMS:-lfru lru plan replan belady}" TOKENS=256 REPLAY_ARGS="$ARGS" \
  timeout ${LIMIT:-540} bash docs/device/bench-h200/bench_h200.sh vramcmp .devbin/traces/llama4_maverick_mmlu $1 $2
tar czf $OUT/bundle.tgz -C /tmp/o . ; cp /tmp/o/log.txt $OUT/
