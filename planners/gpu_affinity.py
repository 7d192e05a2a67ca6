"""NVIDIA gpu_affinity's five modes (`gpu_affinity.set_affinity`, anchors §3.4-3.5).

Each device has a NODE affinity (allowed CPUs of its home NUMA node) and a SOCKET affinity
(allowed CPUs of that node's package). Both are cut into physical cores (SMT sibling groups).
On each socket the cores outside every device's node are dealt round-robin to the node cores
("group by node"), so ``--scope socket`` adds a share of the socket's device-less cores.

``all``
    Every core of the scope, node-local cores first. **Ex.:** scope node on DGX A100: GPU 0 gets
    the 16 cores of node 3.
``single``
    The first core of the scope (``--min/--max-physical-cores`` ignored, as in gpu_affinity).
``single-unique``
    The first node core no earlier device took. Where gpu_affinity raises IndexError (more
    devices than cores), a free core of the socket, then of the machine, is used with a warning;
    an error only when no free core remains at all.
``unique-interleaved`` / ``unique-contiguous``
    Devices with the same affinity share its cores without overlap: every k-th core, or a block
    of k. ``--balanced`` (default) gives every device of the machine the same count (the minimum
    over nodes); ``--no-balanced`` uses all cores, the lower-ranked devices getting the remainder
    (contiguous too, where gpu_affinity leaves the remainder unused).

``--multithreading all-logical`` keeps all threads of each core, ``single-logical`` the lowest.
Where gpu_affinity's socket scope drops cores (``zip`` truncates when a node's share of the
socket's extra cores is uneven), every core is kept here.
"""

from __future__ import annotations

from itertools import cycle

from topo.cpuset import CpuSet, union_all
from topo.errors import UsageError
from topo.model import Topology

from planners.bindplan import BindPlan
from planners.core import Job, Layout, Options, build_plan, threads

Group = tuple[CpuSet, ...]  # a node core followed by the socket cores dealt to it


class _Affinity:
    def __init__(self, topology: Topology, job: Job):
        self.layout = layout = Layout(topology)
        self.homes = layout.homes(job)
        self.node_aff = [layout.cpus_of_nodes(h) for h in self.homes]
        self.socket_aff = [self._socket(job.devices[r], n) for r, n in enumerate(self.node_aff)]
        self.node_cores = [layout.cores_in(a) for a in self.node_aff]
        # group by node: per socket, the cores outside all device nodes, round-robin over node cores
        assigned: dict[CpuSet, set[int]] = {}
        for s, cores in zip(self.socket_aff, self.node_cores):
            assigned.setdefault(s, set()).update(c.first() for c in cores)
        # A core is some rank's node core or one socket's extra, never both: socket scopes can
        # overlap (a CPU-only rank whose home nodes span packages), and a core dealt twice would
        # end up in two "unique" sets.
        dealt = {c.first() for cores in self.node_cores for c in cores}
        extra: dict[int, list[CpuSet]] = {}
        for s, firsts in assigned.items():
            unassigned = [c for c in layout.cores_in(s) if c.first() not in dealt]
            dealt.update(c.first() for c in unassigned)
            for a, u in zip(cycle(sorted(firsts)), unassigned):
                extra.setdefault(a, []).append(u)
        self.grouped: list[tuple[Group, ...]] = [
            tuple((c, *extra.get(c.first(), ())) for c in cores) for cores in self.node_cores
        ]
        self.node_union = {c.first() for cores in self.node_cores for c in cores}

    def _socket(self, device: int | None, node_aff: CpuSet) -> CpuSet:
        """NVML's SOCKET-scope affinity when the probe recorded it, else the node's package."""
        dev = self.layout.devices.get(device) if device is not None else None
        nvml = getattr(dev, "socket_cpus", None) if dev is not None else None
        if nvml is not None and nvml & self.layout.allowed:
            return (nvml & self.layout.allowed) | node_aff
        return self.layout.package_cpus(node_aff) or node_aff

    def ungroup(self, grouped: tuple[Group, ...], scope: str) -> list[CpuSet]:
        if scope == "node":
            return [g[0] for g in grouped]
        # column by column (node cores, then each one's first extra, ...), with no truncation:
        # gpu_affinity's chain(*zip(*groups)) stops at the shortest group and loses cores.
        out = []
        width = max((len(g) for g in grouped), default=0)
        for col in range(width):
            out.extend(g[col] for g in grouped if col < len(g))
        return out


def _check_and_cap(cores: list[CpuSet], rank: int, job: Job, lo: int, hi: int | None) -> list[CpuSet]:
    if len(cores) < lo:
        who = job.devices[rank] if job.devices[rank] is not None else f"rank {rank}"
        raise UsageError(
            f"Number of available physical cores for GPU {who} is less the predefinied minimum, "
            f"min_physical_cores={lo}, available physical cores: {union_all(cores)} (count={len(cores)}); "
            "lower --min-physical-cores or use fewer processes")
    return cores if hi is None else cores[:hi]


def _finish(aff: _Affinity, job: Job, per_rank: list[list[CpuSet]], mode: str, options: Options,
            warnings=()) -> BindPlan:
    cpus = [union_all(threads(c, options.multithreading) for c in cores) for cores in per_rank]
    return build_plan(job, cpus, aff.homes, mode=mode, options=options, layout=aff.layout, warnings=warnings)


def plan_all(topology: Topology, job: Job, options: Options) -> BindPlan:
    aff = _Affinity(topology, job)
    per_rank = []
    for r in range(job.nproc):
        scope_aff = aff.socket_aff[r] if options.scope == "socket" else aff.node_aff[r]
        cores = aff.layout.cores_in(scope_aff)
        cores.sort(key=lambda c: (0 if c.first() in aff.node_union else 1, c.first()))
        per_rank.append(_check_and_cap(cores, r, job, options.min_physical_cores, options.max_physical_cores))
    return _finish(aff, job, per_rank, "all", options)


def plan_single(topology: Topology, job: Job, options: Options) -> BindPlan:
    aff = _Affinity(topology, job)
    per_rank = [_check_and_cap(aff.ungroup(aff.grouped[r], options.scope), r, job, 1, 1)
                for r in range(job.nproc)]
    return _finish(aff, job, per_rank, "single", options)


def plan_single_unique(topology: Topology, job: Job, options: Options) -> BindPlan:
    aff = _Affinity(topology, job)
    taken: set[int] = set()
    per_rank: list[list[CpuSet]] = []
    warnings = []
    for r in range(job.nproc):
        pick = next((g[0] for g in aff.grouped[r] if g[0].first() not in taken), None)
        if pick is None:
            # gpu_affinity skips this device and misaligns the list (IndexError); take a free core
            # of the socket, else the nearest free one anywhere.
            socket_free = [c for c in aff.layout.cores_in(aff.socket_aff[r]) if c.first() not in taken]
            anywhere = [c for c in aff.layout.cores if c.first() not in taken]
            pool = socket_free or sorted(anywhere, key=lambda c: _distance(aff, r, c))
            if not pool:
                raise UsageError(
                    f"single-unique needs one physical core per process, but {job.nproc} processes "
                    f"share {len(aff.layout.cores)} allowed cores; use --mode single (shared cores) "
                    "or fewer processes")
            pick = pool[0]
            warnings.append(f"{job.key(r)}: every core of its NUMA node is taken; given core "
                            f"{pick} {'of its socket' if socket_free else 'elsewhere'}")
        taken.add(pick.first())
        per_rank.append([pick])
    return _finish(aff, job, per_rank, "single-unique", options, warnings)


def _distance(aff: _Affinity, rank: int, core: CpuSet) -> tuple[int, int]:
    home = aff.homes[rank][0]
    node = aff.layout.all_nodes.get(home)
    owner = next((n for n in aff.layout.node_ids if core.intersects(aff.layout.node_cpus[n])), home)
    dist = node.distances.get(owner, 1 << 30) if node is not None else 0
    return (dist, core.first())


def _unique(topology: Topology, job: Job, options: Options, interleaved: bool) -> BindPlan:
    aff = _Affinity(topology, job)
    classes: dict[tuple, list[int]] = {}
    for r in range(job.nproc):
        key = tuple(tuple(c.first() for c in g) for g in aff.grouped[r])
        classes.setdefault(key, []).append(r)
    lists = {key: aff.ungroup(aff.grouped[ranks[0]], options.scope) for key, ranks in classes.items()}
    k = min(len(lists[key]) // len(ranks) for key, ranks in classes.items())
    per_rank: list[list[CpuSet]] = [[] for _ in range(job.nproc)]
    for key, ranks in classes.items():
        cores = lists[key]
        g = len(ranks)
        if options.balanced:
            cores = cores[:g * k]
        q, m = divmod(len(cores), g)
        for j, r in enumerate(ranks):
            if interleaved:
                mine = cores[j::g]
            else:
                start = j * q + min(j, m)
                mine = cores[start:start + q + (1 if j < m else 0)]
            per_rank[r] = mine
    per_rank = [_check_and_cap(c, r, job, options.min_physical_cores, options.max_physical_cores)
                for r, c in enumerate(per_rank)]
    return _finish(aff, job, per_rank, "unique-interleaved" if interleaved else "unique-contiguous", options)


def plan_unique_interleaved(topology: Topology, job: Job, options: Options) -> BindPlan:
    return _unique(topology, job, options, interleaved=True)


def plan_unique_contiguous(topology: Topology, job: Job, options: Options) -> BindPlan:
    return _unique(topology, job, options, interleaved=False)
