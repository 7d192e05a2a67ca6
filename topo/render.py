"""`topo show` text output: the topology as a tree, in the manner of `lstopo -p`.

The model is flat; the tree is rebuilt here from cpuset containment. Objects with equal cpusets
nest by type (Package > Die > Group > Cluster > L3 > L2 > L1 > Core > PU), NUMA nodes hang as
memory children of the highest object whose CPUs are exactly their locality (else the smallest
that covers it), and devices hang under the NUMA node they are local to. Logical indices (L#) are
given in tree order, as hwloc numbers them; OS indices (P#) come from the model.
"""

from __future__ import annotations

from topo.cpuset import CpuSet
from topo.model import Topology

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
    return "\n".join(lines)


def render_links(t: Topology) -> list[str]:
    """The device link matrix, as `nvidia-smi topo -m` prints it."""
    names = list(t.links)
    width = max([len(n) for n in names] + [4]) + 1
    out = [" " * width + "".join(f"{n:<{width}}" for n in names)]
    for a in names:
        row = f"{a:<{width}}" + "".join(f"{t.links[a].get(b, 'X' if a == b else '-'):<{width}}" for b in names)
        out.append(row.rstrip())
    return out
