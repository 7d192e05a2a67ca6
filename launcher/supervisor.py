"""The supervisor of one attempt of a job: start its process group, check each binding in /proc,
record the job in launch.json, follow it to its end (tailing logs, stopping everything when one
process fails or a signal arrives) and report. It decides *when* to stop; the group knows *how*."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence, TextIO

from topo.binding import observe
from topo.cpuset import CpuSet
from topo.launcher import verify
from topo.launcher.binding import UNBOUND, held_words
from topo.launcher.files import LAUNCH_JSON, SCHEMA, write_record
from topo.launcher.plan import Plan
from topo.launcher.procgroup import INHERIT, POLL_INTERVAL, LaunchError, Process, ProcessGroup
from topo.launcher.tail import LogTailer

MAX_POLL_INTERVAL = 0.1  # s; the join loop backs off to this, so a day-long job costs no CPU
EXEC_TIMEOUT = 5.0  # s for numactl / taskset to apply a binding and exec the interpreter
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class LaunchResult:
    """How a job ended, or that it was left running (join=False)."""

    exit_code: int
    processes: tuple[Process, ...] = ()  # empty for a dry run
    failed: str | None = None  # "rank 1 exited with exit code 3", "received SIGTERM", ...
    failed_process: Process | None = None  # the first process seen failing, whose code exit_code is
    restarts: int = 0  # attempts started again after a failure
    signal: int | None = None  # the stop signal received, if one was
    running: bool = False  # left running: not joined
    plan: Plan | None = None  # what `topo launch` ran


@dataclass
class StopSignals:
    """The stop signals, caught from install() to restore() on the main thread only (a library caller
    on another handles its own). The first received is kept; a second one skips the grace period."""

    received: int | None = None
    force: bool = False
    _old: dict[int, object] = field(default_factory=dict)

    def install(self, signals: Sequence[int] = HANDLED_SIGNALS) -> None:
        for sig in signals if threading.current_thread() is threading.main_thread() else ():
            self._old[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self.received is not None:
            self.force = True
        else:
            self.received = signum

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()


@dataclass(kw_only=True)
class Supervisor:
    """Runs one ProcessGroup: `run()` starts, checks and records it in `record_dir`, then with
    `join` follows it to its end. `say` prints the launcher's own messages."""

    group: ProcessGroup
    record_dir: str
    grace_period: float
    bind_fallback: bool
    out: TextIO
    say: Callable[[str], None]
    err: TextIO | None = None  # where a separate stderr log is copied; None: `out`
    signals: StopSignals = field(default_factory=StopSignals)
    scheduler_role: str | None = None  # a process whose end is awaited after the workers'
    interrupt_grace: float | None = None  # after a SIGINT, when shorter (msrun: Ctrl-C returns at once)

    def run(self, on_start: Callable[[Process], None] | None = None) -> LaunchResult:
        """Start the group, check its bindings, record it, then follow it (join) or leave it running."""
        group, signals = self.group, self.signals

        def started(proc: Process) -> None:
            # recorded after 1, 2, 4, ... starts (linear in all): `topo stop` finds one started since by the job id
            if len(group.processes) & (len(group.processes) - 1) == 0:
                self.record(start_times=False)
            if on_start is not None:
                on_start(proc)

        try:
            self.record(start_times=False)  # the job id is on record before the first process starts
            group.start(on_start=started, stopping=lambda: signals.received is not None)
            if signals.received is None:
                self.verify_all()
            self.record(start_times=not group.join)  # a --join job's once it has run a second
            if group.join:
                return self.join()
            if signals.received is not None:
                self.say(f"received {signal.Signals(signals.received).name} while starting; stopping the "
                         f"{len(group.processes)} started process(es)")
                group.stop(signals.received, self.grace_period, say=self.say)
            return _result(group.processes, signals.received, running=True)
        except BaseException:
            # a refused binding, a broken console, an interrupt in a host program: nothing we started may outlive it
            group.stop(signal.SIGTERM, self.grace_period, say=self.say)
            raise
        finally:
            group.close()

    def record(self, start_times: bool) -> None:
        """The job's launch.json: what `topo stop` needs (pids, the job id its processes carry, with
        `start_times` each pid's, so a reused pid is never signalled) and what each process was asked and got."""
        group = self.group
        for proc in group.processes if start_times else ():
            proc.create_time = _create_time(proc.pid)
        logs = [path for spec in group.specs for path in (spec.log_path, spec.stderr_path)
                if path not in (None, INHERIT, os.devnull)]
        data = {"schema": SCHEMA, "job_id": group.job_id, "launcher_pid": os.getpid(),
                "launcher_create_time": _create_time(os.getpid()) if start_times else None, "join": group.join,
                "grace_period": self.grace_period, "log_dir": self.record_dir, "logs": logs,
                "processes": [process_record(p) for p in group.processes]}
        # written whole: `topo stop` never reads half a file
        write_record(os.path.join(self.record_dir, LAUNCH_JSON), json.dumps(data, indent=2) + "\n")

    def verify_all(self) -> None:
        """Compare each process's binding with /proc: LaunchError for the first problem that
        --bind-fallback does not solve."""
        problems = []
        for i, proc in enumerate(self.group.processes):
            problem = self._verify(proc)
            while problem is not None and self.bind_fallback:
                proc, problem = self._fall_back(i, proc, *problem)
            if problem is None:
                self.say(report(proc))
            else:
                problems.append(problem[0])
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise LaunchError(problems[0] + more)

    def _fall_back(self, index: int, proc: Process, problem: str, memory_refused: bool):
        """--bind-fallback: a process running bound otherwise is kept; one refused before it ran starts
        again with less (a policy its tool could not set: by system calls; one the kernel refused: one
        rung down, bind, preferred, CPUs alone; anything else: unbound). Returns it and its problem."""
        if proc.popen.poll() is None:
            self.say(f"{problem}; --bind-fallback: keeping it as the kernel placed it")
            proc.status = "bound differently, kept (--bind-fallback)"
            return proc, None
        binding = proc.binding
        if memory_refused and not binding.direct:
            binding = replace(binding, applied_by="system calls", note=f"{binding.applied_by} was refused")
            then = "starting it again with the policy ladder (bind, preferred, CPUs alone)"
        elif memory_refused and binding.memory_policy is not None:
            binding = binding.relaxed()
            then = f"starting it again bound to {binding.describe()}"
        else:
            binding, then = UNBOUND, "running it unbound"
        self.say(f"{problem}; --bind-fallback: {then}")
        proc = self.group.processes[index] = self.group.start_one(proc.spec, binding, log_mode="a")
        problem = self._verify(proc)
        if not binding.is_bound:
            proc.status = "unbound (--bind-fallback)"
        return proc, problem

    def _verify(self, proc: Process) -> tuple[str, bool] | None:
        """None when `proc` is fine, else a message naming the problem and the fix, and whether it was
        the memory binding the kernel refused."""
        spec, binding = proc.spec, proc.binding
        if not binding.is_bound:
            proc.observed = observe(proc.pid, numa_maps=False)
            proc.status = "not bound"
            return None
        reached = verify.wait_for_exec(proc.pid, (proc.argv[:len(proc.argv) - len(spec.command)],), EXEC_TIMEOUT)
        proc.observed = observe(proc.pid)  # a zombie still shows its last affinity
        how = f"verified, applied directly: {binding.note}" if binding.direct else "verified"
        if not reached:
            code = proc.popen.poll()
            refusal = verify.refusal_in(read_log(spec.log_path, start=proc.log_start))
            who = "the kernel" if binding.direct else binding.applied_by
            if refusal:
                memory = "mempolicy" in refusal or "mbind" in refusal
                if self.bind_fallback:
                    fix = ""
                elif memory:
                    fix = ("; drop the memory binding (bind_memory_mode \"none\", or no --bind_numa) or grant the "
                           "container CAP_SYS_NICE, or rerun with --bind-fallback to keep only the CPU binding")
                else:
                    fix = "; bind only CPUs this container may use (see `topo show`), or rerun with --bind-fallback"
                return f"{spec.name}: {who} refused the binding ({refusal}){fix}", memory
            if code is None:
                return (f"{spec.name}: {who} did not exec the interpreter within {EXEC_TIMEOUT:.0f} s; "
                        f"is {who} on PATH the real one?"), False
            proc.status = f"exited with {describe_code(code)} before it could be checked"
            return None  # a failure is reported by the join loop like any other
        if proc.observed is None:
            proc.status = "exited before it could be checked"
            return None
        problem = verify.mismatch(binding, proc.observed)
        if problem and verify.changed_after_start(binding, proc.observed, CpuSet(os.sched_getaffinity(0))):
            # applied before the program ran: the program, or another tool, changed it since
            self.say(f"{spec.name}: bound to {binding.describe()}; it now runs with {proc.observed.describe()}: "
                     "changed after start (by the process itself or another tool); the job goes on")
            proc.status = f"{how}; changed after start"
            return None
        if problem:
            fix = "" if self.bind_fallback else ("; the cgroup or another tool restricts this process: bind within "
                                                 "`topo show`'s allowed CPUs / nodes, or rerun with --bind-fallback")
            return f"{spec.name}: binding did not take: {problem}{fix}", False
        asked = spec.binding.memory_policy
        if binding.memory_policy != asked:
            how += f"; memory policy {asked} refused, {held_words(binding)} (--bind-fallback)"
        proc.status = how
        return None

    def join(self) -> LaunchResult:
        """Follow the job until every process ended, one failed, or a signal came; then stop whatever
        is left (the rest of the job, or daemons it left) and report."""
        procs, err = self.group.processes, self.err or self.out
        tailer = LogTailer([(p.spec.tail_prefix if p.spec.tail_prefix is not None else f"[{p.name}] ", path, stream)
                            for p in procs if p.spec.tail
                            for path, stream in ((p.spec.log_path, self.out), (p.spec.stderr_path, err))
                            if path and path != INHERIT])
        workers = [p for p in procs if p.spec.role != self.scheduler_role]
        failed, waiting_for_scheduler = None, False
        delay, started = POLL_INTERVAL, time.monotonic()
        try:
            while self.signals.received is None:
                codes = [p.popen.poll() for p in procs]
                failed = next((p for p, c in zip(procs, codes) if c not in (None, 0)), None)
                if failed is not None or None not in codes:
                    break
                if (self.scheduler_role and not waiting_for_scheduler and len(workers) < len(procs)
                        and all(p.popen.poll() is not None for p in workers)):
                    # as msrun: a MindSpore scheduler ends once every worker has unregistered
                    waiting_for_scheduler = True
                    self.say(f"all {len(workers)} workers exited successfully; waiting for the scheduler")
                tailer.pump()
                time.sleep(delay)
                if time.monotonic() - started > 1.0:  # short jobs keep the fast poll
                    if delay == POLL_INTERVAL:  # the first poll past 1 s: the start times go on record
                        self.record(start_times=True)
                    delay = min(delay * 1.25, MAX_POLL_INTERVAL)
            # when every process ended by itself, only their leftovers (daemonised grandchildren) remain
            sig, grace = signal.SIGTERM, self.grace_period
            if failed is not None:
                self.say(f"{failed.name} (pid {failed.pid}) exited with {describe_code(failed.popen.returncode)}; "
                         f"stopping the others (SIGTERM, SIGKILL after {grace:g} s)")
            elif self.signals.received is not None:
                sig = self.signals.received
                if sig == signal.SIGINT and self.interrupt_grace is not None:
                    grace = min(grace, self.interrupt_grace)
                self.say(f"received {signal.Signals(sig).name}; forwarding it to every process "
                         f"(SIGKILL after {grace:g} s)")
            self.group.stop(sig, grace, tick=tailer.pump, force=lambda: self.signals.force, say=self.say)
        finally:
            tailer.pump(final=True)
        if failed is None:
            if self.signals.received is None:
                self.say("the scheduler exited too; the job is done" if waiting_for_scheduler
                         else f"all {len(workers)} workers exited successfully")
            return _result(procs, self.signals.received)
        proc, code = failed, failed.popen.returncode
        log = failure_log(proc.spec)
        if proc.spec.tail and log in (proc.spec.log_path, proc.spec.stderr_path):
            lines, where = [], f"; its output is above and in {log}"  # tailed already: said once
        else:
            lines = read_log(log, tail=True).splitlines()[-10:] if log else []
            where = f"; last lines of {log}:" if log else ""
        self.say(f"{proc.name} failed with {describe_code(code)}{where}" + "".join(f"\n    {line}" for line in lines))
        if proc.spec.role == self.scheduler_role:
            self.say("the scheduler runs the script with MS_ROLE=MS_SCHED for MindSpore; "
                     "other jobs (PyTorch) need none: pass --no-scheduler")
        return LaunchResult(exit_code(code), tuple(procs), f"{proc.name} exited with {describe_code(code)}", proc)


def _result(procs: Sequence[Process], received: int | None, running: bool = False) -> LaunchResult:
    """Success (or left running), or the end a stop signal made."""
    if received is None:
        return LaunchResult(0, tuple(procs), running=running)
    return LaunchResult(128 + received, tuple(procs), f"received {signal.Signals(received).name}")


def _create_time(pid: int) -> float | None:
    # a --join job's start times wait a second: a short job imports no psutil (benchmarks/launch_bench.py, N=8: ~10 ms)
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def process_record(proc: Process) -> dict:
    spec, binding, seen = proc.spec, proc.binding, proc.observed
    return {
        "name": spec.name, "role": spec.role, "rank": spec.rank, "local_rank": spec.local_rank,
        "pid": proc.pid, "create_time": proc.create_time, "argv": list(proc.argv), "log": spec.log_path,
        "env": dict(spec.env),
        "binding": {"prefix": list(binding.prefix), "cpus": None if binding.cpus is None else str(binding.cpus),
                    "memory": None if binding.memory_nodes is None else str(binding.memory_nodes),
                    "memory_policy": binding.memory_policy,
                    "applied": "directly" if binding.direct else ("prefix" if binding.prefix else None)},
        "observed": None if seen is None else {
            "cpus": str(seen.cpus), "mems_allowed": None if seen.mems_allowed is None else str(seen.mems_allowed),
            "memory_policy": seen.policy, "policy_nodes": str(seen.policy_nodes)},
        "status": proc.status,
    }


def report(proc: Process) -> str:
    """One process's binding line: what it is bound to and how that was checked."""
    if not proc.binding.is_bound:
        cpus = f" (runs on CPUs {proc.observed.cpus})" if proc.observed is not None else ""
        return f"{proc.name}: not bound{cpus}"
    return f"{proc.name}: {proc.binding.describe()} ({proc.status or 'not checked'})"


def exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def signal_name(number: int) -> str:
    """"SIGTERM" for 15; "" for a number that names no signal."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return ""


def describe_code(code: int) -> str:
    """A process's end as words: "exit code 3", "signal 15 (SIGTERM)" (Popen's negative codes)."""
    if code < 0:
        name = signal_name(-code)
        return f"signal {-code} ({name})" if name else f"signal {-code}"
    return f"exit code {code}"


def failure_log(spec) -> str | None:
    """The log that holds a failed process's traceback: its stderr file when it has one and the
    traceback is there (torchrun's -r 3 writes stdout.log and stderr.log apart), else the log."""
    candidates = [p for p in (spec.stderr_path, spec.log_path) if p and p not in (INHERIT, os.devnull)]
    texts = [(p, read_log(p, tail=True)) for p in candidates]
    return next((p for p, t in texts if "Traceback (most recent call last)" in t), None) or \
        next((p for p, t in texts if t.strip()), None) or (candidates[-1] if candidates else None)


LOG_READ_LIMIT = 1 << 20  # bytes of a log read for a report: its first (refusals) or its last (a traceback)


def read_log(path: str | None, *, tail: bool = False, start: int = 0) -> str:
    """LOG_READ_LIMIT bytes of a log from `start`, or with `tail` its last ones ("" when unreadable)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - LOG_READ_LIMIT) if tail else start)
            return fh.read(LOG_READ_LIMIT).decode("utf-8", "replace")
    except OSError:
        return ""

