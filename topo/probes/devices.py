"""Devices the planners care about (accelerators, NICs), from the PCI functions sysfs lists.

Vendor-neutral: a device's physical index is its rank in PCI bus order among devices of its kind,
which is what runtimes use when they have nothing better (CUDA_DEVICE_ORDER=PCI_BUS_ID).
"""

from __future__ import annotations

from dataclasses import replace

from topo.fsroot import FsRoot
from topo.model import Device, PciDevice, Topology

VENDORS = {
    "10de": "nvidia",
    "1002": "amd",
    "8086": "intel",
    "19e5": "huawei",
    "1da3": "habana",
    "15b3": "mellanox",
    "14e4": "broadcom",
    "1077": "qlogic",
}


def classify(dev: PciDevice) -> str | None:
    """The device kind of a PCI function, or None for what planners ignore."""
    base, sub = dev.class_id[:2], dev.class_id[2:]
    if base == "03" and dev.vendor_id in ("10de", "1002", "8086") and sub in ("00", "02", "80"):
        # Intel/AMD integrated VGA (0300) is a GPU only on discrete parts; keep 3D controllers and
        # display controllers of GPU vendors, which is what nvidia-smi / rocm-smi enumerate.
        if dev.vendor_id == "10de" or sub == "02" or dev.vendor_id == "1002":
            return "gpu"
    if dev.class_id == "1200" or (dev.vendor_id == "19e5" and base == "12"):
        return "npu" if dev.vendor_id == "19e5" else "accel"
    if base == "0b" and sub == "40":
        return "accel"
    if base == "02" or dev.class_id == "0c06":
        return "nic"
    if dev.class_id == "0108":
        return "nvme"
    return None


def sysfs_devices(topology: Topology) -> list[Device]:
    counters: dict[str, int] = {}
    out = []
    for dev in topology.pci_devices:  # already in PCI bus order
        kind = classify(dev)
        if kind is None:
            continue
        index = counters.get(kind, 0)
        counters[kind] = index + 1
        name = dev.names[0] if dev.names else None
        out.append(
            Device(kind, VENDORS.get(dev.vendor_id, dev.vendor_id), index, dev.busid, dev.numa_node,
                   dev.local_cpus, name, None, "sysfs")
        )
    return out


def attach_devices(topology: Topology, fs: FsRoot, probes: tuple[str, ...] | None = None) -> Topology:
    devices = sysfs_devices(topology)
    status = dict(topology.probes)
    return replace(topology, devices=tuple(devices), probes=status)
