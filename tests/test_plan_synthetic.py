"""topo.synthetic: topologies from hwloc-style descriptions, for planner tests and benchmarks."""

import pytest

from topo.errors import ParseError
from topo.model import Topology
from topo.synthetic import from_nodes, synthetic


def test_counts_and_numbering():
    t = synthetic("pack:2 numa:4 l3:2 core:8 pu:2", gpus_per_numa=1)
    t.check()
    assert t.summary() == "2 packages, 8 NUMA nodes, 128 cores, 256 PUs, 8 GPUs"
    assert [n.cpuset.to_list() for n in t.numa_nodes][:2] == ["0-31", "32-63"]
    assert len(t.last_level_caches()) == 16
    assert t.cores[1].cpuset.to_list() == "2-3"  # compact: a core's threads are consecutive
    assert [(d.index, d.numa_node) for d in t.devices][:3] == [(0, 0), (1, 1), (2, 2)]
    s = synthetic("pack:2 numa:1 core:4 pu:2", pu_order="scatter")
    assert s.cores[0].cpuset.to_list() == "0,8"  # scatter: sibling = cpu + ncores
    assert s.numa_nodes[1].distances == {0: 20, 1: 10}


def test_gpu_memory_nodes_and_cgroup():
    t = synthetic("pack:1 numa:2 core:4 pu:1", gpus_per_numa=1, gpu_memory_nodes=True,
                  allowed="0-2,4-5", allowed_nodes="0-1,3")
    t.check()
    assert [(n.os_index, n.memory_only, n.locality.to_list()) for n in t.numa_nodes] == [
        (0, False, "0-2"), (1, False, "4-5"), (2, True, "0-2"), (3, True, "4-5")]
    assert [d.numa_node for d in t.devices] == [2, 3]
    assert t.pus.to_list() == "0-2,4-5" and t.allowed_numa_nodes.to_list() == "0-1,3"
    assert [n.os_index for n in t.cpu_nodes()] == [0, 1]
    # round-trips through `topo show --json`
    assert Topology.from_dict(t.to_dict()) == t


@pytest.mark.parametrize("desc", ["pack:2 core:4", "core:4 pu:1", "pack:0 core:1 pu:1", "pack:1 cores:2 pu:1",
                                  "pack:1 core:2 pu:1 numa:2", "pack:1 pack:1 core:1 pu:1",
                                  "pack:\u0661 core:1 pu:1", "pack:1 core:1 pu:" + "9" * 5000])
def test_bad_descriptions(desc):
    with pytest.raises(ParseError):
        synthetic(desc)


def test_from_nodes():
    t = from_nodes(["0-2", "3-9"], threads_per_core=1, gpu_nodes=[0], memory_only={2: 1}, caches=["0-9"])
    t.check()
    assert [n.os_index for n in t.cpu_nodes()] == [0, 1]
    assert t.numa_nodes[2].distances == {0: 120, 1: 80, 2: 10}
    assert len(t.cores) == 10 and t.devices[0].local_cpus.to_list() == "0-2"
