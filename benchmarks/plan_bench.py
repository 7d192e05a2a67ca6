#!/usr/bin/env python3
"""Plan every mode on a synthetic 4-socket, 16-node, 1024-core, 2048-PU machine with 64 GPUs.

    python benchmarks/plan_bench.py [--repeat N]

Prints milliseconds per mode (best and median of N in-process runs, topology built once);
the target is under 50 ms per mode. Not a test: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import planners  # noqa: E402
from topo.synthetic import synthetic  # noqa: E402

MACHINE = "pack:4 numa:4 l3:8 core:8 pu:2"
VARIANTS = [
    ("msrun-auto", {}),
    ("msrun-auto", {"msrun_bind": "numa"}),
    ("msrun-auto", {"modules": (("runtime", 4, 8), ("minddata", 9, 12), ("main", 13, 19))}),
    ("node", {}), ("socket", {}), ("exclusive", {}), ("core-complex", {}),
    ("all", {}), ("all", {"scope": "socket"}), ("single", {}), ("single-unique", {}),
    ("unique-interleaved", {}), ("unique-contiguous", {}),
    ("unique-contiguous", {"scope": "socket", "multithreading": "single-logical", "balanced": False}),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    t0 = time.perf_counter()
    topology = synthetic(MACHINE, gpus_per_numa=4, pu_order="scatter")
    build_ms = (time.perf_counter() - t0) * 1e3
    print(f"machine: {topology.summary()} ({MACHINE}, 4 GPUs per node); built in {build_ms:.1f} ms")
    print(f"{'mode':<20} {'options':<60} {'best ms':>8} {'median':>8}")
    worst = 0.0
    for mode, opts in VARIANTS:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            plan = planners.plan(topology, mode, **opts)
            plan.to_json()
            times.append((time.perf_counter() - t0) * 1e3)
        assert len(plan.workers()) == 64
        label = ", ".join(f"{k}={v if k != 'modules' else 'gen_bind_json'}" for k, v in opts.items()) or "-"
        best, med = min(times), statistics.median(times)
        worst = max(worst, med)
        print(f"{mode:<20} {label:<60} {best:8.1f} {med:8.1f}")
    print(f"slowest median: {worst:.1f} ms ({'under' if worst < 50 else 'OVER'} the 50 ms target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
