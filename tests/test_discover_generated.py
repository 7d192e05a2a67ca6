"""Discovery on generated sysfs roots: the shapes hwloc's captured set lacks.

Each test writes a machine with `sysfs_builder.build` below tmp_path, then checks `topo.discover`
and `topo show [--json] --root` against what the description implies.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyfakefs.fake_filesystem import set_uid
from pyfakefs.fake_filesystem_unittest import Patcher

import topo
from sysfs_builder import Cgroup, Machine, Node, Pci, build
from topo.cli import main
from topo.errors import ProbeError


def show(root: Path, *args: str, env: dict | None = None):
    result = CliRunner().invoke(main, ["show", *args, *(["--root", str(root)] if root else [])], env=env)
    return result


def show_json(root: Path, *args: str) -> dict:
    result = show(root, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def discover(root: Path, **kw) -> topo.Topology:
    t = topo.discover(root, **kw)
    t.check()
    return t


def as_json(t: topo.Topology) -> dict:
    return json.loads(json.dumps(t.to_dict()))


# ---- a cgroup-restricted container (v2, and v1 for comparison) ---------------------------

# 2 packages x 4 cores x 2 threads: package 0 = 0-3,8-11, package 1 = 4-7,12-15.
TWO_SOCKETS = dict(packages=2, cores=4, threads=2)


@pytest.mark.parametrize("version", [2, 1])
def test_cgroup_container_restricts_cpus_and_mems(tmp_path, version):
    # The container straddles both packages but may only allocate memory on node 1.
    root = build(tmp_path, Machine(**TWO_SOCKETS, cgroup=Cgroup(version, cpus="2-5,10-13", mems="1",
                                                               path="/kubepods/pod7/ctr")))
    t = discover(root)
    assert t.pus.to_list() == "2-5,10-13"
    assert t.allowed_pus == t.pus
    assert t.online_pus.to_list() == "0-15"
    assert t.allowed_numa_nodes.to_list() == "1"
    assert [n.os_index for n in t.numa_nodes] == [1]
    assert t.numa_nodes[0].cpuset.to_list() == "4-5,12-13"
    assert t.numa_nodes[0].distances == {1: 10}  # rows to disallowed nodes are dropped too
    assert [(p.os_index, p.cpuset.to_list()) for p in t.packages] == [(0, "2-3,10-11"), (1, "4-5,12-13")]
    assert [(c.package, c.os_index, c.cpuset.to_list()) for c in t.cores] == [
        (0, 2, "2,10"), (0, 3, "3,11"), (1, 0, "4,12"), (1, 1, "5,13")]
    assert sorted({c.cpuset.to_list() for c in t.caches if c.level == 3}) == ["2-3,10-11", "4-5,12-13"]
    assert all(c.cpuset <= t.pus for c in t.caches)
    assert t.probes["cgroup"] == f"v{version} /kubepods/pod7/ctr"
    assert t.summary() == "2 packages, 1 NUMA node, 4 cores, 8 PUs"

    data = show_json(root)
    assert data == as_json(t)
    assert data["pus"] == data["allowed_pus"] == "2-5,10-13"
    assert data["allowed_numa_nodes"] == "1"


@pytest.mark.parametrize("version", [2, 1])
def test_include_disallowed_shows_everything_but_keeps_allowed_sets(tmp_path, version):
    root = build(tmp_path, Machine(**TWO_SOCKETS, cgroup=Cgroup(version, cpus="2-5,10-13", mems="1")))
    t = discover(root, include_disallowed=True)
    assert t.pus.to_list() == "0-15"
    assert t.allowed_pus.to_list() == "2-5,10-13"
    assert t.allowed_numa_nodes.to_list() == "1"
    assert [n.os_index for n in t.numa_nodes] == [0, 1]
    assert t.numa_nodes[0].distances == {0: 10, 1: 20}
    assert len(t.cores) == 8 and [p.cpuset.to_list() for p in t.packages] == ["0-3,8-11", "4-7,12-15"]

    data = show_json(root, "--include-disallowed")
    assert data == as_json(t)
    assert (data["pus"], data["allowed_pus"], data["allowed_numa_nodes"]) == ("0-15", "2-5,10-13", "1")
    text = show(root, "--include-disallowed", "--long").output
    assert text.splitlines()[-2] == "2 packages, 2 NUMA nodes, 8 cores, 16 PUs"


def test_cgroup_v2_reads_the_process_cgroup_not_the_root(tmp_path):
    # The root cgroup's effective set allows all 16 PUs; ours allows one core.
    root = build(tmp_path, Machine(**TWO_SOCKETS, cgroup=Cgroup(2, cpus="7,15", mems="0-1", path="/a/b")))
    t = discover(root)
    assert t.pus.to_list() == "7,15"
    # Node 0 stays (its memory is allowed) though none of its CPUs are, and so does package 0
    # that holds it, CPU-less, as hwloc keeps it.
    assert [(p.os_index, p.cpuset.to_list()) for p in t.packages] == [(0, ""), (1, "7,15")]
    assert [(n.os_index, n.cpuset.to_list()) for n in t.numa_nodes] == [(0, ""), (1, "7,15")]


def test_cgroup_v2_without_cpuset_controller_restricts_nothing(tmp_path):
    root = build(tmp_path, Machine(**TWO_SOCKETS, cgroup=Cgroup(2, path="/user.slice")))
    t = discover(root)
    assert t.pus.to_list() == "0-15" and t.allowed_numa_nodes.to_list() == "0-1"


def test_fake_root_ignores_this_process_affinity(tmp_path):
    # PUs beyond this process's affinity: sched_getaffinity must not apply to a fake root.
    n = max(os.sched_getaffinity(0)) + 9
    root = build(tmp_path, Machine(packages=1, cores=n, caches=False))
    t = discover(root)
    assert t.pus.weight() == n and t.allowed_pus == t.pus
    assert t.probes["affinity"].startswith("off")
    assert not t.is_this_system


# ---- no NUMA directory -------------------------------------------------------------------


def test_machine_without_numa_directory_gets_one_node(tmp_path):
    root = build(tmp_path, Machine(**TWO_SOCKETS, numa=False, memory=24 << 30))
    assert not (root / "sys/devices/system/node").exists()
    t = discover(root)
    assert len(t.numa_nodes) == 1
    node = t.numa_nodes[0]
    assert (node.os_index, node.cpuset.to_list(), node.memory_only) == (0, "0-15", False)
    assert node.local_memory == 24 << 30  # from /proc/meminfo
    assert t.allowed_numa_nodes.to_list() == "0"
    assert t.probes["sysfs"].startswith("ok (no NUMA")
    data = show_json(root)
    assert data["numa_nodes"][0]["cpuset"] == "0-15" and data["numa_nodes"][0]["locality"] == "0-15"


# ---- an old kernel -----------------------------------------------------------------------


def test_old_kernel_without_die_cluster_cache_or_online_files(tmp_path):
    root = build(tmp_path, Machine(**TWO_SOCKETS, die_id=False, cluster_id=False, caches=False,
                                   global_online=False))
    t = discover(root)
    assert t.dies == () and t.clusters == () and t.caches == ()
    assert t.pus.to_list() == "0-15"
    assert [p.cpuset.to_list() for p in t.packages] == ["0-3,8-11", "4-7,12-15"]
    assert [c.cpuset.to_list() for c in t.cores][:2] == ["0,8", "1,9"] and len(t.cores) == 8
    data = show_json(root)
    assert data["dies"] == [] and data["clusters"] == [] and data["caches"] == []


def test_real_dies_and_clusters_are_reported(tmp_path):
    # Two dies per package and two-core clusters (as on Kunpeng/Ampere): both differ from the
    # package and the core, so they are kept.
    root = build(tmp_path, Machine(packages=1, cores=8, threads=1, dies=2, cluster_cores=2, caches=False))
    t = discover(root)
    assert [(d.os_index, d.package, d.cpuset.to_list()) for d in t.dies] == [(0, 0, "0-3"), (1, 0, "4-7")]
    assert [(c.os_index, c.cpuset.to_list()) for c in t.clusters] == [(0, "0-1"), (1, "2-3"), (2, "4-5"), (3, "6-7")]
    assert show_json(root)["dies"] == [{"os_index": 0, "package": 0, "cpuset": "0-3"},
                                       {"os_index": 1, "package": 0, "cpuset": "4-7"}]


# ---- offline CPUs and sparse numbering ---------------------------------------------------


@pytest.mark.parametrize("global_online", [True, False], ids=["online-file", "per-cpu-online"])
def test_offline_cpus_and_sparse_numbering(tmp_path, global_online):
    # 2 packages x 2 cores x 2 threads numbered 0-3 (first threads) and 8-11 (second threads);
    # 3 (package 1 core 1, thread 0) and 9 (package 0 core 1, thread 1) are offline.
    m = Machine(packages=2, cores=2, threads=2, cpu_ids=[0, 1, 2, 3, 8, 9, 10, 11], offline="3,9",
                global_online=global_online)
    root = build(tmp_path, m)
    t = discover(root)
    assert t.pus.to_list() == "0-2,8,10-11"
    assert t.online_pus == t.pus
    assert t.complete_pus.to_list() == "0-3,8-11"
    assert [(c.package, c.os_index, c.cpuset.to_list()) for c in t.cores] == [
        (0, 0, "0,8"), (0, 1, "1"), (1, 0, "2,10"), (1, 1, "11")]
    assert [n.cpuset.to_list() for n in t.numa_nodes] == ["0-1,8", "2,10-11"]
    assert all(c.cpuset <= t.pus for c in t.caches)
    text = show(root, "--long").output
    # Logical indices follow the tree, as in lstopo: core 0 holds PUs 0 and 8.
    assert "PU L#1 (P#8)" in text and "P#9)" not in text
    assert text.splitlines()[-2] == "2 packages, 2 NUMA nodes, 4 cores, 6 PUs"
    data = show_json(root)
    assert (data["pus"], data["complete_pus"]) == ("0-2,8,10-11", "0-3,8-11")


# ---- memory-only (CPU-less) NUMA nodes ---------------------------------------------------


def test_cpuless_memory_node_with_distances(tmp_path):
    nodes = [Node("0-1", 4 << 30, [10, 20, 30]),
             Node("2-3", 4 << 30, [20, 10, 20]),
             Node("", 16 << 30, [30, 20, 10])]  # e.g. CXL memory hanging off package 1
    root = build(tmp_path, Machine(packages=2, cores=2, nodes=nodes))
    t = discover(root)
    assert [n.os_index for n in t.numa_nodes] == [0, 1, 2]
    hbm = t.numa_node(2)
    assert hbm.memory_only and hbm.cpuset.to_list() == "" and hbm.local_memory == 16 << 30
    assert hbm.locality.to_list() == "2-3"  # nearest CPU-bearing node by distance is node 1
    assert dict(hbm.distances) == {0: 30, 1: 20, 2: 10}
    assert not t.numa_node(0).memory_only and t.numa_node(0).locality.to_list() == "0-1"
    assert [n.os_index for n in t.cpu_nodes()] == [0, 1]

    data = show_json(root)
    node2 = data["numa_nodes"][2]
    assert (node2["cpuset"], node2["memory_only"], node2["locality"]) == ("", True, "2-3")
    assert node2["distances"] == {"0": 30, "1": 20, "2": 10}
    text = show(root, "--long").output
    assert "NUMANode L#2 (P#2 local=16GiB memory-only)" in text
    assert text.splitlines()[-2] == "2 packages, 3 NUMA nodes, 4 cores, 4 PUs"


def test_cpuless_node_equidistant_to_every_node_has_no_locality(tmp_path):
    # hwloc's rule (fixup_cpuless_node_locality_from_distances): when the nearest nodes are all
    # the other nodes, the distances say nothing about where the memory is; lstopo then reports
    # the node with an empty cpuset in a Group of its own (fixture 128ia64-17n4s2c, node 16).
    nodes = [Node("0-1", 1 << 30, [10, 20, 25]), Node("2-3", 1 << 30, [20, 10, 25]),
             Node("", 1 << 30, [25, 25, 10])]
    t = discover(build(tmp_path, Machine(packages=2, cores=2, nodes=nodes)))
    assert t.numa_node(2).memory_only
    assert t.numa_node(2).locality.to_list() == ""
    assert [(g.cpuset.to_list(), g.numa_nodes) for g in t.groups] == [("", (2,))]
    # One node strictly nearer than the rest is the locality.
    nodes[2] = Node("", 1 << 30, [25, 30, 10])
    t = discover(build(tmp_path / "nearer", Machine(packages=2, cores=2, nodes=nodes)))
    assert t.numa_node(2).locality.to_list() == "0-1"


def test_cpuless_node_outside_allowed_mems_is_hidden(tmp_path):
    nodes = [Node("0-1"), Node("2-3"), Node("", 16 << 30, [30, 20, 10])]
    root = build(tmp_path, Machine(packages=2, cores=2, nodes=nodes, cgroup=Cgroup(2, cpus="0-3", mems="0-1")))
    t = discover(root)
    assert [n.os_index for n in t.numa_nodes] == [0, 1]
    assert all(2 not in n.distances for n in t.numa_nodes)
    assert [n.os_index for n in discover(root, include_disallowed=True).numa_nodes] == [0, 1, 2]


# ---- PCI devices -------------------------------------------------------------------------


def test_pci_devices_locality_and_classification(tmp_path):
    pci = [
        Pci("0000:00:01.0", "0x060400", vendor="0x8086", device="0x2030", numa_node=0),  # bridge
        Pci("0000:17:00.0", "0x020000", vendor="0x15b3", device="0x1017", numa_node=-1),  # NIC, no locality
        Pci("0000:3b:00.0", "0x030200", numa_node=1, local_cpulist="4-7,12-15"),  # GPU on package 1
        Pci("0000:af:00.0", "0x030200", numa_node=1, local_cpulist="4-7,12-15"),
    ]
    root = build(tmp_path, Machine(**TWO_SOCKETS, pci=pci, cgroup=Cgroup(2, cpus="0-5,8-13", mems="0-1")))
    t = discover(root)
    assert [d.busid for d in t.pci_devices] == ["0000:17:00.0", "0000:3b:00.0", "0000:af:00.0"]
    nic, gpu0, gpu1 = t.pci_devices
    assert (nic.class_id, nic.id, nic.numa_node) == ("0200", "15b3:1017", None)
    assert nic.local_cpus == t.pus  # no local_cpulist: the whole (allowed) machine
    assert (gpu0.class_id, gpu0.id, gpu0.numa_node) == ("0302", "10de:20b0", 1)
    assert gpu0.local_cpus.to_list() == "4-5,12-13"  # restricted to the allowed PUs
    assert sorted((d.kind, d.index, d.busid, d.numa_node) for d in t.devices) == [
        ("gpu", 0, "0000:3b:00.0", 1), ("gpu", 1, "0000:af:00.0", 1), ("nic", 0, "0000:17:00.0", None)]

    data = show_json(root)
    assert data["pci_devices"][1]["busid"] == "0000:3b:00.0"
    assert (data["pci_devices"][1]["class"], data["pci_devices"][1]["id"]) == ("0302", "10de:20b0")
    assert data["pci_devices"][0]["numa_node"] is None
    assert data["pci_devices"][2]["local_cpus"] == "4-5,12-13"
    lines = show(root, "--long").output.splitlines()
    node1 = next(i for i, line in enumerate(lines) if "NUMANode L#1 (P#1" in line)
    assert "GPU 0 (0000:3b:00.0)" in lines[node1 + 1] and "GPU 1 (0000:af:00.0)" in lines[node1 + 2]
    assert lines[-2] == "2 packages, 2 NUMA nodes, 6 cores, 12 PUs, 2 GPUs, 1 NIC"


# ---- text output -------------------------------------------------------------------------


def test_text_output_is_a_tree_with_a_summary(tmp_path):
    root = build(tmp_path, Machine(**TWO_SOCKETS))
    result = show(root, "--long")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "Machine"
    indent = {name: next(len(x) - len(x.lstrip()) for x in lines if x.lstrip().startswith(name))
              for name in ("Package L#0", "L3 L#0", "L2 L#0", "L1d L#0", "Core L#0", "PU L#0")}
    assert list(indent.values()) == sorted(indent.values()) and len(set(indent.values())) == 6
    assert '  Package L#1 (P#1 "Fake CPU @ 2.00GHz")' in lines
    assert any(x.strip() == "NUMANode L#1 (P#1 local=4GiB)" for x in lines)
    assert any(x.strip() == "PU L#15 (P#15)" for x in lines)
    assert lines[-2] == "2 packages, 2 NUMA nodes, 8 cores, 16 PUs"
    assert sum(x.strip().startswith("PU L#") for x in lines) == 16


def test_root_from_environment(tmp_path):
    root = build(tmp_path, Machine(packages=1, cores=3))
    result = CliRunner().invoke(main, ["show", "--json"], env={"TOPO_ROOT": str(root)})
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["pus"] == "0-2" and data["source"]["root"] == str(root)


def test_the_library_reads_this_machine_whatever_topo_root_says(tmp_path, monkeypatch):
    """TOPO_ROOT belongs to the command line (--root); discover() without a root is this machine."""
    monkeypatch.setenv("TOPO_ROOT", str(build(tmp_path, Machine(packages=1, cores=3))))
    assert topo.discover(probes=()).is_this_system


def test_missing_root_is_a_clear_error(tmp_path):
    result = show(tmp_path / "nope")
    assert result.exit_code != 0
    assert "nope" in result.output


# ---- garbage and unreadable files --------------------------------------------------------

GARBAGE = [
    ("sys/devices/system/cpu/online", "zz"),
    ("sys/devices/system/node/node0/distance", "10 2x"),
    ("sys/devices/system/node/node1/cpulist", "4-"),
    ("sys/devices/system/cpu/cpu3/topology/core_id", "abc"),
    ("sys/devices/system/cpu/cpu4/topology/physical_package_id", "0x1g"),  # first CPU of package 1
    ("sys/devices/system/cpu/cpu0/cache/index2/size", "lots"),
    ("sys/devices/system/cpu/cpu5/topology/core_cpus_list", "5,,13"),
    ("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: many kB"),
    ("sys/fs/cgroup/job/cpuset.cpus.effective", "0-3;8"),
    ("sys/bus/pci/devices/0000:3b:00.0/class", "display"),
    ("sys/bus/pci/devices/0000:3b:00.0/local_cpulist", "x"),
]


@pytest.mark.parametrize("rel, content", GARBAGE, ids=[r.split("/", 3)[-1] for r, _ in GARBAGE])
def test_garbage_file_is_an_error_naming_the_file(tmp_path, rel, content):
    pci = [Pci("0000:3b:00.0", "0x030200", numa_node=1, local_cpulist="4-7,12-15")]
    root = build(tmp_path, Machine(**TWO_SOCKETS, pci=pci, cgroup=Cgroup(2, cpus="0-15", mems="0-1")))
    target = root / rel
    assert target.is_file()  # the builder wrote it, so the probe really reads it
    # Remove the hex-mask twins, so that the garbage list is the file read.
    for twin in {"core_cpus_list": "core_cpus", "local_cpulist": "local_cpus",
                 "cpulist": "cpumap"}.items():
        if target.name == twin[0]:
            (target.parent / twin[1]).unlink()
    target.write_text(content + "\n")

    with pytest.raises(ProbeError) as err:
        topo.discover(root)
    assert str(target) in str(err.value)
    assert content.split()[-1][:3] in str(err.value)  # and quotes what it found

    result = show(root, "--json")
    assert result.exit_code == 2  # a root the user named is input
    assert result.stdout == ""
    assert result.stderr.startswith("topo: error: ") and str(target) in result.stderr
    assert "Traceback" not in result.output


def test_unreadable_optional_attribute_counts_as_absent(tmp_path):
    # A sysfs attribute that exists but fails every read (EIO, as some firmware attributes do):
    # discovery goes on as if the file were missing, like hwloc. We are root in CI, so EIO comes
    # from a link to /proc/self/mem (reading its offset 0 always fails) rather than chmod 000.
    root = build(tmp_path, Machine(**TWO_SOCKETS))
    expected = as_json(discover(root))
    for rel in ("sys/devices/system/cpu/online", "sys/devices/system/node/node0/distance",
                "sys/devices/system/cpu/cpu0/cache/index3/size"):
        (root / rel).unlink()
        (root / rel).symlink_to("/proc/self/mem")
        with pytest.raises(OSError):
            (root / rel).read_bytes()
    t = discover(root)
    got = as_json(t)
    assert got["pus"] == expected["pus"] and got["cores"] == expected["cores"]
    assert got["numa_nodes"][0]["distances"] == {}
    assert got["numa_nodes"][1] == expected["numa_nodes"][1]
    assert len(got["caches"]) == len(expected["caches"])  # cpu0's L3 is read again from cpu1


@pytest.mark.parametrize("how", ["directory", "no-permission"])
@pytest.mark.parametrize("rel", ["sys/devices/system/node/node1/distance",
                                 "sys/fs/cgroup/job/cpuset.cpus.effective"])
def test_file_that_refuses_to_be_read_is_an_error_naming_it(tmp_path, rel, how):
    # Present but unreadable for a reason that is not the kernel's (EACCES, EISDIR): dropping it
    # would give a wrong topology (an unreadable cgroup cpuset would allow every CPU).
    root = build(tmp_path, Machine(**TWO_SOCKETS, cgroup=Cgroup(2, cpus="0-7", mems="0")))
    target = root / rel
    if how == "directory":
        target.unlink()
        target.mkdir()
        check_refused(root, target)
        return
    # Root reads a file whatever its mode, and CI runs as root: pyfakefs serves the same tree to
    # a user it treats as unprivileged, so EACCES happens as it does for everyone else.
    topo.discover(root)  # every module discovery imports is loaded from the real filesystem first
    with as_unprivileged_user(root):
        target.chmod(0)
        check_refused(root, target)


@contextlib.contextmanager
def as_unprivileged_user(root: Path):
    """The generated tree under pyfakefs, seen by a user who is not root (uid 1000)."""
    with Patcher() as patcher:
        patcher.fs.add_real_directory(str(root), read_only=False, lazy_read=False)
        set_uid(1000)
        try:
            yield
        finally:
            set_uid(0)


def check_refused(root: Path, target: Path) -> None:
    with pytest.raises(ProbeError) as err:
        topo.discover(root)
    assert str(target) in str(err.value)
    result = show(root)
    assert result.exit_code == 2 and str(target) in result.stderr


def test_unlistable_directory_is_an_error_naming_it(tmp_path):
    root = build(tmp_path, Machine(**TWO_SOCKETS))
    node_dir = root / "sys/devices/system/node"
    node_dir.rename(root / "node.real")
    node_dir.symlink_to(node_dir)  # ELOOP: exists, but cannot be listed
    with pytest.raises(ProbeError) as err:
        topo.discover(root)
    assert str(node_dir) in str(err.value)


# ---- numbers in sysfs are ASCII digits, bounded ------------------------------------------

CPU0_CACHE = "sys/devices/system/cpu/cpu0/cache"


@pytest.mark.parametrize("size", ["32\u212a", "\uff13\uff12K", "9" * 5000 + "K"], ids=["kelvin-sign", "fullwidth",
                                                                                 "5000-digits"])
def test_a_cache_size_is_ascii_digits_of_bounded_length(tmp_path, size):
    # Unicode matching read the Kelvin sign as "K" (then failed on it), fullwidth digits as 32, and
    # gave int() 5000 digits (ValueError): an error naming the file instead.
    root = build(tmp_path, Machine())
    (root / CPU0_CACHE / "index0/size").write_text(size + "\n")
    with pytest.raises(ProbeError) as err:
        topo.discover(root)
    assert f"{root}/{CPU0_CACHE}/index0/size: expected a size like '32K'" in str(err.value)


def test_a_cache_directory_numbered_in_another_script_is_not_a_cache(tmp_path):
    root = build(tmp_path, Machine())
    for cpu in (0, 1):
        base = root / f"sys/devices/system/cpu/cpu{cpu}/cache"
        (base / "index0").rename(base / "index\u0661\u0660")  # Arabic-Indic "10"
    assert {(c.level, c.type) for c in discover(root).caches} == {(1, "instruction"), (2, "unified"), (3, "unified")}


def test_pci_bus_ids_and_classes_are_ascii_hex(tmp_path):
    pci = [Pci("0000:17:00.0", "0x020000"), Pci("0000:0\u0661:00.0", "0x020000")]  # "١": not a bus id
    root = build(tmp_path, Machine(pci=pci))
    assert [d.busid for d in discover(root).pci_devices] == ["0000:17:00.0"]
    (root / "sys/bus/pci/devices/0000:17:00.0/class").write_text("0x02000\u0660\n")
    with pytest.raises(ProbeError, match="0000:17:00.0/class: expected a hex class"):
        topo.discover(root)


def test_os_device_names_sort_by_their_ascii_digit_runs(tmp_path):
    root = build(tmp_path, Machine(pci=[Pci("0000:17:00.0", "0x020000", vendor="0x15b3")]))
    d = root / "sys/bus/pci/devices/0000:17:00.0"
    for sub, name in (("net", "eth1\u00b2"), ("net", "eth0"), ("infiniband", "mlx5_10"), ("infiniband", "mlx5_2")):
        (d / sub / name).mkdir(parents=True)
    (nic,) = discover(root).pci_devices  # int("²") raised ValueError
    assert nic.names == ("mlx5_2", "mlx5_10", "eth0", "eth1\u00b2")


@pytest.mark.parametrize("rel, text, words", [
    ("sys/devices/system/node/node0/distance", "\u0661\u0660\n", "expected integers"),
    ("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: \u0661 kB\n", "malformed MemTotal line"),
    ("sys/devices/system/node/node0/meminfo", f"Node 0 MemTotal: {'9' * 5000} kB\n", "malformed MemTotal line"),
], ids=["distance", "meminfo", "meminfo-5000-digits"])
def test_node_numbers_are_ascii_digits_of_bounded_length(tmp_path, rel, text, words):
    root = build(tmp_path, Machine())
    (root / rel).write_text(text)
    with pytest.raises(ProbeError) as err:
        topo.discover(root)
    assert str(err.value).startswith(f"{root}/{rel}: {words}")
