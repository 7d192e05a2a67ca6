"""launch(): plan a job, start it as one process group, check its bindings, follow it and clean up;
execute(): the one executor, which runs any plan (launcher.plan: `topo launch`'s, `topo run`'s),
its restarts included.

    plan_job (launcher.job)       config -> every process's argv, environment, log, binding; all checks
    ProcessGroup (procgroup)      start, signal, stop with a grace period, reap; no orphans
    Supervisor (supervisor)       verify bindings, join, report, launch.json

Logs are written by the children themselves (stdout and stderr both on the log file); under
--join=True the launcher copies them to the console (no `tail -f` children that could outlive it).
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from dataclasses import dataclass
from typing import Callable, Sequence, TextIO

from topo.launcher.config import LaunchConfig
from topo.launcher.environ import describe_threads
from topo.launcher.files import LAUNCH_JSON, check_not_running, open_log
from topo.launcher.job import SCHEDULER, check_program, describe_plan, plan_job
from topo.launcher.plan import Plan
from topo.launcher.procgroup import LaunchError, Process, ProcessGroup, check_open_file_limit
from topo.launcher.supervisor import (HANDLED_SIGNALS, JobResult, StopSignals, Supervisor, describe_code,
                                 write_launch_json)

# seconds between forwarding a Ctrl-C (SIGINT) to the job and SIGKILL: msrun returns at once
INTERRUPT_GRACE = 1.0

__all__ = ["LaunchError", "LaunchResult", "execute", "launch"]


@dataclass(frozen=True)
class LaunchResult:
    """How a `topo launch` job ended (or, with join=False, was left running)."""

    exit_code: int
    plan: Plan
    processes: tuple[Process, ...] = ()  # empty for a dry run
    failed: str | None = None  # "rank 1 exited with code 3", "received SIGTERM", ...


def launch(config: LaunchConfig, *, topology=None, environ=None, out: TextIO | None = None,
           err: TextIO | None = None) -> LaunchResult:
    """Plan and run `config`. With join=True, return when the job is over (exit_code as the
    launcher's); with join=False, return once every process is started and checked.

    `out` gets the tailed logs and the dry-run text, `err` the launcher's own messages
    (defaults: sys.stdout, sys.stderr). Raises UsageError before creating or starting anything
    when the job cannot run as asked, LaunchError when a started process could not be bound.
    Under join=True the processes die with the thread that called launch(): call it from a
    thread that lives as long as the job (the main thread, for a command-line tool).
    """
    out = out or sys.stdout
    err = err or sys.stderr
    plan = plan_job(config, environ=environ, topology=topology)
    check_program(plan)
    if config.dry_run:
        print(describe_plan(plan), file=out)
        return LaunchResult(0, plan)
    check_open_file_limit()

    def say(text: str) -> None:
        print(f"topo launch: {text}", file=err, flush=True)

    check_not_running(plan.log_dir, config.log_dir or ".")
    for warning in plan.warnings:
        say(f"warning: {warning}")
    threads = describe_threads([p.name for p in plan.processes], [p.binding for p in plan.processes],
                               [p.env for p in plan.processes])
    if threads:
        say(threads)
    _create_logs(plan)
    group, result, _, _ = execute(
        plan, join=config.join, grace_period=config.grace_period, bind_fallback=config.bind_fallback, out=out,
        say=say, scheduler_role=SCHEDULER, interrupt_grace=INTERRUPT_GRACE, on_start=lambda p: say(_started(p)))
    if result is None:
        say(f"{len(group.processes)} processes left running (--join=False); the job is recorded in "
            f"{os.path.join(plan.log_dir, LAUNCH_JSON)}; stop it with: topo stop {plan.log_dir}")
        return LaunchResult(0, plan, tuple(group.processes))
    return LaunchResult(result.exit_code, plan, result.processes, result.failed)


def execute(plan: Plan, *, join: bool, grace_period: float, bind_fallback: bool, out: TextIO,
            say: Callable[[str], None], err: TextIO | None = None, handled: Sequence[int] = HANDLED_SIGNALS,
            scheduler_role: str | None = None, interrupt_grace: float | None = None,
            on_start: Callable[[Process], None] | None = None
            ) -> tuple[ProcessGroup, JobResult | None, int, int | None]:
    """Run any plan: start an attempt's processes as one group, check their bindings, record it in
    its directory's launch.json, then (join) follow it to its end; after a failure start the plan's
    next attempt, up to max_restarts times. Not join: the first attempt is left running (result
    None). Returns (the last attempt's group, its result, the restarts made, the stop signal
    received or None). `handled` signals are caught from the first start to the end (join only):
    one received at any moment, also while a failed attempt stops or between two, ends the run.
    Whatever goes wrong, nothing started outlives it under join."""
    signals = StopSignals()
    if join:
        signals.install(handled)
    restart = 0
    try:
        while True:
            specs, record_dir = (plan.processes, plan.log_dir) if plan.attempt is None else plan.attempt(restart,
                                                                                                          plan.log_dir)
            group, result = _run_once(specs, plan.base_env, record_dir, join, grace_period, bind_fallback, out, err,
                                      say, signals, scheduler_role, interrupt_grace, on_start)
            first = result.failed_process if result is not None else None
            if first is None or signals.received is not None or restart >= plan.max_restarts:
                return group, result, restart, signals.received
            say(f"[{first.spec.role}] worker group failed (rank {first.spec.rank}: "
                f"{describe_code(first.popen.returncode)}); restarting it, {plan.max_restarts - restart} of "
                f"{plan.max_restarts} restarts left")
            if signals.received is not None:  # it came while that was said: still no further attempt
                return group, result, restart, signals.received
            restart += 1
    finally:
        signals.restore()


def _run_once(specs, base_env, record_dir, join, grace_period, bind_fallback, out, err, say, signals,
              scheduler_role, interrupt_grace, on_start) -> tuple[ProcessGroup, JobResult | None]:
    group = ProcessGroup(specs, base_env, job_id=uuid.uuid4().hex, inherit_stdin=join, die_with_launcher=join,
                         adopt_orphans=join)
    record_path = os.path.join(record_dir, LAUNCH_JSON)

    def write_record(start_times: bool) -> None:
        write_launch_json(record_path, group, join=join, log_dir=record_dir, grace_period=grace_period,
                          start_times=start_times)

    # under --join the start times are recorded once the job has run a second (a short job does
    # not pay for importing psutil); a detached job's record is complete at once
    supervisor = Supervisor(group, grace_period=grace_period, bind_fallback=bind_fallback, out=out, err=err,
                            say=say, scheduler_role=scheduler_role, after_a_second=lambda: write_record(True),
                            signals=signals, interrupt_grace=interrupt_grace)
    try:
        group.start(on_start=on_start)
        supervisor.verify_all()
        write_record(start_times=not join)
        if not join:
            return group, None
        return group, supervisor.join()
    except BaseException:
        # whatever went wrong in here (a refused binding, a broken console, an interrupt in a
        # host program), nothing we started may outlive it
        group.stop(signal.SIGTERM, grace_period, say=say)
        raise
    finally:
        if join:
            group.close()


def _started(proc: Process) -> str:
    how = f" (binding applied directly: {proc.binding.note})" if proc.binding.direct else ""
    return f"started {proc.name} (pid {proc.pid}), log {proc.spec.log_path}: {' '.join(proc.argv)}{how}"


def _create_logs(plan: Plan) -> None:
    """The log directory (private, 0700, as msrun makes it) and every log file, before any
    process starts: a failure here leaves nothing running."""
    try:
        if not os.path.isdir(plan.log_dir):
            old = os.umask(0o077)
            try:
                os.makedirs(plan.log_dir, mode=0o700, exist_ok=True)
            finally:
                os.umask(old)
        for p in plan.processes:  # --worker_log_name=sub/w: msrun crashes half-way, we create sub/
            os.makedirs(os.path.dirname(p.log_path), exist_ok=True)
            open_log(p.log_path).close()
    except OSError as exc:
        raise LaunchError(f"cannot create the logs, {exc.filename}: {exc.strerror}; "
                          "give a writable --log_dir") from None
