"""`topo stop`: stop a job `topo launch` or `topo run` started, from the launch.json of its log directory."""

from __future__ import annotations

import sys

import click

from topo.cli import CONTEXT
from topo.cli.numbers import SECONDS


@click.command(context_settings=CONTEXT)
@click.argument("log_dir", metavar="LOG_DIR")
@click.option("--grace-period", "--grace_period", "grace_period", type=SECONDS,
              help="Seconds between SIGTERM and SIGKILL [default: the job's own --grace-period].")
def stop(log_dir, grace_period):
    """Stop the job whose launch.json is in LOG_DIR (for topo run, in LOG_DIR/<run>/attempt_<n>/): SIGTERM to
    every process it started, daemons included, SIGKILL after the grace period.

    A process is signalled only when it is provably the job's (the job's TOPO_JOB_ID in its environment and, for
    a recorded pid, the recorded start time), and alone, never its session or process group: a forged or stale
    launch.json reaches nothing else. Exit status 0 when the job's processes are gone (a job that had ended is
    said to be not running); 1 when a process survived SIGKILL or a recorded process that still runs is not
    provably the job's.

    \b
    Examples:
      topo launch --worker_num=8 --local_worker_num=8 --log_dir=logs net.py   # detached: --join=False
      topo stop logs
      topo stop --grace-period=30 logs
    """
    from topo.launcher.stop import stop_job

    report = stop_job(log_dir, grace_period=grace_period, say=lambda text: click.echo(f"topo stop: {text}", err=True))
    sys.exit(report.exit_code)
