"""The files the launcher writes in a log directory (logs, launch.json), written without following
a link topo did not make.

- a log is opened with O_NOFOLLOW: a symbolic link planted under the log's name (worker_0.log ->
  ~/.bashrc) is refused, never truncated through;
- launch.json is written to a temporary file of a unique name made with O_EXCL (tempfile.mkstemp),
  then renamed over the record, which replaces a link named launch.json instead of writing
  through it; two launchers never share a temporary name;
"""

from __future__ import annotations

import errno
import os
import tempfile


LAUNCH_JSON = "launch.json"
JOB_ID_VAR = "TOPO_JOB_ID"


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
