"""Devices the planners care about (accelerators, NICs, NVMe), from sysfs and the runtimes' tools.

As hwloc's PCI and IO phases: sysfs classifies PCI functions and numbers each kind in bus order; NVML and
npu-smi (live, or as a capture stored them) give the runtime's index, UUIDs, names and links, matched by
bus id. AMD GPUs take ROCm's numbering from KFD, Gaudis their module ids; links are `nvidia-smi topo -m`'s.
"""

from __future__ import annotations

import re
from dataclasses import replace

from topo.cpuset import EMPTY
from topo.fsroot import FsRoot
from topo.model import Device, PciDevice, Topology
from topo.numbers import ascii_number
from topo.probes.pci import PCI

VENDORS = {
    "10de": "nvidia", "1002": "amd", "8086": "intel", "19e5": "huawei", "1da3": "habana", "15b3": "mellanox",
    "14e4": "broadcom", "1077": "qlogic", "1fc1": "qlogic",  # 1fc1: QLogic/Intel TrueScale InfiniPath (qib)
    "177d": "cavium", "1924": "solarflare", "1d0f": "amazon", "144d": "samsung", "1af4": "virtio",
}

ACCELERATOR_KINDS = ("gpu", "npu", "accel")
_KIND_ORDER = {k: i for i, k in enumerate(("gpu", "npu", "accel", "mig", "nic", "nvme"))}
_BDF = re.compile(r"\A[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_HOST_BRIDGE = re.compile(r"\Apci[0-9a-f]{4,8}:[0-9a-f]{2}\Z")
# what RDMA device names look like, for topologies read from a file (sysfs says it outright)
_RDMA_NAME = re.compile(r"(mlx\d|hfi\d|qib|bnxt_re|irdma|erdma|efa|rxe)")


def classify(dev: PciDevice) -> str | None:
    """The device kind of a PCI function, or None for what planners ignore."""
    base, sub, vendor = dev.class_id[:2], dev.class_id[2:], dev.vendor_id
    if base == "03":
        # VGA (0300) of a BMC or an Intel iGPU computes nothing; 3D (0302) and 0380 (Instinct, GPU Max) do.
        return "gpu" if vendor == "10de" or (vendor in ("1002", "8086") and sub in ("02", "80")) else None
    if base == "12":  # processing accelerators: Ascend, AMD Instinct MI300 (1200), Habana Gaudi and others
        return {"19e5": "npu", "1002": "gpu"}.get(vendor, "accel")
    # co-processors (old Xeon Phi, some FPGAs), InfiniBand (QLogic), NVMe; base 02: network controllers
    return {"0b40": "accel", "0c06": "nic", "0108": "nvme"}.get(dev.class_id, "nic" if base == "02" else None)


def _os_name(dev: PciDevice) -> str | None:
    """A NIC's or NVMe's name: its first RDMA name, else netdev, else block device. A topology read from a
    file has only the flat `names`, where one that looks like an RDMA device counts as one."""
    rdma = list(dev.rdma_names) or [n for n in dev.names if _RDMA_NAME.match(n)]
    nvme = [n for n in dev.names if re.fullmatch(r"nvme\d+", n)]
    net = [n for n in dev.names if n not in rdma and n not in nvme and not n.startswith(("card", "render", "dma"))]
    return (rdma or net or nvme or [None])[0]


def sysfs_devices(topology: Topology) -> list[Device]:
    """Classified PCI functions numbered in bus order: accelerators per vendor, as each runtime
    numbers its own (CUDA and ROCm on one machine both start at 0), NICs and NVMe per kind."""
    counters: dict[tuple[str, str], int] = {}
    out = []
    for dev in topology.pci_devices:  # already in PCI bus order
        kind = classify(dev)
        if kind is None:
            continue
        vendor = VENDORS.get(dev.vendor_id, dev.vendor_id)
        key = (kind, vendor if kind in ACCELERATOR_KINDS else "")
        index = counters[key] = counters.get(key, -1) + 1
        name = _os_name(dev) if kind in ("nic", "nvme") else None  # an accelerator's name comes from its runtime
        out.append(Device(kind, vendor, index, dev.busid, dev.numa_node, dev.local_cpus, name, None, "sysfs"))
    return out


KFD = "/sys/class/kfd/kfd/topology/nodes"


def kfd_order(fs: FsRoot, devices: list[Device]) -> tuple[list[Device], str | None]:
    """AMD GPUs numbered as ROCm does: in the order of the KFD topology nodes with SIMDs (CPU nodes have
    none), each naming its function by `domain` and `location_id` (bus << 8 | device << 3 | function).
    The status line is None where the driver shows no KFD topology."""
    names = fs.listdir(KFD)
    if not names:
        return devices, None
    order = {}
    for name in sorted((n for n in names if n.isascii() and n.isdigit() and len(n) <= 6), key=int):
        props = dict(line.split(None, 1) for line in (fs.read(f"{KFD}/{name}/properties") or "").splitlines()
                     if len(line.split(None, 1)) == 2)
        simds, location, domain = (ascii_number(props.get(k, "").strip(), 1 << 32) for k in
                                   ("simd_count", "location_id", "domain"))
        if simds and location is not None:
            busid = f"{domain or 0:04x}:{location >> 8 & 0xFF:02x}:{location >> 3 & 0x1F:02x}.{location & 7}"
            order.setdefault(busid, len(order))
    amd = [d for d in devices if d.kind == "gpu" and d.vendor == "amd"]
    if not order or any(d.busid not in order for d in amd):
        return devices, f"unused: its {len(order)} GPU nodes do not match the {len(amd)} AMD GPUs in PCI"
    return ([replace(d, index=order[d.busid], source="kfd") if d in amd else d for d in devices],
            f"ok: {len(order)} GPUs")


def habana_order(fs: FsRoot, devices: list[Device]) -> tuple[list[Device], str | None]:
    """Intel Gaudis numbered by the `module_id` habanalabs writes per function (the OAM slot
    HABANA_VISIBLE_MODULES names); bus order where one lacks it or two share one. Status None without Gaudis."""
    gaudis = [d for d in devices if d.vendor == "habana" and d.kind == "accel"]
    if not gaudis:
        return devices, None
    ids = {d.busid: ascii_number((fs.read(f"{PCI}/{d.busid}/module_id") or "").strip(), 1 << 16) for d in gaudis}
    if None in ids.values() or len(set(ids.values())) < len(ids):
        return devices, f"unused: {len(gaudis)} Gaudis without distinct module_id files: bus order"
    return [replace(d, index=ids[d.busid], source="habanalabs") if d in gaudis else d for d in devices], \
        f"ok: {len(gaudis)} Gaudis by module id"


def merge_runtime(devices: list[Device], found: list[Device], kind: str, vendor: str) -> tuple[list[Device], list[str]]:
    """The devices with those of `kind` from `vendor` replaced by a runtime's, matched by PCI bus id,
    and the bus ids of the sysfs devices the runtime did not list."""
    if not found:
        return devices, []
    by_bus = {d.busid: d for d in found if d.busid}
    matched, out, dropped = set(), [], []
    for d in devices:
        if d.kind != kind or d.vendor != vendor:
            out.append(d)
            continue
        r = by_bus.get(d.busid)
        if r is None:
            dropped.append(d.busid)
            continue
        matched.add(d.busid)
        # sysfs numa_node is what torch and msrun read; the runtime's only fills a -1
        out.append(replace(r, vendor=d.vendor, numa_node=d.numa_node if d.numa_node is not None else r.numa_node,
                           local_cpus=r.local_cpus or d.local_cpus))
    out.extend(r for r in found if r.busid not in matched)  # kept: a container may hide /sys/bus/pci
    return out, dropped


def sort_devices(devices: list[Device]) -> list[Device]:
    """Accelerators first, then MIG instances, NICs, NVMe; by vendor and index within a kind."""
    return sorted(devices, key=lambda d: (_KIND_ORDER.get(d.kind, 99), d.vendor if d.kind in ACCELERATOR_KINDS else "",
                                          d.index, d.uuid or ""))


def numa_from_cpus(device: Device, topology: Topology) -> Device:
    """A device sysfs gives no node (-1, or no PCI entry) gets the one node its CPUs lie in."""
    if device.numa_node is not None or not device.local_cpus or device.local_cpus == topology.pus:
        return device
    nodes = [n.os_index for n in topology.numa_nodes if n.cpuset and n.cpuset.intersects(device.local_cpus)]
    return replace(device, numa_node=nodes[0]) if len(nodes) == 1 else device


def pci_chain(fs: FsRoot, busid: str) -> tuple[str, tuple[str, ...]] | None:
    """(host bridge, bridges from the root port down) of a PCI function, from its /sys/bus/pci/devices
    link: ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0."""
    parts = (fs.readlink(f"{PCI}/{busid}") or "").split("/")
    hosts = [i for i, p in enumerate(parts) if _HOST_BRIDGE.match(p)]
    chain = tuple(p for p in parts[hosts[-1] + 1:] if _BDF.match(p)) if hosts else ()
    return (parts[hosts[-1]], chain[:-1]) if chain and chain[-1] == busid else None


def tree_chains(topology: Topology) -> dict[str, tuple[str, tuple[str, ...]]]:
    """What pci_chain gives for every PCI function, from the model's bridges (a file has no sysfs links)."""
    parent = {b.id: b.parent for b in topology.pci_bridges}
    chains = {}
    for d in topology.pci_devices:
        up, hops = d.parent, []
        while up is not None and up in parent and parent[up] is not None and len(hops) < 256:
            hops.append(up)
            up = parent[up]
        if up is not None and up in parent:
            chains[d.busid] = (up, tuple(reversed(hops)))
    return chains


def pci_link_level(a: tuple[str, tuple[str, ...]], b: tuple[str, tuple[str, ...]],
                   numa_a: int | None, numa_b: int | None) -> str:
    """nvidia-smi's PCIe level between two functions from their bridge chains. PIX: at most one bridge
    below the closest common one on either side; PXB: several bridges; PHB: through the host bridge;
    NODE: between host bridges of one NUMA node; SYS: across the inter-socket link."""
    (host_a, bridges_a), (host_b, bridges_b) = a, b
    if host_a != host_b:
        return "NODE" if numa_a is not None and numa_a == numa_b else "SYS"
    common = 0
    while common < min(len(bridges_a), len(bridges_b)) and bridges_a[common] == bridges_b[common]:
        common += 1
    if common == 0:
        return "PHB"
    return "PIX" if max(len(bridges_a), len(bridges_b)) - common <= 1 else "PXB"


def link_name(device: Device) -> str:
    return (device.name or f"NIC{device.index}") if device.kind == "nic" else f"{device.kind.upper()}{device.index}"


def link_matrix(devices: list[Device], chains: dict[str, tuple], overlay: dict[tuple[str, str], str]) -> dict:
    """{name: {name: level}} for accelerators and RDMA NICs; empty without accelerators."""
    accels = [d for d in devices if d.kind in ACCELERATOR_KINDS]
    if not accels:
        return {}
    # nvidia-smi lists the NICs NCCL can use: RDMA devices, not the management Ethernet ports.
    members = accels + [d for d in devices if d.kind == "nic" and d.name and _RDMA_NAME.match(d.name)]
    matrix: dict[str, dict[str, str]] = {}
    for a in members:
        row = matrix[link_name(a)] = {}
        for b in members:
            level = "X" if a is b else overlay.get((link_name(a), link_name(b)))
            if level is None and a.busid in chains and b.busid in chains:
                level = pci_link_level(chains[a.busid], chains[b.busid], a.numa_node, b.numa_node)
            if level is None:
                level = "NODE" if a.numa_node is not None and a.numa_node == b.numa_node else "SYS"
            row[link_name(b)] = level
    return matrix


def _nvml(topology: Topology, stored: FsRoot | None):
    from topo.probes import nvml
    report = nvml.probe_for(topology) if stored is None else nvml.stored_report(stored)
    if report is None:
        return "off: not this system", [], {}, {}
    pus = topology.pus
    gpus = [Device("gpu", "nvidia", g.index, g.busid, g.numa_node,
                   g.node_cpus & pus if g.node_cpus is not None else EMPTY, g.name, g.uuid, "nvml", g.memory,
                   g.socket_cpus & pus if g.socket_cpus is not None else None) for g in report.gpus]
    overlay = {}
    busids = {g.busid for g in report.gpus}
    for a in report.gpus:
        for b in report.gpus:
            if a.index != b.index:
                label = nvml.nvlink_label(a, b, busids) or report.pcie_levels.get((a.index, b.index))
                if label:
                    overlay[(f"GPU{a.index}", f"GPU{b.index}")] = label
    migs = {g.index: g.mig_uuids for g in report.gpus if g.mig_uuids}
    return report.status, gpus, overlay, migs


def _npusmi(topology: Topology, stored: FsRoot | None):
    from topo.probes import npusmi
    from topo.probes.tools import stored_runner
    runner = None if stored is None else stored_runner(stored, "npu-smi")
    if stored is not None and runner is None:
        return "off: not this system", [], {}, {}
    report = npusmi.probe_npusmi(runner=runner or npusmi.run)
    npus = [Device("npu", "huawei", c.logical_id, c.busid, None, c.cpus & topology.pus if c.cpus else EMPTY,
                   c.name, None, "npu-smi") for c in report.chips]
    overlay = {(f"NPU{a}", f"NPU{b}"): label for (a, b), label in report.links.items()}
    return report.status, npus, overlay, {}


# name -> (device kind and vendor it answers for, function)
RUNTIME_PROBES = {"nvml": ("gpu", "nvidia", _nvml), "npu-smi": ("npu", "huawei", _npusmi)}


def vendor_absent(topology: Topology, vendor: str) -> bool:
    ids = {v for v, name in VENDORS.items() if name == vendor}
    return bool(topology.pci_devices) and not any(d.vendor_id in ids for d in topology.pci_devices)


def attach_devices(topology: Topology, fs: FsRoot, probes: tuple[str, ...] | None = None, *,
                   live: bool = False) -> Topology:
    """Classify sysfs devices, run the runtime probes that apply, and add devices and links."""
    status = dict(topology.probes)
    devices = sysfs_devices(topology)
    for name, renumber in (("kfd", kfd_order), ("habanalabs", habana_order)):
        devices, state = renumber(fs, devices)
        if state is not None:
            status[name] = state
    overlay: dict[tuple[str, str], str] = {}
    migs: dict[int, tuple[str, ...]] = {}
    for name, (kind, vendor, run) in RUNTIME_PROBES.items():
        if probes is not None and name not in probes:
            status[name] = "off: not requested"
            continue
        if name == "nvml" and live and probes is None and vendor_absent(topology, vendor):
            # Loading libnvidia-ml to learn there is no GPU costs more than all of sysfs; where
            # sysfs shows no PCI function at all (hidden in a container) NVML is still asked.
            status[name] = "unavailable: no NVIDIA PCI function in sysfs (--probes nvml asks NVML anyway)"
            continue
        # a captured root answers from the runtime's facts the capture stored, if any
        state, found, links, mig = run(topology, None if live else fs)
        devices, dropped = merge_runtime(devices, found, kind, vendor)
        if dropped:
            state += f"; not listed by {name}, dropped: {', '.join(dropped)}"
        status[name] = state
        overlay.update(links)
        migs.update(mig)

    devices = [numa_from_cpus(d, topology) for d in devices]
    for gpu in [d for d in devices if d.kind == "gpu" and d.index in migs and d.source == "nvml"]:
        # A MIG instance sits where its GPU sits; its index is the GPU's physical id.
        devices.extend(replace(gpu, kind="mig", name=f"MIG on GPU{gpu.index}", uuid=uuid, memory=None)
                       for uuid in migs[gpu.index])
    devices = sort_devices(devices)
    linked = dict.fromkeys(d.busid for d in devices if d.busid and (d.kind in ACCELERATOR_KINDS or d.kind == "nic"))
    chains = {busid: chain for busid in linked if (chain := pci_chain(fs, busid))}
    return replace(topology, devices=tuple(devices), probes=status, links=link_matrix(devices, chains, overlay))
