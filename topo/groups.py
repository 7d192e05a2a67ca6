"""Group objects: the levels hwloc inserts where NUMA nodes match no CPU-side object."""

from __future__ import annotations

from dataclasses import replace

from topo.cpuset import CpuSet, union_all
from topo.model import Group, NumaNode


def node_groups(nodes: list[NumaNode], cpu_side: set[CpuSet], machine: CpuSet, pus: CpuSet):
    """Groups as hwloc makes them: one per NUMA locality that matches no package, die, cache or core (a node
    spanning packages, or smaller than a core), one with no CPUs for each CPU-less node without locality, and
    those found by clustering the distance matrix."""
    candidates = []
    for node in nodes:
        loc = node.locality & machine
        # hwloc gives each CPU-less node without locality a Group of its own (by nodeset)
        members = tuple(n.os_index for n in nodes if n.locality & machine == loc) if loc else (node.os_index,)
        candidates.append((loc, members, "numa" if loc else "cpu-less"))
    candidates += [(loc, members, "distance") for loc, members in _distance_groups(nodes, machine)]
    seen: set[CpuSet] = set()
    groups = []
    for loc, members, reason in candidates:
        if reason == "cpu-less" or not (loc == machine or loc in cpu_side or loc in seen):
            seen.add(loc)
            groups.append(Group(loc & pus, members, reason))
    groups.sort(key=lambda g: (g.cpuset.first(), -g.cpuset.weight()))
    return tuple(groups)


def _distance_groups(nodes: list[NumaNode], machine: CpuSet) -> list[tuple[CpuSet, tuple[int, ...]]]:
    """hwloc's groups by distances: connect nodes whose distance is the matrix's smallest off-diagonal value,
    keep the clusters if they split the nodes into several, and do it again one level up on the clusters."""
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
        # clusters: members as close as the closest pair (in both directions), transitively
        clusters: list[list[int]] = []
        for x, a in enumerate(members):
            near = [c for c in clusters
                    if any(apart(a, members[y]) <= best and apart(members[y], a) <= best for y in c)]
            clusters = [c for c in clusters if c not in near] + [sorted([x, *(y for c in near for y in c)])]
        if len(clusters) in (1, len(members)):
            break
        members = sorted(tuple(i for y in c for i in members[y]) for c in clusters)
        for group in members:
            if len(group) > 1:
                out.append((union_all(loc[i] for i in group), tuple(sorted(group))))
    return out


def fit_localities(nodes: list[NumaNode], cpu_side: list[CpuSet], machine: CpuSet) -> list[NumaNode]:
    """Each node's locality as the tree can hold it: below the smallest object covering its CPUs, through a new Group
    where none has exactly them; where that Group would straddle an object (CPUs 2-3 of package 0 and 6-7 of package
    1), the covering object's CPUs. Nodes with CPUs go first, then CPU-less ones, in node order, as hwloc's do."""
    tree = Placed(cpu_side)
    out = {}
    for node in sorted(nodes, key=lambda n: (not n.cpuset, n.os_index)):
        loc = node.locality & machine
        fitted = tree.fit(loc, machine)
        out[node.os_index] = node if fitted == loc else replace(node, locality=fitted | node.cpuset)
    return [out[n.os_index] for n in nodes]


class Placed:
    """The CPU sets of the objects in the tree, to place new ones by hwloc__insert_object_by_cpuset: a set equal to
    an object's, or nesting with every object (a Group of these CPUs fits), is kept; one that straddles an object
    hangs from the smallest object covering it (the machine at worst)."""

    def __init__(self, sets) -> None:
        self.placed = dict.fromkeys(sets)  # each distinct set once: caches and cores repeat one another's

    def fit(self, loc: CpuSet, machine: CpuSet) -> CpuSet:
        """Where something local to `loc` hangs: `loc` itself, or the covering object's CPUs."""
        m = loc.mask
        if not m or loc == machine or loc in self.placed:
            return loc
        # nested either way, or disjoint: their intersection is one of them, or nothing
        if all((i := m & o.mask) == m or i == o.mask or not i for o in self.placed):
            self.placed[loc] = None  # a Group of these CPUs fits
            return loc
        return min((o for o in self.placed if loc <= o), key=CpuSet.weight, default=machine)
