"""The generated AMD MI300X (KFD topology) and Intel Gaudi (habanalabs module ids) machines as lstopo
sees them, and planned next to each accelerator in every mode: each device's process gets CPUs of
the node its PCI function hangs off, never another's, whatever order the runtime numbers them in."""

from __future__ import annotations

import pytest

from lstopo_oracle import lstopo_of, needs_lstopo, topo_console
from test_amd_kfd import mi300x
from test_gaudi import gaudi
from topo import planners
from topo.discovery import discover

MACHINES = {"mi300x": mi300x, "gaudi": gaudi}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    return {name: make(tmp_path_factory.mktemp(name)) for name, make in MACHINES.items()}


@needs_lstopo
@pytest.mark.parametrize("name", MACHINES)
def test_show_is_lstopos(roots, name):
    assert topo_console(roots[name]) == lstopo_of(roots[name])


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("mode", planners.modes())
def test_each_device_is_planned_on_its_node(roots, name, mode):
    t = discover(roots[name])
    accelerators = {d.index: d for d in t.devices if d.kind in ("gpu", "accel")}
    assert len(accelerators) == 4
    for p in planners.plan(t, mode).workers():
        device = accelerators[int(p.key.removeprefix("device"))]
        assert p.cpus("main") and p.cpus("main") <= t.numa_node(device.numa_node).cpuset, (p.key, mode)
