#!/usr/bin/env python3
"""Generate a unified bind JSON the way MindSpore's sample `gen_bind_json.py` does.

Same options, defaults and messages; the planning is `planners.plan(..., "msrun-auto")` with
gen_bind_json's thread-module layout, so this and `topo plan --mode msrun-auto --modules ...`
write the same file:

    python tools/gen_bind_json.py -o bind.json                 # devices from the topology
    python tools/gen_bind_json.py --device-count 2 --scheduler-base global

Rules (MindSpore's): bind_cpu_mode=cpu, bind_memory_mode=numa, actor_thread_fix_bind=true; each
device's CPU list comes from its NUMA node first (devices sharing a node move to a free node),
then from nodes without devices; modules are relative positions in that list (runtime 4-8,
minddata 9-12, main 13-19, optional pynative); the scheduler gets positions 20-23 of the CPUs no
device uses (else of all CPUs, or of device0's list), and no memory binding.

Where MindSpore's script fails we do better: CPUs come from the cgroup v1 *or* v2 cpuset and the
affinity mask (via topo.discover), not only `/sys/fs/cgroup/cpuset/cpuset.cpus`; more devices than
NUMA nodes share nodes instead of failing ("not enough NUMA nodes"); explicit --device-ids that
the topology knows keep their NUMA affinity. Set TOPO_ROOT to plan for a captured machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _import_planners():
    try:
        from topo import planners  # noqa: F401
    except ImportError:  # run from a checkout without `pip install -e .`
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _whole(text: str) -> int:
    """argparse's type for counts: ASCII digits (int() would also take "١" as 1 and "1_0" as 10)."""
    from topo.numbers import ascii_number

    number = ascii_number(text.strip())
    if number is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number (ASCII digits)")
    return number


def _ids(text: str, where: str) -> list[int]:
    """Device ids from a comma list (ranges too, "0-3"), read by CpuSet.parse: ASCII digits, bounded."""
    from topo.cpuset import CpuSet
    from topo.errors import ParseError

    pieces = [x.strip() for x in text.split(",") if x.strip()]
    try:
        return list(CpuSet.parse(",".join(pieces)))
    except ParseError as exc:
        raise ValueError(f"{where}: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Generate a unified CPU/NUMA bind JSON for msrun --bind_numa "
                                            "and mindspore.runtime.set_cpu_affinity.")
    p.add_argument("-o", "--output", default="bind_config.json", help="output path (default: bind_config.json)")
    p.add_argument("--device-ids", default="", help="comma-separated device ids, e.g. 0,1,2")
    p.add_argument("--device-count", type=_whole, default=None, help="number of devices (ids 0..N-1)")
    p.add_argument("--indent", type=_whole, default=2, help="JSON indent (default: 2)")
    p.add_argument("--runtime-range", default="4-8", help="runtime relative CPU range (default: 4-8)")
    p.add_argument("--minddata-range", default="9-12", help="minddata relative CPU range (default: 9-12)")
    p.add_argument("--main-range", default="13-19", help="main relative CPU range (default: 13-19)")
    p.add_argument("--pynative-range", default="", help="optional pynative relative CPU range")
    p.add_argument("--scheduler-range", default="20-23", help="scheduler relative CPU range (default: 20-23)")
    p.add_argument("--scheduler-base", default="free", choices=["free", "global", "device0"],
                   help="scheduler base CPU list: free (no device's CPUs), global (all) or device0")
    return p


def _device_ids(args, topology) -> tuple[list[int], bool]:
    """(ids, affinity known). Order of precedence as MindSpore's: --device-ids, --device-count,
    the devices found (npu-smi there, the topology here), ASCEND_RT_VISIBLE_DEVICES."""
    from topo.planners.core import accelerators

    known = {d.index: d for d in accelerators(topology)}

    def with_affinity(ids):
        return all(i in known and known[i].numa_node is not None for i in ids)

    if args.device_ids:
        ids = _ids(args.device_ids, "--device-ids")
        if not ids:
            raise ValueError("--device-ids provided but empty.")
        return ids, with_affinity(ids)
    if args.device_count is not None:
        if args.device_count < 1:
            raise ValueError("--device-count must be >= 1")
        ids = list(range(args.device_count))
        return ids, with_affinity(ids)
    if known:
        return sorted(known), with_affinity(sorted(known))
    env = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "")
    if env.strip():
        print("npu-smi unavailable; using ASCEND_RT_VISIBLE_DEVICES for device ids.", file=sys.stderr)
        return _ids(env, "ASCEND_RT_VISIBLE_DEVICES"), False
    raise RuntimeError("Failed to detect devices; use --device-ids or --device-count.")


def generate(args, topology) -> dict:
    from topo.planners import plan
    from topo.planners.core import Job
    from topo.planners.thread_modules import parse_range

    modules = [("runtime", *parse_range("runtime-range", args.runtime_range)),
               ("minddata", *parse_range("minddata-range", args.minddata_range)),
               ("main", *parse_range("main-range", args.main_range))]
    if args.pynative_range:
        modules.append(("pynative", *parse_range("pynative-range", args.pynative_range)))
    scheduler = parse_range("scheduler-range", args.scheduler_range)
    if not (topology.allowed_pus & topology.pus):
        raise RuntimeError("No available CPUs detected from cpuset.")
    if not topology.cpu_nodes():
        raise RuntimeError("No available NUMA nodes detected.")
    ids, affinity = _device_ids(args, topology)
    result = plan(topology, "msrun-auto", job=Job(tuple(ids)), msrun_bind="core", affinity=affinity,
                  spread_nodes=True, memory="numa", modules=tuple(modules), scheduler_range=scheduler,
                  scheduler_base=args.scheduler_base, actor_thread_fix_bind=True)
    for w in result.warnings:
        print(w, file=sys.stderr)
    return result.to_json()


def main(argv=None, topology=None) -> int:
    _import_planners()  # topo too, which the parser's types use
    args = build_parser().parse_args(argv)
    try:
        if topology is None:
            from topo.discovery import discover

            topology = discover(os.environ.get("TOPO_ROOT") or None)
        data = generate(args, topology)
        path = os.path.abspath(args.output)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=args.indent, ensure_ascii=False)
            f.write("\n")
    except Exception as exc:  # MindSpore's script: one line, exit 1
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    print(f"Bind JSON generated: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
