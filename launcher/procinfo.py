"""Reading one process's files in /proc, bounded and without blocking: what `topo stop` checks
before it signals a process and what `topo ps` reports.

Every reader takes the proc root (normally "/proc") so tests can hand it a fake tree. A process
that is gone raises ProcessGone, one that cannot be read (another user's) raises AccessDenied.
"""

from __future__ import annotations

import errno
import os
import stat

# /proc/PID/environ holds at most the exec'd environment: the kernel caps argv plus envp at a
# quarter of the stack limit (2 MiB with the usual 8 MiB stack); 4 MiB leaves room for larger stacks.
ENVIRON_LIMIT = 4 << 20
# stat, status, Cpus_allowed_list: well under a page each, even with 8192 CPUs (a ~20 KB cpulist).
SMALL_LIMIT = 256 << 10
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ProcError(Exception):
    """A process's file could not be read."""


class ProcessGone(ProcError):
    """The process has exited (its /proc directory is gone)."""


class AccessDenied(ProcError):
    """The process's file exists but this user cannot read it (another user's process)."""


class TooLong(ProcError):
    """The file is longer than the limit it was read with."""


def read_bounded(path: str, limit: int, *, cut: bool = False) -> bytes:
    """The bytes of the regular file at `path`, at most `limit`: opened without following a last
    link and without blocking, refused unless it is a regular file (procfs files are). Longer
    than `limit`: TooLong, or with `cut` its first `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
        raise ProcessGone(path) from None
    except PermissionError:
        raise AccessDenied(path) from None
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise ProcessGone(path) from None
        raise ProcError(f"{path}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProcError(f"{path} is not a regular file")
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except PermissionError:
        raise AccessDenied(path) from None
    except OSError as exc:
        if exc.errno == errno.ESRCH:  # the process exited between open and read
            raise ProcessGone(path) from None
        raise ProcError(f"{path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if got > limit:
        if not cut:
            raise TooLong(f"{path} is longer than {limit} bytes")
        return data[:limit]
    return data


def stat_fields(proc: str, pid: int, tid: int | None = None) -> list[str]:
    """/proc/PID/stat (or .../task/TID/stat) split into fields, numbered as in proc(5) from 1:
    fields[0] is the pid, fields[1] the name without its parentheses, fields[2] the state. The
    name may hold spaces and ")", so it ends at the last ")"."""
    path = f"{proc}/{pid}/stat" if tid is None else f"{proc}/{pid}/task/{tid}/stat"
    text = read_bounded(path, SMALL_LIMIT).decode("ascii", "replace")
    head, sep, rest = text.rpartition(")")
    first, _, name = head.partition(" (")
    fields = [first.strip(), name] + rest.split()
    if not sep or len(fields) < 22 or not all(fields[i].isdigit() for i in (0, 21)):
        raise ProcError(f"{path}: not a stat line the kernel writes")
    return fields


def boot_time(proc: str = "/proc") -> float:
    """Seconds since the epoch at boot: the btime line of /proc/stat (what psutil uses too)."""
    for line in read_bounded(f"{proc}/stat", 32 << 20).decode("ascii", "replace").splitlines():
        if line.startswith("btime "):
            value = line.split()[1]
            if value.isdigit():
                return float(value)
    raise ProcError(f"{proc}/stat has no btime line")


def start_ticks(proc: str, pid: int) -> int:
    """The process's start time in clock ticks after boot (field 22 of /proc/PID/stat): with the
    pid, it names one process for the life of the machine."""
    return int(stat_fields(proc, pid)[21])


def create_time(proc: str, pid: int, booted: float) -> float:
    """The start time in seconds since the epoch, as psutil's Process.create_time() gives it
    (and as launch.json records it)."""
    return booted + start_ticks(proc, pid) / CLOCK_TICKS


def environ_has(proc: str, pid: int, name: str, value: str) -> bool:
    """Whether NAME=VALUE is in the process's environment as exec'd (/proc/PID/environ, read up
    to ENVIRON_LIMIT; a longer one counts as not having it: nothing is proven by half a file)."""
    try:
        data = read_bounded(f"{proc}/{pid}/environ", ENVIRON_LIMIT)
    except TooLong:
        return False
    return f"{name}={value}".encode() in data.split(b"\0")


def status_fields(proc: str, pid: int) -> dict[str, str]:
    """/proc/PID/status as name -> value text."""
    fields = {}
    for line in read_bounded(f"{proc}/{pid}/status", SMALL_LIMIT).decode("ascii", "replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value.strip()
    return fields


def pids(proc: str = "/proc") -> list[int]:
    """Every process id listed in the proc root, ascending."""
    try:
        names = os.listdir(proc)
    except OSError as exc:
        raise ProcError(f"cannot list {proc}: {exc.strerror}") from None
    return sorted(int(n) for n in names if n.isascii() and n.isdigit())
