"""A machine's picture as one self-contained HTML page: the SVG inline, the legend as a table, and
the device link matrix shaded as nvidia-smi topo -m reads."""

from __future__ import annotations

from topo.model import Topology
from topo.views.console import link_rows
from topo.views.palette import Overlay
from topo.views.svg import draw_svg, escape

_PAGE_CSS = (
    "body{font:14px 'DejaVu Sans','Liberation Sans',Arial,sans-serif;margin:16px;color:#111}h1{font-size:18px;"
    "margin:0 0 6px}p{margin:4px 0}table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #bbb;"
    "padding:2px 6px;text-align:left;font-size:12px}th{background:#eee}.sw{display:inline-block;width:12px;"
    "height:12px;border:1px solid #000;vertical-align:middle}.figure{overflow:auto}.lnv{background:#b9e3a8}"
    ".lsw{background:#d8e8f8}.lhb{background:#f6efd6}"
)


def draw_html(topology: Topology, overlay: Overlay | None = None) -> str:
    """The page: a heading, the summary, the SVG, the legend table (with an overlay) and the device link matrix."""
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
        parts.append("<h2 style=\"font-size:15px\">Device links (as nvidia-smi topo -m)</h2><table><tr><th></th>"
                     + "".join(f"<th>{escape(n)}</th>" for n in topology.links) + "</tr>")
        parts += [f"<tr><th>{escape(a)}</th>{''.join(map(_link_cell, row))}</tr>" for a, row in link_rows(topology)]
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _link_cell(link: str) -> str:
    """A matrix cell shaded by how close the two devices are: NVLink/HCCS, one switch, the host."""
    shade = ("lnv" if link.startswith(("NV", "HCCS")) else "lsw" if link in ("PIX", "PXB")
             else "lhb" if link in ("PHB", "NODE") else "")
    return f'<td class="{shade}">{escape(link)}</td>' if shade else f"<td>{escape(link)}</td>"

