#!/bin/bash
# Llama-4 Maverick cut to 2 MoE layers, int4, on the card: ARMS (default lfru lru plan replan belady), one run each a round
# (A..E E..A), held out (train abstract_algebra; anatomy and astronomy served, 256 tokens each, seeded by the last 48 of the
# training category), RAM lru at 25 %. The profile calibrated on the Llama-4 checkpoint (its drive read as the store
# reads its experts; the kernels timed on generated experts of its geometry). Usage: run_l4.sh BUDGETS ROUNDS
cd "$(dirname "$0")/.."
B=.devbin/residency
mkdir -p /tmp/o/vramcmp
t=$(date +%s)
[ -f /tmp/p.yaml ] || $B profile detect --out /tmp/p.yaml > /tmp/o/detect.log 2>&1
[ -d /tmp/llama4-maverick-2 ] || $B gen-checkpoint --model profiles/models/llama4-maverick.yaml --layers 2 --dtype int4 --out /tmp/llama4-maverick-2 -q
sync
[ -f /tmp/o/vramcmp/profile.yaml ] || $B profile calibrate /tmp/p.yaml --checkpoint /tmp/llama4-maverick-2 --seconds 20 --out /tmp/o/vramcmp/profile.yaml > /tmp/o/cal.log 2>&1
echo "prepared in $(( $(date +%s) - t )) s" | tee -a /tmp/o/log.txt
ARGS="--per-category --train-categories abstract_algebra --seed-tokens 48"
VRAM_MODEL=llama4-maverick VRAM_LAYERS=2 VRAM_ARMS="${ARMS:-lfru lru plan replan belady}" TOKENS=256 REPLAY_ARGS="$ARGS" \
  timeout ${LIMIT:-540} bash docs/device/bench-h200/bench_h200.sh vramcmp .devbin/traces/llama4_maverick_mmlu $1 $2
tar czf $OUT/bundle.tgz -C /tmp/o . ; cp /tmp/o/log.txt $OUT/
