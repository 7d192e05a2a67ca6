"""What binding buys a CPU-heavy data-parallel job: torchrun's defaults against `topo run
--numa-binding=MODE`, and a grid over binding x OMP_NUM_THREADS.

    python benchmarks/benefit.py [--nproc N] [--steps S] [--repeats R] [--hidden H] [--batch B]
                                 [--modes node,exclusive,...] [--quick]

Each rank runs the same step: a forward and backward pass of an MLP (hidden H, batch B, 4 layers)
with torch's intra-op threads, a gloo all-reduce of the flattened gradients, an SGD update. A
configuration is one job of N ranks; its rate is the slowest rank's timed steps per second (the
all-reduce paces every rank to it), measured R times, interleaved with the other configurations so
load drifts hit all alike. Printed per configuration: median steps/s, the spread (min-max), and on a
machine with more than one NUMA node the share of the ranks' resident pages that sit on a node
other than the one their CPUs belong to (numa_maps, at the end of the run).

Configurations:
- torchrun: `python -m torch.distributed.run --standalone --nproc-per-node=N` as it comes
  (OMP_NUM_THREADS=1 for N > 1, no binding);
- topo MODE: `topo run --standalone --nproc-per-node=N --numa-binding=MODE --memory numa`, topo's
  defaults (OMP_NUM_THREADS = the CPUs each rank is bound to);
- grid: binding none or each MODE x OMP_NUM_THREADS 1, 2, 4, ... up to the CPUs per rank.

The workload is CPU-only: every job runs with the GPUs hidden (CUDA_VISIBLE_DEVICES="",
ROCR_VISIBLE_DEVICES=""), so that torchrun and topo plan its ranks on the CPUs of a GPU host as of
any other, whatever its number of GPUs. The first line names the host the figures come from.

The summary names the grid's best and how far each topo default is from it. `--quick` is a
smoke run (small sizes, 1 repeat, two modes). Uses this checkout's topo (PYTHONPATH) and the torch
installed for this interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ["node", "socket", "exclusive", "core-complex", "unique-contiguous"]
NO_GPUS = {"CUDA_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}  # CUDA and ROCm read "" as no GPU


def host() -> str:
    """The machine the figures come from: its name and CPU model, what topo finds on it (GPUs
    included, which the workload does not use), the CPUs this run may use, kernel, Python, torch."""
    import importlib.metadata
    import platform

    from topo import discover

    t = discover("/")
    gpus = [d for d in t.devices if d.kind == "gpu"]
    names = "".join(f"{name}, " for name in sorted({d.name for d in gpus if d.name}))
    hidden = f" ({names}hidden from the workload)" if gpus else ""
    return (f"host {t.info.get('hostname') or platform.node()}: {t.info.get('cpu_model') or platform.processor()}, "
            f"{t.summary()}{hidden}; {t.allowed_pus.weight()} CPUs allowed; "
            f"Linux {platform.release()}, Python {platform.python_version()}, "
            f"torch {importlib.metadata.version('torch')}")


def node_cpus() -> dict[int, set[int]]:
    out = {}
    base = Path("/sys/devices/system/node")
    for d in sorted(base.glob("node[0-9]*")):
        text = (d / "cpulist").read_text().strip()
        cpus: set[int] = set()
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        out[int(d.name[4:])] = cpus
    return out or {0: set(os.sched_getaffinity(0))}


def remote_share() -> tuple[int, int]:
    """(pages on a node other than this process's, all resident pages) from numa_maps. The
    process's node: the one holding all its allowed CPUs, else the one it runs on now."""
    nodes = node_cpus()
    allowed = os.sched_getaffinity(0)
    home = [n for n, c in nodes.items() if allowed <= c]
    if not home:
        with open("/proc/self/stat") as fh:
            cpu = int(fh.read().rsplit(")", 1)[1].split()[36])  # field 39, "processor"
        home = [n for n, c in nodes.items() if cpu in c]
    remote = total = 0
    with open("/proc/self/numa_maps") as fh:
        for line in fh:
            for field in line.split()[2:]:
                if field.startswith("N") and "=" in field:
                    node, _, count = field[1:].partition("=")
                    total += int(count)
                    if int(node) not in home:
                        remote += int(count)
    return remote, total


def worker(args: argparse.Namespace) -> None:
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    params = list(model.parameters())
    x = torch.randn(args.batch, args.hidden)
    y = torch.randn(args.batch, args.hidden)

    def step() -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        model.zero_grad()
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                p -= 0.01 * flat[offset:offset + n].view_as(p)
                offset += n

    for _ in range(args.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    elapsed = time.perf_counter() - start
    remote, total = remote_share()
    record = {"rank": rank, "steps_per_s": args.steps / elapsed, "threads": torch.get_num_threads(),
              "cpus": sorted(os.sched_getaffinity(0)), "remote_pages": remote, "pages": total}
    with open(os.path.join(args.worker, f"rank{rank}.json"), "w") as fh:
        json.dump(record, fh)
    dist.destroy_process_group()


def configurations(args: argparse.Namespace, cpus_per_rank: int) -> list[dict]:
    threads = [1]
    while threads[-1] * 2 <= cpus_per_rank:
        threads.append(threads[-1] * 2)
    configs = [{"name": "torchrun defaults", "launcher": "torchrun", "binding": None, "omp": None}]
    configs += [{"name": f"topo {m} (default)", "launcher": "topo", "binding": m, "omp": None} for m in args.modes]
    for binding in [None, *args.modes]:
        for t in threads:
            configs.append({"name": f"grid {binding or 'none'} x {t}", "launcher": "topo", "binding": binding, "omp": t})
    return configs


def run_once(config: dict, args: argparse.Namespace) -> dict:
    out = tempfile.mkdtemp(prefix="benefit-")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(NO_GPUS)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if config["omp"] is not None:
        env["OMP_NUM_THREADS"] = str(config["omp"])
    if config["launcher"] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run"]
    else:
        argv = [sys.executable, "-m", "topo", "run"]
        if config["binding"]:
            argv += [f"--numa-binding={config['binding']}", "--memory", "numa"]
    argv += ["--standalone", f"--nproc-per-node={args.nproc}", __file__, "--worker", out,
             "--steps", str(args.steps), "--warmup", str(args.warmup), "--hidden", str(args.hidden),
             "--batch", str(args.batch)]
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"benefit: {config['name']} failed (exit {p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    ranks = [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(args.nproc)]
    for r in range(args.nproc):
        (Path(out) / f"rank{r}.json").unlink()
    os.rmdir(out)
    return {"rate": min(r["steps_per_s"] for r in ranks), "threads": ranks[0]["threads"],
            "remote": sum(r["remote_pages"] for r in ranks) / max(1, sum(r["pages"] for r in ranks))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--nproc", type=int, default=None, help="ranks (default: one per NUMA node, at least 2)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated topo modes")
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 repeat, modes node and exclusive")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.quick:
        args.steps, args.warmup, args.repeats, args.hidden, args.batch = 5, 1, 1, 128, 32
        args.modes = "node,exclusive"
    args.modes = [m for m in args.modes.split(",") if m]
    nodes = node_cpus()
    allowed = os.sched_getaffinity(0)
    if args.nproc is None:
        args.nproc = max(2, len([n for n, c in nodes.items() if c & allowed]))
    cpus_per_rank = max(1, len(allowed) // args.nproc)
    configs = configurations(args, cpus_per_rank)
    print(host(), flush=True)
    print(f"{len(allowed)} CPUs, {len(nodes)} NUMA node(s), {args.nproc} ranks, {cpus_per_rank} CPU(s) per rank; "
          f"MLP hidden {args.hidden}, batch {args.batch}, {args.steps} timed steps, {args.repeats} repeat(s)", flush=True)
    results: dict[str, list[dict]] = {c["name"]: [] for c in configs}
    order = [c for c in configs for _ in range(args.repeats)]
    random.Random(0).shuffle(order)
    for i, config in enumerate(order, 1):
        results[config["name"]].append(run_once(config, args))
        print(f"\r{i}/{len(order)} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    multi = len(nodes) > 1
    width = max(len(c["name"]) for c in configs)
    print(f"{'configuration':<{width}}  threads  steps/s (median)  spread (min-max)" + ("  remote pages" if multi else ""))
    medians = {}
    for c in configs:
        rates = [r["rate"] for r in results[c["name"]]]
        medians[c["name"]] = statistics.median(rates)
        line = (f"{c['name']:<{width}}  {results[c['name']][0]['threads']:>7}  {medians[c['name']]:>16.2f}  "
                f"{min(rates):>7.2f}-{max(rates):<8.2f}")
        if multi:
            line += f"  {statistics.median(r['remote'] for r in results[c['name']]):>11.1%}"
        print(line)
    grid = [c["name"] for c in configs if c["name"].startswith("grid ")]
    best = max(grid, key=medians.get)
    print(f"grid's best: {best} at {medians[best]:.2f} steps/s")
    for c in configs:
        if not c["name"].startswith("grid "):
            print(f"{c['name']}: {medians[c['name']] / medians[best]:.0%} of the grid's best")


if __name__ == "__main__":
    main()
