"""The `topo` command: a thin click layer over the library.

Subcommands live next to the code they drive (`planners.cli`, `launcher.cli`) and are imported only
when invoked, so `topo show` pays for neither. Errors are translated here, once: a TopoError
becomes one line on stderr and its exit code.
"""

from __future__ import annotations

import importlib
import json
import sys

import click

from topo.errors import TopoError

# name -> "module:attribute"; a command appears here only once it works.
SUBCOMMANDS: dict[str, str] = {
    "show": "topo.cli:show",
    "plan": "planners.cli:plan",
    "validate": "planners.cli:validate",
    "launch": "launcher.cli:launch",
    "bind": "launcher.cli:bind",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        target = SUBCOMMANDS.get(name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TopoError as exc:
            click.echo(f"topo: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="topo-affinity", message="topo %(version)s")
def main():
    """See this machine's hardware topology and plan where each process of a job runs."""


root_option = click.option(
    "--root", "root", envvar="TOPO_ROOT", type=click.Path(file_okay=False), default=None,
    help="Read DIR/sys and DIR/proc instead of /sys and /proc (like HWLOC_FSROOT). Env: TOPO_ROOT.",
)


@click.command()
@root_option
@click.option("--json", "as_json", is_flag=True, help="Print the topology as JSON (schema topo.topology/1).")
@click.option("--include-disallowed", is_flag=True,
              help="Also show CPUs and NUMA nodes the cgroup cpuset / affinity does not allow.")
@click.option("--probes", default=None, metavar="LIST",
              help="Comma-separated optional probes to run (e.g. nvml,npu-smi); default: all that apply.")
@click.option("--from", "from_file", type=click.Path(exists=True, dir_okay=False), default=None, metavar="FILE",
              help="Read the topology from FILE instead of probing: an hwloc XML export "
                   "(lstopo --of xml FILE) or the output of topo show --json.")
@click.pass_context
def show(ctx, root, as_json, include_disallowed, probes, from_file):
    """Show the topology: packages, NUMA nodes, caches, cores, PUs and devices."""
    if from_file is not None:
        from topo.errors import UsageError
        from topo.loader import load_topology

        if ctx.get_parameter_source("root") == click.core.ParameterSource.COMMANDLINE:
            raise UsageError("--from FILE and --root DIR both name a machine: give one of them")
        topology = load_topology(from_file)
    else:
        from topo.discovery import discover

        wanted = tuple(p.strip() for p in probes.split(",") if p.strip()) if probes else None
        topology = discover(root, include_disallowed=include_disallowed, probes=wanted)
    if as_json:
        # One write: json.dump() streams thousands of small chunks, each a syscall when stdout
        # is unbuffered (PYTHONUNBUFFERED=1, as under many job launchers).
        sys.stdout.write(json.dumps(topology.to_dict(), indent=2) + "\n")
    else:
        from topo.render import render_text

        click.echo(render_text(topology))


if __name__ == "__main__":  # pragma: no cover
    main()
