"""`topo capture`: this machine's topology files in one archive, for a bug report or to plan elsewhere."""

from __future__ import annotations

import click

from topo.capture import capture as write_capture
from topo.errors import UsageError

from topo.cli import CONTEXT


@click.command(context_settings=CONTEXT)
@click.argument("archive", metavar="FILE.tar.gz")
@click.option("--no-tools", is_flag=True, help="Do not run lscpu, nvidia-smi or npu-smi; store sysfs and procfs only.")
def capture(archive, no_tools):
    """Write the sysfs and procfs files topo reads, and the outputs of lscpu, `nvidia-smi topo -m` and `npu-smi
    info` where present, into one small archive (like hwloc-gather-topology). It holds no environment, command
    lines or keys. Attach it to a bug report; read it back with --root.

    \b
    Examples:
      topo capture machine.tar.gz
      topo show --root machine.tar.gz         # the captured machine
      topo plan --mode exclusive --root machine.tar.gz
    """
    if not archive.endswith((".tar.gz", ".tgz")):
        raise UsageError(f"{archive}: name the archive FILE.tar.gz (it is a gzip-compressed tar)")
    for note in write_capture(archive, run_tools=not no_tools):
        click.echo(f"topo: warning: not captured: {note}", err=True)
    click.echo(f"wrote {archive}; read it back with `topo show --root {archive}`")
