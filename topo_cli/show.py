"""`topo show`: the machine as lstopo prints it (with lstopo's options), in topo's long form, as
JSON, as hwloc XML, or drawn."""

from __future__ import annotations

import contextlib
import json
import os
import sys

import click

from topo.cpuset import CpuSet
from topo.errors import ParseError, UsageError
from topo.tree import parse_type

from topo.cli import CONTEXT
from topo.cli.machine import STDOUT_NAMES, MachineSource, check_output, machine_options, write_text

# --of FORMAT -> the file name endings that mean it (lstopo: the output format from the extension)
FORMATS = {"console": (".txt",), "json": (".json",), "svg": (".svg",), "html": (".html", ".htm"),
           "xml": (".xml",), "ascii": ()}
_CACHES = ("L1Cache", "L2Cache", "L3Cache", "L4Cache", "L5Cache", "L1iCache", "L2iCache", "L3iCache")
_NORMAL = ("Package", "Die", "Group", "Core", "MemCache", *_CACHES)
_GROUPS = {"all": (*_NORMAL, "io"), "cache": (*_CACHES, "MemCache"), "icache": _CACHES[5:], "io": ("io",)}


@click.command(context_settings=CONTEXT)
@machine_options
@click.argument("file", required=False, metavar="[FILE]")
@click.option("-i", "--input", "input_path", metavar="PATH", help="As lstopo -i: a directory or archive (as --root), "
              "a file (as --from) or a synthetic description (\"pack:2 core:4 pu:2\").")
@click.option("-o", "--output", metavar="FILE",
              help="Write to FILE (as the positional FILE) instead of stdout; '-' is stdout.")
@click.option("--of", "output_format", metavar="FORMAT", type=click.Choice([*FORMATS, "txt"], case_sensitive=False),
              help="Output format, as lstopo's --of: console (or txt), ascii (the tree drawn in text), json, svg, "
                   "html, xml (hwloc v2 XML, which lstopo -i FILE reads). Default: FILE's extension, else console.")
@click.option("-f", "--force", is_flag=True, help="Overwrite FILE if it exists (else refused, as lstopo).")
@click.option("-p", "--physical", "index", flag_value="physical", help="Show physical (OS) indexes P#, as lstopo -p.")
@click.option("-l", "--logical", "index", flag_value="logical", help="Show logical indexes L# only, as lstopo -l.")
@click.option("-v", "--verbose", count=True, help="Each object with its attributes, then the summary (lstopo -v).")
@click.option("-s", "--silent", count=True, help="Only the summary of levels (lstopo -s).")
@click.option("--only", metavar="TYPE", help="Only objects of TYPE (core, pu, numa, l3, pci, ...).")
@click.option("-c", "--cpuset", "cpuset", flag_value=1, default=0, help="Show each object's cpuset too.")
@click.option("-C", "--cpuset-only", "cpuset", flag_value=2, help="Show each object's cpuset only.")
@click.option("--taskset", is_flag=True, help="Cpusets in taskset's format (implies -c).")
@click.option("--no-caches", is_flag=True, help="No cache.")
@click.option("--no-icaches", is_flag=True, help="No instruction cache.")
@click.option("--no-smt", is_flag=True, help="No PU: one line per core.")
@click.option("--merge", is_flag=True, help="Leave out levels that bring no structure.")
@click.option("--filter", "filters", multiple=True, metavar="TYPE:KIND", help="TYPE (or all, cache, icache, io) "
              "kept by KIND: all, none, structure, important (lstopo --filter).")
@click.option("--restrict", metavar="CPUSET", help="Only CPUSET (0x000000ff) or 'binding' (this process's CPUs).")
@click.option("--distances", is_flag=True, help="Only the NUMA distance matrix.")
@click.option("--cpukinds", is_flag=True, help="Only the CPU kinds (lstopo --cpukinds): P/E, priority, big/little.")
@click.option("--long", "long_form", is_flag=True,
              help="topo's long form: every object on its own line with its P# and L#, the package model, devices "
                   "under their NUMA node, the device link matrix, a summary line and how each probe fared.")
@click.option("--no-io", "io", flag_value="none", help="No PCI function, bridge or OS device (lstopo --no-io).")
@click.option("--whole-io", "io", flag_value="whole", help="Every PCI function, bridge and OS device (lstopo "
              "--whole-io); by default those lstopo shows: storage, network, display, accelerators, bridges to them.")
@click.option("--no-bridges", is_flag=True, help="PCI functions without the bridges above them, as lstopo.")
@click.option("--no-collapse", is_flag=True, help="Each PCI function on its own line: lstopo shows runs of "
              "identical ones as one ('2 x { PCI 00:04.0-05.0 (Other) }').")
@click.option("--json", "as_json", is_flag=True, help="The topology as JSON (schema topo.topology/1), as --of json.")
@click.option("--include-disallowed", "--disallowed", is_flag=True,
              help="Also show CPUs and NUMA nodes the cgroup cpuset / affinity does not allow.")
@click.option("--probes", metavar="LIST",
              help="Comma-separated optional probes to run (e.g. nvml,npu-smi); default: all that apply.")
def show(machine, file, input_path, output, output_format, force, index, verbose, silent, only, cpuset, taskset,
         no_caches, no_icaches, no_smt, merge, filters, restrict, distances, cpukinds, long_form, io, no_bridges,
         no_collapse, as_json, include_disallowed, probes):
    """Show the topology: packages, NUMA nodes, caches, cores, PUs, as lstopo prints them.

    \b
    Examples:
      topo show                          # this machine, like lstopo-no-graphics
      topo show -p                       # physical (OS) indexes, like lstopo -p
      topo show --only core -c           # one line per core with its cpuset
      topo show --long                   # every object, devices, link matrix, summary
      topo show --json > machine.json    # save it; plan on it elsewhere with --topology
      topo show -i /tmp/captured         # a sysfs/procfs captured below a directory (--root)
      topo show -i machine.xml           # an hwloc XML export (lstopo --of xml), or --from
      topo show machine.svg              # a drawing (.html: with the summary and link matrix)
      topo show exported.xml             # hwloc v2 XML, for lstopo -i, hwloc-calc, hwloc-bind
    """
    if file is not None and output is not None:
        raise UsageError(f"FILE {file} and --output {output} both name the output file: give one of them")
    path = output if output is not None else file
    path = None if path in STDOUT_NAMES else path
    fmt = _format(path, output_format, as_json)
    index_flag = f"-{(index or 'x')[0]}"
    shaping = [name for name, given in (("--long", long_form), (index_flag, index), ("-v", verbose), ("-s", silent),
                                        ("--only", only), ("-c", cpuset), ("--taskset", taskset),
                                        ("--distances", distances), ("--cpukinds", cpukinds),
                                        ("--no-smt", no_smt)) if given]
    if fmt != "console" and shaping and not (fmt == "ascii" and shaping == [index_flag]):
        raise UsageError(f"{shaping[0]} shapes the console form, not {fmt}: leave it out or write the console "
                         "form (--of console)")
    if long_form and len(shaping) > 1:
        raise UsageError(f"--long is topo's own form: leave out {shaping[1]}")
    if path is not None:
        check_output(path, force)  # a file that may not be written fails before the machine is read
    options, io, no_bridges = _filters(filters, io, no_bridges, merge=merge, no_caches=no_caches,
                                       no_icaches=no_icaches, no_smt=no_smt)
    only = _type(only, "--only") if only else None
    topology = load(machine, input_path, include_disallowed=include_disallowed, probes=probes)
    from topo.numa_mode import locality_conflicts
    from topo.text import printable

    for line in locality_conflicts(topology):
        click.echo(printable(f"topo: warning: {line}"), err=True)
    topology = topology.io_view(io or "important", bridges=not no_bridges)  # lstopo's I/O objects, in every format
    restrict = _restriction(restrict, topology) if restrict else None
    # Each view is imported only for its format: the XML writer's xml.sax.saxutils alone costs about
    # 20 ms at start-up, a quarter of `topo show --json`.
    if fmt == "json":
        text = json.dumps(topology.to_dict(), indent=2) + "\n"
    elif fmt == "svg":
        from topo.views.svg import draw_svg
        text = draw_svg(topology)
    elif fmt == "html":
        from topo.views.html import draw_html
        text = draw_html(topology)
    elif fmt == "xml":
        from topo.views.hwloc_xml import to_xml
        text = to_xml(topology)
    elif fmt == "ascii":
        from topo.views.ascii import draw_ascii
        text = draw_ascii(topology, index or "default") + "\n"
    else:
        from topo.views import console
        options = console.Options(**options, index=index or "default", verbose=1 + verbose - silent,
                                  cpuset=cpuset or taskset, taskset=taskset, distances=distances, cpukinds=cpukinds,
                                  collapse=not no_collapse, only=only, restrict=restrict)
        text = console.render_text(topology) if long_form else console.render_console(topology, options)
        text = text + "\n" if text else ""
    if path is not None:
        write_text(path, text, force)
    else:
        # one write, not thousands of chunks each a syscall when stdout is unbuffered (PYTHONUNBUFFERED=1)
        sys.stdout.write(text)
        sys.stdout.flush()


def load(machine: MachineSource, input_path: str | None, *, probes: str | None = None, **kwargs):
    """The machine of --root/--from, or of lstopo's -i PATH: a directory or an archive is a root, a
    file starting as JSON or XML a saved topology, a path that does not exist a synthetic description.
    `probes`: --probes' comma-separated list."""
    kwargs["probes"] = tuple(p.strip() for p in probes.split(",") if p.strip()) if probes else None
    if input_path is None:
        return machine.load(**kwargs)
    if machine.root is not None or machine.file is not None:
        raise UsageError(f"-i {input_path} and --root/--from both name a machine: give one of them")
    if not os.path.lexists(input_path) and ":" in input_path:
        from topo.synthetic import synthetic

        return synthetic(input_path)
    head = b""
    if os.path.isfile(input_path):
        with open(input_path, "rb") as f:
            head = f.read(64).lstrip()[:1]
    source = MachineSource(None, input_path) if head in (b"{", b"<") else MachineSource(input_path, None)
    return source.load(**kwargs)


def _type(text: str, option: str) -> tuple:
    wanted = parse_type(text)
    if wanted is None:
        raise UsageError(f"{option} {text}: not a type; name one such as machine, package, die, group, l3, l2, "
                         "l1d, core, pu, numa, memcache, bridge, pci, os")
    return wanted


def _filters(filters, io, no_bridges, *, merge, no_caches, no_icaches, no_smt):
    """lstopo's type filters as the console form's options (drop, structure, no_smt) and the I/O
    view: --merge, --no-caches and --no-icaches first, then each --filter in order."""
    drop = set(_GROUPS["cache"]) if no_caches else set(_GROUPS["icache"]) if no_icaches else set()
    structure = set(_NORMAL) - drop if merge else set()
    for given in filters:
        name, _, kind = given.partition(":")
        kind = kind.lower() or "all"
        targets = _GROUPS.get(name.lower()) or (_type(name, "--filter")[0],)
        if kind not in ("all", "none", "structure", "important"):
            raise UsageError(f"--filter {given}: KIND must be all, none, structure or important")
        for target in targets:
            if target in ("io", "Bridge", "PCIDev", "OSDev") and kind != "structure":
                if target == "Bridge":
                    no_bridges = kind == "none"
                else:
                    io = {"none": "none", "all": "whole", "important": "important"}[kind]
            elif target == "PU":
                no_smt = no_smt or kind == "none"
            elif target in _NORMAL:  # Machine and NUMA nodes are always kept, as hwloc keeps them
                drop.discard(target), structure.discard(target)
                if kind == "none":
                    drop.add(target)
                elif kind == "structure" or target == "Group":  # a Group is never kept for itself
                    structure.add(target)
    return dict(drop=frozenset(drop), structure=frozenset(structure), no_smt=no_smt), io, no_bridges


def _restriction(text: str, topology):
    """--restrict's CPUs: an hwloc bitmap, or `binding` (this process's CPUs)."""
    from topo.probes.hwloc_xml import parse_bitmap

    if text == "binding":
        cpus = CpuSet(os.sched_getaffinity(0))
    else:
        cpus = None
        with contextlib.suppress(ParseError):
            cpus = None if text.startswith("nodeset=") else parse_bitmap(text)
        if cpus is None:
            raise UsageError(f"--restrict {text}: not a cpuset; give an hwloc bitmap such as 0x000000ff, or binding")
    if not cpus & topology.allowed_pus:
        raise UsageError(f"--restrict {text}: none of these CPUs is in the machine's allowed CPUs "
                         f"{topology.allowed_pus.to_list()}")
    return cpus


def _format(path: str | None, output_format: str | None, as_json: bool) -> str:
    """The output format: --of, else --json, else the file's extension, else console."""
    if as_json and path is not None:
        raise UsageError(f"--json prints to stdout and {path} is a file to write: give one of them "
                         "(FILE.json, or --of json FILE, writes the JSON)")
    fmt = "console" if output_format == "txt" else output_format  # click's Choice gives it in lower case
    if as_json and fmt not in (None, "json"):
        raise UsageError(f"--json and --of {output_format} ask for two formats: give one of them")
    if as_json:
        return "json"
    if fmt is not None or path is None:
        return fmt or "console"
    suffix = os.path.splitext(path)[1].lower()
    for fmt, suffixes in FORMATS.items():
        if suffix in suffixes:
            return fmt
    endings = ", ".join(s for suffixes in FORMATS.values() for s in suffixes)
    raise UsageError(f"{path}: unknown format {suffix or '(no extension)'!r}; name the file {endings}, "
                     f"or give --of {'|'.join(FORMATS)}")
