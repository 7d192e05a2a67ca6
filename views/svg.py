"""A machine's picture as one SVG document: plain shapes and one <style>, no script, font or image to fetch. With
an overlay, each owner's CPUs are painted, its device linked to its nearest core, a key (and legend) below."""

from __future__ import annotations

from html import escape as _html_escape

from topo.model import Topology
from topo.text import printable
from topo.views.layout import (BAR_H, CHAR, CHIP_H, FONT, HEAD, PAD, Box, bar_text, chip_label,
                          lay_out, node_label, pu_label, text_w, walk)
from topo.views.palette import Overlay, Paint, ink_on


def escape(text: str) -> str:
    """Text from the machine or a file for SVG/HTML: controls escaped as the text forms escape them."""
    return _html_escape(printable(text))


_STYLE = {"Machine": "#ffffff", "Package": "#dedede", "Die": "#e6e6e6", "Group": "#ececec",  # lstopo's colours
          "Cluster": "#e9e9f9", "Cache": "#ffffff", "Core": "#bebebe"}
BAR_FILL = "#d2e7a4"
NO_FILL = "#9a9a9a"  # a PU not allowed
CSS = (
    # labels and their plates let the pointer through to the box below, whose title is the tooltip
    "text{font:%gpx 'DejaVu Sans','Liberation Sans',Arial,sans-serif;fill:#000;pointer-events:none}"
    ".b{stroke:#000;stroke-width:1}.c{stroke:#555;stroke-width:.6}.pu{fill:#fff;stroke:#000;stroke-width:.6}"
    ".no{fill:%s}text.no{fill:#444}.bar{fill:%s;stroke:#000;stroke-width:.8}.plate{pointer-events:none}"
    ".chip{fill:#f2e2c4;stroke:#000;stroke-width:.8}.n{font-weight:bold}.remote{fill:#000;stroke:#fff;stroke-width:.8}"
    ".h{paint-order:stroke;stroke:#fff;stroke-width:2.6px;stroke-linejoin:round;fill:#000}"
    ".split{fill:none;stroke:#000;stroke-width:2.2}.link{fill:none;stroke-width:2;stroke-opacity:.85}"
    ".halo{fill:none;stroke:#fff;stroke-width:4.4;stroke-opacity:.9}"
) % (FONT, NO_FILL, BAR_FILL)
GLYPH_W = 0.7 * FONT  # the widest digit of DejaVu Sans Bold; a plate this wide per character covers its text


def draw_svg(topology: Topology, overlay: Overlay | None = None, *, legend: bool = True) -> str:
    """The machine as one SVG document; with ``overlay``, its owners painted on their CPUs and, below the machine,
    the key to the symbols and (``legend``) the title, one row per owner and the notes."""
    paint = Paint(topology, overlay)
    root = lay_out(topology, paint)
    out: list[str] = []
    labels: list[str] = []  # drawn last, so the device links run under them
    for box in walk(root):
        _emit_box(out, labels, box, topology, paint)
    width, height = root.w + 16, root.y + root.h + 8
    out += (_links(root, overlay) if overlay is not None else []) + labels  # every label over the links
    if overlay is not None:
        drawn, lw, lh = _legend(overlay, 8, height + 4, rows=legend, wrap=root.w)
        out += drawn
        width, height = max(width, lw + 16), height + lh + 12
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}">'
            f"<title>{escape(overlay.title if overlay and overlay.title else topology.summary())}</title>"
            f'<style>{CSS}</style><rect width="100%" height="100%" fill="#fff"/>')
    return head + "\n" + "\n".join(out) + "\n</svg>\n"


def _f(v: float) -> str:
    return f"{v:.1f}".removesuffix(".0")


def _look(cls: str, fill: str | None) -> str:
    return (f' class="{cls}"' if cls else "") + (f' style="fill:{fill}"' if fill else "")


def _rect(x, y, w, h, cls="", fill=None) -> str:
    return f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}"{_look(cls, fill)}/>'


def _text(x, y, s, cls="", fill=None) -> str:
    return f'<text x="{_f(x)}" y="{_f(y)}"{_look(cls, fill)}>{escape(s)}</text>'


def _plate(x: float, baseline: float, text: str, right: float, stripes: list[tuple[float, float, str]]) -> str:
    """The ``stripes`` (left, right, colour) under a label at ``x`` (up to ``right``) again, over the device links."""
    left, end = x - 1, min(x + len(text) * GLYPH_W + 1, right)
    top, height = baseline - 0.8 * FONT, 1.05 * FONT  # DejaVu Sans' ascent and descent, and a little
    return "".join(_rect(max(x0, left), top, min(x1, end) - max(x0, left), height, "plate", fill)
                   for x0, x1, fill in stripes if min(x1, end) > max(x0, left))


def _emit_box(out: list[str], labels: list[str], box: Box, topology: Topology, paint: Paint) -> None:
    """The box's shapes into ``out``; its texts, chips and memory tags into ``labels``."""
    if box.kind == "PU":
        return _emit_pu(out, labels, box, topology, paint)
    if box.kind == "Cores":
        return
    fill = _STYLE.get(box.kind, "#ffffff")
    cls = "c" if box.kind == "Core" else "b"
    out.append(f"<g><title>{escape(box.title)}</title>{_rect(box.x, box.y, box.w, box.h, cls, fill)}")
    if box.kind == "Core" and box.cpuset in paint.split_cores:
        out.append(_rect(box.x + 1, box.y + 1, box.w - 2, box.h - 2, "split"))
    out.append("</g>")
    if box.header and box.kind != "Core":
        fits = int((box.w - PAD - 6) / CHAR)  # characters
        header = box.header if len(box.header) <= fits else box.header[:max(fits - 1, 1)] + "…"
        x, y = box.x + PAD, box.y + PAD + FONT
        labels.append(_plate(x, y, header, box.x + box.w - 1, [(box.x, box.x + box.w, fill)]) + _text(x, y, header))
    for (node, devices), (mx, my, mw, chips) in zip(box.memory, box.mem_pos):
        x, y = box.x + mx, box.y + my
        right, stripes = box.x + box.w - 1, [(box.x, box.x + box.w, fill)]
        if node.type == "NUMANode":
            out.append(f"<g><title>{escape(node_label(node, topology))}</title>{_rect(x, y, mw, BAR_H, 'bar')}</g>")
            tx = x + mw - 3
            for i in reversed(paint.memory_of.get(node.os_index, [])):
                o = paint.overlay.owners[i]
                tw = text_w(o.tag) - 2
                tx -= tw
                labels.append(f"<g><title>memory of {escape(' '.join(o.legend[:2]) or o.tag)}</title>"
                              f"{_rect(tx, y + 2, tw, BAR_H - 4, fill=o.colour)}"
                              f"{_text(tx + 2, y + 11.5, o.tag, 'n', ink_on(o.colour))}</g>")
                tx -= 2
            right, stripes = tx + 1, [(x, x + mw, BAR_FILL)]
        text = bar_text(node, topology)
        labels.append(_plate(x + 3, y + 12, text, right, stripes) + _text(x + 3, y + 12, text))
        for d, (cx, cy, cw) in zip(devices, chips):
            owner = paint.device_owner.get((d.kind, d.index))
            fill = paint.overlay.owners[owner].colour if owner is not None else None
            label = chip_label(d)
            about = " ".join(x for x in (d.name if d.name != label else "", d.busid, d.uuid) if x)
            labels.append(f"<g><title>{escape(label + (' ' + about if about else ''))}</title>"
                          f"{_rect(x + cx, y + cy, cw, CHIP_H, 'chip', fill)}"
                          f"{_text(x + cx + 3, y + cy + 12, label, '', ink_on(fill) if fill else None)}</g>")


def _emit_pu(out: list[str], labels: list[str], box: Box, topology: Topology, paint: Paint) -> None:
    pu = box.cpuset.first()
    x, y, w, h = box.x, box.y, box.w, box.h
    owners = [paint.overlay.owners[i] for i in paint.owners_of.get(pu, [])]
    allowed = pu in topology.allowed_pus
    title = box.title
    parts = [_rect(x, y, w, h, "pu no" if not allowed else "pu")]
    label, _, tag = pu_label(pu, paint).partition(" ")
    stripes = [(x, x + w, "#fff" if allowed else NO_FILL)]
    if owners:
        stripe = w / len(owners)
        stripes = [(x + k * stripe, x + (k + 1) * stripe, o.colour) for k, o in enumerate(owners)]
        parts += [_rect(x + k * stripe, y, stripe, h, fill=o.colour) for k, o in enumerate(owners)]
        title += " · " + ", ".join(" ".join(o.legend[:2]) or o.tag for o in owners)
    elif paint.overlay is not None and allowed:
        title += " · idle"
    if not allowed:
        title += " · not allowed"
    if pu in paint.remote:
        parts.append(_corner(x + w, y))
        title += " · remote from its device"
    out.append(f"<g><title>{escape(title)}</title>{''.join(parts)}</g>")
    plate = _plate(x + 3, y + 11, f"{label} {tag}".strip(), x + w - (9 if pu in paint.remote else 1), stripes)
    if owners:
        look = f'style="fill:{ink_on(owners[0].colour)}"' if len(owners) == 1 else 'class="h"'
        labels.append(f'{plate}<text x="{_f(x + 3)}" y="{_f(y + 11)}" {look}>{label} '
                      f'<tspan class="n">{escape(tag)}</tspan></text>')
    else:
        labels.append(plate + _text(x + 3, y + 11, label, "" if allowed else "no"))


def _corner(x: float, y: float) -> str:
    """The remote flag: a black triangle in a PU's top-right corner (visible on every colour)."""
    return f'<path class="remote" d="M{_f(x - 8)},{_f(y)}H{_f(x)}V{_f(y + 8)}Z"/>'


def _links(root: Box, overlay: Overlay) -> list[str]:
    """A curve from each device chip to the top of the nearest core of the owner that drives it."""
    chip_xy = {(d.kind, d.index): (box.x + mx + cx + cw / 2, box.y + my + cy + CHIP_H)  # a chip's bottom centre
               for box in walk(root) for (_, devices), (mx, my, _, chips) in zip(box.memory, box.mem_pos)
               for d, (cx, cy, cw) in zip(devices, chips)}
    core_top: dict[int, tuple[float, float]] = {}  # PU -> the top of its core (or of itself, without cores)
    for b in walk(root):  # a core comes before its PUs
        if b.kind in ("Core", "PU"):
            for pu in b.cpuset:
                core_top.setdefault(pu, (b.x + b.w / 2, b.y))
    out = []
    for o in overlay.owners:
        targets = [core_top[pu] for pu in o.cpus if pu in core_top]
        if o.device in chip_xy and targets:
            sx, sy = chip_xy[o.device]
            tx, ty = min(targets, key=lambda p: (p[0] - sx) ** 2 + (p[1] - sy) ** 2)
            out.append(_link(sx, sy, tx, ty, o.colour))
    return out


def _link(sx: float, sy: float, tx: float, ty: float, fill: str, bend: float | None = None) -> str:
    """A device-to-core curve in the owner's colour on a white halo (it crosses other owners), a dot on the core."""
    bend = max(12.0, abs(ty - sy) / 2) if bend is None else bend
    d = f"M{_f(sx)},{_f(sy)} C{_f(sx)},{_f(sy + bend)} {_f(tx)},{_f(ty - bend)} {_f(tx)},{_f(ty)}"
    return (f'<path class="halo" d="{d}"/><path class="link" stroke="{fill}" d="{d}"/>'
            f'<circle cx="{_f(tx)}" cy="{_f(ty)}" r="3" style="fill:{fill}" stroke="#000" stroke-width=".6"/>')


def _symbols(overlay: Overlay) -> list[tuple]:
    """The key's entries: (draw(x, y) -> SVG text, width)."""
    items = []

    def entry(sample, sample_w: float, text: str, cls: str = ""):
        items.append((lambda x, y: sample(x, y) + _text(x + sample_w + 4, y + FONT + 1, text, cls),
                      sample_w + 4 + text_w(text)))

    if len(overlay.owners) > 1:
        a, b = overlay.owners[0].colour, overlay.owners[1].colour
        entry(lambda x, y: _rect(x, y + 1, 11, 12, fill=a) + _rect(x + 11, y + 1, 11, 12, fill=b)
              + _rect(x, y + 1, 22, 12, "c", "none"), 22, "shared PU")
    if overlay.owners:  # a NUMA bar's tag: the owner whose memory the node holds
        o = overlay.owners[0]
        tw = text_w(o.tag) - 2
        entry(lambda x, y: _rect(x, y, tw + 20, BAR_H - 2, "bar") + _rect(x + 16, y + 2, tw, BAR_H - 6, fill=o.colour)
              + _text(x + 18, y + 11, o.tag, "n", ink_on(o.colour)), tw + 20,
              f"memory node of {' '.join(o.legend[:1]) or o.tag}")
    linked = next((o for o in overlay.owners if o.device is not None), None)
    if linked is not None:
        label = f"{linked.device[0].upper()} {linked.device[1]}"
        cw = text_w(label) + 4
        entry(lambda x, y: _rect(x, y, cw, CHIP_H - 2, "chip", linked.colour)
              + _text(x + 3, y + 11, label, "", ink_on(linked.colour))
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
    out, y, width = [], y0, 0.0
    if overlay.title and rows:
        out.append(_text(x0, y + FONT, overlay.title, "n"))
        width = text_w(overlay.title)
        y += HEAD + 2
    table = [overlay.legend_header] + [o.legend for o in overlay.owners] if rows else []
    ncols = max((len(r) for r in table), default=0)
    col_w = [max((text_w(r[j]) for r in table if j < len(r)), default=0) + 14 for j in range(ncols)]
    for k, row in enumerate(table):
        x = x0 + 20.0  # after the owner's swatch
        if k > 0:
            out.append(_rect(x0, y + 1, 14.0, 12, "b", overlay.owners[k - 1].colour))
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
        width = max(width, text_w(note) + 16)
        y += HEAD
    return out, width, y - y0

