"""hwloc's object tree of a Topology, built once (`build`) and walked by every text output, the hwloc XML and the
pictures (`topo.views`). Objects nest as hwloc__insert_object_by_cpuset inserts them: largest cpuset first, equal
ones in hwloc's type order, each below the deepest object so far holding its first PU; one that would straddle an
object is dropped. Logical indexes (L#) count each type depth first: normal, then memory, then I/O children."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from topo.cpuset import EMPTY, CpuSet
from topo.model import OsDevice, Topology

# hwloc's types: (order among objects with equal CPUs, from obj_type_order; hwloc_obj_type_t number)
TYPES = {"Machine": (0, 0), "Group": (1, 12), "MemCache": (2, 18), "NUMANode": (3, 13), "Package": (4, 1),
         "Die": (5, 19), "L5Cache": (6, 8), "L4Cache": (7, 7), "L3Cache": (8, 6), "L3iCache": (9, 11),
         "L2Cache": (10, 5), "L2iCache": (11, 10), "L1Cache": (12, 4), "L1iCache": (13, 9), "Core": (14, 2),
         "Bridge": (15, 14), "PCIDev": (16, 15), "OSDev": (17, 16), "PU": (18, 3)}
IO_TYPES = ("Bridge", "PCIDev", "OSDev")
# hwloc's group kinds (private.h) by the reason the model gives a Group: (kind, subkind, subtype)
GROUP_KINDS = {"distance": (900, 0, None), "io": (1000, 0, None), "numa": (1001, 0, None), "cpu-less": (1001, 0, None),
               "book": (110, 0, "Book"), "drawer": (110, 1, "Drawer")}
CLUSTER_KIND = 222  # hwloc 2.9's Linux cluster groups, subtype "Cluster"
CACHE_TYPE = {"unified": 0, "data": 1, "instruction": 2}  # hwloc's cache_type attribute
OSDEV_TYPES = {"block": 0, "gpu": 1, "net": 2, "openfabrics": 3, "dma": 4, "coproc": 5}  # hwloc 2.x osdev_type
# obj_type_priority: which of a parent and its only child --merge keeps
_PRIORITY = {"Machine": 90, "PU": 100, "Core": 60, "Package": 40, "Die": 30, "Group": 0, "L1Cache": 20, "L2Cache": 20,
             "L3Cache": 20, "L4Cache": 20, "L5Cache": 20, "L1iCache": 19, "L2iCache": 19, "L3iCache": 19}


@dataclass(slots=True, eq=False)
class Obj:
    """One object of hwloc's tree; `model` is what it shows (None for the Machine and inserted Groups)."""

    type: str
    cpuset: CpuSet
    os_index: int | None = None
    model: object = None
    kind: int = 0  # a Group's kind (GROUP_KINDS)
    subkind: int = 0
    subtype: str | None = None  # printed in parentheses: "Group0(Cluster)", "NUMANode(GPUMemory)"
    children: list["Obj"] = field(default_factory=list)
    memory: list["Obj"] = field(default_factory=list)
    io: list["Obj"] = field(default_factory=list)
    parent: "Obj | None" = None
    logical: int = 0
    depth: int = 0  # a Group's depth among Groups: Group0, Group1
    infos: tuple[tuple[str, str], ...] = ()  # hwloc's infos beyond the model's fields (a GPU's OS devices)


def type_name(obj: Obj, verbose: bool = False) -> str:
    """hwloc_obj_type_snprintf: "L2", "L1d", "Group0", "PCI", "Net"; verbose: "L2Cache", "L1dCache", "Network"."""
    t = obj.type
    if t.startswith("L") and t.endswith("Cache"):
        c = obj.model
        return f"L{c.level}{ {'data': 'd', 'instruction': 'i'}.get(c.type, '')}{'Cache' if verbose else ''}"
    if t == "Group":
        return f"Group{obj.depth}"
    if t == "Bridge":
        return "HostBridge" if obj.model.is_host else "PCIBridge"
    if t == "PCIDev":
        return "PCI"
    if t == "OSDev":
        kind = obj.model.type
        return ({"net": "Network", "coproc": "Co-Processor"} if verbose else {"net": "Net", "coproc": "CoProc"}).get(
            kind, {"block": "Block", "openfabrics": "OpenFabrics", "gpu": "GPU", "dma": "DMA"}.get(kind, "OS"))
    return t


def bitmap(s: CpuSet) -> str:
    """hwloc_bitmap_snprintf: 32-bit words `0x%08x`, most significant first, all-zero ones empty but the last."""
    words = ["" if w == "00000000" else "0x" + w for w in s.to_mask().split(",")]
    return ",".join(words[:-1] + [words[-1] or "0x0"])


# hwloc_type_sscanf's words: (word, letters needed, type, an OS device kind or a bridge's upstream side)
_TYPE_WORDS = (("osdev", 2, "OSDev", None), ("block", 4, "OSDev", "block"), ("network", 3, "OSDev", "net"),
               ("openfabrics", 7, "OSDev", "openfabrics"), ("dma", 3, "OSDev", "dma"), ("gpu", 3, "OSDev", "gpu"),
               ("coproc", 5, "OSDev", "coproc"), ("co-processor", 6, "OSDev", "coproc"),
               ("machine", 2, "Machine", None), ("numanode", 2, "NUMANode", None), ("node", 2, "NUMANode", None),
               ("memcache", 5, "MemCache", None), ("package", 2, "Package", None), ("socket", 2, "Package", None),
               ("die", 2, "Die", None), ("core", 2, "Core", None), ("pu", 2, "PU", None), ("bridge", 4, "Bridge", None),
               ("hostbridge", 6, "Bridge", "host"), ("pcibridge", 5, "Bridge", "pci"), ("pcidev", 3, "PCIDev", None))
_CACHE_WORD = re.compile(r"l([1-5])([diu]?)(c|ca|cac|cach|cache)?\Z", re.I)
_GROUP_WORD = re.compile(r"(gr|gro|grou|group)([0-9]{0,3})\Z", re.I)


def parse_type(text: str) -> tuple[str, object] | None:
    """A type name as hwloc_type_sscanf reads it ("core", "numa", "l2", "L1dCache", "group1", "pci", "net"):
    (hwloc type, a Group's depth, an OS device kind or "host"/"pci" for a bridge), None for no type."""
    word = text.lower()
    for name, letters, kind, extra in _TYPE_WORDS:
        if len(word) >= letters and name.startswith(word):
            return kind, extra
    m = _CACHE_WORD.match(word)
    if m and (m.group(2) != "i" or int(m.group(1)) <= 3):
        return f"L{m.group(1)}{'i' if m.group(2) == 'i' else ''}Cache", None
    m = _GROUP_WORD.match(word)
    if m:
        return "Group", int(m.group(2)) if m.group(2) else None
    return None


def matches(obj: Obj, wanted: tuple[str, object]) -> bool:
    """Whether `obj` is of a type `parse_type` read."""
    kind, extra = wanted
    if obj.type != kind or extra is None:
        return obj.type == kind
    if kind == "Group":
        return obj.depth == extra
    if kind == "Bridge":
        return obj.model.is_host == (extra == "host")
    return obj.model.type == extra


def _cpu_objects(t: Topology, drop) -> list[Obj]:
    objs = [Obj("Package", p.cpuset, p.os_index, p) for p in t.packages]
    objs += [Obj("Die", d.cpuset, d.os_index, d) for d in t.dies]
    for g in t.groups:  # a reason hwloc has no kind for is the Group's subtype
        kind = GROUP_KINDS.get(g.reason, (0, 0, None if g.reason == "hwloc" else g.reason))
        objs.append(Obj("Group", g.cpuset, None, g, *kind))
    objs += [Obj("Group", c.cpuset, c.os_index, c, CLUSTER_KIND, 0, "Cluster") for c in t.clusters]
    caches = ((f"L{c.level}{'i' if c.type == 'instruction' else ''}Cache", c) for c in t.caches)
    objs += [Obj(kind, c.cpuset, None, c) for kind, c in caches if kind in TYPES]  # hwloc has L1-L5, L1i-L3i
    objs += [Obj("Core", c.cpuset, c.os_index, c) for c in t.cores]
    objs += [Obj("PU", CpuSet.from_mask(1 << pu), pu) for pu in t.pus]
    objs = [o for o in objs if o.type not in drop]
    others = [o for o in objs if o.type != "Group"]
    return others + merge_groups([o for o in objs if o.type == "Group"], [o.cpuset for o in others], t.pus)


def merge_groups(groups: list, others: list[CpuSet], pus: CpuSet) -> list:
    """The `groups` (anything with a cpuset) hwloc keeps beside objects with the CPU sets `others`: one with the CPUs
    of one of them, of the machine, of one PU or of a Group before it merges into that (hwloc__insert_try_merge_group);
    one without CPUs stays."""
    # Sets are keyed with their first CPU: the ints of single-CPU masks share few hashes.
    taken = {(s.first(), s.mask) for s in (*others, pus)}
    kept = []
    for g in groups:
        key = (g.cpuset.first(), g.cpuset.mask)
        if g.cpuset and (key in taken or g.cpuset.weight() == 1):
            continue
        taken.add(key)
        kept.append(g)
    return kept


def build(t: Topology, drop=()) -> Obj:
    """The Machine of `t` with every object below it, numbered, without the hwloc types `drop` names as lstopo's
    filters leave them out (`--no-caches`, `--filter TYPE:none`): the others nest as hwloc nests them then."""
    machine = Obj("Machine", t.pus, 0)
    objs = sorted(_cpu_objects(t, drop), key=lambda o: (-o.cpuset.weight(), TYPES[o.type][0], o.cpuset.first()))
    deepest: dict[int, Obj] = {}  # PU -> deepest object placed so far that covers it
    for o in objs:
        # objects without CPUs (a cgroup left them none, a Group of CPU-less nodes): below the machine
        parent = deepest.get(o.cpuset.first(), machine) if o.cpuset else machine
        if not o.cpuset <= parent.cpuset:
            continue  # straddles an object already placed: hwloc drops it
        parent.children.append(o)  # (parents are set by `number`)
        for pu in o.cpuset:
            deepest[pu] = o
    groups = "Group" not in drop
    nodes = {}
    for node in t.numa_nodes:
        loc = node.locality & t.pus
        if loc:
            parent = _holder(machine, loc, below_root=True, kind=GROUP_KINDS["numa"][0] if groups else None)
        else:  # no CPU near it: the Group the model made for CPU-less nodes, else the machine
            parent = next((g for g in machine.children if g.type == "Group" and not g.cpuset
                           and node.os_index in g.model.numa_nodes), machine)
        nodes[node.os_index] = (Obj("NUMANode", parent.cpuset, node.os_index, node, subtype=node.subtype), parent)
    for m in t.memory_side_caches if "MemCache" not in drop else ():
        inside = [nodes.pop(i) for i in m.numa_nodes if i in nodes]
        if inside:
            first, parent = inside[0]
            nodes[first.os_index] = (Obj("MemCache", parent.cpuset, None, m, memory=[n for n, _ in inside]), parent)
    for _, (obj, parent) in sorted(nodes.items()):
        parent.memory.append(obj)
    if not {"Bridge", "PCIDev", "OSDev"} <= set(drop):
        for obj, local in _io_trees(t):
            cpus = local & t.pus
            parent = _holder(machine, cpus, below_root=False, kind=GROUP_KINDS["io"][0] if groups else None) \
                if cpus else machine
            parent.io.append(obj)
    for o in walk(machine):
        o.children.sort(key=lambda c: (c.cpuset.first() if c.cpuset else 1 << 30, TYPES[c.type][0]))
    number(machine)
    return machine


def _holder(machine: Obj, cpus: CpuSet, *, below_root: bool, kind: int | None) -> Obj:
    """Where hwloc attaches memory (`below_root`: hwloc__find_insert_memory_parent) or I/O local to `cpus`: the
    highest object with exactly those CPUs (below the machine for memory), else a Group of them (`kind`, None
    when Groups are filtered out) below the smallest object holding them, if it nests there."""
    if cpus == machine.cpuset and not below_root:
        return machine
    current = machine
    while (child := next((c for c in current.children if c.type != "PU" and cpus <= c.cpuset), None)) is not None:
        if child.cpuset == cpus:
            return child
        current = child
    if (current is machine and cpus == machine.cpuset) or kind is None:
        return current
    inside = [c for c in current.children if c.cpuset and c.cpuset <= cpus]
    if any(c.cpuset.intersects(cpus) and c not in inside for c in current.children):
        return current  # a Group of these CPUs would straddle an object
    group = Obj("Group", cpus, None, None, kind, children=inside)
    current.children = [c for c in current.children if c not in inside] + [group]
    return group


def _io_trees(t: Topology) -> list[tuple[Obj, CpuSet]]:
    """The I/O trees as hwloc nests them, with the CPUs each is local to: host bridges, bridges and PCI functions
    in bus order, each with its OS devices; functions without a bridge and OS devices without one stand alone."""
    osdevs: dict[str | None, list[Obj]] = {}
    for d in t.os_devices:
        osdevs.setdefault(d.parent, []).append(Obj("OSDev", EMPTY, None, d, subtype=d.subtype))
    _gpu_os_devices(t, osdevs)
    by_parent: dict[str | None, list[tuple[str, Obj, CpuSet]]] = {}
    for dev in t.pci_devices:
        obj = Obj("PCIDev", EMPTY, None, dev, io=osdevs.pop(dev.busid, []))
        by_parent.setdefault(dev.parent, []).append((dev.busid, obj, dev.local_cpus))
    bridges = {b.id: b for b in t.pci_bridges}
    trees: list[tuple[tuple, Obj, CpuSet]] = []
    # deepest bridges first, so that each finds everything below it already made
    for bridge in sorted(t.pci_bridges, key=lambda b: -_bridge_depth(b, bridges)):
        below = sorted(by_parent.pop(bridge.id, []), key=lambda entry: entry[0])
        obj = Obj("Bridge", EMPTY, None, bridge, io=osdevs.pop(bridge.id, []) + [o for _, o, _ in below])
        if bridge.is_host:
            trees.append(((bridge.domain, bridge.secondary_bus, ""), obj, bridge.local_cpus))
        else:
            by_parent.setdefault(bridge.parent, []).append((bridge.id, obj, bridge.local_cpus))
    for busid, obj, cpus in (entry for entries in by_parent.values() for entry in entries):
        trees.append(((int(busid[:busid.index(":")], 16), -1, busid), obj, cpus))  # no bridge above it
    trees.sort(key=lambda entry: entry[0])
    return [(obj, cpus) for _, obj, cpus in trees] + [(o, o.model.local_cpus) for os in osdevs.values() for o in os]


def _gpu_os_devices(t: Topology, osdevs: dict[str | None, list[Obj]]) -> None:
    """What hwloc's CUDA then NVML components hang below an NVIDIA GPU's PCI function after the Linux OS devices:
    `CoProc(CUDA) "cudaN"`, `GPU(NVML) "nvmlN"` with their infos, N the NVML index (CUDA's in PCI bus order)."""
    functions = {d.busid: d.local_cpus for d in t.pci_devices}
    for gpu in t.devices:
        if gpu.kind != "gpu" or gpu.source not in ("nvml", "hwloc-nvml") or gpu.busid not in functions:
            continue
        model = [("GPUVendor", "NVIDIA Corporation"), ("GPUModel", gpu.name or "")]
        below = osdevs.setdefault(gpu.busid, [])
        for name, kind, backend, infos in (
                (f"cuda{gpu.index}", "coproc", "CUDA", model if gpu.name else model[:1]),
                (f"nvml{gpu.index}", "gpu", "NVML", model + ([("NVIDIAUUID", gpu.uuid)] if gpu.uuid else []))):
            obj = next((o for o in below if o.subtype == backend), None)  # an export read back has them
            if obj is None and (backend == "NVML" or gpu.source == "nvml"):  # an export lists CUDA's itself
                obj = Obj("OSDev", EMPTY, None, OsDevice(name, kind, gpu.busid, functions[gpu.busid], backend),
                          subtype=backend)
                below.append(obj)
            if obj is not None:
                obj.infos = (("Backend", backend), *infos)


def _bridge_depth(bridge, bridges: dict) -> int:
    depth = 0
    while bridge.parent is not None and bridge.parent in bridges and depth < len(bridges):
        bridge, depth = bridges[bridge.parent], depth + 1
    return depth


def walk(obj: Obj):
    """`obj` and everything below it in hwloc's order: normal children, memory, I/O."""
    yield obj
    for child in (*obj.children, *obj.memory, *obj.io):
        yield from walk(child)


def number(machine: Obj) -> None:
    """Logical indexes per type (per Group depth) in walk order, and each Group's depth."""
    counters: dict[str, int] = {}

    def visit(obj: Obj, groups_above: int) -> None:
        key = obj.type
        if key == "Group":
            obj.depth = groups_above
            key = f"Group{groups_above}"
            groups_above += 1
        obj.logical = counters.get(key, 0)
        counters[key] = obj.logical + 1
        for child in (*obj.children, *obj.memory, *obj.io):
            child.parent = obj
            visit(child, groups_above)

    visit(machine, 0)


def _same_type(a: Obj, b: Obj) -> bool:
    return a.type == b.type and (a.type != "Group" or (a.kind, a.subkind) == (b.kind, b.subkind))


def levels(machine: Obj) -> list[list[Obj]]:
    """hwloc_connect_levels: each level takes the topmost type among what is left of the level above's children."""
    out = [[machine]]
    frontier = list(machine.children)
    while frontier:
        top = next((o for o in frontier if o.type != "PU"), frontier[0])
        for o in frontier:
            if not _same_type(top, o) and any(_same_type(d, top) for c in o.children for d in walk(c)):
                top = o  # o is above an object of top's type
        out.append([o for o in frontier if _same_type(top, o)])
        frontier = [c for o in frontier for c in (o.children if _same_type(top, o) else [o])]
    return out


def restrict(machine: Obj, cpus: CpuSet) -> None:
    """hwloc_topology_restrict to `cpus`: objects keep their CPUs among them; one left with no CPU, child or
    memory goes, with its I/O (NUMA nodes stay); the children of one that lost CPUs are ordered again by first
    CPU, those left without one last, in reverse order (hwloc__reorder_children); Groups bringing no structure go."""

    def visit(obj: Obj) -> bool:
        if obj.cpuset - cpus:
            obj.cpuset &= cpus
            kept = [c for c in obj.children if visit(c)]
            obj.children = sorted((c for c in kept if c.cpuset), key=lambda c: c.cpuset.first()) + [
                c for c in kept if not c.cpuset][::-1]
            for m in obj.memory:  # a memory-side cache, and the nodes in it
                for x in (m, *m.memory):
                    x.cpuset = obj.cpuset
        return bool(obj.children or obj.memory or obj.cpuset)

    visit(machine)
    merge_levels(machine, ())


def merge_levels(machine: Obj, types) -> None:
    """hwloc_filter_levels_keep_structure for `types` (Groups always): of a parent level and its child level where
    each parent has its child as only normal child (and no memory above a PU), the one `types` lets go goes (both:
    the lower priority one), its memory and I/O children moving to the one kept."""
    lv = levels(machine)
    for i in range(len(lv) - 1, 0, -1):
        up, down = lv[i - 1], lv[i]
        drop_up, drop_down = (level[0].type in types or level[0].type == "Group" for level in (up, down))
        if not (drop_up or drop_down) or len(up) != len(down) or any(
                c.parent is not p or len(p.children) != 1 or (c.type == "PU" and p.memory) for p, c in zip(up, down)):
            continue
        if drop_up and drop_down:
            drop_up = _PRIORITY.get(up[0].type, 0) < _PRIORITY.get(down[0].type, 0)
        for parent, child in zip(up, down):
            if drop_up:  # the child takes the parent's place
                grand = parent.parent
                grand.children[grand.children.index(parent)] = child
                child.parent = grand
                child.memory[:0], child.io[:0] = parent.memory, parent.io
            else:  # the parent takes the child's children
                parent.children = child.children
                parent.memory += child.memory
                parent.io += child.io
                for c in parent.children:
                    c.parent = parent
        del lv[i - 1 if drop_up else i]
    number(machine)
