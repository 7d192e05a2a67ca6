"""`topo show`: the machine as lstopo prints it, in topo's long form, as JSON, or drawn."""

from __future__ import annotations

import os
import sys

import click

from topo.errors import UsageError

from topo.cli import CONTEXT
from topo.cli.machine import STDOUT_NAMES, check_output, machine_options, write_text

# --of FORMAT -> the file name endings that mean it (lstopo: the output format from the extension)
FORMATS = {"console": (".txt",), "json": (".json",), "svg": (".svg",), "html": (".html", ".htm"),
           "xml": (".xml",)}
FORMAT_ALIASES = {"txt": "console"}


@click.command(context_settings=CONTEXT)
@machine_options
@click.argument("file", required=False, metavar="[FILE]")
@click.option("-o", "--output", default=None, metavar="FILE",
              help="Write to FILE (as the positional FILE) instead of stdout; '-' is stdout.")
@click.option("--of", "output_format", default=None, metavar="FORMAT",
              type=click.Choice([*FORMATS, *FORMAT_ALIASES], case_sensitive=False),
              help="Output format, as lstopo's --of: console (or txt), json, svg, html, xml (hwloc v2 "
                   "XML, which lstopo -i FILE reads). "
                   "Default: from FILE's extension, else console.")
@click.option("-f", "--force", is_flag=True, help="Overwrite FILE if it exists (else refused, as lstopo).")
@click.option("-p", "--physical", "index", flag_value="physical",
              help="Show physical (OS) indexes P#, as lstopo -p.")
@click.option("-l", "--logical", "index", flag_value="logical",
              help="Show logical indexes L# only, as lstopo -l.")
@click.option("--long", "long_form", is_flag=True,
              help="topo's long form: every object on its own line with its P# and L#, the package "
                   "model, devices under their NUMA node, the device link matrix, a summary line and "
                   "how each probe fared.")
@click.option("--no-io", "io", flag_value="none", help="No PCI function, bridge or OS device (lstopo --no-io).")
@click.option("--whole-io", "io", flag_value="whole",
              help="Every PCI function, bridge and OS device (lstopo --whole-io); by default those lstopo "
                   "shows: storage, network, display, accelerators and the bridges to them.")
@click.option("--no-bridges", is_flag=True, help="PCI functions without the bridges above them, as lstopo.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the topology as JSON (schema topo.topology/1), as --of json.")
@click.option("--include-disallowed", "--disallowed", is_flag=True,
              help="Also show CPUs and NUMA nodes the cgroup cpuset / affinity does not allow.")
@click.option("--probes", default=None, metavar="LIST",
              help="Comma-separated optional probes to run (e.g. nvml,npu-smi); default: all that apply.")
def show(machine, file, output, output_format, force, index, long_form, io, no_bridges, as_json, include_disallowed,
         probes):
    """Show the topology: packages, NUMA nodes, caches, cores, PUs, as lstopo prints them.

    \b
    Examples:
      topo show                          # this machine, like lstopo-no-graphics
      topo show -p                       # physical (OS) indexes, like lstopo -p
      topo show --long                   # every object, devices, link matrix, summary
      topo show --json > machine.json    # save it; plan on it elsewhere with --topology
      topo show --root /tmp/captured     # a sysfs/procfs captured below a directory
      topo show --from machine.xml       # an hwloc XML export (lstopo --of xml)
      topo show machine.svg              # a drawing (.html: with the summary and link matrix)
      topo show exported.xml             # hwloc v2 XML, for lstopo -i, hwloc-calc, hwloc-bind
    """
    if file is not None and output is not None:
        raise UsageError(f"FILE {file} and --output {output} both name the output file: give one of them")
    path = output if output is not None else file
    if path in STDOUT_NAMES:
        path = None
    fmt = _format(path, output_format, as_json)
    shaping = "--long" if long_form else f"-{index[0]}" if index else None
    if fmt != "console" and shaping:
        raise UsageError(f"{shaping} shapes the console form, not {fmt}: leave it out or write the console "
                         "form (--of console)")
    if long_form and index:
        raise UsageError(f"--long shows both P# and L#: leave out -{index[0]}")
    if path is not None:
        check_output(path, force)  # a file that may not be written fails before the machine is read
    wanted = tuple(p.strip() for p in probes.split(",") if p.strip()) if probes else None
    topology = machine.load(include_disallowed=include_disallowed, probes=wanted)
    # the I/O objects lstopo shows with the same flags, in every format
    topology = topology.io_view(io or "important", bridges=not no_bridges)
    text = _render(topology, fmt, index or "default", long_form)
    if path is not None:
        write_text(path, text, force)
    else:
        # One write: json.dumps() output written in one call, not thousands of small chunks, each a
        # syscall when stdout is unbuffered (PYTHONUNBUFFERED=1, as under many job launchers).
        sys.stdout.write(text)
        sys.stdout.flush()


def _format(path: str | None, output_format: str | None, as_json: bool) -> str:
    """The output format: --of, else --json, else the file's extension, else console."""
    if as_json and path is not None:
        raise UsageError(f"--json prints to stdout and {path} is a file to write: give one of them "
                         "(FILE.json, or --of json FILE, writes the JSON)")
    if as_json:
        if output_format is not None and FORMAT_ALIASES.get(output_format, output_format) != "json":
            raise UsageError(f"--json and --of {output_format} ask for two formats: give one of them")
        return "json"
    if output_format is not None:
        return FORMAT_ALIASES.get(output_format.lower(), output_format.lower())
    if path is None:
        return "console"
    suffix = os.path.splitext(path)[1].lower()
    for fmt, suffixes in FORMATS.items():
        if suffix in suffixes:
            return fmt
    endings = ", ".join(s for suffixes in FORMATS.values() for s in suffixes)
    raise UsageError(f"{path}: unknown format {suffix or '(no extension)'!r}; name the file {endings}, "
                     f"or give --of {'|'.join(FORMATS)}")


def _render(topology, fmt: str, index: str, long_form: bool) -> str:
    if fmt == "json":
        import json

        return json.dumps(topology.to_dict(), indent=2) + "\n"
    if fmt == "svg":
        from topo.views.svg import draw_svg

        return draw_svg(topology)
    if fmt == "html":
        from topo.views.html import draw_html

        return draw_html(topology)
    if fmt == "xml":
        from topo.views.hwloc_xml import to_xml

        return to_xml(topology)
    from topo.views.console import Options, render_console, render_text

    return (render_text(topology) if long_form else render_console(topology, Options(index=index))) + "\n"
