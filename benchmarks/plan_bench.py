#!/usr/bin/env python3
"""How planning and validation scale: every mode on three synthetic machines, 8x and 16x apart.

    python benchmarks/plan_bench.py [--repeat N]

Machines (`topo.synthetic`, Linux's SMT numbering, accelerators spread over the NUMA nodes):
  2k   2,048 PUs,    64 devices: pack:4 numa:4 l3:8 core:8 pu:2, 4 per node
  16k  16,384 PUs,  512 devices: pack:8 numa:8 l3:8 core:16 pu:2, 8 per node
  32k  32,768 PUs, 1024 devices: pack:16 numa:8 l3:8 core:16 pu:2, 8 per node

For each mode it prints the in-process time of `topo.planners.plan` (with `to_json`) on each machine,
the growth from 2k to 16k (target: at most 10x for 8x the machine) and whether the 32k machine
plans in under 1 s; then the same for `topo.planners.validate_bind` on those plans. Times are the best
of N runs in CPU seconds of this process (`time.process_time`, garbage collector paused as
`timeit` does), so other work on a shared machine does not count; the 2k and 16k runs of a mode
alternate, so a burst of load elsewhere slows both sides of the ratio alike. Not a test: nothing
fails on a slow machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from topo import planners  # noqa: E402
from topo.synthetic import synthetic  # noqa: E402

MACHINES = {
    "2k": ("pack:4 numa:4 l3:8 core:8 pu:2", 4),
    "16k": ("pack:8 numa:8 l3:8 core:16 pu:2", 8),
    "32k": ("pack:16 numa:8 l3:8 core:16 pu:2", 8),
}
GENERATOR_LAYOUT = (("runtime", 4, 8), ("minddata", 9, 12), ("main", 13, 19))
VARIANTS = [
    ("msrun-auto", {}),
    ("msrun-auto", {"msrun_bind": "numa"}),
    ("msrun-auto", {"modules": GENERATOR_LAYOUT}),
    ("node", {}), ("socket", {}), ("exclusive", {}), ("core-complex", {}),
    ("all", {}), ("all", {"scope": "socket"}), ("single", {}), ("single-unique", {}),
    ("unique-interleaved", {}), ("unique-contiguous", {}),
    ("unique-contiguous", {"scope": "socket", "multithreading": "single-logical", "balanced": False}),
]
GROWTH_TARGET = 10.0
LARGEST_TARGET_S = 1.0


def timed(work) -> tuple[float, object]:
    """CPU seconds of one call, the garbage collector paused (as `timeit` does)."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        result = work()
        return time.process_time() - t0, result
    finally:
        gc.enable()


def best_of(repeat: int, works: dict) -> dict:
    """Name -> (best seconds, result) of each of ``works``, run in turn ``repeat`` times."""
    best: dict = {name: (float("inf"), None) for name in works}
    for _ in range(repeat):
        for name, work in works.items():
            seconds, result = timed(work)
            best[name] = (min(best[name][0], seconds), result)
    return best


def label(opts: dict) -> str:
    return ", ".join(f"{k}={'gen_bind_json' if k == 'modules' else v}" for k, v in opts.items()) or "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs per measurement (the 32k machine: a third)")
    args = ap.parse_args()
    machines = {}
    for name, (desc, per_node) in MACHINES.items():
        t0 = time.perf_counter()
        machines[name] = synthetic(desc, gpus_per_numa=per_node, pu_order="scatter")
        print(f"{name:>4}: {machines[name].summary()} ({desc}, {per_node} devices per node), "
              f"built in {(time.perf_counter() - t0) * 1e3:.0f} ms")
    planners.plan(machines["2k"], "node")  # imports and the registry, outside the timings

    plan_ms: dict[tuple, float] = {}
    check_ms: dict[tuple, float] = {}
    def planning(topology, mode, opts):
        return lambda: planners.plan(topology, mode, **opts).to_json()

    def checking(data, topology):
        return lambda: planners.validate_bind(data, topology)

    for i, (mode, opts) in enumerate(VARIANTS):
        for group, repeat in ((("2k", "16k"), args.repeat), (("32k",), max(1, args.repeat // 3))):
            plans = best_of(repeat, {name: planning(machines[name], mode, opts) for name in group})
            checks = best_of(repeat, {name: checking(plans[name][1], machines[name]) for name in group})
            for name in group:
                plan_ms[i, name] = plans[name][0] * 1e3
                check_ms[i, name], problems = checks[name][0] * 1e3, checks[name][1]
                assert not [p for p in problems if p.severity != "warning"], (mode, opts, problems[:3])

    worst_growth = worst_largest = 0.0
    for title, ms in (("topo.planners.plan + to_json", plan_ms), ("topo.planners.validate_bind on that plan", check_ms)):
        print(f"\n{title} (ms, best of {args.repeat})")
        print(f"{'mode':<19} {'options':<58} {'2k':>7} {'16k':>7} {'growth':>7} {'32k':>7}")
        for i, (mode, opts) in enumerate(VARIANTS):
            small, big, largest = ms[i, "2k"], ms[i, "16k"], ms[i, "32k"]
            growth = big / small if small else float("inf")
            worst_growth = max(worst_growth, growth)
            worst_largest = max(worst_largest, largest)
            flag = "" if growth <= GROWTH_TARGET and largest < LARGEST_TARGET_S * 1e3 else "  <- over target"
            print(f"{mode:<19} {label(opts):<58} {small:7.1f} {big:7.1f} {growth:6.1f}x {largest:7.1f}{flag}")
    print(f"\nworst growth 2k -> 16k: {worst_growth:.1f}x (target <= {GROWTH_TARGET:.0f}x); "
          f"slowest at 32k: {worst_largest:.0f} ms (target < {LARGEST_TARGET_S * 1e3:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
