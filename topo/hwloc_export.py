"""hwloc v2 XML out (`topo show --output FILE.xml`): what `lstopo-no-graphics -i FILE`,
`hwloc-calc --input` and `hwloc-bind --input` read, and what `topo.load_topology` reads back.

The model keeps flat lists tied by cpusets; hwloc's XML is a tree. The tree is rebuilt as hwloc
inserts objects: largest cpuset first, and for equal cpusets Package > Die > Group > L3 > L2 >
L1d > L1i > Core > PU; an object goes below the deepest one already placed that holds its first PU
(a set that would straddle it is dropped, as hwloc drops it). NUMA nodes are memory children of
the highest object whose cpuset is their locality, host bridges io children of the one whose
cpuset is their tree's locality, each through a Group of those CPUs where no object has them.

What hwloc's format has no attribute for is written as `<info name="topo...">` on the object it
belongs to (a PCI function's NUMA node, driver and names; a node without locality; the online
and disallowed sets): lstopo shows infos only with -v, and topo reads them back, so a topology
read from its own XML equals the original.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

from topo.cpuset import EMPTY, CpuSet
from topo.model import Topology
from topo.probes.sysfs import bus_key

# hwloc 2.x osdev_type numbers (hwloc_obj_osdev_type_e)
OSDEV_TYPES = {"block": 0, "gpu": 1, "net": 2, "openfabrics": 3, "dma": 4, "coproc": 5}
# hwloc group kinds (private.h): user, distance-based, I/O locality, memory locality
GROUP_KIND_IO = 1000
_GROUP_KINDS = {"distance": 900, "io": GROUP_KIND_IO, "numa": 1001, "cpu-less": 1001}
CACHE_TYPE = {"unified": 0, "data": 1, "instruction": 2}  # hwloc's cache_type attribute; the parser reads it back


def bitmap(s: CpuSet) -> str:
    """hwloc's bitmap text: 32-bit words, most significant first, each `0x%08x`."""
    if not s:
        return "0x0"
    return ",".join("0x" + w for w in s.to_mask().split(","))


@dataclass
class _Obj:
    type: str
    cpuset: CpuSet
    rank: int
    attrs: dict = field(default_factory=dict)
    infos: list = field(default_factory=list)
    children: list = field(default_factory=list)
    memory: list = field(default_factory=list)
    io: list = field(default_factory=list)
    parent: "_Obj | None" = None
    nodeset: int = 0


def _cache_type(level: int, kind: str) -> str:
    return f"L{level}{'i' if kind == 'instruction' else ''}Cache"


def _cpu_objects(t: Topology) -> list[_Obj]:
    objs = [_Obj("Package", p.cpuset, 1, {"os_index": p.os_index},
                 [("CPUModel", p.model)] if p.model else []) for p in t.packages]
    objs += [_Obj("Die", d.cpuset, 2, {"os_index": d.os_index}) for d in t.dies]
    objs += [_Obj("Group", c.cpuset, 3, {"os_index": c.os_index, "subtype": "Cluster", "kind": 222})
             for c in t.clusters]
    objs += [_Obj("Group", g.cpuset, 3, {"subtype": g.reason, "kind": _GROUP_KINDS.get(g.reason, 0)})
             for g in t.groups]
    for c in t.caches:
        attrs = {"cache_size": c.size, "depth": c.level, "cache_linesize": c.line_size,
                 "cache_associativity": c.ways, "cache_type": CACHE_TYPE.get(c.type, 0)}
        objs.append(_Obj(_cache_type(c.level, c.type), c.cpuset, 10 + 2 * (9 - c.level) + (c.type == "instruction"),
                         attrs))
    objs += [_Obj("Core", c.cpuset, 40, {"os_index": c.os_index} if c.os_index is not None else {})
             for c in t.cores]
    objs += [_Obj("PU", CpuSet.from_mask(1 << p), 50, {"os_index": p}) for p in t.pus]
    return [o for o in objs if o.cpuset <= t.pus]


def _tree(t: Topology, extra_sets: list[CpuSet]) -> tuple[_Obj, dict[CpuSet, _Obj]]:
    """The Machine with every CPU-side object below it; {cpuset: highest object with it}."""
    machine = _Obj("Machine", t.pus, 0, {"os_index": 0})
    objs = _cpu_objects(t)
    have = {o.cpuset for o in objs}
    for s in extra_sets:  # localities no object has: a Group of those CPUs, as hwloc inserts
        if s and s != t.pus and s not in have and s <= t.pus:
            objs.append(_Obj("Group", s, 3, {"kind": GROUP_KIND_IO}))
            have.add(s)
    objs.sort(key=lambda o: (-o.cpuset.weight(), o.rank, o.cpuset.first()))
    deepest: dict[int, _Obj] = {}
    by_set: dict[CpuSet, _Obj] = {t.pus: machine}
    for o in objs:
        # CPU-less (their CPUs disallowed, or a Group of nodes without locality): below the machine
        parent = deepest.get(o.cpuset.first(), machine) if o.cpuset else machine
        if not o.cpuset <= parent.cpuset:
            continue  # straddles an object already placed: hwloc drops it
        if o.type == "Group" and o.cpuset == parent.cpuset and o.cpuset:
            continue  # hwloc merges a Group into an object with the same CPUs
        o.parent = parent
        parent.children.append(o)
        if o.cpuset:
            by_set.setdefault(o.cpuset, o)
        for pu in o.cpuset:
            deepest[pu] = o
    _sort_children(machine)
    return machine, by_set


def _sort_children(o: _Obj) -> None:
    """Siblings in the order of their first PU, as hwloc keeps them (it refuses other orders);
    CPU-less ones last."""
    o.children.sort(key=lambda c: (not c.cpuset, c.cpuset.first()))
    for c in o.children:
        _sort_children(c)


def to_xml(t: Topology) -> str:
    """The topology as an hwloc v2 XML document (what `lstopo --of xml` writes)."""
    pci_sets = [b.local_cpus for b in t.pci_bridges if b.is_host]
    pci_sets += [d.local_cpus for d in t.pci_devices if d.parent is None]
    node_sets = [n.locality for n in t.numa_nodes]
    machine, by_set = _tree(t, node_sets + pci_sets)

    def at(s: CpuSet) -> _Obj:
        return by_set.get(s) or machine

    placed = {}
    for n in t.numa_nodes:
        parent = at(n.locality) if n.locality else machine
        attrs = {"os_index": n.os_index, "local_memory": n.local_memory}
        if n.subtype:
            attrs["subtype"] = n.subtype
        infos = [("topoMemoryOnly", "1" if n.memory_only else "0")]
        if not n.locality:
            infos.append(("topoLocality", "none"))
        # a memory child's cpuset is its parent's (the covering object's, where no Group fits)
        placed[n.os_index] = _Obj("NUMANode", parent.cpuset, 0, attrs, infos, parent=parent, nodeset=1 << n.os_index)
    for m in t.memory_side_caches:
        nodes = [placed.pop(i) for i in m.numa_nodes if i in placed]
        if not nodes:
            continue
        wrapper = _Obj("MemCache", nodes[0].cpuset, 0, {"cache_size": m.size, "depth": 1, "cache_type": 0},
                       memory=nodes, parent=nodes[0].parent, nodeset=sum(o.nodeset for o in nodes))
        placed[nodes[0].attrs["os_index"]] = wrapper
    for i in sorted(placed):
        placed[i].parent.memory.append(placed[i])

    _add_io(t, at)
    _nodesets(machine)
    return _document(t, machine)


def _add_io(t: Topology, at) -> None:
    """Host bridges, PCI bridges, PCI functions and OS devices, as io children."""
    bridges = {b.id: _Obj("Bridge", EMPTY, 0, _bridge_attrs(b)) for b in t.pci_bridges}
    functions = {}
    depth = {}
    for b in t.pci_bridges:
        if b.is_host:
            depth[b.id] = 0
            at(b.local_cpus).io.append(bridges[b.id])
    # bus order: a bridge before what lies below it, io children in bus order as hwloc keeps them
    pci = sorted([*(b for b in t.pci_bridges if not b.is_host), *t.pci_devices],
                 key=lambda x: bus_key(getattr(x, "busid", None) or x.id))
    for x in pci:
        if hasattr(x, "busid"):
            obj = _Obj("PCIDev", EMPTY, 0, {"pci_busid": x.busid,
                                              "pci_type": f"{x.class_id} [{x.vendor_id}:{x.device_id}] [0000:0000] 00"})
            obj.infos = [("topoNUMANode", str(x.numa_node) if x.numa_node is not None else "none"),
                         *([("topoDriver", x.driver)] if x.driver else []),
                         ("topoNames", " ".join(x.names)), ("topoRDMANames", " ".join(x.rdma_names))]
            functions[x.busid] = obj
        else:
            obj = bridges[x.id]
            depth[x.id] = depth.get(x.parent, 0) + 1
            obj.attrs["depth"] = depth[x.id]
        parent = bridges.get(x.parent) if x.parent else None
        (parent or at(x.local_cpus)).io.append(obj)
    for o in t.os_devices:
        obj = _Obj("OSDev", EMPTY, 0, {"name": o.name, "osdev_type": OSDEV_TYPES.get(o.type, 0)})
        if o.subtype:
            obj.attrs["subtype"] = o.subtype
        obj.infos = [("topoType", o.type)]
        parent = (functions.get(o.parent) or bridges.get(o.parent)) if o.parent else None
        (parent or at(o.local_cpus)).io.append(obj)


def _bridge_attrs(b) -> dict:
    attrs = {"bridge_type": "0-1" if b.is_host else "1-1", "depth": 0,
             "bridge_pci": f"{b.domain:04x}:[{b.secondary_bus:02x}-{b.subordinate_bus:02x}]"}
    if not b.is_host:
        attrs["pci_busid"] = b.id
        attrs["pci_type"] = f"{b.class_id or '0604'} [{b.vendor_id or '0000'}:{b.device_id or '0000'}] [0000:0000] 00"
    return attrs


def _nodesets(machine: _Obj) -> None:
    """hwloc's nodeset of a normal object: the nodes attached at it, above it or below it."""

    def down(o: _Obj, inherited: int) -> int:
        here = inherited
        for m in o.memory:
            here |= m.nodeset
        below = 0
        for c in o.children:
            below |= down(c, here)
        o.nodeset = here | below
        return o.nodeset

    down(machine, 0)


def _document(t: Topology, machine: _Obj) -> str:
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">']
    machine.infos = [(k, v) for k, v in t.info.items()]
    if t.online_pus != t.pus:
        machine.infos.append(("topoOnlineCPUs", t.online_pus.to_list()))
    if t.include_disallowed:
        machine.infos.append(("topoIncludeDisallowed", "1"))
    if len(t.numa_nodes) == 1 and t.numa_nodes[0].distances:  # hwloc ignores a 1x1 matrix
        machine.infos.append(("topoNodeDistances", " ".join(f"{k}:{v}" for k, v in t.numa_nodes[0].distances.items())))
    _write(out, machine, t, 1)
    out.extend(_distances(t))
    out.append("</topology>")
    return "\n".join(out) + "\n"


def _write(out: list[str], o: _Obj, t: Topology, level: int) -> None:
    pad = "  " * level
    attrs = [f'type="{o.type}"']
    if "os_index" in o.attrs:
        attrs.append(f'os_index="{o.attrs["os_index"]}"')
    if o.type not in ("Bridge", "PCIDev", "OSDev"):
        nodes = CpuSet.from_mask(o.nodeset)
        complete = t.complete_pus if o.type == "Machine" else o.cpuset
        attrs.append(f'cpuset="{bitmap(o.cpuset)}" complete_cpuset="{bitmap(complete)}"')
        if o.type == "Machine":
            attrs.append(f'allowed_cpuset="{bitmap(t.allowed_pus)}"')
        all_nodes = CpuSet(n.os_index for n in t.numa_nodes)
        complete_nodes = all_nodes if o.type == "Machine" else nodes
        attrs.append(f'nodeset="{bitmap(nodes)}" complete_nodeset="{bitmap(complete_nodes)}"')
        if o.type == "Machine":
            attrs.append(f'allowed_nodeset="{bitmap(t.allowed_numa_nodes)}"')
    for k, v in o.attrs.items():
        if k == "os_index" or v is None:
            continue
        attrs.append(f"{k}={quoteattr(str(v))}")
    inner = [(name, value) for name, value in o.infos]
    kids = o.memory + o.children + o.io
    if not inner and not kids:
        out.append(f"{pad}<object {' '.join(attrs)}/>")
        return
    out.append(f"{pad}<object {' '.join(attrs)}>")
    for name, value in inner:
        out.append(f"{pad}  <info name={quoteattr(name)} value={quoteattr(value)}/>")
    for k in kids:
        _write(out, k, t, level + 1)
    out.append(f"{pad}</object>")


def _distances(t: Topology) -> list[str]:
    """One NUMALatency matrix (kind 5: from the OS, means latency) over the nodes that have a
    distance to every node of it, indexed by OS index."""
    nodes = [n for n in t.numa_nodes if n.distances]
    ids = [n.os_index for n in nodes]
    if len(ids) < 2 or not all(all(j in n.distances for j in ids) for n in nodes):
        return []
    values = [n.distances[j] for n in nodes for j in ids]
    return [f'  <distances2 type="NUMANode" nbobjs="{len(ids)}" kind="5" name="NUMALatency" indexing="os">',
            f'    <indexes length="{len(" ".join(map(str, ids))) + 1}">{" ".join(map(str, ids))} </indexes>',
            f'    <u64values length="{len(" ".join(map(str, values))) + 1}">{" ".join(map(str, values))} </u64values>',
            "  </distances2>"]
