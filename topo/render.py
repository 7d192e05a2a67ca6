"""`topo show` text output: the topology as a tree, in the manner of `lstopo -p`.

The model is flat; the tree is rebuilt here from cpuset containment. Objects with equal cpusets
nest by type (Package > Die > Cluster > L3 > L2 > L1 > Core), NUMA nodes hang as memory children of
the highest object whose CPUs are exactly their locality (else the smallest that covers it), and
devices hang under the NUMA node they are local to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topo.cpuset import CpuSet
from topo.model import Topology

# Rank of each CPU-side type: lower is higher in the tree when cpusets are equal.
_RANK = {"Machine": 0, "Package": 1, "Die": 2, "Group": 3, "Cluster": 4, "Cache": 5, "Core": 9, "PU": 10}


@dataclass
class _Node:
    kind: str
    label: str
    cpuset: CpuSet
    rank: int
    children: list["_Node"] = field(default_factory=list)
    memory: list["_Node"] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)


def _fmt_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            text = f"{value:.0f}" if value >= 100 else f"{value:.1f}".removesuffix(".0")
            return text + unit
    return f"{n}B"


def _cpu_objects(t: Topology) -> list[_Node]:
    objs: list[_Node] = []
    for i, p in enumerate(t.packages):
        model = f' "{p.model}"' if p.model else ""
        objs.append(_Node("Package", f"Package L#{i} (P#{p.os_index}{model})", p.cpuset, _RANK["Package"]))
    for i, d in enumerate(t.dies):
        objs.append(_Node("Die", f"Die L#{i} (P#{d.os_index})", d.cpuset, _RANK["Die"]))
    for i, g in enumerate(t.groups):
        objs.append(_Node("Group", f"Group L#{i}", g.cpuset, _RANK["Group"]))
    for i, c in enumerate(t.clusters):
        objs.append(_Node("Cluster", f"Cluster L#{i} (P#{c.os_index})", c.cpuset, _RANK["Cluster"]))
    counters: dict[str, int] = {}
    for c in t.caches:
        if c.type == "instruction":
            continue  # lstopo's default view hides instruction caches from the tree's nesting
        label = c.label
        n = counters.get(label, 0)
        counters[label] = n + 1
        # Higher-level caches sit above lower ones with the same cpuset.
        objs.append(_Node("Cache", f"{label} L#{n} ({_fmt_size(c.size)})", c.cpuset, _RANK["Cache"] + (4 - c.level)))
    for i, c in enumerate(t.cores):
        pindex = f" (P#{c.os_index})" if c.os_index is not None else ""
        objs.append(_Node("Core", f"Core L#{i}{pindex}", c.cpuset, _RANK["Core"]))
    for i, pu in enumerate(t.pus):
        objs.append(_Node("PU", f"PU L#{i} (P#{pu})", CpuSet([pu]), _RANK["PU"]))
    return objs


def build_tree(t: Topology) -> _Node:
    machine = _Node("Machine", "Machine", t.pus, _RANK["Machine"])
    objs = _cpu_objects(t)
    # Parents before children: bigger sets first, then higher types.
    objs.sort(key=lambda o: (-o.cpuset.weight(), o.rank, o.cpuset.first()))
    deepest: dict[int, _Node] = {}  # PU -> deepest object placed so far that covers it
    for obj in objs:
        parent = deepest.get(obj.cpuset.first(), machine) if obj.cpuset else machine
        parent.children.append(obj)
        for pu in obj.cpuset:
            deepest[pu] = obj
    for node in _walk(machine):
        node.children.sort(key=lambda o: (o.cpuset.first() if o.cpuset else 1 << 30, o.rank))

    for node in t.numa_nodes:
        mem = f" local={_fmt_size(node.local_memory)}" if node.local_memory else ""
        what = " memory-only" if node.memory_only else ""
        sub = f" {node.subtype}" if node.subtype else ""
        numa = _Node("NUMANode", f"NUMANode L#{t.numa_nodes.index(node)} (P#{node.os_index}{mem}{what}{sub})",
                     node.locality, 0)
        _attach_memory(machine, numa)
    for dev in t.devices:
        label = f"{dev.kind.upper()} {dev.index}"
        details = [x for x in (dev.name, dev.busid) if x]
        if details:
            label += f" ({' '.join(details)})"
        target = None
        for n in _walk(machine):
            for m in n.memory:
                if dev.numa_node is not None and m.label.split("(P#")[1].split()[0].rstrip(")") == str(dev.numa_node):
                    target = m
        (target or machine).extras.append(label)
    return machine


def _attach_memory(machine: _Node, numa: _Node) -> None:
    best = machine
    if numa.cpuset:
        exact = None
        for n in _walk(machine):
            if n.kind in ("PU",):
                continue
            if n.cpuset == numa.cpuset and exact is None:
                exact = n  # walk is top-down: the first exact match is the highest
            elif numa.cpuset <= n.cpuset and n.cpuset.weight() <= best.cpuset.weight():
                best = n
        best = exact or best
    best.memory.append(numa)


def _walk(node: _Node):
    yield node
    for child in node.children:
        yield from _walk(child)


def render_text(t: Topology) -> str:
    lines: list[str] = []

    def emit(node: _Node, depth: int) -> None:
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
