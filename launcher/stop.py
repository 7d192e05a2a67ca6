"""`topo stop LOG_DIR`: stop a job from its launch.json, typically one started with --join=False.

What belongs to the job:
- each recorded process, if its pid still names the same process: the start time psutil reports
  must equal the one recorded at launch (or, in the first second of a --join job, whose record has
  no start times yet, the process must carry the job id), so a pid the kernel has handed to another
  program since is never signalled;
- every process that carries the job's id (TOPO_JOB_ID in its environment, inherited from the
  process the launcher started): grandchildren and daemons that left their session, which the
  launcher never saw;
- every process in the session of a recorded process.

A launcher still following its job (--join=True) is asked instead (SIGTERM): it stops the job and
prints its own report; whatever is left after it exits is stopped here.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

from launcher.supervisor import LAUNCH_JSON, SCHEMA
from topo.cpuset import excerpt
from topo.numbers import MAX_SECONDS
from topo.errors import TopoError, UsageError

POLL_INTERVAL = 0.02
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no pid is larger


class StopError(TopoError):
    """Something of the job could not be stopped."""


@dataclass
class StopReport:
    stopped: list[str] = field(default_factory=list)  # "rank 0 (pid 12): SIGTERM"
    gone: list[str] = field(default_factory=list)  # recorded processes that had already exited
    reused: list[str] = field(default_factory=list)  # pids that now name another process
    survivors: list[int] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.survivors else 0


def record_path(log_dir: str) -> str:
    """`log_dir`/launch.json, or the record of the one run below it where topo run keeps them
    (LOG_DIR/<run id>_<random>/attempt_<n>/launch.json): its last attempt, the only one that can
    still be running. UsageError when records of several runs are there."""
    path = os.path.join(log_dir, LAUNCH_JSON)
    if os.path.lexists(path) or not os.path.isdir(log_dir):
        return path
    import glob

    found = glob.glob(os.path.join(glob.escape(log_dir), "*", "attempt_*", LAUNCH_JSON))
    runs = {os.path.dirname(os.path.dirname(f)) for f in found}
    if len(runs) > 1:
        newest = max(found, key=lambda f: os.stat(f).st_mtime)
        raise UsageError(f"job records of {len(runs)} runs below {log_dir}: give the directory of one, the "
                         f"newest is {os.path.dirname(os.path.dirname(newest))}")
    return max(found, key=_attempt_number) if found else path


def _attempt_number(record: str) -> int:
    """n of .../attempt_<n>/launch.json (topo run numbers its attempts 0, 1, ...)."""
    name = os.path.basename(os.path.dirname(record))[len("attempt_"):]
    return int(name) if name.isascii() and name.isdigit() else -1


def read_record(log_dir: str, path: str | None = None) -> dict:
    """The job record in `log_dir` (at `path`, when record_path has found it already); UsageError
    naming the file when it is missing or not one."""
    path = path or record_path(log_dir)
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"no job record, {path} does not exist: give the --log_dir of a job started by "
                         "topo launch or topo run") from None
    except NotADirectoryError:
        raise UsageError(f"no job record, {log_dir} is not a directory: give the --log_dir of a job started "
                         "by topo launch or topo run") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"unreadable job record, {path}: {exc}; was it written by topo launch?") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("processes"), list):
        raise UsageError(f"not a job record of this topo, {path}: expected schema {SCHEMA!r}; "
                         "stop the processes by hand (the file lists their pids)")
    for entry in data["processes"]:
        if not isinstance(entry, dict):
            raise UsageError(f"bad job record, {path}: a process entry is {excerpt(repr(entry))}, not an object; "
                             "stop the processes by hand")
        _check(path, entry, "pid", _is_pid)
        _check(path, entry, "create_time", _is_time)
    _check(path, data, "launcher_pid", _is_pid)
    _check(path, data, "launcher_create_time", _is_time)
    return data


def _is_number(value) -> bool:
    # json reads Infinity and NaN too; bool is an int to isinstance
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_pid(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= PID_MAX


def _is_time(value) -> bool:
    return _is_number(value) and value >= 0


def _check(path: str, data: dict, key: str, valid: Callable) -> None:
    """A recorded pid or start time is absent (null) or valid; anything else (a hand-edited record)
    is a UsageError naming the file, before anything is signalled: a NaN start time would match
    every process, a pid of -1 would reach kill()."""
    value = data.get(key)
    if value is not None and not valid(value):
        what = f"process id from 1 to {PID_MAX}" if valid is _is_pid else "start time in seconds since the epoch"
        raise UsageError(f"bad job record, {path}: {key} {excerpt(repr(value))} is not a {what}; "
                         "stop the processes by hand")


def _grace(path: str, data: dict) -> float:
    """The job's own grace period, 5 s if the record has none; a UsageError naming the file when it
    is not a number of seconds up to MAX_SECONDS (json reads Infinity: topo stop would never end)."""
    value = data.get("grace_period")
    if value is None:
        return 5.0
    if not (_is_number(value) and 0 <= value <= MAX_SECONDS):
        raise UsageError(f"bad job record, {path}: grace_period {excerpt(repr(value))} is not a number of seconds "
                         f"from 0 to {MAX_SECONDS}; give topo stop --grace-period SECONDS")
    return float(value)


def stop_job(log_dir: str, *, grace_period: float | None = None,
             say: Callable[[str], None] = lambda text: None) -> StopReport:
    """SIGTERM every live process of the job recorded in `log_dir`, wait up to the grace period
    (default: the job's own --grace-period), SIGKILL what is left, and say what was stopped."""
    import psutil

    path = record_path(log_dir)
    data = read_record(log_dir, path)
    grace = _grace(path, data) if grace_period is None else float(grace_period)
    job_id = str(data.get("job_id", ""))
    report = StopReport()

    names: dict[int, str] = {}
    members: dict[int, psutil.Process] = {}
    for entry in data["processes"]:
        name, pid = entry.get("name", "?"), entry.get("pid")
        proc = _same_process(pid, entry.get("create_time"), job_id)
        if proc:
            members[proc.pid] = proc
            names[proc.pid] = name
        elif proc is False:
            report.reused.append(f"{name} (pid {pid})")
        else:
            report.gone.append(f"{name} (pid {pid})")
    for text in report.reused:
        say(f"{text} is now another process (it started after the job): left alone")

    launcher = _launcher(data, members)
    if launcher is not None and data.get("join"):
        say(f"the launcher (pid {launcher.pid}) is following the job: sending it SIGTERM")
        _signal(launcher, signal.SIGTERM)
        try:
            launcher.wait(grace + 15)  # its own grace period, then its SIGKILL round
            say("the launcher stopped the job and exited (its report is on its own console)")
        except psutil.TimeoutExpired:
            say(f"the launcher (pid {launcher.pid}) did not exit; stopping the job directly")
    sessions = set(names)

    def scan() -> dict[int, psutil.Process]:
        found = {pid: p for pid, p in members.items() if _alive(p)}
        for proc in psutil.process_iter():
            if proc.pid in found or proc.pid == os.getpid():
                continue
            try:
                if os.getsid(proc.pid) in sessions or (job_id and proc.environ().get("TOPO_JOB_ID") == job_id):
                    if _alive(proc):
                        found[proc.pid] = proc
            except (psutil.Error, OSError):
                continue
        return found

    alive = scan()
    signaled: dict[int, str] = {}
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline:
        for pid, proc in alive.items():
            if pid not in signaled:
                _signal(proc, signal.SIGTERM)
                signaled[pid] = "SIGTERM"
        time.sleep(POLL_INTERVAL)
        alive = scan()
    if alive:
        say(f"{len(alive)} process(es) still running after {grace:g} s; sending SIGKILL")
        for pid, proc in alive.items():
            _signal(proc, signal.SIGKILL)
            signaled[pid] = "SIGKILL"
        gone_by = time.monotonic() + 5
        while alive and time.monotonic() < gone_by:
            time.sleep(POLL_INTERVAL)
            alive = {pid: p for pid, p in alive.items() if _alive(p)}
    for pid, how in signaled.items():
        what = names.get(pid, "a process the job started")
        report.stopped.append(f"{what} (pid {pid}): {how}")
    report.survivors = sorted(alive)
    for text in report.stopped:
        say(f"stopped {text}")
    if report.gone and not report.stopped:
        say(f"nothing to stop: {', '.join(report.gone)} had already exited")
    elif report.gone:
        say(f"already exited: {', '.join(report.gone)}")
    if report.survivors:
        raise StopError(f"processes survived SIGKILL, pids {', '.join(map(str, report.survivors))}: "
                        "they may be stuck in the kernel (state D); check them with ps")
    return report


def _same_process(pid, create_time, job_id: str):
    """psutil.Process for `pid` if it is still the process recorded and alive; None if it is gone
    (or a zombie); False if the pid now names another process. Recorded with a start time, the
    start times must match; without one (a --join job's first second), it must carry the job id."""
    import psutil

    if not isinstance(pid, int):
        return None
    try:
        proc = psutil.Process(pid)
        if isinstance(create_time, (int, float)):
            if abs(proc.create_time() - create_time) > 0.01:
                return False
        elif not job_id or proc.environ().get("TOPO_JOB_ID") != job_id:
            return False if _alive(proc) else None
    except psutil.AccessDenied:
        return False  # not provably ours: leave it alone
    except psutil.Error:
        return None
    return proc if _alive(proc) else None


def _launcher(data: dict, members: dict):
    """The launcher, if it still runs: its start time matches, or (recorded without one) it is
    the parent of a live process of the job."""
    import psutil

    pid = data.get("launcher_pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return None
    if isinstance(data.get("launcher_create_time"), (int, float)):
        proc = _same_process(pid, data["launcher_create_time"], "")
        return proc or None
    for member in members.values():
        try:
            if member.ppid() == pid:
                return psutil.Process(pid)
        except psutil.Error:
            continue
    return None


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc, sig: int) -> None:
    import psutil

    try:
        proc.send_signal(sig)  # psutil checks the pid still names this process first
    except psutil.Error:
        pass
