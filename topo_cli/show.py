"""`topo show`: the machine as a tree (like `lstopo -p`) or as JSON."""

from __future__ import annotations

import sys

import click

from topo_cli import CONTEXT
from topo_cli.machine import machine_options


@click.command(context_settings=CONTEXT)
@machine_options
@click.option("--json", "as_json", is_flag=True, help="Print the topology as JSON (schema topo.topology/1).")
@click.option("--include-disallowed", is_flag=True,
              help="Also show CPUs and NUMA nodes the cgroup cpuset / affinity does not allow.")
@click.option("--probes", default=None, metavar="LIST",
              help="Comma-separated optional probes to run (e.g. nvml,npu-smi); default: all that apply.")
def show(machine, as_json, include_disallowed, probes):
    """Show the topology: packages, NUMA nodes, caches, cores, PUs and devices.

    \b
    Examples:
      topo show                          # this machine, like lstopo -p
      topo show --json > machine.json    # save it; plan on it elsewhere with --topology
      topo show --root /tmp/captured     # a sysfs/procfs captured below a directory
      topo show --from machine.xml       # an hwloc XML export (lstopo --of xml)
    """
    wanted = tuple(p.strip() for p in probes.split(",") if p.strip()) if probes else None
    topology = machine.load(include_disallowed=include_disallowed, probes=wanted)
    if as_json:
        import json

        # One write: json.dump() streams thousands of small chunks, each a syscall when stdout
        # is unbuffered (PYTHONUNBUFFERED=1, as under many job launchers).
        sys.stdout.write(json.dumps(topology.to_dict(), indent=2) + "\n")
    else:
        from topo.render import render_text

        click.echo(render_text(topology))
