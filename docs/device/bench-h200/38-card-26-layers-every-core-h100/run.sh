#!/bin/bash
# 26 layers, compute threads on every core: lfru, lfru-auto, replan on the card at 10 %, 2 rounds; then 50 % lfru, lfru-auto once
cd "$(dirname "$0")/.."
S=$(date +%s)
ARGS="--per-category --train-categories intent,law --seed-tokens 48 --categories intent,law,summary,translation"
VRAM_LAYERS=26 VRAM_ARMS="lfru lfru-auto replan" TOKENS=64 REPLAY_ARGS="$ARGS" \
  timeout 470 bash docs/device/bench-h200/bench_h200.sh vramcmp .devbin/traces/esft_deepseek_v2_lite 10% 2
left=$((560 - ($(date +%s) - S)))
[ $left -gt 60 ] && VRAM_LAYERS=26 VRAM_ARMS="lfru-auto lfru" TOKENS=64 REPLAY_ARGS="$ARGS" \
  timeout $left bash docs/device/bench-h200/bench_h200.sh vramcmp .devbin/traces/esft_deepseek_v2_lite 50% 1
tar czf $OUT/bundle.tgz -C /tmp/o . ; cp /tmp/o/log.txt $OUT/
