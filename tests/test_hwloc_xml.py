"""hwloc XML in: every XML target of hwloc's dev set reads back to what discovering its sysfs root
gives, hwloc v1 exports too, and `topo show --from` / `topo.load_topology` accept XML and JSON."""

from __future__ import annotations

import json
import re
import os
import subprocess
from dataclasses import fields

import pytest
from click.testing import CliRunner

import topo
from conftest import SYSFS, parse_test_file
from lstopo_oracle import LSTOPO, captured_tarballs, needs_lstopo
from topo.cli import main as cli
from topo.cpuset import CpuSet
from topo.tree import bitmap
from topo.views.hwloc_xml import to_xml
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
    text = runner.invoke(cli, ["show", "--from", str(xml), "--long"]).output
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


# ---- every captured machine, both ways ---------------------------------------------------------


def _lstopo(*args: str, root=None) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HWLOC_COMPONENTS": "linux,stop",
           "HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES": "1"}
    if root is not None:
        env["HWLOC_FSROOT"] = str(root)
    return subprocess.run([LSTOPO, "--whole-io", *args], env=env, capture_output=True, text=True, timeout=120,
                          check=True).stdout


def _big_domain_names(t: topo.Topology) -> set[str]:
    """OS devices below PCI functions whose domain has more than 16 bits (hwloc attaches them by
    NUMA node instead)."""
    return {o.name for o in t.os_devices if o.parent and int(o.parent.split(":")[0], 16) > 0xFFFF}


def hwloc_view(t: topo.Topology, *, v1: bool = False, drop: set[str] = frozenset()) -> dict:
    """What an hwloc XML carries, field by field. Left out: which node owns which CPUs (hwloc's XML
    gives a node only its locality; topo apportions them), a single node's distance to itself (hwloc
    keeps no 1x1 matrix), PCI domains above 16 bits (Debian's hwloc is built without them). v1
    exports also lose OS device subtypes and write a node without locality at the machine."""
    small = [d for d in t.pci_devices if int(d.busid.split(":")[0], 16) <= 0xFFFF]
    out = {
        "pus": t.pus.to_list(),
        "allowed_pus": t.allowed_pus.to_list(),
        "complete_pus": t.complete_pus.to_list(),
        "packages": sorted((p.os_index, p.cpuset.to_list(), p.model) for p in t.packages if p.cpuset),
        "dies": sorted((d.os_index, d.cpuset.to_list()) for d in t.dies),
        "numa_nodes": sorted((n.os_index, n.local_memory, n.subtype, n.locality.to_list()) for n in t.numa_nodes),
        "distances": sorted((n.os_index, sorted(n.distances.items())) for n in t.numa_nodes)
        if len(t.numa_nodes) > 1 else [],
        "cores": sorted((c.os_index, c.cpuset.to_list()) for c in t.cores),
        "caches": sorted((c.level, c.type, c.size, c.cpuset.to_list(), c.line_size, c.ways)
                         for c in t.caches if c.cpuset),
        "memory_side_caches": sorted((m.size, m.numa_nodes) for m in t.memory_side_caches),
        "pci_devices": sorted((d.busid, d.class_id, d.id, d.parent, d.local_cpus.to_list()) for d in small),
        "pci_bridges": sorted((b.id, b.parent, b.domain, b.secondary_bus, b.subordinate_bus, b.local_cpus.to_list(),
                               b.class_id, b.vendor_id, b.device_id) for b in t.pci_bridges if b.domain <= 0xFFFF),
        "os_devices": sorted((o.name, o.type, o.parent, o.local_cpus.to_list(), o.subtype) for o in t.os_devices
                             if o.name not in drop),
    }
    if v1:  # no Die, MemCache or subtypes in v1; the nodes it keeps are compared by the caller
        out["numa_nodes"] = [n[:2] for n in out["numa_nodes"]]
        out["os_devices"] = [o[:4] for o in out["os_devices"]]
        del out["dies"], out["memory_side_caches"], out["distances"]
    return out


def _same_fields(a: topo.Topology, b: topo.Topology) -> list[str]:
    """The fields where two topologies differ; lists compared as multisets (their order is the
    order objects were found in, not part of the model)."""
    def norm(v):
        return sorted(map(repr, v)) if isinstance(v, tuple) else v
    return [f.name for f in fields(a)
            if f.name not in ("root", "probes") and norm(getattr(a, f.name)) != norm(getattr(b, f.name))]


@pytest.mark.parametrize("name", captured_tarballs())
def test_topo_reads_its_own_xml_back_equal(hwloc_roots, name):
    original = topo.discover(hwloc_roots.for_fixture(name), probes=())
    back = parse_hwloc_xml(to_xml(original), "machine.xml")
    back.check()
    assert _same_fields(original, back) == []
    assert back.probes == {"hwloc-xml": "ok (hwloc v2 format)"} and not back.is_this_system


def test_own_xml_keeps_the_restricted_view(hwloc_roots):
    """A cgroup-restricted view (nodes whose CPUs are all disallowed, CPU-less packages) and the
    include_disallowed view both read back as they were."""
    root = hwloc_roots.for_fixture("32amd64-4s2n4c-cgroup2")
    for include in (False, True):
        original = topo.discover(root, include_disallowed=include)
        assert _same_fields(original, parse_hwloc_xml(to_xml(original))) == []


@needs_lstopo
@pytest.mark.parametrize("name", captured_tarballs())
def test_lstopo_xml_of_every_root_loads_as_discovery(hwloc_roots, name):
    """lstopo's own export of the root (v2, then v1), masks with empty words and all, reads as
    topo's discovery of the same root."""
    root = hwloc_roots.for_fixture(name)
    ours = topo.discover(root, probes=())
    for flags in ([], ["--export-xml-flags", "v1"]):
        theirs = parse_hwloc_xml(_lstopo("--of", "xml", *flags, root=root), "lstopo.xml")
        theirs.check()
        drop = _big_domain_names(ours)
        mine, got = hwloc_view(ours, v1=bool(flags), drop=drop), hwloc_view(theirs, v1=bool(flags), drop=drop)
        if flags:  # v1 has no memory children: CPU-less nodes hwloc could not place are left out
            assert set(got.pop("numa_nodes")) <= set(mine.pop("numa_nodes"))
            assert {n.os_index: n.distances for n in theirs.numa_nodes if n.distances} == {
                n.os_index: {k: v for k, v in ours.numa_node(n.os_index).distances.items() if k in n.distances}
                for n in theirs.numa_nodes if n.distances}
        assert got == mine, flags


@needs_lstopo
@pytest.mark.parametrize("name", captured_tarballs())
def test_lstopo_reads_topo_xml(hwloc_roots, tmp_path, name):
    """lstopo opens topo's XML without a warning and exports the same machine (read back by topo)."""
    root = hwloc_roots.for_fixture(name)
    ours = topo.discover(root, probes=())
    path = tmp_path / "machine.xml"
    path.write_text(to_xml(ours))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    proc = subprocess.run([LSTOPO, "-i", str(path), "--whole-io", "--of", "xml"], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    if any(int(d.busid.split(":")[0], 16) > 0xFFFF for d in ours.pci_devices):
        assert "non-16bit domain" in proc.stderr
    else:
        assert proc.stderr == ""
    drop = _big_domain_names(ours)
    assert hwloc_view(parse_hwloc_xml(proc.stdout, "lstopo.xml"), drop=drop) == hwloc_view(ours, drop=drop)
    console = subprocess.run([LSTOPO, "-i", str(path), "--whole-io"], env=env, capture_output=True, text=True,
                             timeout=120, check=True).stdout
    assert console.count("PU L#") == ours.pus.weight()
    assert len(re.findall(r"^ *NUMANode(\([A-Za-z]+\))? L#", console, re.M)) == len(ours.numa_nodes)


def test_bitmaps_with_empty_words_and_many_words():
    assert parse_bitmap("0x00000011,,0x0").to_list() == "64,68"
    assert parse_bitmap("0xffffffff,0xffffffff,,0x0").to_list() == "64-127"
    assert parse_bitmap("0x1,,,,0x3").to_list() == "0-1,128"
    s = CpuSet.parse("0-3,64,8191")
    assert parse_bitmap(bitmap(s)) == s
    assert bitmap(CpuSet.parse("")) == "0x0" and bitmap(CpuSet.parse("0-3,32")) == "0x00000001,0x0000000f"


def test_show_output_xml_writes_hwloc_v2(tmp_path):
    xml = SYSFS / "32em64t-2n8c+dax+nvme+mic+dimms.xml"
    out = tmp_path / "machine.xml"
    result = CliRunner().invoke(cli, ["show", "--from", str(xml), "--whole-io", "--output", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    assert _same_fields(topo.load_topology(xml), topo.load_topology(out)) == []


def test_hwloc_bind_binds_on_topo_xml_as_the_readme_says(tmp_path):
    """hwloc 2.9's hwloc-bind has no --input: it reads HWLOC_XMLFILE, and binds on a topology loaded
    from XML only with HWLOC_THISSYSTEM=1 (else it runs the command unbound)."""
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    assert "hwloc-bind --input" not in readme and "HWLOC_XMLFILE=FILE.xml HWLOC_THISSYSTEM=1 hwloc-bind" in readme
    hwloc_bind = os.path.join(os.path.dirname(LSTOPO), "hwloc-bind") if LSTOPO else None
    if not hwloc_bind or not os.access(hwloc_bind, os.X_OK):
        pytest.skip("hwloc-bind is not installed (apt install hwloc)")
    xml = tmp_path / "this.xml"
    xml.write_text(to_xml(topo.discover()))
    last = max(os.sched_getaffinity(0))
    env = {**os.environ, "HWLOC_XMLFILE": str(xml), "HWLOC_THISSYSTEM": "1"}
    out = subprocess.run([hwloc_bind, "--physical", f"pu:{last}", "--", "grep", "Cpus_allowed_list",
                          "/proc/self/status"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Cpus_allowed_list:", str(last)]
