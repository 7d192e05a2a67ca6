"""The one binding record (planners.binding.Binding): its words, its TOPO_BINDING text, its checks."""

import pytest

from topo.binding import BINDING_VAR, Binding
from topo.planners.binding import from_entry, node_cpus
from topo.planners.bindplan import ProcessBinding
from topo.cpuset import CpuSet
from topo.errors import ParseError
from topo.synthetic import synthetic


def test_describe_says_memory_either_way():
    assert Binding(CpuSet.parse("0-3"), CpuSet([0]), "bind").describe() == "CPUs 0-3, memory bound to node 0"
    assert Binding(CpuSet.parse("0-3")).describe() == "CPUs 0-3, memory not bound"
    assert Binding(None, CpuSet([0, 1]), "preferred").describe() == "CPUs not bound, memory preferred on nodes 0-1"
    assert Binding().describe() == "not bound"


@pytest.mark.parametrize("binding, text", [
    (Binding(CpuSet.parse("0-3"), CpuSet([0]), "bind"), "cpus=0-3 memory=bind:0"),
    (Binding(CpuSet.parse("8-15")), "cpus=8-15"),
    (Binding(None, CpuSet([1]), "preferred"), "memory=preferred:1"),
    (Binding(CpuSet([2]), None, "local"), "cpus=2 memory=local"),
    (Binding(), ""),
])
def test_env_value_round_trip(binding, text):
    assert binding.env_value() == text
    assert Binding.from_env(text) == binding


@pytest.mark.parametrize("text", ["cpus=", "cpus=x", "memory=bind", "memory=interleave:0", "cpus=1 cpus=2",
                                  "nodes=0", "memory=bind:", "cpus=" + "1," * 40000])
def test_from_env_refuses_what_topo_never_writes(text):
    with pytest.raises(ParseError, match=BINDING_VAR):
        Binding.from_env(text)


@pytest.mark.parametrize("kwargs", [dict(memory_policy="bind"), dict(memory_policy="interleave", memory_nodes=CpuSet([0])),
                                    dict(memory_nodes=CpuSet([0])), dict(cpus=CpuSet()), dict(applied_by="magic")])
def test_inconsistent_records_are_refused(kwargs):
    with pytest.raises(ValueError):
        Binding(**kwargs)


def test_from_entry_cpu_nodes_are_their_allowed_cpus():
    t = synthetic("pack:2 numa:1 core:2 pu:2")
    entry = ProcessBinding("device1", cpu_nodes=1, memory=1)
    b = from_entry(entry, t, "bind")
    assert (b.cpus, b.memory_nodes, b.memory_policy, b.device) == (node_cpus(t, CpuSet([1])), CpuSet([1]), "bind", 1)
    assert b.cpus == CpuSet.parse("4-7")
    assert from_entry(entry, t, None).memory_policy is None
    assert from_entry(None, t, "bind") == Binding()


def test_relaxed_walks_the_memory_ladder():
    b = Binding(CpuSet.parse("0-3"), CpuSet([0]), "bind", 2)
    assert b.relaxed() == Binding(CpuSet.parse("0-3"), CpuSet([0]), "preferred", 2)
    assert b.relaxed().relaxed() == Binding(CpuSet.parse("0-3"), None, None, 2)
    assert Binding(memory_policy="local").relaxed() == Binding()
