#!/usr/bin/env python3
"""The tables of docs/serving.md's VRAM-tier runs, from a `vramcmp` folder.

    python3 docs/device/bench-h200/vram_summary.py DIR [CANDIDATE [BASELINES]]

DIR holds `replay --json` files named BUDGET-ARM-rROUND.json (as
bench_h200.sh's `vramcmp` writes them, one run of one arm each). Per
budget, category and arm: the median and range over the rounds of tok/s
and felt wait, the simulator's felt wait beside the measured median (at
the profile's rates and at the run's own reads), and the experts the card
computed against the simulator's count (its ratios are each run's, their
median: each run's simulator has the compute rate its own process timed). Then the serving loop's first goal for
CANDIDATE (default lfru) against the better of BASELINES (a comma list,
default lru,dynamic: the card's global and per-layer LRU, those present):
felt wait and tok/s per category and over all of them (each round's
tokens over its seconds, summed over the categories).
"""
import glob
import json
import os
import statistics
import sys


def load(folder):
    runs = {}
    for path in glob.glob(os.path.join(folder, "*-r*.json")):
        budget, rest = os.path.basename(path)[: -len(".json")].split("-", 1)
        arm, round_ = rest.rsplit("-r", 1)
        for run in json.load(open(path))["runs"]:
            key = (int(budget), run.get("category") or "all", arm)
            runs.setdefault(key, {})[int(round_)] = run
    return runs


def spread(values):
    return "%.3f [%.3f..%.3f]" % (statistics.median(values), min(values), max(values))


def main():
    folder = sys.argv[1]
    candidate = sys.argv[2] if len(sys.argv) > 2 else "lfru"
    baselines = (sys.argv[3] if len(sys.argv) > 3 else "lru,dynamic").split(",")
    runs = load(folder)
    budgets = sorted({k[0] for k in runs})
    categories = sorted({k[1] for k in runs})
    arms = sorted({k[2] for k in runs})
    # The CPU's compute rate during each run beside its speed: the card's
    # arms share the CPU path, whose memory rate moves within a lease.
    print("| VRAM | category | arm | tok/s | felt s | CPU GB/s | sim felt s | ratio | at run reads | on card (sim) |")
    print("|---|---|---|---|---|---|---:|---:|---:|---:|")
    for b in budgets:
        for c in categories:
            for a in arms:
                rs = list(runs.get((b, c, a), {}).values())
                if not rs:
                    continue
                # Each run is a process of its own, whose simulator has its
                # own compute rate: the ratios are each run's, their median.
                simulated = [r for r in rs if r.get("simulated") and r["felt_wait_seconds"] > 0]
                sim = simulated[0]["simulated"] if simulated else {}

                def ratio(key):
                    if not simulated:
                        return "-"
                    return "%.2f" % statistics.median(
                        r["simulated"][key] / r["felt_wait_seconds"] for r in simulated
                    )

                card = statistics.median(r["gpu_experts"] for r in rs)
                print(
                    "| %d %% | %s | %s | %s | %s | %s | %s | %s | %s | %d (%s) |"
                    % (
                        b, c, a,
                        spread([r["tok_per_s"] for r in rs]),
                        spread([r["felt_wait_seconds"] for r in rs]),
                        spread([r.get("compute_bytes_per_s", 0) / 1e9 for r in rs]),
                        "%.3f" % statistics.median(r["simulated"]["felt_wait_seconds"] for r in simulated)
                        if simulated
                        else "-",
                        ratio("felt_wait_seconds"),
                        ratio("felt_wait_seconds_at_run_reads"),
                        card,
                        sim.get("gpu_experts", "-"),
                    )
                )
    print()
    others = [a for a in arms if a in baselines]
    if candidate not in arms or not others:
        print("no comparison: the runs hold %s; it needs %s and one of %s"
              % (", ".join(arms), candidate, ", ".join(baselines)))
        return
    print("%s against the better of %s (felt: less is better; tok/s: more):" % (candidate, ", ".join(others)))
    print("| VRAM | category | felt s | best other | change | tok/s | best other | change |")
    print("|---|---|---:|---|---:|---:|---|---:|")
    for b in budgets:
        present = {k[2] for k in runs if k[0] == b}
        if candidate not in present or not present & set(others):
            continue
        for c in categories + ["all"]:
            def medians(arm):
                if c != "all":
                    rs = list(runs.get((b, c, arm), {}).values())
                    return (
                        statistics.median(r["felt_wait_seconds"] for r in rs),
                        statistics.median(r["tok_per_s"] for r in rs),
                    )
                by_round = {}
                for cat in categories:
                    for rnd, r in runs.get((b, cat, arm), {}).items():
                        acc = by_round.setdefault(rnd, [0.0, 0, 0.0])
                        acc[0] += r["felt_wait_seconds"]
                        acc[1] += r["tokens"]
                        acc[2] += r["seconds"]
                return (
                    statistics.median(v[0] for v in by_round.values()),
                    statistics.median(v[1] / v[2] for v in by_round.values()),
                )
            felt, tps = medians(candidate)
            here = [a for a in others if a in present]
            best_felt = min((medians(a)[0], a) for a in here)
            best_tps = max((medians(a)[1], a) for a in here)
            print(
                "| %d %% | %s | %.3f | %.3f (%s) | %+.1f %% | %.2f | %.2f (%s) | %+.1f %% |"
                % (
                    b, c, felt, best_felt[0], best_felt[1], 100 * (felt / best_felt[0] - 1),
                    tps, best_tps[0], best_tps[1], 100 * (tps / best_tps[0] - 1),
                )
            )


if __name__ == "__main__":
    main()
