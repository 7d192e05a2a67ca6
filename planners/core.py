"""What every strategy ``(Topology, Job, Options) -> BindPlan`` shares: the job, the options, and a
per-topology index of allowed resources, which homes each rank on allowed NUMA node(s) with CPUs
(`AllowedResources.home_of`; CPU-only ranks on consecutive blocks of nodes)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, fields
from functools import cache, cached_property
from typing import Callable, Iterable, Sequence

from topo.binding import MEMORY
from topo.cpuset import CpuSet, union_all
from topo.errors import UsageError
from topo.model import Device, Topology
from topo.visible import default_kind

from topo.planners.bindplan import BindPlan, ProcessBinding, device_key


# --------------------------------------------------------------------------- job
@dataclass(frozen=True)
class Job:
    """Local rank r runs next to physical device ``devices[r]`` (None: a CPU-only rank)."""

    devices: tuple[int | None, ...]

    @property
    def nproc(self) -> int:
        return len(self.devices)

    @property
    def cpu_only(self) -> bool:
        return all(d is None for d in self.devices)

    def key(self, rank: int) -> str:
        """The bind JSON key ``deviceN``: the physical id, or a CPU-only rank's rank (msrun's DEVICE_ID)."""
        d = self.devices[rank]
        return device_key(rank if d is None else d)

    @classmethod
    def for_topology(cls, topology: Topology, *, devices: Sequence[int] | None = None,
                     nproc: int | None = None) -> "Job":
        """One process per accelerator unless ``devices`` picks (and orders) physical ids (``()``:
        CPU-only); ``nproc`` takes the first N devices, or N CPU-only processes when there are none."""
        if nproc is not None and nproc < 1:
            raise UsageError(f"the number of processes must be at least 1, got {nproc}")
        known = accelerators(topology)
        known_ids = {d.index for d in known}
        if devices is None:
            ids = [d.index for d in known]
        else:
            ids = [int(i) for i in devices]
            seen = set()
            for i in ids:
                if i in seen:
                    raise UsageError(f"device {i} is listed twice in the job's devices; list each device once")
                seen.add(i)
                if i not in known_ids:
                    have = ",".join(str(d.index) for d in known) or "none"
                    raise UsageError(f"device {i} is not in the topology (devices: {have}); "
                                     "check the device list and CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES")
        if not ids:
            n = nproc if nproc is not None else max(1, len(_cpu_nodes(topology)))
            return cls((None,) * n)
        if nproc is not None and nproc > len(ids):
            raise UsageError(f"{nproc} processes but only {len(ids)} devices ({','.join(map(str, ids))}); bind JSON "
                             "keys are per device, so use at most one process per device (or no devices for a "
                             "CPU-only job)")
        return cls(tuple(ids[:nproc]))


def accelerators(topology: Topology) -> tuple[Device, ...]:
    """The devices of `topo.visible.default_kind` (GPUs, else NPUs, else others), by physical id."""
    kind = default_kind(topology)
    if kind is None:
        return ()
    return tuple(sorted((d for d in topology.devices if d.kind == kind), key=lambda d: d.index))


# --------------------------------------------------------------------------- options
SCOPES = ("node", "socket")
MULTITHREADING = ("all-logical", "single-logical")
MSRUN_BIND = ("core", "numa")
SHARE = ("job", "host")
SCHEDULER_BASES = ("free", "global", "device0")


@dataclass(frozen=True)
class Options:
    """Every knob of every mode; each mode reads the ones it documents. Errors name the field."""

    scope: str = "node"  # gpu_affinity
    multithreading: str = "all-logical"  # gpu_affinity
    balanced: bool = True  # gpu_affinity unique-*
    min_physical_cores: int = 1  # gpu_affinity
    max_physical_cores: int | None = None  # gpu_affinity (and a cap for every mode's explain)
    memory: str = "numa"  # numa: bind memory to the process's home node; device: to its GPU's own memory node
    msrun_bind: str = "core"  # msrun-auto: core = --bind_core=True split, numa = --bind_numa=True
    share: str = "job"  # msrun-auto: divide CPUs by the job's processes, or by all host devices
    affinity: bool = True  # msrun-auto: False = msrun's no-affinity fallback (equal distribution)
    spread_nodes: bool = False  # msrun-auto core: first move devices sharing a node to free nodes
    modules: tuple[tuple[str, int, int], ...] | None = None  # gen_bind_json thread-module layout
    scheduler_range: tuple[int, int] | None = None  # relative positions in the scheduler base
    scheduler_base: str = "free"
    actor_thread_fix_bind: bool | None = None
    priority_cores: bool = False  # each rank's first CPU on a priority core of its home (planners.priority)

    def __post_init__(self):
        for name, allowed in (("scope", SCOPES), ("multithreading", MULTITHREADING), ("memory", MEMORY),
                              ("msrun_bind", MSRUN_BIND), ("share", SHARE),
                              ("scheduler_base", SCHEDULER_BASES)):
            value = getattr(self, name)
            if value not in allowed:
                raise UsageError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        if self.min_physical_cores < 1:
            raise UsageError(f"min_physical_cores must be at least 1, got {self.min_physical_cores}")
        if self.max_physical_cores is not None and self.max_physical_cores < self.min_physical_cores:
            raise UsageError(f"max_physical_cores ({self.max_physical_cores}) is below "
                             f"min_physical_cores ({self.min_physical_cores})")

    @classmethod
    def from_kwargs(cls, **kwargs) -> "Options":
        """Options from keywords: names and text values with '_' or '-', None for the default."""
        names = {f.name for f in fields(cls)}
        clean = {}
        for k, v in kwargs.items():
            key = k.replace("-", "_")
            if key not in names:
                raise UsageError(f"unknown planner option {k!r}; known: {', '.join(sorted(names))}")
            if v is not None:
                clean[key] = v.replace("_", "-").lower() if isinstance(v, str) else v
        return cls(**clean)


# --------------------------------------------------------------------------- allowed resources
PSEUDO_NODE = -1


def _cpu_nodes(topology: Topology):
    allowed = topology.allowed_pus & topology.pus
    return [n for n in topology.cpu_nodes() if n.cpuset.intersects(allowed)]


class AllowedResources:
    """Allowed resources of one topology, indexed once per plan so planning stays linear in the machine.
    Cores are numbered 0..n-1 by their lowest allowed PU (torch's order)."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.allowed = allowed = topology.allowed_pus & topology.pus
        nodes = _cpu_nodes(topology)
        self.node_ids: list[int] = [n.os_index for n in nodes]
        self.node_cpus: dict[int, CpuSet] = {n.os_index: n.cpuset & allowed for n in nodes}
        self.all_nodes = {n.os_index: n for n in topology.numa_nodes}
        self.devices = {d.index: d for d in accelerators(topology)}
        if not self.node_ids and allowed:
            # No allowed NUMA node owns CPUs (e.g. CPUs in memoryless initiator nodes): one pseudo
            # node with every allowed CPU, never written as a memory node.
            self.node_ids = [PSEUDO_NODE]
            self.node_cpus = {PSEUDO_NODE: allowed}
        self.warnings: list[str] = []
        # asked per rank, answered once per device or set
        self.home_of = cache(self._home_of)
        self.core_indexes = cache(self._core_indexes)
        self.package_cpus = cache(self._package_cpus)

    @cached_property
    def node_of_pu(self) -> list[int | None]:
        """PU -> the allowed CPU node it is on (None when none is)."""
        out: list[int | None] = [None] * (self.allowed.last() + 1)
        for n in self.node_ids:
            for lo, hi in self.node_cpus[n].ranges():
                out[lo:hi + 1] = [n] * (hi - lo + 1)
        return out

    @cached_property
    def _cores(self) -> tuple[list[int], list[int], list[int] | None]:
        """(lowest PU, mask, highest PU) of every core with allowed PUs, by lowest PU; the highest PUs
        are None unless every core has one or two PUs (then a mask's bit_length gives both ends).
        benchmarks/plan_bench.py, exclusive at 16k PUs: 14 ms so, 36 ms (18x the 2k machine, over the 10x
        target) with each core's allowed part as a CpuSet and its lowest PU from CpuSet.first()."""
        masks = [c.cpuset.mask for c in self.topology.cores]
        if self.allowed != self.topology.pus:
            masks = [m & self.allowed.mask for m in masks if m & self.allowed.mask]
        highs = [m.bit_length() - 1 for m in masks]
        lows = [(m ^ (1 << high)).bit_length() - 1 for m, high in zip(masks, highs)]  # -1: one PU
        if len(masks) + sum(low >= 0 for low in lows) == self.allowed.weight():  # no core has a third PU
            firsts = [high if low < 0 else low for low, high in zip(lows, highs)]
        else:  # SMT4, SMT8, or a PU in no core
            firsts, highs = [CpuSet.from_mask(m).first() for m in masks], None
        order = sorted(range(len(masks)), key=firsts.__getitem__)
        return ([firsts[i] for i in order], [masks[i] for i in order],
                None if highs is None else [highs[i] for i in order])

    @cached_property
    def cores(self) -> list[CpuSet]:
        """The allowed PUs of every core that has some, by lowest PU."""
        return [CpuSet.from_mask(m) for m in self._cores[1]]

    @property
    def core_first(self) -> list[int]:
        return self._cores[0]

    @cached_property
    def core_of_pu(self) -> list[int | None]:
        """PU -> the number of its core (None when no allowed core holds it)."""
        firsts, masks, highs = self._cores
        out: list[int | None] = [None] * (self.allowed.last() + 1)
        for i, mask in enumerate(masks):
            if highs is not None:
                out[firsts[i]] = out[highs[i]] = i
            else:
                for pu in CpuSet.from_mask(mask):
                    out[pu] = i
        return out

    @cached_property
    def node_cores(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n: [] for n in self.node_ids}
        for i, first in enumerate(self.core_first):
            n = self.node_of_pu[first]
            if n is not None:
                out[n].append(i)
        return out

    @cached_property
    def llcs(self) -> list[CpuSet]:
        """Last-level cache groups (allowed part), by lowest PU."""
        llc = {c.cpuset & self.allowed for c in self.topology.last_level_caches()}
        return sorted((c for c in llc if c), key=CpuSet.first)

    @cached_property
    def node_llcs(self) -> dict[int, list[CpuSet]]:
        """Node -> the last-level cache groups with a PU on it, by lowest PU."""
        out: dict[int, list[CpuSet]] = {}
        for llc in self.llcs:
            for n in _lookup(self.node_of_pu, llc):
                out.setdefault(n, []).append(llc)
        return out

    # ---- locality -------------------------------------------------------
    def _home_of(self, device_id: int) -> tuple[int, ...]:
        """The allowed CPU node(s) of a device: its node; for a disallowed one, the nearest allowed; for a
        memory-only (GH200's HBM) or unknown one, the nodes its PCI local_cpus touch, else the nearest
        to its memory node by SLIT distance."""
        dev = self.devices.get(device_id)
        if dev is None:
            raise UsageError(f"device {device_id} is not in the topology")
        node = dev.numa_node
        if node is not None and node in self.node_cpus:
            return (node,)
        info = self.all_nodes.get(node) if node is not None else None
        if info is not None and not info.memory_only:
            near = self.nearest(node, self.node_ids)
            if node not in self.topology.allowed_numa_nodes:
                self.warnings.append(f"device {device_id}: its NUMA node {node} is not allowed by the cgroup; "
                                     f"planned on the nearest allowed node {near}")
            elif not (info.cpuset & self.allowed):
                self.warnings.append(f"device {device_id}: no allowed CPUs on its NUMA node {node}; "
                                     f"planned on the nearest node with allowed CPUs, {near}")
            return (near,)
        memory = info or self.topology.memory_node_of(dev)
        why = None
        if node is not None and info is None:  # a node discovery dropped: the cgroup's cpuset.mems excludes it
            why = f"its NUMA node {node} is not allowed by the cgroup (cpuset.mems)"
        local = dev.local_cpus & self.allowed
        touched = tuple(n for n in self.node_ids if self.node_cpus[n].intersects(local))
        # local CPUs spanning every node say nothing (sysfs gave none: the probe took the machine)
        if touched and (memory is None or len(touched) < len(self.node_ids) or len(touched) == 1):
            if why:
                self.warnings.append(f"device {device_id}: {why}; planned on its local CPUs' "
                                     f"node {nodes_text(touched)}")
            return touched
        if memory is not None:  # no PCI locality: the CPU node nearest the device's memory node
            return (self.nearest(memory.os_index, self.node_ids),)
        self.warnings.append(f"device {device_id}: {why or 'no NUMA node or local CPUs known'}; planned on "
                             f"node {nodes_text(self.node_ids[:1])}")
        return (self.node_ids[0],)

    def by_distance(self, node: int, among: Iterable[int]) -> list[int]:
        """``among`` ordered nearest first from ``node`` by the SLIT distances; ties go to a node
        whose CPUs are in ``node``'s locality (a memory-only node's host), then to the lowest id."""
        info = self.all_nodes.get(node)
        dist = info.distances if info is not None else {}
        locality = info.locality if info is not None else CpuSet()

        def key(n):
            cpus = self.node_cpus.get(n)
            return (dist.get(n, 1 << 30), 0 if cpus is not None and cpus.intersects(locality) else 1, n)

        return sorted(among, key=key)

    def nearest(self, node: int, among: Iterable[int]) -> int:
        ordered = self.by_distance(node, among)
        if not ordered:
            raise UsageError("no allowed CPU in the topology: nothing to plan on")
        return ordered[0]

    def homes(self, job: Job) -> list[tuple[int, ...]]:
        """Home node(s) of each rank."""
        if not self.node_ids:
            raise UsageError("no allowed CPU in the topology: nothing to plan on")
        out: list[tuple[int, ...]] = []
        m, n = len(self.node_ids), job.nproc
        for r, dev in enumerate(job.devices):
            if dev is not None:
                out.append(self.home_of(dev))
            elif n <= m:
                out.append(tuple(self.node_ids[r * m // n:(r + 1) * m // n]))
            else:
                out.append((self.node_ids[r * m // n],))
        return out

    def memory_for(self, cpus: CpuSet) -> tuple[int, ...]:
        """The allowed nodes ``cpus`` are on, else the allowed node nearest to the one owning them."""
        nodes = _lookup(self.node_of_pu, cpus)
        if nodes:
            return tuple(sorted(nodes))
        owner = next((n.os_index for n in self.topology.numa_nodes if n.cpuset.intersects(cpus)), None)
        return (self.nearest(owner, self.node_ids),) if owner is not None else tuple(self.node_ids[:1])

    def cpus_of_nodes(self, nodes: Iterable[int]) -> CpuSet:
        return union_all(self.node_cpus[n] for n in nodes)

    def _core_indexes(self, cpus: CpuSet) -> tuple[int, ...]:
        """Numbers of the cores with a PU in ``cpus``, by lowest PU."""
        return tuple(sorted(_lookup(self.core_of_pu, cpus)))

    def union_of_cores(self, indexes: Iterable[int], multithreading: str = "all-logical") -> CpuSet:
        """The PUs of cores ``indexes``: every thread, or only each core's lowest (single-logical)."""
        firsts, masks, _ = self._cores
        if multithreading != "all-logical":
            return CpuSet(firsts[i] for i in indexes)
        mask = 0
        for i in indexes:
            mask |= masks[i]
        return CpuSet.from_mask(mask)

    def _package_cpus(self, cpus: CpuSet) -> CpuSet:
        return union_all(p.cpuset for p in self.topology.packages if p.cpuset.intersects(cpus)) & self.allowed


def _lookup(table: list, pus: CpuSet) -> set[int]:
    """The values (not None) a PU-indexed ``table`` gives the members of ``pus``."""
    out: set = set()
    for lo, hi in pus.ranges():
        out.update(table[lo:hi + 1])
    out.discard(None)
    return out


def nodes_text(nodes: Iterable[int]) -> str:
    """Node ids for messages: ``0-1,3``; the pseudo node (no NUMA node with CPUs) as ``-``."""
    real = [n for n in nodes if n != PSEUDO_NODE]
    return CpuSet(real).to_list() if real else "-"


def build_plan(job: Job, cpus: Sequence[CpuSet], memory: Sequence[Iterable[int] | None], *,
               options: Options, resources: AllowedResources, warnings: Iterable[str] = (),
               orders: Sequence[Sequence[int]] | None = None) -> BindPlan:
    """A cpu-mode plan from per-rank CPU sets and memory nodes. With ``options.modules`` each rank's CPU
    list (``orders[r]``, else ascending) is cut into thread modules, and a scheduler entry added."""
    warnings = list(warnings)
    firsts: list[int | None] = []
    if options.priority_cores:
        from topo.planners.priority import priority_first

        cpus, firsts, orders = priority_first(cpus, orders, resources.homes(job), resources, warnings,
                                              [job.key(r) for r in range(job.nproc)])
    topology = resources.topology
    procs = []
    entries: dict[tuple[int, ...], tuple[int | str, CpuSet] | None] = {}  # ranks sharing memory nodes
    for r in range(job.nproc):
        mem = tuple(n for n in (memory[r] or ()) if n != PSEUDO_NODE)
        if options.memory == "device":  # the device's own memory node, when the cgroup allows it
            dev = resources.devices.get(job.devices[r])
            node = topology.memory_node_of(dev) if dev is not None else None
            if node is not None and node.os_index in topology.allowed_numa_nodes:
                mem = (node.os_index,)
        if memory[r] and not mem and options.memory != "none":
            warnings.append("no allowed NUMA node has CPUs: memory is left unbound")
        if options.modules:
            order = list(orders[r]) if orders is not None else list(cpus[r])
            sets = [(name, CpuSet(_slice(order, lo, hi, job.key(r), name))) for name, lo, hi in options.modules]
        else:
            sets = [("main", cpus[r])] if cpus[r] else []
        if mem not in entries:
            entries[mem] = nodes_entry(mem, options.memory)
        procs.append(process_binding(job.key(r), sets, memory=entries[mem], local_rank=r))
    if options.modules or options.scheduler_range:
        procs.append(_scheduler(cpus, orders, options, resources, warnings))
    firsts_meta = {job.key(r): f for r, f in enumerate(firsts) if f is not None}
    return finish(procs, cpu_mode="cpu", options=options, resources=resources, warnings=warnings,
                  meta={"priority_cores": firsts_meta} if firsts_meta else None)


def process_binding(key: str, modules: Iterable[tuple[str, CpuSet]] = (), *,
                    cpu_nodes: tuple[int | str, CpuSet] | None = None, memory: tuple[int | str, CpuSet] | None = None,
                    local_rank: int | None = None) -> ProcessBinding:
    """A plan entry from the sets a planner chose (nodes as their JSON value and set)."""
    modules = tuple(modules)
    cpu_value, cpu_set = cpu_nodes or (None, None)
    memory_value, memory_set = memory or (None, None)
    return ProcessBinding(key, tuple((m, s.to_list()) for m, s in modules), cpu_value, memory_value, local_rank,
                          module_cpus=modules, cpu_node_set=cpu_set, memory_nodes=memory_set)


def nodes_entry(nodes: Sequence[int], memory: str = "numa") -> tuple[int | str, CpuSet] | None:
    """A cpu-node or memory entry, its JSON value and set: all ``nodes``, the first (``memory``
    "preferred": one node), or none (memory "none")."""
    nodes = () if memory == "none" else nodes[:1] if memory == "preferred" else nodes
    if not nodes:
        return None
    s = CpuSet(nodes)
    return (s.first() if s.weight() == 1 else s.to_list()), s


def _slice(order: Sequence[int], lo: int, hi: int, owner: str, label: str) -> list[int]:
    if len(order) <= hi:
        raise UsageError(f"{owner}: cpu list length {len(order)} is less than required index {hi} for {label}; "
                         "shrink the module ranges or use fewer processes")
    return list(order[lo:hi + 1])


def _scheduler(cpus, orders, options: Options, resources: AllowedResources, warnings: list) -> ProcessBinding:
    lo, hi = options.scheduler_range or (20, 23)
    if options.scheduler_base == "device0":
        base = list(orders[0]) if orders is not None else list(cpus[0])
        if not base:
            raise UsageError("scheduler base device0 has no CPUs; use scheduler base free or global")
    elif options.scheduler_base == "global":
        base = list(resources.allowed)
    else:
        free = resources.allowed - union_all(cpus)
        if free.weight() < hi + 1:
            warnings.append("free CPU pool insufficient, using global available CPUs.")
            free = resources.allowed
        base = list(free)
    main = CpuSet(_slice(base, lo, hi, "scheduler", "main"))
    return ProcessBinding("scheduler", (("main", main.to_list()),))


def finish(processes: Iterable[ProcessBinding], *, cpu_mode: str, options: Options, resources: AllowedResources,
           warnings: Iterable[str] = (), meta: dict | None = None) -> BindPlan:
    """The plan with its notes: options that differ from the defaults, the topology's root, `meta`,
    and every warning once."""
    meta = dict(meta or {})
    opts = {f.name: getattr(options, f.name) for f in fields(options) if getattr(options, f.name) != f.default}
    if opts:
        meta["options"] = opts
    meta["topology"] = resources.topology.root
    memory_mode = "numa" if options.memory == "device" else options.memory  # a strict binding, as numa
    return BindPlan.build(processes, cpu_mode=cpu_mode, memory_mode=memory_mode,
                          actor_thread_fix_bind=options.actor_thread_fix_bind, meta=meta,
                          warnings=dict.fromkeys([*resources.warnings, *warnings]))


Strategy = Callable[[Topology, Job, Options], BindPlan]


@dataclass(frozen=True)
class Planner:
    """A mode: its name, one line for ``--list-modes``, the strategy (or "module:function", imported on
    first use), and ``shares_cpus`` (processes share CPUs by design: `topo validate` accepts overlap)."""

    name: str
    summary: str
    strategy: Strategy | str = field(compare=False)
    shares_cpus: bool = False

    def load(self) -> Strategy:
        if isinstance(self.strategy, str):
            module, _, attr = self.strategy.partition(":")
            return getattr(importlib.import_module(module), attr)
        return self.strategy
