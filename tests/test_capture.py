"""`topo capture`: one small archive of what discovery reads, which `--root` reads back as the
machine it came from."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from topo.archive import TOOLS, TOOLS_DIR
from sysfs_builder import Machine, Node, build
from topo.capture import capture
from topo.errors import ProbeError
from topo.fsroot import PROCFS_LIMIT, SYSFS_LIMIT, TOOL_OUTPUT_LIMIT
from topo.cli import main

# What must come back the same; source.probes and info say how it was read, and runtime probes
# (NVML, npu-smi) answer only on the live machine.
SAME = ("pus", "allowed_pus", "complete_pus", "online_pus", "allowed_numa_nodes", "packages", "dies",
        "clusters", "numa_nodes", "cores", "caches", "memory_side_caches", "groups", "pci_devices")


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def show_json(*args: str) -> dict:
    result = run("show", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("capture") / "machine.tar.gz"
    result = run("capture", str(path))
    assert result.exit_code == 0, result.output
    assert f"wrote {path}" in result.stdout
    return path


@pytest.mark.parametrize("view", [(), ("--include-disallowed",)], ids=["allowed", "whole"])
def test_round_trip_on_this_machine(captured, view):
    if not view and os.sched_getaffinity(0) != set(range(os.cpu_count() or 1)) - _offline():
        pytest.skip("this process's affinity is narrower than its cgroup: a capture cannot know it")
    live = show_json(*view)
    again = show_json("--root", str(captured), *view)
    for key in SAME:
        assert again[key] == live[key], key
    sysfs_devices = [d for d in live["devices"] if d["source"] == "sysfs"]
    assert [d for d in again["devices"] if d["source"] == "sysfs"] == sysfs_devices
    assert again["source"]["root"] == str(captured)


def _offline() -> set[int]:
    text = Path("/sys/devices/system/cpu/offline").read_text().strip() if Path(
        "/sys/devices/system/cpu/offline").exists() else ""
    from topo.cpuset import CpuSet

    return set(CpuSet.parse(text))


def test_plan_reads_a_capture(captured):
    result = run("plan", "--mode", "exclusive", "--nproc-per-node", "1", "--root", str(captured))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["bind_cpu"]


def test_archive_is_small_bounded_and_private(captured):
    with tarfile.open(captured) as tar:
        members = tar.getmembers()
    names = {m.name for m in members}
    assert captured.stat().st_size < 4 << 20
    for m in members:
        assert m.isfile() or m.isdir() or m.issym(), m.name
        assert not m.name.startswith("/") and ".." not in m.name.split("/")
        parts = set(m.name.split("/")) if m.name != "proc/cmdline" else set()  # the kernel's, not a process's
        assert not parts & {"environ", "cmdline", "mem", "maps", "keys"}, m.name
        assert not m.name.startswith(("etc/", "root/", "home/")), m.name
        limit = SYSFS_LIMIT if m.name.startswith("sys/") else PROCFS_LIMIT
        assert m.size <= max(limit, TOOL_OUTPUT_LIMIT) + 1, m.name
        if m.issym():
            assert not m.linkname.startswith("/"), m.name
    for wanted in ("proc/cmdline", "proc/cpuinfo", "proc/meminfo", "proc/self/status", "proc/self/cgroup",
                   "sys/devices/system/cpu/online", f"{TOOLS_DIR}/README.txt"):
        assert wanted in names or any(n.startswith(wanted) for n in names), wanted
    assert any(n.startswith("sys/devices/system/cpu/cpu0/") for n in names)


def test_tool_outputs_are_stored_under_documented_names(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho \"GPU0 X NV12 args: $*\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    broken = bin_dir / "npu-smi"
    broken.write_text("#!/bin/sh\necho 'dcmi module initialize failed' >&2\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    path = tmp_path / "c.tar.gz"
    notes = capture(path)
    with tarfile.open(path) as tar:
        stored = {m.name: m for m in tar.getmembers()}
        topo_m = tar.extractfile(f"{TOOLS_DIR}/nvidia-smi-topo-m.txt").read().decode()
        readme = tar.extractfile(f"{TOOLS_DIR}/README.txt").read().decode()
    assert topo_m == "GPU0 X NV12 args: topo -m\n"
    assert f"{TOOLS_DIR}/npu-smi-info.txt" not in stored
    assert any("'npu-smi info' failed (exit 3): dcmi module initialize failed" in n for n in notes)
    assert "nvidia-smi-topo-m.txt: nvidia-smi topo -m" in readme
    assert set(TOOLS) >= {"lscpu.txt", "nvidia-smi-topo-m.txt", "npu-smi-info.txt"}


@pytest.mark.parametrize("args, code, words", [
    (["capture", "machine.zip"], 2, "name the archive FILE.tar.gz"),
    (["capture", "/nonexistent/dir/m.tar.gz"], 1, "cannot write /nonexistent/dir/m.tar.gz"),
    (["show", "--root", sys.executable], 2, "not a topo capture archive"),
])
def test_errors_are_one_line(args, code, words):
    result = run(*args)
    assert result.exit_code == code
    assert result.stderr.startswith("topo: error: ") and words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


SYSFS = Path(__file__).parent / "fixtures" / "sysfs"


# One machine per kind of file discovery follows: PCI bridges (config space) and DAX, a cgroup,
# offline CPUs, memory-side caches, GPU memory nodes, initiators, ARM clusters.
ROUND_TRIP = ["40intel64-2g2n4c+pcilocality", "32em64t-2n8c+dax+nvme+mic+dimms", "32amd64-4s2n4c-cgroup2",
              "16em64t-4s2c2t-offlines", "memorysidecaches", "nvidiagpunumanodes",
              "fakememinitiators-1np2c+1npp+gi", "128arm-2pa2n8cluster4co"]


@pytest.mark.parametrize("tarball", [f"{name}.tar.bz2" for name in ROUND_TRIP])
def test_round_trip_of_captured_machines(hwloc_roots, tmp_path, tarball):
    # Capturing a root records what discovery reads there: read back, it is the same machine,
    # PCI bridges (config space), cgroups, offline CPUs and memory-only nodes included.
    import topo

    root = hwloc_roots.root(tarball)
    path = tmp_path / "again.tar.gz"
    capture(path, root=root)
    for view in ({}, {"include_disallowed": True}):
        want, got = topo.discover(root, **view).to_dict(), topo.discover(path, **view).to_dict()
        for data in (want, got):
            source = data.pop("source")  # the root, and file names in the probes' notes, differ
            data["probes"] = {k: re.sub(r"\S*/sys/\S*", "FILE", v) for k, v in source["probes"].items()}
        assert got == want


def test_planted_links_are_never_followed(tmp_path):
    # A link at DEST, and at the name the capture once used for its temporary file, both pointing
    # at a file of someone else's: the archive replaces the link at DEST, the target is untouched,
    # and the temporary file is a new one of its own (O_EXCL|O_NOFOLLOW), renamed away.
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    dest = tmp_path / "out" / "m.tar.gz"
    dest.parent.mkdir()
    dest.symlink_to(victim)
    old_tmp = dest.parent / f"m.tar.gz.tmp{os.getpid()}"
    old_tmp.symlink_to(victim)
    capture(dest, run_tools=False)
    assert victim.read_text() == "untouched\n"
    assert not dest.is_symlink() and tarfile.is_tarfile(dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == sorted([dest.name, old_tmp.name])
    assert os.readlink(old_tmp) == str(victim)


def test_a_failed_capture_leaves_no_temporary_file(tmp_path):
    dest = tmp_path / "m.tar.gz"
    dest.mkdir()  # the rename onto it fails
    with pytest.raises(ProbeError, match=f"cannot write {dest}"):
        capture(dest, run_tools=False)
    assert [p.name for p in tmp_path.iterdir()] == ["m.tar.gz"] and list(dest.iterdir()) == []


def test_fake_numa_machine_replays_the_same(tmp_path):
    # numa=fake= is read from /proc/cmdline; a capture without it replayed overlapping nodes as
    # "ignored". The kernel's numa= options are stored, nothing else of its command line (on a
    # cloud host: orchestration addresses, ports and flags), and the replay is the same machine.
    import topo

    nodes = [Node("0-1,4-5"), Node("0-1,4-5"), Node("2-3,6-7"), Node("2-3,6-7")]
    root = build(tmp_path, Machine(packages=2, cores=2, threads=2, caches=False, nodes=nodes,
                                   cmdline="ro ip=10.1.2.3::10.1.2.1 numa=fake=2U agent.token=s3cret"))
    path = tmp_path / "fake.tar.gz"
    capture(path, root=root)
    with tarfile.open(path) as tar:
        assert tar.extractfile("proc/cmdline").read() == b"numa=fake=2U\n"
    want, got = topo.discover(root), topo.discover(path)
    assert got.numa_nodes == want.numa_nodes and len(got.numa_nodes) == 4
    assert "ignored" not in got.probes["sysfs"]


def test_a_gpu_host_replays_with_nvmls_devices_and_fields(tmp_path, monkeypatch):
    """NVML's facts (name, UUID, memory, NUMA and CPU affinity, links, MIG devices) are stored in the
    capture and read back: the replay has the live machine's devices and link matrix, NVML unasked."""
    import machines
    from test_set_affinity_names import described, fake_pynvml  # tests/fakes joins sys.path there
    from topo.discovery import discover

    m = machines.dgx_h100()
    root = machines.build(m, tmp_path / "root")
    nvml = described(m)  # UUIDs, and two MIG devices on the last GPU
    for gpu in nvml["gpus"]:
        gpu["memory"] = 150 << 30
    nvml["gpus"][0]["nvlinks"] = [[nvml["gpus"][1]["busid"], 18]]
    nvml["gpus"][1]["nvlinks"] = [[nvml["gpus"][0]["busid"], 18]]
    nvml["pcie"] = {"2,3": 20, "3,2": 20}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    fake_pynvml.load(nvml)
    live = discover(root, live_probes=True)
    path = tmp_path / "gpu.tar.gz"
    capture(path, root=root, live_probes=True)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the replay asks no NVML: importing it fails
    again = discover(path)
    assert again.devices == live.devices and again.links == live.links
    assert again.probes["nvml"] == live.probes["nvml"] + ", as stored by topo capture"
    gpus = [d for d in again.devices if d.kind == "gpu"]
    assert len(gpus) == 8 and all(d.source == "nvml" and d.uuid and d.name and d.memory for d in gpus)
    assert [d.uuid for d in again.devices if d.kind == "mig"] == nvml["gpus"][-1]["mig"]
    assert again.links["GPU0"]["GPU1"] == "NV18" and again.links["GPU2"]["GPU3"] == "PXB"
    with tarfile.open(path) as tar:
        assert "nvml.json: what NVML said" in tar.extractfile(f"{TOOLS_DIR}/README.txt").read().decode()


@pytest.mark.parametrize("stored", ['{"gpus": [{"index": true}]}', "[" * 100_000, '{"gpus": []}',
                                    '{"status": "ok\\u001b[2J", "gpus": [], "pcie_levels": []}'])
def test_a_malformed_stored_nvml_report_is_a_status_not_a_crash(tmp_path, stored):
    from topo.discovery import discover

    root = build(tmp_path, Machine(packages=1, cores=2, threads=1))
    (root / TOOLS_DIR).mkdir()
    (root / TOOLS_DIR / "nvml.json").write_text(stored)
    status = discover(root).probes["nvml"]
    assert status.startswith(f"error: {root}/{TOOLS_DIR}/nvml.json: ") and "\n" not in status, status


def test_stored_npu_smi_outputs_are_read_back(tmp_path):
    """A capture of an Ascend host replays npu-smi's chips from the outputs it stored."""
    import machines
    from samples import sample
    from test_devices_machines import _chip_map
    from topo.discovery import discover

    root = machines.build(machines.kunpeng_ascend(machines.ATLAS800_910B3_BUSIDS, "x"), tmp_path / "root")
    assert discover(root).probes["npu-smi"] == "off: not this system"
    (root / TOOLS_DIR).mkdir()
    (root / TOOLS_DIR / "npu-smi-info.txt").write_text(sample("ascend/npu-smi-info_atlas800tA2-8x910B3_kunpeng.txt"))
    (root / TOOLS_DIR / "npu-smi-info-m.txt").write_text(_chip_map(8))
    t = discover(root)
    assert t.probes["npu-smi"] == "ok (8 NPUs); 'info -t topo': 'npu-smi info -t topo': not in the capture"
    npus = [d for d in t.devices if d.kind == "npu"]
    assert [(d.index, d.busid, d.source) for d in npus][:2] == [(0, "0000:c1:00.0", "npu-smi"),
                                                                (1, "0000:c2:00.0", "npu-smi")]
    assert len(npus) == 8 and all(d.name == "Ascend 910B3" for d in npus)
