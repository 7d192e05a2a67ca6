"""A Topology from an hwloc XML export (`lstopo --of xml FILE`), v2 format and v1.

v2 (`<topology version="2.0">` or later): NUMA nodes are memory children whose cpuset is their locality,
`<distances2>` matrices by OS index, the allowed sets on the Machine. v1: `Socket`, one `Cache` type with `depth`,
NUMA nodes in the CPU tree with their own CPUs, `<distances>` by logical index in multiples of `latency_base`.
hwloc does not say which CPUs a NUMA node owns when several share a locality (DDR beside GPU or NVM memory):
nodes with a subtype own none, then smaller localities claim first, lower OS index first."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from xml.parsers import expat

from topo.cpuset import EMPTY, MAX_ID, CpuSet, excerpt
from topo.errors import ParseError, ProbeError
from topo.model import (MAX_PUS, Cache, Cluster, Core, CpuKind, Die, Group, MemorySideCache, NumaNode, OsDevice,
                        Package, PciBridge, PciDevice, Topology)
from topo.probes.devices import link_matrix, numa_from_cpus, sort_devices, sysfs_devices, tree_chains
from topo.probes.pci import bus_key
from topo.tree import CACHE_TYPE, GROUP_KINDS, OSDEV_TYPES, merge_groups

# An export holds four or five elements per PU (PU, Core, caches) and a few per PCI function, each
# over 100 bytes of XML: four per PU of MAX_PUS is more than fits in a file topo reads. An element
# costs 80 to 450 bytes of tree, so this also bounds what tiny elements repeated can cost.
MAX_ELEMENTS = 4 * MAX_PUS
MAX_ATTRIBUTES = 8 * MAX_ELEMENTS  # an object has up to a dozen, an info two; each costs some 100 bytes
# hwloc nests CPU-side objects a dozen deep and PCI bridges behind switches some twenty more.
MAX_DEPTH = 128
# Names of elements and attributes told apart: hwloc's formats (v1 to v3) use some seventy.
MAX_NAMES = 256
# The longest tag an export holds: an object's six bitmaps up to CPU MAX_ID, 360 KB each.
MAX_TAG = 4 << 20
_CHUNK = 1 << 20  # characters handed to expat at a time

_BUS_ID = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_SUBSYSTEM = re.compile(r"\S+ \[\S+\] \[([0-9a-fA-F]{4}:[0-9a-fA-F]{4})\]")

_HWLOC_WORDS = re.compile(r"\A(?:0x[0-9a-fA-F]{1,8})?(?:,(?:0x[0-9a-fA-F]{1,8})?)*\Z")
_CACHE_TYPES = {str(code): kind for kind, code in CACHE_TYPE.items()}
_V2_CACHES = {"L1Cache": 1, "L2Cache": 2, "L3Cache": 3, "L4Cache": 4, "L5Cache": 5,
              "L1iCache": 1, "L2iCache": 2, "L3iCache": 3}


def parse_bitmap(text: str | None) -> CpuSet:
    """hwloc's `0xffffffff,,0x0000000f` (most significant word first, empty: 0; an infinite set's `0xf...f` dropped)."""
    if not text:
        return EMPTY
    text = text.strip()
    if text.count(",") > (MAX_ID + 1) // 32:  # more words than MAX_ID needs, an infinite set's one more
        raise ParseError(f"hwloc bitmap {excerpt(text)!r} has bits above {MAX_ID}, the largest CPU or node id")
    if _HWLOC_WORDS.match(text):
        # What hwloc writes: one int() of the whole mask, each word padded to 32 bits (an empty
        # word between commas is an all-zero one: lstopo 2.x writes 0x00000011,,0x0).
        digits = "".join(w[2:].zfill(8) for w in text.split(","))
        if len(digits.lstrip("0")) <= (MAX_ID + 1) // 4:
            return CpuSet.from_mask(int(digits, 16))
    words = [w or "0x0" for w in text.split(",") if "..." not in w]
    if not words:
        return EMPTY
    try:
        return CpuSet.parse_mask(",".join(words))
    except ParseError as exc:
        raise ParseError(f"bad hwloc bitmap {excerpt(text)!r}: {exc}") from None


def _int(el, name: str, default=None):
    value = el.get(name)
    return default if value is None else _number(value, f"{el.get('type') or el.tag} attribute {name}")


def _number(text: str, what: str) -> int:
    """A non-negative integer as hwloc writes them (unsigned, at most 64 bits), ASCII digits only."""
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise ParseError(f"hwloc XML: {what}={text[:40]!r} is not a non-negative integer")
    return int(text)


def _numbers(elements, what: str) -> list[int]:
    return [_number(x, what) for e in elements for x in (e.text or "").split()]


def _real(text: str | None, what: str) -> float:
    """A finite decimal (hwloc v1 latencies); ParseError for absent, nan, inf or garbage."""
    if text is None:
        raise ParseError(f"hwloc XML: a {what.split()[0]} without a value")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value == value and abs(value) < 1e18):  # nan is the value that is not itself
        raise ParseError(f"hwloc XML: {what}={str(text)[:40]!r} is not a finite number")
    return value


@dataclass
class _Walk:
    """What the walk of an export found, by kind (a typo in a kind is an AttributeError, not an empty list)."""
    packages: list = field(default_factory=list)
    dies: list = field(default_factory=list)
    clusters: list = field(default_factory=list)
    cores: list = field(default_factory=list)
    caches: list = field(default_factory=list)
    nodes: list = field(default_factory=list)  # (element, locality, parent cpuset)
    memcaches: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    pci: list = field(default_factory=list)  # (PCIDev element, locality, parent bridge id)
    bridges: list = field(default_factory=list)  # PciBridge
    osdevs: list = field(default_factory=list)  # (OSDev element, locality, parent bus id)
    pus: list = field(default_factory=list)


def _walk(el, w: _Walk, package: int | None, parent_set: CpuSet, io_parent: str | None = None) -> None:
    """`el` and the objects below it into `w`, a list per kind: model objects; (element, cpuset) for Groups; (element,
    cpuset, parent's cpuset) for NUMA nodes; (element, parent's cpuset, bridge or bus id above) for I/O devices."""
    t = el.get("type")
    cpuset = parse_bitmap(el.get("cpuset")) & parent_set  # within its parent's, as hwloc's fixup_sets makes it
    if t in ("Package", "Socket"):
        package = _int(el, "os_index", len(w.packages))
        model = next((i.get("value") for i in el.findall("info") if i.get("name") == "CPUModel"), None)
        w.packages.append(Package(package, cpuset, model))
    elif t == "Die":
        w.dies.append(Die(_int(el, "os_index", len(w.dies)), package or 0, cpuset))
    elif t == "Group" and (el.get("subtype") or "").lower() == "cluster":
        w.clusters.append(Cluster(_int(el, "os_index", len(w.clusters)), package or 0, cpuset))
    elif t == "Group" and el.get("kind") != str(GROUP_KINDS["io"][0]):  # I/O locality groups are no level
        w.groups.append((el, cpuset))
    elif t == "Core":
        w.cores.append(Core(_int(el, "os_index"), package, cpuset))
    elif t == "PU":
        w.pus.append(_int(el, "os_index"))
    elif t in _V2_CACHES or t == "Cache":
        level = _V2_CACHES.get(t) or _int(el, "depth", 0)
        kind = "instruction" if "i" in t[2:] else _CACHE_TYPES.get(el.get("cache_type", "0"), "unified")
        if not 1 <= level <= (3 if kind == "instruction" else 5):  # hwloc's cache types: L1-L5, L1i-L3i
            raise ParseError(f"hwloc XML: a cache of level {level}; hwloc knows levels 1-5")
        size = _int(el, "cache_size", 0)
        if size:  # hwloc keeps zero-sized caches out of lstopo's view; so do we
            w.caches.append(Cache(level, kind, size, cpuset, _int(el, "cache_linesize") or None,
                                  _int(el, "cache_associativity") or None))
    elif t == "MemCache":
        nodes = tuple(parse_bitmap(el.get("nodeset")))
        w.memcaches.append(MemorySideCache(_int(el, "cache_size", 0), nodes, cpuset))
    elif t == "NUMANode":
        w.nodes.append((el, cpuset, parent_set))
    elif t == "Bridge":
        bridge = _bridge(el, io_parent, parent_set)
        if bridge is not None:
            w.bridges.append(bridge)
            io_parent = bridge.id
    elif t == "PCIDev":
        w.pci.append((el, parent_set, io_parent))
        io_parent = el.get("pci_busid", "").lower() or io_parent
    elif t == "OSDev":
        w.osdevs.append((el, parent_set, io_parent))
    if t not in ("Bridge", "PCIDev", "OSDev", "Misc") and cpuset:
        parent_set = cpuset
    for child in el.findall("object"):
        _walk(child, w, package, parent_set, io_parent)


_BRIDGE_PCI = re.compile(r"([0-9a-fA-F]{1,8}):\[([0-9a-fA-F]{1,2})-([0-9a-fA-F]{1,2})\]\Z")


def _bridge(el, parent: str | None, locality: CpuSet) -> PciBridge | None:
    """A host bridge ("0-1") or PCI-to-PCI one ("1-1", with its own bus id); None for kinds topo does not model."""
    m = _BRIDGE_PCI.match(el.get("bridge_pci") or "")
    if not m:
        return None
    domain, secondary, subordinate = (int(x, 16) for x in m.groups())
    if el.get("bridge_type") == "0-1":
        return PciBridge(f"pci{domain:04x}:{secondary:02x}", None, domain, secondary, subordinate, locality)
    busid = (el.get("pci_busid") or "").lower()
    class_id, vendor, device = _pci_type(el, busid)
    return PciBridge(busid, parent or f"pci{domain:04x}:{int(busid.split(':')[1], 16):02x}", domain, secondary,
                     subordinate, locality, class_id, vendor, device)


def _pci_type(el, busid: str) -> tuple[str, str, str]:
    """(class, vendor, device) from `pci_type="0302 [10de:20b2] [10de:1463] a1"`."""
    fields = (el.get("pci_type") or "").split()
    if not _BUS_ID.match(busid) or len(fields) < 2 or not fields[1].startswith("["):
        raise ParseError(f"hwloc XML: {el.get('type')} {busid or '?'} has no bus id and "
                         "'class [vendor:device]' pci_type")
    vendor, _, device = fields[1].strip("[]").partition(":")
    return fields[0].lower(), vendor.lower(), device.lower()


def _pci_device(el, locality: CpuSet, parent: str | None, nodes_at: dict[CpuSet, list[int]]) -> PciDevice:
    busid = el.get("pci_busid", "").lower()
    class_id, vendor, device = _pci_type(el, busid)
    infos = _infos(el)
    if "topoNUMANode" in infos:  # written by topo: what sysfs said
        node = None if infos["topoNUMANode"] == "none" else _number(infos["topoNUMANode"], "topoNUMANode")
    else:  # the one node whose locality is exactly where hwloc attached the device
        at = nodes_at.get(locality, [])
        node = at[0] if len(at) == 1 else None
    child_names = tuple(o.get("name") for o in el.iter("object") if o.get("type") == "OSDev" and o.get("name"))
    names = tuple(infos["topoNames"].split()) if "topoNames" in infos else child_names
    rdma = tuple(infos.get("topoRDMANames", "").split())
    subsystem = _SUBSYSTEM.match(el.get("pci_type") or "")  # "0302 [10de:20b2] [10de:1463] a1"
    return PciDevice(busid, class_id, vendor, device, node, locality, infos.get("topoDriver"), names, rdma, parent,
                     subsystem.group(1).lower() if subsystem else "0000:0000")


def _group_reason(el, cpuset: CpuSet) -> str:
    """A Group element's model reason: by hwloc's kind, else its subtype (topo's, from before it wrote kinds)."""
    kind = (el.get("kind"), el.get("subkind", "0"))
    if kind[0] == str(GROUP_KINDS["numa"][0]):
        return "numa" if cpuset else "cpu-less"
    return next((reason for reason, (k, sub, _) in GROUP_KINDS.items() if kind == (str(k), str(sub))),
                el.get("subtype") or "hwloc")


def _cpukinds(root, pus: CpuSet) -> tuple[CpuKind, ...]:
    """The `<cpukind>` elements ranked as hwloc ranks them on import (topo writes efficiencies as forced_efficiency)."""
    from topo.probes.cpukinds import rank_kinds

    kinds = []
    for el in root.iter("cpukind"):
        cpus = parse_bitmap(el.get("cpuset")) & pus
        if cpus:
            forced = el.get("forced_efficiency") or ""
            kinds.append({"pus": set(cpus), "forced": int(forced) if forced.isascii() and forced.isdigit()
                          and len(forced) < 10 else None, "infos": _infos(el)})
    return tuple(CpuKind(CpuSet(k["pus"]), efficiency, k["infos"]) for k, efficiency in rank_kinds(kinds))


def _infos(el) -> dict[str, str]:
    return {i.get("name"): i.get("value", "") for i in el.findall("info") if i.get("name")}


# hwloc 2.x numbers OS device types; 3.0 writes a bitmask of them (memory, 1 << 1, read as block)
_OSDEV_V2 = {str(code): kind for kind, code in OSDEV_TYPES.items()}
_OSDEV_V3 = ((1 << 5, "openfabrics"), (1 << 4, "net"), (1 << 0, "block"), (1 << 1, "block"), (1 << 2, "gpu"),
             (1 << 3, "coproc"), (1 << 6, "dma"))


def _os_device(el, locality: CpuSet, parent: str | None, version3: bool) -> OsDevice:
    value, kind = el.get("osdev_type") or "0", _infos(el).get("topoType")
    if kind is None and version3:
        kind = next((name for bit, name in _OSDEV_V3 if _number(value, "osdev_type") & bit), "block")
    elif kind is None:
        kind = _OSDEV_V2.get(value, "block")
    return OsDevice(el.get("name") or "", kind, parent if parent and _BUS_ID.match(parent) else None, locality,
                    el.get("subtype"))


def _distances_v2(root, nodes_by_index: dict[int, int]) -> dict[int, dict[int, int]]:
    out: dict[int, dict[int, int]] = {}
    for d in root.iter("distances2"):
        if d.get("type") != "NUMANode":
            continue
        # Long lists are split over several <indexes> / <u64values> elements of one matrix.
        indexes = _numbers(d.findall("indexes"), "distances2 index")
        values = _numbers(d.findall("u64values"), "distances2 value")
        n = len(indexes)
        if len(values) != n * n:
            raise ParseError(f"hwloc XML: distances2 has {len(values)} values for {n} nodes")
        if d.get("indexing") != "os":  # gp-index: ids of the objects, mapped back to OS indexes
            indexes = [nodes_by_index.get(i, i) for i in indexes]
        for a, i in enumerate(indexes):
            out.setdefault(i, {}).update({j: values[a * n + b] for b, j in enumerate(indexes)})
    return out


def _distances_v1(root, node_order: list[int]) -> dict[int, dict[int, int]]:
    out: dict[int, dict[int, int]] = {}
    for d in root.iter("distances"):
        n = _int(d, "nbobjs", 0)
        if n != len(node_order):
            continue
        base = _real(d.get("latency_base") or "1", "distances latency_base")
        values = [_real(lat.get("value"), "<latency/> value") * base for lat in d.findall("latency")]
        if min(values, default=0) < 0:
            raise ParseError("hwloc XML: a negative <latency/> value")
        if len(values) != n * n:
            continue
        for a, i in enumerate(node_order):
            out[i] = {j: round(values[a * n + b]) for b, j in enumerate(node_order)}
    return out


def parse_hwloc_xml(text: str, source: str = "<xml>") -> Topology:
    """The Topology an hwloc XML export describes. `source` names the file in errors and `root`."""
    try:
        root = _element_tree(text)
    except expat.ExpatError as exc:
        raise ProbeError(f"{source}: not XML ({exc}); export one with `lstopo --of xml FILE`") from None
    except ParseError as exc:
        raise ProbeError(f"{source}: {exc}, which no hwloc export holds; export one with "
                         "`lstopo --of xml FILE`") from None
    if root.tag != "topology":
        raise ProbeError(f"{source}: not an hwloc topology (root element <{root.tag}>); "
                         "export one with `lstopo --of xml FILE`")
    version = 2 if root.get("version") else 1
    machine = root.find("object")
    if machine is None or machine.get("type") not in ("Machine", "System"):
        raise ProbeError(f"{source}: hwloc XML without a Machine object")
    try:
        topology = _build(root, machine, version, source)
        topology.check()
    except (ParseError, ProbeError) as exc:
        raise ProbeError(f"{source}: {exc}; export it again with `lstopo --of xml FILE`") from None
    return topology


def _element_tree(text: str) -> ET.Element:
    """The document's elements, streamed through expat in memory proportional to the file; ParseError at the first
    bound passed or DOCTYPE declaring entities (hwloc writes none; one repeated can cost a hundred times the file)."""
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate("utf-8")
    parser.buffer_text = True
    count = depth = attribute_count = 0

    def start(tag: str, attributes: dict) -> None:
        nonlocal count, depth, attribute_count
        count += 1
        depth += 1
        attribute_count += len(attributes)
        if count > MAX_ELEMENTS:
            raise ParseError(f"more than {MAX_ELEMENTS} elements")
        if attribute_count > MAX_ATTRIBUTES:
            raise ParseError(f"more than {MAX_ATTRIBUTES} attributes")
        if depth > MAX_DEPTH:
            raise ParseError(f"elements nested more than {MAX_DEPTH} deep")
        if len(parser.intern) > MAX_NAMES:
            raise ParseError(f"more than {MAX_NAMES} names of elements and attributes")
        builder.start(tag, attributes)

    def end(tag: str) -> None:
        nonlocal depth
        depth -= 1
        builder.end(tag)

    def doctype(name: str, system: str | None, public: str | None, declarations: bool) -> None:
        if declarations:
            raise ParseError(f"a DOCTYPE {excerpt(name)} with declarations (entities, element types)")

    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.CharacterDataHandler, parser.StartDoctypeDeclHandler = builder.data, doctype
    fed = 0
    for at in range(0, len(text), _CHUNK):
        chunk = text[at:at + _CHUNK].encode("utf-8", "surrogatepass")  # a lone surrogate: not well-formed
        fed += len(chunk)
        parser.Parse(chunk, False)
        if fed - parser.CurrentByteIndex > MAX_TAG:  # what expat holds unparsed: the token it is in
            raise ParseError(f"a tag or comment longer than {MAX_TAG >> 20} MiB")
    parser.Parse(b"", True)
    return builder.close()


def _build(root, machine, version: int, source: str) -> Topology:
    w = _Walk()
    machine_set = parse_bitmap(machine.get("cpuset"))
    _walk(machine, w, None, machine_set)
    pus = CpuSet(p for p in w.pus if p is not None) if w.pus else machine_set
    complete = parse_bitmap(machine.get("complete_cpuset")) | pus
    allowed = (parse_bitmap(machine.get("allowed_cpuset")) & pus) if machine.get("allowed_cpuset") else pus
    machine_info = _infos(machine)
    online = CpuSet.parse(machine_info["topoOnlineCPUs"]) if "topoOnlineCPUs" in machine_info else pus
    node_ids = [_int(el, "os_index", i) for i, (el, _, _) in enumerate(w.nodes)]
    all_nodes = CpuSet(node_ids)
    allowed_nodes = (parse_bitmap(machine.get("allowed_nodeset")) & all_nodes
                     if machine.get("allowed_nodeset") else all_nodes)

    # Which CPUs each node owns is decided on complete sets, so a node whose CPUs the cgroup
    # disallows is still a CPU node with nothing allowed, not a memory-only one.
    complete_own: dict[int, CpuSet] = {}
    localities: dict[int, CpuSet] = {}
    if version == 1:
        for i, (el, cpuset, parent_set) in zip(node_ids, w.nodes):
            complete_own[i] = parse_bitmap(el.get("complete_cpuset")) | cpuset
            localities[i] = cpuset if complete_own[i] else parent_set
    else:
        complete_localities = []  # (node, locality, memory-only: a subtype or topo's flag)
        for i, (el, cpuset, _) in zip(node_ids, w.nodes):
            # a v2 memory child's cpuset is its locality, unless topo wrote another one
            written = _infos(el).get("topoLocality")
            localities[i] = cpuset if written is None else EMPTY if written == "none" else CpuSet.parse(written)
            # topo writes whether a node owns CPUs; for others, a subtype says it owns none
            flag = _infos(el).get("topoMemoryOnly")
            memory_only = el.get("subtype") if flag is None else (flag == "1")
            held = parse_bitmap(el.get("complete_cpuset")) | cpuset if written is None else localities[i]
            complete_localities.append((i, held, memory_only))
        owned = EMPTY  # memory-only nodes own none, then smaller localities claim first
        for i, held, memory_only in sorted(complete_localities, key=lambda n: (bool(n[2]), n[1].weight(), n[0])):
            complete_own[i] = EMPTY if memory_only else held - owned
            owned |= complete_own[i]
    gp = {_int(el, "gp_index", -1): i for i, (el, _, _) in zip(node_ids, w.nodes)}
    distances = _distances_v2(root, gp) if version == 2 else _distances_v1(root, node_ids)
    if len(node_ids) == 1 and "topoNodeDistances" in machine_info:  # the 1x1 matrix hwloc keeps none of
        pairs = [x.partition(":") for x in machine_info["topoNodeDistances"].split()]
        distances = {node_ids[0]: {_number(a, "topoNodeDistances"): _number(b, "topoNodeDistances")
                                   for a, _, b in pairs}}
    nodes = tuple(sorted((NumaNode(i, complete_own[i] & pus, _int(el, "local_memory", 0),
                                   _infos(el).get("topoMemoryOnly", "1" if not complete_own[i] else "0") == "1",
                                   localities[i], {j: v for j, v in distances.get(i, {}).items() if j in all_nodes},
                                   el.get("subtype"), _infos(el).get("PCIBusID"))
                          for i, (el, _, _) in zip(node_ids, w.nodes)), key=lambda n: n.os_index))
    if not nodes:  # hwloc always has a node; a hand-written file may not
        nodes = (NumaNode(0, pus, 0, False, pus, {0: 10}),)
        allowed_nodes = CpuSet([0])

    groups = []
    for el, written in w.groups:
        cpuset = written & pus  # a CPU without a PU element is none
        if written and not cpuset:
            continue
        # the nodes local to its CPUs; topo's Group of CPU-less nodes: those without locality
        members = tuple(n.os_index for n in nodes if bool(n.locality) == bool(cpuset) and n.locality <= cpuset)
        groups.append(Group(cpuset, members, _group_reason(el, cpuset)))
    groups = merge_groups(groups, [o.cpuset for o in (*w.packages, *w.dies, *w.cores, *w.caches)], pus)
    nodes_at: dict[CpuSet, list[int]] = {}  # locality -> nodes: one lookup per PCI device
    for n in nodes:
        nodes_at.setdefault(n.locality, []).append(n.os_index)
    pci = (_pci_device(el, loc, parent, nodes_at) for el, loc, parent in w.pci)
    pci = tuple(sorted((d for d in pci if not d.class_id.startswith("06")), key=lambda d: bus_key(d.busid)))
    bridges = tuple(sorted(w.bridges, key=lambda b: (b.parent is not None, bus_key(b.id) if b.parent else
                                                     (b.domain, b.secondary_bus, 0, 0))))
    version3 = (root.get("version") or "").startswith("3")
    osdevs = tuple(_os_device(el, loc, parent, version3) for el, loc, parent in w.osdevs)
    info = {k: v for k, v in machine_info.items() if not k.startswith("topo")}
    topology = Topology(
        root=source, pus=pus, allowed_pus=allowed, complete_pus=complete, online_pus=online | pus,
        allowed_numa_nodes=allowed_nodes, numa_nodes=nodes,
        packages=tuple(sorted(w.packages, key=lambda p: p.cpuset.first())),
        cores=tuple(sorted(w.cores, key=lambda c: c.cpuset.first())),
        caches=tuple(sorted(w.caches, key=lambda c: (c.level, c.type != "data", c.cpuset.first()))),
        dies=tuple(w.dies), clusters=tuple(w.clusters), groups=tuple(groups),
        memory_side_caches=tuple(w.memcaches), pci_devices=pci, pci_bridges=bridges, os_devices=osdevs,
        include_disallowed=machine_info.get("topoIncludeDisallowed") == "1", cpukinds=_cpukinds(root, pus),
        probes={"hwloc-xml": f"ok (hwloc v{version} format)"}, info=info)
    devices = [numa_from_cpus(d, topology) for d in _with_nvml_identity(sysfs_devices(topology), w.pci)]
    devices = sort_devices(devices)
    return topology.with_devices(devices, links=link_matrix(devices, tree_chains(topology), {}))


def _with_nvml_identity(devices, pci_elements):
    """GPUs with the NVML index (`nvml3`), model and UUID of their OSDev in an export made with hwloc's NVML."""
    found = {}
    for el, _, _ in pci_elements:
        for osdev in el.iter("object"):
            m = re.fullmatch(r"nvml([0-9]{1,6})", osdev.get("name") or "")
            if osdev.get("type") == "OSDev" and m:
                info = _infos(osdev)
                found[el.get("pci_busid", "").lower()] = (int(m.group(1)), info.get("GPUModel"), info.get("NVIDIAUUID"))
    out = []
    for d in devices:
        if d.kind == "gpu" and d.busid in found:
            index, name, uuid = found[d.busid]
            d = replace(d, index=index, name=name or d.name, uuid=uuid or d.uuid, source="hwloc-nvml")
        out.append(d)
    return out
