"""NVIDIA gpu_affinity's five modes: all, single, single-unique, unique-interleaved, unique-contiguous.

A device's NODE affinity is its home node's allowed CPUs, its SOCKET affinity NVML's socket CPUs (else
its package's), as physical cores. As in gpu_affinity, each socket's cores outside every device's node
are dealt round-robin to the node cores, each node core heading a *group*; unique modes share a node's
groups among its devices (``balanced``: the same count each). Where gpu_affinity breaks (single-unique's
IndexError, socket scope's ``zip`` dropping cores): a free core with a warning, every core kept.
"""

from __future__ import annotations

from functools import partial
from itertools import cycle
from typing import Iterable

from topo.cpuset import CpuSet
from topo.errors import UsageError
from topo.model import Topology

from topo.planners.bindplan import BindPlan
from topo.planners.core import Job, AllowedResources, Options, build_plan

CoreGroup = tuple[int, ...]  # a node core's number, then the numbers of the socket cores dealt to it


class _Affinity:
    """Node and socket affinity of every rank, as core numbers of the resources, grouped by node."""

    def __init__(self, topology: Topology, job: Job):
        self.resources = resources = AllowedResources(topology)
        self.job = job
        self.homes = resources.homes(job)
        self.node_aff = {h: resources.cpus_of_nodes(h) for h in dict.fromkeys(self.homes)}
        self.node_cores = {h: resources.core_indexes(cpus) for h, cpus in self.node_aff.items()}
        # Socket scopes, each distinct set once: rank r's is sockets[socket_of[r]]. Without NVML's,
        # found once per home: hashing a machine-wide set per rank would cost O(PUs) each.
        self.sockets: list[CpuSet] = []
        self.socket_of: list[int] = []
        number: dict[CpuSet, int] = {}
        of_home: dict[tuple[int, ...], int] = {}
        for r, h in enumerate(self.homes):
            nvml = getattr(resources.devices.get(job.devices[r]), "socket_cpus", None)  # as the probe recorded it
            if nvml is not None and not nvml.intersects(resources.allowed):
                nvml = None
            if nvml is None and h in of_home:
                self.socket_of.append(of_home[h])
                continue
            s = (nvml & resources.allowed) | self.node_aff[h] if nvml is not None else (
                resources.package_cpus(self.node_aff[h]) or self.node_aff[h])
            if s not in number:
                number[s] = len(self.sockets)
                self.sockets.append(s)
            if nvml is None:
                of_home[h] = number[s]
            self.socket_of.append(number[s])
        on_socket: dict[int, set[int]] = {}
        for s, h in dict.fromkeys(zip(self.socket_of, self.homes)):
            on_socket.setdefault(s, set()).update(self.node_cores[h])
        # A core is some rank's node core or one socket's extra, never both: socket scopes can overlap
        # (a CPU-only rank's home nodes spanning packages), and a core dealt twice would be in two "unique" sets.
        self.node_union = {i for cores in self.node_cores.values() for i in cores}
        dealt = set(self.node_union)
        extra: dict[int, list[int]] = {}
        for s, heads in on_socket.items():
            unassigned = [i for i in resources.core_indexes(self.sockets[s]) if i not in dealt]
            dealt.update(unassigned)
            for head, core in zip(cycle(sorted(heads)), unassigned):
                extra.setdefault(head, []).append(core)
        self.grouped: dict[tuple[int, ...], tuple[CoreGroup, ...]] = {
            h: tuple((i, *extra.get(i, ())) for i in cores) for h, cores in self.node_cores.items()
        }

    def scope_cpus(self, rank: int, scope: str) -> CpuSet:
        return self.sockets[self.socket_of[rank]] if scope == "socket" else self.node_aff[self.homes[rank]]

    def cpus(self, rank: int, cores: list[int], options: Options) -> CpuSet:
        """The PUs of ``cores`` a rank may use: all threads or the lowest, within its scope."""
        return self.resources.union_of_cores(cores, options.multithreading) & self.scope_cpus(rank, options.scope)

    def check_and_cap(self, cores: list[int], rank: int, lo: int, hi: int | None) -> list[int]:
        if len(cores) < lo:
            d = self.job.devices[rank]
            have = self.resources.union_of_cores(cores) or "none"
            if d is None:  # gpu_affinity's words would speak of a GPU the machine does not have
                raise UsageError(f"local rank {rank} gets {len(cores)} physical cores ({have}), fewer than "
                                 f"min_physical_cores={lo}: without accelerators the allowed cores are split among the "
                                 f"job's {self.job.nproc} process{'es' if self.job.nproc != 1 else ''}; start fewer "
                                 "processes, use a mode that shares cores (node, single) or lower min_physical_cores")
            raise UsageError(f"Number of available physical cores for GPU {d} is less the predefinied minimum, "
                             f"min_physical_cores={lo}, available physical cores: {have} (count={len(cores)}); lower "
                             "min_physical_cores or use fewer processes")
        return cores if hi is None else cores[:hi]

    def plan(self, cpus: list[CpuSet], options: Options, warnings: Iterable[str] = ()) -> BindPlan:
        return build_plan(self.job, cpus, self.homes, options=options, resources=self.resources, warnings=warnings)


def ungroup(groups: tuple[CoreGroup, ...], scope: str) -> list[int]:
    """A device's core numbers in scope order: node scope, the group heads; socket scope, column by
    column (heads, then each group's first dealt core, ...) with no truncation, where
    gpu_affinity's ``chain(*zip(*groups))`` stops at the shortest group and loses cores."""
    if scope == "node":
        return [g[0] for g in groups]
    width = max((len(g) for g in groups), default=0)
    return [g[col] for col in range(width) for g in groups if col < len(g)]


def _per_scope(topology: Topology, job: Job, options: Options, cores_of, by_home: bool) -> BindPlan:
    """Ranks with the same scope (and home, if ``by_home``) share the CPUs of the cores
    ``cores_of(aff, rank)`` lists. A socket is keyed by its number: hashing its set costs O(PUs)."""
    aff = _Affinity(topology, job)
    of_scope: dict[object, CpuSet] = {}
    cpus = []
    for r, h in enumerate(aff.homes):
        scope = aff.socket_of[r] if options.scope == "socket" else h
        key = (h, scope) if by_home else scope
        if key not in of_scope:
            of_scope[key] = aff.cpus(r, cores_of(aff, r), options)
        cpus.append(of_scope[key])
    return aff.plan(cpus, options)


def plan_all(topology: Topology, job: Job, options: Options) -> BindPlan:
    def cores_of(aff, r):  # node-local cores (of any device) first, then the rest, by core order
        idx = aff.resources.core_indexes(aff.scope_cpus(r, options.scope))
        cores = [i for i in idx if i in aff.node_union] + [i for i in idx if i not in aff.node_union]
        return aff.check_and_cap(cores, r, options.min_physical_cores, options.max_physical_cores)
    return _per_scope(topology, job, options, cores_of, by_home=False)


def plan_single(topology: Topology, job: Job, options: Options) -> BindPlan:
    def cores_of(aff, r):  # the first core of the scope order: the first group's head
        return aff.check_and_cap(ungroup(aff.grouped[aff.homes[r]][:1], options.scope)[:1], r, 1, 1)
    return _per_scope(topology, job, options, cores_of, by_home=True)


def plan_single_unique(topology: Topology, job: Job, options: Options) -> BindPlan:
    aff = _Affinity(topology, job)
    resources = aff.resources
    taken: set[int] = set()
    orders: dict[tuple, list[int]] = {}
    cursors: dict[tuple, int] = {}

    def next_free(key: tuple, make) -> int | None:
        """The first untaken core of the list ``make()`` gives, made once and read on from the last call."""
        if key not in orders:
            orders[key] = make()
        order, i = orders[key], cursors.get(key, 0)
        while i < len(order) and order[i] in taken:
            i += 1
        cursors[key] = i
        return order[i] if i < len(order) else None

    picks: list[int] = []
    warnings = []
    for r, h in enumerate(aff.homes):
        pick = next_free(("node", h), lambda: [g[0] for g in aff.grouped[h]])
        if pick is None:
            # gpu_affinity skips this device and misaligns the list (IndexError); take a free core
            # of the socket, else the nearest free one anywhere.
            socket, where = aff.socket_of[r], "of its socket"
            pick = next_free(("socket", socket), lambda: resources.core_indexes(aff.sockets[socket]))
            if pick is None:
                where = "elsewhere"
                pick = next_free(("near", h), lambda: _by_distance_from(resources, h[0]))
            if pick is None:
                raise UsageError(f"single-unique needs one physical core per process, but {job.nproc} processes "
                                 f"share {len(resources.cores)} allowed cores; use mode single (shared cores) or "
                                 "fewer processes")
            warnings.append(f"{job.key(r)}: every core of its NUMA node is taken; given core "
                            f"{resources.cores[pick]} {where}")
        taken.add(pick)
        picks.append(pick)
    # a core given elsewhere is outside the rank's scope: whole cores, not restricted to it
    return aff.plan([resources.union_of_cores([i], options.multithreading) for i in picks], options, warnings)


def _by_distance_from(resources: AllowedResources, home: int) -> list[int]:
    """Every core, those of the nodes nearest to ``home`` first (then by core order)."""
    rank = {n: k for k, n in enumerate(resources.by_distance(home, resources.node_ids))}
    far = len(rank)
    return sorted(range(len(resources.cores)),
                  key=lambda i: (rank.get(resources.node_of_pu[resources.core_first[i]], far), i))


def _unique(topology: Topology, job: Job, options: Options, interleaved: bool) -> BindPlan:
    aff = _Affinity(topology, job)
    classes: dict[tuple[int, ...], list[int]] = {}  # devices with the same node share its groups
    for r, h in enumerate(aff.homes):
        classes.setdefault(h, []).append(r)
    k = min(len(aff.grouped[h]) // len(ranks) for h, ranks in classes.items())
    cpus: list[CpuSet] = [CpuSet()] * job.nproc
    for h, ranks in classes.items():
        groups = aff.grouped[h]
        g = len(ranks)
        if options.balanced:
            groups, per = groups[:g * k], k
        else:
            per = len(groups) // g  # gpu_affinity: the remainder of a contiguous cut stays unused
        for j, r in enumerate(ranks):
            mine = groups[j::g] if interleaved else groups[j * per:(j + 1) * per]
            cores = aff.check_and_cap(ungroup(mine, options.scope), r, options.min_physical_cores,
                                      options.max_physical_cores)
            cpus[r] = aff.cpus(r, cores, options)
    return aff.plan(cpus, options)


plan_unique_interleaved = partial(_unique, interleaved=True)
plan_unique_contiguous = partial(_unique, interleaved=False)
