"""hwloc XML in: every XML target of hwloc's dev set reads back to what discovering its sysfs root
gives, hwloc v1 exports too, and `topo show --from` / `topo.load_topology` accept XML and JSON."""

from __future__ import annotations

import json
import subprocess

import pytest
from click.testing import CliRunner

import topo
from conftest import SYSFS, parse_test_file
from lstopo_oracle import LSTOPO
from topo_cli import main as cli
from topo.probes.hwloc_xml import parse_bitmap, parse_hwloc_xml

XML_TARGETS = sorted(p.stem for p in SYSFS.glob("*.xml"))


def summary(t: topo.Topology) -> dict:
    """What must agree: counts and cpusets of packages, NUMA nodes, cores and PUs."""
    return {
        "pus": t.pus.to_list(),
        "allowed_pus": t.allowed_pus.to_list(),
        "packages": sorted(p.cpuset.to_list() for p in t.packages),
        "numa_nodes": [(n.os_index, n.cpuset.to_list(), n.memory_only, n.local_memory) for n in t.numa_nodes],
        "cores": sorted(c.cpuset.to_list() for c in t.cores),
        "data_caches": sorted((c.level, c.cpuset.to_list(), c.size) for c in t.caches if c.type != "instruction"),
        "pci": sorted((d.busid, d.class_id, d.id) for d in t.pci_devices),
    }


@pytest.mark.parametrize("name", XML_TARGETS)
def test_xml_target_matches_its_sysfs_root(hwloc_roots, name):
    xml_topology = topo.load_topology(SYSFS / f"{name}.xml")
    xml_topology.check()
    sysfs_topology = topo.discover(hwloc_roots.for_fixture(name), probes=())
    mine, theirs = summary(xml_topology), summary(sysfs_topology)
    if "--whole-io" not in parse_test_file(name)["options"]:
        mine.pop("pci"), theirs.pop("pci")  # lstopo's default export keeps only "important" PCI
    assert mine == theirs


def test_xml_devices_classified_like_sysfs(hwloc_roots):
    name = "32em64t-2n8c+dax+nvme+mic+dimms"
    from_xml = topo.load_topology(SYSFS / f"{name}.xml")
    from_sysfs = topo.discover(hwloc_roots.for_fixture(name), probes=())
    key = lambda t: [(d.kind, d.index, d.busid, d.numa_node) for d in t.devices]  # noqa: E731
    assert key(from_xml) == key(from_sysfs)
    assert [d.name for d in from_xml.devices if d.kind == "nic"] == ["eth0", "eth1", "mlx4_0"]
    assert from_xml.probes == {"hwloc-xml": "ok (hwloc v2 format)"}
    assert not from_xml.is_this_system


@pytest.mark.skipif(LSTOPO is None, reason="hwloc's lstopo not installed")
@pytest.mark.parametrize("name", ["16ia64-8n2s", "40intel64-2g2n4c+pcilocality", "8em64t-2s2ca2c"])
def test_lstopo_v1_and_v2_exports_read_back(hwloc_roots, tmp_path, name):
    """A second oracle: lstopo exports the same root in both formats; both read as our discovery."""
    root = hwloc_roots.for_fixture(name)
    ours = summary(topo.discover(root, probes=()))
    ours.pop("pci")
    for flags in ([], ["--export-xml-flags", "v1"]):
        out = tmp_path / f"{name}-{len(flags)}.xml"
        subprocess.run([LSTOPO, "--input", str(root), "--of", "xml", *flags, str(out)],
                       check=True, capture_output=True, env={"HWLOC_COMPONENTS": "linux,stop", "PATH": "/usr/bin:/bin"})
        t = topo.load_topology(out)
        t.check()
        theirs = summary(t)
        theirs.pop("pci")
        assert theirs == ours, flags
        assert t.probes["hwloc-xml"] == f"ok (hwloc v{1 if flags else 2} format)"


V1_TWO_NODES = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc.dtd">
<topology>
  <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" allowed_cpuset="0x0000000f" nodeset="0x00000003" allowed_nodeset="0x00000003">
    <distances nbobjs="2" relative_depth="1" latency_base="10.000000">
      <latency value="1.000000"/><latency value="2.100000"/><latency value="2.100000"/><latency value="1.000000"/>
    </distances>
    <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" local_memory="1073741824">
      <object type="Socket" os_index="0" cpuset="0x00000003">
        <object type="Cache" cpuset="0x00000003" cache_size="8388608" depth="3" cache_type="0">
          <object type="Core" os_index="0" cpuset="0x00000003">
            <object type="PU" os_index="0" cpuset="0x00000001"/>
            <object type="PU" os_index="1" cpuset="0x00000002"/>
          </object>
        </object>
      </object>
    </object>
    <object type="NUMANode" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c" local_memory="1073741824">
      <object type="Socket" os_index="1" cpuset="0x0000000c">
        <object type="Core" os_index="0" cpuset="0x0000000c">
          <object type="PU" os_index="2" cpuset="0x00000004"/>
          <object type="PU" os_index="3" cpuset="0x00000008"/>
        </object>
      </object>
    </object>
  </object>
</topology>
"""


def test_hwloc_v1_numa_nodes_above_sockets_and_distances():
    t = parse_hwloc_xml(V1_TWO_NODES, "two.xml")
    t.check()
    assert [(n.os_index, n.cpuset.to_list(), dict(n.distances)) for n in t.numa_nodes] == [
        (0, "0-1", {0: 10, 1: 21}), (1, "2-3", {0: 21, 1: 10})]
    assert [(c.os_index, c.package, c.cpuset.to_list()) for c in t.cores] == [(0, 0, "0-1"), (0, 1, "2-3")]
    assert [(c.level, c.size) for c in t.caches] == [(3, 8 << 20)]


def test_v2_memory_child_with_subtype_owns_no_cpus():
    xml = """<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" allowed_cpuset="0x00000003" nodeset="0x00000003" allowed_nodeset="0x00000003">
    <object type="Package" os_index="0" cpuset="0x00000003">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" local_memory="100"/>
      <object type="NUMANode" os_index="1" cpuset="0x00000003" local_memory="200" subtype="GPUMemory"/>
      <object type="Core" os_index="0" cpuset="0x00000003">
        <object type="PU" os_index="0" cpuset="0x00000001"/>
        <object type="PU" os_index="1" cpuset="0x00000002"/>
      </object>
    </object>
  </object>
</topology>"""
    t = parse_hwloc_xml(xml)
    assert [(n.os_index, n.cpuset.to_list(), n.memory_only, n.locality.to_list(), n.subtype) for n in t.numa_nodes] == [
        (0, "0-1", False, "0-1", None), (1, "", True, "0-1", "GPUMemory")]


def test_bitmaps():
    assert parse_bitmap("0x00000001,0x00000003").to_list() == "0-1,32"
    assert parse_bitmap("0xf...f,0x00000003").to_list() == "0-1"  # infinite upper part dropped
    assert parse_bitmap("").to_list() == ""


def test_show_from_xml_and_json_roundtrip(tmp_path):
    runner = CliRunner()
    xml = SYSFS / "32em64t-2n8c+dax+nvme+mic+dimms.xml"
    first = runner.invoke(cli, ["show", "--from", str(xml), "--json"], catch_exceptions=False)
    assert first.exit_code == 0
    saved = tmp_path / "machine.json"
    saved.write_text(first.output)
    second = runner.invoke(cli, ["show", "--from", str(saved), "--json"], catch_exceptions=False)
    assert json.loads(second.output) == json.loads(first.output)
    text = runner.invoke(cli, ["show", "--from", str(xml)]).output
    assert "2 packages, 2 NUMA nodes, 16 cores, 16 PUs" in text


@pytest.mark.parametrize("content, message", [
    ("hello", "neither topo JSON nor hwloc XML"),
    ("<topology><object type='Machine'", "not XML"),
    ("<html></html>", "not an hwloc topology (root element <html>)"),
    ("{\"schema\": \"other\"}", "not a topo topology"),
    ("{nope", "not valid JSON"),
])
def test_bad_files_give_one_line_errors(tmp_path, content, message):
    bad = tmp_path / "bad.txt"
    bad.write_text(content)
    result = CliRunner().invoke(cli, ["show", "--from", str(bad)])
    assert result.exit_code == 2  # a file the user named is input
    assert result.output.startswith("topo: error: ") and message in result.output
    assert result.output.count("\n") == 1


def test_from_and_root_are_exclusive(tmp_path):
    result = CliRunner().invoke(cli, ["show", "--from", str(SYSFS / "2i386-2c-nohugepage.xml"), "--root", str(tmp_path)])
    assert result.exit_code == 2 and "give one of them" in result.output


def test_gpu_identity_from_hwloc_nvml_osdevs():
    """An export made where hwloc's NVML backend ran names each GPU's NVML index, model and UUID."""
    xml = """<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001">
    <object type="Package" os_index="0" cpuset="0x00000003">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" local_memory="100"/>
      <object type="Core" os_index="0" cpuset="0x00000003">
        <object type="PU" os_index="0" cpuset="0x00000001"/>
        <object type="PU" os_index="1" cpuset="0x00000002"/>
      </object>
      <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[00-02]">
        <object type="PCIDev" pci_busid="0000:01:00.0" pci_type="0302 [10de:20b2] [10de:1463] a1">
          <object type="OSDev" name="card1" osdev_type="0"/>
          <object type="OSDev" name="nvml1" subtype="NVML" osdev_type="0">
            <info name="GPUModel" value="NVIDIA A100-SXM4-80GB"/>
            <info name="NVIDIAUUID" value="GPU-0d2a7f3e-0000-1111-2222-333344445555"/>
          </object>
        </object>
        <object type="PCIDev" pci_busid="0000:02:00.0" pci_type="0302 [10de:20b2] [10de:1463] a1">
          <object type="OSDev" name="nvml0" subtype="NVML" osdev_type="0">
            <info name="NVIDIAUUID" value="GPU-99990000-0000-1111-2222-333344445555"/>
          </object>
        </object>
      </object>
    </object>
  </object>
</topology>"""
    t = parse_hwloc_xml(xml, "gpus.xml")
    assert [(d.index, d.busid, d.name, d.uuid[:8], d.numa_node, d.local_cpus.to_list()) for d in t.devices] == [
        (0, "0000:02:00.0", None, "GPU-9999", 0, "0-1"),
        (1, "0000:01:00.0", "NVIDIA A100-SXM4-80GB", "GPU-0d2a", 0, "0-1")]

    from topo.visible import visible_devices

    assert [d.index for d in visible_devices(t, env={"CUDA_VISIBLE_DEVICES": "GPU-0d2a"})] == [1]
