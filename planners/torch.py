"""PyTorch's NUMA-binding strategies (`torch.numa.binding`'s AffinityMode): node, socket (CPU-less and
disallowed nodes skipped, where torch's ``min()`` fails), exclusive, core-complex (most allowed CPUs
first, the node's i-th device taking group ``i % groups``)."""

from __future__ import annotations

from topo.cpuset import CpuSet
from topo.errors import UsageError
from topo.model import Topology

from topo.planners.bindplan import BindPlan
from topo.planners.core import Job, AllowedResources, Options, build_plan, nodes_text


def _per_home(topology: Topology, job: Job, options: Options, share) -> BindPlan:
    """``share(resources, home, ranks, warnings)`` gives the CPUs of the ranks on ``home``, by device id."""
    resources = AllowedResources(topology)
    homes = resources.homes(job)
    groups: dict[tuple[int, ...], list[int]] = {}
    for r, h in enumerate(homes):
        groups.setdefault(h, []).append(r)
    cpus: list[CpuSet] = [CpuSet()] * job.nproc
    warnings: list[str] = []
    for home, ranks in groups.items():
        ranks.sort(key=lambda r: (job.devices[r] if job.devices[r] is not None else r, r))
        for r, s in zip(ranks, share(resources, home, ranks, warnings)):
            cpus[r] = s
    return build_plan(job, cpus, homes, options=options, resources=resources, warnings=warnings)


def plan_node(topology: Topology, job: Job, options: Options) -> BindPlan:
    def share(resources, home, ranks, _):
        return [resources.cpus_of_nodes(home)] * len(ranks)
    return _per_home(topology, job, options, share)


def plan_socket(topology: Topology, job: Job, options: Options) -> BindPlan:
    def share(resources, home, ranks, _):
        cpus = resources.cpus_of_nodes(home)
        return [resources.package_cpus(cpus) or cpus] * len(ranks)
    return _per_home(topology, job, options, share)


def plan_exclusive(topology: Topology, job: Job, options: Options) -> BindPlan:
    def share(resources, home, ranks, _):
        cores = sorted(i for n in home for i in resources.node_cores[n])
        q, m = divmod(len(cores), len(ranks))
        if q < 1:
            what = "GPUs" if job.devices[ranks[0]] is not None else "processes"
            raise UsageError(f"There are only {len(cores)} physical cores on numa_node_index={nodes_text(home)}, "
                             f"but there are {len(ranks)} {what} associated with this NUMA node; use mode node "
                             "(shared CPUs) or fewer processes")
        node_cpus = resources.cpus_of_nodes(home)
        starts = [i * q + min(i, m) for i in range(len(ranks) + 1)]  # the first m get one core more
        return [resources.union_of_cores(cores[a:b]) & node_cpus for a, b in zip(starts, starts[1:])]
    return _per_home(topology, job, options, share)


def plan_core_complex(topology: Topology, job: Job, options: Options) -> BindPlan:
    def share(resources, home, ranks, warnings):
        node_cpus = resources.cpus_of_nodes(home)
        groups = [g & node_cpus for g in dict.fromkeys(g for n in home for g in resources.node_llcs.get(n, ()))]
        if not groups:
            warnings.append(f"no cache information for node {nodes_text(home)}: each process gets the whole node")
            groups = [node_cpus]
        groups.sort(key=lambda g: (-g.weight(), g.first()))
        if len(ranks) > len(groups):
            warnings.append(f"node {nodes_text(home)} has {len(groups)} last-level cache groups for "
                            f"{len(ranks)} processes: some processes share one (as torch does)")
        return [groups[i % len(groups)] for i in range(len(ranks))]
    return _per_home(topology, job, options, share)
