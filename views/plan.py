"""A bind plan as a picture: `plan_overlay` makes one owner per process, in its own colour, tagged with its local
rank ("S": MindSpore's scheduler), with its memory node(s), the device it drives and its CPUs (all its thread
modules') outside that device's home node(s) flagged as remote; legend and notes follow `--explain`'s."""

from __future__ import annotations

from topo.planners.bindplan import BindPlan
from topo.planners.core import AllowedResources
from topo.planners.explain import analyse, driven_device, node_notes, process_cpus
from topo.cpuset import CpuSet, union_all
from topo.model import Topology
from topo.views.html import draw_html
from topo.views.palette import Overlay, Owner, colour
from topo.views.svg import draw_svg
from topo.views.terminal import text_map

def plan_overlay(topology: Topology, plan: BindPlan) -> Overlay:
    resources = AllowedResources(topology)
    rows, warnings = analyse(topology, plan)
    owners = []
    for i, (proc, row) in enumerate(zip(plan.processes, rows)):
        cpus = process_cpus(proc, resources)
        if plan.cpu_mode == "cpu":  # runtime's and minddata's CPUs too (--explain's table counts main's)
            cpus = union_all([cpus, *(proc.cpus(name) for name, _ in proc.modules)])
        dev = driven_device(plan, proc, resources)
        device, remote, local = None, CpuSet(), "-"
        if dev is not None and cpus:
            d = resources.devices[dev]
            device = (d.kind, d.index)
            home = resources.cpus_of_nodes(resources.home_of(dev))
            remote = cpus - home
            local = "local" if not remote else ("partly remote" if cpus & home else "remote")
        tag = "S" if proc.is_scheduler else (row["rank"] if row["rank"] != "-" else str(i))
        cores = sum(1 for c in topology.cores if c.cpuset & cpus)
        owners.append(Owner(
            tag=tag, label="S" if proc.is_scheduler else f"r{tag}", colour=colour(i), cpus=cpus,
            memory=proc.memory_nodes or CpuSet(), device=device, remote=remote,
            legend=("scheduler" if proc.is_scheduler else f"rank {tag}",
                    f"{device[0].upper()} {dev}" if device else "-", cpus.to_list() or "-",
                    f"{cores} ({cpus.weight()} PUs)" if cpus else "-", row["memory"], row["node"], local)))
    n = len(plan.workers())
    title = (f"topo plan --mode {plan.meta.get('mode', '?')}: {n} process{'es' if n != 1 else ''} on "
             f"{topology.summary()}")
    return Overlay(tuple(owners), title=title, notes=(*node_notes(rows), *warnings),
                   legend_header=("rank", "device", "CPUs", "cores", "memory node", "device node", "local"))


def plan_svg(topology: Topology, plan: BindPlan) -> str:
    return draw_svg(topology, plan_overlay(topology, plan))


def plan_html(topology: Topology, plan: BindPlan) -> str:
    return draw_html(topology, plan_overlay(topology, plan))


def plan_map(topology: Topology, plan: BindPlan, *, colour: bool = False) -> str:
    """The terminal map for `topo plan --explain`: one line per NUMA node, one cell per core."""
    return text_map(topology, plan_overlay(topology, plan), colour=colour)
