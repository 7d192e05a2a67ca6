"""What a picture paints on the machine: the overlay (who owns which CPUs, memory nodes and devices),
the owners' colours, and the per-PU facts drawn from them; nothing here knows what the owners are."""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

from topo.cpuset import EMPTY, CpuSet
from topo.model import Topology


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
    return "#%02x%02x%02x" % tuple(round(v * 255) for v in colorsys.hls_to_rgb(hue / 360, light, 0.65))


def rgb(hex_colour: str) -> tuple[int, ...]:
    return tuple(int(hex_colour.lstrip("#")[k:k + 2], 16) for k in (0, 2, 4))


def ink_on(fill: str) -> str:
    """Black or white text, whichever reads better on ``fill``."""
    r, g, b = rgb(fill)
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


class Paint:
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

