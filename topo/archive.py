"""Reading a `topo capture` archive (or an hwloc test tarball) for `--root FILE`, and the names
under which a capture stores tool outputs.

The archive is hostile: its tar headers are read here block by block, decompressed stream by stream (gzip, xz,
bzip2, or none), each bound below checked before the work it limits; no member costs more than a few dict
look-ups and system calls. Members are written below a private temporary directory through directories topo
made and opened with O_NOFOLLOW, files created with O_EXCL|O_NOFOLLOW. Only files, directories and symlinks
are taken; a symlink's target must be relative, climb no higher than the unpack directory, have no later `..`
and pass through no other link, so every link resolves as its name reads, inside the copy.
"""

from __future__ import annotations

import functools
import os
import signal
import stat
import struct
import zlib
from typing import TYPE_CHECKING, Callable, Iterator

from topo.errors import ProbeError

if TYPE_CHECKING:
    from tempfile import TemporaryDirectory

TOOLS_DIR = "topo-capture"
# file name under topo-capture/ -> the command whose output it holds
TOOLS = {
    "lscpu.txt": ["lscpu"],
    "lscpu-parsable.txt": ["lscpu", "-p=CPU,CORE,SOCKET,NODE,CACHE"],
    "nvidia-smi-topo-m.txt": ["nvidia-smi", "topo", "-m"],
    "npu-smi-info.txt": ["npu-smi", "info"],
    "npu-smi-info-m.txt": ["npu-smi", "info", "-m"],
    "npu-smi-info-t-topo.txt": ["npu-smi", "info", "-t", "topo"],
}

# Bounds on an archive, each checked before the work it limits. A capture of a 1,000-CPU machine is
# some 40,000 members and a few MB unpacked; hwloc's test tarballs at most 11,500 members, 400 KB.
MAX_ARCHIVE = 64 << 20  # the archive file itself
MAX_UNPACKED = 128 << 20  # everything decompressed: headers, names and file data together
MAX_FILE = 32 << 20  # one file: the most topo reads of any (fsroot.PROCFS_LIMIT, /proc/cpuinfo)
MAX_MEMBERS = 100_000  # tar headers, pax records and directories made for members' names together
MAX_EXTENDED = 4096  # one pax header's or GNU long name's data
MAX_NAME = 1024  # a member's path or a symlink's target, bytes
MAX_DEPTH = 48  # directories above a member (sysfs PCI paths behind switches: about 20)
NAME_MAX = 255  # one path component, as every Linux filesystem
MAX_STREAMS = 4096  # gzip members, bzip2 or xz streams one after another (pbzip2 writes one per 900 KB)

BLOCK = 512
CHUNK = 1 << 16  # read from the archive, decompressed, written to a file at a time
_ZERO = bytes(BLOCK)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_TYPES = (b"0", b"\0", b"7")  # regular, old regular, contiguous (read as regular by every tar)
_NOT_TAR = "not a topo capture archive (not a tar archive, compressed or not)"
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
_ERRORS = (OSError, EOFError, zlib.error)  # what the decompressors raise on bad data (and lzma.LZMAError)


class _Stopped(BaseException):
    """A stop signal (its number) is waiting."""


def open_archive(path: str) -> tuple[TemporaryDirectory, str]:
    """A private temporary copy of the capture `path`, checked member by member, and the root to
    read in it (the archive's top folder when it has a single one holding sys/, as hwloc's have).
    The copy is removed with the TemporaryDirectory, and on every error or stop signal (SIGTERM,
    SIGHUP, SIGINT) while unpacking; the signal then takes its usual course."""
    import tempfile  # 5 ms or more at start-up (`python -S -X importtime`); only an archive needs it

    # Stop signals wait while unpacking, seen between members, so the copy is removed before one acts.
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        tmp = tempfile.TemporaryDirectory(prefix="topo-capture-")
        try:
            _unpack_file(path, tmp.name)
            _check_stop()
        except BaseException:
            tmp.cleanup()
            raise
    except _Stopped as stop:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)  # SIG_DFL ends the process here, SIGINT's raises
        raise ProbeError(f"{path}: unpacking stopped by {signal.Signals(stop.args[0]).name}") from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
    top = os.listdir(tmp.name)
    if "sys" not in top and len(top) == 1:
        inner = os.path.join(tmp.name, top[0])
        if not os.path.islink(inner) and os.path.isdir(os.path.join(inner, "sys")):
            return tmp, inner  # hwloc-gather-topology's layout: NAME/sys, NAME/proc
    return tmp, tmp.name


def _check_stop() -> None:
    """_Stopped when a stop signal this process does not ignore is waiting."""
    for sig in signal.sigpending() & _STOP_SIGNALS:
        if signal.getsignal(sig) not in (signal.SIG_IGN, None):
            raise _Stopped(sig)


def _unpack_file(path: str, dest: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    except OSError as exc:
        raise ProbeError(f"cannot read {path}: {exc.strerror}") from None
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ARCHIVE:
            raise ProbeError(f"{path}: not a topo capture archive (a file of at most {MAX_ARCHIVE >> 20} MiB); "
                             "make one with `topo capture FILE.tar.gz`")
        magic = f.read(6)
        f.seek(0)
        new, errors = None, _ERRORS  # bz2 and lzma are imported only here
        if magic[:2] == b"\x1f\x8b":
            new = functools.partial(zlib.decompressobj, 16 + zlib.MAX_WBITS)  # one gzip member
        elif magic[:3] == b"BZh":
            from bz2 import BZ2Decompressor as new
        elif magic == b"\xfd7zXZ\x00":
            from lzma import LZMADecompressor as new, LZMAError
            errors = (*_ERRORS, LZMAError)
        reader = _Reader(f, new, path, os.open(dest, _DIR))
        try:
            reader.unpack()
        except errors as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise ProbeError(f"{path}: cannot unpack ({reason.splitlines()[0][:100]}); "
                             "make a new one with `topo capture FILE.tar.gz`") from None
        finally:
            reader.tree.close()


class _Reader:
    """A tar stream read block by block, each header checked before its data is read."""

    def __init__(self, f, new: Callable | None, shown: str, root_fd: int) -> None:
        self.shown = shown
        self.chunks = self.decompressed(f, new) if new else iter(lambda: f.read(CHUNK), b"")
        self.buffer, self.pos = b"", 0
        self.read_so_far = self.members = 0
        self.tree = _Tree(root_fd, self.count)
        self.links: list[tuple[str, list[bytes]]] = []  # (a link's name, the directories its target passes)

    def error(self, what: str) -> ProbeError:
        return ProbeError(f"{self.shown}: {what}; a topo capture is made by `topo capture FILE.tar.gz`")

    def decompressed(self, f, new: Callable) -> Iterator[bytes]:
        """The data of the compressed streams in `f`, one after another (zero bytes between them
        allowed), in pieces of at most CHUNK bytes. An empty stream costs no unpacked byte, hence MAX_STREAMS."""
        data = f.read(CHUNK)
        for _ in range(MAX_STREAMS):
            decompressor, hungry = new(), False
            while not decompressor.eof:
                if hungry and not (data := f.read(CHUNK)):
                    raise EOFError("the compressed data ends early")
                out = decompressor.decompress(data, CHUNK)
                # zlib gives back the input it has not used; bz2 and lzma keep it and say when they need more
                data = getattr(decompressor, "unconsumed_tail", b"")
                hungry = getattr(decompressor, "needs_input", not data and len(out) < CHUNK)
                if out:
                    yield out
            data = decompressor.unused_data.lstrip(b"\0")
            while not data and (more := f.read(CHUNK)):
                data = more.lstrip(b"\0")
            if not data:
                return
        raise self.error(f"more than {MAX_STREAMS} compressed streams, more than any capture")

    def read(self, size: int, exact: bool = True) -> bytes:
        """The next `size` bytes, counted against MAX_UNPACKED first; fewer only at the end, unless `exact`."""
        self.read_so_far += size
        if self.read_so_far > MAX_UNPACKED:
            raise self.error(f"more than {MAX_UNPACKED >> 20} MiB unpacked, more than any capture")
        while len(self.buffer) - self.pos < size and (chunk := next(self.chunks, b"")):
            self.buffer, self.pos = self.buffer[self.pos:] + chunk, 0
        data = self.buffer[self.pos:self.pos + size]
        self.pos += len(data)
        if exact and len(data) != size:
            raise self.error("the archive ends in the middle of a member (truncated?)")
        return data

    def count(self) -> None:
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise self.error(f"more than {MAX_MEMBERS} members, more than any capture")

    def unpack(self) -> None:
        pax: dict[bytes, bytes] = {}
        gnu: dict[bytes, bytes] = {}  # GNU long name (L) and link target (K)
        while True:
            _check_stop()
            block = self.read(BLOCK, exact=False)
            if len(block) != BLOCK:
                if not block and self.members:
                    return self.check_links()  # the end without the two zero blocks, as tar accepts
                raise self.error(_NOT_TAR if not self.members else "the archive ends in a header (truncated?)")
            if block == _ZERO:
                return self.check_links()  # the end: nothing after it is read
            self.count()
            kind, size, name, link = self.header(block)
            if kind in (b"x", b"g", b"L", b"K"):
                if size > MAX_EXTENDED:
                    raise self.error(f"an extended header of {size} bytes (at most {MAX_EXTENDED})")
                data = self.read(size + -size % BLOCK)[:size]
                if kind == b"x":
                    pax = self.pax_records(data)
                elif kind != b"g":  # a global pax header changes nothing topo reads
                    gnu[kind] = data.split(b"\0", 1)[0]
                continue
            name = pax.get(b"path", gnu.get(b"L") or name)
            link = pax.get(b"linkpath", gnu.get(b"K") or link)
            if b"size" in pax:
                size = _decimal(pax[b"size"])
                if size is None:
                    raise self.error(f"pax size {pax[b'size'][:40]!r} is not a number")
            pax, gnu = {}, {}
            self.member(kind, name, link, size)

    def check_links(self) -> None:
        """No link names a path through another link (so each resolves as its name reads, inside):
        each target's directories are walked once down the record of those made, to the first that
        is not one (at most MAX_DEPTH + 1 look-ups), which must not be a link."""
        for shown, parts in self.links:
            node, depth = self.tree.made(parts)
            if depth < len(parts) and parts[depth] in node:  # not a directory made, but there: a link
                through = b"/".join(parts[:depth + 1])[:80].decode("utf-8", "replace")
                raise self.error(f"member {shown!r} is a link through the link {through!r}")

    def header(self, block: bytes) -> tuple[bytes, int, bytes, bytes]:
        """(type, size, name, link target) of a header block whose checksum is right."""
        checksum = _octal(block[148:156])
        # the sum of the bytes with the checksum field as spaces; some old tars summed signed bytes
        if checksum != sum(block) - sum(block[148:156]) + 256 and (
                checksum != sum(struct.unpack_from("148b8x356b", block)) + 256):
            raise self.error(_NOT_TAR)
        size = _size(block[124:136])
        if size is None:
            raise self.error("a member size that is not a number")
        name = block[:100].split(b"\0", 1)[0]
        # POSIX ustar: the prefix field continues the name
        if block[257:263] == b"ustar\0" and (prefix := block[345:500].split(b"\0", 1)[0]):
            name = prefix + b"/" + name
        return block[156:157], size, name, block[157:257].split(b"\0", 1)[0]

    def pax_records(self, data: bytes) -> dict[bytes, bytes]:
        """`LEN KEY=VALUE\\n` records; LEN is at most 5 digits (the data is at most MAX_EXTENDED)."""
        records, pos = {}, 0
        while pos < len(data) and data[pos]:
            space = data.find(b" ", pos, pos + 6)
            length = _decimal(data[pos:space]) if space > pos else None
            end = pos + length if length is not None else 0
            key, eq, value = data[space + 1:end - 1].partition(b"=")
            if end <= space + 2 or end > len(data) or data[end - 1] != 0x0A or not eq:
                raise self.error("a malformed pax header")
            self.count()
            records[key] = value
            pos = end
        return records

    def member(self, kind: bytes, name: bytes, link: bytes, size: int) -> None:
        shown = name[:80].decode("utf-8", "replace")
        parts = [p for p in name.split(b"/") if p not in (b"", b".")]
        if len(name) > MAX_NAME or len(link) > MAX_NAME or b"\0" in name or any(len(p) > NAME_MAX for p in parts):
            raise self.error(f"member {shown!r} has a name or link target longer than {MAX_NAME} bytes, or a "
                             f"part longer than {NAME_MAX}")
        if name.startswith(b"/") or b".." in parts:
            raise self.error(f"member {shown!r} points outside the archive")
        if len(parts) > MAX_DEPTH + 1:
            raise self.error(f"member {shown!r} lies more than {MAX_DEPTH} directories deep")
        if kind not in (*_FILE_TYPES, b"5", b"2"):
            raise self.error(f"member {shown!r} is not a file, directory or symlink")
        if kind in _FILE_TYPES and size > MAX_FILE:
            raise self.error(f"member {shown!r} is {size} bytes, more than a kernel writes in any "
                             f"file topo reads ({MAX_FILE >> 20} MiB)")
        if kind not in _FILE_TYPES and size:
            raise self.error(f"member {shown!r}, a directory or link, has data")
        if not parts:
            if kind == b"5":
                return  # the archive's "./" itself
            raise self.error("a member without a name")
        if kind == b"2":
            target = _link_target(parts[:-1], link)
            if target is None:
                raise self.error(f"member {shown!r} is a link to {link[:80].decode('utf-8', 'replace')!r}, "
                                 "which is absolute, empty or climbs out of the archive")
            self.links.append((shown, target[:-1][:MAX_DEPTH + 1]))  # the directories it passes, as deep as any can be
        if kind == b"5" and self.tree.made(parts)[1] == len(parts):
            return  # a directory made already (a directory may repeat): no system call
        leaf = parts[-1]
        try:
            parent, node = self.tree.parent(parts[:-1])
            if kind == b"5":
                os.close(self.tree.mkdir(parent, leaf))
                node[leaf] = {}
            elif kind == b"2":
                os.symlink(link, leaf, dir_fd=parent)
                node[leaf] = None
            else:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                with open(os.open(leaf, flags, 0o600, dir_fd=parent), "wb") as out:
                    for left in range(size, 0, -CHUNK):
                        out.write(self.read(min(left, CHUNK)))
                self.read(-size % BLOCK)
        except FileExistsError:
            raise self.error(f"member {shown!r} is there already (the same member twice, or a link of its "
                             "name)") from None
        except NotADirectoryError:
            raise self.error(f"member {shown!r} lies below a link or a file") from None


class _Tree:
    """The unpack directory. Each directory in it is made by topo, opened with O_NOFOLLOW and
    recorded in `dirs` (names -> a directory's own dict, or None for a link); nothing is removed or
    renamed while unpacking, so a recorded directory is opened by its whole path, one system call at
    any depth. Each directory made for a member's name counts as a member (one name could make 48)."""

    def __init__(self, root_fd: int, count: Callable[[], None]) -> None:
        self.root_fd, self.count = root_fd, count
        self.dirs: dict[bytes, dict | None] = {}
        self.last: tuple[list[bytes], int, dict] = ([], os.dup(root_fd), self.dirs)  # the last directory opened

    def made(self, parts: list[bytes]) -> tuple[dict, int]:
        """The record of the deepest directory made along `parts`, and how many parts lead to it."""
        node = self.dirs
        for depth, name in enumerate(parts):
            below = node.get(name)
            if below is None:
                return node, depth
            node = below
        return node, len(parts)

    def parent(self, dirs: list[bytes]) -> tuple[int, dict]:
        """The descriptor and record of the directory `dirs` below the root, made where missing."""
        if dirs == self.last[0]:
            return self.last[1:]
        node, depth = self.made(dirs)
        fd = os.open(b"/".join(dirs[:depth]) or b".", _DIR, dir_fd=self.root_fd)
        try:
            for name in dirs[depth:]:
                self.count()
                below = self.mkdir(fd, name)
                os.close(fd)
                fd, node = below, node.setdefault(name, {})
        except BaseException:
            os.close(fd)
            raise
        os.close(self.last[1])
        self.last = (dirs, fd, node)
        return fd, node

    @staticmethod
    def mkdir(parent: int, name: bytes) -> int:
        """The descriptor of the directory `name` in `parent`, made if missing; NotADirectoryError: a link, a file."""
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        try:
            return os.open(name, _DIR, dir_fd=parent)
        except OSError as exc:
            raise NotADirectoryError from exc  # ELOOP: a link; ENOTDIR: a file

    def close(self) -> None:
        os.close(self.last[1])
        os.close(self.root_fd)


def _link_target(directory: list[bytes], target: bytes) -> list[bytes] | None:
    """The path below the unpack directory that a link in `directory` to `target` names; None when
    absolute, empty, with a `..` after a name, or more leading `..` than `directory` has parts."""
    parts = [p for p in target.split(b"/") if p not in (b"", b".")]
    ups = 0
    while ups < len(parts) and parts[ups] == b"..":
        ups += 1
    if not target or target.startswith(b"/") or b"\0" in target or ups > len(directory) or b".." in parts[ups:]:
        return None
    return directory[:len(directory) - ups] + parts[ups:]


def _octal(field: bytes) -> int | None:
    text = field.split(b"\0", 1)[0].strip(b" ")
    return None if text.translate(None, b"01234567") else int(text or b"0", 8)


def _size(field: bytes) -> int | None:
    """A size field: octal, or GNU's base-256 (first byte 0x80) for files of 8 GiB and more."""
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    return None if field[0] == 0xFF else _octal(field)


def _decimal(text: bytes) -> int | None:
    """ASCII digits, at most 20 (a pax size or record length), else None."""
    return int(text) if 0 < len(text) <= 20 and text.isdigit() else None
