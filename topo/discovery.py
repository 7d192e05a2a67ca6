"""discover(): run the probes below one root and assemble the Topology.

The sysfs probe yields complete objects; this module applies the cgroup/affinity restriction the
way hwloc does (drop what is disallowed, keep CPU-less objects that still hold an allowed NUMA
node), adds Group objects where a NUMA node matches no CPU-side object, and attaches devices.
"""

from __future__ import annotations

import os
from dataclasses import replace

from topo.cpuset import CpuSet, union_all
from topo.fsroot import FsRoot
from topo.model import Group, NumaNode, Topology
from topo.probes import cgroup as cgroup_probe
from topo.probes import sysfs


def discover(root: str | os.PathLike | None = None, *, include_disallowed: bool = False,
             probes: tuple[str, ...] | None = None) -> Topology:
    """The topology of the machine whose /sys and /proc live below `root` (default: this one).

    `root` defaults to $TOPO_ROOT, then "/". `probes` limits the optional probes (device probes
    such as "nvml" or "npu-smi"); sysfs always runs.
    """
    if root is None:
        root = os.environ.get("TOPO_ROOT") or "/"
    fs = FsRoot(root)
    status: dict[str, str] = {}

    cpus = sysfs.probe_cpus(fs)
    raw_nodes = sysfs.probe_nodes(fs, cpus.online)
    status["sysfs"] = "ok" if raw_nodes.from_sysfs else "ok (no NUMA information: one node assumed)"
    if not (raw_nodes.from_sysfs and cpus.has_topology):
        # lscpu fallback: containers that hide /sys/devices/system/node or the CPU topology.
        from topo.probes import lscpu as lscpu_probe

        cpus, raw_nodes, lscpu_status = lscpu_probe.fill_gaps(fs, cpus, raw_nodes)
        if lscpu_status:
            status["lscpu"] = lscpu_status

    allowed = cpus.online
    allowed_nodes = CpuSet(n.os_index for n in raw_nodes.nodes)
    cg = cgroup_probe.probe_cgroup(fs)
    if cg is None:
        status["cgroup"] = "none"
    else:
        status["cgroup"] = f"{cg.version} {cg.path}"
        if cg.cpus is not None:
            allowed &= cg.cpus
        if cg.mems is not None:
            allowed_nodes &= cg.mems
    if fs.is_this_system and hasattr(os, "sched_getaffinity"):
        allowed &= CpuSet(os.sched_getaffinity(0))
        status["affinity"] = "ok"
    else:
        status["affinity"] = "off: not this system"

    pus = cpus.online if include_disallowed else allowed
    kept_nodes = [n for n in raw_nodes.nodes if include_disallowed or n.os_index in allowed_nodes]
    # A node's attachment point in the complete topology: own CPUs, or its locality if memory-only.
    anchors = [n.locality for n in kept_nodes if n.locality]

    def keep(objs):
        out = []
        for o in objs:
            visible = o.cpuset & pus
            if visible or any(a <= o.cpuset for a in anchors):
                out.append(replace(o, cpuset=visible))
        return tuple(out)

    def keep_cores(objs):
        return tuple(replace(c, cpuset=c.cpuset & pus) for c in objs if c.cpuset & pus)

    nodes = tuple(
        replace(n, cpuset=n.cpuset & pus, locality=n.locality & pus,
                distances={k: v for k, v in n.distances.items()
                           if include_disallowed or k in allowed_nodes})
        for n in kept_nodes
    )
    machine = cpus.online
    cpu_side = {o.cpuset for o in (*cpus.packages, *cpus.dies, *cpus.clusters, *cpus.caches, *cpus.cores)}
    groups = _node_groups(kept_nodes, cpu_side, machine, pus)

    pci = sysfs.probe_pci(fs, machine)
    pci = tuple(replace(d, local_cpus=d.local_cpus & pus) for d in pci)

    topology = Topology(
        root=fs.root,
        pus=pus,
        allowed_pus=allowed,
        complete_pus=cpus.complete,
        online_pus=cpus.online,
        allowed_numa_nodes=allowed_nodes,
        packages=keep(cpus.packages),
        dies=keep(cpus.dies),
        clusters=keep(cpus.clusters),
        numa_nodes=nodes,
        cores=keep_cores(cpus.cores),
        caches=keep(cpus.caches),
        groups=groups,
        memory_side_caches=tuple(
            replace(m, cpuset=m.cpuset & pus) for m in raw_nodes.memory_side_caches
            if set(m.numa_nodes) & {n.os_index for n in kept_nodes}
        ),
        pci_devices=pci,
        probes=status,
        info=_info(fs, cg, cpus.models),
        include_disallowed=include_disallowed,
    )
    from topo.probes import devices as device_probes

    return device_probes.attach_devices(topology, fs, probes)


def _node_groups(nodes: list[NumaNode], cpu_side: set[CpuSet], machine: CpuSet, pus: CpuSet):
    """Groups as hwloc makes them: one per NUMA locality that matches no package/die/cache/core
    (a node spanning packages, or smaller than a core), one holding CPU-less nodes that have no
    locality, and those found by clustering the distance matrix."""
    seen: set[CpuSet] = set()
    groups = []
    for node in nodes:
        loc = node.locality & machine
        if loc == machine or loc in cpu_side or loc in seen:
            continue
        seen.add(loc)
        members = tuple(n.os_index for n in nodes if n.locality & machine == loc)
        groups.append(Group(loc & pus, members, "numa" if loc else "cpu-less"))
    for loc, members in _distance_groups(nodes, machine):
        if loc == machine or loc in cpu_side or loc in seen:
            continue
        seen.add(loc)
        groups.append(Group(loc & pus, members, "distance"))
    groups.sort(key=lambda g: (g.cpuset.first(), -g.cpuset.weight()))
    return tuple(groups)


def _distance_groups(nodes: list[NumaNode], machine: CpuSet) -> list[tuple[CpuSet, tuple[int, ...]]]:
    """Clusters of nodes closer to each other than to the rest (hwloc's groups by distances):
    connect nodes whose distance is the matrix's smallest off-diagonal value; keep the result
    only if it splits the nodes into several groups, and recurse one level up on the groups."""
    ids = [n.os_index for n in nodes if n.distances]
    if len(ids) <= 2:
        return []
    dist = {n.os_index: n.distances for n in nodes}
    loc = {n.os_index: n.locality & machine for n in nodes}

    def apart(a: tuple[int, ...], b: tuple[int, ...]) -> int:
        return min(dist[x].get(y, 1 << 30) for x in a for y in b)

    members = [(i,) for i in ids]
    out = []
    while len(members) > 2:
        best = min(apart(a, b) for a in members for b in members if a != b)
        # union-find over "as close as the closest pair", in both directions
        parent = list(range(len(members)))

        def find(x: int, parent=parent) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for x, a in enumerate(members):
            for y, b in enumerate(members):
                if x < y and apart(a, b) <= best and apart(b, a) <= best:
                    parent[find(x)] = find(y)
        clusters: dict[int, tuple[int, ...]] = {}
        for x, a in enumerate(members):
            clusters[find(x)] = clusters.get(find(x), ()) + a
        if len(clusters) in (1, len(members)):
            break
        members = sorted(clusters.values())
        for group in members:
            if len(group) > 1:
                out.append((union_all(loc[i] for i in group), tuple(sorted(group))))
    return out


def _info(fs: FsRoot, cg, models: dict) -> dict[str, str]:
    """What lstopo prints on the Machine line that a user wants to see: the CPU model, the cgroup
    and, on this machine, the architecture and kernel."""
    info = {}
    if models:
        info["cpu_model"] = next(iter(models.values()))
    if cg is not None:
        info["linux_cgroup"] = cg.path
    if fs.is_this_system:
        uname = os.uname()
        info.update(architecture=uname.machine, os_release=uname.release, hostname=uname.nodename)
    return info
