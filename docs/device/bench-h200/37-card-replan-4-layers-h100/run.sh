#!/bin/bash
# the card's arms on 4 layers, held out and seeded: lfru, lfru-auto, replan at 10 % and 50 %, 2 rounds
cd "$(dirname "$0")/.."
VRAM_ARMS="lfru lfru-auto replan" TOKENS=64 REPLAY_ARGS="--per-category --train-categories intent,law --seed-tokens 48 --categories intent,law,summary,translation" \
  timeout 300 bash docs/device/bench-h200/bench_h200.sh vramcmp .devbin/traces/esft_deepseek_v2_lite 10%,50% 2
tar czf $OUT/bundle.tgz -C /tmp/o . ; cp /tmp/o/log.txt $OUT/
