"""`topo show` on the machine the tests run on, checked against /sys and sched_getaffinity."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lstopo_oracle import LSTOPO, needs_lstopo
from topo.cpuset import CpuSet

SYS_CPU = Path("/sys/devices/system/cpu")
SYS_NODE = Path("/sys/devices/system/node")

pytestmark = pytest.mark.skipif(not SYS_CPU.is_dir() or not hasattr(os, "sched_getaffinity"),
                                reason="needs Linux sysfs and sched_getaffinity")


def run_topo(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "TOPO_ROOT"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "topo", *args], capture_output=True, text=True,
                          env=full_env, timeout=60)


def expected_pus() -> CpuSet:
    """Online CPUs with a topology entry that this process may run on (the cgroup cpuset is
    already folded into the affinity mask by the kernel)."""
    online = CpuSet.parse((SYS_CPU / "online").read_text())
    with_topology = CpuSet(c for c in online if (SYS_CPU / f"cpu{c}/topology").is_dir())
    return with_topology & CpuSet(os.sched_getaffinity(0))


def expected_packages(pus: CpuSet) -> set[int]:
    return {int((SYS_CPU / f"cpu{c}/topology/physical_package_id").read_text()) for c in pus}


def expected_nodes() -> set[int]:
    if not SYS_NODE.is_dir():
        return {0}
    return {int(p.name[4:]) for p in SYS_NODE.glob("node[0-9]*")}


@pytest.fixture(scope="module")
def live_json() -> dict:
    result = run_topo("show", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_live_pus_packages_and_nodes(live_json):
    pus = expected_pus()
    assert live_json["pus"] == pus.to_list()
    assert live_json["allowed_pus"] == pus.to_list()
    assert {p["os_index"] for p in live_json["packages"]} == expected_packages(pus)
    assert {n["os_index"] for n in live_json["numa_nodes"]} <= expected_nodes()
    assert CpuSet.parse(live_json["allowed_numa_nodes"]) <= CpuSet(expected_nodes())
    assert live_json["source"]["root"] == "/"
    assert live_json["source"]["probes"]["sysfs"].startswith("ok")
    assert live_json["source"]["probes"]["affinity"] == "ok"
    # every allowed PU sits in exactly one core and one package
    cores = [CpuSet.parse(c["cpuset"]) for c in live_json["cores"]]
    assert sum(c.weight() for c in cores) == pus.weight()
    assert sum(c.mask for c in cores) == pus.mask


def test_live_long_form_tree_and_summary(live_json):
    result = run_topo("show", "--long")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    pus = expected_pus()
    assert lines[0].startswith(f"Machine ({os.uname().machine} {os.uname().nodename}")
    assert sum(line.strip().startswith("PU L#") for line in lines) == pus.weight()
    for pu in pus:
        assert any(line.strip().endswith(f"(P#{pu})") and "PU L#" in line for line in lines)
    npkg, nnode = len(live_json["packages"]), len(live_json["numa_nodes"])
    summary = lines[-2]
    assert summary.startswith(f"{npkg} package{'s' * (npkg != 1)}, {nnode} NUMA node{'s' * (nnode != 1)}, ")
    assert f"{pus.weight()} PU" in summary
    assert lines[-1].startswith("probes: sysfs: ok")


def test_live_console_form_shows_each_pu_once():
    result = run_topo("show")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Machine")
    shown = [int(p) for p in re.findall(r"PU L#\d+ \(P#(\d+)\)", result.stdout)]
    assert sorted(shown) == list(expected_pus())


def _comparable(text: str) -> list[str]:
    """Console lines with the memory sizes of the machine and its NUMA nodes left out: the free
    memory of a VM changes between two runs (ballooning), and so does its total."""
    return [re.sub(r"\d+[KMGT]B( total)?\)", "SIZE)", x) if x.lstrip().startswith(("Machine", "NUMANode"))
            or " + NUMANode" in x else x for x in text.splitlines()]


@needs_lstopo
@pytest.mark.parametrize("args", [[], ["-p"], ["-l"]])
def test_live_console_form_is_lstopos(args):
    if set(os.sched_getaffinity(0)) != set(CpuSet.parse((SYS_CPU / "online").read_text())):
        pytest.skip("this process is bound to some CPUs: topo leaves the others out, lstopo does not")
    # The view pinned: no OS devices of GPU runtimes (topo's from NVML, lstopo's from its plugins,
    # whichever it was built with); test_live_gpus_known_from_nvml_* checks topo's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
    env["HWLOC_COMPONENTS"] = "-cuda,-nvml,-opencl,-levelzero,-rsmi,-gl"
    theirs = subprocess.run([LSTOPO, *args], capture_output=True, text=True, env=env, timeout=60)
    ours = run_topo("show", "--probes", "sysfs", *args)
    assert ours.returncode == 0, ours.stderr
    expected = _comparable(theirs.stdout)
    if "-p" in args:  # caches have no P# in topo (the sysfs cache `id` is not read)
        expected = [re.sub(r"\b(L\d[di]?) P#\d+", r"\1", x) for x in expected]
    assert _comparable(ours.stdout) == expected


def test_live_gpus_known_from_nvml_show_their_cuda_and_nvml_os_devices():
    import topo

    gpus = [d for d in topo.discover().devices if d.kind == "gpu" and d.source == "nvml"]
    if not gpus:
        pytest.skip("no GPU of this machine answers NVML")
    lines = [x.strip() for x in run_topo("show").stdout.splitlines()]
    for gpu in gpus:
        at = next(i for i, x in enumerate(lines) if x.startswith("PCI ") and x.split()[1] in (gpu.busid, gpu.busid[5:]))
        assert lines[at + 1:at + 3] == [f'CoProc(CUDA) "cuda{gpu.index}"', f'GPU(NVML) "nvml{gpu.index}"']


def test_live_show_matches_library(live_json):
    import topo

    data = json.loads(json.dumps(topo.discover().to_dict()))
    for key in ("pus", "allowed_pus", "allowed_numa_nodes", "packages", "numa_nodes", "cores", "caches"):
        assert data[key] == live_json[key], key


# The keys (and their element keys) of `topo show --json` that other programs rely on.
TOP_KEYS = {"schema", "source", "pus", "allowed_pus", "allowed_numa_nodes", "packages", "dies", "clusters",
            "numa_nodes", "cores", "caches", "pci_devices", "devices"}
ELEMENT_KEYS = {
    "packages": {"os_index", "cpuset"},
    "dies": {"os_index", "package", "cpuset"},
    "clusters": {"os_index", "package", "cpuset"},
    "numa_nodes": {"os_index", "cpuset", "local_memory", "memory_only", "locality", "distances"},
    "cores": {"os_index", "package", "cpuset"},
    "caches": {"level", "type", "size", "cpuset"},
    "pci_devices": {"busid", "class", "id", "numa_node", "local_cpus"},
    "devices": {"kind", "vendor", "index", "busid", "numa_node", "local_cpus", "name", "uuid"},
}
CPULIST_FIELDS = {"cpuset", "locality", "local_cpus"}


def test_json_schema_keys(live_json):
    data = live_json
    assert TOP_KEYS <= set(data)
    assert data["schema"] == "topo.topology/1"
    assert set(data["source"]) >= {"root", "probes"} and isinstance(data["source"]["probes"], dict)
    for key in ("pus", "allowed_pus", "allowed_numa_nodes"):
        assert CpuSet.parse(data[key]).to_list() == data[key]  # sorted, compacted cpulist
    assert data["packages"] and data["numa_nodes"] and data["cores"]
    for key, wanted in ELEMENT_KEYS.items():
        assert isinstance(data[key], list), key
        for element in data[key]:
            assert wanted <= set(element), (key, wanted - set(element))
            for f in CPULIST_FIELDS & set(element):
                assert CpuSet.parse(element[f]).to_list() == element[f], (key, f)
    for node in data["numa_nodes"]:
        assert isinstance(node["local_memory"], int) and isinstance(node["memory_only"], bool)
        assert all(k.isdigit() and isinstance(v, int) for k, v in node["distances"].items())
    for cache in data["caches"]:
        assert cache["type"] in ("data", "instruction", "unified") and cache["size"] > 0
    for dev in data["pci_devices"]:
        assert len(dev["busid"]) == 12 and len(dev["class"]) == 4 and len(dev["id"]) == 9
        assert dev["numa_node"] is None or isinstance(dev["numa_node"], int)


# ---- no heavy imports --------------------------------------------------------------------

FAKE_MODULE = (
    "import os\n"
    "with open(os.environ['TOPO_IMPORT_MARKER'], 'a') as f:\n"
    "    f.write(__name__ + '\\n')\n"
    "raise ImportError('stand-in ' + __name__ + ' for the import test')\n"
)


@pytest.fixture
def import_spy(tmp_path):
    """PYTHONPATH with stand-in numpy and pynvml that record being imported (then fail, as if
    absent), so the test detects an import whether or not the real packages are installed."""
    mods = tmp_path / "mods"
    (mods / "numpy").mkdir(parents=True)
    (mods / "numpy/__init__.py").write_text(FAKE_MODULE)
    (mods / "pynvml.py").write_text(FAKE_MODULE)
    marker = tmp_path / "imported.txt"
    env = {"PYTHONPATH": os.pathsep.join([str(mods), os.environ.get("PYTHONPATH", "")]),
           "TOPO_IMPORT_MARKER": str(marker)}

    def imported(*args: str) -> list[str]:
        marker.unlink(missing_ok=True)
        result = run_topo(*args, env=env)
        assert result.returncode == 0, result.stderr
        return marker.read_text().split() if marker.exists() else []

    # the spy works: importing numpy through it is recorded
    probe = subprocess.run([sys.executable, "-c", "import numpy"], env={**os.environ, **env},
                           capture_output=True, text=True)
    assert probe.returncode != 0 and marker.read_text().split() == ["numpy"]
    return imported


def has_nvidia_pci() -> bool:
    return any(p.read_text().strip() == "0x10de" for p in Path("/sys/bus/pci/devices").glob("*/vendor"))


def test_show_does_not_import_numpy(import_spy):
    assert "numpy" not in import_spy("show")
    assert "numpy" not in import_spy("show", "--json")


def test_show_does_not_import_pynvml_without_nvidia_devices(import_spy):
    if has_nvidia_pci():
        pytest.skip("this machine has an NVIDIA device: importing pynvml is needed")
    assert "pynvml" not in import_spy("show", "--json")


def test_show_from_a_root_imports_neither(import_spy, tmp_path):
    from sysfs_builder import Machine, Pci, build

    root = build(tmp_path, Machine(pci=[Pci("0000:3b:00.0", "0x030200", local_cpulist="0-1")]))
    assert import_spy("show", "--json", "--root", str(root)) == []
