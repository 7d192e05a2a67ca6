"""The machine drawn in text (`topo show --of ascii`): the console form's tree as nested boxes, an object's memory,
normal and I/O children side by side inside it, wrapped to a width; lstopo's spirit, not its exact drawing."""

from __future__ import annotations

from topo.model import Topology
from topo.text import printable
from topo.tree import Obj, build
from topo.views.console import label, pci_domains


def draw_ascii(t: Topology, index: str = "default", width: int = 160) -> str:
    """`t` as nested boxes at most `width` characters wide where the children allow it."""
    return "\n".join(_box(build(t), t, index, width, pci_domains(t)))


def _box(obj: Obj, t: Topology, index: str, width: int, domains: bool) -> list[str]:
    chain = [obj]  # an only child with the same CPUs shares its parent's box, as in the console's " + "
    while len(obj.children) == 1 and not obj.memory and not obj.io and obj.children[0].cpuset == obj.cpuset:
        obj = obj.children[0]
        chain.append(obj)
    lines = [printable(" + ".join(label(o, t, index, False, domains) for o in chain))]
    row: list[list[str]] = []
    for part in (_box(c, t, index, width - 4, domains) for c in (*obj.memory, *obj.children, *obj.io)):
        if row and sum(len(b[0]) + 1 for b in row) + len(part[0]) > width - 4:
            lines += _side_by_side(row)
            row = []
        row.append(part)
    lines += _side_by_side(row)
    w = max(len(x) for x in lines)
    return ["┌" + "─" * (w + 2) + "┐", *(f"│ {x.ljust(w)} │" for x in lines), "└" + "─" * (w + 2) + "┘"]


def _side_by_side(boxes: list[list[str]]) -> list[str]:
    return [" ".join(b[i] if i < len(b) else " " * len(b[0]) for b in boxes)
            for i in range(max((len(b) for b in boxes), default=0))]
