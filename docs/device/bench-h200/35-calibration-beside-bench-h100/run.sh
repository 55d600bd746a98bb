#!/bin/bash
# A calibration seconds before each bench run, four rounds: a CPU-only profile
# (no CUDA context anywhere) then bench's cpu strategy on it; the full profile
# then cpu and exps-cpu at 4 GiB. DeepSeek-V2-Lite. Binary in .devbin/.
S=docs/device/bench-h200/bench_h200.sh
B=.devbin/residency
O=/tmp/o; mkdir -p $O
bash $S setup
python3 - <<'PY'
s=open('/tmp/p.yaml').read().split('\n'); out=[]; skip=False
for l in s:
    if l.startswith('gpus:') or l.startswith('drives:'):
        out.append(l.split(':')[0]+': []'); skip=True; continue
    if skip and l.startswith('  '): continue
    skip=False; out.append(l)
open('/tmp/pcpu.yaml','w').write('\n'.join(out))
PY
cal() { $B profile calibrate $1 --checkpoint /tmp/ds --seconds $2 --out $3 > /tmp/c.log 2>&1; echo "$4 cal $(grep -E 'numa\[0\]\.(gemv|stage)' /tmp/c.log | cut -c1-80 | tr '\n' ' ')" | tee -a $O/ab.log; }
bn() { $B bench --sweep --checkpoint /tmp/ds --profile $1 --backend pread --rounds 1 --tokens 24 --strategies $2 --budgets 4GiB --json $O/$3.json >> $O/cmd.log 2>&1
python3 - $O/$3.json $3 <<'PY' | tee -a $O/ab.log
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['rows']:
    for run in r['runs']:
        rep=run['report']; res={x['name']:x for x in rep['resources']}; c=res['cpu:0']
        print(sys.argv[2], r['strategy'], 'pred %.2f meas %.2f ratio %.3f cpu %.2f/%.2f ms' % (rep['predicted_tok_per_s'], rep['tok_per_s'], rep['tok_per_s']/rep['predicted_tok_per_s'], c['measured_seconds']*1e3, c['predicted_seconds']*1e3))
PY
}
for r in 1 2 3 4; do
  cal /tmp/pcpu.yaml 8 $O/pcpu-$r.yaml "r$r nocuda"
  bn $O/pcpu-$r.yaml cpu r$r-nocuda
  cal /tmp/p.yaml 24 $O/pfull-$r.yaml "r$r full"
  bn $O/pfull-$r.yaml cpu,exps-cpu r$r-full
done
tar czf $OUT/bundle.tgz -C $O . ; cp $O/ab.log $OUT/
