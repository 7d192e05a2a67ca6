#!/usr/bin/env python3
"""What `topo.set_affinity` costs a training process.

    python benchmarks/affinity_bench.py [--reps N] [--dev]

1. This machine, real calls: fresh interpreters of a normal (not editable) install of this
   checkout in a venv of its own (benchmarks/install.py; --dev: this interpreter, as the checkout is
   installed for it), run outside the checkout, each time `import topo`, call
   `set_affinity(0, 1)` (first call: discovery, planning, system calls) and call it again
   (repeated call: the cached plan and the system calls only).
2. A DGX A100-shaped machine (synthetic: 2 sockets, 8 NUMA nodes, 128 cores, 256 CPUs, 8 GPUs),
   planning only, in-process: every rank's first plan (what each of the 8 processes pays once)
   and a repeated one from the cache.

gpu_affinity reads NVML for every GPU (twice, NODE and SOCKET scope) and globs sysfs on every
call; it needs an NVIDIA driver and is not on PyPI, so it is not run here. Targets: first call
under 150 ms on this machine, repeated call under 1 ms. Not a test: nothing fails on a slow machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FIRST_TARGET_MS = 150.0
REPEAT_TARGET_MS = 1.0

CHILD = """
import json, os, time
t0 = time.perf_counter()
import topo
t1 = time.perf_counter()
topo.set_affinity(0, 1)
t2 = time.perf_counter()
topo.set_affinity(0, 1)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "first": t2 - t1, "repeated": t3 - t2}))
"""


def this_machine(reps: int, python: str) -> dict[str, list[float]]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed topo runs from cached bytecode
    out: dict[str, list[float]] = {"import": [], "first": [], "repeated": []}
    subprocess.run([python, "-c", CHILD], capture_output=True, env=env, check=True, cwd=tempfile.gettempdir())
    for _ in range(reps):
        # outside the checkout, so `import topo` is the installed one, not the folder in the cwd
        r = subprocess.run([python, "-c", CHILD], capture_output=True, text=True, env=env, check=True,
                           cwd=tempfile.gettempdir())
        for k, v in json.loads(r.stdout).items():
            out[k].append(v * 1000)
    return out


def dgx_a100_shape(reps: int) -> dict[str, list[float]]:
    from topo.launcher import affinity
    from topo.synthetic import synthetic

    topology = synthetic("pack:2 numa:4 l3:4 core:16 pu:2", pu_order="scatter", gpu_nodes=[3, 3, 1, 1, 7, 7, 5, 5])
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    out: dict[str, list[float]] = {"first plan": [], "repeated": []}
    for _ in range(reps):
        for rank in range(8):
            affinity._NODE_PLANS.clear()  # each of the 8 processes plans once
            t0 = time.perf_counter()
            affinity.plan_affinity(topology, rank, env=env)
            out["first plan"].append((time.perf_counter() - t0) * 1000)
    # the cached path set_affinity takes on its second call
    options = dict(mode="unique_contiguous", scope="node", multithreading="all_logical", balanced=True,
                   min_physical_cores=1, max_physical_cores=None)
    affinity._planned(topology, 0, None, env, 1, **options)
    for _ in range(reps * 8):
        t0 = time.perf_counter()
        affinity._planned(topology, 3, None, env, 1, **options)
        out["repeated"].append((time.perf_counter() - t0) * 1000)
    return out


def show(title: str, rows: dict[str, list[float]]) -> None:
    print(title)
    for name, values in rows.items():
        print(f"  {name:<12} median {statistics.median(values):8.3f} ms   best {min(values):8.3f} ms   (n={len(values)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--dev", action="store_true", help="time this interpreter's topo, not a normal install's")
    args = ap.parse_args()
    if args.dev:
        python = sys.executable
    else:
        from install import normal_install

        python = str(normal_install() / "python")
    live = this_machine(args.reps, python)
    show(f"this machine ({os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}), "
         f"{python}, fresh interpreter per run:", live)
    show("DGX A100 shape (256 CPUs, 8 GPUs), planning one rank in-process:", dgx_a100_shape(args.reps))
    first, repeated = statistics.median(live["first"]), statistics.median(live["repeated"])
    print(f"first call {first:.1f} ms (target < {FIRST_TARGET_MS:.0f}), repeated call {repeated:.3f} ms "
          f"(target < {REPEAT_TARGET_MS:.0f}): {'ok' if first < FIRST_TARGET_MS and repeated < REPEAT_TARGET_MS else 'SLOW'}")
    print("gpu_affinity: not measured (needs NVML with an NVIDIA driver; not on PyPI)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
