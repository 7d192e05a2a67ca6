"""End to end: `topo show --json` on GPU and NPU servers built from captured tool outputs.

Each machine is a generated sysfs root (tests/machines.py) plus its runtime tool: the fake pynvml
answering what the captured `nvidia-smi` / `topo -m` say, or the fake npu-smi printing the captured
`npu-smi` tables. The assertions are the captures' own numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import machines
from samples import parse_smi_q, parse_topo_m, sample
from topo.cli import main as cli
from topo.cli.machine import REPLAY_ENV

FAKES = Path(__file__).parent / "fakes"
sys.path.insert(0, str(FAKES))
import fake_pynvml  # noqa: E402


@pytest.fixture(scope="module")
def machine_root(tmp_path_factory):
    """Each generated machine is written once per module; tests only read it."""
    built: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in built:
            built[name] = machines.build(machines.MACHINES[name](), tmp_path_factory.mktemp(name))
        return built[name]
    return make


@pytest.fixture
def replay(monkeypatch, tmp_path):
    """Run the live device probes against a --root, with fake tools."""
    monkeypatch.setenv(REPLAY_ENV, "1")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no npu-smi unless a test adds the fake

    def nvml(description: dict | None) -> None:
        if description is None:
            monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: library absent
        else:
            fake_pynvml.load(description)
            monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)

    def npu_smi(outputs: dict[str, str]) -> None:
        d = tmp_path / "npu-smi-outputs"
        d.mkdir()
        for args, text in outputs.items():
            (d / args).write_text(text)
        monkeypatch.setenv("FAKE_NPU_SMI_DIR", str(d))
        monkeypatch.setenv("PATH", f"{FAKES}:{Path(sys.executable).parent}:/usr/bin:/bin")  # python3 for the fake

    return nvml, npu_smi


def show(root: Path, *extra: str) -> dict:
    result = CliRunner().invoke(cli, ["show", "--root", str(root), "--json", *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def nvml_from_topo_m(root_machine: machines.Machine, topo_m: dict, links: int, name: str) -> dict:
    """The fake NVML of a machine whose `nvidia-smi topo -m` was captured: affinities and NUMA
    nodes from its columns, NVLinks into an NVSwitch fabric (`links` per GPU, NV# in the capture)."""
    busids = sorted(ep.busid for cx in root_machine.complexes for ep in machines.endpoints(cx.child)
                    if ep.vendor == "10de")
    switches = [f"0000:{0xe4 + s:02x}:00.0" for s in range(6)]
    gpus = []
    for i, busid in enumerate(busids):
        node = topo_m["numa"][f"GPU{i}"]
        socket_nodes = {root_machine.cpu(c)[2] for c in range(root_machine.ncpus)
                        if root_machine.cpu(c)[0] == root_machine.cpu(_first_cpu(root_machine, node))[0]}
        socket_cpus = [c for c in range(root_machine.ncpus) if root_machine.cpu(c)[2] in socket_nodes]
        per_switch, extra = divmod(links, len(switches))
        gpus.append({
            "busid": busid, "uuid": f"GPU-{i:08x}-0000-1111-2222-{busid[5:7]}{busid[8:10]}00000000",
            "name": name, "memory": 80 << 30, "numa_node": node,
            "node_cpus": topo_m["cpus"][f"GPU{i}"], "socket_cpus": machines._cpulist(socket_cpus),
            "nvlinks": [[s, per_switch + (1 if k < extra else 0)] for k, s in enumerate(switches)],
        })
    return {"gpus": gpus}


def _first_cpu(m: machines.Machine, node: int) -> int:
    return next(c for c in range(m.ncpus) if m.cpu(c)[2] == node)


TOPO_M = {
    "dgx-a100": ("nvidia/topo-m_dgx-a100-8gpu_epyc-nps4.txt", 12, "NVIDIA A100-SXM4-80GB"),
    "hgx-h200-xeon": ("nvidia/topo-m_hgx-h200-8gpu_xeon-2numa.txt", 18, "NVIDIA H200"),
    "h200-epyc": ("nvidia/topo-m_h200-8gpu_2x-epyc9534-nps1.txt", 18, "NVIDIA H200"),
}


def test_topo_m_underlined_by_driver_580_reads_as_plain():
    """Driver 580 wraps the header in ESC[4m ... ESC[0m even when piped; tests/gpu compares every cell."""
    topo_m = parse_topo_m(sample("nvidia/topo-m_h200-1gpu_driver580-escape-codes.txt"))
    assert topo_m == {"matrix": {"GPU0": {"GPU0": "X"}}, "cpus": {"GPU0": "0-15"}, "numa": {"GPU0": 0}}


@pytest.mark.parametrize("name", sorted(TOPO_M))
def test_gpu_server_matches_its_topo_m(machine_root, replay, name):
    path, links, model = TOPO_M[name]
    topo_m = parse_topo_m(sample(path))
    root = machine_root(name)
    nvml, _ = replay
    nvml(nvml_from_topo_m(machines.MACHINES[name](), topo_m, links, model))

    data = show(root)

    gpus = [d for d in data["devices"] if d["kind"] == "gpu"]
    assert [g["index"] for g in gpus] == list(range(8))
    for g in gpus:
        assert g["source"] == "nvml"
        assert g["numa_node"] == topo_m["numa"][f"GPU{g['index']}"]
        assert g["local_cpus"] == topo_m["cpus"][f"GPU{g['index']}"]
        assert g["uuid"].startswith("GPU-") and g["name"] == model and g["memory"] == 80 << 30
    # the whole matrix, GPUs and RDMA NICs, as nvidia-smi printed it
    assert data["links"] == topo_m["matrix"]
    assert data["source"]["probes"]["nvml"] == "ok (8 GPUs)"
    assert data["source"]["probes"]["npu-smi"] == "unavailable: npu-smi not found on PATH"


def test_dgx_a100_gpus_at_their_numa_nodes_in_the_text_view(machine_root, replay):
    """On a DGX A100, GPU0/1 sit on node 3 with CPUs 48-63,176-191; the link matrix is printed too."""
    path, links, model = TOPO_M["dgx-a100"]
    topo_m = parse_topo_m(sample(path))
    nvml, _ = replay
    nvml(nvml_from_topo_m(machines.dgx_a100(), topo_m, links, model))
    root = machine_root("dgx-a100")
    data = show(root)
    node3 = next(n for n in data["numa_nodes"] if n["os_index"] == 3)
    assert node3["cpuset"] == "48-63,176-191"
    assert [d["index"] for d in data["devices"] if d["kind"] == "gpu" and d["numa_node"] == 3] == [0, 1]

    text = CliRunner().invoke(cli, ["show", "--root", str(root), "--long"]).output
    block = text.split("NUMANode L#3 (P#3")[1].split("NUMANode")[0]
    assert "GPU 0 (NVIDIA A100-SXM4-80GB 0000:07:00.0)" in block
    assert "GPU 1 (NVIDIA A100-SXM4-80GB 0000:0f:00.0)" in block
    assert "NIC 0 (mlx5_0 0000:0c:00.0)" in block
    matrix_row = next(line for line in text.splitlines() if line.startswith("GPU0 "))
    assert matrix_row.split()[:3] == ["GPU0", "X", "NV12"] and matrix_row.split()[9] == "PXB"
    assert "8 GPUs" in text and "nvml: ok (8 GPUs)" in text


def test_dgx_a100_without_nvml_still_places_gpus_from_sysfs(machine_root, replay):
    """No NVML: devices from sysfs in PCI bus order, same NUMA nodes and CPUs; PCIe levels only."""
    nvml, _ = replay
    nvml(None)
    data = show(machine_root("dgx-a100"))
    topo_m = parse_topo_m(sample(TOPO_M["dgx-a100"][0]))
    gpus = [d for d in data["devices"] if d["kind"] == "gpu"]
    assert [(g["index"], g["numa_node"], g["local_cpus"], g["source"]) for g in gpus] == [
        (i, topo_m["numa"][f"GPU{i}"], topo_m["cpus"][f"GPU{i}"], "sysfs") for i in range(8)]
    assert data["source"]["probes"]["nvml"].startswith("unavailable: pynvml is not installed")
    assert data["links"]["GPU0"]["GPU1"] == "PXB" and data["links"]["GPU0"]["GPU2"] == "SYS"
    assert data["links"]["GPU0"]["mlx5_0"] == "PXB"
    # the management port is a NIC device but not in the RDMA matrix
    assert any(d["kind"] == "nic" and d["name"] == "eno1" for d in data["devices"])
    assert "eno1" not in data["links"]


def test_captured_root_runs_no_live_probe(machine_root):
    data = show(machine_root("dgx-a100"))
    assert data["source"]["probes"]["nvml"] == "off: not this system"
    assert data["source"]["probes"]["npu-smi"] == "off: not this system"
    assert len([d for d in data["devices"] if d["kind"] == "gpu"]) == 8


def test_dgx_h100_nvml_identity_from_nvidia_smi_q(machine_root, replay, monkeypatch):
    """UUIDs, names and memory as the captured `nvidia-smi -q` has them; CUDA_VISIBLE_DEVICES by UUID."""
    captured = parse_smi_q(sample("nvidia/nvidia-smi-q_hgx-h100-8gpu.txt"))
    m = machines.dgx_h100()
    node_cpus = {0: "0-55,112-167", 1: "56-111,168-223"}
    nvml, _ = replay
    nvml({"gpus": [dict(g, numa_node=i // 4, node_cpus=node_cpus[i // 4], socket_cpus=node_cpus[i // 4],
                        nvlinks=[["0000:e4:00.0", 18]])
                   for i, g in enumerate(captured)]})
    root = machine_root("dgx-h100")
    data = show(root)
    gpus = [d for d in data["devices"] if d["kind"] == "gpu"]
    assert [(g["busid"], g["uuid"], g["memory"]) for g in gpus] == [
        (c["busid"], c["uuid"], c["memory"]) for c in captured]
    assert [g["numa_node"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(row[peer] == "NV18" for name, row in data["links"].items() for peer in row if peer != name)
    assert len(m.complexes) == 8

    import topo
    from topo.visible import visible_devices

    topology = topo.discover(root, live_probes=True)
    picked = visible_devices(topology, env={"CUDA_VISIBLE_DEVICES": "GPU-2d50,GPU-b42d"})
    assert [(d.index, d.busid) for d in picked] == [(2, "0000:3a:00.0"), (0, "0000:18:00.0")]


def _chip_map(npus: int) -> str:
    """`npu-smi info -m` as MindSpore's parser expects it (no verbatim capture exists, INDEX.md):
    one row per chip, an Mcu row per board with `-` as its logic id."""
    rows = ["        NPU ID                         Chip ID                        Chip Logic ID                  Chip Name"]
    for n in range(npus):
        rows.append(f"        {n:<31}0                              {n:<31}Ascend 910B3")
        rows.append(f"        {n:<31}1                              -                              Mcu")
    return "\n".join(rows) + "\n"


def test_atlas800_npus_from_npu_smi_info(machine_root, replay):
    """910B3 host: bus ids from the captured `npu-smi info`, nodes from sysfs (no topo capture)."""
    nvml, npu_smi = replay
    nvml({"init_error": "Driver Not Loaded"})
    npu_smi({
        "info.txt": sample("ascend/npu-smi-info_atlas800tA2-8x910B3_kunpeng.txt"),
        "info_-m.txt": _chip_map(8),
    })
    data = show(machine_root("atlas800-910b3"))
    npus = [d for d in data["devices"] if d["kind"] == "npu"]
    expected_bus = ["0000:c1:00.0", "0000:c2:00.0", "0000:81:00.0", "0000:82:00.0",
                    "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"]
    assert [(d["index"], d["busid"]) for d in npus] == list(enumerate(expected_bus))
    # NPU0/1 on bus c1/c2 -> node 6 (CPUs 144-167); NPU4/5 on 01/02 -> node 0 (0-23)
    assert [d["numa_node"] for d in npus] == [6, 6, 4, 4, 0, 0, 2, 2]
    assert npus[0]["local_cpus"] == "144-167" and npus[4]["local_cpus"] == "0-23"
    assert all(d["name"] == "Ascend 910B3" and d["source"] == "npu-smi" for d in npus)
    probes = data["source"]["probes"]
    assert probes["npu-smi"].startswith("ok (8 NPUs); 'info -t topo': 'npu-smi info -t topo' failed (exit 1)")
    # no NVIDIA PCI function on an Ascend host: NVML is not even loaded
    assert probes["nvml"] == "unavailable: no NVIDIA PCI function in sysfs (--probes nvml asks NVML anyway)"


def test_kunpeng_910b1_elided_table_board_fallback_and_topo(machine_root, replay):
    """The 910B1 capture lists only NPUs 0, 1, 7: the others' bus ids come from `-t board`
    (both spellings), their CPUs from the captured `-t topo`."""
    board = {2: "0000:C2:00.0", 3: "0000:02:00.0", 4: "0000:81:00.0", 5: "0000:41:00.0", 6: "0000:82:00.0"}
    outputs = {
        "info.txt": sample("ascend/npu-smi-info_kunpeng920-8x910B1_elided.txt"),
        "info_-m.txt": _chip_map(8),
        "info_-t_topo.txt": sample("ascend/npu-smi-info-t-topo_kunpeng920-8x910B1.txt"),
    }
    for n, bus in board.items():
        key = "PCIe Bus Info" if n % 2 else "PCIeBusInfo"
        outputs[f"info_-t_board_-i_{n}_-c_0.txt"] = (
            f"        NPU ID                         : {n}\n        Chip ID                        : 0\n"
            f"        {key:<31}: {bus}\n        Slot ID                        : {n}\n")
    nvml, npu_smi = replay
    nvml(None)
    npu_smi(outputs)
    data = show(machine_root("kunpeng-910b1"))
    npus = {d["index"]: d for d in data["devices"] if d["kind"] == "npu"}
    affinity = {0: "144-167", 1: "0-23", 2: "144-167", 3: "0-23", 4: "96-119", 5: "48-71", 6: "96-119", 7: "48-71"}
    assert {i: d["local_cpus"] for i, d in npus.items()} == affinity
    assert {i: d["numa_node"] for i, d in npus.items()} == {0: 6, 1: 0, 2: 6, 3: 0, 4: 4, 5: 2, 6: 4, 7: 2}
    assert npus[5]["busid"] == "0000:41:00.0"
    assert data["links"]["NPU0"]["NPU7"] == "HCCS" and data["links"]["NPU3"]["NPU3"] == "X"
    assert data["source"]["probes"]["npu-smi"] == "ok (8 NPUs)"


def test_amd_gpus_from_sysfs_match_rocm_smi(machine_root, monkeypatch):
    """No AMD runtime probe: sysfs alone places the GPUs where `rocm-smi --showtoponuma` says,
    and HIP_VISIBLE_DEVICES picks by bus order."""
    import re

    numa = {int(g): int(n) for g, n in re.findall(r"GPU\[(\d+)\]\s+: \(Topology\) Numa Node: (\d+)",
                                                  sample("amd/rocm-smi-showtoponuma_8gpu-2numa.txt"))}
    root = machine_root("amd-8gpu")
    data = show(root)
    gpus = [d for d in data["devices"] if d["kind"] == "gpu"]
    assert {g["index"]: g["numa_node"] for g in gpus} == numa
    assert all(g["vendor"] == "amd" and g["source"] == "sysfs" for g in gpus)

    import topo
    from topo.visible import visible_devices

    picked = visible_devices(topo.discover(root, live_probes=True), env={"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1"})
    assert [(d.index, d.busid, d.numa_node) for d in picked] == [(5, "0000:95:00.0", 1)]


def test_json_roundtrip_keeps_devices_and_links(machine_root, replay, tmp_path):
    """What `topo plan --topology FILE` reads back is what `topo show --json` wrote."""
    import topo

    path, links, model = TOPO_M["dgx-a100"]
    nvml, _ = replay
    nvml(nvml_from_topo_m(machines.dgx_a100(), parse_topo_m(sample(path)), links, model))
    data = show(machine_root("dgx-a100"))
    saved = tmp_path / "dgx.json"
    saved.write_text(json.dumps(data))
    again = topo.load_topology(saved)
    assert again.to_dict() == data
    assert again.devices[0].socket_cpus.to_list() == "0-63,128-191"


@pytest.mark.parametrize("name", sorted(machines.MACHINES))
def test_generated_machines_pass_the_topology_check(machine_root, name):
    import topo

    t = topo.discover(machine_root(name))
    t.check()
    accelerators = [d for d in t.devices if d.kind in ("gpu", "npu")]
    assert len(accelerators) == 8 and all(d.numa_node is not None for d in accelerators)
