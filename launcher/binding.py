"""Each process's binding: the numactl / taskset argv prefix msrun builds, and what /proc should show.

msrun turns its three binding inputs into a prefix per process:

- a unified bind JSON given to --bind_numa decides alone (--bind_core is then ignored);
- otherwise --bind_numa gives a NUMA string N and --bind_core a CPU string C, each from a table
  ({"device0": [...], "scheduler": [...]}) or from the automatic `msrun-auto` plan (workers only):
  N and C -> `numactl --membind N --physcpubind C`, N -> `numactl --membind N --cpunodebind N`,
  C -> `taskset -c C`.

Every input arrives as a `BindPlan` (planners.bindload: a file, inline JSON, msrun's tables; the
planner for True), so one rule, `bind_prefix`, builds every prefix from `ProcessBinding` objects:
their text goes into argv as written (spaces removed), as msrun passes it, and their parsed sets
are what the launcher checks against the topology and then verifies in /proc. A plan whose memory
policy is `preferred` gets `numactl --preferred N` where msrun's strict one gets `--membind N`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from topo.launcher.environ import bind_file_env
from topo.binding import Binding
from topo.cpuset import CpuSet
from topo.errors import UsageError

if TYPE_CHECKING:  # planners and the model are imported only when something is bound
    from topo.planners.bindload import LoadedBind
    from topo.planners.bindplan import BindPlan, ProcessBinding
    from topo.model import Topology


UNBOUND = Binding()


def bind_prefix(*, cpus: str | None = None, cpu_nodes: str | None = None, memory: str | None = None,
                memory_policy: str = "bind") -> tuple[str, ...]:
    """msrun's prefix for a process bound to CPUs `cpus` or to the CPUs of nodes `cpu_nodes`, with
    memory on nodes `memory`. Options are separate argv items, the memory option first, as msrun
    writes them; `memory_policy="preferred"` writes `--preferred` (one node) for `--membind`.

    >>> bind_prefix(cpus="0-9", memory="0")
    ('numactl', '--membind', '0', '--physcpubind', '0-9')
    >>> bind_prefix(cpus="0-9")
    ('taskset', '-c', '0-9')
    """
    if cpus and not memory and not cpu_nodes:
        return ("taskset", "-c", cpus)
    argv: list[str] = []
    if memory:
        argv += ["--preferred" if memory_policy == "preferred" else "--membind", memory]
    if cpus:
        argv += ["--physcpubind", cpus]
    elif cpu_nodes:
        argv += ["--cpunodebind", cpu_nodes]
    return ("numactl", *argv) if argv else ()


def device_ids(topology: Topology, count: int, environ: Mapping[str, str]) -> list[int]:
    """The physical device id of local ranks 0..count-1: the bind JSON's `deviceX` keys.

    The visible-device variables decide, as the runtimes do (topo.visible: CUDA_VISIBLE_DEVICES,
    ROCR/HIP, ASCEND_RT_VISIBLE_DEVICES sorted as msrun sorts it). A rank beyond the visible
    devices, or any rank on a machine without accelerators, is keyed by its local rank, which is
    what msrun's DEVICE_ID is.
    """
    from topo.visible import visible_devices

    visible = [d.index for d in visible_devices(topology, env=environ)]
    return [visible[i] if i < len(visible) else i for i in range(count)]


# ------------------------------------------------------------------ one process
def binding_of(process: ProcessBinding | None, topology: Topology, *,
               memory_policy: str | None = "bind") -> Binding:
    """The binding of one entry of a plan (msrun's unified-JSON table of prefixes).

    `memory_policy` is the plan's (None: memory not bound). The main CPUs decide the CPU binding,
    else the CPU nodes (a JSON plan never has both).
    """
    from topo.planners.binding import from_entry  # the planners package (~60 ms): only when something is bound

    binding = from_entry(process, topology, memory_policy)
    if process is None or not binding.is_bound:
        return UNBOUND
    main = process.main
    prefix = bind_prefix(cpus=main, cpu_nodes=None if main else _text(process.cpu_nodes),
                         memory=_text(process.memory) if binding.memory_policy else None,
                         memory_policy=binding.memory_policy or "bind")
    return Binding(binding.cpus, binding.memory_nodes, binding.memory_policy, binding.device, prefix, prefix[0])


def _text(value: int | str | None) -> str | None:
    return None if value is None else (str(value) or None)


# ------------------------------------------------------------------ a job's bindings
@dataclass(frozen=True)
class JobBindings:
    """Every process's binding in a job, and what resolving them found."""

    scheduler: Binding
    workers: tuple[Binding, ...]  # by local rank
    warnings: tuple[str, ...]
    env: Mapping[str, str]  # for every process (MSRUN_BIND_FILE / _HASH)
    cpu_lists: tuple[str | None, ...] = ()  # by local rank: MSRUN_CPU_LIST, a Python list literal "[0, 1]"


def resolve_bindings(bind_core, bind_numa, *, local_worker_num: int, topology: Topology | None,
                     environ: Mapping[str, str]) -> JobBindings:
    """Each process's binding for parsed --bind_core / --bind_numa values (launcher.options: False,
    True, or a planners.bindload.LoadedBind from a table or a unified bind JSON).

    Raises UsageError, before anything starts, for CPUs or nodes that do not exist or are not
    allowed on `topology`. A prefix whose tool (numactl, taskset) is not on PATH is still built
    here; the launcher then applies it with system calls (launcher.job, launcher.bindcmd).
    """
    if not bind_core and not bind_numa:
        return JobBindings(UNBOUND, (UNBOUND,) * local_worker_num, (), {}, (None,) * local_worker_num)
    if topology is None:
        raise UsageError("binding needs this machine's topology; none was given")
    if not topology.is_this_system:
        raise UsageError(f"refusing to bind from a topology read below {topology.root!r}: it is not this machine")
    physical = device_ids(topology, local_worker_num, environ)
    warnings: list[str] = []
    unified = getattr(bind_numa, "table", True) is False
    cpu_lists: list[str | None] = [None] * local_worker_num
    if unified:
        scheduler, workers = _from_unified(bind_numa, physical, topology, warnings)
        if bind_core:
            warnings.append("--bind_core is ignored: the bind JSON given to --bind_numa decides (as msrun)")
    else:
        scheduler, workers, cpu_lists = _from_tables(bind_core, bind_numa, physical, topology, warnings)
    env = bind_file_env(bind_numa.path, bind_numa.sha256) if unified else {}
    return JobBindings(scheduler, tuple(workers), tuple(warnings), env, tuple(cpu_lists))


def _from_unified(loaded: LoadedBind, physical: list[int], topology: Topology, warnings: list[str]):
    check_loaded(loaded, topology, "--bind_numa", warnings)
    plan = loaded.plan
    workers = []
    for rank, device in enumerate(physical):
        b = binding_of(plan.get(f"device{device}"), topology, memory_policy=plan.memory_policy)
        if not b.is_bound:
            warnings.append(f"local rank {rank}: the bind JSON has no process binding for device{device}; "
                            "it runs unbound")
        workers.append(b)
    return binding_of(plan.get("scheduler"), topology, memory_policy=plan.memory_policy), workers


def check_loaded(loaded: LoadedBind, topology: Topology, what: str, warnings: list[str]) -> None:
    """UsageError for the first problem that stops a binding (CPUs or nodes that are not there or
    not allowed): the same check, with the same words, as `topo validate`. Overlapping main CPUs
    only cost speed, and msrun runs such files, so they become warnings."""
    from topo.planners.bindcheck import check_plan, one_line

    errors = []
    for problem in check_plan(loaded.plan, topology):
        if problem.severity == "warning":
            warnings.append(str(problem))
        else:
            errors.append(problem)
    if errors:
        raise UsageError(f"{what} {loaded.path or 'inline bind JSON'}: {one_line(errors)}")


def _from_tables(bind_core, bind_numa, physical: list[int], topology: Topology, warnings: list[str]):
    """msrun's --bind_core / --bind_numa tables or True: per process a CPU string C and a NUMA string
    N, combined into one entry."""
    n = len(physical)
    sched_core = sched_numa = None
    core: list[ProcessBinding | None] = [None] * n
    numa: list[ProcessBinding | None] = [None] * n
    cpu_lists: list[CpuSet | None] = [None] * n
    if getattr(bind_core, "table", False):
        _check_ids(bind_core.plan, topology.allowed_pus, "--bind_core", "CPU")
        sched_core, core = _by_position(bind_core.plan, physical, "--bind_core", warnings)
    elif bind_core is True:
        core = _auto(topology, physical, "core", warnings)
    if getattr(bind_numa, "table", False):
        _check_ids(bind_numa.plan, CpuSet(x.os_index for x in topology.cpu_nodes()), "--bind_numa", "NUMA")
        sched_numa, numa = _by_position(bind_numa.plan, physical, "--bind_numa", warnings)
    elif bind_numa is True:
        numa = _auto(topology, physical, "numa", warnings)
        if bind_core is not True:
            # msrun exports the CPUs of the first node for mindspore.runtime.set_cpu_affinity
            for i, entry in enumerate(numa):
                if entry is not None and entry.cpu_node_set:
                    from topo.planners.binding import node_cpus

                    cpu_lists[i] = node_cpus(topology, CpuSet([entry.cpu_node_set.first()]))
    scheduler = _combine(sched_core, sched_numa, topology)
    workers = []
    exported: list[str | None] = []
    for i in range(n):
        b = _combine(core[i], numa[i], topology)
        if bind_core is True and core[i] is not None:
            cpu_lists[i] = b.cpus  # msrun exports the automatic split's CPUs too
        exported.append(str(list(cpu_lists[i])) if cpu_lists[i] and b.is_bound else None)
        workers.append(b)
    return scheduler, workers, exported


def _combine(core: ProcessBinding | None, numa: ProcessBinding | None, topology: Topology) -> Binding:
    """C and N -> `numactl --membind N --physcpubind C`; N -> `--membind N --cpunodebind N`;
    C -> `taskset -c C` (msrun's table)."""
    if core is not None and core.main:
        memory = numa.memory_nodes if numa is not None and numa.memory_nodes else None
        prefix = bind_prefix(cpus=core.main, memory=_text(numa.memory) if memory else None)
        return Binding(core.cpus("main"), memory, "bind" if memory else None, core.device, prefix, prefix[0])
    return binding_of(numa, topology)


def _by_position(plan: BindPlan, physical: list[int], flag: str, warnings: list[str]):
    """msrun's positional reading of a table: the i-th non-scheduler key is local rank i's, and its
    number must be that rank's physical device id."""
    entries = plan.workers()
    out: list[ProcessBinding | None] = []
    for rank, device in enumerate(physical):
        if rank >= len(entries):
            warnings.append(f"{flag} has no entry for local rank {rank} (device{device}); it runs unbound")
            out.append(None)
            continue
        entry = entries[rank]
        if entry.key != f"device{device}":
            warnings.append(f"{flag}: entry #{rank} is {entry.key}, but local rank {rank} drives device{device}; "
                            f"it runs unbound (msrun reads the table by position; list every device in order)")
            out.append(None)
            continue
        out.append(entry)
    return plan.get("scheduler"), out


def _check_ids(plan: BindPlan, allowed: CpuSet, flag: str, label: str) -> None:
    for p in plan.processes:
        ids = p.cpus("main") if label == "CPU" else (p.cpu_node_set or CpuSet())
        bad = ids - allowed
        if bad:
            if label == "CPU":
                what = f"this machine allows CPUs {allowed} (see `topo show`)"
            else:
                what = f"the NUMA nodes with CPUs this process may use are {allowed}"
            which = f"{label} {bad} of {p.key} is" if bad.weight() == 1 else f"{label}s {bad} of {p.key} are"
            raise UsageError(f"{flag}: {which} not available: {what}")


def _auto(topology: Topology, physical: list[int], kind: str, warnings: list[str]) -> list[ProcessBinding | None]:
    from topo.launcher.autoplan import msrun_auto

    plan = msrun_auto(topology, physical, kind)
    warnings.extend(plan.warnings)
    # without accelerators, `physical` holds the local ranks, which is how the plan keys them too
    entries = [plan.get(f"device{d}") for d in physical]
    return [e if e is not None and (e.main or e.cpu_node_set) else None for e in entries]


__all__ = ["Binding", "UNBOUND", "JobBindings", "bind_prefix", "binding_of", "check_loaded",
           "device_ids", "resolve_bindings"]
