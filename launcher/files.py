"""The files topo writes, never through a link it did not make (logs opened O_NOFOLLOW, a whole file written beside
its name and renamed), and launch.json read back as the hostile input anyone who can write its directory can make of
it: without following a link or blocking, bounded, every field checked."""

from __future__ import annotations

import contextlib
import errno
import glob
import math
import os
import re
import stat
import uuid
from dataclasses import dataclass

from topo.binding import MAX_PROCESSES, read_bounded
from topo.cpuset import excerpt
from topo.errors import UsageError
from topo.numbers import MAX_SECONDS

LAUNCH_JSON = "launch.json"
SCHEMA = "topo.launch/2"  # launch.json's
JOB_ID_VAR = "TOPO_JOB_ID"  # every process the launcher starts carries the job's id in it
JOB_ID_FORM = re.compile(r"[0-9A-Za-z_.-]{8,128}")
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no pid is larger
# A record holds a few hundred bytes per process (its argv, its extra environment, its binding);
# 16 MiB is tens of thousands of processes, more than one node runs.
RECORD_LIMIT = 16 << 20
_FIX = "stop the processes by hand"
_NO_RECORD = "give the --log_dir of a job started by topo launch or topo run"


def open_log(path: str, mode: str = "x"):
    """A log file opened for writing: "x" creates it (O_EXCL), "a" appends to one topo created (a
    process started again): a regular file of this user, never through a link or blocking on a FIFO."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_CREAT | os.O_EXCL if mode == "x" else os.O_APPEND
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symbolic link; topo does not write through one", path) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(errno.EEXIST, "is not a log topo created; topo does not write into it", path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "w" if mode == "x" else "a")


def replaceable(path: str, logs: frozenset[str]) -> bool:
    """Whether topo may remove and create again `path` in a log directory: a regular file of this
    user with no other link, listed in `logs` (previous_logs) or launch.json."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return True
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_nlink == 1
            and (os.path.basename(path) == LAUNCH_JSON or os.path.abspath(path) in logs))


def previous_logs(log_dir: str) -> frozenset[str]:
    """The log files a rerun into `log_dir` may replace: those its record lists ("logs", and each
    process's "log"), when that record is a regular file of this user."""
    path = os.path.join(log_dir, LAUNCH_JSON)
    try:
        if os.lstat(path).st_uid != os.geteuid():
            return frozenset()
        data = _load(log_dir, path)
    except (OSError, UsageError):
        return frozenset()
    data = data if isinstance(data, dict) else {}
    logs = data.get("logs") if isinstance(data.get("logs"), list) else []
    processes = data.get("processes") if isinstance(data.get("processes"), list) else []
    logs = logs + [p.get("log") for p in processes if isinstance(p, dict)]
    return frozenset(os.path.abspath(p) for p in logs if isinstance(p, str) and "\0" not in p)


def write_whole(path: str, text: str, *, replace: bool = True, mode: int = 0o666) -> None:
    """Write `path` whole or not at all: `text` goes to a new file beside it (O_EXCL, O_NOFOLLOW), which
    then takes the name by rename() (replacing a link itself, not what it points to) or, unless
    `replace`, by link(), which raises FileExistsError if the name was taken meanwhile."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:16]}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if replace:
            os.replace(temporary, path)
        else:
            try:
                os.link(temporary, path, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                # a filesystem without hard links (vfat, some FUSE): look again, then rename
                if os.path.lexists(path):
                    raise FileExistsError(errno.EEXIST, "File exists", path) from None
                os.rename(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def write_record(path: str, text: str) -> None:
    """Replace the record at `path` at once, readable by this user alone: readers see the old one or the new."""
    write_whole(path, text, mode=0o600)


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


def record_path(log_dir: str) -> str:
    """`log_dir`/launch.json, or the last attempt's of the one topo run below it
    (LOG_DIR/<run id>_<random>/attempt_<n>/launch.json); UsageError when several runs are there."""
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
    name = os.path.basename(os.path.dirname(record))[len("attempt_"):]
    return int(name) if name.isascii() and name.isdigit() and len(name) < 10 else -1


def read_record(log_dir: str, path: str | None = None, *, grace: bool = True) -> JobRecord:
    """The job record at `path` (default: record_path's) in `log_dir`, every field checked (the grace
    period only with `grace`); a UsageError naming the file otherwise."""
    path = path or record_path(log_dir)
    data = _load(log_dir, path)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("processes"), list):
        raise UsageError(f"not a job record of this topo, {path}: expected schema {SCHEMA!r}; "
                         f"{_FIX} (the file lists their pids)")
    _check(path, data, "job_id", lambda v: isinstance(v, str) and JOB_ID_FORM.fullmatch(v),
           "a job id topo writes (8 to 128 letters, digits, '.', '-' or '_')", required=True)
    if len(data["processes"]) > MAX_PROCESSES:
        raise _bad(path, f"it lists {len(data['processes'])} processes, more than {MAX_PROCESSES}")
    processes: dict[int, RecordedProcess] = {}
    for entry in data["processes"]:
        if not isinstance(entry, dict):
            raise _bad(path, f"a process entry is {excerpt(repr(entry))}, not an object")
        name = entry.get("name", "?")
        if not (isinstance(name, str) and 0 < len(name) <= 100 and name.isprintable()):
            raise _bad(path, f"process name {excerpt(repr(name))} is not printable text of 1 to 100 characters")
        pid = _pid(path, entry, "pid", required=True)
        if pid in processes:  # each is proven once: topo records a pid once
            raise _bad(path, f"pid {pid} is listed twice")
        processes[pid] = RecordedProcess(name, pid, _time(path, entry, "create_time"))
    join = _check(path, data, "join", lambda v: isinstance(v, bool), "true or false")
    grace_period = _check(path, data, "grace_period", lambda v: _is_number(v) and 0 <= v <= MAX_SECONDS,
                          f"a number of seconds from 0 to {MAX_SECONDS}", "give topo stop --grace-period SECONDS") \
        if grace else None
    return JobRecord(path, data["job_id"], tuple(processes.values()), _pid(path, data, "launcher_pid"),
                     _time(path, data, "launcher_create_time"), bool(join),
                     None if grace_period is None else float(grace_period))


def _load(log_dir: str, path: str):
    try:
        # no link followed (one planted as launch.json, to /dev/zero or another file, is refused), no
        # wait on a FIFO for a writer, a regular file only
        raw = read_bounded(path, RECORD_LIMIT + 1)
    except FileNotFoundError:
        raise UsageError(f"no job record, {path} does not exist: {_NO_RECORD}") from None
    except NotADirectoryError:
        raise UsageError(f"no job record, {log_dir} is not a directory: {_NO_RECORD}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"not a job record, {path} is a symbolic link (topo writes launch.json as a "
                             f"file): {_NO_RECORD}") from None
        if exc.errno == errno.EINVAL:
            raise UsageError(f"not a job record, {path} is not a regular file (a FIFO, device or directory): "
                             f"{_NO_RECORD}") from None
        raise UsageError(f"unreadable job record, {path}: {exc.strerror}") from None
    if len(raw) > RECORD_LIMIT:
        raise UsageError(f"not a job record, {path} is {len(raw)}+ bytes, more than the {RECORD_LIMIT} a record "
                         f"can be; {_FIX}")
    from topo.loader import read_json  # bounded: a record of empty lists costs no more than its size

    try:
        return read_json(raw.decode("utf-8"))
    except ValueError as exc:
        raise UsageError(f"unreadable job record, {path}: {excerpt(str(exc) or type(exc).__name__)}; "
                         "was it written by topo launch?") from None


def _bad(path: str, what: str, fix: str = _FIX) -> UsageError:
    return UsageError(f"bad job record, {path}: {what}; {fix}")


def _check(path: str, data: dict, key: str, ok, what: str, fix: str = _FIX, required: bool = False):
    """data[key] when `ok(value)` or it is absent (None) and not `required`; else a UsageError."""
    value = data.get(key)
    if (value is not None or required) and not ok(value):
        raise _bad(path, f"{key} {excerpt(repr(value))} is not {what}", fix)
    return value


def _is_number(value) -> bool:
    # json reads Infinity and NaN too; bool is an int to isinstance
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _pid(path: str, data: dict, key: str, required: bool = False) -> int | None:
    """A recorded pid, from 1 to PID_MAX (a pid of -1 would reach every process through kill())."""
    return _check(path, data, key, lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= PID_MAX,
                  f"a process id from 1 to {PID_MAX}", required=required)


def _time(path: str, data: dict, key: str) -> float | None:
    """A recorded start time (a NaN would compare false with every process's)."""
    value = _check(path, data, key, lambda v: _is_number(v) and v >= 0, "a start time in seconds since the epoch")
    return None if value is None else float(value)


def check_not_running(log_dir: str, stop_hint: str) -> None:
    """UsageError when `log_dir` holds the record of a job whose recorded process still runs carrying
    its id: a second job there would overwrite its logs and record, hiding it from `topo stop
    stop_hint`. No usable record protects nothing."""
    path = os.path.join(log_dir, LAUNCH_JSON)
    try:
        record = read_record(log_dir, path, grace=False)
    except UsageError:
        return
    for p in record.processes:
        try:
            os.kill(p.pid, 0)
        except ProcessLookupError:
            continue  # a finished job's, the usual case: no psutil to import (benchmarks/launch_bench.py, N=8: ~10 ms)
        except PermissionError:
            pass
        import psutil

        with contextlib.suppress(psutil.Error):  # gone, or not ours to read
            if psutil.Process(p.pid).environ().get(JOB_ID_VAR) == record.job_id:
                raise UsageError(f"the log directory holds a running job, {path} (pid {p.pid}): stop it first "
                                 f"with `topo stop {stop_hint}`, or give another --log_dir")
