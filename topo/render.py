"""`topo show` text output: the topology as a tree, as lstopo prints it (`render_console`), or
in the long form of `topo show --long` (`render_text`: every object with its P# and L#, devices,
the link matrix, a summary).

The model is flat; the tree is rebuilt here from cpuset containment. Objects with equal cpusets
nest by type (Package > Die > Group > Cluster > L3 > L2 > L1 > Core > PU), NUMA nodes hang as
memory children of the highest object whose CPUs are exactly their locality (else the smallest
that covers it), and devices hang under the NUMA node they are local to. Logical indices (L#) are
given in tree order, as hwloc numbers them; OS indices (P#) come from the model.
"""

from __future__ import annotations

from topo.cpuset import CpuSet
from topo.model import Topology
from topo.text import printable

# Rank of each CPU-side type: lower is higher in the tree when cpusets are equal.
_RANK = {"Machine": 0, "Package": 1, "Die": 2, "Group": 3, "Cluster": 4, "Cache": 5, "Core": 9, "PU": 10}


class TreeNode:
    """One line of the tree and the lines below it (a plain class: a dataclass here would cost
    more at import than building the tree of a small machine)."""

    __slots__ = ("kind", "detail", "cpuset", "rank", "os_index", "children", "memory", "extras", "label",
                 "numa_members")

    def __init__(self, kind: str, detail: str, cpuset: CpuSet, rank: int, os_index: int | None = None):
        self.kind = kind  # L# counter key: "Package", "L3", "Core", "NUMANode", ...
        self.detail = detail  # what follows "KIND L#n": "(P#3 ...)"
        self.cpuset = cpuset
        self.rank = rank
        self.os_index = os_index
        self.children: list[TreeNode] = []
        self.memory: list[TreeNode] = []
        self.extras: list[str] = []
        self.label = ""
        self.numa_members: tuple[int, ...] = ()  # a Group's NUMA nodes


def format_size(n: int) -> str:
    """Bytes as the tree shows them: 512B, 48KiB, 1.5MiB, 768GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            text = f"{value:.0f}" if value >= 100 else f"{value:.1f}".removesuffix(".0")
            return text + unit
    return f"{n}B"


def _pindex(os_index: int | None, rest: str = "") -> str:
    inner = " ".join(x for x in ((f"P#{os_index}" if os_index is not None else ""), rest) if x)
    return f"({inner})" if inner else ""


def _cpu_objects(t: Topology) -> list[TreeNode]:
    objs: list[TreeNode] = []
    for p in t.packages:
        model = f'"{p.model}"' if p.model else ""
        objs.append(TreeNode("Package", _pindex(p.os_index, model), p.cpuset, _RANK["Package"]))
    for d in t.dies:
        objs.append(TreeNode("Die", _pindex(d.os_index), d.cpuset, _RANK["Die"]))
    for g in t.groups:
        node = TreeNode("Group", "", g.cpuset, _RANK["Group"])
        node.numa_members = g.numa_nodes
        objs.append(node)
    for c in t.clusters:
        objs.append(TreeNode("Cluster", _pindex(c.os_index), c.cpuset, _RANK["Cluster"]))
    for c in t.caches:
        if c.type == "instruction":
            continue  # instruction caches do not nest; lstopo draws them beside the L1d
        # Higher-level caches sit above lower ones with the same cpuset.
        objs.append(TreeNode(c.label, f"({format_size(c.size)})", c.cpuset, _RANK["Cache"] + (4 - c.level)))
    for c in t.cores:
        objs.append(TreeNode("Core", _pindex(c.os_index), c.cpuset, _RANK["Core"]))
    for pu in t.pus:
        objs.append(TreeNode("PU", _pindex(pu), CpuSet([pu]), _RANK["PU"]))
    return objs


def build_tree(t: Topology) -> TreeNode:
    about = [t.info.get("architecture", ""), t.info.get("hostname", ""),
             f"cgroup={t.info['linux_cgroup']}" if t.info.get("linux_cgroup", "/") != "/" else ""]
    machine = TreeNode("Machine", " ".join(x for x in about if x), t.pus, _RANK["Machine"])
    objs = _cpu_objects(t)
    # Parents before children: bigger sets first, then higher types.
    objs.sort(key=lambda o: (-o.cpuset.weight(), o.rank, o.cpuset.first()))
    deepest: dict[int, TreeNode] = {}  # PU -> deepest object placed so far that covers it
    for obj in objs:
        parent = deepest.get(obj.cpuset.first(), machine) if obj.cpuset else machine
        parent.children.append(obj)
        for pu in obj.cpuset:
            deepest[pu] = obj
    for node in _walk(machine):
        node.children.sort(key=lambda o: (o.cpuset.first() if o.cpuset else 1 << 30, o.rank))

    numa_by_index = {}
    for node in t.numa_nodes:
        mem = f"local={format_size(node.local_memory)}" if node.local_memory else ""
        notes = " ".join(x for x in (mem, "memory-only" if node.memory_only else "", node.subtype or "") if x)
        numa = TreeNode("NUMANode", _pindex(node.os_index, notes), node.locality, 0, node.os_index)
        numa_by_index[node.os_index] = numa
        _attach_memory(machine, numa)
    for dev in t.devices:
        label = f"{dev.kind.upper()} {dev.index}"
        details = [x for x in (dev.name, dev.busid) if x]
        if details:
            label += f" ({' '.join(details)})"
        target = numa_by_index.get(dev.numa_node) if dev.numa_node is not None else None
        (target or machine).extras.append(label)
    _number(machine)
    return machine


def _attach_memory(machine: TreeNode, numa: TreeNode) -> None:
    best = machine
    if numa.cpuset:
        exact = None
        for n in _walk(machine):
            if n.kind == "PU":
                continue
            if n.cpuset == numa.cpuset and exact is None:
                exact = n  # walk is top-down: the first exact match is the highest
            elif numa.cpuset <= n.cpuset and n.cpuset.weight() <= best.cpuset.weight():
                best = n
        best = exact or best
    else:
        # No locality: the group hwloc makes for such nodes holds them.
        for n in machine.children:
            if n.kind == "Group" and numa.os_index in n.numa_members:
                best = n
                break
    best.memory.append(numa)


def _walk(node: TreeNode):
    yield node
    for child in node.children:
        yield from _walk(child)


def _number(machine: TreeNode) -> None:
    """Logical indices in tree order (memory children first, as lstopo lists them)."""
    counters: dict[str, int] = {}

    def visit(node: TreeNode) -> None:
        for mem in node.memory:
            visit(mem)
        if node.kind == "Machine":
            node.label = "Machine" + (f" ({node.detail})" if node.detail else "")
        else:
            n = counters.get(node.kind, 0)
            counters[node.kind] = n + 1
            node.label = f"{node.kind} L#{n}" + (f" {node.detail}" if node.detail else "")
        for child in node.children:
            visit(child)

    visit(machine)


def render_text(t: Topology) -> str:
    lines: list[str] = []

    def emit(node: TreeNode, depth: int) -> None:
        pad = "  " * depth
        lines.append(pad + node.label)
        for mem in node.memory:
            lines.append(pad + "  " + mem.label)
            for extra in mem.extras:
                lines.append(pad + "    " + extra)
        for extra in node.extras:
            lines.append(pad + "  " + extra)
        for child in node.children:
            emit(child, depth + 1)

    emit(build_tree(t), 0)
    if t.links:
        lines.append("")
        lines.extend(render_links(t))
    lines.append("")
    lines.append(t.summary())
    if t.probes:
        lines.append("probes: " + ", ".join(f"{k}: {v}" for k, v in t.probes.items()))
    return "\n".join(printable(line) for line in lines)


def render_links(t: Topology) -> list[str]:
    """The device link matrix, as `nvidia-smi topo -m` prints it."""
    names = list(t.links)
    width = max([len(n) for n in names] + [4]) + 1
    out = [" " * width + "".join(f"{n:<{width}}" for n in names)]
    for a in names:
        row = f"{a:<{width}}" + "".join(f"{t.links[a].get(b, 'X' if a == b else '-'):<{width}}" for b in names)
        out.append(row.rstrip())
    return out


# ---- lstopo's console form -------------------------------------------------------------------

# hwloc's order of types that share a cpuset (obj_type_order in topology.c): lower sits higher.
_HWLOC_ORDER = {"Machine": 0, "Group": 1, "MemCache": 2, "NUMANode": 3, "Package": 4, "Die": 5,
                "Core": 14, "PU": 18}
_CACHE_ORDER = {5: 6, 4: 7, 3: 8, 2: 10, 1: 12}  # data/unified; an instruction cache sits one below

INDEX_MODES = ("default", "physical", "logical")


class ConsoleObj:
    """One object of lstopo's console tree (a plain class, as TreeNode)."""

    __slots__ = ("type", "os_index", "attr", "cpuset", "order", "subtype", "children", "memory", "logical")

    def __init__(self, type: str, os_index: int | None, attr: str, cpuset: CpuSet, order: int,
                 subtype: str | None = None):
        self.type = type  # what lstopo prints: "Package", "L2", "L1i", "Group", "NUMANode"
        self.os_index = os_index
        self.attr = attr  # "32MB", a NUMA node's local memory
        self.cpuset = cpuset
        self.order = order
        self.subtype = subtype  # printed in parentheses after the type: "Group0(Cluster)"
        self.children: list[ConsoleObj] = []
        self.memory: list[ConsoleObj] = []
        self.logical = 0


def hwloc_size(n: int) -> str:
    """A size as lstopo 2.x prints it outside verbose mode: rounded, 1024-based, KB below 10 MiB,
    MB below 10 GiB, GB below 10 TiB, else TB."""
    for limit, shift, unit in ((10 << 20, 10, "KB"), (10 << 30, 20, "MB"), (10 << 40, 30, "GB")):
        if n < limit:
            return f"{((n >> (shift - 1)) + 1) >> 1}{unit}"
    return f"{((n >> 39) + 1) >> 1}TB"


def _console_objects(t: Topology) -> tuple[list[ConsoleObj], dict[int, ConsoleObj]]:
    """The CPU-side objects, and the Group holding each NUMA node the model grouped."""
    objs = [ConsoleObj("Package", p.os_index, "", p.cpuset, _HWLOC_ORDER["Package"]) for p in t.packages]
    objs += [ConsoleObj("Die", d.os_index, "", d.cpuset, _HWLOC_ORDER["Die"]) for d in t.dies]
    group_of_node: dict[int, ConsoleObj] = {}
    for g in t.groups:
        objs.append(ConsoleObj("Group", None, "", g.cpuset, _HWLOC_ORDER["Group"]))
        group_of_node.update((n, objs[-1]) for n in g.numa_nodes)
    objs += [ConsoleObj("Group", c.os_index, "", c.cpuset, _HWLOC_ORDER["Group"], "Cluster") for c in t.clusters]
    for c in t.caches:
        order = _CACHE_ORDER.get(c.level, 6) + (c.type == "instruction")
        objs.append(ConsoleObj(c.label, None, hwloc_size(c.size), c.cpuset, order))
    objs += [ConsoleObj("Core", c.os_index, "", c.cpuset, _HWLOC_ORDER["Core"]) for c in t.cores]
    objs += [ConsoleObj("PU", pu, "", CpuSet([pu]), _HWLOC_ORDER["PU"]) for pu in t.pus]
    return objs, group_of_node


def console_tree(t: Topology) -> ConsoleObj:
    """The tree lstopo builds for `t`: objects nested by cpuset and hwloc's type order, NUMA nodes
    (behind their memory-side caches) as memory children, logical indices in tree order."""
    machine = ConsoleObj("Machine", None, "", t.pus, _HWLOC_ORDER["Machine"])
    objs, group_of_node = _console_objects(t)
    objs.sort(key=lambda o: (-o.cpuset.weight(), o.order, o.cpuset.first()))
    deepest: dict[int, ConsoleObj] = {}  # PU -> deepest object placed so far that covers it
    for obj in objs:
        parent = deepest.get(obj.cpuset.first(), machine) if obj.cpuset else machine
        parent.children.append(obj)
        for pu in obj.cpuset:
            deepest[pu] = obj
    placed = [machine, *objs]
    for obj in placed:
        obj.children.sort(key=lambda o: (o.cpuset.first() if o.cpuset else 1 << 30, o.order))
    # top-down, so that the first object with a node's exact CPUs is the highest one
    placed.sort(key=lambda o: (-o.cpuset.weight(), o.order))
    for node in t.numa_nodes:
        top = ConsoleObj("NUMANode", node.os_index, hwloc_size(node.local_memory) if node.local_memory else "",
                         node.locality, _HWLOC_ORDER["NUMANode"], node.subtype)
        for cache in t.memory_side_caches:
            if node.os_index in cache.numa_nodes:
                wrapper = ConsoleObj("MemCache", None, hwloc_size(cache.size), node.locality,
                                     _HWLOC_ORDER["MemCache"])
                wrapper.memory.append(top)
                top = wrapper
        _memory_parent(placed, machine, node.locality, group_of_node.get(node.os_index)).memory.append(top)
    _console_number(machine)
    return machine


def _memory_parent(placed: list[ConsoleObj], machine: ConsoleObj, locality: CpuSet,
                   group: ConsoleObj | None) -> ConsoleObj:
    """Where hwloc attaches a memory object: the highest object below the machine with exactly
    its CPUs (the machine's only child when it has the machine's CPUs), else the smallest holding
    them; a node without CPUs goes to the Group made for it, else the machine."""
    if not locality:
        return group or machine
    best = machine
    for obj in placed:
        if obj.type == "PU" or obj is machine:
            continue
        if obj.cpuset == locality:
            return obj
        if locality <= obj.cpuset and obj.cpuset.weight() <= best.cpuset.weight():
            best = obj
    return best


def _console_walk(obj: ConsoleObj):
    yield obj
    for child in (*obj.memory, *obj.children):
        yield from _console_walk(child)


def _console_number(machine: ConsoleObj) -> None:
    """Logical indices as hwloc gives them: per type (per cache level and kind, per Group depth),
    in depth-first order; hwloc lists memory objects after an object's normal children, though
    it prints them before."""
    counters: dict[str, int] = {}

    def visit(obj: ConsoleObj, groups_above: int) -> None:
        if obj.type == "Group":
            obj.type = f"Group{groups_above}"
            groups_above += 1
        obj.logical = counters.get(obj.type, 0)
        counters[obj.type] = obj.logical + 1
        for child in (*obj.children, *obj.memory):
            visit(child, groups_above)

    visit(machine, 0)


def _console_label(obj: ConsoleObj, index: str, total_memory: int) -> str:
    """One object as lstopo's output_console_obj prints it outside verbose mode."""
    text = obj.type + (f"({obj.subtype})" if obj.subtype else "")
    if obj.type != "Machine":
        if index != "physical":
            text += f" L#{obj.logical}"
        elif obj.os_index is not None:
            text += f" P#{obj.os_index}"
    phys = f"P#{obj.os_index}" if (index == "default" and obj.os_index is not None
                                   and obj.type in ("PU", "NUMANode")) else ""
    inside = " ".join(x for x in (phys, obj.attr) if x)
    if inside:
        text += f" ({inside})"
    if obj.type == "Machine" and total_memory:
        text += f" ({hwloc_size(total_memory)} total)"
    return text


def render_console(t: Topology, index: str = "default") -> str:
    """The tree as `lstopo-no-graphics` prints it (`-p`: index="physical", `-l`: "logical"): an
    object whose parent has it as its only child, with the same CPUs and no memory child, is
    printed on its parent's line after " + "."""
    if index not in INDEX_MODES:
        raise ValueError(f"index must be one of {INDEX_MODES}, not {index!r}")
    total = sum(n.local_memory for n in t.numa_nodes)
    lines: list[str] = []

    def emit(obj: ConsoleObj, parent: ConsoleObj | None, depth: int) -> None:
        if (parent is not None and len(parent.children) == 1 and not parent.memory
                and obj.cpuset == parent.cpuset and obj.type != "NUMANode"):
            lines[-1] += " + " + _console_label(obj, index, total)
        else:
            lines.append("  " * depth + _console_label(obj, index, total))
            depth += 1
        for child in (*obj.memory, *obj.children):
            emit(child, obj, depth)

    emit(console_tree(t), None, 0)
    return "\n".join(printable(line) for line in lines)
