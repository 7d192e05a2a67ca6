#!/usr/bin/env python3
"""How big and how slow the pictures get: an exclusive plan drawn on three synthetic machines.

    python benchmarks/picture_bench.py [--repeat N]

Machines (`topo.synthetic`, Linux's SMT numbering):
  dgx      256 PUs, 8 GPUs: pack:2 numa:4 l3:4 core:4 pu:2 (DGX A100's CPUs, NPS4)
  2x96     384 PUs, 8 GPUs: pack:2 numa:1 l3:12 core:8 pu:2, 4 per node
  2k     2,048 PUs, 8 GPUs: pack:2 numa:4 l3:16 core:8 pu:2, 1 per node

For each it prints the SVG and HTML sizes (target: under 2 MB for 2,048 PUs), the drawing's size in
pixels, and the CPU time of `plan_svg`, `plan_html` and `plan_map` (best of N, garbage collector
paused). Not a test: nothing fails on a slow machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from topo import planners  # noqa: E402
from topo.views.plan import plan_html, plan_map, plan_svg  # noqa: E402
from topo.synthetic import synthetic  # noqa: E402

MACHINES = {
    "dgx": ("pack:2 numa:4 l3:4 core:4 pu:2", {"gpu_nodes": [3, 3, 1, 1, 7, 7, 5, 5]}),
    "2x96": ("pack:2 numa:1 l3:12 core:8 pu:2", {"gpus_per_numa": 4}),
    "2k": ("pack:2 numa:4 l3:16 core:8 pu:2", {"gpus_per_numa": 1}),
}


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.disable()
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
        gc.enable()
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'machine':8} {'PUs':>5} {'SVG':>9} {'HTML':>9} {'pixels':>11} {'svg ms':>7} {'html ms':>8} {'map ms':>7}")
    for name, (desc, kw) in MACHINES.items():
        t = synthetic(desc, pu_order="scatter", **kw)
        plan = planners.plan(t, "exclusive")
        svg, html = plan_svg(t, plan), plan_html(t, plan)
        w, h = re.search(r'width="(\d+)" height="(\d+)"', svg).groups()
        times = [best(lambda f=f: f(t, plan), args.repeat) * 1000 for f in (plan_svg, plan_html, plan_map)]
        print(f"{name:8} {t.pus.weight():5} {len(svg.encode()) / 1e6:7.2f}MB {len(html.encode()) / 1e6:7.2f}MB "
              f"{w + 'x' + h:>11} {times[0]:7.0f} {times[1]:8.0f} {times[2]:7.0f}")


if __name__ == "__main__":
    main()
