"""A bind JSON entry (planners.bindplan.ProcessBinding) as the one record of a process's binding,
topo.binding.Binding: the only place an entry becomes CPUs and memory nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topo.binding import Binding
from topo.cpuset import CpuSet, union_all

if TYPE_CHECKING:
    from topo.planners.bindplan import ProcessBinding
    from topo.model import Topology


def node_cpus(topology: Topology, nodes: CpuSet) -> CpuSet:
    """The allowed CPUs of NUMA nodes `nodes`: what `numactl --cpunodebind` leaves a process."""
    return union_all(n.cpuset for n in topology.numa_nodes if n.os_index in nodes) & topology.allowed_pus


def from_entry(entry: ProcessBinding | None, topology: Topology, memory_policy: str | None) -> Binding:
    """The binding a bind JSON entry asks for (no prefix yet): its main CPUs, else the CPUs of its
    CPU nodes; its memory nodes under `memory_policy` (the plan's; None: memory not bound)."""
    if entry is None:
        return Binding()
    cpus = entry.cpus("main") if entry.main else None
    if cpus is None and entry.cpu_node_set:
        cpus = node_cpus(topology, entry.cpu_node_set)
    memory = entry.memory_nodes if memory_policy is not None and entry.memory_nodes else None
    return Binding(cpus or None, memory, memory_policy if memory is not None else None, entry.device)
