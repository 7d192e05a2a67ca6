"""`topo stop LOG_DIR`: stop a job from its launch.json, typically one started with --join=False.

The record, which anyone who can write the log directory can forge, names candidates, never proof:
a process is signalled only when the environment it started with carries the job's JOB_ID_VAR
(children inherit it) and, for a recorded pid with a start time, it started then (a reused pid is
never signalled); alone, through a pidfd opened before the proof, never its session or group. A
launcher still following its job (--join=True) is asked instead (SIGTERM) when provably the job's."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

import psutil

from topo.errors import TopoError
from topo.launcher.files import JOB_ID_VAR, JobRecord, read_record

POLL_INTERVAL = 0.05
START_TOLERANCE = 0.01  # seconds: the record and /proc give the same clock-tick count


@dataclass
class StopReport:
    stopped: list[str] = field(default_factory=list)  # "rank 0 (pid 12): SIGTERM"
    gone: list[str] = field(default_factory=list)  # recorded processes that had exited
    unproven: list[str] = field(default_factory=list)  # recorded, running, not provably the job's
    unreadable: list[str] = field(default_factory=list)  # recorded, running, environment unreadable
    survivors: list[int] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when a process survived SIGKILL or a recorded one still runs unproven (left alone, named)."""
        return 1 if self.survivors or self.unproven or self.unreadable else 0


@dataclass
class Member:
    """A process proven the job's, held by a pidfd opened before the proof (a signal through it
    reaches that process or none), or, without pidfds, by psutil's pid and start time."""
    process: psutil.Process
    name: str
    pidfd: int | None


def _pidfd(pid: int) -> int | None:
    """A pidfd for `pid`; None when it is gone, -1 when the kernel has no pidfd_open (before 5.3)."""
    try:
        return os.pidfd_open(pid)
    except AttributeError:
        return -1
    except OSError as exc:
        return -1 if exc.errno in (errno.ENOSYS, errno.EPERM) else None


def prove(pid: int, job_id: str | None, recorded: float | None, *, name: str,
          belongs: Callable[[psutil.Process], bool] | None = None) -> tuple[str, Member | None]:
    """("job", Member) when the process at `pid` carries JOB_ID_VAR=`job_id` (or `belongs` to the
    job) and, when `recorded` is a start time, started then. Otherwise (verdict, None): "gone"
    (exited, a zombie, or started at another time), "unproven" (started at the recorded time but
    not carrying the id), "unreadable" (its environment cannot be read: another user's)."""
    fd = _pidfd(pid)
    if fd is None:
        return "gone", None
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return "gone", None
        if recorded is not None and abs(process.create_time() - recorded) > START_TOLERANCE:
            return "gone", None
        if not (belongs(process) if belongs else process.environ().get(JOB_ID_VAR) == job_id):
            return "gone" if recorded is None else "unproven", None
        member, fd = Member(process, name, None if fd == -1 else fd), None  # the member holds the pidfd
        return "job", member
    except psutil.AccessDenied:  # another user's: whether it carries the id is unknown, not "no"
        return "unreadable", None
    except psutil.Error:  # NoSuchProcess, a zombie too
        return "gone", None
    finally:
        if fd is not None and fd >= 0:
            os.close(fd)


def _running(member: Member) -> bool:
    if member.pidfd is not None:  # readable once the process has exited (poll: a large job's pass FD_SETSIZE)
        poller = select.poll()
        poller.register(member.pidfd, select.POLLIN)
        return not poller.poll(0)
    try:
        return member.process.is_running() and member.process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _send(member: Member, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        if member.pidfd is not None:
            signal.pidfd_send_signal(member.pidfd, sig)
        elif _running(member):  # without pidfds: its identity checked just before
            os.kill(member.process.pid, sig)


def _close(members) -> None:
    for member in members:
        if member.pidfd is not None:
            os.close(member.pidfd)
            member.pidfd = None


def find_members(record: JobRecord, report: StopReport | None = None, *,
                 known: dict[int, Member] | None = None) -> dict[int, Member]:
    """The job's live processes by pid: the recorded ones (those gone, unproven or unreadable listed in
    `report`) and every other that carries its id. Given `known` (an earlier call's), those still
    running are kept without a new proof and the others' pidfds closed. The caller closes those returned."""
    members: dict[int, Member] = {}
    for pid, member in (known or {}).items():
        if _running(member):
            members[pid] = member
        else:
            _close([member])
    for entry in record.processes if known is None else ():
        verdict, member = prove(entry.pid, record.job_id, entry.create_time, name=entry.name)
        if member is not None:
            members[entry.pid] = member
        else:
            getattr(report, verdict).append(f"{entry.name} (pid {entry.pid})")
    for process in psutil.process_iter(["environ"]):
        if process.pid in members or process.pid == os.getpid():
            continue
        if (process.info["environ"] or {}).get(JOB_ID_VAR) == record.job_id:
            _, member = prove(process.pid, record.job_id, None, name="a process the job started")
            if member is not None:
                members[process.pid] = member
    return members


def running(record: JobRecord) -> tuple[dict[int, str], StopReport]:
    """The job's live processes (pid -> name, recorded ones first), and the recorded ones that are
    gone, unproven or unreadable: find_members without holding pidfds."""
    report = StopReport()
    members = find_members(record, report)  # the recorded first, the others by pid (process_iter's order)
    _close(members.values())
    return {pid: member.name for pid, member in members.items()}, report


def stop_job(log_dir: str, *, grace_period: float | None = None,
             say: Callable[[str], None] = lambda text: None) -> StopReport:
    """SIGTERM every live process of the job recorded in `log_dir`, wait up to the grace period
    (default: the job's own --grace-period, else 5 s), SIGKILL what is left, and say what was
    stopped. A job that has ended is said to be not running, and nothing is signalled."""
    record = read_record(log_dir, grace=grace_period is None)
    grace = float(grace_period) if grace_period is not None else 5.0 if record.grace_period is None \
        else record.grace_period
    report = StopReport()
    members = find_members(record, report)
    everyone: dict[int, Member] = dict(members)  # every pidfd opened, closed at the end
    try:
        for text in report.unproven:
            say(f"{text} started when the job's process did but does not carry {JOB_ID_VAR}={record.job_id} "
                "in its environment: left alone, it is not provably the job's")
        for text in report.unreadable:
            say(f"{text} still runs, but its environment cannot be read (another user's process): left alone; "
                "run topo stop as the job's user or as root")
        if not members:
            if not report.unproven and not report.unreadable:
                recorded = len(record.processes)
                exited = f"its {recorded} recorded process(es) have exited" if recorded else "it records no process"
                say(f"the job recorded in {record.path} is not running: {exited} and no process carries its id; "
                    "nothing signalled")
            return report
        pid = record.launcher_pid  # asked when provably the job's: the parent of one of its live processes
        launcher = None if not record.join or pid in (None, os.getpid()) else prove(
            pid, None, record.launcher_create_time, name="the launcher",
            belongs=lambda _: any(m.process.ppid() == pid and _running(m) for m in members.values()))[1]
        if launcher is not None:
            everyone[pid] = launcher
            say(f"the launcher (pid {pid}) is following the job: sending it SIGTERM")
            _send(launcher, signal.SIGTERM)
            deadline = time.monotonic() + grace + 15  # its own grace period, then its SIGKILL round
            while _running(launcher) and time.monotonic() < deadline:
                time.sleep(POLL_INTERVAL)
            if _running(launcher):
                say(f"the launcher (pid {pid}) did not exit; stopping the job directly")
            else:
                say("the launcher stopped the job and exited (its report is on its own console)")
            members = find_members(record, known=members)
            everyone.update(members)
        signaled, report.survivors = _terminate(record, members, everyone, grace, say)
        report.stopped = [f"{everyone[pid].name} (pid {pid}): {how}" for pid, how in signaled.items()]
    finally:
        _close(everyone.values())
    for text in report.stopped:
        say(f"stopped {text}")
    if report.gone:
        say(f"already exited: {', '.join(report.gone)}")
    if report.survivors:
        raise TopoError(f"processes survived SIGKILL, pids {', '.join(map(str, report.survivors))}: "
                        "they may be stuck in the kernel (state D); check them with ps")
    return report


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
        members = find_members(record, known=members)
        everyone.update(members)
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
