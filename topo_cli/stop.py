"""`topo stop`: stop a job `topo launch` or `topo run` started, from the launch.json of its log directory."""

from __future__ import annotations

import sys

import click

from topo_cli import CONTEXT
from topo_cli.numbers import SECONDS


@click.command(context_settings=CONTEXT)
@click.argument("log_dir", metavar="LOG_DIR")
@click.option("--grace-period", "--grace_period", "grace_period", type=SECONDS, default=None,
              help="Seconds between SIGTERM and SIGKILL [default: the job's own --grace-period].")
def stop(log_dir, grace_period):
    """Stop the job whose launch.json is in LOG_DIR (for topo run, in LOG_DIR/<run>/attempt_<n>/):
    SIGTERM to every process it started and to whatever they started (daemons included), SIGKILL
    after the grace period.

    A pid is signalled only while it still names the process that was started (its start time is
    checked), so a pid the system has given to another program since is left alone.

    \b
    Examples:
      topo launch --worker_num=8 --local_worker_num=8 --log_dir=logs net.py   # detached: --join=False
      topo stop logs
      topo stop --grace-period=30 logs
    """
    from launcher.stop import stop_job

    report = stop_job(log_dir, grace_period=grace_period,
                      say=lambda text: click.echo(f"topo stop: {text}", err=True))
    sys.exit(report.exit_code)
