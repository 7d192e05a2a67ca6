"""Binding from inside the process: `set_affinity`, NVIDIA gpu_affinity's call on topo's planners.

    import os, topo
    cpus = topo.set_affinity(int(os.environ["LOCAL_RANK"]))     # first thing in main()

`plan_affinity` plans (a pure function of a Topology and an environment); `bind_process` discovers
this machine once per process, plans, applies with topo.syscalls.apply and says what it did. The
CPUs go to the calling thread and every thread whose affinity equals the caller's (PyTorch's rule:
threads a library started at import move, threads that chose their CPUs stay), or every thread with
`threads="all"`; the memory policy to the calling thread, inherited by the threads it starts after
(Linux cannot set another thread's). A process a launcher bound (TOPO_BINDING set, and still true)
keeps that binding.
"""
from __future__ import annotations

import enum
import functools
import os
import uuid
import warnings
from dataclasses import dataclass, replace
from typing import Mapping, Union

from topo import planners, syscalls
from topo.binding import BINDING_VAR, MAX_PROCESSES, MEMORY_POLICIES, Binding, observe
from topo.cpuset import CpuSet, excerpt
from topo.discovery import discover
from topo.errors import ParseError, TopoError
from topo.model import Topology
from topo.numbers import ascii_number
from topo.planners.binding import from_entry
from topo.planners.core import Job
from topo.visible import DEVICE_FORMS, describe_env, find_device, hidden_warning, job_env, visible_devices

THREADS = ("shared", "all")
NPROC_VARIABLE = "LOCAL_WORLD_SIZE"  # the processes on this node when nproc_per_node is not given


class AffinityError(TopoError):
    """set_affinity cannot plan or apply the binding; the message says why and what to change."""


# gpu_affinity's names, so that code written for it runs after `import topo as gpu_affinity`: every
# error set_affinity raises is an AffinityError, which `except gpu_affinity.GPUAffinityError` catches.
GPUAffinityError = AffinityError


class Mode(enum.StrEnum):
    """gpu_affinity's modes; `mode` also takes every mode of `topo plan --list-modes` by name."""

    ALL = "all"
    SINGLE = "single"
    SINGLE_UNIQUE = "single_unique"
    UNIQUE_INTERLEAVED = "unique_interleaved"
    UNIQUE_CONTIGUOUS = "unique_contiguous"


class Scope(enum.StrEnum):
    NODE = "node"
    SOCKET = "socket"


class Multithreading(enum.StrEnum):
    ALL_LOGICAL = "all_logical"
    SINGLE_LOGICAL = "single_logical"


# a local index, a GPU-/MIG- UUID or PCI bus id as text, or a UUID object
DeviceId = Union[int, str, uuid.UUID]


def plan_affinity(topology: Topology, device_id: DeviceId, nproc_per_node: int | None = None, *,
                  mode: Mode | str = Mode.UNIQUE_CONTIGUOUS, scope: Scope | str = Scope.NODE,
                  multithreading: Multithreading | str = Multithreading.ALL_LOGICAL, balanced: bool = True,
                  min_physical_cores: int = 1, max_physical_cores: int | None = None, memory: str | None = None,
                  env: Mapping[str, str] | None = None, priority_cores: bool = False) -> Binding:
    """The binding `set_affinity` applies for `device_id` of `nproc_per_node` on `topology`, not
    applied: its CPUs, its device's physical id (None without accelerators) and, with `memory`, its
    memory policy and nodes. The planner's warnings go to `warnings.warn`. `env`: the visible-device
    variables and LOCAL_WORLD_SIZE (default: os.environ on the live machine, none elsewhere)."""
    policy = _memory(memory)
    planned, _ = _planned(topology, device_id, nproc_per_node, job_env(topology, env), 2, mode=mode, scope=scope,
                          multithreading=multithreading, balanced=balanced, min_physical_cores=min_physical_cores,
                          max_physical_cores=max_physical_cores, priority_cores=priority_cores)
    return _with_memory(planned, policy)


def plan_here(device_id: DeviceId, nproc_per_node: int | None = None, *, memory: str | None = None,
              **options) -> tuple[Binding, int]:
    """plan_affinity on this machine with this process's environment, without warnings, and how
    many of the job's processes (this one included) share the binding's CPUs."""
    policy = _memory(memory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned, share = _planned(this_machine(), device_id, nproc_per_node, os.environ, 1, **options)
    return _with_memory(planned, policy), share


_NODE_PLANS: dict[tuple, tuple[Topology, tuple]] = {}


def _planned(topology: Topology, device_id, nproc_per_node, env: Mapping[str, str], stacklevel: int,
             **options) -> tuple[Binding, int]:
    """`device_id`'s binding as planned (memory bound to its home nodes), the planner's warnings
    given as its caller's at `stacklevel`, and how many of the job's processes share its CPUs. The
    node's plan is kept: a repeated call takes 0.05 ms instead of a plan's (benchmarks/affinity_bench.py)."""
    job, rank = _locate(topology, device_id, nproc_per_node, env)
    key = (id(topology), job.devices, *(str(v) for v in options.values()))
    hit = _NODE_PLANS.get(key)
    if hit is None or hit[0] is not topology:
        hit = _NODE_PLANS[key] = (topology, _plan(topology, job, **options))
    ranks, mode_name, notes = hit[1]
    mine = ranks[rank]
    if mine.cpus is None:
        restricted = _restriction(topology)
        if restricted:
            raise AffinityError(f"mode {mode_name!r} leaves local rank {rank} no CPU within {restricted}; "
                                "widen the restriction or start fewer processes")
        raise AffinityError(f"mode {mode_name!r} gives device_id={rank} no CPU; choose another mode")
    hidden = hidden_warning(topology, env) if job.cpu_only else None
    for note in filter(None, (hidden, *notes)):
        warnings.warn(f"set_affinity: {note}", stacklevel=stacklevel + 1)
    return mine, sum(1 for b in ranks if b.cpus is not None and b.cpus.intersects(mine.cpus))


def _with_memory(planned: Binding, policy: str | None) -> Binding:
    """The planned binding with memory policy `policy` (None: memory left alone)."""
    if policy is None:
        return planned.without_memory()
    if policy == "local":
        return replace(planned, memory_nodes=None, memory_policy="local")
    if planned.memory_nodes is None:
        raise AffinityError(f"memory={policy!r}: CPUs {planned.cpus} are on no NUMA node with memory; "
                            "use memory='local' or None")
    return replace(planned, memory_policy=policy)


def _locate(topology: Topology, device_id, nproc_per_node, env: Mapping[str, str]) -> tuple[Job, int]:
    """The job (local rank r runs next to its r-th device) and the rank `device_id` names in it."""
    index = _device_index(device_id)
    nproc, origin = _nproc(nproc_per_node, env)
    try:
        visible = visible_devices(topology, env=env)
        device = None if index is not None else find_device(topology, device_id)[0]
    except TopoError as exc:
        raise AffinityError(str(exc)) from exc
    if device is not None:
        # named by UUID or bus id: its own device, ranked among the visible devices when they list
        # it (and are enough for the job), else among every device of its kind in the runtime's order
        hits = [r for r, d in enumerate(visible) if d == device]
        if hits and (nproc is None or nproc <= len(visible)):
            if len(hits) > 1:
                raise AffinityError(f"device {excerpt(str(device_id).strip())!r}: {len(hits)} visible MIG instances "
                                    f"share GPU {device.index}{describe_env(env)}; pass the local index of this "
                                    "process's instance")
            rank, what = hits[0], f" (one process per visible {device.kind.upper()}{describe_env(env)})"
        else:
            visible = visible_devices(topology, kind=device.kind, env={})
            rank, what = visible.index(device), f" (one process per {device.kind.upper()} of the machine)"
        if nproc is None:
            nproc, origin = len(visible), what
        if rank >= nproc:
            raise AffinityError(
                f"device {excerpt(str(device_id).strip())!r} is {device.kind.upper()} {device.index} ({device.busid}), "
                f"local rank {rank}, past the nproc_per_node={nproc}{origin} devices the job uses; "
                f"pass nproc_per_node={len(visible)} or name one of the job's devices")
        return Job(tuple(d.index for d in visible[:nproc])), rank
    what = visible[0].kind.upper() if visible else "device"
    if nproc is None:
        if visible:
            nproc, origin = len(visible), f" (one process per visible {what}{describe_env(env)})"
        else:
            nproc = Job.for_topology(topology, devices=()).nproc
            hidden = hidden_warning(topology, env)
            origin = f" (one process per NUMA node: {'this machine has no accelerator' if hidden is None else hidden})"
    if visible and nproc > len(visible):
        raise AffinityError(
            f"nproc_per_node={nproc}{origin} but {len(visible)} {what}s are visible{describe_env(env)}: "
            f"set_affinity places one process per {what}; make more visible or start fewer processes")
    if index >= nproc:
        raise AffinityError(f"device_id={index} should be smaller than nproc_per_node={nproc}{origin}")
    return Job(tuple(d.index for d in visible[:nproc]) if visible else (None,) * nproc), index


def _plan(topology: Topology, job: Job, *, mode, scope, multithreading, balanced, min_physical_cores,
          max_physical_cores, priority_cores=False) -> tuple[tuple[Binding, ...], str, tuple[str, ...]]:
    """Every local rank's binding (memory bound) from one plan of the node, the mode's name, the warnings."""
    mode_name = _word(mode, "mode")
    try:
        plan = planners.plan(topology, mode_name, job=job, scope=_word(scope, "scope"),
                             multithreading=_word(multithreading, "multithreading"), balanced=bool(balanced),
                             min_physical_cores=min_physical_cores, max_physical_cores=max_physical_cores,
                             memory="numa", priority_cores=bool(priority_cores))
    except TopoError as exc:
        restricted = _restriction(topology)
        if restricted:  # the planner's words would blame the device; the restriction is the cause
            raise AffinityError(
                f"mode {mode_name!r} cannot give each of {job.nproc} processes its CPUs within {restricted}; "
                "widen the restriction, start fewer processes, or use a mode that shares CPUs (node, single)") from exc
        raise AffinityError(str(exc)) from exc
    ranks = []
    for rank in range(job.nproc):
        process = plan.get(job.key(rank))
        if process is None:  # a plug-in planner that left a process out
            raise AffinityError(f"mode {mode_name!r} planned no binding for {job.key(rank)} (local rank {rank}); "
                                "choose another mode")
        ranks.append(replace(from_entry(process, topology, "bind"), device=job.devices[rank]))
    return tuple(ranks), mode_name, tuple(plan.warnings)


def _restriction(topology: Topology) -> str:
    """"the CPUs this process may use (0-3 of 0-15: ...)" when fewer CPUs are allowed than online, else ""."""
    if topology.allowed_pus >= topology.online_pus:
        return ""
    return (f"the CPUs this process may use ({topology.allowed_pus or 'none'} of {topology.online_pus}: "
            "taskset, numactl, the cgroup's cpuset or the batch system restrict them)")


def _device_index(device_id) -> int | None:
    """The local index `device_id` names, or None when it names a device by UUID or bus id."""
    if isinstance(device_id, str):
        text = device_id.strip()
        if text.isascii() and text.isdigit():
            device_id = int(text) if len(text) <= 9 else MAX_PROCESSES
        elif 0 < len(text) <= 200:
            return None
        else:
            raise AffinityError(f"device_id {excerpt(device_id)!r} is not a device: give {DEVICE_FORMS}")
    elif not isinstance(device_id, int) and "uuid" in type(device_id).__name__.lower():
        return None  # uuid.UUID, or torch's _CUuuid from get_device_properties(i).uuid
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        raise AffinityError(f"device_id must be {DEVICE_FORMS}; got {device_id!r}")
    if device_id >= MAX_PROCESSES:
        raise AffinityError(f"device_id={_number(device_id)} is past {MAX_PROCESSES - 1}, the largest local "
                            "device index set_affinity plans; give the process's local rank")
    return device_id


def _nproc(nproc_per_node, env: Mapping[str, str]) -> tuple[int | None, str]:
    """The job's process count (None: one per visible device) and where it came from, " (...)" or ""."""
    if nproc_per_node is not None:
        if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1:
            raise AffinityError(f"nproc_per_node must be a positive number of processes; got {nproc_per_node!r}")
        if nproc_per_node > MAX_PROCESSES:
            raise AffinityError(f"nproc_per_node={_number(nproc_per_node)} is more than {MAX_PROCESSES}, the "
                                "most processes set_affinity plans on one machine; give the processes per machine")
        return nproc_per_node, ""
    text = env.get(NPROC_VARIABLE, "").strip()
    if not text:
        return None, ""
    n = ascii_number(text[:20])
    if not n or len(text) > 20 or n > MAX_PROCESSES:
        raise AffinityError(f"{NPROC_VARIABLE}={excerpt(text)!r} is not a positive number of processes up to "
                            f"{MAX_PROCESSES}; fix it or pass nproc_per_node")
    return n, f" (from {NPROC_VARIABLE})"


_EXAMPLES = {"mode": "unique_contiguous", "scope": "node", "multithreading": "all_logical"}


def _word(value, what: str) -> str:
    """A mode (a planner's name), scope or multithreading given as text or gpu_affinity's enum member."""
    value = getattr(value, "value", value)
    if not isinstance(value, str):
        raise AffinityError(f"{what} must be a string such as {_EXAMPLES[what]!r}; got {value!r}")
    if what != "mode":
        return value.strip().lower().replace("_", "-")
    name = planners.normalize_mode(value)
    try:
        planners.get_planner(name)
    except TopoError as exc:
        raise AffinityError(str(exc)) from exc
    return name


def _memory(memory) -> str | None:
    if memory is None:
        return None
    policy = memory.strip().lower() if isinstance(memory, str) else memory
    if policy not in MEMORY_POLICIES:
        raise AffinityError(f"memory must be None, {', '.join(map(repr, MEMORY_POLICIES))}; got {memory!r}")
    return policy


def _number(n: int) -> str:
    """`n` for a message; str() refuses ints of more than 4300 digits."""
    return excerpt(str(n)) if n.bit_length() < 1000 else f"a number of {n.bit_length()} bits"


@functools.cache
def this_machine() -> Topology:
    """This machine's topology, discovered once (a second call plans the allowed CPUs of the first)."""
    try:
        return discover("/")
    except TopoError as exc:  # an AffinityError, as every error of set_affinity (GPUAffinityError)
        raise AffinityError(f"cannot read this machine's topology: {exc}") from exc


@dataclass(frozen=True)
class AffinityResult:
    """What bind_process did."""

    binding: Binding  # what holds now: CPUs, and the memory policy after any fallback
    cpus: frozenset[int]  # os.sched_getaffinity(0) afterwards
    memory: str | None  # the rung of the memory fallback ladder that held: "bind", "preferred", "local",
    #                     "none" (refused, bind_fallback: CPUs only); None: memory not asked for
    pages_moved: int | None  # migrate=True: pages moved onto the process's node(s); None: not asked
    threads_moved: int  # threads besides the caller given the new CPUs
    kept: bool = False  # the launcher's binding (TOPO_BINDING) was kept instead of planning
    omp_threads: int | None = None  # the OMP_NUM_THREADS advised when the CPUs are shared and it is not set


def set_affinity(device_id: DeviceId, nproc_per_node: int | None = None, *,
                 mode: Mode | str = Mode.UNIQUE_CONTIGUOUS, scope: Scope | str = Scope.NODE,
                 multithreading: Multithreading | str = Multithreading.ALL_LOGICAL, balanced: bool = True,
                 min_physical_cores: int = 1, max_physical_cores: int | None = None, memory: str | None = None,
                 bind_fallback: bool = False, migrate: bool = False, threads: str = "shared",
                 priority_cores: bool = False) -> set[int]:
    """Bind this process to the CPUs (and optionally the memory) of its device, first thing in main()
    (before CUDA/ACL initialise and worker threads start); return `os.sched_getaffinity(0)`.
    `bind_process` takes the same arguments and says what it did.

    `device_id`: the local index as the visible-device variables number it (CUDA_VISIBLE_DEVICES with
    CUDA_DEVICE_ORDER, HIP/ROCR_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES), or a `GPU-`/`MIG-` UUID,
    bare UUID (text or torch's object) or PCI bus id. `nproc_per_node` None: LOCAL_WORLD_SIZE, else
    one process per visible device (per NUMA node without accelerators); at most MAX_PROCESSES.
    `mode` to `max_physical_cores`: gpu_affinity's (strings or enum members, `_` or `-`); `mode` also
    takes every mode of `topo plan --list-modes`; the plan stays within the allowed CPUs.
    `memory`: None leaves the policy alone; "local", "bind" or "preferred" on the process's node(s),
    for this thread and those it starts; refused by the kernel, an error unless `bind_fallback=True`
    (then "preferred", then CPUs alone, with a warning). `migrate=True` moves the pages already
    touched; `threads`: "shared" or "all" (module doc). `priority_cores=True`: each rank's CPUs hold
    a priority core of its home (`topo show --cpukinds`), distinct where enough. Shared CPUs and
    OMP_NUM_THREADS unset: a warning advises a value. AffinityError (a TopoError, also named
    GPUAffinityError) says in one line what is wrong.
    """
    return set(bind_process(device_id, nproc_per_node, mode=mode, scope=scope, multithreading=multithreading,
                            balanced=balanced, min_physical_cores=min_physical_cores,
                            max_physical_cores=max_physical_cores, memory=memory, bind_fallback=bind_fallback,
                            migrate=migrate, threads=threads, priority_cores=priority_cores, _stacklevel=3).cpus)


def bind_process(device_id: DeviceId, nproc_per_node: int | None = None, *,
                 mode: Mode | str = Mode.UNIQUE_CONTIGUOUS, scope: Scope | str = Scope.NODE,
                 multithreading: Multithreading | str = Multithreading.ALL_LOGICAL, balanced: bool = True,
                 min_physical_cores: int = 1, max_physical_cores: int | None = None, memory: str | None = None,
                 bind_fallback: bool = False, migrate: bool = False, threads: str = "shared",
                 priority_cores: bool = False, _stacklevel: int = 2) -> AffinityResult:
    """set_affinity, returning what it did (AffinityResult)."""
    # arguments that are wrong on any machine fail before this one is read
    _device_index(device_id)
    _nproc(nproc_per_node, {})
    policy = _memory(memory)
    _word(mode, "mode")
    if threads not in THREADS:
        raise AffinityError(f"threads must be one of {', '.join(map(repr, THREADS))}; got {threads!r}")
    kept = _kept_binding(os.environ)
    if kept is not None:
        warnings.warn(f"set_affinity: keeping the binding the launcher applied ({BINDING_VAR}="
                      f"{kept.env_value()!r}); unset {BINDING_VAR} to plan again", stacklevel=_stacklevel)
        others = syscalls.other_threads() if threads == "all" and kept.cpus is not None else []
        if others:
            syscalls.apply(Binding(kept.cpus), threads=others)
        pages = migrate_to(home_nodes(this_machine(), kept)) if migrate else None
        return AffinityResult(kept, frozenset(os.sched_getaffinity(0)), None, pages, len(others), kept=True)
    planned, share = _planned(this_machine(), device_id, nproc_per_node, os.environ, _stacklevel, mode=mode,
                              scope=scope, multithreading=multithreading, balanced=balanced,
                              min_physical_cores=min_physical_cores, max_physical_cores=max_physical_cores,
                              priority_cores=priority_cores)
    omp = None
    if share > 1 and "OMP_NUM_THREADS" not in os.environ:  # the launchers' rule (launcher.environ.thread_env)
        omp = max(1, planned.cpus.weight() // share)
        warnings.warn(f"set_affinity: CPUs {planned.cpus} are shared by {share} of the job's processes: set "
                      f"OMP_NUM_THREADS={omp} (or torch.set_num_threads({omp})) so that they do not run "
                      "more threads than CPUs", stacklevel=_stacklevel)
    before = os.sched_getaffinity(0) if threads == "shared" else None
    others = syscalls.other_threads(before)
    held = apply_binding(_with_memory(planned, policy), bind_fallback, "set_affinity", threads=others,
                         stacklevel=_stacklevel + 1)
    # a thread that one not yet moved started meanwhile has the old CPUs: passes until one finds no
    # new thread, at most 100 (a process that starts threads without end)
    moved = set(others)
    for _ in range(100):
        late = [tid for tid in syscalls.other_threads(before) if tid not in moved]
        if not late:
            break
        syscalls.apply(Binding(held.cpus), threads=late)
        moved.update(late)
    pages = migrate_to(home_nodes(this_machine(), planned)) if migrate else None
    return AffinityResult(replace(held, applied_by="system calls"), frozenset(os.sched_getaffinity(0)),
                          (held.memory_policy or "none") if policy else None, pages, len(moved),
                          omp_threads=omp)


def _kept_binding(env: Mapping[str, str]) -> Binding | None:
    """The binding TOPO_BINDING describes, when it is set and this process still runs as it says."""
    text = env.get(BINDING_VAR)
    if text is None or not text.strip():
        return None
    try:
        binding = Binding.from_env(text)
    except ParseError as exc:
        raise AffinityError(f"{exc}: topo's launchers write cpus=<cpulist> memory=<policy>:<nodelist>; unset "
                            f"{BINDING_VAR} to let set_affinity plan") from None
    if binding.cpus is not None and binding.cpus != CpuSet(os.sched_getaffinity(0)):
        return None
    if binding.memory_policy is not None:
        try:
            policy, nodes = syscalls.get_mempolicy()
        except TopoError:
            return None
        if (policy.removesuffix("-many") != binding.memory_policy
                or binding.memory_nodes is not None and nodes != binding.memory_nodes):
            return None
    return binding


def apply_binding(binding: Binding, fallback: bool, who: str, *, threads=(), stacklevel: int = 3) -> Binding:
    """topo.syscalls.apply in set_affinity's words (its keywords; a warning on fallback); what held."""
    try:
        held = syscalls.apply(binding, fallback=fallback, threads=threads, option="bind_fallback=True")
    except syscalls.BindingRefused as exc:
        if exc.memory:
            raise AffinityError(f"memory={binding.memory_policy!r}: {exc}; or pass memory=None to bind CPUs "
                                "only") from exc
        raise AffinityError(f"sched_setaffinity to CPUs {binding.cpus}: {os.strerror(exc.errno)}: the kernel "
                            "refused them (has the cgroup's cpuset changed since set_affinity first read this "
                            "machine?)") from exc
    if held.memory_policy != binding.memory_policy:
        warnings.warn(f"{who}: memory={binding.memory_policy!r} was refused by the kernel; bind_fallback: "
                      + (f"memory preferred on node(s) {held.memory_nodes}" if held.memory_policy == "preferred"
                         else "CPUs bound alone, memory policy unchanged"), stacklevel=stacklevel)
    return held


def home_nodes(topology: Topology, binding: Binding) -> CpuSet:
    """The NUMA node(s) a binding's pages belong on: its memory nodes, else those of its CPUs."""
    if binding.memory_nodes:
        return binding.memory_nodes
    cpus = binding.cpus if binding.cpus is not None else CpuSet(os.sched_getaffinity(0))
    nodes = CpuSet(n.os_index for n in topology.numa_nodes if n.cpuset & cpus)
    if not nodes:
        raise AffinityError(f"migrate=True: CPUs {cpus} are on no NUMA node with memory; pass migrate=False")
    return nodes


def migrate_to(nodes: CpuSet) -> int:
    """Move this process's pages from every other node onto `nodes`; how many moved."""
    def off_nodes() -> dict[int, int]:  # resident base pages per node (numa_maps(5), as `topo ps`)
        return {n: v for n, v in observe("self").pages_by_node.items() if n not in nodes}

    before = off_nodes()
    try:
        syscalls.migrate_pages(0, CpuSet(before), nodes)
    except syscalls.SyscallError as exc:
        raise AffinityError(f"migrate=True: {exc}: the kernel refused to move the pages (the nodes must be in "
                            "Mems_allowed); pass migrate=False") from exc
    return max(0, sum(before.values()) - sum(off_nodes().values()))
