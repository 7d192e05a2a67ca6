"""The Topology model: flat, immutable lists of objects tied together by their cpusets. As in hwloc,
containment (package > die > NUMA node > L3 > core > PU) follows from cpusets (`topo.tree` builds the
tree); `os_index` is an object's P#, its L# its position in the sorted list. The JSON form (schema
topo.topology/1, `topo show --json`) has one key per field, in field order, each value converted by
its field's type (`CpuSet` <-> cpulist text, tuple <-> list).
"""

from __future__ import annotations

import functools
from collections import Counter, abc
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from types import UnionType
from typing import Iterable, Mapping, get_args, get_origin, get_type_hints

from topo.cpuset import EMPTY, CpuSet, excerpt
from topo.errors import ParseError, ProbeError

SCHEMA = "topo.topology/1"
# The most PUs a Topology may hold: 8x the largest NR_CPUS a kernel builds with (8192), so every
# machine fits, while a file claiming a million PUs is refused before anything walks them.
MAX_PUS = 65536


@dataclass(frozen=True)
class Package:
    """A processor package (socket)."""

    os_index: int
    cpuset: CpuSet
    model: str | None = None


@dataclass(frozen=True)
class Die:
    os_index: int
    package: int
    cpuset: CpuSet


@dataclass(frozen=True)
class Cluster:
    """A cluster of cores sharing something below the die (ARM clusters)."""

    os_index: int
    package: int
    cpuset: CpuSet


@dataclass(frozen=True)
class Core:
    """A physical core and its PUs (hardware threads)."""

    os_index: int | None  # sysfs core_id: unique only within a package; None when sysfs has none
    package: int | None  # None on machines without package information
    cpuset: CpuSet


@dataclass(frozen=True)
class Cache:
    level: int
    type: str  # "data" | "instruction" | "unified"
    size: int  # bytes
    cpuset: CpuSet
    line_size: int | None = None
    ways: int | None = None

    @property
    def label(self) -> str:
        suffix = {"data": "d", "instruction": "i"}.get(self.type, "")
        return f"L{self.level}{suffix}"


@dataclass(frozen=True)
class MemorySideCache:
    """A cache in front of NUMA nodes' memory (hwloc's MemCache)."""

    size: int
    numa_nodes: tuple[int, ...]
    cpuset: CpuSet


@dataclass(frozen=True)
class NumaNode:
    """A NUMA node: memory, the CPUs it owns and the CPUs it is local to."""

    os_index: int
    cpuset: CpuSet  # the node's own CPUs; empty for a memory-only node
    local_memory: int  # bytes
    memory_only: bool
    locality: CpuSet  # own CPUs, or the CPUs of the nearest CPU-bearing node(s)
    distances: Mapping[int, int] = field(default_factory=dict)
    subtype: str | None = None  # e.g. "GPUMemory", "NVM"
    busid: str | None = None  # GPUMemory: the PCI bus id of the GPU whose memory it is (hwloc's PCIBusID)


@dataclass(frozen=True)
class CpuKind:
    """PUs of one kind (hwloc's CPU kinds, `lstopo --cpukinds`: P- and E-cores, big and little ARM
    cores, ...). `efficiency` ranks them, 0 the least efficient; None (lstopo's -1) when unranked."""

    cpuset: CpuSet
    efficiency: int | None
    infos: Mapping[str, str] = field(default_factory=dict)  # FrequencyMaxMHz, FrequencyBaseMHz, LinuxCapacity


@dataclass(frozen=True)
class Group:
    """A level hwloc inserts where no package/die/cache matches (nodes across packages, or by distance)."""

    cpuset: CpuSet
    numa_nodes: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class PciDevice:
    """A PCI function as sysfs lists it."""

    busid: str  # "0000:07:00.0"
    class_id: str  # "0302"
    vendor_id: str  # "10de"
    device_id: str  # "20b0"
    numa_node: int | None
    local_cpus: CpuSet
    driver: str | None = None
    names: tuple[str, ...] = ()  # OS devices under it, RDMA first: "mlx5_0", "eth0", "nvme0"
    rdma_names: tuple[str, ...] = ()  # those sysfs lists under infiniband/ (the RDMA devices)
    parent: str | None = None  # id of the PciBridge above it; None when bridges are not known
    subsystem_id: str = "0000:0000"  # subsystem vendor:device, "10de:18be"

    @property
    def id(self) -> str:
        return f"{self.vendor_id}:{self.device_id}"


@dataclass(frozen=True)
class PciBridge:
    """A bridge of the PCI tree, as lstopo shows it: a host bridge (`id` "pci0000:00", its Linux directory,
    no PCI function of its own; `local_cpus` where hwloc attaches its tree) or a PCI-to-PCI bridge (`id` its bus id)."""

    id: str
    parent: str | None  # id of the bridge above; None for a host bridge
    domain: int
    secondary_bus: int  # the buses below it: secondary_bus..subordinate_bus
    subordinate_bus: int
    local_cpus: CpuSet
    class_id: str | None = None  # "0604"; None for a host bridge
    vendor_id: str | None = None
    device_id: str | None = None

    @property
    def is_host(self) -> bool:
        return self.parent is None


@dataclass(frozen=True)
class OsDevice:
    """What the OS names below a PCI function (or near a NUMA node): lstopo's OS devices."""

    name: str  # "sda", "nvme0n1", "eth0", "ib0", "mlx5_0", "card0", "dma0chan0", "dax0.0"
    type: str  # "block" | "net" | "openfabrics" | "gpu" | "coproc" | "dma"
    parent: str | None  # bus id of its PCI function; None when it hangs from a CPU-side object
    local_cpus: CpuSet  # the CPUs of the object it hangs from (its PCI tree's locality, or its node's)
    subtype: str | None = None  # lstopo's: "Disk", "NVM", ...


@dataclass(frozen=True)
class Device:
    """An accelerator or NIC that planners place processes next to."""

    kind: str  # "gpu" | "npu" | "nic" | "nvme" | "accel"
    vendor: str  # "nvidia", "huawei", "amd", "intel", "mellanox", ...
    index: int  # physical id as its runtime numbers it (NVML index, npu-smi logical id)
    busid: str | None
    numa_node: int | None
    local_cpus: CpuSet
    name: str | None = None
    uuid: str | None = None
    source: str = "sysfs"
    memory: int | None = None  # bytes of device memory, when a runtime tool reports it
    socket_cpus: CpuSet | None = None  # NVML's SOCKET-scope affinity; None when not reported


@dataclass(frozen=True, kw_only=True)
class Topology:
    """One machine: its PU sets, its objects by type, and how each probe fared. Fields are in the
    order of the JSON keys; `root` and `probes` go under "source"."""

    root: str
    probes: Mapping[str, str] = field(default_factory=dict)
    info: Mapping[str, str] = field(default_factory=dict)
    pus: CpuSet  # online PUs with a topology entry, restricted as the view says
    allowed_pus: CpuSet  # those the cgroup cpuset and the affinity allow
    complete_pus: CpuSet  # every PU known, offline or disallowed included
    online_pus: CpuSet
    allowed_numa_nodes: CpuSet
    packages: tuple[Package, ...]
    dies: tuple[Die, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    numa_nodes: tuple[NumaNode, ...]
    cores: tuple[Core, ...]
    caches: tuple[Cache, ...] = ()
    memory_side_caches: tuple[MemorySideCache, ...] = ()
    groups: tuple[Group, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    pci_bridges: tuple[PciBridge, ...] = ()
    os_devices: tuple[OsDevice, ...] = ()
    devices: tuple[Device, ...] = ()
    links: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    cpukinds: tuple[CpuKind, ...] = ()  # by efficiency when ranked
    include_disallowed: bool = False  # the view `discover(include_disallowed=...)` asked for

    @property
    def is_this_system(self) -> bool:
        return self.root in ("/", "")

    def numa_node(self, os_index: int) -> NumaNode:
        for node in self.numa_nodes:
            if node.os_index == os_index:
                return node
        raise KeyError(os_index)

    def memory_node_of(self, device: Device) -> NumaNode | None:
        """The NUMA node holding `device`'s own memory (a GPU's HBM the driver onlined as a node:
        GH200, GB200 without CDMM), or None when its memory is not a node."""
        if device.busid is None:
            return None
        busid = device.busid.lower()
        return next((n for n in self.numa_nodes if n.busid is not None and n.busid.lower() == busid), None)

    def cpu_nodes(self) -> tuple[NumaNode, ...]:
        """NUMA nodes that own CPUs (never memory-only), allowed ones only."""
        return tuple(n for n in self.numa_nodes if not n.memory_only and n.os_index in self.allowed_numa_nodes
                     and n.cpuset)

    def last_level_caches(self) -> tuple[Cache, ...]:
        """The highest-level data/unified caches (L3 on most servers), the 'core complexes'."""
        caches = [c for c in self.caches if c.type != "instruction" and c.cpuset]
        top = max((c.level for c in caches), default=None)
        return tuple(c for c in caches if c.level == top)

    def summary(self) -> str:
        kinds = Counter(d.kind for d in self.devices)
        counts = [(len(self.packages), "package"), (len(self.numa_nodes), "NUMA node"), (len(self.cores), "core"),
                  (self.pus.weight(), "PU")]
        counts += [(kinds[k], noun) for k, noun in (("gpu", "GPU"), ("npu", "NPU"), ("accel", "accelerator"),
                                                    ("nic", "NIC")) if kinds[k]]
        return ", ".join(f"{n} {noun}{'' if n == 1 else 's'}" for n, noun in counts)

    def io_view(self, io: str = "important", bridges: bool = True) -> "Topology":
        """The I/O objects lstopo shows with the same flags: `io` "important" (its default: storage, network,
        display, co-processor and accelerator functions, the bridges leading to them, OS devices but DMA
        channels and DRM cards), "whole" (`--whole-io`) or "none" (`--no-io`); `bridges=False` (`--no-bridges`)
        drops the bridges, the functions keep their locality. `devices` (for planners) is never filtered."""
        if io not in ("important", "whole", "none"):
            raise ValueError(f"io must be 'important', 'whole' or 'none', not {io!r}")
        if io == "none":
            return replace(self, pci_devices=(), pci_bridges=(), os_devices=())
        functions, osdevs = self.pci_devices, self.os_devices
        if io == "important":
            functions = tuple(d for d in functions if _important(d.class_id))
            osdevs = tuple(o for o in osdevs if o.type not in ("dma", "gpu"))
        kept = {d.busid for d in functions}
        osdevs = tuple(o if o.parent is None or o.parent in kept else replace(o, parent=None) for o in osdevs)
        if not bridges:
            functions, shown = tuple(replace(d, parent=None) for d in functions), ()
        elif io == "whole":
            shown = self.pci_bridges
        else:  # bridges with nothing below them go, as hwloc__filter_bridges removes them
            by_id, used = {b.id: b for b in self.pci_bridges}, set()
            for d in functions:
                up = d.parent
                while up is not None and up not in used and up in by_id:
                    used.add(up)
                    up = by_id[up].parent
            shown = tuple(b for b in self.pci_bridges if b.id in used)
        return replace(self, pci_devices=functions, pci_bridges=shown, os_devices=osdevs)

    def with_devices(self, devices: Iterable[Device], **changes) -> "Topology":
        return replace(self, devices=tuple(devices), **changes)

    def check(self) -> None:
        """ProbeError if the topology breaks an invariant, as `hwloc_topology_check()` (time linear in the objects)."""
        problems = _problems(self)
        if problems:
            raise ProbeError("topology check failed: " + "; ".join(problems[:5]))

    def to_dict(self) -> dict:
        """The `topo show --json` form (schema topo.topology/1)."""
        return {"schema": SCHEMA, "source": {"root": self.root, "probes": dict(self.probes)}, **_encode(self)}

    @classmethod
    def from_dict(cls, data: Mapping) -> "Topology":
        """Read back what `to_dict` wrote; ProbeError naming the key when something is wrong."""
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            found = data.get("schema") if isinstance(data, Mapping) else type(data).__name__
            raise ProbeError(f"not a topo topology: schema is {excerpt(str(found))!r}, expected {SCHEMA!r} "
                             "(write one with `topo show --json`)")
        try:
            source = data.get("source", "nothing")
            if not isinstance(source, Mapping) or not isinstance(source.get("root"), str):
                raise _Malformed("source", "expected an object with a 'root' string and 'probes'", source)
            probes = _from_json(Mapping[str, str], source.get("probes", {}), "source.probes")
            return _decode(cls, data, "", root=source["root"], probes=probes)
        except _Malformed as exc:
            where, what, found = exc.args
            raise ProbeError(f"malformed topology JSON: {where}: {what}, found {excerpt(repr(found))} "
                             "(regenerate it with `topo show --json`)") from None


def _important(class_id: str) -> bool:
    """hwloc_filter_check_pcidev_subtype_important: unclassified (BXI), storage, network, display,
    processor, accelerator base classes; fibre channel, InfiniBand and CXL memory."""
    return class_id[:2] in ("00", "01", "02", "03", "0b", "12") or class_id in ("0c04", "0c06", "0502")


# ---- invariants ------------------------------------------------------------------------------


def _problems(t: Topology) -> list[str]:
    """Every invariant `check()` enforces, one message per broken one."""
    problems = []
    if t.complete_pus.weight() > MAX_PUS:
        return [f"{t.complete_pus.weight()} PUs, more than the {MAX_PUS} any Linux machine has"]
    # allowed <= shown <= online <= complete: discovery starts from the online PUs and narrows them.
    if not t.allowed_pus <= t.pus:
        problems.append(f"allowed PUs {excerpt(str(t.allowed_pus - t.pus))} not among the PUs")
    if not t.pus <= t.online_pus:
        problems.append(f"PUs {excerpt(str(t.pus - t.online_pus))} not online")
    if not t.online_pus <= t.complete_pus:
        problems.append(f"online PUs {excerpt(str(t.online_pus - t.complete_pus))} outside the complete set")

    packages: dict[int | None, list[CpuSet]] = {}  # ia64 dumps reuse one id for several packages
    seen = EMPTY
    for pkg in t.packages:
        packages.setdefault(pkg.os_index, []).append(pkg.cpuset)
        if seen.intersects(pkg.cpuset):
            problems.append(f"package P#{pkg.os_index} overlaps another")
        seen |= pkg.cpuset
        if not pkg.cpuset <= t.pus:
            problems.append(f"package P#{pkg.os_index} has PUs outside the topology")

    covered = EMPTY
    for core in t.cores:
        # core.package None: sysfs gave its CPUs no package mask, so hwloc has no package there
        if packages and core.package is not None and not any(core.cpuset <= p for p in packages.get(core.package, ())):
            problems.append(f"core P#{core.os_index} not inside a package P#{core.package}")
        if not core.cpuset:
            problems.append(f"core P#{core.os_index} of package {core.package} has no PU")
        if covered.intersects(core.cpuset):
            problems.append(f"PUs {excerpt(str(covered & core.cpuset))} in two cores")
        covered |= core.cpuset
        if len(problems) > 5:
            return problems  # a broken file would otherwise list every core
    if t.cores and covered != t.pus:  # no core at all: sysfs had no core masks (hwloc has none)
        problems.append(f"PUs not in exactly one core: {excerpt(str(covered ^ t.pus))}")

    for die in t.dies:
        if not any(die.cpuset <= p for p in packages.get(die.package, ())):
            problems.append(f"die P#{die.os_index} not inside package P#{die.package}")

    seen = EMPTY
    node_ids = set()
    for node in t.numa_nodes:
        if node.os_index in node_ids:
            problems.append(f"NUMA node P#{node.os_index} listed twice")
        node_ids.add(node.os_index)
        if seen.intersects(node.cpuset):
            problems.append(f"NUMA node P#{node.os_index} overlaps another")
        seen |= node.cpuset
        if node.memory_only and node.cpuset:
            problems.append(f"memory-only NUMA node P#{node.os_index} has CPUs")
        if not node.cpuset <= node.locality:
            problems.append(f"NUMA node P#{node.os_index} CPUs outside its locality")
    if not t.allowed_numa_nodes <= CpuSet(i for i in node_ids if i >= 0):
        problems.append(f"allowed NUMA nodes {excerpt(str(t.allowed_numa_nodes))} not all listed")

    # Caches nest (of two levels, disjoint or the lower one inside) and hold only the topology's PUs.
    # Each level maps a PU to its cache: one pass over each cache's PUs, not a comparison of every pair.
    by_level: dict[int, list[Cache]] = {}
    for cache in t.caches:
        if not cache.cpuset <= t.pus:
            problems.append(f"L{cache.level} cache {excerpt(str(cache.cpuset))} has PUs outside the topology")
        if cache.type != "instruction":
            by_level.setdefault(cache.level, []).append(cache)
    levels = sorted(by_level)
    for lo, hi in zip(levels, levels[1:]):
        holder = {pu: big for big in by_level[hi] for pu in big.cpuset}
        for small in by_level[lo]:
            bigs = {id(holder[pu]): holder[pu] for pu in small.cpuset if pu in holder}
            for big in bigs.values():
                if not small.cpuset <= big.cpuset:
                    problems.append(f"L{lo} cache {excerpt(str(small.cpuset))} straddles "
                                    f"L{hi} cache {excerpt(str(big.cpuset))}")
                    break
    return problems


# ---- JSON ----------------------------------------------------------------------------------------

# JSON keys not named as their field; None: the field is not written (Topology's root and probes go
# under "source", the view flag nowhere; PciDevice's "id" holds vendor_id and device_id).
_KEYS = {
    "PciDevice": {"class_id": "class", "vendor_id": "id", "device_id": None},
    "PciBridge": {"class_id": "class"},
    "Topology": {"root": None, "probes": None, "include_disallowed": None},
}
_SCALARS = {int: "expected an integer", str: "expected a string", bool: "expected true or false"}


class _Malformed(Exception):
    """(where, what, found): the path of a value in the JSON, what is wrong with it, the value."""


@functools.cache
def _schema(cls) -> list[tuple[Field, str, object]]:
    """(field, JSON key, type) of each field written to JSON, in field order."""
    hints = get_type_hints(cls)
    keys = _KEYS.get(cls.__name__, {})
    return [(f, keys.get(f.name, f.name), hints[f.name]) for f in fields(cls) if keys.get(f.name, f.name)]


def _encode(obj) -> dict:
    return {key: obj.id if key == "id" and isinstance(obj, PciDevice) else _to_json(tp, getattr(obj, f.name))
            for f, key, tp in _schema(type(obj))}


def _to_json(tp, value):
    args = get_args(tp)
    if value is None or tp in _SCALARS:
        return value
    if tp is CpuSet:
        return value.to_list()
    if get_origin(tp) is UnionType:  # X | None
        return _to_json(args[0], value)
    if get_origin(tp) is tuple:
        return [_to_json(args[0], v) for v in value]
    if get_origin(tp) is abc.Mapping:
        items = sorted(value.items()) if args[0] is int else value.items()
        return {str(k): _to_json(args[1], v) for k, v in items}
    return _encode(value)


def _decode(cls, data: Mapping, where: str, **values):
    """An object of dataclass `cls` from its JSON object; a field without its key takes its default."""
    prefix = f"{where}." if where else ""
    for f, key, tp in _schema(cls):
        path = prefix + key
        if key not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise _Malformed(path, "missing", "nothing")
        elif key == "id" and cls is PciDevice:
            text = _from_json(str, data[key], path)
            if text.count(":") != 1:
                raise _Malformed(path, "expected 'vendor:device' such as '10de:20b0'", text)
            values["vendor_id"], values["device_id"] = text.split(":")
        else:
            values[f.name] = _from_json(tp, data[key], path)
    return cls(**values)


def _from_json(tp, value, where: str):
    args = get_args(tp)
    if get_origin(tp) is UnionType:  # X | None
        return None if value is None else _from_json(args[0], value, where)
    if tp is CpuSet:
        if not isinstance(value, str):
            raise _Malformed(where, "expected a cpulist string such as '0-3,8'", value)
        try:
            return CpuSet.parse(value)
        except ParseError as exc:
            raise _Malformed(where, str(exc), value) from None
    if tp in _SCALARS:
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise _Malformed(where, _SCALARS[tp], value)
        if tp is int and value < 0:
            raise _Malformed(where, "expected a non-negative integer", value)
        return value
    if get_origin(tp) is tuple:
        if not isinstance(value, list):
            raise _Malformed(where, "expected a list", value)
        return tuple(_from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if not isinstance(value, Mapping):
        raise _Malformed(where, "expected an object", value)
    if get_origin(tp) is not abc.Mapping:
        return _decode(tp, value, where)
    out = {}
    for k, v in value.items():
        if args[0] is int and not (isinstance(k, str) and k.isascii() and k.isdigit() and len(k) <= 7):
            raise _Malformed(f"{where}.{excerpt(str(k), 20)}", "expected a NUMA node number as key", v)
        out[int(k) if args[0] is int else k] = _from_json(args[1], v, f"{where}.{excerpt(str(k), 20)}")
    return out
