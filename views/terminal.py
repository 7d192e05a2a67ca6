"""The terminal map of an overlay (`topo plan --explain`): one line per NUMA node, one cell per core."""

from __future__ import annotations

from topo.cpuset import CpuSet, union_all
from topo.model import Topology
from topo.views.palette import Overlay, Paint, ink_on, rgb


def text_map(topology: Topology, overlay: Overlay, *, colour: bool = False) -> str:
    """One line per NUMA node, one cell per core (grouped by last-level cache): its owner's tag, ``.`` idle, ``*``
    several owners, ``-`` not allowed; then the node's devices, whose memory it holds, whose CPUs are remote."""
    paint = Paint(topology, overlay)
    width = max([len(o.tag) for o in overlay.owners] + [1])
    # last-level caches shared by cores (L3 complexes) split a node's line; private ones do not
    llcs = [c for c in topology.last_level_caches()
            if sum(1 for core in topology.cores if core.cpuset <= c.cpuset) > 1]
    apart = f", {llcs[0].label} groups apart" if len(llcs) > 1 else ""
    lines = [f"map: one cell per core{apart}: the process owning it, . idle, * shared, - not allowed"]
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
                for core in topology.cores if core.cpuset <= cpus]
        for group, core in sorted(mine, key=lambda gc: (gc[0], gc[1].cpuset.first())):
            if cells and group != last_group:
                cells.append((" ", ""))
            last_group = group
            cells.append(_cell(core.cpuset, topology, overlay, paint, width))
        devs = sorted((d for d in topology.devices if d.numa_node == node and node is not None
                       and d.kind in ("gpu", "npu", "accel")), key=lambda d: d.index)
        notes = [f"{devs[0].kind.upper()} " + ",".join(str(d.index) for d in devs)] if devs else []
        shared = {i for core in topology.cores if core.cpuset <= cpus and len(_owners(core.cpuset, paint)) > 1
                  for i in _owners(core.cpuset, paint)}
        remote = {i for pu in cpus if pu in paint.remote for i in paint.owners_of.get(pu, [])
                  if pu in overlay.owners[i].remote}
        for what, owners in (("memory of", paint.memory_of.get(node, [])), ("shared by", sorted(shared)),
                             ("remote:", sorted(remote))):
            if owners:
                notes.append(f"{what} " + " ".join(overlay.owners[i].tag for i in owners))
        line = f"{name.ljust(label_w)} |{_join_cells(cells, ' ' if width > 1 else '', colour)}|"
        lines.append(line + ("  " + "; ".join(notes) if notes else ""))
    return "\n".join(lines)


def _owners(cpus: CpuSet, paint: Paint) -> set[int]:
    return {i for pu in cpus for i in paint.owners_of.get(pu, ())}


def _join_cells(cells: list[tuple[str, str]], sep: str, colour: bool) -> str:
    """Cells side by side; in colour, one escape sequence per run of cells that look alike."""
    out, run_code = [], ""
    for k, (text, code) in enumerate(cells):
        if k and cells[k - 1][0] != " " and text != " ":
            out.append(sep)
        if colour and code != run_code:
            out.append(("\x1b[0m" if run_code else "") + (f"\x1b[{code}m" if code else ""))
            run_code = code
        out.append(text)
    if colour and run_code:
        out.append("\x1b[0m")
    return "".join(out)


def _cell(core: CpuSet, topology: Topology, overlay: Overlay, paint: Paint, width: int) -> tuple[str, str]:
    """A core's text and its SGR code (colour mode): the owner's colour, underlined when remote."""
    owners = _owners(core, paint)
    if not core & topology.allowed_pus:
        text, code = "-", "2"  # dim
    elif not owners:
        text, code = ".", ""
    elif len(owners) == 1:
        o = overlay.owners[owners.pop()]
        ink = "30" if ink_on(o.colour) == "#000" else "97"
        text, code = o.tag, f"{ink};48;5;{_xterm(*rgb(o.colour))}" + (";4" if paint.remote & set(core) else "")
    else:
        text, code = "*", "1"
    return text.rjust(width), code


def _xterm(r: int, g: int, b: int) -> int:
    """The nearest colour of the xterm 256-colour cube."""
    steps = (0, 95, 135, 175, 215, 255)
    idx = [min(range(6), key=lambda k: abs(steps[k] - v)) for v in (r, g, b)]
    return 16 + 36 * idx[0] + 6 * idx[1] + idx[2]
