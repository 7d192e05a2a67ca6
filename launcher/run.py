"""launch(): start a planned job, check its bindings, follow it and clean up after it.

Process model (compare spec/launchers-observed.md §1.2, §2.3):
- every process, the scheduler included, is started with `start_new_session=True`, so it and
  whatever it forks are found by their session id (signals go to each of them, children of
  children included, not only to the process the launcher started);
- under --join=True the launcher is also a child subreaper (PR_SET_CHILD_SUBREAPER): grandchildren
  that daemonise out of their session are re-parented to us instead of init, and are killed too;
- logs are written by the children themselves (stdout and stderr both on the log file); the
  launcher tails them in Python (no `tail -f` children that could outlive it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from launcher import verify
from launcher.binding import UNBOUND, Binding
from launcher.config import LaunchConfig
from launcher.job import SCHEDULER, JobPlan, ProcessSpec, describe_plan, plan_job
from launcher.tail import LogTailer
from topo.errors import TopoError

POLL_INTERVAL = 0.005  # s; a trivial job's end is noticed within this (msrun polls every 1 s)
MAX_POLL_INTERVAL = 0.1  # s; the join loop backs off to this, so a day-long job costs no CPU
EXEC_TIMEOUT = 5.0  # s for numactl / taskset to apply a binding and exec the interpreter
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


class LaunchError(TopoError):
    """The job could not be started as asked (a binding refused or not taking, a child that cannot exec)."""


@dataclass
class Running:
    spec: ProcessSpec
    popen: subprocess.Popen
    binding: Binding
    observed: verify.Observed | None = None
    status: str = ""  # "verified", "not bound", "unbound (--bind-fallback)", ...

    @property
    def pid(self) -> int:
        return self.popen.pid

    def report(self) -> str:
        seen = self.observed.describe() if self.observed else "exited before it could be read"
        return f"{self.spec.name}: {seen} ({self.status})"

    def to_json(self) -> dict:
        b = self.binding
        return {
            "name": self.spec.name, "role": self.spec.role, "rank": self.spec.rank,
            "local_rank": self.spec.local_rank, "pid": self.pid, "argv": list(self.popen.args),
            "log": self.spec.log_path, "env": dict(self.spec.env),
            "binding": {"prefix": list(b.prefix), "cpus": None if b.cpus is None else str(b.cpus),
                        "memory": None if b.memory is None else str(b.memory)},
            "observed": None if self.observed is None else {
                "cpus": str(self.observed.cpus), "mems_allowed": str(self.observed.mems_allowed),
                "memory_policy": self.observed.policy, "policy_nodes": str(self.observed.policy_nodes)},
            "status": self.status,
        }


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int
    plan: JobPlan
    processes: tuple[Running, ...] = ()  # empty for a dry run
    failed: str | None = None  # "rank 1 exited with code 3", "received SIGTERM", ...


def launch(config: LaunchConfig, *, topology=None, environ=None, out: TextIO | None = None,
           err: TextIO | None = None) -> LaunchResult:
    """Plan and run `config`. With join=True, return when the job is over (exit_code as the
    launcher's); with join=False, return once every process is started and checked.

    `out` gets the tailed logs and the dry-run text, `err` the launcher's own messages
    (defaults: sys.stdout, sys.stderr). Raises UsageError before starting anything when the
    job cannot run as asked, LaunchError when a started process could not be bound.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    plan = plan_job(config, environ=environ, topology=topology)
    if config.dry_run:
        print(describe_plan(plan), file=out)
        return LaunchResult(0, plan)
    for warning in plan.warnings:
        print(f"topo launch: warning: {warning}", file=err)
    return _Job(plan, out, err).run()


class _Job:
    def __init__(self, plan: JobPlan, out: TextIO, err: TextIO):
        self.plan = plan
        self.config = plan.config
        self.out = out
        self.err = err
        self.running: list[Running] = []
        self.stop_signal: int | None = None
        self.force_kill = False
        self._old_handlers: dict[int, object] = {}
        self._old_subreaper: int | None = None
        self._children_before: set[int] = set()

    def say(self, text: str) -> None:
        print(f"topo launch: {text}", file=self.err, flush=True)

    # ---------------------------------------------------------------- run
    def run(self) -> LaunchResult:
        _make_log_dirs(self.plan)
        join = self.config.join
        if join:
            self._install_signal_handlers()
            self._become_subreaper()
        try:
            self._start_all()
            self._verify_all()
            self._write_launch_json()
            if not join:
                return LaunchResult(0, self.plan, tuple(self.running))
            return self._join()
        except BaseException:
            # whatever went wrong in here (a refused binding, a broken console, an interrupt in a
            # host program), nothing we started may outlive it
            self._stop_everything(signal.SIGTERM, self.config.grace_period)
            raise
        finally:
            if join:
                self._restore_signal_handlers()
                self._restore_subreaper()

    def _start_all(self) -> None:
        for spec in self.plan.processes:
            self.running.append(self._start(spec, spec.binding, spec.argv))

    def _start(self, spec: ProcessSpec, binding: Binding, argv: tuple[str, ...], mode: str = "w") -> Running:
        with open(spec.log_path, mode) as log:
            try:
                popen = subprocess.Popen(
                    argv, env=spec.full_env(self.plan.base_env), stdout=log, stderr=subprocess.STDOUT,
                    # --join=True: the workers share our stdin, so pdb breakpoints can be answered
                    stdin=None if self.config.join else subprocess.DEVNULL,
                    start_new_session=True, close_fds=True,
                )
            except OSError as exc:
                raise LaunchError(f"{spec.name}: cannot start {argv[0]!r}: {exc.strerror or exc}; "
                                  "check --python and PATH") from None
        self.say(f"started {spec.name} (pid {popen.pid}), log {spec.log_path}: {' '.join(argv)}")
        return Running(spec, popen, binding)

    # ---------------------------------------------------------------- verification
    def _verify_all(self) -> None:
        problems = []
        for i, r in enumerate(self.running):
            problem = self._verify(r)
            if problem is None:
                self.say(r.report())
                continue
            if not self.config.bind_fallback:
                problems.append(problem)
                continue
            self.say(f"{problem}; --bind-fallback: running it unbound")
            if r.popen.poll() is None:
                r.status = "bound differently, kept (--bind-fallback)"
            else:
                command = r.spec.argv[len(r.spec.binding.prefix):]
                with open(r.spec.log_path, "a") as log:
                    log.write(f"topo launch: restarting without binding: {problem}\n")
                r = self.running[i] = self._start(r.spec, UNBOUND, command, mode="a")
                r.observed = verify.read_observed(r.pid)
                r.status = "unbound (--bind-fallback)"
            self.say(r.report())
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise LaunchError(problems[0] + more)

    def _verify(self, r: Running) -> str | None:
        """Check one process; a message naming the problem and the fix, or None when it is fine."""
        if not r.binding.is_bound:
            r.observed = verify.read_observed(r.pid, memory_policy=False)
            r.status = "not bound"
            return None
        command = r.spec.argv[len(r.binding.prefix):]
        reached = verify.wait_for_exec(r.pid, command, EXEC_TIMEOUT)
        r.observed = verify.read_observed(r.pid)  # a zombie still shows its last affinity
        if not reached:
            code = r.popen.poll()
            refusal = verify.refusal_in(_read_text(r.spec.log_path))
            if refusal:
                tool = r.binding.prefix[0]
                fix = ("drop the memory binding (bind_memory_mode \"none\", or no --bind_numa) or grant the "
                       "container CAP_SYS_NICE" if "mempolicy" in refusal or "mbind" in refusal
                       else "bind only CPUs this container may use (see `topo show`)")
                return (f"{r.spec.name}: {tool} refused the binding ({refusal}); {fix}, "
                        "or rerun with --bind-fallback to run it unbound")
            if code is None:
                return (f"{r.spec.name}: {r.binding.prefix[0]} did not exec the interpreter within "
                        f"{EXEC_TIMEOUT:.0f} s; is {r.binding.prefix[0]} on PATH the real one?")
            if code != 0:
                return None  # it failed on its own; the join loop reports it like any failure
            r.status = "exited before it could be checked"
            return None
        if r.observed is None:
            r.status = "exited before it could be checked"
            return None
        problem = verify.mismatch(r.binding, r.observed)
        if problem:
            return (f"{r.spec.name}: binding did not take: {problem}; the cgroup or another tool restricts "
                    "this process: bind within `topo show`'s allowed CPUs / nodes, or rerun with --bind-fallback")
        r.status = "verified"
        return None

    # ---------------------------------------------------------------- join
    def _join(self) -> LaunchResult:
        tailer = LogTailer([(f"[{r.spec.name}] ", r.spec.log_path) for r in self.running if r.spec.tail], self.out)
        workers = [r for r in self.running if r.spec.role != SCHEDULER]
        failure: tuple[Running, int] | None = None
        waiting_for_scheduler = False
        delay = POLL_INTERVAL
        started = time.monotonic()
        try:
            while self.stop_signal is None:
                for r in self.running:
                    code = r.popen.poll()
                    if code is not None and code != 0 and failure is None:
                        failure = (r, code)
                if failure is not None:
                    break
                if all(r.popen.poll() is not None for r in self.running):
                    break
                if not waiting_for_scheduler and all(r.popen.poll() is not None for r in workers):
                    # as msrun: a MindSpore scheduler ends once every worker has unregistered
                    waiting_for_scheduler = True
                    self.say(f"all {len(workers)} workers exited successfully; waiting for the scheduler")
                tailer.pump()
                time.sleep(delay)
                if time.monotonic() - started > 1.0:  # short jobs keep the fast poll
                    delay = min(delay * 1.25, MAX_POLL_INTERVAL)
            if failure is not None:
                r, code = failure
                self.say(f"{r.spec.name} (pid {r.pid}) exited with {_describe_code(code)}; "
                         f"stopping the others (SIGTERM, SIGKILL after {self.config.grace_period:g} s)")
                self._stop_everything(signal.SIGTERM, self.config.grace_period, tailer)
            elif self.stop_signal is not None:
                name = signal.Signals(self.stop_signal).name
                self.say(f"received {name}; forwarding it to every process "
                         f"(SIGKILL after {self.config.grace_period:g} s)")
                self._stop_everything(self.stop_signal, self.config.grace_period, tailer)
            else:
                # every process ended by itself: only their leftovers (daemonised grandchildren) remain
                self._stop_everything(signal.SIGTERM, self.config.grace_period, tailer)
        finally:
            tailer.pump(final=True)
        if failure is not None:
            r, code = failure
            exit_code = _exit_code(code)
            tail = _last_lines(r.spec.log_path, 10)
            self.say(f"{r.spec.name} failed with {_describe_code(code)}; last lines of {r.spec.log_path}:"
                     + "".join(f"\n    {line}" for line in tail))
            if r.spec.role == SCHEDULER:
                self.say("the scheduler runs the script with MS_ROLE=MS_SCHED for MindSpore; "
                         "other jobs (PyTorch) need none: pass --no-scheduler")
            return LaunchResult(exit_code, self.plan, tuple(self.running),
                                f"{r.spec.name} exited with {_describe_code(code)}")
        if self.stop_signal is not None:
            name = signal.Signals(self.stop_signal).name
            return LaunchResult(128 + self.stop_signal, self.plan, tuple(self.running), f"received {name}")
        self.say(f"all {len(workers)} workers exited successfully")
        return LaunchResult(0, self.plan, tuple(self.running))

    # ---------------------------------------------------------------- stopping
    def _stop_everything(self, sig: int, grace: float, tailer: LogTailer | None = None) -> None:
        """Send `sig` to every process of the job (groups, sessions, re-parented orphans), wait up
        to `grace` seconds for all of them, then SIGKILL what is left. One deadline for all."""
        deadline = time.monotonic() + grace
        alive = self._alive()
        if not alive:
            return  # the usual end of a good job: nothing left to stop
        signaled: set[int] = set()
        while alive and time.monotonic() < deadline and not self.force_kill:
            # each process once; a daemon shows up only after its parent died and it was
            # re-parented to us, a child forked meanwhile on the next scan
            _kill_each(alive - signaled, sig)
            signaled |= alive
            if tailer is not None:
                tailer.pump()
            time.sleep(POLL_INTERVAL)
            alive = self._alive()
        if alive:
            names = [r.spec.name for r in self.running if r.popen.poll() is None]
            if names:
                self.say(f"{', '.join(names)} still running after {grace:g} s; sending SIGKILL")
            give_up = time.monotonic() + 10
            while alive and time.monotonic() < give_up:
                _kill_each(alive, signal.SIGKILL)
                time.sleep(POLL_INTERVAL)
                alive = self._alive()
        for r in self.running:
            try:
                r.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:  # unkillable (D state); nothing more we can do
                self.say(f"{r.spec.name} (pid {r.pid}) did not die after SIGKILL")
        self._reap_orphans()

    def _job_pids(self) -> set[int]:
        """Every live process of the job: our children's sessions, plus orphans re-parented to us."""
        sessions = {r.pid for r in self.running}
        adopted_parent = os.getpid() if self._old_subreaper is not None else None
        pids = set()
        for pid, ppid, sid, state in _proc_table():
            if state == "Z":
                continue
            if sid in sessions or (ppid == adopted_parent and pid not in self._children_before):
                pids.add(pid)
        return pids

    def _alive(self) -> set[int]:
        for r in self.running:
            r.popen.poll()  # reap finished children so they stop looking alive
        self._reap_orphans()
        return self._job_pids()

    def _reap_orphans(self) -> None:
        """waitpid() the re-parented grandchildren (Popen reaps only its own)."""
        if self._old_subreaper is None:
            return
        ours = {r.pid for r in self.running} | self._children_before
        me = os.getpid()
        for pid, ppid, _, state in _proc_table():
            if ppid == me and state == "Z" and pid not in ours:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    # ---------------------------------------------------------------- signals, subreaper
    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal only works there; the host program handles its own signals

        def on_signal(signum, frame):
            if self.stop_signal is not None:
                self.force_kill = True  # a second Ctrl-C: do not wait out the grace period
            else:
                self.stop_signal = signum

        for sig in HANDLED_SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, on_signal)

    def _restore_signal_handlers(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()

    def _become_subreaper(self) -> None:
        import ctypes  # only --join=True needs it

        self._children_before = {pid for pid, ppid, _, _ in _proc_table() if ppid == os.getpid()}
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            value = ctypes.c_int(0)
            if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
                return
            if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
                self._old_subreaper = value.value
        except (OSError, AttributeError):  # not Linux / no prctl: sessions alone must do
            pass

    def _restore_subreaper(self) -> None:
        if self._old_subreaper is not None and self._old_subreaper == 0:
            import ctypes

            ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        self._old_subreaper = None

    # ---------------------------------------------------------------- launch.json
    def _write_launch_json(self) -> None:
        data = {
            "schema": "topo.launch/1",
            "launcher_pid": os.getpid(),
            "join": self.config.join,
            "log_dir": self.plan.log_dir,
            "processes": [r.to_json() for r in self.running],
        }
        path = os.path.join(self.plan.log_dir, "launch.json")
        with open(path, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")


# -------------------------------------------------------------------- helpers
def _make_log_dirs(plan: JobPlan) -> None:
    if not os.path.isdir(plan.log_dir):
        old = os.umask(0o077)  # msrun creates the log directory private (0700)
        try:
            os.makedirs(plan.log_dir, mode=0o700, exist_ok=True)
        finally:
            os.umask(old)
    for p in plan.processes:  # --worker_log_name=sub/w: msrun crashes half-way, we create sub/
        os.makedirs(os.path.dirname(p.log_path), exist_ok=True)


def _proc_table():
    """(pid, ppid, session, state) of every process, from /proc/<pid>/stat."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # the command name (field 2) may hold spaces and parentheses: split after the last ')'
        rest = stat[stat.rfind(b")") + 2:].split()
        try:
            yield int(name), int(rest[1]), int(rest[3]), rest[0].decode()
        except (IndexError, ValueError):
            continue


def _kill_each(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def _describe_code(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _read_text(path: str) -> str:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _last_lines(path: str, n: int) -> list[str]:
    return _read_text(path).splitlines()[-n:]
