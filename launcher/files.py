"""The files the launcher writes in a log directory (logs, launch.json), written without following
a link topo did not make, and the check that the directory is not another running job's.

- a log is opened with O_NOFOLLOW: a symbolic link planted under the log's name (worker_0.log ->
  ~/.bashrc) is refused, never truncated through;
- launch.json is written to a temporary file of a unique name made with O_EXCL (tempfile.mkstemp),
  then renamed over the record, which replaces a link named launch.json instead of writing
  through it; two launchers never share a temporary name;
- a log directory whose launch.json names a job with a process still running (it carries the
  job's TOPO_JOB_ID in its environment) is refused, with the `topo stop` command to run first.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile

from topo.errors import UsageError

LAUNCH_JSON = "launch.json"
JOB_ID_VAR = "TOPO_JOB_ID"
RECORD_LIMIT = 16 << 20  # bytes of launch.json read at most: a job's record is far smaller
ENVIRON_LIMIT = 1 << 20  # bytes of /proc/PID/environ read at most (the kernel's ARG_MAX is 2 MiB)
MAX_RECORDED = 1 << 16  # processes of a record checked at most


class LogFileError(OSError):
    """A log could not be opened as a file topo may write."""


def open_log(path: str, mode: str = "w"):
    """A log file opened for writing ("w" truncates, "a" appends) without following a symbolic
    link at its name. OSError (ELOOP for a link) when it cannot be."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_APPEND if mode == "a" else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LogFileError(errno.ELOOP, "is a symbolic link; topo does not write through one", path) from None
        raise
    return os.fdopen(fd, mode)


def write_record(path: str, text: str) -> None:
    """Replace `path` with `text` at once: readers see the old record or the new, never half.
    The temporary file is this writer's own (O_EXCL, a random name), and the rename replaces a link
    at `path` rather than writing where it points."""
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=directory or ".")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_not_running(log_dir: str, stop_hint: str) -> None:
    """UsageError when `log_dir` holds the record of a job with a process still running: starting
    a second job there would overwrite its logs and record, and `topo stop` could no longer find
    it. `stop_hint` is the directory as the user should pass it to `topo stop`."""
    data = _read_record(os.path.join(log_dir, LAUNCH_JSON))
    if not isinstance(data, dict):
        return
    job_id = data.get("job_id")
    processes = data.get("processes")
    if not isinstance(job_id, str) or not job_id or not isinstance(processes, list):
        return
    marker = f"{JOB_ID_VAR}={job_id}".encode() + b"\0"
    for entry in processes[:MAX_RECORDED]:
        pid = entry.get("pid") if isinstance(entry, dict) else None
        if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < (1 << 22) and _carries(pid, marker):
            raise UsageError(f"the log directory holds a running job, {os.path.join(log_dir, LAUNCH_JSON)} "
                             f"(pid {pid}): stop it first with `topo stop {stop_hint}`, or give another --log_dir")


def _read_record(path: str) -> object:
    """The record's JSON, read bounded and without blocking or following a link; None when
    there is none or it is not a JSON file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, RECORD_LIMIT + 1)
    finally:
        os.close(fd)
    if len(data) > RECORD_LIMIT:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _carries(pid: int, marker: bytes) -> bool:
    """Whether process `pid` is alive (not a zombie) and has `marker` in its environment."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read(4096).rpartition(b")")[2].split()[:1]
        if state in ([b"Z"], [b"X"]):
            return False
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = b"\0" + fh.read(ENVIRON_LIMIT)
    except OSError:
        return False
    return b"\0" + marker in environ
