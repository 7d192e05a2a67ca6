"""PyTorch's four NUMA-binding strategies (`torch.numa.binding`'s AffinityMode).

``node``
    All allowed CPUs of the device's NUMA node. **Ex.:** GPUs 0 and 1 on node 3 (CPUs 48-63,
    176-191) both get ``48-63,176-191``.
``socket``
    All allowed CPUs of the package(s) holding the device's node; CPU-less and disallowed nodes
    are skipped (where torch's ``min()`` of an empty set fails).
``exclusive``
    The node's allowed physical cores split among its devices in device order, the lower-ranked
    getting the remainder. **Ex.:** node 1 has 16 cores and GPUs 2 and 3: GPU 2 gets cores 0-7.
``core-complex``
    The node's last-level-cache groups (L3 / CCX), most allowed CPUs first; the node's i-th
    device gets group ``i % groups`` (shared, with a warning, when there are more devices).
"""

from __future__ import annotations

from topo.cpuset import CpuSet
from topo.errors import UsageError
from topo.model import Topology

from topo.planners.bindplan import BindPlan
from topo.planners.core import Job, AllowedResources, Options, _lookup, build_plan, nodes_text


def _groups(job: Job, homes) -> dict[tuple[int, ...], list[int]]:
    """Ranks sharing a home, ordered by device id (torch: sorted GPUs of the node)."""
    out: dict[tuple[int, ...], list[int]] = {}
    for r, h in enumerate(homes):
        out.setdefault(h, []).append(r)
    for ranks in out.values():
        ranks.sort(key=lambda r: (job.devices[r] if job.devices[r] is not None else r, r))
    return out


def plan_node(topology: Topology, job: Job, options: Options, *, socket: bool = False) -> BindPlan:
    resources = AllowedResources(topology)
    homes = resources.homes(job)
    per_home = {h: resources.cpus_of_nodes(h) for h in set(homes)}
    if socket:
        per_home = {h: resources.package_cpus(cpus) or cpus for h, cpus in per_home.items()}
    return build_plan(job, [per_home[h] for h in homes], homes, options=options, resources=resources)


def plan_socket(topology: Topology, job: Job, options: Options) -> BindPlan:
    return plan_node(topology, job, options, socket=True)


def plan_exclusive(topology: Topology, job: Job, options: Options) -> BindPlan:
    resources = AllowedResources(topology)
    homes = resources.homes(job)
    cpus: list[CpuSet] = [CpuSet()] * job.nproc
    for home, ranks in _groups(job, homes).items():
        cores = resources.cores_of_nodes(home)
        q, m = divmod(len(cores), len(ranks))
        if q < 1:
            what = "GPUs" if job.devices[ranks[0]] is not None else "processes"
            raise UsageError(
                f"There are only {len(cores)} physical cores on numa_node_index={nodes_text(home)}, but there "
                f"are {len(ranks)} {what} associated with this NUMA node; use mode node (shared CPUs) "
                "or fewer processes")
        node_cpus = resources.cpus_of_nodes(home)
        for i, r in enumerate(ranks):
            start = i * q + min(i, m)
            end = start + q + (1 if i < m else 0)
            cpus[r] = resources.union_of_cores(cores[start:end]) & node_cpus
    return build_plan(job, cpus, homes, options=options, resources=resources)


def plan_core_complex(topology: Topology, job: Job, options: Options) -> BindPlan:
    resources = AllowedResources(topology)
    homes = resources.homes(job)
    cpus: list[CpuSet] = [CpuSet()] * job.nproc
    warnings = []
    llcs_of_node: dict[int, set[int]] = {}  # which cache groups touch each node: one pass over the PUs
    for i, llc in enumerate(resources.llcs):
        for n in _lookup(resources.node_of_pu, llc):
            llcs_of_node.setdefault(n, set()).add(i)
    for home, ranks in _groups(job, homes).items():
        node_cpus = resources.cpus_of_nodes(home)
        touching = sorted(set().union(*(llcs_of_node.get(n, ()) for n in home)))
        groups = [resources.llcs[i] & node_cpus for i in touching]
        if not groups:
            warnings.append(f"no cache information for node {nodes_text(home)}: each process gets the whole node")
            groups = [node_cpus]
        groups.sort(key=lambda g: (-g.weight(), g.first()))
        if len(ranks) > len(groups):
            warnings.append(f"node {nodes_text(home)} has {len(groups)} last-level cache groups for "
                            f"{len(ranks)} processes: some processes share one (as torch does)")
        for i, r in enumerate(ranks):
            cpus[r] = groups[i % len(groups)]
    return build_plan(job, cpus, homes, options=options, resources=resources, warnings=warnings)
