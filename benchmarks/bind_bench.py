#!/usr/bin/env python3
"""The bind model's cost as machines grow: read, check and resolve a bind JSON; parse range text.

    python benchmarks/bind_bench.py [--repeat N]

For synthetic machines of 2,048 PUs / 64 GPUs, 16,384 / 512 and 32,768 / 1,024, prints milliseconds
(best of N, in-process) for `plan_from_json` (schema, every range parsed once), `validate_bind`
against the topology on an `exclusive` plan (disjoint main sets) and on a `node` plan without
topo's notes (every process overlaps: one warning per process, not per pair), and the ratio from
the smallest to the 8x machine (target: at most 10x, i.e. near-linear). Then `CpuSet.parse(msrun=True)`
on adversarial texts of about 2 MB (ms per MB). Not a test: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from topo import planners  # noqa: E402
from topo.planners.bindcheck import validate_bind  # noqa: E402
from topo.planners.bindload import plan_from_json  # noqa: E402
from topo.cpuset import CpuSet  # noqa: E402
from topo.errors import ParseError  # noqa: E402
from topo.synthetic import synthetic  # noqa: E402

MACHINES = [("2048 PUs / 64 GPUs", "pack:2 numa:4 core:128 pu:2"),
            ("16384 PUs / 512 GPUs", "pack:8 numa:8 core:128 pu:2"),
            ("32768 PUs / 1024 GPUs", "pack:8 numa:16 core:128 pu:2")]
TEXTS = [("0-1048575 x 200k", ",".join(["0-1048575"] * 200_000)),
         ("1048575 x 250k", ",".join(["1048575"] * 250_000)),
         ("descending singles", ",".join(str(1048575 - i) for i in range(0, 400_000, 2))),
         ("one 2 MB number", "9" * 2_000_000)]


def best(repeat: int, call, *args) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call(*args)
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for label, desc in MACHINES:
        t = synthetic(desc, gpus_per_numa=8)
        exclusive = planners.plan(t, "exclusive").to_json()
        shared = planners.plan(t, "node").to_json()
        shared.pop("topo")  # without "shared_cpus": every overlap is reported
        rows.append((label, best(args.repeat, plan_from_json, exclusive),
                     best(args.repeat, validate_bind, exclusive, t), best(args.repeat, validate_bind, shared, t)))
    print(f"{'machine':<24}{'load ms':>10}{'validate ms':>14}{'overlaps ms':>14}")
    for label, load, valid, over in rows:
        print(f"{label:<24}{load:>10.1f}{valid:>14.1f}{over:>14.1f}")
    small, big = rows[0], rows[1]
    print("growth 2048 -> 16384 PUs (8x): " + ", ".join(
        f"{name} {b / a:.1f}x" for name, a, b in zip(("load", "validate", "overlaps"), small[1:], big[1:])))
    print()
    for label, text in TEXTS:
        def parse(text=text):
            try:
                CpuSet.parse(text, msrun=True)
            except ParseError:
                pass
        ms = best(args.repeat, parse)
        print(f"parse msrun {label:<22}{len(text) / 1e6:>6.1f} MB {ms:>8.1f} ms  ({ms / (len(text) / 1e6):.0f} ms/MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
