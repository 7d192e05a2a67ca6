"""Topology.check(): every invariant it enforces fails on a topology built to break it, and the
JSON form (schema topo.topology/1) is read back byte for byte and refused with the key at fault."""

from __future__ import annotations

import inspect
import json
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from topo import model
from topo.cpuset import CpuSet
from topo.errors import ProbeError, TopoError
from topo.model import Cache, Core, Die, NumaNode, Package, Topology

S = CpuSet.parse
GOLDEN = Path(__file__).parent / "fixtures" / "topology-json"


def machine(**changes) -> Topology:
    """2 packages x 2 cores x 2 PUs, a die and an L3 per package, an L2 per core, a node per package."""
    base = Topology(
        root="/captured", pus=S("0-7"), allowed_pus=S("0-7"), complete_pus=S("0-9"), online_pus=S("0-7"),
        allowed_numa_nodes=S("0-1"),
        packages=(Package(0, S("0-3")), Package(1, S("4-7"))),
        dies=(Die(0, 0, S("0-3")), Die(0, 1, S("4-7"))),
        numa_nodes=(NumaNode(0, S("0-3"), 1 << 30, False, S("0-3"), {0: 10, 1: 20}),
                    NumaNode(1, S("4-7"), 1 << 30, False, S("4-7"), {0: 20, 1: 10})),
        cores=tuple(Core(i % 2, i // 2, S(f"{2 * i}-{2 * i + 1}")) for i in range(4)),
        caches=(*(Cache(2, "unified", 1 << 20, S(f"{2 * i}-{2 * i + 1}")) for i in range(4)),
                Cache(3, "unified", 32 << 20, S("0-3")), Cache(3, "unified", 32 << 20, S("4-7"))),
    )
    return replace(base, **changes)


def with_node(i: int, **changes) -> tuple[NumaNode, ...]:
    nodes = list(machine().numa_nodes)
    nodes[i] = replace(nodes[i], **changes)
    return tuple(nodes)


# invariant (words of its message) -> a topology breaking it and only it
BROKEN = {
    "not among the PUs": lambda: machine(allowed_pus=S("0-8")),
    "not online": lambda: machine(online_pus=S("0-6")),
    "outside the complete set": lambda: machine(online_pus=S("0-7,12"), pus=S("0-7")),
    "package P#1 overlaps another": lambda: machine(packages=(Package(0, S("0-4")), Package(1, S("4-7")))),
    "package P#1 has PUs outside the topology": lambda: machine(packages=(Package(0, S("0-3")), Package(1, S("4-8")))),
    "not inside a package": lambda: machine(cores=(*machine().cores[:3], Core(1, 0, S("6-7")))),
    "has no PU": lambda: machine(cores=(*machine().cores, Core(9, 1, S("")))),
    "in two cores": lambda: machine(cores=(*machine().cores[:3], Core(1, 1, S("5-7")))),
    "not in exactly one core": lambda: machine(cores=machine().cores[:3]),
    "die P#0 not inside package P#1": lambda: machine(dies=(Die(0, 0, S("0-3")), Die(0, 1, S("3-7")))),
    "listed twice": lambda: machine(numa_nodes=with_node(1, os_index=0, cpuset=S(""), memory_only=True)),
    "NUMA node P#1 overlaps another": lambda: machine(numa_nodes=with_node(1, cpuset=S("3-7"), locality=S("3-7"))),
    "memory-only NUMA node": lambda: machine(numa_nodes=with_node(1, memory_only=True)),
    "outside its locality": lambda: machine(numa_nodes=with_node(1, locality=S("4-6"))),
    "allowed NUMA nodes": lambda: machine(allowed_numa_nodes=S("0-2")),
    "has PUs outside the topology": lambda: machine(caches=(Cache(3, "unified", 1, S("0-8")),)),
    "more than the 65536 any Linux machine has": lambda: machine(complete_pus=S("0-65536")),
    "straddles": lambda: machine(caches=(Cache(2, "unified", 1, S("2-5")), *machine().caches[4:])),
}


def test_the_base_machine_is_sound():
    machine().check()


@pytest.mark.parametrize("words", sorted(BROKEN))
def test_each_invariant_can_fail(words):
    with pytest.raises(ProbeError) as err:
        BROKEN[words]().check()
    assert words in str(err.value)
    assert str(err.value).startswith("topology check failed: ")


def test_every_invariant_has_a_breaking_case():
    # One message per invariant in the checker (appended, or returned at once); each needs a case above.
    source = inspect.getsource(model._problems)
    assert source.count("problems.append(") + source.count("return [f\"") == len(BROKEN)


def test_packages_sharing_an_id_hold_their_own_cores():
    # ia64 dumps reuse one package id for distinct sockets: a core is inside one of them.
    t = machine(packages=(Package(0, S("0-3")), Package(0, S("4-7"))),
                cores=tuple(replace(c, package=0) for c in machine().cores), dies=())
    t.check()


def test_a_million_pus_are_refused_fast():
    import time

    million = S("0-1048575")
    start = time.monotonic()
    for t in (machine(pus=million, online_pus=million, complete_pus=million),
              machine(pus=million, online_pus=million, complete_pus=million, allowed_pus=million, cores=(),
                      packages=(), dies=(), caches=())):
        with pytest.raises(ProbeError, match="1048576 PUs, more than the 65536"):
            t.check()
    assert time.monotonic() - start < 5  # hang protection only


def test_model_objects_are_frozen_values():
    p = Package(0, S("0-3"), "x")
    assert p == Package(0, S("0-3"), "x") and hash(p) == hash(Package(0, S("0-3"), "x"))
    assert p != Die(0, 0, S("0-3")) and p != Package(1, S("0-3"), "x")
    assert repr(p) == "Package(os_index=0, cpuset=CpuSet('0-3'), model='x')"
    with pytest.raises(FrozenInstanceError):
        p.os_index = 1
    assert replace(p, os_index=2).os_index == 2
    assert NumaNode(0, S(""), 0, True, S("")).distances == {}
    with pytest.raises(TypeError):
        Topology("/", S("0"))  # keyword-only


# ---- JSON --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_json_reads_back_byte_for_byte(path):
    # The files were written by the hand-written to_dict this derived one replaced.
    text = path.read_text()
    t = Topology.from_dict(json.loads(text))
    t.check()
    assert json.dumps(t.to_dict(), indent=2) + "\n" == text


def golden() -> dict:
    return json.loads((GOLDEN / "discovered-dgx-a100-nvml.json").read_text())


def edited(path: str, value) -> dict:
    data = golden()
    *parents, last = path.split(".")
    target = data
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    key = int(last) if last.isdigit() else last
    if value is KeyError:
        del target[key]
    else:
        target[key] = value
    return data


@pytest.mark.parametrize("path, value, words", [
    ("pci_devices.0.id", 4318, "pci_devices[0].id: expected a string, found 4318"),
    ("pci_devices.0.id", "10de", "pci_devices[0].id: expected 'vendor:device'"),
    ("packages.0.os_index", "0", "packages[0].os_index: expected an integer, found '0'"),
    ("packages.0.os_index", True, "packages[0].os_index: expected an integer, found True"),
    ("cores.3.cpuset", "0-x", "cores[3].cpuset: malformed cpulist"),
    ("pus", "0-99999999999", "pus: malformed cpulist"),
    ("pus", 7, "pus: expected a cpulist string"),
    ("numa_nodes.0.distances", {"x": 1}, "numa_nodes[0].distances.x: expected a NUMA node number"),
    ("numa_nodes.0.memory_only", 0, "numa_nodes[0].memory_only: expected true or false"),
    ("numa_nodes.0.local_memory", -1, "expected a non-negative integer"),
    ("devices.0.kind", KeyError, "devices[0].kind: missing"),
    ("devices", {"a": 1}, "devices: expected a list"),
    ("devices.1", "gpu", "devices[1]: expected an object"),
    ("links", [], "links: expected an object"),
    ("source", "x", "source: expected an object"),
    ("info", {"a": 1}, "info.a: expected a string"),
])
def test_malformed_json_names_the_key(path, value, words):
    with pytest.raises(ProbeError) as err:
        Topology.from_dict(edited(path, value))
    assert words in str(err.value)
    assert "topo show --json" in str(err.value)


def test_not_a_topology():
    for data in ([], {"schema": "x"}, "text"):
        with pytest.raises(TopoError, match="not a topo topology"):
            Topology.from_dict(data)


def test_a_file_saved_on_a_live_machine_is_not_this_machine(tmp_path):
    from topo.loader import load_topology

    data = json.loads((GOLDEN / "synthetic-pack2-numa2-gpu.json").read_text())
    data["source"]["root"] = "/"
    saved = tmp_path / "live.json"
    saved.write_text(json.dumps(data))
    assert Topology.from_dict(data).is_this_system
    loaded = load_topology(saved)
    assert not loaded.is_this_system and loaded.root == str(saved)
