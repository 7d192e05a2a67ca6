"""Reading files below one filesystem root, like hwloc's HWLOC_FSROOT: a directory, or a `topo capture`
archive (read from a private temporary copy, `topo.archive`). Probes never touch an absolute path
themselves, so a captured machine and the live one are read by one code. Reads are strict, as
psutil's are: a file that exists but cannot be read, is not a regular file (a FIFO would block, a
device never ends) or is longer than any kernel writes is an error naming it; only what the kernel
does to some attributes (EINVAL, EIO, ENODEV on read) counts as absent.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Callable

from topo.archive import open_archive
from topo.cpuset import CpuSet, excerpt
from topo.numbers import ascii_number
from topo.errors import ParseError, ProbeError

# Kernel sysfs attributes are at most one page (4 KiB), except cpulists and masks, which recent
# kernels write without that limit: the longest cpulist of 8192 CPUs (the largest NR_CPUS) is
# "0,2,4,...,8190", about 20 KB, and its mask 2,304 bytes. 64 KiB holds either with room.
SYSFS_LIMIT = 64 << 10
# procfs tables grow with the machine: /proc/cpuinfo takes about 1.5 KB per CPU on x86 (the flags
# line), 12 MB for 8192 CPUs; /proc/self/mounts grows with the container's mounts.
PROCFS_LIMIT = 32 << 20
# A tool's output (lscpu, npu-smi, nvidia-smi), run or stored in a capture: `lscpu -e` prints some
# 80 bytes a CPU, 650 KB for 8192 CPUs. A tool writing more is stopped (topo.probes.tools).
TOOL_OUTPUT_LIMIT = 4 << 20
# The widest whole number read_int takes: a u64, as memory-side cache sizes in bytes are. Ids
# (core_id, physical_package_id, die_id, numa_node) are ints, -1 where the platform gives none.
SYSFS_INT_MAX = (1 << 64) - 1
_LIMITS = {"sys": SYSFS_LIMIT, "proc": PROCFS_LIMIT}  # by a path's top directory; else TOOL_OUTPUT_LIMIT
_READ_AS_ABSENT = (errno.EINVAL, errno.EIO, errno.ENODEV, errno.ENXIO, errno.EAGAIN)
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def file_kind(mode: int) -> str | None:
    """What a file that is neither a regular one nor a link is, for messages: "a FIFO", ...; else None."""
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class FsRoot:
    __slots__ = ("root", "_prefix", "_shown", "_tmp", "_parsed")

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        root = os.fspath(root) if root else "/"
        self.root = os.path.abspath(root)
        self._tmp = None
        # (parser, text) -> CpuSet: the sibling masks of one core or package, and the sharing
        # maps of a shared cache, are the same text in every CPU's file; each is parsed once.
        self._parsed: dict[tuple[Callable[[str], CpuSet], str], CpuSet] = {}
        if os.path.isfile(root):
            self._tmp, self._prefix = open_archive(root)  # the copy is removed with this object
            self._shown = self.root + ":"
        elif os.path.isdir(root):
            self._prefix = self._shown = "" if self.root == "/" else self.root
        else:
            raise ProbeError(f"topology root {root!r} is neither a directory nor a `topo capture` archive")

    @property
    def is_this_system(self) -> bool:
        return self.root == "/"

    def path(self, path: str) -> str:
        """The real path of an absolute path inside the root (for the OS, not for messages)."""
        return self._prefix + path

    def shown(self, path: str) -> str:
        """How messages name a file: its real path, or ARCHIVE:/sys/... inside a capture."""
        return self._shown + path

    def exists(self, path: str) -> bool:
        """Whether `path` exists; one that cannot be looked at (EACCES, ELOOP) is an error."""
        try:
            os.stat(self._prefix + path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise ProbeError(f"cannot look at {self.shown(path)}: {exc.strerror}") from None
        return True

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(self._prefix + path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise ProbeError(f"cannot list {self.shown(path)}: {exc.strerror}") from exc

    def readlink(self, path: str) -> str | None:
        """A symlink's target as stored, or None when `path` is not a symlink."""
        try:
            return os.readlink(self._prefix + path)
        except OSError:
            return None

    def link_name(self, path: str) -> str | None:
        """The last component of a symlink's target (a PCI function's driver), or None."""
        target = self.readlink(path)
        return None if target is None else os.path.basename(target)

    def read(self, path: str, default: str | None = None) -> str | None:
        """The file's text, stripped (of NUL bytes too: the kernel pads a few attributes so);
        `default` when it does not exist. Errors as for read_bytes."""
        data = self.read_bytes(path)
        return default if data is None else data.decode("utf-8", "replace").strip(" \t\r\n\x00")

    def read_bytes(self, path: str, prefix: int | None = None) -> bytes | None:
        """The file's bytes, or only its first `prefix` bytes (a PCI function's `config` header);
        None when it does not exist, or exists but fails with EINVAL/EIO/ENODEV (some firmware files),
        as hwloc treats them. A permission error, a directory, FIFO, socket or device where a file
        belongs, or a file longer than its limit (_LIMITS) is an error naming the path.

        Below /sys, a first read shorter than a page is a whole attribute (the kernel writes one in a
        single read), taken as it is, as hwloc reads it; anything else is checked to be a regular file
        (an fstat) and read to its end. benchmarks/discovery_bench.py, in-process discovery of
        128arm-2pa2n8cluster4co: 28 ms so, 36 ms checking every file (lstopo: 27 ms)."""
        top = path.partition("/")[2].partition("/")[0]  # "sys" of "/sys/...", "" of a relative path
        limit = prefix if prefix is not None else _LIMITS.get(top, TOOL_OUTPUT_LIMIT)
        try:
            fd = os.open(self._prefix + path, os.O_RDONLY | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            mode = stat.S_IFREG
            if exc.errno == errno.ENXIO:  # a socket, or a device without its driver
                with contextlib.suppress(OSError):
                    mode = os.stat(self._prefix + path).st_mode
            return self._failed(path, mode, exc)
        try:
            chunks = [os.read(fd, limit + 1)]
            size = len(chunks[0])
            if not (path.startswith("/sys/") and 0 < size < 4096):
                self._check_regular(path, os.fstat(fd).st_mode)
                while chunks[-1] and size <= limit:
                    chunks.append(os.read(fd, limit + 1 - size))
                    size += len(chunks[-1])
        except OSError as exc:
            return self._failed(path, os.fstat(fd).st_mode, exc)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if size > limit:
            if prefix is not None:
                return data[:prefix]
            raise ProbeError(f"{self.shown(path)} is longer than {limit} bytes, more than a kernel writes "
                             "there (a corrupted capture?)")
        return data

    def _check_regular(self, path: str, mode: int) -> None:
        kind = file_kind(mode)
        if kind is not None:
            raise ProbeError(f"{self.shown(path)} is {kind}, not a file (read a captured machine's copy of "
                             "/sys and /proc)")

    def _failed(self, path: str, mode: int, exc: OSError) -> None:
        """None where the kernel's error counts as absent; else an error naming the file (dropping
        it would yield a wrong topology)."""
        self._check_regular(path, mode)
        if exc.errno not in _READ_AS_ABSENT:
            raise ProbeError(f"cannot read {self.shown(path)}: {exc.strerror} "
                             "(run topo as a user who can read it, or read a readable copy)") from None

    def read_int(self, path: str, default: int | None = None) -> int | None:
        """The file's whole number: ASCII digits, "-" before them for the kernel's -1 (an unknown id),
        at most SYSFS_INT_MAX; `default` when the file is absent or empty; an error naming the file
        for anything else ("١", "0x10", 5000 digits)."""
        text = self.read(path)
        if not text:
            return default
        negative = text[0] == "-"
        value = ascii_number(text[1:] if negative else text, SYSFS_INT_MAX)
        if value is None:
            raise ProbeError(f"{self.shown(path)}: expected a whole number of at most {len(str(SYSFS_INT_MAX))} "
                             f"digits, found {excerpt(text, 40)!r}, which no kernel writes there "
                             "(capture the machine again)")
        return -value if negative else value

    def read_cpulist(self, path: str) -> CpuSet | None:
        return self._read_parsed(path, CpuSet.parse)

    def read_set(self, list_path: str, mask_path: str | None = None) -> CpuSet | None:
        """A hex-mask file, else its cpulist sibling: the mask first, as hwloc reads it (where a fake
        or buggy dump has both and they disagree, lstopo's answer is the mask's)."""
        found = self._read_parsed(mask_path, CpuSet.parse_mask) if mask_path else None
        return found if found is not None else self.read_cpulist(list_path)

    def _read_parsed(self, path: str, parse: Callable[[str], CpuSet]) -> CpuSet | None:
        text = self.read(path)
        if text is None:
            return None
        found = self._parsed.get((parse, text))
        if found is None:
            try:
                found = self._parsed[parse, text] = parse(text)
            except ParseError as exc:
                raise ProbeError(f"{self.shown(path)}: {exc}") from None
        return found
