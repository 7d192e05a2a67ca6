"""Linux sysfs: PCI functions, their bridges and the OS devices below them, as hwloc's Linux backend reads them."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from topo.cpuset import CpuSet
from topo.errors import ProbeError
from topo.fsroot import FsRoot
from topo.model import OsDevice, PciBridge, PciDevice

PCI = "/sys/bus/pci/devices"
_VIRTIO_DIR = re.compile(r"virtio[0-9]{1,10}\Z")
_DIGIT_RUNS = re.compile(r"([0-9]+)")
# "dddd:bb:dd.f" in ASCII hex; int(x, 16) alone would also take "١", "+1", " 1" or "0x1".
_BUS_ID = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,8})\.([0-9a-fA-F]{1,8})\Z")
_PCI_CLASS = re.compile(r"(?:0x)?([0-9a-fA-F]{1,8})\Z")


@dataclass
class RawPci:
    devices: list[PciDevice]  # PCI functions other than bridges, in bus order
    bridges: list[PciBridge]  # host bridges and PCI-to-PCI bridges, in bus order
    os_devices: list[OsDevice]


@dataclass
class _Function:
    busid: str
    key: tuple[int, int, int, int]
    class_id: str
    buses: tuple[int, int] | None  # (secondary, subordinate) of a PCI-to-PCI bridge
    dir: str
    parent: str | None = None  # id of the bridge above


def probe_pci(fs: FsRoot, machine: CpuSet) -> RawPci:
    """PCI functions and bridges with hwloc's localities: each function under the innermost bridge whose
    bus range holds its bus, else under one host bridge per (domain, bus), whose tree sits at the
    local_cpus of its first function (the whole machine without them). OS devices: probe_os_devices."""
    functions = _pci_functions(fs)
    below: dict[tuple[int, int], _Function] = {}  # (domain, bus) -> innermost bridge holding it
    hosts: dict[tuple[int, int], list[_Function]] = {}  # (domain, bus) -> the functions no bridge holds
    for f in functions:  # bus order: a bridge's own bus comes before the buses below it
        above = below.get((f.key[0], f.key[1]))
        f.parent = above.busid if above is not None else None
        if above is None:
            hosts.setdefault((f.key[0], f.key[1]), []).append(f)
        if f.buses is not None:
            for bus in range(f.buses[0], f.buses[1] + 1):
                below[(f.key[0], bus)] = f
    # A host bridge's range reaches the highest bus below its bridges.
    bridges = []
    for (domain, bus), tops in hosts.items():
        host_id = f"pci{domain:04x}:{bus:02x}"
        local = fs.read_set(f"{tops[0].dir}/local_cpulist", f"{tops[0].dir}/local_cpus")
        locality = local & machine if local and local & machine else machine
        subordinate = max([bus] + [t.buses[1] for t in tops if t.buses])
        bridges.append(PciBridge(host_id, None, domain, bus, subordinate, locality))
        for t in tops:
            t.parent = host_id
    locality_of = {host.id: host.local_cpus for host in bridges}
    devices = []
    for f in functions:
        locality_of[f.busid] = locality_of.get(f.parent, machine)  # a parent comes before its children
        # 16-bit ids ("0x10de") as four hex digits; "0000" where missing, as hwloc reads them
        vendor, device, subvendor, subdevice = (
            (fs.read(f"{f.dir}/{name}") or "0x0000").lower().removeprefix("0x")
            for name in ("vendor", "device", "subsystem_vendor", "subsystem_device"))
        if f.buses is not None:
            bridges.append(PciBridge(f.busid, f.parent, f.key[0], f.buses[0], f.buses[1], locality_of[f.busid],
                                     f.class_id, vendor, device))
            continue
        if f.class_id.startswith("06"):
            continue  # host and ISA bridge functions: plumbing, which lstopo drops by default too
        node = fs.read_int(f"{f.dir}/numa_node")
        rdma, names = _os_devices(fs, f.dir)
        driver = fs.link_name(f"{f.dir}/driver")
        devices.append(PciDevice(f.busid, f.class_id, vendor, device, node if node is not None and node >= 0 else None,
                                 locality_of[f.busid], driver, names, rdma, f.parent, f"{subvendor}:{subdevice}"))
    return RawPci(devices, bridges, [])


# The classes lstopo reads OS devices from, in its order, with the type each gives.
_OS_CLASSES = (("/sys/class/block", "block"), ("/sys/bus/dax/devices", "block"), ("/sys/class/net", "net"),
               ("/sys/class/infiniband", "openfabrics"), ("/sys/class/drm", "gpu"), ("/sys/class/dma", "dma"))
# The last "dddd:bb:dd.f" of a device path below /devices/pciDDDD:BB/ is the PCI function it hangs from.
_PATH_BUSID = re.compile(r"/([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?=/)")


def probe_os_devices(fs: FsRoot, pci: RawPci, node_localities: dict[int, CpuSet], machine: CpuSet) -> list[OsDevice]:
    """Block, network, RDMA, DRM and DMA devices as hwloc finds them (hwloc_linuxfs_lookup_*_class): under
    the last PCI function in the path a class entry links to, else at its numa_node's CPUs, else the
    machine. Virtual, USB, partitions, DRM connectors, scif and kmem DAX devices are skipped."""
    functions = {d.busid: d.local_cpus for d in pci.devices}
    functions.update((b.id, b.local_cpus) for b in pci.bridges if not b.is_host)
    out = []
    for base, kind in _OS_CLASSES:
        for name in sorted(fs.listdir(base), key=_natural):
            path = f"{base}/{name}"
            if ((kind == "block" and base.endswith("block") and fs.exists(f"{path}/partition"))
                    or (kind == "gpu" and not fs.exists(f"{path}/dev"))  # card0-DP-1 and other connectors
                    or (kind == "openfabrics" and name.startswith("scif"))
                    or (base.endswith("dax/devices") and fs.exists(f"/sys/bus/dax/drivers/kmem/{name}"))):
                continue  # a kmem DAX device is onlined as a NUMA node
            target = fs.readlink(path) or fs.readlink(f"{path}/device") or ""
            if "/virtual/" in target or "/usb" in target:
                continue
            busids = _PATH_BUSID.findall(target[target.find("/pci"):]) if "/pci" in target else []
            parent = busids[-1].lower() if busids else None
            if parent in functions:
                out.append(OsDevice(name, kind, parent, functions[parent], _os_subtype(fs, kind, path, name, target)))
                continue
            if base.startswith("/sys/bus"):
                # A bus device is the hardware itself; before Linux 5.5 an NVDIMM DAX device had
                # numa_node only in its parent (the directory its link points into).
                node = fs.read_int(f"{path}/numa_node")
                if node is None and target:
                    parent_dir = posixpath.dirname(posixpath.normpath(posixpath.join(base, target)))
                    node = fs.read_int(parent_dir + "/numa_node")
            else:
                node = fs.read_int(f"{path}/device/numa_node")
            local = node_localities.get(node, machine) if node is not None and node >= 0 else machine
            out.append(OsDevice(name, kind, None, local or machine, _os_subtype(fs, kind, path, name, target)))
    return out


def _os_subtype(fs: FsRoot, kind: str, path: str, name: str, target: str) -> str | None:
    """lstopo's subtype of a block device: NVM for persistent memory (nd_* devtype, DAX on an NVDIMM bus),
    SPM for soft-reserved memory, else from udev's ID_TYPE, Disk for NVMe."""
    if kind != "block":
        return None
    if path.startswith("/sys/bus/dax"):
        return "NVM" if "/ndbus" in target else ("SPM" if "hmem" in target else None)
    if (fs.read(f"{path}/device/devtype") or "").startswith("nd_"):
        return "NVM"
    blocktype = ""
    dev = fs.read(f"{path}/dev") or ""
    if re.fullmatch(r"[0-9]{1,10}:[0-9]{1,10}", dev):
        for line in (fs.read(f"/run/udev/data/b{dev}") or "").splitlines():
            if line.startswith("E:ID_TYPE="):
                blocktype = line.removeprefix("E:ID_TYPE=")
    if name.startswith("nvme"):
        return "Disk"
    removable = "Removable Media Device"
    return {"disk": "Disk", "tape": "Tape", "cd": removable, "floppy": removable, "optical": removable}.get(blocktype)


def _pci_functions(fs: FsRoot) -> list[_Function]:
    """Every function below /sys/bus/pci/devices in bus order, PCI-to-PCI bridges with their bus ranges."""
    functions = []
    for busid in sorted(fs.listdir(PCI), key=bus_key):
        key = bus_key(busid)
        if key[0] > 0xFFFFFFFF:
            continue  # not a bus id
        d = f"{PCI}/{busid}"
        cls = fs.read(f"{d}/class")
        m = _PCI_CLASS.match(cls or "0")
        if not m:
            raise ProbeError(f"{fs.shown(d + '/class')}: expected a hex class, found {cls[:20]!r}")
        class_id = f"{int(m.group(1), 16) >> 8:04x}"  # hwloc's 0000 ("Other") where the file is missing
        buses = None
        if class_id == "0604":
            config = fs.read_bytes(f"{d}/config", 64)  # the standard header, what a user may read
            # A bridge by header type 1; without readable config space hwloc takes it for a plain device.
            if config is not None and len(config) > 0x1A and config[0x0E] & 0x7F == 1:
                secondary, subordinate = config[0x19], config[0x1A]
                if not key[1] < secondary <= subordinate:
                    continue  # invalid bus range (00/00 on some firmware): hwloc drops the bridge
                buses = (secondary, subordinate)
        functions.append(_Function(busid.lower(), key, class_id, buses, d))
    return functions


def _os_devices(fs: FsRoot, d: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(RDMA names, all OS device names: RDMA, netdevs (virtio-net's in virtioN/net), nvme, drm, dma)."""
    children = set(fs.listdir(d))  # one listing; only the class directories present are listed

    def names(sub: str) -> list[str]:
        return sorted(fs.listdir(f"{d}/{sub}"), key=_natural) if sub in children else []

    rdma = names("infiniband")
    net = names("net") + [n for child in sorted(children) if _VIRTIO_DIR.match(child)
                          for n in sorted(fs.listdir(f"{d}/{child}/net"), key=_natural)]
    return tuple(rdma), tuple(rdma + net + [n for sub in ("nvme", "drm", "dma") for n in names(sub)])


def _natural(name: str) -> tuple:
    """mlx5_2 before mlx5_10: ASCII digit runs compare as numbers; the split alternates text and digits."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_DIGIT_RUNS.split(name)))


def bus_key(busid: str) -> tuple[int, int, int, int]:
    """Sort key of a PCI bus id "dddd:bb:dd.f": (domain, bus, device, function), an unreadable id last."""
    m = _BUS_ID.match(busid)
    return (int(m[1], 16), int(m[2], 16), int(m[3], 16), int(m[4], 16)) if m else (1 << 32, 0, 0, 0)
