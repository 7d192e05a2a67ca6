"""AMD GPUs numbered as ROCm numbers them, from the amdgpu driver's KFD topology in sysfs (no
library): the KFD nodes with SIMDs in node order, each naming its PCI function by `domain` and
`location_id`. Generated root: 4 MI300X-like functions whose KFD order is not their bus order."""

from __future__ import annotations

from sysfs_builder import Machine, Pci, build
from topo.discovery import discover
from topo.visible import visible_devices

BUSES = ["0000:05:00.0", "0000:26:00.0", "0000:86:00.0", "0000:a6:00.0"]
KFD_ORDER = [2, 0, 3, 1]  # KFD node k (after the CPU node 0) is the function BUSES[KFD_ORDER[k]]


def mi300x(tmp_path, kfd=True):
    pci = [Pci(b, "0x120000", vendor="0x1002", device="0x74a1", numa_node=i // 2,
               local_cpulist="0-3" if i < 2 else "4-7") for i, b in enumerate(BUSES)]
    root = build(tmp_path, Machine(packages=2, cores=4, pci=pci))
    if kfd:
        nodes = root / "sys/class/kfd/kfd/topology/nodes"
        (nodes / "0").mkdir(parents=True)
        (nodes / "0" / "properties").write_text("cpu_cores_count 8\nsimd_count 0\nlocation_id 0\ndomain 0\n")
        for k, i in enumerate(KFD_ORDER, start=1):
            bus = int(BUSES[i][5:7], 16)
            (nodes / str(k)).mkdir()
            (nodes / str(k) / "properties").write_text(
                f"cpu_cores_count 0\nsimd_count 1216\nlocation_id {bus << 8}\ndomain 0\ngpu_id {1000 + k}\n")
    return root


def test_kfd_order_numbers_amd_gpus(tmp_path):
    t = discover(mi300x(tmp_path))
    gpus = {d.busid: d for d in t.devices if d.kind == "gpu"}
    assert [gpus[BUSES[i]].index for i in KFD_ORDER] == [0, 1, 2, 3]
    assert {d.vendor for d in gpus.values()} == {"amd"} and t.probes["kfd"] == "ok: 4 GPUs"
    assert [(d.numa_node, str(d.local_cpus)) for d in (gpus[b] for b in BUSES)] == [
        (0, "0-3"), (0, "0-3"), (1, "4-7"), (1, "4-7")]
    # HIP_VISIBLE_DEVICES=0 is ROCm's device 0: KFD's first GPU node, the function at 86:00.0
    assert [d.busid for d in visible_devices(t, env={"HIP_VISIBLE_DEVICES": "0,3"})] == [BUSES[2], BUSES[1]]


def test_without_kfd_bus_order(tmp_path):
    t = discover(mi300x(tmp_path, kfd=False))
    assert [d.busid for d in sorted(t.devices, key=lambda d: d.index)] == BUSES and "kfd" not in t.probes
