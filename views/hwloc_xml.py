"""hwloc v2 XML out (`topo show --output FILE.xml`) for `lstopo-no-graphics -i`, `hwloc-calc --input`, `hwloc-bind
--input` and `topo.load_topology`: `topo.tree`'s tree, element for element. What hwloc has no attribute for (a PCI
function's NUMA node, driver and names; a NUMA node's own CPUs and odd locality; the online and disallowed sets) is
an `<info name="topo...">` of its object, shown by lstopo only with -v, so topo reads its own XML back equal.
Characters XML cannot carry (C0 controls but tab and newlines, U+FFFE, U+FFFF, lone surrogates): as `printable`."""

from __future__ import annotations

import re
from xml.sax.saxutils import quoteattr

from topo.cpuset import CpuSet
from topo.model import Topology
from topo.text import printable
from topo.tree import CACHE_TYPE, IO_TYPES, OSDEV_TYPES, Obj, bitmap, build

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value) -> str:
    """A value as an XML attribute, the characters XML forbids escaped as `printable` escapes them."""
    return quoteattr(_NOT_XML.sub(lambda m: printable(m.group()), str(value)))


def to_xml(t: Topology) -> str:
    """The topology as an hwloc v2 XML document (what `lstopo --of xml` writes)."""
    machine = build(t)
    nodesets: dict[int, int] = {}
    _nodesets(machine, 0, nodesets)
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">']
    _write(out, machine, t, 1, nodesets, 0)
    out.extend(_distances(t))
    for kind in t.cpukinds:  # the efficiency as hwloc's forced_efficiency: lstopo -i ranks them alike
        forced = "" if kind.efficiency is None else f' forced_efficiency="{kind.efficiency}"'
        out.append(f'  <cpukind cpuset="{bitmap(kind.cpuset)}"{forced}>')
        out.extend(f"    <info name={_text(k)} value={_text(v)}/>" for k, v in kind.infos.items())
        out.append("  </cpukind>")
    out.append("</topology>")
    return "\n".join(out) + "\n"


def _nodesets(obj: Obj, inherited: int, out: dict[int, int]) -> int:
    """hwloc's nodeset of each object: the nodes attached at it, above it or below it."""
    for m in obj.memory:
        out[id(m)] = sum(1 << n.os_index for n in (m.memory or [m]))
        out.update((id(n), 1 << n.os_index) for n in m.memory)
        inherited |= out[id(m)]
    below = 0
    for c in obj.children:
        below |= _nodesets(c, inherited, out)
    out[id(obj)] = inherited | below
    return out[id(obj)]


def _write(out: list[str], obj: Obj, t: Topology, level: int, nodesets: dict[int, int], bridges: int) -> None:
    """`obj` and what it holds as `<object>` elements, attributes and infos in hwloc's order."""
    m = obj.model
    attrs: list[tuple[str, object]] = [("type", obj.type), ("os_index", obj.os_index)]  # None: not written
    infos: list[tuple[str, str]] = []
    if obj.type not in IO_TYPES:
        machine = obj.type == "Machine"
        nodes = CpuSet.from_mask(nodesets[id(obj)])
        attrs += [("cpuset", bitmap(obj.cpuset)),
                  ("complete_cpuset", bitmap(t.complete_pus if machine else obj.cpuset)),
                  ("allowed_cpuset", bitmap(t.allowed_pus) if machine else None), ("nodeset", bitmap(nodes)),
                  ("complete_nodeset", bitmap(CpuSet(n.os_index for n in t.numa_nodes) if machine else nodes)),
                  ("allowed_nodeset", bitmap(t.allowed_numa_nodes) if machine else None)]
    attrs.append(("subtype", obj.subtype))
    if obj.type == "Group":
        attrs += [("kind", obj.kind)] + ([("subkind", obj.subkind)] if obj.subkind else [])
    elif obj.type == "Machine":
        infos = list(t.info.items())
        infos += [("topoOnlineCPUs", t.online_pus.to_list())] if t.online_pus != t.pus else []
        infos += [("topoIncludeDisallowed", "1")] if t.include_disallowed else []
        if len(t.numa_nodes) == 1 and t.numa_nodes[0].distances:  # hwloc keeps no 1x1 matrix
            infos.append(("topoNodeDistances", " ".join(f"{k}:{v}" for k, v in t.numa_nodes[0].distances.items())))
    elif obj.type == "Package" and m.model:
        infos.append(("CPUModel", m.model))
    elif obj.type.endswith("Cache"):
        attrs += [("cache_size", m.size), ("depth", getattr(m, "level", 1)),
                  ("cache_linesize", getattr(m, "line_size", None)), ("cache_associativity", getattr(m, "ways", None)),
                  ("cache_type", CACHE_TYPE.get(getattr(m, "type", "unified"), 0))]
    elif obj.type == "NUMANode":
        attrs.append(("local_memory", m.local_memory))
        infos.append(("topoMemoryOnly", "1" if m.memory_only else "0"))
        if m.busid:
            infos.append(("PCIBusID", m.busid))
        if m.locality != obj.cpuset:
            infos.append(("topoLocality", m.locality.to_list() or "none"))
    elif obj.type == "Bridge":
        attrs += [("bridge_type", "0-1" if m.is_host else "1-1"), ("depth", bridges),
                  ("bridge_pci", f"{m.domain:04x}:[{m.secondary_bus:02x}-{m.subordinate_bus:02x}]")]
        if not m.is_host:
            attrs += [("pci_busid", m.id), ("pci_type", f"{m.class_id or '0604'} [{m.vendor_id or '0000'}:"
                                                        f"{m.device_id or '0000'}] [0000:0000] 00")]
    elif obj.type == "PCIDev":
        attrs += [("pci_busid", m.busid),
                  ("pci_type", f"{m.class_id} [{m.vendor_id}:{m.device_id}] [{m.subsystem_id}] 00")]
        infos = [("topoNUMANode", str(m.numa_node) if m.numa_node is not None else "none"),
                 *([("topoDriver", m.driver)] if m.driver else []),
                 ("topoNames", " ".join(m.names)), ("topoRDMANames", " ".join(m.rdma_names))]
    elif obj.type == "OSDev":
        attrs += [("name", m.name), ("osdev_type", OSDEV_TYPES.get(m.type, 0))]
        infos += [*obj.infos, ("topoType", m.type)]
    pad = "  " * level
    head = f"{pad}<object " + " ".join(f"{k}={_text(v)}" for k, v in attrs if v is not None)
    kids = (*obj.memory, *obj.children, *obj.io)
    if not infos and not kids:
        out.append(head + "/>")
        return
    out.append(head + ">")
    out.extend(f"{pad}  <info name={_text(k)} value={_text(v)}/>" for k, v in infos)
    for kid in kids:
        _write(out, kid, t, level + 1, nodesets, bridges + (obj.type == "Bridge"))
    out.append(f"{pad}</object>")


def _distances(t: Topology) -> list[str]:
    """One NUMALatency matrix (kind 5: from the OS, means latency) by OS index, over the nodes with every distance."""
    nodes = [n for n in t.numa_nodes if n.distances]
    ids = [n.os_index for n in nodes]
    if len(ids) < 2 or not all(all(j in n.distances for j in ids) for n in nodes):
        return []
    values = " ".join(str(n.distances[j]) for n in nodes for j in ids)
    indexes = " ".join(map(str, ids))
    return [f'  <distances2 type="NUMANode" nbobjs="{len(ids)}" kind="5" name="NUMALatency" indexing="os">',
            f'    <indexes length="{len(indexes) + 1}">{indexes} </indexes>',
            f'    <u64values length="{len(values) + 1}">{values} </u64values>',
            "  </distances2>"]
