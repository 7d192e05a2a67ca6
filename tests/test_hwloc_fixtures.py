"""Every captured machine of hwloc's development set, checked against what lstopo found on it.

`expected/NAME.json` reduces lstopo's output to a canonical summary; `checked` lists the keys that
are meaningful for that fixture. We compare `topo show --json` (the library's `to_dict`) with it,
key by key, as multisets: object order is not part of the contract.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

import topo
from topo.cli import main as cli
from topo.cpuset import CpuSet

from conftest import SYSFS, fixture_names, parse_test_file
from lstopo_oracle import LSTOPO, answer, captured_tarballs

# hwloc's "important" PCI filter (hwloc_filter_check_pcidev_subtype_important): what lstopo shows
# by default. Bridges never reach our list.
_IMPORTANT_BASES = {"00", "01", "02", "03", "0b", "12"}
_IMPORTANT_CLASSES = {"0c04", "0c06", "0502"}


def _important(class_id: str) -> bool:
    return class_id[:2] in _IMPORTANT_BASES or class_id in _IMPORTANT_CLASSES


def _close(actual: int, expected: int, tolerance: int) -> bool:
    return abs(actual - expected) <= tolerance


def _parent_cpuset(ours: dict, local: str) -> str:
    """The CPUs of the smallest object holding a device's local CPUs: what lstopo reports as the
    device's locality (it hangs the device under that object)."""
    want = CpuSet.parse(local)
    best = CpuSet.parse(ours["pus"])
    for key in ("packages", "dies", "clusters", "groups", "caches", "cores"):
        for obj in ours[key]:
            s = CpuSet.parse(obj["cpuset"])
            if want <= s and s.weight() < best.weight():
                best = s
    return best.to_list()


def _load(name: str) -> dict:
    return json.loads((SYSFS / "expected" / f"{name}.json").read_text())


def _ours(hwloc_roots, name: str, expected: dict) -> dict:
    root = hwloc_roots.for_fixture(name)
    topology = topo.discover(root, include_disallowed=expected["view"]["include_disallowed"])
    topology.check()
    return topology.to_dict()


@pytest.mark.parametrize("name", fixture_names())
def test_fixture_matches_lstopo(hwloc_roots, name):
    expected = _load(name)
    ours = _ours(hwloc_roots, name, expected)
    test = parse_test_file(name)
    view = expected["view"]
    problems: list[str] = []

    def compare(key, mine, theirs):
        if Counter(mine) != Counter(theirs):
            missing = list((Counter(theirs) - Counter(mine)).elements())
            extra = list((Counter(mine) - Counter(theirs)).elements())
            problems.append(f"{key}: missing {missing[:6]} extra {extra[:6]}")

    for key in ("pus", "allowed_pus", "complete_pus"):
        if key in expected["checked"] and ours[key] != expected[key]:
            problems.append(f"{key}: {ours[key]!r} != lstopo's {expected[key]!r}")

    if "packages" in expected["checked"]:
        compare("packages", [(p["os_index"], p["cpuset"]) for p in ours["packages"]],
                [(p["os_index"], p["cpuset"]) for p in expected["packages"]])

    if "numa_nodes" in expected["checked"]:
        # hwloc hides POWER GPU memory nodes unless HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1; we always
        # show them, as memory-only nodes.
        hidden_gpu = set(expected.get("features", {}).get("gpu_numa_nodes", [])) - {
            n["os_index"] for n in expected["numa_nodes"]
        }
        mine = {n["os_index"]: n for n in ours["numa_nodes"]}
        for node in expected["numa_nodes"]:
            got = mine.pop(node["os_index"], None)
            if got is None:
                problems.append(f"numa node {node['os_index']} missing")
                continue
            if got["locality"] != node["cpuset"]:
                problems.append(f"numa {node['os_index']} locality {got['locality']!r} != {node['cpuset']!r}")
            if got["memory_only"] != node["memory_only"]:
                problems.append(f"numa {node['os_index']} memory_only {got['memory_only']} != {node['memory_only']}")
            if node["local_memory"] is not None and not _close(got["local_memory"], node["local_memory"], node.get("local_memory_tolerance", 0)):
                problems.append(f"numa {node['os_index']} memory {got['local_memory']} != {node['local_memory']}")
            if node.get("subtype") and got["subtype"] != node["subtype"]:
                problems.append(f"numa {node['os_index']} subtype {got['subtype']} != {node['subtype']}")
        for os_index, got in mine.items():
            if not (os_index in hidden_gpu and got["memory_only"]):
                problems.append(f"numa node {os_index} is extra")

    if "cores" in expected["checked"]:
        compare("cores", [(c["os_index"], c["package"], c["cpuset"]) for c in ours["cores"]],
                [(c["os_index"], c["package"], c["cpuset"]) for c in expected["cores"]])

    if "caches" in expected["checked"] and view["caches"]:
        mine = [c for c in ours["caches"] if view["icaches"] or c["type"] != "instruction"]
        theirs = expected["caches"]
        tolerance = max([c.get("size_tolerance", 0) for c in theirs] + [0])
        compare("caches", [(c["level"], c["type"], c["cpuset"]) for c in mine],
                [(c["level"], c["type"], c["cpuset"]) for c in theirs])
        sizes_mine = sorted(c["size"] for c in mine)
        sizes_theirs = sorted(c["size"] for c in theirs)
        if len(sizes_mine) == len(sizes_theirs) and not all(
            _close(a, b, tolerance) for a, b in zip(sizes_mine, sizes_theirs)
        ):
            problems.append(f"cache sizes {sizes_mine[:8]} != {sizes_theirs[:8]}")

    if "memory_side_caches" in expected["checked"]:
        compare("memory_side_caches", [(tuple(m["numa_nodes"]), m["cpuset"]) for m in ours["memory_side_caches"]],
                [(tuple(m["numa_nodes"]), m["cpuset"]) for m in expected["memory_side_caches"]])

    for key in ("dies", "clusters"):
        if key in expected["checked"]:
            compare(key, [(d["os_index"], d["cpuset"]) for d in ours[key]],
                    [(d["os_index"], d["cpuset"]) for d in expected[key]])

    if "groups" in expected["checked"]:
        gpu_nodes = set(expected.get("features", {}).get("gpu_numa_nodes", []))
        # Groups hwloc built from HWLOC_PCI_LOCALITY (kind "io") come from the variable, not sysfs;
        # groups holding only GPU memory nodes exist only because we show those nodes.
        compare("groups",
                [g["cpuset"] for g in ours["groups"] if not set(g["numa_nodes"]) <= gpu_nodes or not g["numa_nodes"]],
                [g["cpuset"] for g in expected["groups"]
                 if not (g.get("kind") == "io" and "HWLOC_PCI_LOCALITY" in test["env"])])

    if "pci_devices" in expected["checked"] and view["io"] != "none":
        mine = [d for d in ours["pci_devices"] if view["io"] == "all" or _important(d["class"])]
        theirs = expected["pci_devices"]
        compare("pci_devices", [(d["busid"], d["class"], d["id"]) for d in mine],
                [(d["busid"], d["class"], d["id"]) for d in theirs])
        if "HWLOC_PCI_LOCALITY" not in test["env"]:
            # With HWLOC_PCI_LOCALITY hwloc takes locality from the variable, not from sysfs:
            # only what sysfs determines (the device list) is compared then.
            where = {d["busid"]: _parent_cpuset(ours, d["local_cpus"]) for d in mine}
            for d in theirs:
                got = where.get(d["busid"])
                if got is not None and got != d["locality"]["cpuset"]:
                    problems.append(f"pci {d['busid']} locality {got!r} != {d['locality']['cpuset']!r}")

    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


def test_show_json_cli_matches_library(hwloc_roots):
    """The CLI's --json is exactly the library's to_dict (one fixture with a cgroup restriction)."""
    name = "32amd64-4s2n4c-cgroup2"
    root = hwloc_roots.for_fixture(name)
    result = CliRunner().invoke(cli, ["show", "--json", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == topo.discover(root).to_dict()
    assert json.loads(result.output)["pus"] == "0-5"


def test_include_disallowed_shows_whole_machine(hwloc_roots):
    root = hwloc_roots.for_fixture("32amd64-4s2n4c-cgroup2")
    restricted = topo.discover(root)
    full = topo.discover(root, include_disallowed=True)
    assert restricted.pus == CpuSet.parse("0-5") == restricted.allowed_pus
    assert full.pus == CpuSet.parse("0-31")
    assert full.allowed_pus == CpuSet.parse("0-5")
    assert [n.os_index for n in full.numa_nodes] == list(range(8))
    assert [n.os_index for n in restricted.numa_nodes] == list(range(6))
    full.check()


def test_pci_function_sits_at_its_host_bridge_not_its_own_file(hwloc_roots):
    # 0000:00:02.0 (NVMe) says CPUs 0-3 in its own local_cpus; the first function on its root bus
    # (0000:00:00.0) says 0-7, and lstopo puts the NVMe in package 0 (0-7) with the whole bus.
    root = hwloc_roots.for_fixture("32em64t-2n8c+dax+nvme+mic+dimms")
    assert (root / "sys/bus/pci/devices/0000:00:02.0/local_cpus").read_text().strip().endswith(",0000000f")
    local = {d.busid: d.local_cpus.to_list() for d in topo.discover(root).pci_devices}
    assert local["0000:00:02.0"] == "0-7"


@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (Debian package hwloc) is not installed")
def test_kept_gpu_memory_nodes_sit_where_lstopo_keeps_them(hwloc_roots):
    # POWER9 + V100: six GPU memory nodes. topo always shows them; lstopo does so with
    # HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1, each at its GPU's local CPUs.
    root = hwloc_roots.for_fixture("nvidiagpunumanodes")
    ours = sorted((n.os_index, n.locality.to_list(), n.subtype) for n in topo.discover(root).numa_nodes)
    theirs = sorted(answer(root, env={"HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES": "1"}).numa_nodes)
    assert [n for n in ours if n[2] == "GPUMemory"] and ours == theirs


@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (Debian package hwloc) is not installed")
@pytest.mark.parametrize("name", captured_tarballs())
def test_captured_root_matches_lstopo_run_here(hwloc_roots, name):
    # The installed hwloc on the raw root, with topo's defaults (GPU memory nodes kept, no .test
    # options): packages, cores, NUMA nodes and the object each PCI device hangs from.
    root = hwloc_roots.for_fixture(name)
    ours = topo.discover(root).to_dict()
    theirs = answer(root, env={"HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES": "1"})
    assert Counter((p["os_index"], p["cpuset"]) for p in ours["packages"]) == Counter(theirs.packages)
    assert Counter((c["os_index"], c["cpuset"]) for c in ours["cores"]) == Counter(theirs.cores)
    assert Counter((n["os_index"], n["locality"], n["subtype"]) for n in ours["numa_nodes"]) == Counter(theirs.numa_nodes)
    where = {d["busid"]: _parent_cpuset(ours, d["local_cpus"]) for d in ours["pci_devices"]}
    assert {b: s for b, s in theirs.pci.items() if b in where} == {b: where[b] for b in theirs.pci if b in where}
