"""Sub-NUMA clustering (Intel SNC2/SNC3) and AMD NPS1/2/4 on generated 8-GPU roots: "node" is a
fraction of a socket and the socket the union of its package's nodes, for `node`, `socket` and
every gpu_affinity mode and scope; `topo show` equals lstopo, names the mode in its long form, and
warns where a device's numa_node and local_cpulist disagree."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import machines_2026
from lstopo_oracle import lstopo_of, needs_lstopo, topo_console
from sysfs_builder import build
from topo import planners
from topo.cli import main
from topo.cpuset import union_all
from topo.discovery import discover

MACHINES = {  # name -> (machine, the mode line `topo show --long` prints)
    "snc2": (lambda: machines_2026.split_packages(2, cores=8),
             "NUMA: 2 nodes per package (SNC2); distances 10 local, 12 same package, 21 other package"),
    "snc3": (lambda: machines_2026.split_packages(3),
             "NUMA: 3 nodes per package (SNC3); distances 10 local, 12 same package, 21 other package"),
    "nps1": (lambda: machines_2026.split_packages(1, amd=True, cores=8),
             "NUMA: 1 node per package (NPS1); distances 10 local, 32 other package"),
    "nps2": (lambda: machines_2026.split_packages(2, amd=True, cores=8),
             "NUMA: 2 nodes per package (NPS2); distances 10 local, 12 same package, 32 other package"),
    "nps4": (lambda: machines_2026.split_packages(4, amd=True, cores=16),
             "NUMA: 4 nodes per package (NPS4); distances 10 local, 12 same package, 32 other package"),
}
GPU_AFFINITY = ("all", "single", "single-unique", "unique-interleaved", "unique-contiguous")
UNIQUE = ("single-unique", "unique-interleaved", "unique-contiguous")


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("snc")
    return {name: build(base, make(), name) for name, (make, _) in MACHINES.items()}


def scopes(t, device):
    """The device's node CPUs, and its socket's: the CPUs of every node of its package."""
    node = t.numa_node(device.numa_node)
    package = next(p for p in t.packages if node.cpuset <= p.cpuset)
    same = [n.cpuset for n in t.numa_nodes if n.cpuset and n.cpuset <= package.cpuset]
    assert union_all(same) == package.cpuset
    return node.cpuset, package.cpuset


@needs_lstopo
@pytest.mark.parametrize("name", MACHINES)
def test_show_is_lstopos(roots, name):
    assert topo_console(roots[name]) == lstopo_of(roots[name])


@pytest.mark.parametrize("name", MACHINES)
def test_long_form_names_the_mode(roots, name):
    result = CliRunner().invoke(main, ["show", "--long", "--root", str(roots[name])])
    assert result.exit_code == 0 and result.stderr == ""
    assert MACHINES[name][1] in result.stdout.splitlines()


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("mode", ("node", "socket", *GPU_AFFINITY))
@pytest.mark.parametrize("scope", ("node", "socket"))
def test_node_and_socket_sets(roots, name, mode, scope):
    if mode in ("node", "socket") and scope == "socket":
        pytest.skip("scope is gpu_affinity's option")
    t = discover(roots[name])
    plan = planners.plan(t, mode, scope=scope)
    taken = []
    for p in plan.workers():
        device = next(d for d in t.devices if f"device{d.index}" == p.key)
        node, socket = scopes(t, device)
        cpus = p.cpus("main")
        wide = socket if mode == "socket" or (mode in GPU_AFFINITY and scope == "socket") else node
        assert cpus <= wide, (p.key, str(cpus), str(wide))
        if mode in ("node", "socket", "all"):
            assert cpus == wide
        assert set(p.memory_nodes) == {device.numa_node}  # memory stays on the device's own node
        if mode in UNIQUE:
            assert not any(cpus.intersects(other) for other in taken), p.key
            taken.append(cpus)


def test_show_warns_where_numa_node_and_local_cpulist_disagree(tmp_path):
    root = build(tmp_path, machines_2026.split_packages(3, wrong_node=1), "wrong")
    result = CliRunner().invoke(main, ["show", "--root", str(root)])
    assert result.exit_code == 0
    assert result.stderr == ("topo: warning: GPU 0 (0000:18:00.0): sysfs numa_node is 1 but its local_cpulist "
                             "0-3,24-27 is on node 0; topo plans it on node 1, as torch and msrun do (a BIOS "
                             "setting; check the device's slot)\n")
