"""Where each box of a machine's picture goes, in lstopo's spirit: boxes nest as `topo.tree` nests the objects (no
instruction cache, memory-side cache or I/O object), but for a 2,048-PU machine to read: a cache with one core's CPUs
is named in the core's tooltip (and, the same in every core, once in its package's header), not drawn; an object
with its only child's CPUs shares its box ("Package P#0 · L3 32MiB"); cores fold into rows of at most 8, other boxes
into the grid closest to a landscape page. NUMA nodes are bars atop the box of their CPUs, their devices chips below."""

from __future__ import annotations

import math
from itertools import accumulate
from dataclasses import dataclass, field

from topo.cpuset import EMPTY, CpuSet
from topo.model import Device, Topology
from topo.tree import Obj, build, type_name
from topo.views.console import format_size, long_detail
from topo.views.palette import Paint

FONT = 11.0  # px, every text
CHAR = 0.62 * FONT  # a generous average glyph width for DejaVu Sans / Liberation Sans
PAD = 4.0
GAP = 4.0
HEAD = 15.0  # a header line
PU_H = 15.0
BAR_H = 16.0
CHIP_H = 16.0
CORES_PER_ROW = 8
ASPECT = 1.5  # width / height the grid of boxes aims at

def text_w(text: str) -> float:
    return len(text) * CHAR + 6


@dataclass(eq=False)
class Box:
    kind: str  # "Machine", "Package", "Cache", "Core", "PU", ...
    title: str  # the tooltip, and the header when drawn
    cpuset: CpuSet
    header: str = ""
    children: list["Box"] = field(default_factory=list)
    memory: list[tuple[Obj, list[Device]]] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0
    # relative placements, set by _measure
    child_pos: list[tuple[float, float]] = field(default_factory=list)
    mem_pos: list[tuple[float, float, float, list[tuple[float, float, float]]]] = field(default_factory=list)
    private: list[str] = field(default_factory=list)  # caches private to this core


def _kind(obj: Obj) -> str:
    if obj.type == "Group":
        return obj.subtype or "Group"
    return "Cache" if obj.type.endswith("Cache") else type_name(obj)


def node_label(obj: Obj, t: Topology) -> str:
    """'Package P#0 "EPYC"', 'L3 (16MiB)': the long form's label without the logical index."""
    if obj.type == "Devices":
        return "Devices not local to a NUMA node"
    return f"{type_name(obj) if obj.type.endswith('Cache') else _kind(obj)} {long_detail(obj, t)}".strip()


def _short(obj: Obj, t: Topology) -> str:
    """A header's part: 'Package P#0', 'L3 16MiB' (other details stay in the tooltip)."""
    if obj.type.endswith("Cache"):
        return node_label(obj, t).replace("(", "").replace(")", "")
    return _kind(obj) + (f" P#{obj.os_index}" if obj.os_index is not None and obj.type != "Machine" else "")


def _convert(node: Obj, t: Topology, devices_by_node: dict[int, list[Device]]) -> Box:
    """The tree as boxes: same-cpuset chains in one box, caches private to a core folded into it; a NUMA node's
    Group (NPS4 EPYC nodes split a package without a die or cache to match) is titled by its node."""
    chain = [node]
    while node.type not in ("Core", "PU") and len(node.children) == 1 and node.children[0].cpuset == node.cpuset:
        node = node.children[0]
        chain.append(node)
    memory = [m for n in chain for m in n.memory]
    private = []
    if node.type == "Core" and all(n.type.endswith("Cache") for n in chain[:-1]):
        private = [_short(n, t) for n in chain[:-1]]
        chain = [node]
    elif node.type == "Core" and len(chain) > 1:
        chain.pop()
        node = chain[-1]
    kind = _kind(node)
    box = Box(kind, " · ".join(node_label(n, t) for n in chain), node.cpuset,
              " · ".join(s for s in (_short(n, t) for n in chain) if s != "Group"), private=private,
              memory=[(m, devices_by_node.get(m.os_index, [])) for m in memory],
              children=[_convert(c, t, devices_by_node) for c in node.children])
    if kind == "Group" and len(memory) == 1:  # a NUMA node's Group: the node names it
        box.title = node_label(memory[0], t)
    if kind == "PU":
        box.title = f"PU P#{node.cpuset.first()}"
    box.title += "".join(f" · {p}" for p in private)
    if len({c.kind == "Core" for c in box.children}) > 1:
        # cores beside other boxes (a hybrid CPU's P-cores by its E-core clusters): each run in one unframed block
        children: list[Box] = []
        for c in box.children:
            if c.kind != "Core":
                children.append(c)
            elif children and children[-1].kind == "Cores":
                children[-1].children.append(c)
                children[-1].cpuset |= c.cpuset
            else:
                children.append(Box("Cores", "", c.cpuset, children=[c]))
        box.children = children
    return box


def chip_label(d: Device) -> str:
    if d.kind in ("gpu", "npu", "accel") or not d.name:
        return f"{d.kind.upper() if d.kind != 'accel' else 'Accel'} {d.index}"
    return d.name


def pu_label(pu: int, paint: Paint) -> str:
    owners = paint.owners_of.get(pu)
    if not owners:
        return f"P#{pu}"
    tags = "+".join(o.label or o.tag for o in (paint.overlay.owners[i] for i in owners))
    return f"P#{pu} " + (tags if len(owners) == 1 or len(tags) <= 5 else f"×{len(owners)}")


def _measure(box: Box, t: Topology, pu_w: float) -> None:
    if box.kind == "PU":
        box.w, box.h = pu_w, PU_H
        return
    for c in box.children:
        _measure(c, t, pu_w)
    if box.kind == "Core":  # threads stacked in one column: a narrow tower, easy to fold into rows
        *ys, bottom = accumulate((c.h + 1 for c in box.children), initial=2.0)
        box.child_pos, box.w, box.h = [(2.0, y) for y in ys], pu_w + 4, bottom + 1
        return
    cells = [(c.w, c.h) for c in box.children]
    if box.children and all(c.kind == "Core" for c in box.children):
        cols = math.ceil(len(cells) / math.ceil(len(cells) / CORES_PER_ROW))  # even rows of at most 8
    else:
        cols = _best_cols(cells)
    grid_w, grid_h, pos = _grid(cells, cols)
    if box.kind == "Cores":  # unframed: just the folded rows
        box.w, box.h, box.child_pos = grid_w, grid_h, pos
        return
    top = PAD + (HEAD if box.header else 0.0)
    inner_w = max(grid_w, text_w(box.header) if box.header else 0, 60)
    # memory bars with their device chips, one block per NUMA node, side by side within the
    # children's width (wrapping), chips wrapped in each block
    mem_pos = []
    x = y = row_h = 0.0
    for node, devices in box.memory:
        bar_w = text_w(bar_text(node, t)) + 40  # room for the memory tags of an overlay
        chips = [text_w(chip_label(d)) for d in devices]
        block_w = max(bar_w, min(sum(chips) + GAP * (len(chips) - 1), max(inner_w, bar_w)) if chips else 0)
        if len(box.memory) == 1:
            block_w = max(block_w, inner_w)  # one node: its bar spans the box, as in lstopo
        if x > 0 and x + block_w > inner_w:
            x, y, row_h = 0.0, y + row_h + GAP, 0.0
        chip_pos, cx, cy = [], 0.0, BAR_H + 2
        for cw in chips:
            if cx > 0 and cx + cw > block_w:
                cx, cy = 0.0, cy + CHIP_H + 2
            chip_pos.append((cx, cy, cw))
            cx += cw + GAP
        h = cy + (CHIP_H if chips else -2)
        mem_pos.append((x, y, block_w, chip_pos))
        x += block_w + GAP
        row_h = max(row_h, h)
    mem_h = (y + row_h + GAP) if box.memory else 0.0
    inner_w = max(inner_w, max((mx + mw for mx, _, mw, _ in mem_pos), default=0.0))
    box.mem_pos = [(PAD + mx, top + my, mw, chips) for mx, my, mw, chips in mem_pos]
    box.child_pos = [(PAD + px, top + mem_h + py) for px, py in pos]
    box.w, box.h = inner_w + 2 * PAD, top + mem_h + grid_h + PAD


def bar_text(node: Obj, t: Topology) -> str:
    return node_label(node, t).replace("(", "").replace(")", "").replace("local=", "")


def _grid(cells: list[tuple[float, float]], cols: int) -> tuple[float, float, list[tuple[float, float]]]:
    if not cells:
        return 0.0, 0.0, []
    rows = math.ceil(len(cells) / cols)
    col_w = [0.0] * cols
    row_h = [0.0] * rows
    for i, (w, h) in enumerate(cells):
        col_w[i % cols] = max(col_w[i % cols], w)
        row_h[i // cols] = max(row_h[i // cols], h)
    xs = [sum(col_w[:j]) + GAP * j for j in range(cols)]
    ys = [sum(row_h[:r]) + GAP * r for r in range(rows)]
    pos = [(xs[i % cols], ys[i // cols]) for i in range(len(cells))]
    return xs[-1] + col_w[-1], ys[-1] + row_h[-1], pos


def _best_cols(cells: list[tuple[float, float]]) -> int:
    best, best_score = 1, float("inf")
    for cols in range(1, len(cells) + 1):
        w, h, _ = _grid(cells, cols)
        empty = math.ceil(len(cells) / cols) * cols - len(cells)
        score = abs(math.log((w + 1) / (h + 1) / ASPECT)) + 0.3 * empty
        if score < best_score - 1e-9:
            best, best_score = cols, score
    return best


def walk(box: Box):
    yield box
    for c in box.children:
        yield from walk(c)


def lay_out(topology: Topology, paint: Paint) -> Box:
    """The machine's boxes, measured and placed; devices off every NUMA node in a box of their own."""
    devices_by_node: dict[int | None, list[Device]] = {}  # None: local to no NUMA node
    node_ids = {n.os_index for n in topology.numa_nodes}
    for d in sorted(topology.devices, key=lambda d: (d.kind not in ("gpu", "npu", "accel"), d.kind, d.index)):
        devices_by_node.setdefault(d.numa_node if d.numa_node in node_ids else None, []).append(d)
    loose = devices_by_node.pop(None, [])
    tree = build(topology, ("L1iCache", "L2iCache", "L3iCache", "MemCache", "Bridge", "PCIDev", "OSDev"))
    root = _convert(tree, topology, devices_by_node)
    root.kind = "Machine"
    total = sum(n.local_memory for n in topology.numa_nodes)
    detail = long_detail(tree, topology).strip("()")
    machine = "Machine" + (f" ({format_size(total)} total)" if total else "") + (f" {detail}" if detail else "")
    root.header = machine + root.header.removeprefix("Machine")
    root.title = machine + root.title.removeprefix(node_label(tree, topology))
    for target in [b for b in walk(root) if b.kind == "Package"] or [root]:  # caches private to each core
        kinds = {tuple(b.private) for b in walk(target) if b.kind == "Core"}
        if len(kinds) == 1 and next(iter(kinds)):
            target.header += " · per core: " + ", ".join(next(iter(kinds)))
    if loose:
        root.memory.append((Obj("Devices", EMPTY), loose))
    # one width for every PU: room for the longest label, "P#2047" or "P#12 r0+r1", and the remote flag
    pu_w = max((len(pu_label(pu, paint)) for pu in topology.pus), default=3) * CHAR + (12 if paint.remote else 6)
    _measure(root, topology, pu_w)
    root.x, root.y = 8, 8
    for box in walk(root):  # a box before its children: each placed from its parent
        for c, (cx, cy) in zip(box.children, box.child_pos):
            c.x, c.y = box.x + cx, box.y + cy
    return root
