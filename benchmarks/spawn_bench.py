#!/usr/bin/env python3
"""What binding at birth costs a child (topo.launcher.spawn).

    python benchmarks/spawn_bench.py [--reps N]

1. subprocess: wall time of `python -c pass` started plainly, through `bound_argv`'s prefix
   (`python -m topo.launcher.bindexec cpus=... -- ...`), and through `numactl --physcpubind` when
   numactl is installed. The prefix's cost is one short interpreter start before the exec.
2. multiprocessing spawn: wall time of `Process.start()` + `join()` of an empty target, plain and
   through `start_bound` (the calling thread holds the child's binding while it starts it).

Medians of N rounds; planning (done once per process, cached) is outside the timings. Not a test:
nothing fails on a slow machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from topo.launcher.spawn import bound_argv, start_bound  # noqa: E402


def timed(run, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def empty() -> None:
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    reps = parser.parse_args().reps
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = [sys.executable, "-c", "pass"]
    prefixed = bound_argv(child, 0, 1)
    cases = {"plain": child, "bound_argv": prefixed}
    if shutil.which("numactl"):
        cpus = prefixed[prefixed.index("--") - 1].removeprefix("cpus=")
        cases["numactl"] = ["numactl", f"--physcpubind={cpus}", "--", *child]
    print(f"subprocess `python -c pass` ({reps} rounds):")
    for name, argv in cases.items():
        ms = timed(lambda: subprocess.run(argv, env=env, check=True), reps)
        print(f"  {name:<12} median {statistics.median(ms):8.1f} ms   best {min(ms):8.1f} ms")
    ctx = multiprocessing.get_context("spawn")

    def plain():
        p = ctx.Process(target=empty)
        p.start()
        p.join()

    def bound():
        p = ctx.Process(target=empty)
        start_bound(p, 0, 1)
        p.join()

    print(f"multiprocessing spawn, empty target ({reps} rounds):")
    for name, run in (("plain", plain), ("start_bound", bound)):
        ms = timed(run, reps)
        print(f"  {name:<12} median {statistics.median(ms):8.1f} ms   best {min(ms):8.1f} ms")


if __name__ == "__main__":
    main()
