"""The PCI tree and OS devices, filtered as lstopo filters them (default, --whole-io, --no-io,
--no-bridges), on hwloc's captured machines that have PCI, checked against the installed lstopo."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

import topo
from topo.probes.hwloc_xml import parse_hwloc_xml
from topo.cli import main as cli

LSTOPO = shutil.which("lstopo-no-graphics")
WITH_PCI = ["2pa-pcidomain32bits", "32em64t-2n8c+dax+nvme+mic+dimms", "40intel64-2g2n4c+pcilocality"]
MODES = {"": ("important", True), "--whole-io": ("whole", True), "--no-io": ("none", True),
         "--no-bridges": ("important", False)}


def small(busid: str | None) -> bool:
    return busid is None or int(busid.removeprefix("pci").split(":")[0], 16) <= 0xFFFF


def io(t: topo.Topology, big_names: set[str], *, localities: bool = True) -> dict:
    """The I/O objects of a topology; PCI domains above 16 bits and the OS devices below them
    (`big_names`) left out: Debian's hwloc drops such functions and places their OS devices by
    NUMA node."""
    where = (lambda s: s.to_list()) if localities else (lambda s: "")
    return {
        "pci": sorted((d.busid, d.class_id, d.id, d.parent, where(d.local_cpus)) for d in t.pci_devices
                      if small(d.busid)),
        "bridges": sorted((b.id, b.parent, b.secondary_bus, b.subordinate_bus, where(b.local_cpus))
                          for b in t.pci_bridges if small(b.id)),
        "os": sorted((o.name, o.type, o.parent if localities else "", where(o.local_cpus)) for o in t.os_devices
                     if o.name not in big_names),
    }


@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (Debian package hwloc) is not installed")
@pytest.mark.parametrize("flag", list(MODES))
@pytest.mark.parametrize("name", WITH_PCI)
def test_io_objects_as_lstopo_shows_them(hwloc_roots, name, flag):
    root = hwloc_roots.for_fixture(name)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HWLOC_FSROOT": str(root),
           "HWLOC_COMPONENTS": "linux,stop"}
    out = subprocess.run([LSTOPO, "--of", "xml", *([flag] if flag else [])], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    mode, bridges = MODES[flag]
    ours = topo.discover(root, probes=()).io_view(mode, bridges=bridges)
    # --no-bridges: lstopo asks each function's own local_cpus (topo keeps its host bridge's), and
    # an OS device below a function it so placed in a Group ends up beside it: localities and OS
    # device parents are not compared then.
    big = {o.name for o in ours.os_devices if not small(o.parent)}
    assert io(ours, big, localities=bridges) == io(parse_hwloc_xml(out, "lstopo.xml"), big, localities=bridges)


def test_default_view_keeps_what_lstopo_keeps(hwloc_roots):
    # expected from lstopo 2.9 on this machine: 7 PCI functions (NVMe, 2 Ethernet, VGA, SATA,
    # InfiniBand, co-processor) below 7 bridges; block, net and RDMA names, no DMA channel.
    t = topo.discover(hwloc_roots.for_fixture("32em64t-2n8c+dax+nvme+mic+dimms"), probes=())
    view = t.io_view()
    assert sorted(d.class_id for d in view.pci_devices) == ["0106", "0108", "0200", "0200", "0280", "0300", "0b40"]
    assert len(view.pci_bridges) == 7 and sum(b.is_host for b in view.pci_bridges) == 2
    assert {o.type for o in view.os_devices} == {"block", "net", "openfabrics"}
    assert {o.name: o.parent for o in view.os_devices}["mlx4_0"] == "0000:82:00.0"
    assert view.devices == t.devices  # what planners use is not filtered
    assert len(t.io_view("whole").pci_devices) == len(t.pci_devices) == 126
    assert t.io_view("none").pci_devices == t.io_view("none").os_devices == ()
    with pytest.raises(ValueError, match="io must be"):
        t.io_view("all")


def test_show_io_flags(hwloc_roots):
    root = str(hwloc_roots.for_fixture("32em64t-2n8c+dax+nvme+mic+dimms"))
    runner = CliRunner()

    def shown(*flags: str) -> dict:
        result = runner.invoke(cli, ["show", "--root", root, "--json", *flags], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    default, whole, none, flat = shown(), shown("--whole-io"), shown("--no-io"), shown("--no-bridges")
    assert (len(default["pci_devices"]), len(whole["pci_devices"]), len(none["pci_devices"])) == (7, 126, 0)
    assert none["pci_bridges"] == none["os_devices"] == [] and none["devices"] == default["devices"]
    assert flat["pci_bridges"] == [] and all(d["parent"] is None for d in flat["pci_devices"])
    assert shown("--whole-io", "--no-io") == none and shown("--no-io", "--whole-io") == whole  # the last wins, as in lstopo

