#!/bin/bash
# The script behind docs/prediction.md's H200 calls: run on
# the device machine from the repository root, with this machine's release
# build carried in `.devbin/` (`cp target/release/residency .devbin/`; for an
# A/B, the other binary as .devbin/residency-before).
#
#   bash docs/device/bench-h200/bench_h200.sh PHASE...
#     setup                       generate the Qwen3-30B-A3B and DeepSeek-V2-Lite
#                                 int4 checkpoints in /tmp, detect a profile,
#                                 write the checkpoints back (sync)
#     info                        transparent huge page settings
#     stat                        the load and the CPU's times so far (steal: the
#                                 8th number of the cpu line, in 1/100 s)
#     cal BIN NAME CHECKPOINT     calibrate with BIN on CHECKPOINT into NAME.yaml
#                                 (SPAN=16GiB: over that many expert bytes)
#     ab ROUNDS                   before against after, interleaved, each calibrated
#     sweep ROUNDS BUDGETS STRATEGIES q30|ds TAG
#                                 bench --sweep with the sweep's profile.yaml
#                                 (PROFILE=P.yaml: with that one)
#     replay TRACE BUDGETS ROUNDS replay's arms on a 4-layer DeepSeek-V2-Lite
#                                 checkpoint, calibrated on it first (the
#                                 simulator beside the store)
#     vram TRACE VRAM ROUNDS      lru and uniform on that checkpoint without a
#                                 VRAM tier, then with each --vram-budget of
#                                 VRAM (e.g. 10%,25%,50%)
#     vramcmp TRACE VRAM ROUNDS   the card's arms at each --vram-budget, RAM by
#                                 lru at 25 %: lfru (Colibri's rule), lru, and
#                                 lru in per-layer budgets that move (dynamic),
#                                 one run each a round, in turn (A B C C B A);
#                                 VRAM_ARMS="lfru dynamic-lfru ..." picks them
#                                 (dynamic-lfru: lfru in per-layer budgets;
#                                 lfru-auto: its heat window chosen by the
#                                 simulator, --vram-halve-every auto;
#                                 auto: the rule and window the simulator
#                                 chooses, --vram-policy auto),
#                                 TOKENS, VRAM_LAYERS (MoE layers, 4 by
#                                 default, 26 for all), VRAM_MODEL (a
#                                 profiles/models/ name, deepseek-v2-lite by
#                                 default) and REPLAY_ARGS (--per-category) too;
#                                 its tables: vram_summary.py DIR/vramcmp
#
# Each command's time goes to log.txt, its output to cmd.log, one line a run
# to log.txt (predicted, measured, ratio, experts and CPU ms). Everything is
# packed into $OUT/bundle.tgz after each phase (a device call returns few files).
set -u
B=${B:-.devbin/residency}
BEFORE=${BEFORE:-.devbin/residency-before}
O=/tmp/o; mkdir -p $O
T0=$(date +%s.%N)
run() { local t=$(date +%s.%N); "$@" >> $O/cmd.log 2>&1; local rc=$?; echo "[$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t}") s rc $rc] $*" | tee -a $O/log.txt; return $rc; }
setup() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a $O/log.txt
  nproc | tee -a $O/log.txt
  run $B gen-checkpoint --model profiles/models/qwen3-30b-a3b.yaml --dtype int4 --out /tmp/q30
  run $B gen-checkpoint --model profiles/models/deepseek-v2-lite.yaml --dtype int4 --out /tmp/ds
  run $B profile detect --out /tmp/p.yaml
  # The checkpoints' 26 GB of dirty pages written back now, not while
  # calibration times the CPU's memory (docs/prediction.md).
  run sync
}
cal() { # binary, out profile, checkpoint
  run $1 profile calibrate /tmp/p.yaml --checkpoint ${3:-/tmp/q30} --seconds ${CALSEC:-10} ${SPAN:+--span $SPAN} --out $2
  grep -E "numa\[0\]\.(gemv|stage)|gpus\[0\]\.(gemv|sync)" $O/cmd.log | tail -5 | cut -c1-150 | tee -a $O/log.txt
}
summary() { # json label
  python3 - "$1" "$2" <<'PY' | tee -a $O/log.txt
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['rows']:
    if r.get('does_not_fit'): print(sys.argv[2], r['strategy'], 'does not fit'); continue
    for run in r['runs']:
        rep=run['report']; st={s['name']:s for s in rep['stages']}
        ex=st.get('experts',{}); res={x['name']:x for x in rep['resources']}
        cpu=res['cpu:0']; gpu=res.get('gpu:0',{'measured_seconds':0,'predicted_seconds':0})
        onr=rep.get('predicted_on_routes_tok_per_s', rep['predicted_tok_per_s'])
        print('%s %2d %-9s %8.2f %8.2f %5.2f routes %5.2f  experts %6.2f/%6.2f ms  cpu %6.2f/%6.2f ms  gpu %6.2f/%6.2f ms' % (sys.argv[2], r['budget_bytes']>>30, r['strategy'], rep['predicted_tok_per_s'], rep['tok_per_s'], rep['tok_per_s']/rep['predicted_tok_per_s'], rep['tok_per_s']/onr, ex.get('measured_seconds',0)*1e3, ex.get('predicted_seconds',0)*1e3, cpu['measured_seconds']*1e3, cpu['predicted_seconds']*1e3, gpu['measured_seconds']*1e3, gpu['predicted_seconds']*1e3))
PY
}
ab() { # rounds
  mkdir -p $O/ab
  cal $BEFORE $O/ab/profile-before.yaml; cal $B $O/ab/profile-after.yaml
  for r in $(seq 1 $1); do
    for w in before after; do
      bin=$B; [ $w = before ] && bin=$BEFORE
      run $bin bench --sweep --checkpoint /tmp/q30 --profile $O/ab/profile-$w.yaml --backend pread --rounds 1 --tokens 32 --strategies plan,exps-cpu,cpu --budgets 16GiB --json $O/ab/qwen3-$w-r$r.json
      summary $O/ab/qwen3-$w-r$r.json "r$r $w qwen3"
      run $bin bench --sweep --checkpoint /tmp/ds --profile $O/ab/profile-$w.yaml --backend pread --rounds 1 --tokens 32 --strategies plan,exps-cpu,cpu --budgets 4GiB --json $O/ab/deepseek-$w-r$r.json
      summary $O/ab/deepseek-$w-r$r.json "r$r $w deepseek"
    done
  done
}
sweep() { # rounds budgets strategies model(q30|ds) tag
  mkdir -p $O/sweep
  local profile=${PROFILE:-$O/sweep/profile.yaml}
  [ -f $profile ] || CALSEC=${CALSEC:-90} cal $B $profile
  run timeout ${STIMEOUT:-480} $B bench --sweep --checkpoint /tmp/$4 --profile $profile --backend pread --rounds $1 --tokens 32 --strategies $3 --budgets $2 --json $O/sweep/$5.json
  summary $O/sweep/$5.json "$5"
}
replay_arms() { # trace budgets rounds
  mkdir -p $O/replay
  [ -f /tmp/p.yaml ] || run $B profile detect --out /tmp/p.yaml
  [ -d /tmp/ds4 ] || run $B gen-checkpoint --model profiles/models/deepseek-v2-lite.yaml --layers 4 --dtype int4 --out /tmp/ds4
  CALSEC=20 cal $B $O/replay/profile.yaml /tmp/ds4
  grep -E "drives\[0\]" $O/cmd.log | tail -3 | cut -c1-150 | tee -a $O/log.txt
  for b in ${2//,/ }; do
    run $B replay --checkpoint /tmp/ds4 --trace $1 --model profiles/models/deepseek-v2-lite.yaml --tokens 48 \
      --profile $O/replay/profile.yaml --policy lru,uniform,dynamic-offline,dynamic --online-every 4 \
      --ram-budget $b --rounds $3 --json $O/replay/${b%\%}pct.json
    grep -A5 "the simulator on" $O/cmd.log | tail -6 | tee -a $O/log.txt
    pack
  done
}
vram_arms() { # trace vram-budgets rounds: replay's arms on the 4-layer checkpoint, without
  # a VRAM tier and then with each budget, RAM at 25 %
  mkdir -p $O/vram
  [ -f /tmp/p.yaml ] || run $B profile detect --out /tmp/p.yaml
  [ -d /tmp/ds4 ] || run $B gen-checkpoint --model profiles/models/deepseek-v2-lite.yaml --layers 4 --dtype int4 --out /tmp/ds4
  [ -f $O/vram/profile.yaml ] || CALSEC=20 cal $B $O/vram/profile.yaml /tmp/ds4
  for v in none ${2//,/ }; do
    local flag=""; [ $v = none ] || flag="--vram-budget $v"
    run $B replay --checkpoint /tmp/ds4 --trace $1 --model profiles/models/deepseek-v2-lite.yaml --tokens 48 \
      --profile $O/vram/profile.yaml --policy lru,uniform --ram-budget 25% --rounds $3 \
      $flag --json $O/vram/${v%\%}.json
    grep -E "^  (lru|uniform) |output|VRAM" $O/cmd.log | tail -$((2 * $3 + 5)) | tee -a $O/log.txt
    pack
  done
}
vram_compare() { # trace vram-budgets rounds
  mkdir -p $O/vramcmp
  [ -f /tmp/p.yaml ] || run $B profile detect --out /tmp/p.yaml
  local layers=${VRAM_LAYERS:-4} model=${VRAM_MODEL:-deepseek-v2-lite}
  local ck=/tmp/${model}-${layers}
  [ -d $ck ] || run $B gen-checkpoint --model profiles/models/$model.yaml --layers $layers --dtype int4 --out $ck
  [ -f $O/vramcmp/profile.yaml ] || CALSEC=20 cal $B $O/vramcmp/profile.yaml $ck
  local arms=${VRAM_ARMS:-"lfru lru dynamic"}
  for r in $(seq 1 $3); do
    for v in ${2//,/ }; do
      for a in $arms; do
        local flag="--vram-policy $a"
        [ $a = dynamic ] && flag="--vram-policy lru --vram-allocation dynamic"
        [ $a = dynamic-lfru ] && flag="--vram-policy lfru --vram-allocation dynamic"
        [ $a = lfru-auto ] && flag="--vram-policy lfru --vram-halve-every auto"
        [ $a = auto ] && flag="--vram-policy auto --vram-halve-every auto"
        run $B replay --checkpoint $ck --trace $1 --model profiles/models/$model.yaml --tokens ${TOKENS:-48} \
          --profile $O/vramcmp/profile.yaml --policy lru --ram-budget 25% --rounds 1 ${REPLAY_ARGS:-} \
          --vram-budget $v $flag --json $O/vramcmp/${v%\%}-$a-r$r.json
        grep -E "^  lru " $O/cmd.log | tail -2 | sed "s/^/$v $a r$r/" | tee -a $O/log.txt
      done
    done
    arms=$(echo $arms | tr ' ' '\n' | tac | tr '\n' ' ')
    pack
  done
}
pack() { tar czf ${OUT:-/tmp}/bundle.tgz -C $O . && cp $O/log.txt ${OUT:-/tmp}/; }
while [ $# -gt 0 ]; do
  case $1 in
    setup) setup; shift;;
    stat) (date +%s.%N; cat /proc/loadavg; head -1 /proc/stat) | tee -a $O/log.txt; shift;;
    info) (cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag; grep -i huge /proc/meminfo) | tee -a $O/log.txt; shift;;
    cal) mkdir -p $O/sweep; CALSEC=${CALSEC:-90} cal $2 $O/sweep/$3.yaml $4; shift 4;;
    ab) ab $2; shift 2;;
    sweep) sweep $2 $3 $4 $5 $6; shift 6;;
    replay) replay_arms $2 $3 $4; shift 4;;
    vram) vram_arms $2 $3 $4; shift 4;;
    vramcmp) vram_compare $2 $3 $4; shift 4;;
    *) echo "unknown phase $1"; exit 2;;
  esac
  pack
done
echo "total $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $T0}") s" | tee -a $O/log.txt
pack
