"""`topo show`: the machine as a tree (like `lstopo -p`) or as JSON."""

from __future__ import annotations

import os
import sys

import click

from topo.errors import UsageError

from topo_cli import CONTEXT
from topo_cli.machine import machine_options, write_text


@click.command(context_settings=CONTEXT)
@machine_options
@click.option("--json", "as_json", is_flag=True, help="Print the topology as JSON (schema topo.topology/1).")
@click.option("--include-disallowed", is_flag=True,
              help="Also show CPUs and NUMA nodes the cgroup cpuset / affinity does not allow.")
@click.option("--probes", default=None, metavar="LIST",
              help="Comma-separated optional probes to run (e.g. nvml,npu-smi); default: all that apply.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write the machine to FILE, in the format its extension names (like `lstopo FILE`): "
                   ".svg a drawing, .html the drawing with the summary and link matrix, .json, .txt.")
def show(machine, as_json, include_disallowed, probes, output):
    """Show the topology: packages, NUMA nodes, caches, cores, PUs and devices.

    \b
    Examples:
      topo show                          # this machine, like lstopo -p
      topo show --json > machine.json    # save it; plan on it elsewhere with --topology
      topo show --root /tmp/captured     # a sysfs/procfs captured below a directory
      topo show --from machine.xml       # an hwloc XML export (lstopo --of xml)
      topo show --output machine.svg     # a drawing (.html: with the summary and link matrix)
    """
    if output is not None:
        writer = _writer(output, as_json)  # a bad name fails before the machine is read
    wanted = tuple(p.strip() for p in probes.split(",") if p.strip()) if probes else None
    topology = machine.load(include_disallowed=include_disallowed, probes=wanted)
    if output is not None:
        write_text(output, writer(topology))
    elif as_json:
        import json

        # One write: json.dump() streams thousands of small chunks, each a syscall when stdout
        # is unbuffered (PYTHONUNBUFFERED=1, as under many job launchers).
        sys.stdout.write(json.dumps(topology.to_dict(), indent=2) + "\n")
    else:
        from topo.render import render_text

        click.echo(render_text(topology))


def _writer(path: str, as_json: bool):
    """The function that renders a Topology in the format ``path``'s extension names."""
    if as_json:
        raise UsageError(f"--json prints to stdout and --output {path} writes a file: give one of them "
                         "(--output FILE.json writes the JSON)")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".svg":
        from views.svg import draw_svg

        return draw_svg
    if suffix in (".html", ".htm"):
        from views.html import draw_html

        return draw_html
    if suffix == ".json":
        import json

        return lambda t: json.dumps(t.to_dict(), indent=2) + "\n"
    if suffix == ".txt":
        from topo.render import render_text

        return lambda t: render_text(t) + "\n"
    raise UsageError(f"--output {path}: unknown format {suffix or '(no extension)'!r}; "
                     "name the file .svg, .html, .json or .txt")
