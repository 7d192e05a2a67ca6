"""Each process's binding as msrun builds it from --bind_core / --bind_numa, with its numactl /
taskset argv prefix. Every input arrives as a BindPlan (planners.bindload), and every entry becomes
a Binding through `binding_of`."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Mapping

from topo.binding import Binding
from topo.cpuset import CpuSet
from topo.errors import UsageError
from topo.launcher.environ import bind_file_env

if TYPE_CHECKING:  # planners and the model are imported only when something is bound
    from topo.model import Topology
    from topo.planners.bindload import LoadedBind
    from topo.planners.bindplan import BindPlan, ProcessBinding

UNBOUND = Binding()


def bind_prefix(*, cpus: str | None = None, cpu_nodes: str | None = None, memory: str | None = None,
                memory_policy: str = "bind") -> tuple[str, ...]:
    """msrun's prefix: C alone -> `taskset -c C`; else `numactl --membind N` (`--preferred N`) first,
    then `--physcpubind C` or `--cpunodebind N`."""
    if cpus and not memory and not cpu_nodes:
        return ("taskset", "-c", cpus)
    argv = ["--preferred" if memory_policy == "preferred" else "--membind", memory] if memory else []
    if cpus or cpu_nodes:
        argv += ["--physcpubind", cpus] if cpus else ["--cpunodebind", cpu_nodes]
    return ("numactl", *argv) if argv else ()


def held_words(held: Binding) -> str:
    """What held of a binding whose memory policy the kernel refused, under --bind-fallback."""
    return "preferred held" if held.memory_policy == "preferred" else "CPUs alone held"


def device_ids(topology: Topology, count: int, environ: Mapping[str, str]) -> list[int]:
    """The physical device id (`deviceX`) of local ranks 0..count-1 through the visible-device
    variables; past the visible devices, the local rank (msrun's DEVICE_ID)."""
    from topo.visible import visible_devices

    visible = [d.index for d in visible_devices(topology, env=environ)]
    return [visible[i] if i < len(visible) else i for i in range(count)]


def binding_of(entry: ProcessBinding | None, topology: Topology, *, memory_policy: str | None = "bind",
               path: str | None = None) -> Binding:
    """One plan entry's binding with msrun's prefix, applied by the prefix's tool, or by system calls
    when the tool is not on `path` (the children's PATH; None: not looked for)."""
    from topo.planners.binding import from_entry  # the planners (~60 ms): only when something is bound

    binding = from_entry(entry, topology, memory_policy)
    if not binding.is_bound:
        return UNBOUND
    prefix = bind_prefix(cpus=entry.main, cpu_nodes=None if entry.main else _text(entry.cpu_nodes),
                         memory=_text(entry.memory) if binding.memory_policy else None,
                         memory_policy=binding.memory_policy or "bind")
    if path is not None and shutil.which(prefix[0], path=path) is None:
        return replace(binding, prefix=prefix, applied_by="system calls", note=f"{prefix[0]} not found")
    return replace(binding, prefix=prefix, applied_by=prefix[0])


def _text(value: int | str | None) -> str | None:
    return None if value is None else (str(value) or None)


@dataclass(frozen=True)
class JobBindings:
    """Every process's binding in a job, and what resolving them found."""

    scheduler: Binding
    workers: tuple[Binding, ...]  # by local rank
    warnings: tuple[str, ...]
    env: Mapping[str, str]  # for every process (MSRUN_BIND_FILE / _HASH)
    cpu_lists: tuple[str | None, ...] = ()  # by local rank: MSRUN_CPU_LIST, a Python list literal "[0, 1]"


def resolve_bindings(bind_core, bind_numa, *, local_worker_num: int,
                     topology: Topology | Callable[[], Topology] | None, environ: Mapping[str, str],
                     priority_cores: bool = False) -> JobBindings:
    """Each process's binding for parsed --bind_core / --bind_numa values (False, True, or a LoadedBind)
    on `topology` (or a function returning it; None: discover()); UsageError, before anything starts,
    for CPUs or nodes not there or not allowed. `priority_cores` puts a priority core first in each
    --bind_core=True share's MSRUN_CPU_LIST (MindSpore binds its main thread there)."""
    if not bind_core and not bind_numa:
        return JobBindings(UNBOUND, (UNBOUND,) * local_worker_num, (), {}, (None,) * local_worker_num)
    if topology is None:
        from topo.discovery import discover

        topology = discover()
    elif callable(topology):
        topology = topology()
    if not topology.is_this_system:
        raise UsageError(f"refusing to bind from a topology read below {topology.root!r}: it is not this machine")
    physical = device_ids(topology, local_worker_num, environ)
    path = environ.get("PATH", os.defpath)
    warnings: list[str] = []
    if getattr(bind_numa, "table", True) is False:  # a unified bind JSON decides alone
        check_loaded(bind_numa, topology, "--bind_numa", warnings)
        plan = bind_numa.plan

        def of(key: str) -> Binding:
            return binding_of(plan.get(key), topology, memory_policy=plan.memory_policy, path=path)

        workers = [of(f"device{device}") for device in physical]
        warnings += [f"local rank {rank}: the bind JSON has no process binding for device{device}; it runs unbound"
                     for rank, (device, b) in enumerate(zip(physical, workers)) if not b.is_bound]
        if bind_core:
            warnings.append("--bind_core is ignored: the bind JSON given to --bind_numa decides (as msrun)")
        env = bind_file_env(bind_numa.path, bind_numa.sha256)
        return JobBindings(of("scheduler"), tuple(workers), tuple(warnings), env, (None,) * local_worker_num)
    # msrun's tables or True: per process a CPU entry C and a NUMA entry N, combined (C's main CPUs
    # with N's memory, or N alone)
    from topo.planners.binding import node_cpus
    from topo.planners.bindplan import ProcessBinding
    from topo.visible import hidden_warning, visible_devices

    cpu_only = not visible_devices(topology, env=environ)  # no device here, or all hidden (CUDA_VISIBLE_DEVICES="")
    hidden = hidden_warning(topology, environ) if cpu_only else None
    warnings += [hidden] if hidden else []
    sched_core = sched_numa = None
    # by local rank: a CPU entry, a NUMA entry (ProcessBinding or None), MSRUN_CPU_LIST's CPUs
    core = numa = cpu_lists = [None] * local_worker_num
    firsts: dict[str, int] = {}  # device key -> its priority core
    if getattr(bind_core, "table", False):
        sched_core, core = _by_position(bind_core.plan, topology.allowed_pus, physical, "--bind_core", "CPU", warnings)
    elif bind_core is True:
        core = _auto(topology, physical, "core", warnings, cpu_only, firsts if priority_cores else None)
    if getattr(bind_numa, "table", False):
        nodes = CpuSet(x.os_index for x in topology.cpu_nodes())
        sched_numa, numa = _by_position(bind_numa.plan, nodes, physical, "--bind_numa", "NUMA", warnings)
    elif bind_numa is True:
        numa = _auto(topology, physical, "numa", warnings, cpu_only)
        if bind_core is not True:  # msrun exports the CPUs of the first node for set_cpu_affinity
            cpu_lists = [node_cpus(topology, CpuSet([e.cpu_node_set.first()])) if e is not None and e.cpu_node_set
                         else None for e in numa]

    def combine(c: ProcessBinding | None, m: ProcessBinding | None) -> Binding:
        if c is not None and c.main:
            memory = m.memory if m is not None and m.memory_nodes else None
            m = ProcessBinding(c.key, modules=(("main", c.main),), memory=memory)
        return binding_of(m, topology, path=path)

    workers, exported = [combine(c, m) for c, m in zip(core, numa)], []
    for i, b in enumerate(workers):
        cpus = b.cpus if bind_core is True and core[i] is not None else cpu_lists[i]  # the automatic split's too
        first = [firsts[f"device{physical[i]}"]] if f"device{physical[i]}" in firsts else []
        listed = first + [c for c in cpus or () if c not in first]
        exported.append(str(listed) if listed and b.is_bound else None)
    return JobBindings(combine(sched_core, sched_numa), tuple(workers), tuple(warnings), {}, tuple(exported))


def check_loaded(loaded: LoadedBind, topology: Topology, what: str, warnings: list[str]) -> None:
    """UsageError for the first problem that stops a binding (CPUs or nodes not there or not allowed),
    in `topo validate`'s words; its warnings (overlapping main CPUs: msrun runs them) go to `warnings`."""
    from topo.planners.bindcheck import check_plan, one_line

    errors = []
    for problem in check_plan(loaded.plan, topology):
        if problem.severity == "warning":
            warnings.append(str(problem))
        else:
            errors.append(problem)
    if errors:
        raise UsageError(f"{what} {loaded.path or 'inline bind JSON'}: {one_line(errors)}")


def _by_position(plan: BindPlan, allowed: CpuSet, physical: list[int], flag: str, label: str, warnings: list[str]):
    """A table as msrun reads it, by position: the i-th non-scheduler key is local rank i's and must
    name its device. UsageError for a CPU or node id not in `allowed`."""
    for p in plan.processes:
        bad = (p.cpus("main") if label == "CPU" else (p.cpu_node_set or CpuSet())) - allowed
        if bad:
            what = (f"this machine allows CPUs {allowed} (see `topo show`)" if label == "CPU"
                    else f"the NUMA nodes with CPUs this process may use are {allowed}")
            which = f"{label} {bad} of {p.key} is" if bad.weight() == 1 else f"{label}s {bad} of {p.key} are"
            raise UsageError(f"{flag}: {which} not available: {what}")
    entries = plan.workers()
    out: list[ProcessBinding | None] = []
    for rank, device in enumerate(physical):
        entry = entries[rank] if rank < len(entries) else None
        if entry is None:
            warnings.append(f"{flag} has no entry for local rank {rank} (device{device}); it runs unbound")
        elif entry.key != f"device{device}":
            warnings.append(f"{flag}: entry #{rank} is {entry.key}, but local rank {rank} drives "
                            f"device{device}; it runs unbound (msrun reads the table by position; list every "
                            "device in order)")
            entry = None
        out.append(entry)
    return plan.get("scheduler"), out


def _auto(topology: Topology, physical: list[int], kind: str, warnings: list[str],
          cpu_only: bool, firsts: dict[str, int] | None = None) -> list[ProcessBinding | None]:
    """The `msrun-auto` plan's entries by local rank: main CPUs (`kind="core"`) or one NUMA node for
    CPUs and memory (`kind="numa"`). With `firsts`, planned with priority cores, filled with each device key's."""
    from topo import planners
    from topo.planners.core import Job, accelerators

    # a job without devices (none here, or none visible) has nothing to be next to: the planner
    # splits the allowed CPUs, keyed by local rank
    devices = (None,) * len(physical) if cpu_only or not accelerators(topology) else tuple(physical)
    plan = planners.plan(topology, "msrun-auto", job=Job(devices), msrun_bind=kind,
                         memory="numa" if kind == "numa" else "none", priority_cores=firsts is not None)
    warnings.extend(plan.warnings)
    if firsts is not None:
        firsts.update(plan.meta.get("priority_cores", {}))
    entries = [plan.get(f"device{d}") for d in physical]
    return [e if e is not None and (e.main or e.cpu_node_set) else None for e in entries]
