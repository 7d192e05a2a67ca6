"""The device layer piece by piece: PCI classification, PCIe link levels, merging runtime devices
with sysfs, and how the NVML and npu-smi probes degrade (no library, no driver, a bad GPU, a
hanging or failing npu-smi, output that does not parse)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import machines
import topo
from samples import sample
from topo.cpuset import CpuSet
from topo.errors import ParseError, ProbeError
from topo.model import Device, PciDevice
from topo.probes import devices, npusmi, nvml
from topo.probes.devices import classify, merge_runtime, pci_link_level

FAKES = Path(__file__).parent / "fakes"
sys.path.insert(0, str(FAKES))
import fake_pynvml  # noqa: E402


def pci(class_id: str, vendor: str) -> PciDevice:
    return PciDevice("0000:01:00.0", class_id, vendor, "0000", 0, CpuSet([0]))


@pytest.mark.parametrize("class_id, vendor, kind", [
    ("0302", "10de", "gpu"),  # NVIDIA 3D controller (A100, H100)
    ("0300", "10de", "gpu"),  # NVIDIA VGA (workstation cards)
    ("0380", "1002", "gpu"),  # AMD Instinct MI100/MI200
    ("1200", "1002", "gpu"),  # AMD Instinct MI300 reports a processing accelerator
    ("0380", "8086", "gpu"),  # Intel Data Center GPU Max
    ("0300", "8086", None),  # Intel integrated graphics
    ("0300", "1a03", None),  # ASPEED BMC VGA
    ("1200", "19e5", "npu"),  # Ascend 910B
    ("1200", "1da3", "accel"),  # Habana Gaudi
    ("0b40", "8086", "accel"),  # Xeon Phi co-processor
    ("0207", "15b3", "nic"),  # ConnectX InfiniBand
    ("0200", "8086", "nic"),  # Ethernet
    ("0c06", "1077", "nic"),  # QLogic InfiniBand (class serial bus)
    ("0108", "144d", "nvme"),
    ("0106", "8086", None),  # SATA controller
    ("0c03", "8086", None),  # USB
])
def test_classify(class_id, vendor, kind):
    assert classify(pci(class_id, vendor)) == kind


SWITCH = ("pci0000:00", ("0000:00:01.0", "0000:01:00.0"))


@pytest.mark.parametrize("a, b, numa, level", [
    # two functions of one card below one root port
    (("pci0000:00", ("0000:00:01.0",)), ("pci0000:00", ("0000:00:01.0",)), (0, 0), "PIX"),
    # two downstream ports of one switch
    (("pci0000:00", ("0000:00:01.0", "0000:01:00.0", "0000:02:01.0")),
     ("pci0000:00", ("0000:00:01.0", "0000:01:00.0", "0000:02:02.0")), (0, 0), "PIX"),
    # through a second-level switch on one side
    (("pci0000:00", ("0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:03:00.0", "0000:04:00.0")),
     ("pci0000:00", ("0000:00:01.0", "0000:01:00.0", "0000:02:02.0")), (0, 0), "PXB"),
    # two root ports of one host bridge
    (("pci0000:00", ("0000:00:01.0",)), ("pci0000:00", ("0000:00:03.0",)), (0, 0), "PHB"),
    (("pci0000:00", ("0000:00:01.0",)), ("pci0000:40", ("0000:40:01.0",)), (0, 0), "NODE"),
    (("pci0000:00", ("0000:00:01.0",)), ("pci0000:80", ("0000:80:01.0",)), (0, 1), "SYS"),
    (("pci0000:00", ("0000:00:01.0",)), ("pci0000:80", ("0000:80:01.0",)), (None, None), "SYS"),
])
def test_pci_link_levels(a, b, numa, level):
    assert pci_link_level(a, b, *numa) == level
    assert pci_link_level(b, a, *reversed(numa)) == level


@pytest.mark.parametrize("busid, key", [
    ("0000:3b:00.1", (0, 0x3B, 0, 1)),
    ("00000000:3B:00.0", (0, 0x3B, 0, 0)),  # NVML's spelling: an 8-digit domain, upper case
    ("0000:0\u0661:00.0", (1 << 32, 0, 0, 0)),  # int(x, 16) would read "٠١" as 1
    ("0000:+1:00.0", (1 << 32, 0, 0, 0)),
    ("0000: 1:00.0", (1 << 32, 0, 0, 0)),
    ("0x00:01:00.0", (1 << 32, 0, 0, 0)),
    ("0000:01:00", (1 << 32, 0, 0, 0)),
], ids=["plain", "nvml", "arabic-indic", "plus", "space", "0x", "no-function"])
def test_bus_key_reads_ascii_hex_only(busid, key):
    from topo.probes.pci import bus_key

    assert bus_key(busid) == key


def dev(kind, index, busid, source="sysfs", **kw) -> Device:
    return Device(kind, kw.pop("vendor", "nvidia"), index, busid, kw.pop("numa_node", None),
                  kw.pop("local_cpus", CpuSet()), source=source, **kw)


def test_merge_takes_runtime_identity_and_keeps_sysfs_numa():
    sysfs = [dev("gpu", 0, "0000:07:00.0", numa_node=3, local_cpus=CpuSet([48])),
             dev("gpu", 1, "0000:0f:00.0", numa_node=3), dev("nic", 0, "0000:0c:00.0")]
    runtime = [dev("gpu", 1, "0000:07:00.0", "nvml", numa_node=1, uuid="GPU-a"),
               dev("gpu", 0, "0000:0f:00.0", "nvml", uuid="GPU-b", local_cpus=CpuSet([50]))]
    merged, dropped = merge_runtime(sysfs, runtime, "gpu", "nvidia")
    assert dropped == []
    assert [(d.kind, d.index, d.uuid, d.numa_node, d.local_cpus.to_list()) for d in merged] == [
        ("gpu", 1, "GPU-a", 3, "48"), ("gpu", 0, "GPU-b", 3, "50"), ("nic", 0, None, None, "")]


def test_merge_drops_what_the_runtime_hides_and_keeps_what_sysfs_lacks():
    """A container with NVIDIA_VISIBLE_DEVICES=3 shows all GPUs in sysfs but NVML index 0 only;
    a GPU NVML sees that sysfs does not (no /sys/bus/pci) stays, at machine level."""
    sysfs = [dev("gpu", i, f"0000:0{i}:00.0") for i in range(4)] + [dev("gpu", 0, "0000:80:00.0", vendor="amd")]
    merged, dropped = merge_runtime(sysfs, [dev("gpu", 0, "0000:03:00.0", "nvml"),
                                            dev("gpu", 1, "0000:99:00.0", "nvml")], "gpu", "nvidia")
    # the AMD GPU is not NVML's to drop
    assert [(d.vendor, d.index, d.busid) for d in merged] == [
        ("nvidia", 0, "0000:03:00.0"), ("amd", 0, "0000:80:00.0"), ("nvidia", 1, "0000:99:00.0")]
    assert dropped == ["0000:00:00.0", "0000:01:00.0", "0000:02:00.0"]


# ---- NVML --------------------------------------------------------------------------------------


@pytest.fixture
def fake_nvml(monkeypatch):
    def install(description):
        fake_pynvml.load(description)
        monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    return install


def test_nvml_missing_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert nvml.probe_nvml(8).status == "unavailable: pynvml is not installed (pip install 'topo-affinity[nvidia]')"


def test_nvml_no_driver(fake_nvml):
    fake_nvml({"init_error": "Driver Not Loaded"})
    report = nvml.probe_nvml(8)
    assert report.status == "unavailable: Driver Not Loaded" and report.gpus == ()


def test_nvml_real_library_without_driver_on_this_machine():
    """The installed nvidia-ml-py on a machine with no NVIDIA driver: a reason, not a crash."""
    pytest.importorskip("pynvml")
    report = nvml.probe_nvml(8)
    if report.gpus:
        pytest.skip("this machine has NVIDIA GPUs")
    assert report.status.startswith("unavailable: ")


def test_nvml_one_lost_gpu_is_named_and_the_rest_stand(fake_nvml):
    fake_nvml({"gpus": [{"busid": "0000:07:00.0", "node_cpus": "0-3"},
                        {"busid": "0000:0f:00.0", "error": "GPU is lost"},
                        {"busid": "0000:47:00.0"}]})
    report = nvml.probe_nvml(8)
    assert [g.index for g in report.gpus] == [0, 2]
    assert report.status == "ok (2 GPUs); skipped GPU 1: GPU is lost"
    assert report.gpus[0].node_cpus == CpuSet.range(0, 3)
    assert report.gpus[1].node_cpus is None and report.gpus[1].uuid is None  # optional fields: None


def test_nvml_affinity_words_cover_every_cpu(fake_nvml):
    """256 CPUs need 4 words; CPU 255 is bit 63 of word 3 (gpu_affinity's layout)."""
    fake_nvml({"gpus": [{"busid": "00000000:B7:00.0", "node_cpus": "80-95,208-223,255",
                         "socket_cpus": "64-127,192-255", "numa_node": 5}]})
    (gpu,) = nvml.probe_nvml(256).gpus
    assert gpu.busid == "0000:b7:00.0"
    assert gpu.node_cpus.to_list() == "80-95,208-223,255"
    assert gpu.socket_cpus.to_list() == "64-127,192-255"
    assert gpu.numa_node == 5
    assert nvml.affinity_words(256) == 4 and nvml.affinity_words(257) == 5 and nvml.affinity_words(1) == 1


def test_nvml_links_direct_switch_and_pcie(fake_nvml):
    fake_nvml({"gpus": [{"busid": "0000:01:00.0", "nvlinks": [["0000:02:00.0", 4]]},
                        {"busid": "0000:02:00.0", "nvlinks": [["0000:01:00.0", 4]]},
                        {"busid": "0000:03:00.0"}],
               "pcie": {"0,2": 40, "1,2": 50, "0,1": 10}})
    report = nvml.probe_nvml(8)
    a, b, c = report.gpus
    ids = {g.busid for g in report.gpus}
    assert nvml.nvlink_label(a, b, ids) == "NV4"
    assert nvml.nvlink_label(a, c, ids) is None
    assert report.pcie_levels[(0, 2)] == "NODE" and report.pcie_levels[(2, 1)] == "SYS"


def test_nvml_mig_instances_become_devices(fake_nvml, tmp_path, monkeypatch):
    m = machines.dgx_h100()
    root = machines.build(m, tmp_path / "h100")
    fake_nvml({"gpus": [{"busid": b, "uuid": f"GPU-{i}aaa", "node_cpus": "0-55,112-167" if i < 4 else "56-111,168-223",
                         **({"mig": ["MIG-11111111-aaaa", "MIG-22222222-bbbb"]} if i == 1 else {})}
                        for i, b in enumerate(machines.H100_BUSIDS)]})
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    t = topo.discover(root, live_probes=True)
    migs = [d for d in t.devices if d.kind == "mig"]
    assert [(d.index, d.uuid, d.busid, d.numa_node) for d in migs] == [
        (1, "MIG-11111111-aaaa", "0000:2a:00.0", 0), (1, "MIG-22222222-bbbb", "0000:2a:00.0", 0)]
    assert t.summary().endswith("8 GPUs")  # MIG instances are not counted as GPUs

    from topo.visible import visible_devices

    picked = visible_devices(t, env={"CUDA_VISIBLE_DEVICES": "MIG-2222"})
    assert [(d.kind, d.index) for d in picked] == [("gpu", 1)]


# ---- npu-smi -----------------------------------------------------------------------------------


def test_chip_map_skips_mcu_and_picks_logic_id():
    text = ("NPU ID  Chip ID  Chip Logic ID  Chip Name\n"
            "0       0        0              Ascend 910B3\n"
            "0       1        -              Mcu\n"
            "1       0        1              Ascend 910B3\n")
    chips = npusmi.parse_chip_map(text)
    assert [(c.logical_id, c.npu_id, c.chip_id, c.name) for c in chips] == [
        (0, 0, 0, "Ascend 910B3"), (1, 1, 0, "Ascend 910B3")]


def test_chip_map_a3_two_dies_per_npu():
    """A3 (910C): two chips per NPU, logic ids 0..15, a Chip Phy-ID column."""
    rows = ["NPU ID  Chip ID  Chip Logic ID  Chip Phy-ID  Chip Name"]
    for n in range(8):
        for chip in range(2):
            rows.append(f"{n}       {chip}        {2 * n + chip}              {2 * n + chip}            Ascend910")
        rows.append(f"{n}       2        -              -            Mcu")
    chips = npusmi.parse_chip_map("\n".join(rows))
    assert [c.logical_id for c in chips] == list(range(16))
    assert (chips[3].npu_id, chips[3].chip_id) == (1, 1)


def test_chip_map_without_logic_ids_falls_back_to_npu_id():
    chips = npusmi.parse_chip_map("NPU ID  Chip ID  Chip Logic ID  Chip Name\n4  0  -  310P3\n5  0  -  310P3\n")
    assert [c.logical_id for c in chips] == [4, 5]


@pytest.mark.parametrize("text, message", [
    ("nothing here", "no 'NPU ID ... Chip Name' header"),
    ("NPU ID  Chip Name\n0  Ascend\n", "lacks the 'Chip Id' column"),
    ("NPU ID  Chip ID  Chip Name\n0  0  Mcu\n", "lists no NPU chip"),
    ("NPU ID  Chip ID  Chip Logic ID  Chip Name\n0  0  -  A\n0  1  -  A\n", "no column gives every chip a unique"),
])
def test_chip_map_errors(text, message):
    with pytest.raises(ParseError, match=message):
        npusmi.parse_chip_map(text)


def test_info_table_310p_device_column():
    """310P cards: two chips per NPU; the chip row's second number is the device (logical) id."""
    text = """\
| NPU     Name              | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device            | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===========================+=================+======================================================+
| 8       310P3             | OK              | NA           51                0     / 0              |
| 0       0                 | 0000:81:00.0    | 0            1629 / 21527                            |
| 1       1                 | 0000:82:00.0    | 0            1458 / 21527                            |
"""
    chips = npusmi.parse_info_table(text)
    assert [(c.logical_id, c.npu_id, c.chip_id, c.busid) for c in chips] == [
        (0, 8, 0, "0000:81:00.0"), (1, 8, 1, "0000:82:00.0")]


def test_info_table_atlas800_including_the_irregular_row():
    chips = npusmi.parse_info_table(sample("ascend/npu-smi-info_atlas800tA2-8x910B3_kunpeng.txt"))
    assert [c.busid for c in chips][6] == "0000:41:00.0" and len(chips) == 8


def test_board_bus_id_both_spellings():
    assert npusmi.parse_board_busid("  PCIe Bus Info     : 0000:C1:00.0\n") == "0000:c1:00.0"
    assert npusmi.parse_board_busid("PCIeBusInfo : 0000:01:00.0") == "0000:01:00.0"
    assert npusmi.parse_board_busid("Chip Name : 910B") is None
    with pytest.raises(ParseError, match="not a PCI bus id"):
        npusmi.parse_board_busid("PCIe Bus Info : NA")


def test_topo_matrix_and_cpu_affinity():
    affinity, links = npusmi.parse_topo(sample("ascend/npu-smi-info-t-topo_kunpeng920-8x910B1.txt"))
    assert affinity[0] == CpuSet.range(144, 167) and affinity[5] == CpuSet.range(48, 71)
    assert links[(0, 1)] == "HCCS" and (0, 0) not in links and len(links) == 56
    with pytest.raises(ParseError, match="CPU Affinity"):
        npusmi.parse_topo("NPU0 NPU1\nNPU0 X HCCS\n")


ODD_IDS = ["\u00b2", "\u0661", "\uff11", "1_0", "99999999999"]  # "²" was a ValueError, "١" read as 1


@pytest.mark.parametrize("odd", ODD_IDS)
def test_info_table_odd_ids_name_the_line(odd):
    text = sample("ascend/npu-smi-info_atlas800tA2-8x910B3_kunpeng.txt")
    for row in ("| 1     910B3               | OK ", "| 0                         | 0000:C2:00.0 "):
        bad = row.replace(row[2], odd, 1)
        assert row in text
        with pytest.raises(ParseError) as caught:
            npusmi.parse_info_table(text.replace(row, bad))
        assert str(caught.value).startswith(f"'npu-smi info': the NPU or chip id is not a whole number "
                                            f"(ASCII digits) in line '{bad.strip()[:20]}")


@pytest.mark.parametrize("odd", ODD_IDS)
def test_topo_odd_npu_ids_name_the_line(odd):
    text = sample("ascend/npu-smi-info-t-topo_kunpeng920-8x910B1.txt")
    row = text.splitlines()[3]  # NPU2 ... 144-167
    with pytest.raises(ParseError, match=rf"'npu-smi info -t topo': 'NPU.*' is not NPU<id> \(ASCII digits\) "
                                         rf"in line 'NPU{re.escape(odd[:5])}"):
        npusmi.parse_topo(text.replace(row, row.replace("NPU2", f"NPU{odd}", 1)))
    with pytest.raises(ParseError, match=r"is not NPU<id> \(ASCII digits\) in line 'NPU0 "):
        npusmi.parse_topo(text.replace("NPU3       NPU4", f"NPU{odd}       NPU4", 1))
    with pytest.raises(ParseError, match=rf"CPU Affinity in line 'NPU2 .*': .*{re.escape(odd[:5])}"):
        npusmi.parse_topo(text.replace(row, row.replace("144-167", f"144-{odd}")))


@pytest.mark.parametrize("odd", ODD_IDS)
def test_chip_map_odd_ids(odd):
    """An unreadable id column is passed over as msrun passes over "-"; an unreadable NPU or chip id
    is an error naming the line."""
    header = "NPU ID  Chip ID  Chip Logic ID  Chip Name\n"
    chips = npusmi.parse_chip_map(header + f"4  0  {odd}  310P3\n5  0  1  310P3\n")
    assert [c.logical_id for c in chips] == [4, 5]
    with pytest.raises(ParseError, match=rf"'npu-smi info -m': NPU ID and Chip ID must be whole numbers "
                                         rf"\(ASCII digits\) in line '5  {re.escape(odd)}  1  310P3'"):
        npusmi.parse_chip_map(header + f"4  0  0  310P3\n5  {odd}  1  310P3\n")


@pytest.fixture
def fake_npu_smi(tmp_path, monkeypatch):
    d = tmp_path / "outputs"
    d.mkdir()
    monkeypatch.setenv("FAKE_NPU_SMI_DIR", str(d))
    monkeypatch.setenv("PATH", f"{FAKES}:{Path(sys.executable).parent}:/usr/bin:/bin")  # python3 for the fake
    return d


def test_npu_smi_missing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert npusmi.probe_npusmi().status == "unavailable: npu-smi not found on PATH"


def test_npu_smi_timeout_is_a_reason(fake_npu_smi, monkeypatch):
    (fake_npu_smi / "info.sleep").write_text("5")
    monkeypatch.setattr(npusmi, "TIMEOUT", 0.3)
    with pytest.raises(ProbeError, match=r"'npu-smi info' timed out after 0.3s"):
        npusmi.run(["npu-smi", "info"])
    report = npusmi.probe_npusmi()
    assert report.status.startswith("error: 'npu-smi info' timed out after 0.3s")


def test_npu_smi_nonzero_exit_and_garbage(fake_npu_smi):
    (fake_npu_smi / "info.exit").write_text("3")
    (fake_npu_smi / "info_-m.txt").write_text("dcmi module initialize failed. ret is -8005\n")
    report = npusmi.probe_npusmi()
    assert report.chips == ()
    assert report.status == ("error: 'npu-smi info' failed (exit 3): Error: the device is busy; "
                             "'info -m': no 'NPU ID ... Chip Name' header in 'npu-smi info -m' output")


def test_npu_smi_without_chip_map_uses_the_table(fake_npu_smi):
    (fake_npu_smi / "info.txt").write_text(sample("ascend/npu-smi-info_atlas800tA2-8x910B3_kunpeng.txt"))
    report = npusmi.probe_npusmi()
    assert [c.logical_id for c in report.chips] == list(range(8))
    assert report.status.startswith("ok (8 NPUs); 'info -m': 'npu-smi info -m' failed (exit 1)")


def test_live_machine_without_tools_still_shows_cpus(monkeypatch):
    """This machine with no npu-smi on PATH: the topology stands and says why. NVML is a library,
    not a tool: it answers where an NVIDIA driver is loaded whatever PATH holds."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    t = topo.discover("/")
    driver = os.path.isdir("/proc/driver/nvidia")
    assert t.pus and t.probes["nvml"].startswith("ok" if driver else "unavailable: ")
    assert t.probes["npu-smi"] == "unavailable: npu-smi not found on PATH"


def test_probes_option_turns_runtime_probes_off():
    t = topo.discover("/", probes=("nvml",))
    assert t.probes["npu-smi"] == "off: not requested"
    assert devices.RUNTIME_PROBES.keys() == {"nvml", "npu-smi"}
