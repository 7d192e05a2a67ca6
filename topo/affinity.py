"""Binding from inside the process: `set_affinity`, NVIDIA gpu_affinity's call on topo's planners.

    import os, topo
    cpus = topo.set_affinity(int(os.environ["LOCAL_RANK"]))     # first thing in main()

is `gpu_affinity.set_affinity(gpu_id, nproc_per_node)` with the same keywords, defaults and
results on the machines gpu_affinity handles, plus every topo mode (`node`, `socket`,
`exclusive`, `core-complex`, `msrun-auto`, ...), NPUs and CPU-only machines, and an optional
memory policy. Planning is `plan_affinity`, a pure function of a Topology and an environment;
`set_affinity` discovers this machine once per process, plans, and applies the result with system
calls (no numactl or taskset).

What is applied, and to whom:
- CPUs: the calling thread, and every other thread of the process whose affinity equals the
  caller's (PyTorch's rule for callable entry points): threads a library started at import time
  move with the process, threads that chose their own CPUs are left alone.
- Memory (`memory="local" | "bind" | "preferred"`): `set_mempolicy` on the calling thread, which
  the threads it starts afterwards inherit. Linux cannot set another thread's policy, so threads
  that already run keep theirs; they now run on the process's CPUs, whose node is where local
  allocation puts their memory anyway. Call `set_affinity` before starting worker threads.
  Pages already allocated stay where they are.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import warnings
from dataclasses import dataclass
from typing import Mapping

from topo.cpuset import CpuSet, excerpt, union_all
from topo.numbers import ascii_number
from topo.errors import TopoError
from topo.model import Device, Topology

MEMORY_POLICIES = ("local", "bind", "preferred")
# How many processes share this node when nproc_per_node is not given (torchrun and `topo
# launch` set it).
NPROC_VARIABLE = "LOCAL_WORLD_SIZE"


class AffinityError(TopoError):
    """set_affinity cannot plan or apply the binding; the message says why and what to change."""


@dataclass(frozen=True)
class ProcessAffinity:
    """What one local rank gets: its CPUs and the NUMA node(s) its memory belongs on."""

    device_id: int  # the local index, as the caller passed it
    nproc_per_node: int
    device: Device | None  # the physical device it runs next to; None on a machine without accelerators
    cpus: CpuSet
    memory_nodes: CpuSet
    mode: str
    warnings: tuple[str, ...] = ()


def plan_affinity(topology: Topology, device_id: int, nproc_per_node: int | None = None, *,
                  mode="unique_contiguous", scope="node", multithreading="all_logical", balanced: bool = True,
                  min_physical_cores: int = 1, max_physical_cores: int | None = None,
                  env: Mapping[str, str] | None = None) -> ProcessAffinity:
    """The binding `set_affinity` applies for local rank `device_id` of `nproc_per_node` on
    `topology`, without applying it. `env` holds the visible-device variables and
    LOCAL_WORLD_SIZE (default: this process's environment on the live machine, none elsewhere)."""
    if env is None:
        env = os.environ if topology.is_this_system else {}
    job, visible, origin = _job(topology, nproc_per_node, env)
    _check_rank(device_id, job.nproc, origin)
    ranks = _plan(topology, job, visible, mode=mode, scope=scope, multithreading=multithreading,
                  balanced=balanced, min_physical_cores=min_physical_cores, max_physical_cores=max_physical_cores)
    return _pick(ranks, device_id)


def _job(topology: Topology, nproc_per_node, env: Mapping[str, str]):
    """Local rank r runs next to the r-th visible device (none on a machine without accelerators);
    also returns the visible devices and where the process count came from."""
    from planners.core import Job
    from topo.visible import describe_env, visible_devices

    try:
        visible = visible_devices(topology, env=env)
    except TopoError as exc:
        raise AffinityError(str(exc)) from exc
    what = visible[0].kind.upper() if visible else "device"
    nproc, origin = _nproc(nproc_per_node, env)
    if nproc is None:
        if visible:
            nproc, origin = len(visible), f"one process per visible {what}{describe_env(env)}"
        else:
            nproc = Job.for_topology(topology, devices=()).nproc
            origin = "one process per NUMA node: this machine has no accelerator"
    if visible and nproc > len(visible):
        raise AffinityError(
            f"nproc_per_node={nproc}{_paren(origin)} but {len(visible)} {what}s are visible{describe_env(env)}: "
            f"set_affinity places one process per {what}; make more visible or start fewer processes")
    return Job(tuple(d.index for d in visible[:nproc]) if visible else (None,) * nproc), visible, origin


def _check_rank(device_id, nproc: int, origin: str) -> None:
    _check_index(device_id)
    if device_id >= nproc:
        raise AffinityError(f"device_id={device_id} should be smaller than nproc_per_node={nproc}{_paren(origin)}")


def _check_index(device_id) -> None:
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        raise AffinityError(f"device_id must be a local device index 0, 1, ...; got {device_id!r}")


def _plan(topology: Topology, job, visible: list[Device], *, mode, scope, multithreading, balanced,
          min_physical_cores, max_physical_cores) -> tuple[ProcessAffinity, ...]:
    """Every local rank's binding, from one plan of the whole node."""
    import planners

    mode_name = _mode(mode)
    try:
        plan = planners.plan(topology, mode_name, job=job, scope=_choice(scope, "scope"),
                             multithreading=_choice(multithreading, "multithreading"), balanced=bool(balanced),
                             min_physical_cores=min_physical_cores, max_physical_cores=max_physical_cores,
                             memory="numa")
    except TopoError as exc:
        raise AffinityError(_api_words(str(exc))) from exc
    ranks = []
    for rank in range(job.nproc):
        process = plan.get(job.key(rank))
        if process is None:  # a plug-in planner that left a process out
            raise AffinityError(f"mode {mode_name!r} planned no binding for {job.key(rank)} (local rank {rank}); "
                                "choose another mode")
        if plan.cpu_mode == "numa":  # a plug-in mode that binds whole nodes
            nodes = process.cpu_node_set or CpuSet()
            cpus = union_all(n.cpuset for n in topology.numa_nodes if n.os_index in nodes) & topology.allowed_pus
        else:
            cpus = process.cpus("main")
        ranks.append(ProcessAffinity(rank, job.nproc, visible[rank] if visible else None, cpus,
                                     process.memory_nodes or CpuSet(), mode_name, plan.warnings))
    return tuple(ranks)


def _pick(ranks: tuple[ProcessAffinity, ...], device_id: int) -> ProcessAffinity:
    affinity = ranks[device_id]
    if not affinity.cpus:
        raise AffinityError(f"mode {affinity.mode!r} gives device_id={device_id} no CPU; choose another mode")
    return affinity


def _paren(text: str) -> str:
    return f" ({text})" if text else ""


@functools.cache
def this_machine() -> Topology:
    """This machine's topology, discovered on first use and kept for the life of the process
    (allowed CPUs as they were then, so a second call plans the same set, not within the first)."""
    from topo.discovery import discover

    return discover("/")


def set_affinity(device_id: int, nproc_per_node: int | None = None, *, mode="unique_contiguous", scope="node",
                 multithreading="all_logical", balanced: bool = True, min_physical_cores: int = 1,
                 max_physical_cores: int | None = None, memory: str | None = None) -> set[int]:
    """Bind this process to the CPUs (and optionally the memory) of its device; return
    `os.sched_getaffinity(0)`.

    `device_id` is the local rank's device as CUDA_VISIBLE_DEVICES (indices or GPU-/MIG- UUID
    prefixes, CUDA_DEVICE_ORDER), HIP/ROCR_VISIBLE_DEVICES or ASCEND_RT_VISIBLE_DEVICES (sorted,
    as msrun does) number it: 0 is the first visible device. Every process of the node calls it
    with its own id and the same options, and gets a CPU set consistent with the others'.
    `nproc_per_node=None` means LOCAL_WORLD_SIZE when set, else one process per visible device;
    on a machine without accelerators the processes share the allowed CPUs (one per NUMA node by
    default), as `topo plan --devices none` plans them.

    `mode`, `scope` and `multithreading` take gpu_affinity's strings (`unique_contiguous`,
    `unique_interleaved`, `single_unique`, `single`, `all`; `node`/`socket`;
    `all_logical`/`single_logical`), with `_` or `-`, or its enum members; `mode` also takes every
    mode of `topo plan --list-modes`. `balanced`, `min_physical_cores` and `max_physical_cores`
    work as in gpu_affinity.

    `memory`: None leaves the memory policy alone; "local" allocates on the node of the CPU a
    thread runs on; "bind" restricts allocations to the process's NUMA node(s); "preferred"
    prefers them and falls back to other nodes when they are full. It applies to the calling
    thread and the threads it starts afterwards (see the module documentation).

    Call it once, at the start of main(), before CUDA/ACL initialise and before worker threads
    start. Intel OpenMP resets affinity after a fork: run with KMP_AFFINITY=disabled to keep it
    in DataLoader workers. Raises AffinityError (a TopoError) with one line saying what is wrong.
    """
    # arguments that are wrong on any machine fail before this one is read
    _check_index(device_id)
    policy = _memory(memory)
    _mode(mode)
    affinity = _planned(this_machine(), device_id, nproc_per_node, mode=mode, scope=scope,
                        multithreading=multithreading, balanced=balanced, min_physical_cores=min_physical_cores,
                        max_physical_cores=max_physical_cores)
    for warning in affinity.warnings:
        warnings.warn(f"set_affinity: {warning}", stacklevel=2)
    _apply(affinity, policy)
    return os.sched_getaffinity(0)


# ---- planning, cached ------------------------------------------------------------------------

_PLANS: dict[tuple, tuple[Topology, tuple[ProcessAffinity, ...]]] = {}


def _planned(topology: Topology, device_id, nproc_per_node, **options) -> ProcessAffinity:
    """plan_affinity with this process's environment. The node's plan is remembered per topology,
    devices and options: a repeated call costs only the system calls."""
    job, visible, origin = _job(topology, nproc_per_node, os.environ)
    _check_rank(device_id, job.nproc, origin)
    key = (id(topology), job.devices, *(str(v) for v in options.values()))
    hit = _PLANS.get(key)
    if hit is None or hit[0] is not topology:
        hit = _PLANS[key] = (topology, _plan(topology, job, visible, **options))
    return _pick(hit[1], device_id)


def _mode(mode) -> str:
    from planners import get_planner, normalize_mode

    name = normalize_mode(_text(mode, "mode"))
    try:
        get_planner(name)
    except TopoError as exc:
        raise AffinityError(_api_words(str(exc))) from exc
    return name


def _choice(value, what: str) -> str:
    return _text(value, what).strip().lower().replace("_", "-")


def _text(value, what: str) -> str:
    value = getattr(value, "value", value)  # gpu_affinity's Mode/Scope/Multithreading members
    if not isinstance(value, str):
        raise AffinityError(f"{what} must be a string such as {_EXAMPLES[what]!r}; got {value!r}")
    return value


_EXAMPLES = {"mode": "unique_contiguous", "scope": "node", "multithreading": "all_logical"}


def _nproc(nproc_per_node, env: Mapping[str, str]) -> tuple[int | None, str]:
    if nproc_per_node is not None:
        if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1:
            raise AffinityError(f"nproc_per_node must be a positive number of processes; got {nproc_per_node!r}")
        return nproc_per_node, ""
    text = env.get(NPROC_VARIABLE, "").strip()
    if not text:
        return None, ""
    n = ascii_number(text)
    if not n:
        raise AffinityError(f"{NPROC_VARIABLE}={excerpt(text)!r} is not a positive number of processes; "
                            "fix it or pass nproc_per_node")
    return n, f"from {NPROC_VARIABLE}"


def _memory(memory) -> str | None:
    if memory is None:
        return None
    policy = memory.strip().lower() if isinstance(memory, str) else memory
    if policy not in MEMORY_POLICIES:
        raise AffinityError(f"memory must be None, {', '.join(map(repr, MEMORY_POLICIES))}; got {memory!r}")
    return policy


# The planners' messages name `topo plan`'s options; here they are this function's parameters.
_FLAG = re.compile(r"--(nproc-per-node|min-physical-cores|max-physical-cores|scope|multithreading|mode)\b")


def _api_words(message: str) -> str:
    return _FLAG.sub(lambda m: m.group(1).replace("-", "_"), message)


# ---- applying --------------------------------------------------------------------------------


def _apply(affinity: ProcessAffinity, policy: str | None) -> None:
    """Memory policy first (it can be refused, and then nothing has changed), then the CPUs of
    the caller and of the threads that share its affinity."""
    from topo import syscalls

    cpus = affinity.cpus
    before = os.sched_getaffinity(0)  # the threads with this affinity follow the caller
    previous = _set_memory(affinity, policy) if policy else None
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:
        if previous is not None:
            try:
                syscalls.set_mempolicy(*previous)
            except (TopoError, KeyError):
                pass  # a policy this module cannot name (weighted interleave): the error below still holds
        raise AffinityError(f"sched_setaffinity to CPUs {cpus}: {exc.strerror}: the kernel refused them (has "
                            "the cgroup's cpuset changed since set_affinity first read this machine?)") from exc
    me = threading.get_native_id()
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        if tid == me:
            continue
        try:
            if os.sched_getaffinity(tid) == before:
                os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # the thread ended meanwhile


def _set_memory(affinity: ProcessAffinity, policy: str):
    """Set the calling thread's memory policy; return the one it replaces."""
    from topo import syscalls

    nodes = affinity.memory_nodes
    if policy != "local" and not nodes:
        raise AffinityError(f"memory={policy!r}: CPUs {affinity.cpus} are on no NUMA node with memory; "
                            "use memory='local' or None")
    previous = syscalls.get_mempolicy()
    kernel_policy = "preferred-many" if policy == "preferred" and nodes.weight() > 1 else policy
    try:
        try:
            syscalls.set_mempolicy(kernel_policy, CpuSet() if policy == "local" else nodes)
        except syscalls.SyscallError as exc:
            if kernel_policy != "preferred-many" or exc.errno != 22:
                raise
            syscalls.set_mempolicy("preferred", nodes)  # before Linux 5.15: the first node only
    except syscalls.SyscallError as exc:
        raise AffinityError(
            f"memory={policy!r}: {exc}: the kernel refused the memory policy (a container needs "
            "CAP_SYS_NICE, and the nodes must be in Mems_allowed); pass memory=None to bind CPUs only") from exc
    return previous
