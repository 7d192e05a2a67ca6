"""Pictures of a machine, in lstopo's spirit: SVG, a self-contained HTML page, and a terminal map.

The drawing nests boxes as `topo.render` nests the tree (Machine > Package > ... > Core > PU),
with three changes that keep a 2,048-PU machine readable:

- a cache whose CPUs are exactly one core's (a private L1/L2) is not drawn as a box: it is named
  in the core's tooltip and, when every core has the same ones, once in its package's header;
- an object whose CPUs equal its only child's shares that child's box ("Package P#0 · L3 32MiB");
- cores fold into rows of at most 8, and other boxes into the grid whose shape is closest to a
  landscape page, so nothing grows into one endless row.

NUMA nodes are bars at the top of the box holding their CPUs, with the node's devices (GPUs, NPUs,
NICs, ...) as chips below the bar. An optional `Overlay` paints CPUs by owner (a plan's processes,
for example); this module knows nothing of what the owners are. Everything is drawn with plain
SVG shapes and one <style>: no script, no font or image to fetch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

from topo.cpuset import EMPTY, CpuSet, union_all
from topo.model import Device, Topology
from topo.render import TreeNode, format_size, build_tree

# ---- the overlay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """One party the overlay paints, e.g. a process of a bind plan."""

    tag: str  # shortest name, in the terminal map's cells: "0" for rank 0
    colour: str  # "#rrggbb"
    cpus: CpuSet
    memory: CpuSet = EMPTY  # NUMA nodes (os_index) its memory is bound to
    device: tuple[str, int] | None = None  # (kind, index) of the device it drives
    remote: CpuSet = EMPTY  # those of its CPUs to flag as far from its device
    legend: tuple[str, ...] = ()  # its legend row, one text per column
    label: str = ""  # shown in each of its PUs in the SVG ("r0"); default: the tag

    @property
    def pu_label(self) -> str:
        return self.label or self.tag


@dataclass(frozen=True)
class Overlay:
    owners: tuple[Owner, ...]
    title: str = ""
    legend_header: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # printed under the legend (warnings)


# Distinct on white, none of them the grey of a disallowed PU or the green of a NUMA bar.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#ad494a", "#637939", "#7b4173", "#3182bd", "#e6550d", "#31a354")


def colour(i: int) -> str:
    """The i-th owner colour: the palette, then hues a golden angle apart (all distinct)."""
    if i < len(PALETTE):
        return PALETTE[i]
    hue = (i * 137.508) % 360
    light = 0.38 + 0.16 * ((i // len(PALETTE)) % 3)
    return _hsl(hue, 0.65, light)


def _hsl(h: float, s: float, l: float) -> str:
    c = (1 - abs(2 * l - 1)) * s
    x = c * (1 - abs((h / 60) % 2 - 1))
    m = l - c / 2
    r, g, b = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x)][int(h // 60) % 6]
    return "#%02x%02x%02x" % tuple(round((v + m) * 255) for v in (r, g, b))


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    v = hex_colour.lstrip("#")
    return int(v[0:2], 16), int(v[2:4], 16), int(v[4:6], 16)


def _ink(fill: str) -> str:
    """Black or white text, whichever reads better on ``fill``."""
    r, g, b = _rgb(fill)
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


class _Paint:
    """Per-PU facts the drawing needs from an overlay, computed once."""

    def __init__(self, topology: Topology, overlay: Overlay | None):
        self.overlay = overlay
        self.owners_of: dict[int, list[int]] = {}
        self.remote: set[int] = set()
        self.memory_of: dict[int, list[int]] = {}
        self.device_owner: dict[tuple[str, int], int] = {}
        self.split_cores: set[CpuSet] = set()  # cores whose threads went to different owners
        if overlay is None:
            return
        for i, o in enumerate(overlay.owners):
            for pu in o.cpus:
                self.owners_of.setdefault(pu, []).append(i)
            self.remote.update(o.remote & o.cpus)
            for node in o.memory:
                self.memory_of.setdefault(node, []).append(i)
            if o.device is not None:
                self.device_owner.setdefault(o.device, i)
        for core in topology.cores:
            sets = {tuple(self.owners_of.get(pu, ())) for pu in core.cpuset}
            if len(sets) > 1 and len({i for owners in sets for i in owners}) > 1:
                self.split_cores.add(core.cpuset)


# ---- layout ---------------------------------------------------------------------------------------
FONT = 10.0  # px, every text
CHAR = 0.62 * FONT  # a generous average glyph width for DejaVu Sans / Liberation Sans
PAD = 4.0
GAP = 4.0
HEAD = 14.0  # a header line
PU_H = 15.0
BAR_H = 16.0
CHIP_H = 16.0
CORES_PER_ROW = 8
ASPECT = 1.5  # width / height the grid of boxes aims at

_STYLE = {  # lstopo's colours
    "Machine": "#ffffff", "Package": "#dedede", "Die": "#e6e6e6", "Group": "#ececec",
    "Cluster": "#e9e9f9", "Cache": "#ffffff", "Core": "#bebebe",
}


def _text_w(text: str) -> float:
    return len(text) * CHAR + 6


@dataclass(eq=False)
class _Box:
    kind: str  # "Machine", "Package", "Cache", "Core", "PU", ...
    title: str  # the tooltip, and the header when drawn
    cpuset: CpuSet
    header: str = ""
    os_index: int | None = None  # PU number for PUs
    children: list["_Box"] = field(default_factory=list)
    memory: list[tuple[TreeNode, list[Device]]] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0
    # relative placements, set by _measure
    child_pos: list[tuple[float, float]] = field(default_factory=list)
    mem_pos: list[tuple[float, float, float, list[tuple[float, float, float]]]] = field(default_factory=list)
    private: list[str] = field(default_factory=list)  # caches private to this core


def _label(node: TreeNode) -> str:
    """'Package P#0 "EPYC"', 'L3 (16MiB)': the tree label without the logical index."""
    kind = node.kind
    return f"{kind} {node.detail}".strip() if node.detail else kind


def _short(node: TreeNode) -> str:
    """A header's part: 'Package P#0', 'L3 16MiB' (the model name and other details stay in the
    tooltip)."""
    if _is_cache(node):
        return f"{node.kind} {node.detail.strip('()')}"
    if node.os_index is not None or node.detail.startswith("(P#"):
        inner = node.detail.strip("()").split(" ", 1)[0]
        return f"{node.kind} {inner}"
    return node.kind


def _is_cache(node: TreeNode) -> bool:
    return node.kind[:1] == "L" and node.kind[1:2].isdigit()


def _convert(node: TreeNode, devices_by_node: dict[int, list[Device]]) -> _Box:
    """The render tree as boxes: same-cpuset chains merged into one box, caches private to a core
    folded into it, and the objects of each NUMA node gathered in a box of their own when the tree
    has none (NPS4 EPYC nodes split a package without a die or cache to match)."""
    chain = [node]
    while node.kind not in ("Core", "PU") and len(node.children) == 1 \
            and node.children[0].cpuset == node.cpuset:
        node = node.children[0]
        chain.append(node)
    memory = [m for n in chain for m in n.memory]
    if node.kind == "Core" and all(_is_cache(n) for n in chain[:-1]):
        private = [_label(n).replace("(", "").replace(")", "") for n in chain[:-1]]
        chain = [node]
    else:
        private = []
        if node.kind == "Core" and len(chain) > 1:
            chain.pop()
            node = chain[-1]
    kind = "PU" if node.kind == "PU" else ("Cache" if _is_cache(node) else node.kind)
    box = _Box(kind, " · ".join(_label(n) for n in chain), node.cpuset,
               " · ".join(s for s in (_short(n) for n in chain) if s != "Group"))
    box.private = private
    if kind == "PU":
        box.os_index = node.cpuset.first()
        box.title = f"PU P#{box.os_index}"
    if private:
        box.title += " · " + " · ".join(private)
    box.memory = [(m, devices_by_node.get(m.os_index, [])) for m in memory]
    box.children = [_convert(c, devices_by_node) for c in node.children]
    if len(box.memory) > 1:
        _gather_by_node(box)
    if len({c.kind == "Core" for c in box.children}) > 1:
        _gather_cores(box)
    return box


def _gather_cores(box: _Box) -> None:
    """Cores beside other boxes (a hybrid CPU's P-cores next to its E-core clusters) go into one
    unframed block, folded into rows like any cores, instead of a grid cell each."""
    children: list[_Box] = []
    for c in box.children:
        if c.kind == "Core" and children and children[-1].kind == "Cores":
            children[-1].children.append(c)
            children[-1].cpuset |= c.cpuset
        elif c.kind == "Core":
            children.append(_Box("Cores", "", c.cpuset, children=[c]))
        else:
            children.append(c)
    box.children = children


def _gather_by_node(box: _Box) -> None:
    kept, children = [], list(box.children)
    for node, devices in box.memory:
        members = [c for c in children if node.cpuset and c.cpuset <= node.cpuset]
        if not members or node.cpuset == box.cpuset:
            kept.append((node, devices))
            continue
        group = _Box("Group", _label(node), node.cpuset, "", memory=[(node, devices)], children=members)
        first = next(i for i, c in enumerate(children) if c is members[0])
        taken = {id(c) for c in members}
        children = [c for c in children if id(c) not in taken]
        children.insert(first, group)
    box.memory, box.children = kept, children


def _note_private_caches(box: _Box) -> None:
    """Name the caches private to each core once, in the package's (or machine's) header."""
    targets = [b for b in _walk(box) if b.kind == "Package"] or [box]
    for target in targets:
        kinds = {tuple(b.private) for b in _walk(target) if b.kind == "Core"}
        if len(kinds) == 1 and next(iter(kinds)):
            target.header += " · per core: " + ", ".join(next(iter(kinds)))


def _chip_label(d: Device) -> str:
    if d.kind in ("gpu", "npu", "accel") or not d.name:
        return f"{d.kind.upper() if d.kind != 'accel' else 'Accel'} {d.index}"
    return d.name


def _pu_w(topology: Topology, paint: _Paint) -> float:
    """One width for every PU: room for the longest label drawn, "P#2047" or "P#12 r0+r1"."""
    longest = max((len(_pu_label(pu, paint)) for pu in topology.pus), default=3)
    return longest * CHAR + (12 if paint.remote else 6)  # the remote flag takes the right corner


def _pu_label(pu: int, paint: _Paint) -> str:
    owners = paint.owners_of.get(pu)
    if not owners:
        return f"P#{pu}"
    tags = "+".join(paint.overlay.owners[i].pu_label for i in owners)
    return f"P#{pu} " + (tags if len(owners) == 1 or len(tags) <= 5 else f"×{len(owners)}")


def _measure(box: _Box, pu_w: float) -> None:
    if box.kind == "PU":
        box.w, box.h = pu_w, PU_H
        return
    for c in box.children:
        _measure(c, pu_w)
    if box.kind == "Core":
        # threads stacked in one column: a core is a narrow tower, easy to fold into rows
        y = 2.0
        box.child_pos = []
        for c in box.children:
            box.child_pos.append((2.0, y))
            y += c.h + 1
        box.w = pu_w + 4
        box.h = y + 1
        return
    # memory bars and device chips, one block per NUMA node, side by side
    blocks = []
    for node, devices in box.memory:
        bar_w = _text_w(_bar_text(node)) + 40  # room for the memory tags of an overlay
        chips = [_text_w(_chip_label(d)) for d in devices]
        blocks.append((bar_w, chips))
    cells = [(c.w, c.h) for c in box.children]
    if box.children and all(c.kind == "Core" for c in box.children):
        n = len(cells)
        rows = math.ceil(n / CORES_PER_ROW)
        cols = math.ceil(n / rows)
    else:
        cols = _best_cols(cells)
    grid_w, grid_h, pos = _grid(cells, cols)
    if box.kind == "Cores":  # unframed: just the folded rows
        box.w, box.h, box.child_pos = grid_w, grid_h, pos
        return
    header = HEAD if box.header else 0.0
    top = PAD + header
    inner_w = max(grid_w, _text_w(box.header) if box.header else 0, 60)
    # lay the memory blocks out within the children's width (wrapping), chips wrapped in each block
    mem_pos = []
    x = y = 0.0
    row_h = 0.0
    for (bar_w, chips), (node, devices) in zip(blocks, box.memory):
        block_w = max(bar_w, min(sum(chips) + GAP * (len(chips) - 1), max(inner_w, bar_w)) if chips else 0)
        if len(blocks) == 1:
            block_w = max(block_w, inner_w)  # one node: its bar spans the box, as in lstopo
        if x > 0 and x + block_w > inner_w:
            x, y = 0.0, y + row_h + GAP
            row_h = 0.0
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
    mem_w = max((mx + mw for mx, _, mw, _ in mem_pos), default=0.0)
    inner_w = max(inner_w, mem_w)
    box.mem_pos = [(PAD + mx, top + my, mw, chips) for mx, my, mw, chips in mem_pos]
    box.child_pos = [(PAD + px, top + mem_h + py) for px, py in pos]
    box.w = inner_w + 2 * PAD
    box.h = top + mem_h + grid_h + PAD


def _bar_text(node: TreeNode) -> str:
    return _label(node).replace("(", "").replace(")", "").replace("local=", "")


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
    if len(cells) <= 1:
        return 1
    best, best_score = 1, float("inf")
    for cols in range(1, len(cells) + 1):
        w, h, _ = _grid(cells, cols)
        rows = math.ceil(len(cells) / cols)
        empty = rows * cols - len(cells)
        score = abs(math.log((w + 1) / (h + 1) / ASPECT)) + 0.3 * empty
        if score < best_score - 1e-9:
            best, best_score = cols, score
    return best


def _place(box: _Box, x: float, y: float) -> None:
    box.x, box.y = x, y
    for c, (cx, cy) in zip(box.children, box.child_pos):
        _place(c, x + cx, y + cy)


def _walk(box: _Box):
    yield box
    for c in box.children:
        yield from _walk(c)


# ---- SVG ------------------------------------------------------------------------------------------
CSS = (
    "text{font:%gpx 'DejaVu Sans','Liberation Sans',Arial,sans-serif;fill:#000}"
    ".b{stroke:#000;stroke-width:1}.c{stroke:#555;stroke-width:.6}"
    ".pu{fill:#fff;stroke:#000;stroke-width:.6}.no{fill:#9a9a9a}.no+text{fill:#444}"
    ".bar{fill:#d2e7a4;stroke:#000;stroke-width:.8}"
    ".chip{fill:#f2e2c4;stroke:#000;stroke-width:.8}.n{font-weight:bold}"
    ".remote{fill:#000;stroke:#fff;stroke-width:.8}"
    ".h{paint-order:stroke;stroke:#fff;stroke-width:2.6px;stroke-linejoin:round;fill:#000}"
    ".split{fill:none;stroke:#000;stroke-width:2.2}"
    ".link{fill:none;stroke-width:2;stroke-opacity:.85}"
    ".halo{fill:none;stroke:#fff;stroke-width:4.4;stroke-opacity:.9}"
) % FONT


def draw_svg(topology: Topology, overlay: Overlay | None = None, *, legend: bool = True) -> str:
    """The machine as one SVG document; with ``overlay``, its owners painted on their CPUs and,
    below the machine, the key to the symbols and (``legend``) the title, one row per owner and
    the notes."""
    paint = _Paint(topology, overlay)
    devices_by_node: dict[int, list[Device]] = {}
    loose: list[Device] = []
    node_ids = {n.os_index for n in topology.numa_nodes}
    for d in sorted(topology.devices, key=lambda d: (d.kind not in ("gpu", "npu", "accel"), d.kind, d.index)):
        if d.numa_node in node_ids:
            devices_by_node.setdefault(d.numa_node, []).append(d)
        else:
            loose.append(d)
    tree = build_tree(topology)
    root = _convert(tree, devices_by_node)
    root.kind = "Machine"
    total = sum(n.local_memory for n in topology.numa_nodes)
    machine = "Machine" + (f" ({format_size(total)} total)" if total else "") + \
        (f" {tree.detail}" if tree.detail else "")
    root.header = machine + root.header.removeprefix("Machine")
    root.title = machine + root.title.removeprefix(_label(tree))
    _note_private_caches(root)
    if loose:
        root.memory.append((TreeNode("Devices", "not local to a NUMA node", EMPTY, 0), loose))
    pu_w = _pu_w(topology, paint)
    _measure(root, pu_w)
    _place(root, 8, 8)
    out: list[str] = []
    for box in _walk(root):
        _emit_box(out, box, topology, paint)
    chip_xy = {}
    for box in _walk(root):
        for (node, devices), (mx, my, mw, chips) in zip(box.memory, box.mem_pos):
            for d, (cx, cy, cw) in zip(devices, chips):
                chip_xy[(d.kind, d.index)] = (box.x + mx + cx + cw / 2, box.y + my + cy + CHIP_H)
    width = root.w + 16
    height = root.y + root.h + 8
    if overlay is not None:
        out.extend(_links(root, overlay, chip_xy))
        drawn, lw, lh = _legend(overlay, 8, height + 4, rows=legend, wrap=root.w)
        out.extend(drawn)
        width = max(width, lw + 16)
        height += lh + 12
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}">'
            f"<title>{escape(overlay.title if overlay and overlay.title else topology.summary())}</title>"
            f'<style>{CSS}</style><rect width="100%" height="100%" fill="#fff"/>')
    return head + "\n" + "\n".join(out) + "\n</svg>\n"


def _f(v: float) -> str:
    return f"{v:.1f}".removesuffix(".0")


def _rect(x, y, w, h, cls="", fill=None, extra="") -> str:
    attrs = f' class="{cls}"' if cls else ""
    if fill:
        attrs += f' style="fill:{fill}"'
    return f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}"{attrs}{extra}/>'


def _text(x, y, s, cls="", fill=None) -> str:
    attrs = f' class="{cls}"' if cls else ""
    if fill:
        attrs += f' style="fill:{fill}"'
    return f'<text x="{_f(x)}" y="{_f(y)}"{attrs}>{escape(s)}</text>'


def _fit(text: str, width: float) -> str:
    n = int((width - 6) / CHAR)
    return text if len(text) <= n else text[:max(n - 1, 1)] + "…"


def _emit_box(out: list[str], box: _Box, topology: Topology, paint: _Paint) -> None:
    if box.kind == "PU":
        _emit_pu(out, box, topology, paint)
        return
    if box.kind == "Cores":
        return
    fill = _STYLE.get(box.kind, "#ffffff")
    cls = "c" if box.kind == "Core" else "b"
    out.append(f"<g><title>{escape(box.title)}</title>{_rect(box.x, box.y, box.w, box.h, cls, fill)}")
    if box.kind == "Core" and box.cpuset in paint.split_cores:
        out.append(_rect(box.x + 1, box.y + 1, box.w - 2, box.h - 2, "split"))
    if box.header and box.kind != "Core":
        out.append(_text(box.x + PAD, box.y + PAD + FONT, _fit(box.header, box.w - PAD)))
    out.append("</g>")
    for (node, devices), (mx, my, mw, chips) in zip(box.memory, box.mem_pos):
        x, y = box.x + mx, box.y + my
        if node.kind == "NUMANode":
            out.append(f"<g><title>{escape(_label(node))}</title>{_rect(x, y, mw, BAR_H, 'bar')}"
                       f"{_text(x + 3, y + 12, _bar_text(node))}</g>")
            tags = paint.memory_of.get(node.os_index, [])
            tx = x + mw - 3
            for i in reversed(tags):
                o = paint.overlay.owners[i]
                tw = _text_w(o.tag) - 2
                tx -= tw
                out.append(f"<g><title>memory of {escape(' '.join(o.legend[:2]) or o.tag)}</title>"
                           f"{_rect(tx, y + 2, tw, BAR_H - 4, fill=o.colour)}"
                           f"{_text(tx + 2, y + 11.5, o.tag, 'n', _ink(o.colour))}</g>")
                tx -= 2
        else:
            out.append(_text(x + 3, y + 12, _bar_text(node)))
        for d, (cx, cy, cw) in zip(devices, chips):
            owner = paint.device_owner.get((d.kind, d.index))
            fill = paint.overlay.owners[owner].colour if owner is not None else None
            label = _chip_label(d)
            about = " ".join(x for x in (d.name if d.name != label else "", d.busid, d.uuid) if x)
            out.append(f"<g><title>{escape(label + (' ' + about if about else ''))}</title>"
                       f"{_rect(x + cx, y + cy, cw, CHIP_H, 'chip', fill)}"
                       f"{_text(x + cx + 3, y + cy + 12, label, '', _ink(fill) if fill else None)}</g>")


def _emit_pu(out: list[str], box: _Box, topology: Topology, paint: _Paint) -> None:
    pu = box.os_index
    x, y, w, h = box.x, box.y, box.w, box.h
    owners = paint.owners_of.get(pu, [])
    allowed = pu in topology.allowed_pus
    title = box.title
    parts = [_rect(x, y, w, h, "pu no" if not allowed else "pu")]
    label, _, tag = _pu_label(pu, paint).partition(" ")
    ink = None
    if owners:
        os_ = [paint.overlay.owners[i] for i in owners]
        stripe = w / len(os_)
        for k, o in enumerate(os_):
            parts.append(_rect(x + k * stripe, y, stripe, h, fill=o.colour))
        ink = _ink(os_[0].colour) if len(os_) == 1 else None
        title += " · " + ", ".join(" ".join(o.legend[:2]) or o.tag for o in os_)
    elif paint.overlay is not None and allowed:
        title += " · idle"
    if not allowed:
        title += " · not allowed"
    if pu in paint.remote:
        parts.append(_corner(x + w, y))
        title += " · remote from its device"
    if owners:
        look = f'style="fill:{ink}"' if ink else 'class="h"'
        parts.append(f'<text x="{_f(x + 3)}" y="{_f(y + 11)}" {look}>{label} '
                     f'<tspan class="n">{escape(tag)}</tspan></text>')
    else:
        parts.append(_text(x + 3, y + 11, label))
    out.append(f"<g><title>{escape(title)}</title>{''.join(parts)}</g>")


def _corner(x: float, y: float) -> str:
    """The remote flag: a black triangle in a PU's top-right corner (visible on every colour)."""
    return f'<path class="remote" d="M{_f(x - 8)},{_f(y)}H{_f(x)}V{_f(y + 8)}Z"/>'


def _links(root: _Box, overlay: Overlay, chip_xy) -> list[str]:
    """A curve from each device chip to the top of the nearest core of the owner that drives it."""
    core_top: dict[int, tuple[float, float]] = {}
    for b in _walk(root):
        if b.kind == "Core":
            for pu in b.cpuset:
                core_top[pu] = (b.x + b.w / 2, b.y)
        elif b.kind == "PU" and b.os_index not in core_top:
            core_top[b.os_index] = (b.x + b.w / 2, b.y)
    out = []
    for o in overlay.owners:
        if o.device is None or o.device not in chip_xy or not o.cpus:
            continue
        sx, sy = chip_xy[o.device]
        targets = [core_top[pu] for pu in o.cpus if pu in core_top]
        if not targets:
            continue
        tx, ty = min(targets, key=lambda p: (p[0] - sx) ** 2 + (p[1] - sy) ** 2)
        out.append(_link(sx, sy, tx, ty, o.colour))
    return out


def _link(sx: float, sy: float, tx: float, ty: float, fill: str, bend: float | None = None) -> str:
    """A device-to-core curve: the owner's colour on a white halo, so it reads across the cells of
    other owners it passes, ending in a dot on the core."""
    bend = max(12.0, abs(ty - sy) / 2) if bend is None else bend
    d = f"M{_f(sx)},{_f(sy)} C{_f(sx)},{_f(sy + bend)} {_f(tx)},{_f(ty - bend)} {_f(tx)},{_f(ty)}"
    return (f'<path class="halo" d="{d}"/><path class="link" stroke="{fill}" d="{d}"/>'
            f'<circle cx="{_f(tx)}" cy="{_f(ty)}" r="3" style="fill:{fill}" stroke="#000" stroke-width=".6"/>')


def _symbols(overlay: Overlay) -> list[tuple]:
    """The key's entries: (draw(x, y) -> SVG text, width)."""
    items = []

    def entry(sample, sample_w: float, text: str, cls: str = ""):
        items.append((lambda x, y: sample(x, y) + _text(x + sample_w + 4, y + FONT + 1, text, cls),
                      sample_w + 4 + _text_w(text)))

    if len(overlay.owners) > 1:
        a, b = overlay.owners[0].colour, overlay.owners[1].colour
        entry(lambda x, y: _rect(x, y + 1, 11, 12, fill=a) + _rect(x + 11, y + 1, 11, 12, fill=b)
              + _rect(x, y + 1, 22, 12, "c", "none"), 22, "shared PU")
    if overlay.owners:  # a NUMA bar's tag: the owner whose memory the node holds
        o = overlay.owners[0]
        tw = _text_w(o.tag) - 2
        entry(lambda x, y: _rect(x, y, tw + 20, BAR_H - 2, "bar") + _rect(x + 16, y + 2, tw, BAR_H - 6, fill=o.colour)
              + _text(x + 18, y + 11, o.tag, "n", _ink(o.colour)), tw + 20,
              f"memory node of {' '.join(o.legend[:1]) or o.tag}")
    linked = next((o for o in overlay.owners if o.device is not None), None)
    if linked is not None:
        label = f"{linked.device[0].upper()} {linked.device[1]}"
        cw = _text_w(label) + 4
        entry(lambda x, y: _rect(x, y, cw, CHIP_H - 2, "chip", linked.colour)
              + _text(x + 3, y + 11, label, "", _ink(linked.colour))
              + _link(x + cw, y + 7, x + cw + 20, y + 7, linked.colour, bend=0), cw + 24,
              "its device, linked to its nearest core")
    entry(lambda x, y: _rect(x, y + 1, 22, 12, "pu"), 22, "idle (allowed, unused)")
    entry(lambda x, y: _rect(x, y + 1, 22, 12, "pu no"), 22, "not allowed")
    if linked is not None:  # without devices nothing is remote from one
        entry(lambda x, y: _rect(x, y + 1, 22, 12, "pu") + _corner(x + 22, y + 1), 22, "remote from its device")
    entry(lambda x, y: _rect(x, y + 1, 22, 12, "c", "#bebebe") + _rect(x + 1, y + 2, 20, 10, "split"), 22,
          "core split between processes")
    return items


def _legend(overlay: Overlay, x0: float, y0: float, *, rows: bool, wrap: float = 0.0):
    out = []
    y = y0
    width = 0.0
    if overlay.title and rows:
        out.append(_text(x0, y + FONT, overlay.title, "n"))
        width = _text_w(overlay.title)
        y += HEAD + 2
    table = [overlay.legend_header] + [o.legend for o in overlay.owners] if rows else []
    ncols = max((len(r) for r in table), default=0)
    col_w = [max((_text_w(r[j]) for r in table if j < len(r)), default=0) + 14 for j in range(ncols)]
    sw = 14.0
    for k, row in enumerate(table):
        x = x0 + sw + 6
        if k > 0:
            o = overlay.owners[k - 1]
            out.append(_rect(x0, y + 1, sw, 12, "b", o.colour))
        for j, cell in enumerate(row):
            out.append(_text(x, y + FONT + 1, cell, "n" if k == 0 else ""))
            x += col_w[j]
        width = max(width, x - x0)
        y += HEAD
    y += 4 if table else 0
    # the symbols, each drawn as it appears in the picture, in rows no wider than the machine
    x = x0
    for draw, w in _symbols(overlay):
        if x > x0 and x + w > x0 + max(wrap, width):
            x, y = x0, y + HEAD + 4
        out.append(draw(x, y))
        x += w + 10
        width = max(width, x - 10 - x0)
    y += HEAD + 4
    for note in overlay.notes if rows else ():
        out.append(_text(x0, y + FONT, "⚠ " + note))
        width = max(width, _text_w(note) + 16)
        y += HEAD
    return out, width, y - y0


# ---- HTML -----------------------------------------------------------------------------------------
_PAGE_CSS = (
    "body{font:14px 'DejaVu Sans','Liberation Sans',Arial,sans-serif;margin:16px;color:#111}"
    "h1{font-size:18px;margin:0 0 6px}p{margin:4px 0}table{border-collapse:collapse;margin:8px 0}"
    "td,th{border:1px solid #bbb;padding:2px 6px;text-align:left;font-size:12px}"
    "th{background:#eee}.sw{display:inline-block;width:12px;height:12px;border:1px solid #000;"
    "vertical-align:middle}.figure{overflow:auto}.lnv{background:#b9e3a8}.lsw{background:#d8e8f8}"
    ".lhb{background:#f6efd6}"
)


def draw_html(topology: Topology, overlay: Overlay | None = None) -> str:
    """One self-contained page: a heading, the summary, the SVG inline, then the legend table (with
    an overlay) and the device link matrix."""
    title = overlay.title if overlay and overlay.title else "Machine" + (
        f" {topology.info['hostname']}" if topology.info.get("hostname") else "")
    parts = [f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
             f"<style>{_PAGE_CSS}</style></head><body>",
             f"<h1>{escape(title)}</h1>"]
    if overlay is None or not overlay.title:
        parts.append(f"<p>{escape(topology.summary())}</p>")
    info = ", ".join(f"{k}: {v}" for k, v in topology.info.items() if v)
    if info:
        parts.append(f"<p>{escape(info)}</p>")
    # the SVG keeps only the key to its symbols: the legend follows as a table
    parts.append(f'<div class="figure">{draw_svg(topology, overlay, legend=False)}</div>')
    if overlay is not None:
        parts.append("<table><tr><th></th>" + "".join(f"<th>{escape(h)}</th>" for h in overlay.legend_header)
                     + "</tr>")
        for o in overlay.owners:
            parts.append(f'<tr><td><span class="sw" style="background:{o.colour}"></span></td>'
                         + "".join(f"<td>{escape(c)}</td>" for c in o.legend) + "</tr>")
        parts.append("</table>")
        parts.extend(f"<p>warning: {escape(n)}</p>" for n in overlay.notes)
    if topology.links:
        names = list(topology.links)
        parts.append("<h2 style=\"font-size:15px\">Device links (as nvidia-smi topo -m)</h2><table><tr><th></th>"
                     + "".join(f"<th>{escape(n)}</th>" for n in names) + "</tr>")
        for a in names:
            cells = "".join(_link_cell(topology.links[a].get(b, "X" if a == b else "-")) for b in names)
            parts.append(f"<tr><th>{escape(a)}</th>{cells}</tr>")
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _link_cell(link: str) -> str:
    """A matrix cell shaded by how close the two devices are: NVLink/HCCS, one switch, the host."""
    shade = ("lnv" if link.startswith(("NV", "HCCS")) else "lsw" if link in ("PIX", "PXB")
             else "lhb" if link in ("PHB", "NODE") else "")
    return f'<td class="{shade}">{escape(link)}</td>' if shade else f"<td>{escape(link)}</td>"


# ---- terminal -------------------------------------------------------------------------------------
def text_map(topology: Topology, overlay: Overlay, *, colour: bool = False) -> str:
    """One line per NUMA node, one cell per core (grouped by last-level cache): the tag of the owner
    of the core's PUs, ``.`` idle, ``*`` several owners, ``-`` not allowed. After each line: the
    node's devices, whose memory it holds and whose CPUs on it are remote."""
    paint = _Paint(topology, overlay)
    width = max([len(o.tag) for o in overlay.owners] + [1])
    # last-level caches shared by cores (L3 complexes) split a node's line; private ones do not
    llcs = [c for c in topology.last_level_caches()
            if sum(1 for core in topology.cores if core.cpuset <= c.cpuset) > 1]
    apart = f", {llcs[0].label} groups apart" if len(llcs) > 1 else ""
    lines = [f"map: one cell per core{apart}: the process owning it, . idle, * shared, - not allowed"]
    cores = sorted(topology.cores, key=lambda c: c.cpuset.first())
    rows: list[tuple[str, CpuSet, int | None]] = [
        (f"node {n.os_index}", n.cpuset, n.os_index) for n in topology.numa_nodes
        if n.cpuset or paint.memory_of.get(n.os_index)]
    spare = topology.pus - union_all(n.cpuset for n in topology.numa_nodes)
    if spare:
        rows.append(("no node" if rows else "machine", spare, None))
    label_w = max(len(r[0]) for r in rows) if rows else 0
    for name, cpus, node in rows:
        cells: list[tuple[str, str]] = []
        last_group = None
        mine = [(next((i for i, c in enumerate(llcs) if core.cpuset <= c.cpuset), len(llcs)), core)
                for core in cores if core.cpuset <= cpus]
        for group, core in sorted(mine, key=lambda gc: (gc[0], gc[1].cpuset.first())):
            if last_group is not None and group != last_group:
                cells.append((" ", ""))
            last_group = group
            cells.append(_cell(core.cpuset, topology, overlay, paint, width))
        body = _join_cells(cells, " " if width > 1 else "", colour)
        notes = []
        devs = sorted((d for d in topology.devices if d.numa_node == node and node is not None
                       and d.kind in ("gpu", "npu", "accel")), key=lambda d: d.index)
        if devs:
            notes.append(f"{devs[0].kind.upper()} " + ",".join(str(d.index) for d in devs))
        mem = paint.memory_of.get(node, []) if node is not None else []
        if mem:
            notes.append("memory of " + " ".join(overlay.owners[i].tag for i in mem))
        shared = sorted({i for core in cores if core.cpuset <= cpus and len(_owners(core.cpuset, paint)) > 1
                         for i in _owners(core.cpuset, paint)})
        if shared:
            notes.append("shared by " + " ".join(overlay.owners[i].tag for i in shared))
        remote = sorted({i for pu in cpus if pu in paint.remote for i in paint.owners_of.get(pu, [])
                         if pu in overlay.owners[i].remote})
        if remote:
            notes.append("remote: " + " ".join(overlay.owners[i].tag for i in remote))
        line = f"{name.ljust(label_w)} |{body}|"
        lines.append(line + ("  " + "; ".join(notes) if notes else ""))
    return "\n".join(lines)


def _owners(cpus: CpuSet, paint: _Paint) -> set[int]:
    return {i for pu in cpus for i in paint.owners_of.get(pu, ())}


def _join_cells(cells: list[tuple[str, str]], sep: str, colour: bool) -> str:
    """Cells side by side; in colour, one escape sequence per run of cells that look alike."""
    out, run_code = [], ""
    for k, (text, code) in enumerate(cells):
        if k and cells[k - 1][0] != " " and text != " ":
            out.append(sep)
        if colour and code != run_code:
            out.append("\x1b[0m" if run_code else "")
            out.append(f"\x1b[{code}m" if code else "")
            run_code = code
        out.append(text)
    if colour and run_code:
        out.append("\x1b[0m")
    return "".join(out)


def _cell(core: CpuSet, topology: Topology, overlay: Overlay, paint: _Paint, width: int) -> tuple[str, str]:
    """A core's text and its SGR code (colour mode): the owner's colour, underlined when remote."""
    owners = _owners(core, paint)
    remote = any(pu in paint.remote for pu in core)
    if not core & topology.allowed_pus:
        text, code = "-", "2"  # dim
    elif not owners:
        text, code = ".", ""
    elif len(owners) == 1:
        o = overlay.owners[owners.pop()]
        text = o.tag
        r, g, b = _rgb(o.colour)
        ink = "30" if _ink(o.colour) == "#000" else "97"
        code = f"{ink};48;5;{_xterm(r, g, b)}" + (";4" if remote else "")
    else:
        text, code = "*", "1"
    return text.rjust(width), code


def _xterm(r: int, g: int, b: int) -> int:
    """The nearest colour of the xterm 256-colour cube."""
    steps = (0, 95, 135, 175, 215, 255)
    idx = [min(range(6), key=lambda k: abs(steps[k] - v)) for v in (r, g, b)]
    return 16 + 36 * idx[0] + 6 * idx[1] + idx[2]
