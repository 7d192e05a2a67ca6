"""topo's hwloc XML gives lstopo the tree lstopo finds on the machine itself, on every captured
machine (with the options of its hwloc .test descriptor), the differences allowed being those the
README lists for the console form; and topo reads back every XML it writes, whatever it read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import topo
from conftest import FIXTURES, fixture_names, parse_test_file
from gen_lstopo_console import ENV, IGNORED_ENV
from lstopo_oracle import LSTOPO, comparable_verbose, needs_lstopo
from test_console_form import CONSOLE, differences
from topo.errors import ProbeError
from topo.probes.hwloc_xml import parse_hwloc_xml
from topo.views.console import Options, render_console
from topo.views.hwloc_xml import to_xml

BRIDGE_FUNCTION = re.compile(r"PCI \S+ \((HostBridge|ISABridge|Bridge)\)")
DESCRIPTORS = [n for n in fixture_names() if (parse_test_file(n)["source"] or "").endswith(".tar.bz2")]


def run_lstopo(args: list[str], env: dict[str, str] | None = None) -> list[str]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", **(env or {})}
    return subprocess.run([LSTOPO, *args], env=full, capture_output=True, text=True, timeout=120,
                          check=True).stdout.splitlines()


def xml_differences(machine: str, suffix: str, ours: list[str], theirs: list[str]) -> list[str] | None:
    if machine == "2pa-pcidomain32bits":
        # As in the console form, Debian's hwloc drops function 10000:00:04.0; reading the XML it
        # drops its host bridge too and hangs the disk from the Package the bridge was in.
        assert sum('Block "vda"' in x for x in ours) == sum('Block "vda"' in x for x in theirs) == 1
        assert ours[:10] == theirs[:10]
        return None
    if suffix == "-whole-io":  # the console form's --whole-io difference, with the machine's own
        theirs = [x for x in theirs if not BRIDGE_FUNCTION.search(x)]
    return differences(machine, "", ours, theirs)


@needs_lstopo
@pytest.mark.parametrize("name", DESCRIPTORS)
def test_lstopo_reads_topo_xml_as_the_tree_it_finds_on_the_machine(hwloc_roots, tmp_path, name):
    info = parse_test_file(name)
    machine = info["source"].removesuffix(".tar.bz2")
    options = [o for o in info["options"].split() if o != "-"]
    root = hwloc_roots.root(info["source"])
    whole = "--whole-io" in options
    path = tmp_path / "machine.xml"
    path.write_text(to_xml(topo.discover(root).io_view("whole" if whole else "important")))
    ours = run_lstopo(["-i", str(path), *options])
    if options and options != ["--whole-io"]:
        env = {k: v for k, v in info["env"].items() if k not in IGNORED_ENV}
        theirs = run_lstopo(options, {"HWLOC_FSROOT": str(root), "HWLOC_COMPONENTS": "linux,stop", **ENV, **env})
    else:
        theirs = (CONSOLE / f"{machine}{'-whole-io' if whole and machine.startswith('40intel') else ''}.txt"
                  ).read_text().splitlines()
        if whole and not machine.startswith("40intel"):
            theirs = run_lstopo(options, {"HWLOC_FSROOT": str(root), "HWLOC_COMPONENTS": "linux,stop", **ENV})
    if "-v" in options:  # topo's XML carries topo's infos, not hwloc's
        ours = comparable_verbose([x for x in ours if not x.startswith("assuming `")])  # lstopo -v -i says it
        theirs = comparable_verbose(theirs)
    expected = xml_differences(machine, "-whole-io" if whole else "", ours, theirs)
    if expected is not None:
        assert ours == expected


def test_groups_carry_hwlocs_kinds_and_no_subtype(hwloc_roots):
    """Groups by NUMA locality and by distance are hwloc's memory (1001) and distance (900) kinds,
    a Group of CPU-less nodes has no CPUs, and none carries a subtype lstopo would print."""
    xml = ET.fromstring(to_xml(topo.discover(hwloc_roots.root("128ia64-17n4s2c.tar.bz2"))))
    groups = [g for g in xml.iter("object") if g.get("type") == "Group"]
    assert {g.get("kind") for g in groups} == {"1001"} and not any(g.get("subtype") for g in groups)
    cpuless = [g for g in groups if g.get("cpuset") == "0x0"]
    assert [n.get("os_index") for g in cpuless for n in g.iter("object") if n.get("type") == "NUMANode"] == ["16"]
    distance = ET.fromstring(to_xml(topo.discover(hwloc_roots.root("16ia64-8n2s.tar.bz2"))))
    assert {g.get("kind") for g in distance.iter("object") if g.get("type") == "Group"} == {"900", "1001"}


def test_numa_node_of_a_single_package_machine_hangs_from_the_package(hwloc_roots):
    xml = ET.fromstring(to_xml(topo.discover(hwloc_roots.root("2arm-2c.tar.bz2"))))
    package = next(o for o in xml.iter("object") if o.get("type") == "Package")
    assert [o.get("type") for o in package.findall("object")][0] == "NUMANode"


# ---- topo reads back what it writes ----------------------------------------------------------
V1 = (FIXTURES / "hwloc-v1" / "16ia64-8n2s.xml").read_text()
V1_ATTRIBUTES = sorted({(i, name) for i, el in enumerate(ET.fromstring(V1).iter()) for name in el.attrib})
VALUES = st.one_of(st.text(max_size=8), st.sampled_from(
    ["0", "1", "-1", "3", "0x0", "0x1", "0x00000003,0x0", "99999999999", "1000", "1001", "900", "Cache", "Group",
     "NUMANode", "Socket", "PU", "Core", "Misc", "-0.5", "\x00", "\x1b", "\ufffe"]))


def _v1_without(predicate) -> str:
    """The v1 fixture without the elements (and what they hold) `predicate` picks."""
    root = ET.fromstring(V1)
    for parent in list(root.iter()):
        for child in [c for c in parent if predicate(c)]:
            parent.remove(child)
    return ET.tostring(root, encoding="unicode")


def test_group_of_cpus_without_pus_or_of_an_objects_cpus_reads_back_equal():
    """As hwloc loads an XML: a Group's CPUs are those of the PUs it holds (NUMA node 1 and its PUs
    2-3 removed: Group 0x000000ff is 0-1,4-7), and a Group with the CPUs of another object
    (PU 3's Socket removed: Group 0x0000000c holds PU 2 alone) merges into it
    (hwloc__insert_try_merge_group). Either way
    the model is what topo's XML of it reads back as."""
    for text, groups in ((_v1_without(lambda e: e.get("os_index") == "1" and e.get("type") == "NUMANode"),
                          {"0-1,4-7", "0-1", "4-5", "6-7"}),
                         (_v1_without(lambda e: e.get("type") == "Socket" and e.get("cpuset") == "0x00000008"),
                          {"0-2,4-7", "0-1", "4-5", "6-7"})):
        t = parse_hwloc_xml(text, "mutated.xml")
        assert {str(g.cpuset) for g in t.groups if g.cpuset <= topo.CpuSet.parse("0-7")} == groups
        assert parse_hwloc_xml(to_xml(t), "topo.xml").groups == t.groups


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.sampled_from(V1_ATTRIBUTES), VALUES), min_size=1, max_size=4),
       drop=st.integers(min_value=0, max_value=400))
def test_mutated_v1_xml_read_is_written_back_readable(edits, drop):
    root = ET.fromstring(V1)
    elements = list(root.iter())
    for (i, name), value in edits:
        elements[i].set(name, value)
    if drop < len(elements):
        parent = next((p for p in root.iter() if elements[drop] in list(p)), None)
        if parent is not None:
            parent.remove(elements[drop])
    try:
        t = parse_hwloc_xml(ET.tostring(root, encoding="unicode"), "mutated.xml")
    except ProbeError:
        return  # refused with a message: fine
    back = parse_hwloc_xml(to_xml(t), "topo.xml")
    assert back.pus == t.pus and [n.os_index for n in back.numa_nodes] == [n.os_index for n in t.numa_nodes]


# ---- a GPU known from NVML: the OS devices of hwloc's CUDA and NVML components ----------------
sys.path.insert(0, str(Path(__file__).parent / "fakes"))
import fake_pynvml  # noqa: E402


@pytest.fixture
def nvml_h100(tmp_path, monkeypatch):
    """The DGX H100 of tests/machines.py with its 8 GPUs reported by a fake NVML."""
    import machines

    root = machines.build(machines.dgx_h100(), tmp_path / "h100")
    fake_pynvml.load({"gpus": [{"busid": b, "uuid": f"GPU-{i}aaa", "name": "NVIDIA H100 80GB HBM3",
                                "node_cpus": "0-55,112-167" if i < 4 else "56-111,168-223"}
                               for i, b in enumerate(machines.H100_BUSIDS)]})
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    return root


def test_gpu_known_from_nvml_shows_hwlocs_cuda_and_nvml_os_devices(nvml_h100):
    """As lstopo with hwloc's CUDA and NVML components: below the GPU's function CUDA's OS device,
    then NVML's (CUDA's component runs first), named by NVML's index, with their infos in -v and
    in the XML; topo reads its XML back to the same tree and the same GPUs."""
    t = topo.discover(nvml_h100, live_probes=True)
    console = render_console(t.io_view()).splitlines()
    at = console.index("    HostBridge") + 1
    assert console[at:at + 3] == ["      PCI 18:00.0 (3D)", '        CoProc(CUDA) "cuda0"', '        GPU(NVML) "nvml0"']
    assert sum('"nvml' in x for x in console) == sum('"cuda' in x for x in console) == 8
    verbose = render_console(t.io_view(), Options(verbose=2)).splitlines()
    model = 'GPUVendor="NVIDIA Corporation" GPUModel="NVIDIA H100 80GB HBM3"'
    assert f'        Co-Processor(CUDA) L#0 (Backend=CUDA {model}) "cuda0"' in verbose
    assert f'        GPU(NVML) L#1 (Backend=NVML {model} NVIDIAUUID=GPU-0aaa) "nvml0"' in verbose
    xml = to_xml(t.io_view())
    nvml0 = next(o for o in ET.fromstring(xml).iter("object") if o.get("name") == "nvml0")
    assert (nvml0.get("type"), nvml0.get("subtype"), nvml0.get("osdev_type")) == ("OSDev", "NVML", "1")
    assert [(i.get("name"), i.get("value")) for i in nvml0.findall("info")][:4] == [
        ("Backend", "NVML"), ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", "NVIDIA H100 80GB HBM3"),
        ("NVIDIAUUID", "GPU-0aaa")]
    back = parse_hwloc_xml(xml, "h100.xml")
    assert to_xml(back.io_view()) == xml
    assert render_console(back.io_view()).splitlines() == console
    assert [(d.index, d.busid, d.name, d.uuid) for d in back.devices if d.kind == "gpu"] == [
        (d.index, d.busid, d.name, d.uuid) for d in t.devices if d.kind == "gpu"]
    # an export made without hwloc's CUDA component: no CUDA device is made up
    tree = ET.fromstring(xml)
    for function in tree.iter("object"):
        for osdev in [o for o in function.findall("object") if o.get("subtype") == "CUDA"]:
            function.remove(osdev)
    lines = render_console(parse_hwloc_xml(ET.tostring(tree, encoding="unicode")).io_view()).splitlines()
    assert lines == [x for x in console if "CUDA" not in x]


def test_gpu_seen_in_sysfs_alone_has_no_cuda_or_nvml_os_device(nvml_h100):
    t = topo.discover(nvml_h100, probes=())
    assert not [x for x in render_console(t.io_view()).splitlines() if "CUDA" in x or "NVML" in x]


@needs_lstopo
def test_lstopo_prints_the_gpus_os_devices_of_topo_xml_as_topo(nvml_h100, tmp_path):
    t = topo.discover(nvml_h100, live_probes=True).io_view()
    path = tmp_path / "h100.xml"
    path.write_text(to_xml(t))
    assert run_lstopo(["-i", str(path)]) == render_console(t).splitlines()
    verbose = comparable_verbose([x for x in run_lstopo(["-i", str(path), "-v"]) if not x.startswith("assuming `")])
    assert [x for x in verbose if "(CUDA)" in x or "(NVML)" in x] == [
        x for x in comparable_verbose(render_console(t, Options(verbose=2)).splitlines())
        if "(CUDA)" in x or "(NVML)" in x]
