#!/bin/bash
# CPU rate over time after setup, Qwen3's and DeepSeek-V2-Lite's experts in turn,
# the page cache dropped and memory compacted half-way (a CPU-only profile:
# the calibration times node 0 alone). Run from the repository root with the
# binary in .devbin/.
S=docs/device/bench-h200/bench_h200.sh
O=/tmp/o; mkdir -p $O
bash $S info setup
python3 - <<'PY'
s=open('/tmp/p.yaml').read().split('\n'); out=[]; skip=False
for l in s:
    if l.startswith('gpus:') or l.startswith('drives:'):
        out.append(l.split(':')[0]+': []'); skip=True; continue
    if skip and l.startswith('  '): continue
    skip=False; out.append(l)
open('/tmp/pcpu.yaml','w').write('\n'.join(out))
PY
snap() { echo "== $1 t=$(date +%s.%N)" >> $O/mem.log; grep -E "^(MemFree|Cached|Dirty|Writeback|AnonHugePages|AnonPages):" /proc/meminfo >> $O/mem.log; grep -E "^(thp_fault_alloc|thp_fault_fallback|compact_stall|compact_success|thp_collapse_alloc|pgmajfault) " /proc/vmstat >> $O/mem.log; cat /proc/loadavg >> $O/mem.log; }
cal() { local t=$(date +%s.%N); .devbin/residency profile calibrate /tmp/pcpu.yaml --checkpoint /tmp/$1 --seconds 8 --out /tmp/c.yaml > /tmp/c.log 2>&1; echo "$2 $1 t=$(awk "BEGIN{printf \"%.0f\", $t}") $(grep -E 'numa\[0\]\.(gemv|stage)' /tmp/c.log | cut -c1-110 | tr '\n' ' ')" | tee -a $O/rates.log; }
for i in 1 2 3 4 5 6; do snap "before $i"; cal q30 "i$i"; cal ds "i$i"; done
snap "before drop"
sync; echo 3 > /proc/sys/vm/drop_caches; echo "drop rc $?" | tee -a $O/rates.log; echo 1 > /proc/sys/vm/compact_memory; echo "compact rc $?" | tee -a $O/rates.log
for i in 7 8 9 10; do snap "before $i"; cal q30 "i$i"; cal ds "i$i"; done
snap end
tar czf $OUT/bundle.tgz -C $O . ; cp $O/rates.log $O/mem.log $OUT/
