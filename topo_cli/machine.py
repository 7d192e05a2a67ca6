"""Where the machine comes from (`machine_options`), declared once for every command that reads
one, and where a command's output file goes (`write_text`). A file named on the command line wins
over `TOPO_ROOT` from the environment; --root and --topology both on the command line are refused."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import click
from click.core import ParameterSource

from topo.errors import ProbeError, UsageError
from topo.fsroot import file_kind

# "1": run the live-only probes (NVML, npu-smi, lscpu) below a --root that is not "/", with
# stand-in tools (a fake pynvml, a fake npu-smi on PATH): a captured machine replayed
REPLAY_ENV = "TOPO_REPLAY_LIVE_PROBES"


def machine_options(func):
    """Add --root and --topology/--from to a command; it receives `machine` (a MachineSource)."""
    @click.option("--root", "root", envvar="TOPO_ROOT", metavar="DIR",
                  help="Read DIR/sys and DIR/proc instead of /sys and /proc (like HWLOC_FSROOT). Env: TOPO_ROOT.")
    @click.option("--topology", "--from", "topology_file", type=click.Path(dir_okay=False), metavar="FILE",
                  help="Read the machine from FILE: the output of `topo show --json` or an hwloc XML export "
                       "(`lstopo --of xml FILE`).")
    @click.pass_context
    @functools.wraps(func)
    def wrapper(ctx, root, topology_file, **kwargs):
        if topology_file is not None and root is not None:
            if ctx.get_parameter_source("root") == ParameterSource.COMMANDLINE:
                raise UsageError("--root DIR and --topology FILE both name a machine: give one of them")
            root = None  # TOPO_ROOT from the environment yields to a file named on the command line
        return func(machine=MachineSource(root, topology_file), **kwargs)

    return wrapper


@dataclass(frozen=True)
class MachineSource:
    """The machine a command works on: `root` (a directory, or None for this machine) or `file`."""
    root: str | None
    file: str | None

    def load(self, *, include_disallowed: bool = False, probes=None):
        """The Topology of the file, else discovered below the root (this machine by default). A file or root the user
        named that cannot be read is bad input (exit 2); this machine's own /sys or /proc a runtime failure (exit 1)."""
        try:
            if self.file is not None:
                from topo.loader import load_topology

                return load_topology(self.file)
            from topo.discovery import discover

            return discover(self.root, include_disallowed=include_disallowed, probes=probes,
                            live_probes=os.environ.get(REPLAY_ENV) == "1")
        except ProbeError as exc:
            if self.file is not None or self.root is not None:
                exc.exit_code = 2
            raise


STDOUT_NAMES = ("-", "/dev/stdout")  # output names that mean standard output, as for lstopo


def check_output(path: str, force: bool = False) -> None:
    """Refuse an output file before any work is done: one in a missing directory, one that is not a regular file or
    a link (a FIFO would block the writer), one that exists unless `force` (lstopo's "File exists" unless -f)."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {path}: no directory {directory}; name a file in a directory that exists")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}; name a file in a directory you can write") from exc
    kind = file_kind(mode)
    if kind is not None:
        raise UsageError(f"cannot write {path}: it is {kind}, not a regular file; name a file to write")
    if not force:
        raise UsageError(f"cannot write {path}: File exists; give -f/--force to overwrite it")


def write_text(path: str, text: str, force: bool = False) -> None:
    """Write a command's output file whole or not at all (launcher.files.write_whole), never over a file that
    appeared since check_output unless `force`; the directory must exist, as lstopo's output file's must."""
    from topo.launcher.files import write_whole

    check_output(path, force)
    try:
        write_whole(path, text, replace=force)
    except FileExistsError:
        raise UsageError(f"cannot write {path}: File exists; give -f/--force to overwrite it") from None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}; name a file in a directory you can write") from exc
