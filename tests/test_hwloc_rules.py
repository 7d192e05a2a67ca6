"""hwloc's discovery rules on generated machines the captured set lacks, checked against lstopo.

Each test writes a root with `sysfs_builder`, bends the files a real machine of that kind has,
and compares topo with what the installed hwloc (`lstopo-no-graphics` with HWLOC_FSROOT) reports
for the same files; without lstopo, the expected values written in the test still apply.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

import topo
from lstopo_oracle import LSTOPO, answer
from sysfs_builder import Cgroup, Machine, Node, Pci, _mask, build
from topo.cpuset import CpuSet
from topo.errors import ProbeError
from topo.cli import main

TOPOLOGY = "sys/devices/system/cpu/cpu{}/topology"


def discover(root: Path) -> topo.Topology:
    t = topo.discover(root)
    t.check()
    return t


def ours(t: topo.Topology) -> dict:
    return {
        "packages": sorted((p.os_index, p.cpuset.to_list()) for p in t.packages),
        "cores": sorted(((c.os_index, c.cpuset.to_list()) for c in t.cores), key=lambda c: CpuSet.parse(c[1]).first()),
        "numa_nodes": sorted((n.os_index, n.locality.to_list(), n.subtype) for n in t.numa_nodes),
    }


def theirs(root: Path, **env: str) -> dict | None:
    """lstopo's answer in the same shape, None when lstopo is not installed."""
    if LSTOPO is None:
        return None
    a = answer(root, env=env)
    return {"packages": a.packages, "cores": a.cores, "numa_nodes": a.numa_nodes}


def agree(t: topo.Topology, root: Path, *keys: str, **env: str) -> None:
    expected = theirs(root, **env)
    if expected is None:
        return
    got = ours(t)
    for key in keys or ("packages", "cores", "numa_nodes"):
        assert Counter(got[key]) == Counter(expected[key]), key


def set_mask(root: Path, cpu: int, stem: str, cpus: str) -> None:
    d = root / TOPOLOGY.format(cpu)
    (d / f"{stem}_list").write_text(cpus + "\n")
    (d / stem).write_text(_mask(CpuSet.parse(cpus), 1) + "\n")


def set_package_mask(root: Path, cpu: int, cpus: str) -> None:
    set_mask(root, cpu, "package_cpus", cpus)
    set_mask(root, cpu, "core_siblings", cpus)


def drop_core_masks(root: Path, cpu: int) -> None:
    for name in ("core_cpus", "core_cpus_list", "thread_siblings", "thread_siblings_list"):
        (root / TOPOLOGY.format(cpu) / name).unlink()


# ---- compute units -----------------------------------------------------------------------


def test_amd_compute_units_are_two_cores(tmp_path):
    # Bulldozer-class (family 15h): thread_siblings pairs CPUs 0,2 and 1,3, whose core_ids differ.
    root = build(tmp_path, Machine(cores=2, threads=2, compute_units=True, vendor="AuthenticAMD", family=21))
    assert (root / TOPOLOGY.format(2) / "thread_siblings_list").read_text() == "0,2\n"
    t = discover(root)
    assert ours(t)["cores"] == [(0, "0"), (2, "1"), (1, "2"), (3, "3")]  # core_id = core * 2 + thread
    assert t.summary() == "1 package, 1 NUMA node, 4 cores, 4 PUs"
    agree(t, root)


def test_other_vendors_keep_siblings_in_one_core(tmp_path):
    # The same files on an Intel CPU: hwloc applies the compute-unit rule to AMD 15h/16h only.
    root = build(tmp_path, Machine(cores=2, threads=2, compute_units=True))
    t = discover(root)
    assert ours(t)["cores"] == [(0, "0,2"), (2, "1,3")]
    agree(t, root)


def test_amd_hyperthreads_stay_one_core(tmp_path):
    # Family 15h siblings sharing one core_id are threads of one core.
    root = build(tmp_path, Machine(cores=2, threads=2, vendor="AuthenticAMD", family=21))
    t = discover(root)
    assert ours(t)["cores"] == [(0, "0,2"), (1, "1,3")]
    agree(t, root)


# ---- packages from sibling masks ---------------------------------------------------------

TWO_BY_TWO = dict(packages=2, cores=2, threads=1, caches=False)  # package 0 = 0-1, package 1 = 2-3


def test_stale_package_mask_after_hotplug_stays_in_its_package(tmp_path):
    # CPU 1 came back from hot-plug with a mask of itself only; physical_package_id says 0.
    root = build(tmp_path, Machine(**TWO_BY_TWO))
    set_package_mask(root, 1, "1")
    t = discover(root)
    assert ours(t)["packages"] == [(0, "0-1"), (1, "2-3")]
    assert [c.package for c in t.cores] == [0, 0, 1, 1]
    agree(t, root)


def test_sockets_sharing_a_package_id_stay_apart(tmp_path):
    # ia64 dumps give every socket physical_package_id 0; the masks tell them apart.
    root = build(tmp_path, Machine(**TWO_BY_TWO))
    for cpu in range(4):
        (root / TOPOLOGY.format(cpu) / "physical_package_id").write_text("0\n")
    t = discover(root)
    assert ours(t)["packages"] == [(0, "0-1"), (0, "2-3")]
    agree(t, root)


def test_overlapping_package_mask_is_ignored_and_said(tmp_path):
    # CPUs 1 and 2 claim a package across both sockets: hwloc keeps the package it saw first and
    # rejects the one that overlaps it; CPUs 2-3 then have no package (lstopo agrees). Without
    # die masks (older kernels) CPU 1 is the first of its die and its package mask is read.
    root = build(tmp_path, Machine(**TWO_BY_TWO, die_id=False, cluster_id=False))
    set_package_mask(root, 1, "1-2")
    set_package_mask(root, 2, "1-2")
    t = discover(root)
    assert ours(t)["packages"] == [(0, "0-1")]
    assert [c.package for c in t.cores] == [0, 0, None, None]
    assert "package P#0 with CPUs 1-2 ignored: it overlaps package P#0 with CPUs 0-1" in t.probes["sysfs"]
    agree(t, root)


def test_package_mask_naming_another_first_cpu_creates_nothing(tmp_path):
    # Only the first CPU of a mask creates its package: CPU 2 and 3 point at a set whose first
    # CPU (0) made a smaller package, so hwloc has no package for them.
    root = build(tmp_path, Machine(**TWO_BY_TWO))
    set_package_mask(root, 2, "0-3")
    set_package_mask(root, 3, "0-3")
    t = discover(root)
    assert ours(t)["packages"] == [(0, "0-1")]
    agree(t, root)


# ---- PUs without core information --------------------------------------------------------


def test_pus_without_core_masks_get_no_invented_core(tmp_path):
    root = build(tmp_path, Machine(packages=2, cores=2, threads=2, caches=False))
    for cpu in range(8):
        drop_core_masks(root, cpu)
    t = discover(root)
    assert t.cores == () and t.pus.to_list() == "0-7"
    assert ours(t)["packages"] == [(0, "0-1,4-5"), (1, "2-3,6-7")]
    agree(t, root)


def test_core_without_core_id_has_no_os_index(tmp_path):
    root = build(tmp_path, Machine(packages=2, cores=2, threads=2, caches=False))
    for cpu in range(8):
        (root / TOPOLOGY.format(cpu) / "core_id").unlink()
    t = discover(root)
    assert ours(t)["cores"] == [(None, "0,4"), (None, "1,5"), (None, "2,6"), (None, "3,7")]
    agree(t, root)


def test_machine_without_any_topology_files_has_pus_only(tmp_path):
    # No topology/ directory at all (some containers): PUs, and neither cores nor packages made
    # up. (lstopo's Linux backend gives up on such a root, so there is nothing to compare.)
    root = build(tmp_path, Machine(packages=2, cores=2, threads=2, caches=False))
    for cpu in range(8):
        shutil.rmtree(root / TOPOLOGY.format(cpu))
    t = discover(root)
    assert (t.pus.to_list(), t.cores, t.packages) == ("0-7", (), ())
    assert "no CPU sibling masks" in t.probes["sysfs"]
    assert t.summary() == "0 packages, 2 NUMA nodes, 0 cores, 8 PUs"


# ---- overlapping NUMA nodes --------------------------------------------------------------


def test_node_claiming_claimed_cpus_is_ignored_and_said(tmp_path):
    # A buggy BIOS lists CPUs 0-1,4-5 in nodes 0 and 1: the first claim wins, as in hwloc.
    nodes = [Node("0-1,4-5"), Node("0-1,4-5"), Node("2-3,6-7")]
    root = build(tmp_path, Machine(packages=2, cores=2, threads=2, caches=False, nodes=nodes))
    t = discover(root)
    assert [n.os_index for n in t.numa_nodes] == [0, 2]
    assert "NUMA node P#1 ignored: its CPUs 0-1,4-5 belong to an earlier node" in t.probes["sysfs"]
    agree(t, root, "numa_nodes")


def test_fake_numa_nodes_share_their_physical_node_cpus(tmp_path):
    # numa=fake=2U cuts each node in two and puts every CPU in both halves: hwloc (2.10 and
    # later; lstopo 2.9 predates the rule) keeps every node, each at the CPUs it lists. A CPU has
    # one node in topo's model, the first; the second half sits at the same CPUs, CPU-less.
    nodes = [Node("0-1,4-5"), Node("0-1,4-5"), Node("2-3,6-7"), Node("2-3,6-7")]
    root = build(tmp_path, Machine(packages=2, cores=2, threads=2, caches=False, nodes=nodes,
                                   cmdline="ro numa=fake=2U"))
    t = discover(root)
    assert [(n.os_index, n.cpuset.to_list(), n.memory_only, n.locality.to_list()) for n in t.numa_nodes] == [
        (0, "0-1,4-5", False, "0-1,4-5"), (1, "", True, "0-1,4-5"),
        (2, "2-3,6-7", False, "2-3,6-7"), (3, "", True, "2-3,6-7")]
    assert "ignored" not in t.probes["sysfs"]


# ---- GPU memory as NUMA nodes ------------------------------------------------------------


def test_gpu_memory_node_sits_at_its_gpu(tmp_path):
    # Grace/POWER9: the driver onlines GPU memory as node 2; its locality is the GPU's local CPUs
    # (package 1), not what distances would suggest.
    nodes = [Node("0-3"), Node("4-7"), Node("", 16 << 30, [40, 40, 10])]
    pci = [Pci("0000:00:00.0", "0x060000", numa_node=0, local_cpulist="0-3"),
           Pci("0000:40:00.0", "0x030200", numa_node=1, local_cpulist="4-7")]
    root = build(tmp_path, Machine(packages=2, cores=4, caches=False, nodes=nodes, pci=pci))
    status = root / "proc/driver/nvidia/gpus/0000:40:00.0/numa_status"
    status.parent.mkdir(parents=True)
    status.write_text("Node: 2\nStatus: online\n")
    t = discover(root)
    gpu_node = t.numa_node(2)
    assert (gpu_node.locality.to_list(), gpu_node.subtype, gpu_node.memory_only) == ("4-7", "GPUMemory", True)
    agree(t, root, "numa_nodes", HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES="1")

    (root / "sys/bus/pci/devices/0000:40:00.0/local_cpus").unlink()
    (root / "sys/bus/pci/devices/0000:40:00.0/local_cpulist").unlink()
    assert discover(root).numa_node(2).locality.to_list() == ""  # no locality: the machine
    agree(discover(root), root, "numa_nodes", HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES="1")


# ---- PCI locality ------------------------------------------------------------------------


def test_pci_devices_sit_where_their_host_bridge_sits(tmp_path):
    pci = [
        # root bus 00: its first function says package 0; the GPU behind the root port says
        # package 1 in its own file, and hwloc does not read it.
        Pci("0000:00:00.0", "0x060000", vendor="0x8086", device="0x2020", numa_node=0, local_cpulist="0-3"),
        Pci("0000:00:01.0", "0x060400", vendor="0x8086", device="0x2030", numa_node=0, local_cpulist="0-3",
            bridge_buses=(1, 1)),
        Pci("0000:01:00.0", "0x030200", numa_node=1, local_cpulist="4-7"),
        # root bus 40: the NVMe is its first function, its own file decides
        Pci("0000:40:00.0", "0x010802", vendor="0x144d", device="0xa808", numa_node=1, local_cpulist="4-7"),
        # root bus 80: the root port has no local_cpus, so everything below goes to the machine
        Pci("0000:80:01.0", "0x060400", vendor="0x8086", device="0x2030", bridge_buses=(0x81, 0x82)),
        Pci("0000:81:00.0", "0x060400", vendor="0x10b5", device="0x8747", local_cpulist="4-7",
            bridge_buses=(0x82, 0x82)),
        Pci("0000:82:00.0", "0x020700", vendor="0x15b3", device="0x1017", numa_node=1, local_cpulist="4-7"),
    ]
    root = build(tmp_path, Machine(packages=2, cores=4, caches=False, pci=pci))
    t = discover(root)
    where = {d.busid: d.local_cpus.to_list() for d in t.pci_devices}
    assert where == {"0000:01:00.0": "0-3", "0000:40:00.0": "4-7", "0000:82:00.0": "0-7"}
    assert {d.busid: d.numa_node for d in t.pci_devices}["0000:01:00.0"] == 1  # its own numa_node stays
    if LSTOPO is not None:
        assert {b: s for b, s in answer(root).pci.items() if b in where} == where


def test_bridge_without_config_space_is_a_device_as_in_hwloc(tmp_path):
    # Unreadable config space: hwloc sees no bridge header, so the bus behind it is a root bus of
    # its own and its first function's local_cpus decide.
    pci = [Pci("0000:00:01.0", "0x060400", local_cpulist="0-3", bridge_buses=(1, 1)),
           Pci("0000:01:00.0", "0x030200", local_cpulist="4-7")]
    root = build(tmp_path, Machine(packages=2, cores=4, caches=False, pci=pci))
    assert {d.busid: d.local_cpus.to_list() for d in discover(root).pci_devices} == {"0000:01:00.0": "0-3"}
    (root / "sys/bus/pci/devices/0000:00:01.0/config").unlink()
    assert {d.busid: d.local_cpus.to_list() for d in discover(root).pci_devices} == {"0000:01:00.0": "4-7"}
    if LSTOPO is not None:
        assert answer(root).pci["0000:01:00.0"] == "4-7"


# ---- damaged captures: named errors, not another machine ---------------------------------

NODE0 = "sys/devices/system/node/node0"


@pytest.mark.parametrize("damage", ["empty", "dangling", "missing"])
def test_damaged_node_cpumap_is_an_error_naming_it(tmp_path, damage):
    root = build(tmp_path, Machine(packages=2, cores=2, caches=False))
    cpumap, cpulist = root / NODE0 / "cpumap", root / NODE0 / "cpulist"
    if damage == "empty":
        cpumap.write_text("")
        named = cpumap
    elif damage == "dangling":
        cpumap.unlink()
        cpumap.symlink_to(root / "gone")
        named = cpumap
    else:
        cpumap.unlink()
        cpulist.unlink()
        named = root / NODE0
    with pytest.raises(ProbeError) as err:
        topo.discover(root)
    assert str(named) in str(err.value) and "capture the machine again" in str(err.value)
    result = CliRunner().invoke(main, ["show", "--root", str(root)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("topo: error: ") and str(named) in result.stderr
    assert "Traceback" not in result.output


def test_cpu_less_node_with_a_zero_mask_is_fine(tmp_path):
    # What the kernel writes for a node without CPUs: a mask of zeros, not an empty file.
    nodes = [Node("0-1"), Node("2-3"), Node("", 8 << 30, [20, 20, 10])]
    t = discover(build(tmp_path, Machine(packages=2, cores=2, caches=False, nodes=nodes)))
    assert t.numa_node(2).memory_only


@pytest.mark.parametrize("entry", ["sys/devices/system/cpu/cpu99999999999", "sys/devices/system/node/node99999999"])
def test_absurd_cpu_or_node_number_is_an_error_naming_it(tmp_path, entry):
    root = build(tmp_path, Machine(packages=2, cores=2, caches=False))
    (root / entry).mkdir()
    with pytest.raises(ProbeError) as err:
        topo.discover(root)
    assert str(root / entry) in str(err.value) and "exceeds" in str(err.value)
    result = CliRunner().invoke(main, ["show", "--root", str(root)])
    assert result.exit_code == 2 and str(root / entry) in result.stderr and "Traceback" not in result.output


# ---- ordinary shapes: topo and lstopo agree object for object ----------------------------

SHAPES = {
    "2s-4c-smt2": Machine(packages=2, cores=4, threads=2),
    "sparse-offline": Machine(packages=2, cores=2, threads=2, cpu_ids=[0, 1, 2, 3, 8, 9, 10, 11], offline="3,9"),
    "per-cpu-online": Machine(packages=2, cores=2, threads=2, offline="5", global_online=False),
    "2-dies-2-core-clusters": Machine(packages=1, cores=8, dies=2, cluster_cores=2),
    "old-kernel": Machine(packages=2, cores=2, threads=2, die_id=False, cluster_id=False),
    "2-nodes-per-package": Machine(packages=2, cores=4, nodes=[Node("0-1"), Node("2-3"), Node("4-5"), Node("6-7")]),
    "cpu-less-node": Machine(packages=2, cores=2, nodes=[Node("0-1", 4 << 30, [10, 20, 30]), Node("2-3", 4 << 30, [20, 10, 20]),
                                                          Node("", 16 << 30, [30, 20, 10])]),
    "compute-units-2s": Machine(packages=2, cores=2, threads=2, compute_units=True, vendor="AuthenticAMD", family=21),
}


@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (Debian package hwloc) is not installed")
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_generated_shape_matches_lstopo(tmp_path, name):
    root = build(tmp_path, SHAPES[name])
    t = discover(root)
    a = answer(root)
    assert t.pus.to_list() == a.pus
    assert Counter((p.os_index, p.cpuset.to_list()) for p in t.packages) == Counter(a.packages)
    assert Counter((c.os_index, c.cpuset.to_list()) for c in t.cores) == Counter(a.cores)
    assert Counter((n.os_index, n.locality.to_list(), n.subtype) for n in t.numa_nodes) == Counter(a.numa_nodes)
    assert Counter((c.level, c.type, c.cpuset.to_list()) for c in t.caches) == Counter(a.caches)


def _random_machine(seed: int) -> tuple[Machine, list]:
    """A machine of random shape, and the sysfs damage a real one may show (stale or missing
    masks after hot-plug, missing core_id files), chosen by `seed`."""
    import random

    rng = random.Random(seed)
    packages, cores, threads = rng.randint(1, 3), rng.choice([1, 2, 3, 4, 6]), rng.choice([1, 2, 4])
    n = packages * cores * threads
    cpu_ids = sorted(rng.sample(range(2 * n), n)) if rng.random() < 0.3 else None
    ids = cpu_ids or list(range(n))
    offline = CpuSet(rng.sample(ids[1:], rng.randint(0, min(3, n - 1)))).to_list() if n > 1 else ""
    machine = Machine(packages=packages, cores=cores, threads=threads, cpu_ids=cpu_ids, offline=offline,
                      dies=rng.choice([d for d in (1, 2) if cores % d == 0]),
                      cluster_cores=rng.choice([c for c in (1, 2) if cores % c == 0]),
                      die_id=rng.random() < 0.7, cluster_id=rng.random() < 0.7,
                      global_online=rng.random() < 0.8, caches=rng.random() < 0.7,
                      compute_units=rng.random() < 0.3, vendor=rng.choice(["AuthenticAMD", "GenuineIntel"]),
                      family=rng.choice([21, 25, 6]))
    online = [c for c in ids if c not in CpuSet.parse(offline)]
    damage = []
    for _ in range(rng.randint(0, 2)):
        cpu = rng.choice(online)
        damage.append(rng.choice([("stale-package", cpu), ("no-core-mask", cpu), ("no-core-id", cpu)]))
    return machine, damage


@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (Debian package hwloc) is not installed")
@pytest.mark.parametrize("seed", range(24))
def test_random_machine_matches_lstopo(tmp_path, seed):
    machine, damage = _random_machine(seed)
    root = build(tmp_path, machine)
    for kind, cpu in damage:
        if kind == "stale-package":
            set_package_mask(root, cpu, str(cpu))
        elif kind == "no-core-mask" and (root / TOPOLOGY.format(cpu) / "core_cpus").exists():
            drop_core_masks(root, cpu)
        elif kind == "no-core-id":
            (root / TOPOLOGY.format(cpu) / "core_id").unlink(missing_ok=True)
    t = topo.discover(root)
    try:
        a = answer(root)
    except subprocess.CalledProcessError as exc:
        # hwloc looks for sibling masks on cpu0, or on the first CPU of cpu/online; without both
        # (sparse ids and an old kernel) it gives up, where topo reads the CPUs that exist.
        assert "aborting linux discovery" in exc.stderr
        assert t.cores and t.pus == t.online_pus
        return
    assert t.pus.to_list() == a.pus
    assert Counter((p.os_index, p.cpuset.to_list()) for p in t.packages) == Counter(a.packages)
    assert Counter((c.os_index, c.cpuset.to_list()) for c in t.cores) == Counter(a.cores)
    assert Counter((n.os_index, n.locality.to_list(), n.subtype) for n in t.numa_nodes) == Counter(a.numa_nodes)
    assert Counter((c.level, c.type, c.cpuset.to_list()) for c in t.caches) == Counter(a.caches)


def _random_pci(seed: int) -> list[Pci]:
    """A random PCI hierarchy: root buses with devices and bridges (nested up to two deep), each
    function with some local_cpus or none, chosen by `seed`."""
    import random

    rng = random.Random(seed)
    localities = ["0-3", "4-7", "0-7", "2-5", None]
    out: list[Pci] = []
    next_bus = [1]

    def bus_of(domain: int, bus: int, depth: int) -> None:
        for dev in range(rng.randint(1, 3)):
            busid = f"{domain:04x}:{bus:02x}:{dev:02x}.0"
            local = rng.choice(localities)
            if depth < 2 and rng.random() < 0.5:
                secondary = next_bus[0]
                next_bus[0] += 1
                bridge = Pci(busid, "0x060400", vendor="0x8086", device="0x2030", local_cpulist=local,
                             bridge_buses=(secondary, secondary))
                out.append(bridge)
                start = len(out)
                bus_of(domain, secondary, depth + 1)
                # the bridge's range covers every bus allocated below it
                out[start - 1] = Pci(busid, "0x060400", vendor="0x8086", device="0x2030", local_cpulist=local,
                                     bridge_buses=(secondary, next_bus[0] - 1))
            else:
                kind = rng.choice(["0x030200", "0x020000", "0x010802", "0x120000"])
                out.append(Pci(busid, kind, vendor="0x10de", device="0x20b0", local_cpulist=local))

    for domain in range(rng.randint(1, 2)):
        for _ in range(rng.randint(1, 3)):
            root_bus = next_bus[0] = next_bus[0] + rng.randint(1, 16)
            next_bus[0] += 1
            bus_of(domain, root_bus, 0)
    return out


@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (Debian package hwloc) is not installed")
@pytest.mark.parametrize("seed", range(12))
def test_random_pci_tree_matches_lstopo(tmp_path, seed):
    root = build(tmp_path, Machine(packages=2, cores=4, caches=False, pci=_random_pci(seed)))
    t = discover(root)
    objects = [t.pus, *(p.cpuset for p in t.packages), *(c.cpuset for c in t.cores)]
    # the smallest object holding a device's locality is where lstopo hangs it
    where = {d.busid: min((o for o in objects if d.local_cpus <= o), key=CpuSet.weight).to_list()
             for d in t.pci_devices}
    theirs = answer(root).pci
    assert where and {b: theirs[b] for b in where} == where


def _random_numa(seed: int) -> Machine:
    """Random NUMA layouts: one or two nodes per package, CPU-less nodes, random distances."""
    import random

    rng = random.Random(seed)
    packages, cores = rng.randint(1, 4), rng.choice([2, 4])
    split = rng.random() < 0.5
    cpu_nodes = []
    for p in range(packages):
        first = p * cores
        if split:
            half = cores // 2
            cpu_nodes += [CpuSet.range(first, first + half - 1), CpuSet.range(first + half, first + cores - 1)]
        else:
            cpu_nodes.append(CpuSet.range(first, first + cores - 1))
    n = len(cpu_nodes) + rng.randint(0, 2)
    matrix = [[10 if i == j else 0 for j in range(n)] for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            matrix[i][j] = matrix[j][i] = rng.choice([12, 20, 21, 32])
    nodes = [Node(s.to_list(), 4 << 30, matrix[i]) for i, s in enumerate(cpu_nodes)]
    nodes += [Node("", 8 << 30, matrix[i]) for i in range(len(cpu_nodes), n)]
    return Machine(packages=packages, cores=cores, caches=rng.random() < 0.5, nodes=nodes)


@pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (Debian package hwloc) is not installed")
@pytest.mark.parametrize("seed", range(12))
def test_random_numa_layout_matches_lstopo(tmp_path, seed):
    root = build(tmp_path, _random_numa(seed))
    t = discover(root)
    got = Counter((n.os_index, n.locality.to_list(), n.subtype) for n in t.numa_nodes)
    assert got == Counter(answer(root).numa_nodes)


# ---- the unseen cases: conflicting PCI localities, caches that do not nest, CPU nodes without memory


def test_pci_locality_straddling_packages_hangs_from_the_machine(tmp_path):
    # hwloc inserts a Group of a host bridge's local CPUs where it nests in the tree; CPUs 2-5
    # straddle packages 0-3 and 4-7, the Group conflicts, and the tree hangs from the machine
    # (hwloc_find_insert_io_parent_by_complete_cpuset). CPUs 4-5 nest: a Group of them.
    pci = [
        Pci("0000:00:00.0", "0x060000", vendor="0x8086", device="0x2020", numa_node=0, local_cpulist="2-5"),
        Pci("0000:00:01.0", "0x060400", vendor="0x8086", device="0x2030", numa_node=0, local_cpulist="2-5",
            bridge_buses=(1, 1)),
        Pci("0000:01:00.0", "0x020000", vendor="0x15b3", device="0x1017", numa_node=0, local_cpulist="2-5"),
        Pci("0000:40:00.0", "0x010802", vendor="0x144d", device="0xa808", numa_node=1, local_cpulist="4-5"),
    ]
    root = build(tmp_path, Machine(packages=2, cores=4, caches=False, pci=pci))
    t = discover(root)
    where = {d.busid: d.local_cpus.to_list() for d in t.pci_devices}
    assert where == {"0000:01:00.0": "0-7", "0000:40:00.0": "4-5"}
    assert {b.id: b.local_cpus.to_list() for b in t.pci_bridges} == {
        "pci0000:00": "0-7", "0000:00:01.0": "0-7", "pci0000:40": "4-5"}
    if LSTOPO is not None:
        assert {b: s for b, s in answer(root).pci.items() if b in where} == where


def test_cache_straddling_another_is_dropped_as_hwloc_drops_it(tmp_path):
    # L3 0-1 and 2-3; cpus 1 and 2 claim an L2 shared by 1-2, which straddles both L3s. hwloc
    # inserts CPU 0's caches first, then CPU 1's L2 conflicts with the L3 0-1 already there.
    root = build(tmp_path, Machine(packages=1, cores=4))

    def share(cpu: int, index: int, cpus: str) -> None:
        d = root / f"sys/devices/system/cpu/cpu{cpu}/cache/index{index}"
        (d / "shared_cpu_list").write_text(cpus + "\n")
        (d / "shared_cpu_map").write_text(_mask(CpuSet.parse(cpus), 1) + "\n")

    for cpu, l3 in ((0, "0-1"), (1, "0-1"), (2, "2-3"), (3, "2-3")):
        share(cpu, 3, l3)
    for cpu in (1, 2):
        share(cpu, 2, "1-2")
    t = discover(root)
    got = sorted((c.level, c.type, c.cpuset.to_list()) for c in t.caches if c.level >= 2)
    assert got == [(2, "unified", "0"), (2, "unified", "3"), (3, "unified", "0-1"), (3, "unified", "2-3")]
    assert "L2 unified cache with CPUs 1-2 ignored: it straddles another object" in t.probes["sysfs"]
    if LSTOPO is not None:
        assert sorted(c for c in answer(root).caches if c[0] >= 2) == got


def test_cpu_node_without_memory_is_kept_as_hwloc_keeps_it(tmp_path):
    # A node with CPUs and no memory (has_memory leaves it out; a CPU-only initiator) is a NUMA node
    # in hwloc; it is the memory-only node's nearest CPUs' holder, not node 0 alone.
    nodes = [Node("0-3", distances=[10, 20, 17]), Node("4-7", memory=0, distances=[20, 10, 28]),
             Node("", memory=8 << 30, distances=[17, 28, 10])]
    root = build(tmp_path, Machine(packages=2, cores=4, caches=False, nodes=nodes))
    t = discover(root)
    assert [(n.os_index, n.cpuset.to_list(), n.locality.to_list(), n.local_memory, n.memory_only)
            for n in t.numa_nodes] == [(0, "0-3", "0-3", 4 << 30, False), (1, "4-7", "4-7", 0, False),
                                       (2, "", "0-3", 8 << 30, True)]
    agree(t, root, "numa_nodes")


def test_cpu_node_without_memory_outside_the_cgroup_is_left_out(tmp_path):
    # Linux lets a cpuset's mems hold only nodes with memory: the node is there, but not allowed.
    nodes = [Node("0-3"), Node("4-7", memory=0)]
    root = build(tmp_path, Machine(packages=2, cores=4, caches=False, nodes=nodes,
                                   cgroup=Cgroup(1, cpus="0-7", mems="0")))
    assert [n.os_index for n in discover(root).numa_nodes] == [0]
    assert [n.os_index for n in topo.discover(root, include_disallowed=True).numa_nodes] == [0, 1]
    agree(discover(root), root, "numa_nodes")
