"""Intel Gaudi (PCI vendor 0x1da3) as devices from sysfs alone: numbered by the module ids the
habanalabs driver writes in each function's `module_id` (what HABANA_VISIBLE_MODULES names), bus
order without them, and planned next to its node. Generated root: an HLS-2-like host, 2 packages,
4 Gaudi2 functions whose module ids are not their bus order."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sysfs_builder import Machine, Pci, build
from topo.cli import main
from topo.discovery import discover
from topo.errors import UsageError
from topo.visible import visible_devices

BUSES = ["0000:19:00.0", "0000:1a:00.0", "0000:b3:00.0", "0000:b4:00.0"]
MODULES = [2, 0, 3, 1]  # module_id of BUSES[i]


def gaudi(tmp_path, module_ids=True):
    pci = [Pci(b, "0x120000", vendor="0x1da3", device="0x1020", numa_node=i // 2,
               local_cpulist="0-3" if i < 2 else "4-7") for i, b in enumerate(BUSES)]
    root = build(tmp_path, Machine(packages=2, cores=4, pci=pci))
    if module_ids:
        for bus, module in zip(BUSES, MODULES):
            (root / "sys/bus/pci/devices" / bus / "module_id").write_text(f"{module}\n")
    return root


def test_gaudis_are_numbered_by_module_id(tmp_path):
    t = discover(gaudi(tmp_path))
    found = [(d.kind, d.vendor, d.index, d.busid, d.numa_node, str(d.local_cpus)) for d in t.devices]
    assert sorted(found, key=lambda d: d[3]) == [("accel", "habana", m, b, i // 2, "0-3" if i < 2 else "4-7")
                                                 for i, (b, m) in enumerate(zip(BUSES, MODULES))]
    assert t.probes["habanalabs"] == "ok: 4 Gaudis by module id"
    # local ranks take the listed modules by id, as the Habana runtime acquires them
    assert [d.busid for d in visible_devices(t, env={"HABANA_VISIBLE_MODULES": "3,1"})] == [BUSES[3], BUSES[2]]
    assert [d.index for d in visible_devices(t, env={})] == [0, 1, 2, 3]


@pytest.mark.parametrize("spec, message", [
    ("0,x", "HABANA_VISIBLE_MODULES entry 'x' is not a Gaudi module id"),
    ("1,1", "HABANA_VISIBLE_MODULES=1,1 names a Gaudi module twice"),
    ("7", "HABANA_VISIBLE_MODULES=7 names Gaudi module 7, but this machine's Gaudi modules are 0,1,2,3"),
])
def test_habana_visible_modules_errors(tmp_path, spec, message):
    t = discover(gaudi(tmp_path))
    with pytest.raises(UsageError, match=message):
        visible_devices(t, env={"HABANA_VISIBLE_MODULES": spec})


def test_without_module_ids_bus_order(tmp_path):
    t = discover(gaudi(tmp_path, module_ids=False))
    assert [d.busid for d in sorted(t.devices, key=lambda d: d.index)] == BUSES
    assert t.probes["habanalabs"].startswith("unused: 4 Gaudis without distinct module_id files")


def test_topo_plan_places_each_module_on_its_node(tmp_path):
    result = CliRunner().invoke(main, ["plan", "--root", str(gaudi(tmp_path)), "--mode", "node"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    # modules 2 and 0 sit on node 0 (CPUs 0-3), modules 3 and 1 on node 1 (CPUs 4-7)
    assert plan["bind_cpu"] == {"device0": {"main": "0-3"}, "device1": {"main": "4-7"},
                                "device2": {"main": "0-3"}, "device3": {"main": "4-7"}}
