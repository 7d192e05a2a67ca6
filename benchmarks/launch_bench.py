"""Wall time to launch and join N trivial workers: topo launch vs. the floor (and torchrun).

    python benchmarks/launch_bench.py [--ns 1,2,4,8] [--reps 15]

Each measurement is the whole command, from exec to exit (time.perf_counter around
subprocess.run, output to /dev/null), repetitions interleaved and shuffled so load drifts hit
every launcher alike. The worker is `import sys; sys.exit(0)`.

`topo` is a normal (not editable) install of this checkout in a venv of its own
(benchmarks/install.py), first on PATH, so the workers' `python` (msrun's interpreter rule) is that
venv's too.

- floor: `bash -c 'for i in $(seq N); do python trivial.py & done; wait'`, the cost of starting N
  interpreters and nothing else;
- topo launch: `--worker_num=N --local_worker_num=N --join=True --no-scheduler` (N processes, like
  the floor; PyTorch's shape);
- topo launch +sched: the same with MindSpore's scheduler process (N + 1 processes, msrun's shape);
- topo run: `topo run --standalone --nproc-per-node=N` (torchrun's interface, N processes);
- torchrun: `torchrun --standalone --nproc-per-node=N`, when this interpreter has torch: the same
  torch is installed in the venv (benchmarks/install.py --torch), so torchrun and its workers start
  from the venv's interpreter as topo's do.

Bounds (issue 18), at N=8 (the largest N measured): `topo launch` and `topo run` each within the
floor + 100 ms and at most 0.1x torchrun, all measured side by side in this one run; each is
printed with its target, the measured value and "met" or "missed" (the scheduler row too).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR_TARGET_MS = 100.0  # each topo command at most the floor + this, at the largest N
TORCHRUN_TARGET = 0.1  # each topo command at most this times torchrun, at the largest N
TOPO_ROWS = ("topo launch", "topo launch +sched", "topo run")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def commands(n: int, work: Path, bin_dir: Path, torchrun: bool) -> dict[str, list[str]]:
    py = str(bin_dir / "python")
    trivial = str(work / "trivial.py")
    topo = [str(bin_dir / "topo"), "launch", f"--worker_num={n}", f"--local_worker_num={n}", "--join=True",
            "--master_port=29631"]
    out = {
        "floor": ["bash", "-c", f"for i in $(seq {n}); do {py} {trivial} & done; wait"],
        # a log directory per command and N: topo writes only the logs its previous launch.json
        # there lists, and a job of fewer workers or without the scheduler lists fewer
        "topo launch": [*topo, f"--log_dir={work / f'logs-{n}'}", "--no-scheduler", trivial],
        "topo launch +sched": [*topo, f"--log_dir={work / f'logs-sched-{n}'}", trivial],
        "topo run": [str(bin_dir / "topo"), "run", "--standalone", f"--nproc-per-node={n}", trivial],
    }
    if torchrun:
        out["torchrun"] = [str(bin_dir / "torchrun"), "--standalone", f"--nproc-per-node={n}", trivial]
    return out


def measure(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"benchmark command failed (rc {r.returncode}): {' '.join(cmd)}")
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", default="1,2,4,8", help="worker counts (default 1,2,4,8)")
    parser.add_argument("--reps", type=int, default=15, help="repetitions per cell (default 15)")
    parser.add_argument("--no-torchrun", action="store_true", help="skip torchrun even if installed")
    args = parser.parse_args(argv)
    ns = [int(x) for x in args.ns.split(",")]

    from install import normal_install, torch_requirement

    torch = None if args.no_torchrun else torch_requirement()
    bin_dir = normal_install(extras=(torch,) if torch else ())
    if torch is None and not args.no_torchrun:
        print("no torch for this interpreter: torchrun is left out", file=sys.stderr)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    load_at_start = load_average()
    with tempfile.TemporaryDirectory(prefix="topo-launch-bench-") as tmp:
        work = Path(tmp)
        (work / "trivial.py").write_text("import sys\nsys.exit(0)\n")
        cells = {(n, name): cmd for n in ns for name, cmd in commands(n, work, bin_dir, torch is not None).items()}
        for cmd in cells.values():  # warm the page cache and the interpreter's .pyc files
            measure(cmd, work, env)
        runs = [cell for cell in cells for _ in range(args.reps)]
        random.shuffle(runs)
        times: dict[tuple[int, str], list[float]] = {cell: [] for cell in cells}
        for cell in runs:
            times[cell].append(measure(cells[cell], work, env))

    names = list(dict.fromkeys(name for _, name in cells))
    print(f"{os.cpu_count()} CPUs, load average {load_at_start} at start, {load_average()} at the end")
    print(f"median wall time in ms over {args.reps} runs (min-max); Δ = topo launch - floor")
    header = ["N", *names, "Δ"]
    rows = []
    for n in ns:
        med = {name: statistics.median(times[(n, name)]) * 1000 for name in names}
        row = [str(n)]
        for name in names:
            lo, hi = min(times[(n, name)]) * 1000, max(times[(n, name)]) * 1000
            row.append(f"{med[name]:.0f} ({lo:.0f}-{hi:.0f})")
        row.append(f"{med['topo launch'] - med['floor']:+.0f}")
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    n = max(ns)
    med = {name: statistics.median(times[(n, name)]) * 1000 for name in names}
    print()
    print(f"bounds at N={n}: floor + {FLOOR_TARGET_MS:.0f} ms and <= {TORCHRUN_TARGET}x torchrun")
    for name in TOPO_ROWS:
        delta = med[name] - med["floor"]
        line = (f"{name + ':':<19} {med[name]:.0f} ms = floor {delta:+.0f} ms (target <= +{FLOOR_TARGET_MS:.0f}): "
                f"{'met' if delta <= FLOOR_TARGET_MS else 'missed'}")
        if "torchrun" in med:
            ratio = med[name] / med["torchrun"]
            line += (f"; {ratio:.3f}x torchrun (target <= {TORCHRUN_TARGET}x): "
                     f"{'met' if ratio <= TORCHRUN_TARGET else 'missed'}")
        else:
            line += "; torchrun not measured"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
