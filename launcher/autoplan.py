"""`--bind_core=True` / `--bind_numa=True`: the `msrun-auto` planner's plan for this job's devices.

The planner decides (planners/msrun.py documents where it differs from msrun); the launcher reads
the plan's entries as it reads any bind JSON's (launcher.binding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from topo.planners.bindplan import BindPlan
    from topo.model import Topology


def msrun_auto(topology: Topology, physical: Sequence[int], kind: str) -> BindPlan:
    """The plan msrun's automatic allocation gives local ranks driving devices `physical` (in rank
    order): main CPUs per process (`kind="core"`, --bind_core=True) or one NUMA node for CPUs and
    memory (`kind="numa"`, --bind_numa=True). Entries are keyed `device<physical id>`."""
    from topo import planners
    from topo.planners.core import Job, accelerators

    # a CPU-only machine has no devices to be next to: the planner splits the allowed CPUs
    devices = tuple(physical) if accelerators(topology) else (None,) * len(physical)
    return planners.plan(topology, "msrun-auto", job=Job(devices), msrun_bind=kind,
                         memory="numa" if kind == "numa" else "none")
