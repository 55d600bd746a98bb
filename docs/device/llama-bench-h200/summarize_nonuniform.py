#!/usr/bin/env python3
"""Summarise the interleaved llama-bench arms of a non-uniform run directory.

DIR/runs/CASE_ARM_rN.json (llama-bench -o json) and .err (its -v log);
DIR/CASE/arms.txt (budget and each arm's computed CUDA0 bytes). Prints per
case and arm: tok/s of every round, median [min..max], the CUDA0 model
buffer llama.cpp reported, and the plan's export against each other arm:
the ratio of medians and the per-round (same round) differences.
"""
import glob
import json
import os
import re
import statistics
import sys


def main():
    d = sys.argv[1]
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "runs", "*.json"))):
        m = re.match(r"(.+)_(plan|ncmoe|fit)_r(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        case, arm, r = m.group(1), m.group(2), int(m.group(3))
        try:
            ts = json.load(open(path))[0]["avg_ts"]
        except Exception:
            ts = None
        err = path[:-5] + ".err"
        buf = None
        if os.path.exists(err):
            b = re.findall(r"CUDA0 model buffer size\s*=\s*([\d.]+) MiB", open(err, errors="replace").read())
            # --fit loads the model once with empty buffers to measure it:
            # the buffer of the run is the last that is not zero.
            b = [float(x) for x in b if float(x) > 0]
            buf = b[-1] if b else None
        runs.setdefault(case, {}).setdefault(arm, {})[r] = (ts, buf)
    for case in sorted(runs):
        arms_txt = os.path.join(d, case, "arms.txt")
        print(f"== {case}: {open(arms_txt).read().strip() if os.path.exists(arms_txt) else ''}")
        med = {}
        for arm in ("plan", "ncmoe", "fit"):
            rs = runs[case].get(arm, {})
            vals = [rs[r][0] for r in sorted(rs) if rs[r][0] is not None]
            bufs = sorted({rs[r][1] for r in rs if rs[r][1] is not None})
            if not vals:
                print(f"  {arm:6s} no result")
                continue
            med[arm] = statistics.median(vals)
            print(f"  {arm:6s} CUDA0 {', '.join(f'{b:.2f}' for b in bufs)} MiB  tok/s "
                  + " ".join(f"r{r}:{rs[r][0]:.2f}" for r in sorted(rs) if rs[r][0] is not None)
                  + f"  median {med[arm]:.2f} [{min(vals):.2f}..{max(vals):.2f}] n={len(vals)}")
        for other in ("ncmoe", "fit"):
            if "plan" in med and other in med:
                p, o = runs[case]["plan"], runs[case][other]
                diffs = [100 * (p[r][0] / o[r][0] - 1) for r in sorted(set(p) & set(o)) if p[r][0] and o[r][0]]
                print(f"  plan vs {other}: medians {100 * (med['plan'] / med[other] - 1):+.1f} %; same round "
                      + " ".join(f"{x:+.1f}" for x in diffs)
                      + (f" (median {statistics.median(diffs):+.1f} %)" if diffs else ""))


if __name__ == "__main__":
    main()
