"""launch(): `topo launch`'s plan (launcher.job) run by execute(), the one executor of any plan,
restarts included: per attempt a ProcessGroup starts, signals and reaps the processes, and a
Supervisor checks their bindings, records them in launch.json, follows them and reports."""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from dataclasses import replace
from typing import Callable, Sequence, TextIO

from topo.launcher.config import LaunchConfig
from topo.launcher.environ import describe_threads
from topo.launcher.files import LAUNCH_JSON, check_not_running
from topo.launcher.job import SCHEDULER, check_program, describe_plan, plan_job
from topo.launcher.plan import Plan
from topo.launcher.procgroup import LaunchError, Process, ProcessGroup, check_open_file_limit
from topo.launcher.supervisor import HANDLED_SIGNALS, LaunchResult, StopSignals, Supervisor, describe_code

INTERRUPT_GRACE = 1.0  # s between forwarding a Ctrl-C (SIGINT) to the job and SIGKILL: msrun returns at once

__all__ = ["LaunchError", "LaunchResult", "execute", "launch"]


def launch(config: LaunchConfig, *, topology=None, environ=None, out: TextIO | None = None,
           err: TextIO | None = None) -> LaunchResult:
    """Plan and run `config`: with join=True until the job is over (exit_code as the launcher's), else
    until every process is started and checked; `out` gets the tailed logs and dry-run text, `err` the
    launcher's messages. UsageError before anything starts, LaunchError when a started process could not
    be bound. Under join the processes die with the calling thread: call it from one as long-lived."""
    out, err = out or sys.stdout, err or sys.stderr
    plan = plan_job(config, environ=environ, topology=topology)
    check_program(plan, config)
    if config.dry_run:
        print(describe_plan(plan), file=out)
        return LaunchResult(0, plan=plan)

    def say(text: str) -> None:
        print(f"topo launch: {text}", file=err, flush=True)

    def started(proc: Process) -> None:
        how = f" (binding applied directly: {proc.binding.note})" if proc.binding.direct else ""
        say(f"started {proc.name} (pid {proc.pid}), log {proc.spec.log_path}: {' '.join(proc.argv)}{how}")

    check_not_running(plan.log_dir, config.log_dir or ".")
    outcome = execute(plan, join=config.join, grace_period=config.grace_period, bind_fallback=config.bind_fallback,
                      out=out, say=say, prepare=_create_logs, scheduler_role=SCHEDULER,
                      interrupt_grace=INTERRUPT_GRACE, on_start=started)
    if outcome.running:
        say(f"{len(outcome.processes)} processes left running (--join=False); the job is recorded in "
            f"{os.path.join(plan.log_dir, LAUNCH_JSON)}; stop it with: topo stop {plan.log_dir}")
    return replace(outcome, plan=plan)


def execute(plan: Plan, *, join: bool, grace_period: float, bind_fallback: bool, out: TextIO,
            say: Callable[[str], None], err: TextIO | None = None, handled: Sequence[int] = HANDLED_SIGNALS,
            prepare: Callable[[Plan], Plan] | None = None, scheduler_role: str | None = None,
            interrupt_grace: float | None = None, on_start: Callable[[Process], None] | None = None) -> LaunchResult:
    """Run any plan: say its warnings, `prepare` it (make its directories), then run attempts until one
    does not fail, up to max_restarts restarts (not join: the first is left running). A `handled` signal
    received at any moment (not join: until started) ends the run and stops what it started."""
    check_open_file_limit()
    for warning in plan.warnings:
        say(f"warning: {warning}")
    procs = plan.processes
    threads = describe_threads([p.name for p in procs], [p.binding for p in procs], [p.env for p in procs])
    if threads:
        say(threads)
    plan = prepare(plan) if prepare is not None else plan
    signals = StopSignals()  # not join: caught while starting, so a stop signal stops what started
    signals.install(handled)
    try:
        for restart in itertools.count():
            specs, record_dir = ((plan.processes, plan.log_dir) if plan.attempt is None
                                 else plan.attempt(restart, plan.log_dir))
            group = ProcessGroup(specs, plan.base_env, job_id=uuid.uuid4().hex, join=join)
            supervisor = Supervisor(group=group, record_dir=record_dir, grace_period=grace_period,
                                    bind_fallback=bind_fallback, out=out, err=err, say=say, signals=signals,
                                    scheduler_role=scheduler_role, interrupt_grace=interrupt_grace)
            outcome = replace(supervisor.run(on_start), restarts=restart, signal=signals.received)
            first = outcome.failed_process
            if first is None or signals.received is not None or restart >= plan.max_restarts:
                return outcome
            say(f"[{first.spec.role}] worker group failed (rank {first.spec.rank}: "
                f"{describe_code(first.popen.returncode)}); restarting it, {plan.max_restarts - restart} of "
                f"{plan.max_restarts} restarts left")
            if signals.received is not None:  # it came while that was said: still no further attempt
                return replace(outcome, signal=signals.received)
    finally:
        signals.restore()


def _create_logs(plan: Plan) -> Plan:
    """The log directory (private, 0700, as msrun makes it) and its subdirectories; a previous job's
    logs there (plan_job vetted each as topo's) removed, so each is created anew (O_EXCL) as it starts."""
    try:
        if not os.path.isdir(plan.log_dir):
            old = os.umask(0o077)
            try:
                os.makedirs(plan.log_dir, mode=0o700, exist_ok=True)
            finally:
                os.umask(old)
        for p in plan.processes:  # --worker_log_name=sub/w: msrun crashes half-way, we create sub/
            os.makedirs(os.path.dirname(p.log_path), exist_ok=True)
            if os.path.lexists(p.log_path):
                os.unlink(p.log_path)
    except OSError as exc:
        raise LaunchError(f"cannot create the logs, {exc.filename}: {exc.strerror}; "
                          "give a writable --log_dir") from None
    return plan
