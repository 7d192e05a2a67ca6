"""Each process's binding: the numactl / taskset argv prefix msrun builds, and what /proc should show.

msrun turns its three binding inputs into a prefix per process (spec/anchors.md §1.11, §1.12):

- a unified bind JSON given to --bind_numa decides alone (--bind_core is then ignored);
- otherwise --bind_numa gives a NUMA string N and --bind_core a CPU string C, each from a table
  ({"device0": [...], "scheduler": [...]}) or from the automatic `msrun-auto` plan (workers only):
  N and C -> `numactl --membind N --physcpubind C`, N -> `numactl --membind N --cpunodebind N`,
  C -> `taskset -c C`.

Both tables reduce to one rule, `bind_prefix`. Strings are passed through as written (spaces
removed), as msrun does; the sets they name are checked against the topology before anything starts.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

from topo.cpuset import CpuSet
from topo.errors import ParseError, UsageError

if TYPE_CHECKING:  # planners and the model are imported only when something is bound
    from planners.bindjson import LoadedBind
    from topo.model import Topology


@dataclass(frozen=True)
class Binding:
    """One process's binding: the argv prefix, and the CPUs / memory nodes it should end up with."""

    prefix: tuple[str, ...] = ()
    cpus: CpuSet | None = None  # expected Cpus_allowed_list; None = CPUs not bound
    memory: CpuSet | None = None  # expected membind nodes; None = memory not bound
    cpu_list_env: str | None = None  # MSRUN_CPU_LIST, a Python list literal: "[0, 1]"

    @property
    def is_bound(self) -> bool:
        return bool(self.prefix)

    def describe(self) -> str:
        if not self.prefix:
            return "not bound"
        parts = []
        if self.cpus is not None:
            parts.append(f"CPUs {self.cpus}")
        if self.memory is not None:
            parts.append(f"memory {_nodes(self.memory)}")
        return ", ".join(parts)


UNBOUND = Binding()


def _nodes(nodes: CpuSet) -> str:
    return f"node {nodes}" if nodes.weight() == 1 else f"nodes {nodes}"


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


# ------------------------------------------------------------------ resolving a job's bindings
@dataclass(frozen=True)
class JobBindings:
    scheduler: Binding
    workers: tuple[Binding, ...]  # by local rank
    warnings: tuple[str, ...]
    env: Mapping[str, str]  # for every process (MSRUN_BIND_FILE / _HASH)


def resolve_bindings(bind_core, bind_numa, *, local_worker_num: int, topology: Topology | None,
                     environ: Mapping[str, str]) -> JobBindings:
    """Each process's binding for parsed --bind_core / --bind_numa values (see launcher.options).

    Raises UsageError, before anything starts, for CPUs or nodes that do not exist or are not
    allowed on `topology`, and for a missing numactl / taskset.
    """
    from planners.bindjson import LoadedBind

    if not bind_core and not bind_numa:
        return JobBindings(UNBOUND, (UNBOUND,) * local_worker_num, (), {})
    if topology is None:
        raise UsageError("binding needs this machine's topology; none was given")
    if not topology.is_this_system:
        raise UsageError(f"refusing to bind from a topology read below {topology.root!r}: it is not this machine")
    physical = device_ids(topology, local_worker_num, environ)
    warnings: list[str] = []
    if isinstance(bind_numa, LoadedBind):
        result = _from_unified(bind_numa, physical, topology, warnings)
        if bind_core:
            warnings.append("--bind_core is ignored: the bind JSON given to --bind_numa decides (as msrun)")
    else:
        result = _from_tables(bind_core, bind_numa, physical, topology, warnings)
    check_tools((result[0], *result[1]))
    env = {}
    if isinstance(bind_numa, LoadedBind) and bind_numa.path is not None:
        env = {"MSRUN_BIND_FILE": bind_numa.path, "MSRUN_BIND_FILE_HASH": bind_numa.sha256 or ""}
    return JobBindings(result[0], tuple(result[1]), tuple(warnings), env)


def _from_unified(loaded: LoadedBind, physical: list[int], topology: Topology, warnings: list[str]):
    check_bind_json(loaded, topology, "--bind_numa", warnings)

    workers = []
    for rank, device in enumerate(physical):
        b = binding_for_key(loaded.data, f"device{device}", topology)
        if not b.is_bound:
            warnings.append(f"local rank {rank}: the bind JSON has no process binding for device{device}; "
                            "it runs unbound")
        workers.append(b)
    return binding_for_key(loaded.data, "scheduler", topology), workers


def check_bind_json(loaded: LoadedBind, topology: Topology, what: str, warnings: list[str]) -> None:
    """UsageError for the first problem that stops a binding (schema, CPUs or nodes that are not
    there or not allowed). Overlapping main CPUs only cost speed, and msrun runs such files, so
    they become warnings."""
    from planners.bindjson import validate_bind

    errors = []
    for problem in validate_bind(loaded.data, topology):
        if problem.severity == "warning":
            warnings.append(str(problem))
        else:
            errors.append(problem)
    if errors:
        more = f" (and {len(errors) - 1} more; run `topo validate`)" if len(errors) > 1 else ""
        raise UsageError(f"{what} {loaded.path or 'inline bind JSON'}: {errors[0]}{more}")


def binding_for_key(data: Mapping, key: str, topology: Topology) -> Binding:
    """The binding of process `key` ("device3", "scheduler") in a unified bind JSON (§1.12 table)."""
    from planners.bindjson import process_entry

    entry = process_entry(data, key)
    cpus = entry.main if entry.cpu_mode == "cpu" else None
    cpu_nodes = entry.cpu_node if entry.cpu_mode == "numa" else None
    return _binding(topology, cpus=cpus, cpu_nodes=cpu_nodes, memory=entry.memory)


def _from_tables(bind_core, bind_numa, physical, topology, warnings):
    n = len(physical)
    cpu_strings: list[str | None] = [None] * n
    numa_strings: list[str | None] = [None] * n
    cpu_lists: list[list[int] | None] = [None] * n
    sched_cpus = sched_numa = None
    if isinstance(bind_core, Mapping):
        sched_cpus, cpu_strings = _table_strings(bind_core, physical, "--bind_core", warnings)
        _check_ids(bind_core, topology.allowed_pus, "--bind_core", "CPU")
    elif bind_core is True:
        cpu_lists = list(_auto(topology, physical, "cpu", warnings))
        cpu_strings = [_compact(c) if c else None for c in cpu_lists]
    if isinstance(bind_numa, Mapping):
        sched_numa, numa_strings = _table_strings(bind_numa, physical, "--bind_numa", warnings)
        _check_ids(bind_numa, CpuSet(n.os_index for n in topology.cpu_nodes()), "--bind_numa", "NUMA")
    elif bind_numa is True:
        node_lists = list(_auto(topology, physical, "numa", warnings))
        numa_strings = [_compact(x) if x else None for x in node_lists]
        if bind_core is not True:
            # msrun exports the CPUs of the first node for mindspore.runtime.set_cpu_affinity
            for i, nodes in enumerate(node_lists):
                if nodes:
                    cpus = topology.numa_node(nodes[0]).cpuset & topology.allowed_pus
                    cpu_lists[i] = list(cpus)

    def make(cpus, numa, cpu_list=None):
        b = _binding(topology, cpus=cpus, cpu_nodes=numa if not cpus else None, memory=numa)
        return replace(b, cpu_list_env=str(list(cpu_list))) if cpu_list else b

    scheduler = make(sched_cpus, sched_numa)
    workers = [make(cpu_strings[i], numa_strings[i], cpu_lists[i]) for i in range(n)]
    return scheduler, workers


def _table_strings(table: Mapping[str, Sequence[str]], physical: list[int], flag: str, warnings: list[str]):
    """msrun's positional reading of a table: the i-th non-scheduler key is local rank i's, and its
    number must be that rank's physical device id (anchors §1.9, quirk §1.18.3)."""
    scheduler = ",".join(table.get("scheduler", ())) or None
    keys = [k for k in table if k != "scheduler"]
    out: list[str | None] = []
    for rank, device in enumerate(physical):
        if rank >= len(keys):
            warnings.append(f"{flag} has no entry for local rank {rank} (device{device}); it runs unbound")
            out.append(None)
            continue
        key = keys[rank]
        if key != f"device{device}":
            warnings.append(f"{flag}: entry #{rank} is {key}, but local rank {rank} drives device{device}; "
                            f"it runs unbound (msrun reads the table by position; list every device in order)")
            out.append(None)
            continue
        out.append(",".join(table[key]) or None)
    return scheduler, out


def _check_ids(table, allowed: CpuSet, flag: str, label: str) -> None:
    for key, items in table.items():
        for item in items:
            try:
                ids = CpuSet.parse(item)
            except ParseError as exc:
                raise UsageError(f"{flag}: {key}: {exc}") from None
            bad = ids - allowed
            if bad:
                if label == "CPU":
                    what = f"this machine allows CPUs {allowed} (see `topo show`)"
                else:
                    what = f"the NUMA nodes with CPUs this process may use are {allowed}"
                which = f"{label} {bad} of {key} is" if bad.weight() == 1 else f"{label}s {bad} of {key} are"
                raise UsageError(f"{flag}: {which} not available: {what}")


def _auto(topology: Topology, physical: list[int], kind: str, warnings: list[str]):
    from launcher.autoplan import msrun_auto

    lists, notes = msrun_auto(topology, [f"device{d}" for d in physical], kind)
    warnings.extend(notes)
    return lists


def _compact(ids: Sequence[int]) -> str:
    return CpuSet(ids).to_list()


def _binding(topology: Topology, *, cpus: str | None, cpu_nodes: str | None, memory: str | None) -> Binding:
    from planners.bindjson import bind_prefix  # only jobs that bind pay for importing planners

    prefix = bind_prefix(cpus=cpus, cpu_nodes=cpu_nodes, memory=memory)
    if not prefix:
        return UNBOUND
    expected_cpus = None
    if cpus:
        expected_cpus = CpuSet.parse(cpus)
    elif cpu_nodes:
        expected_cpus = CpuSet()
        for node in CpuSet.parse(cpu_nodes):
            expected_cpus |= topology.numa_node(node).cpuset
        expected_cpus &= topology.allowed_pus
    return Binding(tuple(prefix), expected_cpus, CpuSet.parse(memory) if memory else None)


def check_tools(bindings: Sequence[Binding]) -> None:
    """UsageError unless every tool the prefixes run (numactl, taskset) is on PATH."""
    needed = {b.prefix[0] for b in bindings if b.prefix}
    for tool in sorted(needed):
        if shutil.which(tool) is None:
            package = "numactl" if tool == "numactl" else "util-linux"
            raise UsageError(f"binding needs `{tool}`, which is not on PATH: install it (apt-get install {package})")
