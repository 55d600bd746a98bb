#!/bin/bash
# wake A/B: calibrate (back to back and after idle gaps), then sweeps
S=docs/device/bench-h200/bench_h200.sh
export STIMEOUT=200
bash $S setup
CALSEC=60 bash $S cal .devbin/residency profile /tmp/q30
grep "note:" /tmp/o/cmd.log | tee -a /tmp/o/log.txt
bash $S sweep 3 4GiB,8GiB,16GiB plan,n-cpu-moe,exps-cpu,cpu q30 q30-a
CALSEC=30 bash $S cal .devbin/residency profile-ds /tmp/ds
grep "note:" /tmp/o/cmd.log | tail -3 | tee -a /tmp/o/log.txt
STIMEOUT=150 bash $S sweep 3 4GiB,8GiB plan,n-cpu-moe,exps-cpu,cpu ds ds-a
bash $S stat
tar czf $OUT/bundle.tgz -C /tmp/o . ; cp /tmp/o/log.txt $OUT/
