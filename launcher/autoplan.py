"""`--bind_core=True` / `--bind_numa=True`: the `msrun-auto` planner, read back per local rank.

The planner decides (planners/msrun.py documents where it differs from msrun); the launcher only
turns its plan into msrun's table form: a CPU list (or NUMA node list) per local rank.
"""

from __future__ import annotations

from typing import Sequence

from topo.model import Topology


def msrun_auto(topology: Topology, keys: Sequence[str], kind: str) -> tuple[list[list[int] | None], list[str]]:
    """Per process key (`device<physical id>`, in local-rank order): the CPUs (`kind="cpu"`) or
    NUMA nodes (`kind="numa"`) msrun's automatic allocation gives it; plus the planner's warnings."""
    import planners
    from planners.core import Job, accelerators

    # a CPU-only machine has no devices to be next to: the planner splits the allowed CPUs
    devices = [int(k[len("device"):]) for k in keys] if accelerators(topology) else [None] * len(keys)
    plan = planners.plan(topology, "msrun-auto", job=Job(tuple(devices)),
                         msrun_bind="core" if kind == "cpu" else "numa", memory="none")
    lists: list[list[int] | None] = []
    for key in keys:
        try:
            entry = plan.process(key)
        except KeyError:
            lists.append(None)
            continue
        if kind == "cpu":
            ids = list(entry.cpus("main"))
        else:
            ids = [] if entry.cpu_nodes is None else list(_nodes(entry.cpu_nodes))
        lists.append(ids or None)
    return lists, list(plan.warnings)


def _nodes(value: int | str):
    from planners.bindjson import expand_ranges

    return [value] if isinstance(value, int) else expand_ranges(value)
