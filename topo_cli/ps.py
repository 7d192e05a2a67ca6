"""`topo ps`: where running processes' threads and pages really are (launcher.ps)."""

from __future__ import annotations

import json
import os
import sys

import click

from topo.cli import CONTEXT
from topo.cpuset import excerpt
from topo.errors import UsageError
from topo.launcher import ps as psmod
from topo.launcher.files import PID_MAX, read_record
from topo.numbers import ascii_number


@click.command(context_settings=CONTEXT)
@click.argument("pids", nargs=-1, metavar="[PID]...")
@click.option("--job", "log_dir", metavar="LOG_DIR", help="The processes of the job topo launch or topo run recorded "
              "in LOG_DIR (each checked as topo stop checks it: the job's TOPO_JOB_ID and its recorded start time).")
@click.option("--threads", is_flag=True, help="List every thread: its state and the CPU it last ran on.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object, schema topo.ps/1.")
@click.option("--root", default="/", metavar="DIR", show_default=True,
              help="Read DIR/proc and DIR/sys (a copy of another machine's, or a test tree).")
def ps(pids, log_dir, threads, as_json, root):
    """Show where processes really run: per process its allowed CPUs, the CPUs its threads last ran on, its memory
    policy, its resident pages per NUMA node, the accelerators it has open and their node, and a verdict (pages
    remote from its device or allowed CPUs, threads outside its CPUs or on another listed process's, more runnable
    threads than CPUs).

    With PIDs: those processes; with --job LOG_DIR: a job topo started; alone: every process with an accelerator
    open (/dev/nvidiaN, /dev/davinciN, /dev/dri/renderDN, /dev/accel/accelN, or NVML's lists). A process that
    cannot be read is said to be so. Exit status 1 only when none of the PIDs given exists.

    \b
    Examples:
      topo ps                       # every process using a GPU or NPU
      topo ps 4242 4243 --threads
      topo ps --job logs            # a job started by topo launch --log_dir=logs
      python -m topo ps --json $$
    """
    if log_dir is not None and pids:
        raise UsageError("give PIDs or --job LOG_DIR, not both")
    numbers = [ascii_number(text, PID_MAX) for text in pids]
    for text, value in zip(pids, numbers):
        if not value:  # None or 0
            raise UsageError(f"PID {excerpt(text)!r} is not a process id from 1 to {PID_MAX}; give the pids "
                             "`ps` or `pgrep` prints")
    if not os.path.isdir(os.path.join(root, "proc")):
        raise UsageError(f"--root {root!r} has no proc directory; give a directory holding proc/ and sys/")
    labels, notes = _job(log_dir, root) if log_dir is not None else ({}, [])
    nvml = psmod.nvml_processes() if root == "/" else {}
    if log_dir is not None:
        numbers = list(labels)
    elif not numbers:
        numbers, hidden = psmod.accelerator_pids(root, nvml)
        if hidden:
            notes.append(f"{hidden} process(es) of other users could not be looked at; run as root to include them")
        if not numbers:
            notes.append("no process has an accelerator open")
    views = psmod.inspect(numbers, root=root, labels=labels, nvml=nvml) if numbers else []
    if as_json:
        click.echo(json.dumps(psmod.as_json(views, notes), indent=2))
    else:
        if views:
            click.echo(psmod.as_text(views, threads=threads))
        for note in notes:
            click.echo(f"topo ps: {note}", err=True)
    if pids and all(v.error is not None and v.error.startswith("exited") for v in views):
        sys.exit(1)


def _job(log_dir: str, root: str) -> tuple[dict[int, str], list[str]]:
    """The running processes of the job recorded in `log_dir` (pid -> label), and notes on the others."""
    import psutil

    from topo.launcher.stop import running

    record = read_record(log_dir, grace=False)
    psutil.PROCFS_PATH = os.path.join(root, "proc")  # topo stop's proof, against that root
    labels, seen = running(record)
    notes = [f"{text} has exited" for text in seen.gone]
    notes += [f"{text} still runs but is not provably the job's (no TOPO_JOB_ID={record.job_id} in its "
              "environment): not shown" for text in seen.unproven]
    notes += [f"{text} still runs, but its environment cannot be read (another user's process): not shown; "
              "run topo ps as the job's user or as root" for text in seen.unreadable]
    if not labels and not seen.unreadable:
        notes.append(f"the job recorded in {record.path} is not running")
    return labels, notes
