"""Grace Hopper / Grace Blackwell / GB10 roots: GPU memory nodes as hwloc lists them, each GPU
related to its memory node, and no plan binding CPUs or (by default) memory to a CPU-less node.

The roots are generated (tests/machines_2026.py); lstopo-no-graphics reading the same files is
the oracle for `topo show`."""

from __future__ import annotations

import pytest

import machines_2026
from lstopo_oracle import lstopo_of, needs_lstopo, topo_console
from sysfs_builder import build
from topo import planners
from topo.discovery import discover

# name -> (machine, each GPU's memory node (None: none), each GPU's home: the CPU node nearest it)
MACHINES = {
    "gh200": (lambda: machines_2026.gh200(1), [1], [0]),
    "gh200x4": (lambda: machines_2026.gh200(4), [4, 12, 20, 28], [0, 1, 2, 3]),
    "gb200": (machines_2026.gb200, [2, 10, 18, 26], [0, 0, 1, 1]),
    "gb200-cdmm": (lambda: machines_2026.gb200(cdmm=True), [None] * 4, [0, 0, 1, 1]),
    "gb10": (machines_2026.gb10, [None], [0]),
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("grace")
    return {name: build(base, make(), name) for name, (make, _, _) in MACHINES.items()}


@needs_lstopo
@pytest.mark.parametrize("name", MACHINES)
def test_show_is_lstopos(roots, name):
    assert topo_console(roots[name]) == lstopo_of(roots[name], HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES="1")


@pytest.mark.parametrize("name", MACHINES)
def test_each_gpu_is_related_to_its_memory_node(roots, name):
    t = discover(roots[name])
    _, memory, _ = MACHINES[name]
    gpus = sorted((d for d in t.devices if d.kind == "gpu"), key=lambda d: d.index)
    found = [t.memory_node_of(d) for d in gpus]
    assert [n.os_index if n else None for n in found] == memory
    for gpu, node in zip(gpus, found):
        if node is not None:
            assert (node.subtype, node.busid, node.memory_only, node.cpuset.weight()) == ("GPUMemory", gpu.busid, True, 0)
    gpu_nodes = [n for n in t.to_dict()["numa_nodes"] if n["subtype"] == "GPUMemory"]
    assert [n["busid"] for n in gpu_nodes] == [g.busid for g, n in zip(gpus, found) if n is not None]
    if name == "gh200x4":
        assert len(t.numa_nodes) == 36  # a Grace, its GPU's node and seven empty ones per GPU


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("mode", planners.modes())
def test_no_plan_binds_to_a_cpu_less_node(roots, name, mode):
    t = discover(roots[name])
    _, _, homes = MACHINES[name]
    cpu_nodes = {n.os_index for n in t.cpu_nodes()}
    plan = planners.plan(t, mode)
    for p in plan.workers():
        assert p.cpu_node_set is None or p.cpu_node_set <= cpu_nodes, (p.key, p.cpu_node_set)
        assert p.memory_nodes is None or set(p.memory_nodes) <= cpu_nodes, (p.key, p.memory_nodes)
        if mode == "node":
            home = t.numa_node(homes[int(p.key.removeprefix("device"))])
            assert (p.cpus("main"), set(p.memory_nodes)) == (home.cpuset, {home.os_index})


@pytest.mark.parametrize("name", MACHINES)
def test_memory_device_binds_the_gpus_own_memory_node(roots, name):
    t = discover(roots[name])
    _, memory, homes = MACHINES[name]
    plan = planners.plan(t, "unique-contiguous", memory="device")
    assert plan.memory_policy == "bind"
    for p in plan.workers():
        g = int(p.key.removeprefix("device"))
        assert set(p.memory_nodes) == {memory[g] if memory[g] is not None else homes[g]}
        assert p.cpus("main") <= t.numa_node(homes[g]).cpuset  # the CPUs stay at home
