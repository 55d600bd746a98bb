#!/bin/bash
# (run with the calibration that also timed a CPU stage between a card stage's launch and its wait;
# that measurement was reverted after this call: docs/prediction.md)
# a CPU stage beside a card stage, in calibration; then bench's cpu and exps-cpu beside it
S=docs/device/bench-h200/bench_h200.sh
B=.devbin/residency
O=/tmp/o; mkdir -p $O
bash $S setup
cal() { $B profile calibrate /tmp/p.yaml --checkpoint /tmp/$1 --seconds 60 --out $O/p-$1-$2.yaml > /tmp/c.log 2>&1; echo "$2 $1 $(grep -E 'numa\[0\]\.(gemv|stage)|gpus\[0\]\.(sync|gemv_o)' /tmp/c.log | cut -c1-70 | tr '\n' ' ')" | tee -a $O/ab.log; grep "beside" /tmp/c.log | tee -a $O/ab.log; cat /tmp/c.log >> $O/cmd.log; }
bn() { $B bench --sweep --checkpoint /tmp/$1 --profile $O/p-$1-$2.yaml --backend pread --rounds 1 --tokens 24 --strategies cpu,exps-cpu,plan --budgets ${3:-4GiB} --json $O/$1-$2.json >> $O/cmd.log 2>&1
python3 - $O/$1-$2.json $1-$2 <<'PY' | tee -a $O/ab.log
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['rows']:
    for run in r['runs']:
        rep=run['report']; res={x['name']:x for x in rep['resources']}; c=res['cpu:0']
        print(sys.argv[2], r['strategy'], 'pred %.2f meas %.2f ratio %.3f cpu %.2f/%.2f ms' % (rep['predicted_tok_per_s'], rep['tok_per_s'], rep['tok_per_s']/rep['predicted_tok_per_s'], c['measured_seconds']*1e3, c['predicted_seconds']*1e3))
PY
}
for r in 1 2; do cal ds r$r; bn ds r$r; done; cal q30 r1; bn q30 r1 8GiB
tar czf $OUT/bundle.tgz -C $O . ; cp $O/ab.log $OUT/
