"""`topo stop LOG_DIR`: stop a job from its launch.json, typically one started with --join=False.

The record is a file anyone who can write the log directory can forge, so it names candidates,
never proof. A process is the job's, and is signalled, only when
- it carries the job's id in the environment it was started with (TOPO_JOB_ID=<id> in
  /proc/PID/environ: the launcher gives every process it starts a random id, and their children
  inherit it), and
- for a recorded pid, its start time equals the one recorded (when recorded: a --join job's first
  second has none), so a pid the kernel has handed to another program since is never signalled.
Processes that carry the id but were never recorded (grandchildren, daemons that left their
session) are the job's too. Each is signalled alone through a pidfd opened before the checks,
never through its session or process group.

A launcher still following its job (--join=True) is asked instead (SIGTERM), when it is provably
the job's: the parent of a process of the job, with the recorded start time. It stops the job and
prints its own report; whatever is left after it exits is stopped here.

Exit status: 0 when the job's processes are gone, whether topo stop stopped them or the job had
already ended ("the job ... is not running"); 1 when a process survived SIGKILL or a recorded
process that still runs could not be proven the job's (it is left alone and named).
"""

from __future__ import annotations

import errno
import glob
import json
import math
import os
import re
import select
import signal
import stat
import time
from dataclasses import dataclass, field
from typing import Callable

from topo.launcher import procinfo
from topo.launcher.procinfo import ProcError
from topo.launcher.supervisor import LAUNCH_JSON, SCHEMA
from topo.cpuset import excerpt
from topo.numbers import MAX_SECONDS
from topo.errors import TopoError, UsageError

POLL_INTERVAL = 0.05
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no pid is larger
# A record holds a few hundred bytes per process (its argv, its extra environment, its binding);
# 16 MiB is tens of thousands of processes, more than one node runs.
RECORD_LIMIT = 16 << 20
MAX_PROCESSES = 1 << 16
JOB_ID_VAR = "TOPO_JOB_ID"  # as launcher.procgroup sets it
JOB_ID_FORM = re.compile(r"[0-9A-Za-z_.-]{8,128}")
START_TOLERANCE = 0.01  # seconds: the record and /proc give the same clock-tick count


class StopError(TopoError):
    """Something of the job could not be stopped."""


@dataclass(frozen=True)
class RecordedProcess:
    name: str
    pid: int
    create_time: float | None


@dataclass(frozen=True)
class JobRecord:
    """What topo stop and topo ps take from a launch.json, every field checked."""
    path: str
    job_id: str
    processes: tuple[RecordedProcess, ...]
    launcher_pid: int | None = None
    launcher_create_time: float | None = None
    join: bool = False
    grace_period: float | None = None


@dataclass
class StopReport:
    stopped: list[str] = field(default_factory=list)  # "rank 0 (pid 12): SIGTERM"
    gone: list[str] = field(default_factory=list)  # recorded processes that had exited
    unproven: list[str] = field(default_factory=list)  # recorded, running, not provably the job's
    survivors: list[int] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.survivors or self.unproven else 0


# -------------------------------------------------------------------- the record
def record_path(log_dir: str) -> str:
    """`log_dir`/launch.json, or the record of the one run below it where topo run keeps them
    (LOG_DIR/<run id>_<random>/attempt_<n>/launch.json): its last attempt, the only one that can
    still be running. UsageError when records of several runs are there."""
    path = os.path.join(log_dir, LAUNCH_JSON)
    if os.path.lexists(path) or not os.path.isdir(log_dir):
        return path
    found = glob.glob(os.path.join(glob.escape(log_dir), "*", "attempt_*", LAUNCH_JSON))
    runs = sorted({os.path.dirname(os.path.dirname(f)) for f in found})
    if len(runs) > 1:
        raise UsageError(f"job records of {len(runs)} runs below {log_dir}: give the directory of one "
                         f"({', '.join(excerpt(r) for r in runs[:3])}{', ...' if len(runs) > 3 else ''})")
    return max(found, key=_attempt_number) if found else path


def _attempt_number(record: str) -> int:
    """n of .../attempt_<n>/launch.json (topo run numbers its attempts 0, 1, ...)."""
    name = os.path.basename(os.path.dirname(record))[len("attempt_"):]
    return int(name) if name.isascii() and name.isdigit() and len(name) < 10 else -1


def read_record(log_dir: str, path: str | None = None, *, grace: bool = True) -> JobRecord:
    """The job record in `log_dir` (at `path`, when record_path has found it already), read
    without following a link or blocking, at most RECORD_LIMIT bytes, every field checked (the
    grace period only with `grace`); a UsageError naming the file otherwise, before anything is
    signalled."""
    path = path or record_path(log_dir)
    data = _load(log_dir, path)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("processes"), list):
        raise UsageError(f"not a job record of this topo, {path}: expected schema {SCHEMA!r}; "
                         "stop the processes by hand (the file lists their pids)")
    job_id = data.get("job_id")
    if not (isinstance(job_id, str) and JOB_ID_FORM.fullmatch(job_id)):
        raise _bad(path, f"job_id {excerpt(repr(job_id))} is not a job id topo writes "
                         "(8 to 128 letters, digits, '.', '-' or '_')")
    if len(data["processes"]) > MAX_PROCESSES:
        raise _bad(path, f"it lists {len(data['processes'])} processes, more than {MAX_PROCESSES}")
    processes = []
    for entry in data["processes"]:
        if not isinstance(entry, dict):
            raise _bad(path, f"a process entry is {excerpt(repr(entry))}, not an object")
        name = entry.get("name", "?")
        if not (isinstance(name, str) and 0 < len(name) <= 100 and name.isprintable()):
            raise _bad(path, f"process name {excerpt(repr(name))} is not printable text of 1 to 100 characters")
        processes.append(RecordedProcess(name, _pid(path, entry, "pid", required=True),
                                         _time(path, entry, "create_time")))
    join = data.get("join", False)
    if not isinstance(join, bool) and join is not None:
        raise _bad(path, f"join {excerpt(repr(join))} is not true or false")
    return JobRecord(path, job_id, tuple(processes), _pid(path, data, "launcher_pid"),
                     _time(path, data, "launcher_create_time"), bool(join),
                     _grace(path, data) if grace else None)


def check_not_running(log_dir: str, stop_hint: str) -> None:
    """UsageError when `log_dir` holds the record of a job with a process still running (it
    carries the job's TOPO_JOB_ID): starting a second job there would overwrite its logs and
    record, and `topo stop` could no longer find it. `stop_hint` is the directory as the user
    should pass it to `topo stop`. No record, or one topo stop could not use, protects nothing."""
    path = os.path.join(log_dir, LAUNCH_JSON)
    try:
        record = read_record(log_dir, path, grace=False)
    except UsageError:
        return
    for p in record.processes:
        try:
            running = procinfo.environ_has("/proc", p.pid, JOB_ID_VAR, record.job_id)
        except (OSError, ProcError):  # gone, or not ours to read
            continue
        if running:
            raise UsageError(f"the log directory holds a running job, {path} (pid {p.pid}): stop it first "
                             f"with `topo stop {stop_hint}`, or give another --log_dir")


def _load(log_dir: str, path: str):
    try:
        # O_NOFOLLOW: a link planted as launch.json (to /dev/zero, a FIFO, another file) is refused;
        # O_NONBLOCK: a FIFO must not hang topo stop waiting for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"no job record, {path} does not exist: give the --log_dir of a job started by "
                         "topo launch or topo run") from None
    except NotADirectoryError:
        raise UsageError(f"no job record, {log_dir} is not a directory: give the --log_dir of a job started "
                         "by topo launch or topo run") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"not a job record, {path} is a symbolic link (topo writes launch.json as a "
                             "file): give the --log_dir of a job started by topo launch or topo run") from None
        raise UsageError(f"unreadable job record, {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"not a job record, {path} is not a regular file (a FIFO, device or directory): "
                             "give the --log_dir of a job started by topo launch or topo run")
        if info.st_size > RECORD_LIMIT:
            raise UsageError(f"not a job record, {path} is {info.st_size} bytes, more than the {RECORD_LIMIT} a "
                             "record can be; stop the processes by hand")
        raw = os.read(fd, RECORD_LIMIT + 1)  # a regular file gives all of it at once, up to the limit
    except OSError as exc:
        raise UsageError(f"unreadable job record, {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > RECORD_LIMIT:
        raise UsageError(f"not a job record, {path} is longer than the {RECORD_LIMIT} bytes a record can be; "
                         "stop the processes by hand")
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"unreadable job record, {path}: {excerpt(str(exc) or type(exc).__name__)}; "
                         "was it written by topo launch?") from None


def _bad(path: str, what: str, fix: str = "stop the processes by hand") -> UsageError:
    return UsageError(f"bad job record, {path}: {what}; {fix}")


def _is_number(value) -> bool:
    # json reads Infinity and NaN too; bool is an int to isinstance
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _pid(path: str, data: dict, key: str, required: bool = False) -> int | None:
    """A recorded pid: from 1 to PID_MAX (a pid of -1 would reach every process through kill())."""
    value = data.get(key)
    if value is None and not required:
        return None
    if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= PID_MAX):
        raise _bad(path, f"{key} {excerpt(repr(value))} is not a process id from 1 to {PID_MAX}")
    return value


def _time(path: str, data: dict, key: str) -> float | None:
    """A recorded start time, or None; a NaN would match no process and compare false either way."""
    value = data.get(key)
    if value is None:
        return None
    if not (_is_number(value) and value >= 0):
        raise _bad(path, f"{key} {excerpt(repr(value))} is not a start time in seconds since the epoch")
    return float(value)


def _grace(path: str, data: dict) -> float | None:
    """The job's own grace period, None when the record has none; refused when it is not a number
    of seconds up to MAX_SECONDS (json reads Infinity: topo stop would never end)."""
    value = data.get("grace_period")
    if value is None:
        return None
    if not (_is_number(value) and 0 <= value <= MAX_SECONDS):
        raise _bad(path, f"grace_period {excerpt(repr(value))} is not a number of seconds from 0 to {MAX_SECONDS}",
                   "give topo stop --grace-period SECONDS")
    return float(value)


# -------------------------------------------------------------------- proving a process the job's
@dataclass
class Member:
    """A process proven the job's, held by a pidfd opened before the proof (so a signal through it
    reaches that process or none), or by its start ticks where the kernel has no pidfds."""
    pid: int
    ticks: int
    name: str
    pidfd: int | None


def _pidfd(pid: int) -> int | None:
    """A pidfd for `pid`; None when it is gone. -1 when the kernel has no pidfd_open (before 5.3)."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (OSError, AttributeError) as exc:
        if isinstance(exc, OSError) and exc.errno not in (errno.ENOSYS, errno.EPERM):
            return None
        return -1


def prove(pid: int, job_id: str, recorded: float | None, *, name: str, proc: str = "/proc",
          booted: float | None = None) -> tuple[str, Member | None]:
    """("job", Member) when the process at `pid` is the job's: it carries TOPO_JOB_ID=`job_id` and,
    when `recorded` is a start time, started then. Otherwise (verdict, None): "gone" (exited, a
    zombie, or the pid now names a process started at another time), "unproven" (started at the
    recorded time but its environment does not carry the id, or cannot be read)."""
    fd = _pidfd(pid) if proc == "/proc" else -1
    if fd is None:
        return "gone", None
    verdict = "gone"
    try:
        fields = procinfo.stat_fields(proc, pid)
        ticks = int(fields[21])
        if fields[2] in ("Z", "X"):
            return "gone", None
        if recorded is not None:
            booted = procinfo.boot_time(proc) if booted is None else booted
            if not _started_at(ticks, recorded, booted):
                return "gone", None
            verdict = "unproven"
        if not procinfo.environ_has(proc, pid, JOB_ID_VAR, job_id):
            return verdict, None
        member, fd = Member(pid, ticks, name, None if fd == -1 else fd), None
        return "job", member
    except procinfo.ProcessGone:
        return "gone", None
    except ProcError:
        return ("unproven" if recorded is not None else "gone"), None
    finally:
        if fd is not None and fd >= 0:
            os.close(fd)


def _started_at(ticks: int, recorded: float, booted: float) -> bool:
    """Whether a process started `ticks` clock ticks after boot is the one recorded as started at
    `recorded` (seconds since the epoch, as psutil's create_time() gives it)."""
    return abs(booted + ticks / procinfo.CLOCK_TICKS - recorded) <= START_TOLERANCE


def _exited(pidfd: int, timeout: float) -> bool:
    """Whether the pidfd's process has exited, waiting up to `timeout` seconds: a pidfd turns
    readable when it exits (poll, not select: pidfds of a large job pass FD_SETSIZE)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000))))


def _running(member: Member, proc: str = "/proc") -> bool:
    if member.pidfd is not None:
        return not _exited(member.pidfd, 0)
    try:
        fields = procinfo.stat_fields(proc, member.pid)
    except ProcError:
        return False
    return int(fields[21]) == member.ticks and fields[2] not in ("Z", "X")


def _send(member: Member, sig: int, proc: str = "/proc") -> None:
    try:
        if member.pidfd is not None:
            signal.pidfd_send_signal(member.pidfd, sig)
        elif _running(member, proc):  # without pidfds: the start ticks checked just before
            os.kill(member.pid, sig)
    except ProcessLookupError:
        pass


def _close(members) -> None:
    for member in members:
        if member.pidfd is not None:
            os.close(member.pidfd)
            member.pidfd = None


def find_members(record: JobRecord, *, proc: str = "/proc", scan: bool = True,
                 known: dict[int, Member] | None = None) -> tuple[dict[int, Member], list[str], list[str]]:
    """The job's live processes by pid (recorded ones and, with `scan`, every other process that
    carries its id), with the recorded ones that have exited and those not provably the job's.
    Processes in `known` still running are kept as they are. The caller closes the pidfds."""
    booted = procinfo.boot_time(proc)
    members: dict[int, Member] = {pid: m for pid, m in (known or {}).items() if _running(m, proc)}
    gone, unproven = [], []
    for entry in record.processes:
        if entry.pid in members:
            continue
        verdict, member = prove(entry.pid, record.job_id, entry.create_time, name=entry.name, proc=proc,
                                booted=booted)
        if member is not None:
            members[member.pid] = member
        elif verdict == "unproven":
            unproven.append(f"{entry.name} (pid {entry.pid})")
        else:
            gone.append(f"{entry.name} (pid {entry.pid})")
    if scan:
        for pid in procinfo.pids(proc):
            if pid in members or pid == os.getpid():
                continue
            try:
                if not procinfo.environ_has(proc, pid, JOB_ID_VAR, record.job_id):
                    continue
            except ProcError:
                continue
            _, member = prove(pid, record.job_id, None, name="a process the job started", proc=proc, booted=booted)
            if member is not None:
                members[pid] = member
    return members, gone, unproven


def running(record: JobRecord, *, proc: str = "/proc") -> tuple[dict[int, str], list[str], list[str]]:
    """The job's live processes (pid -> name, recorded ones first), with the recorded ones that
    have exited and those not provably the job's: find_members without holding pidfds."""
    members, gone, unproven = find_members(record, proc=proc)
    _close(members.values())
    order = [p.pid for p in record.processes if p.pid in members] + sorted(
        set(members) - {p.pid for p in record.processes})
    return {pid: members[pid].name for pid in order}, gone, unproven


def _launcher(record: JobRecord, members: dict[int, Member]) -> Member | None:
    """The launcher, when it still runs and is provably the job's: the parent of a live process
    of the job, started at the recorded time (when one is recorded)."""
    pid = record.launcher_pid
    if pid is None or pid == os.getpid():
        return None
    fd = _pidfd(pid)
    if fd is None:
        return None
    try:
        fields = procinfo.stat_fields("/proc", pid)
        ticks = int(fields[21])
        if record.launcher_create_time is not None:
            if not _started_at(ticks, record.launcher_create_time, procinfo.boot_time()):
                return None
        for member in members.values():
            if int(procinfo.stat_fields("/proc", member.pid)[3]) == pid and _running(member):
                launcher, fd = Member(pid, ticks, "the launcher", None if fd == -1 else fd), None
                return launcher
        return None
    except (ProcError, ValueError):
        return None
    finally:
        if fd is not None and fd >= 0:
            os.close(fd)


def _keep(everyone: dict[int, Member], found: dict[int, Member]) -> None:
    """Add `found` to `everyone` (whose pidfds are closed at the end), closing a pidfd replaced by
    a new process at the same pid."""
    for pid, member in found.items():
        old = everyone.get(pid)
        if old is not None and old is not member:
            _close([old])
        everyone[pid] = member


def _wait_exit(member: Member, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _running(member):
        if time.monotonic() >= deadline:
            return False
        if member.pidfd is not None:
            _exited(member.pidfd, min(1.0, max(0.0, deadline - time.monotonic())))
        else:
            time.sleep(POLL_INTERVAL)
    return True


# -------------------------------------------------------------------- stopping
def stop_job(log_dir: str, *, grace_period: float | None = None,
             say: Callable[[str], None] = lambda text: None) -> StopReport:
    """SIGTERM every live process of the job recorded in `log_dir`, wait up to the grace period
    (default: the job's own --grace-period, else 5 s), SIGKILL what is left, and say what was
    stopped. A job that has ended is said to be not running, and nothing is signalled."""
    path = record_path(log_dir)
    record = read_record(log_dir, path, grace=grace_period is None)
    grace = float(grace_period) if grace_period is not None else 5.0 if record.grace_period is None \
        else record.grace_period
    report = StopReport()
    members, report.gone, report.unproven = find_members(record)
    everyone: dict[int, Member] = dict(members)  # every pidfd opened, closed at the end
    try:
        for text in report.unproven:
            say(f"{text} started when the job's process did but does not carry {JOB_ID_VAR}={record.job_id} "
                "in its environment (or it cannot be read): left alone, it is not provably the job's")
        if not members:
            if not report.unproven:
                recorded = len(record.processes)
                exited = f"its {recorded} recorded process(es) have exited" if recorded else "it records no process"
                say(f"the job recorded in {path} is not running: {exited} and no process carries its id; "
                    "nothing signalled")
            return report
        launcher = _launcher(record, members) if record.join else None
        if launcher is not None:
            everyone[launcher.pid] = launcher
            members = _ask_launcher(record, launcher, members, everyone, grace, say)
        signaled, survivors = _terminate(record, members, everyone, grace, say)
        report.stopped = [f"{everyone[pid].name} (pid {pid}): {how}" for pid, how in signaled.items()]
        report.survivors = survivors
    finally:
        _close(everyone.values())
    for text in report.stopped:
        say(f"stopped {text}")
    if report.gone:
        say(f"already exited: {', '.join(report.gone)}")
    if report.survivors:
        raise StopError(f"processes survived SIGKILL, pids {', '.join(map(str, report.survivors))}: "
                        "they may be stuck in the kernel (state D); check them with ps")
    return report


def _ask_launcher(record: JobRecord, launcher: Member, members: dict[int, Member], everyone: dict[int, Member],
                  grace: float, say: Callable[[str], None]) -> dict[int, Member]:
    """SIGTERM to a launcher following its job (it stops the job and reports); what is left after."""
    say(f"the launcher (pid {launcher.pid}) is following the job: sending it SIGTERM")
    _send(launcher, signal.SIGTERM)
    if _wait_exit(launcher, grace + 15):  # its own grace period, then its SIGKILL round
        say("the launcher stopped the job and exited (its report is on its own console)")
    else:
        say(f"the launcher (pid {launcher.pid}) did not exit; stopping the job directly")
    members, _, _ = find_members(record, known=members)
    _keep(everyone, members)
    return members


def _terminate(record: JobRecord, members: dict[int, Member], everyone: dict[int, Member], grace: float,
               say: Callable[[str], None]) -> tuple[dict[int, str], list[int]]:
    """SIGTERM to each of the job's processes (those that appear meanwhile too), SIGKILL to those
    left after `grace` seconds; the signal each got, and the pids still running 5 s after SIGKILL."""
    signaled: dict[int, str] = {}
    deadline = time.monotonic() + grace
    while members and time.monotonic() < deadline:
        for pid, member in members.items():
            if pid not in signaled:
                _send(member, signal.SIGTERM)
                signaled[pid] = "SIGTERM"
        time.sleep(POLL_INTERVAL)
        members, _, _ = find_members(record, known=members)
        _keep(everyone, members)
    if members:
        say(f"{len(members)} process(es) still running after {grace:g} s; sending SIGKILL")
        for pid, member in members.items():
            _send(member, signal.SIGKILL)
            signaled[pid] = "SIGKILL"
        gone_by = time.monotonic() + 5
        while members and time.monotonic() < gone_by:
            time.sleep(POLL_INTERVAL)
            members = {pid: m for pid, m in members.items() if _running(m)}
    return signaled, sorted(members)
