"""Reading a `topo capture` archive (or an hwloc test tarball) for `--root FILE`, and the names
under which a capture stores tool outputs.

The archive is hostile until read: its tar headers are read here block by block through the
standard library's decompressors (gzip, xz, bzip2, or none), and every bound below is checked
before the work it limits. Members are written below a private temporary directory through
directory descriptors opened with O_NOFOLLOW, files created with O_EXCL|O_NOFOLLOW, so no member
is written through a link, whatever an earlier member planted. Only files, directories and
symlinks are taken; a symlink's target must be relative, climb (with leading `..`) no higher than
the unpack directory, have no `..` after its first name and pass through no other link. Every
link then resolves as its name reads, inside the copy: from its own directory, a real one (no
member lies below a link), through real directories.
"""

from __future__ import annotations

import os
import signal
import stat
import struct
import threading
import zlib
from typing import TYPE_CHECKING

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
MAX_MEMBERS = 100_000  # tar headers and pax records together
MAX_EXTENDED = 4096  # one pax header's or GNU long name's data
MAX_NAME = 1024  # a member's path or a symlink's target, bytes
MAX_DEPTH = 48  # directories above a member (sysfs PCI paths behind switches: about 20)
NAME_MAX = 255  # one path component, as every Linux filesystem

BLOCK = 512
_ZERO = bytes(BLOCK)
_FILE_TYPES = (b"0", b"\0", b"7")  # regular, old regular, contiguous (read as regular by every tar)
_NOT_TAR = "not a topo capture archive (not a tar archive, compressed or not)"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class _Stopped(BaseException):
    """A stop signal arrived while unpacking."""


def open_archive(path: str) -> tuple[TemporaryDirectory, str]:
    """A private temporary copy of the capture `path`, checked member by member, and the root to
    read in it (the archive's top folder when it has a single one holding sys/, as hwloc's have).
    The copy is removed when the TemporaryDirectory is, and on every error or stop signal
    (SIGTERM, SIGHUP, SIGINT) while unpacking; the signal then takes its usual course."""
    # Imported here, as the decompressors are below: tempfile (with shutil) costs 5 ms or more at
    # start-up (`python -S -X importtime`), and only an archive needs it.
    import tempfile

    with _StopSignals(path) as stop:
        tmp = tempfile.TemporaryDirectory(prefix="topo-capture-")
        try:
            _unpack_file(path, tmp.name, stop)
            stop.release()
        except BaseException:
            tmp.cleanup()
            raise
    top = os.listdir(tmp.name)
    if "sys" not in top and len(top) == 1:
        inner = os.path.join(tmp.name, top[0])
        if not os.path.islink(inner) and os.path.isdir(os.path.join(inner, "sys")):
            return tmp, inner  # hwloc-gather-topology's layout: NAME/sys, NAME/proc
    return tmp, tmp.name


class _StopSignals:
    """While unpacking, a stop signal is only noted, and acted on between members (so the copy is
    removed before anything else happens); then the previous handlers come back and the signal is
    raised again. Main thread only (Python's rule); an ignored signal stays ignored."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.signum: int | None = None
        self.saved: dict[int, object] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in _STOP_SIGNALS:
                if signal.getsignal(sig) not in (signal.SIG_IGN, None):
                    self.saved[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise _Stopped

    def release(self) -> None:
        """The previous handlers back; _Stopped if a signal came."""
        self._restore()
        self.check()

    def _restore(self) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        self.saved = {}

    def __exit__(self, exc_type, exc, tb) -> None:
        self._restore()
        if self.signum is not None:
            signal.raise_signal(self.signum)  # SIG_DFL ends the process here; SIGINT's raises KeyboardInterrupt
            raise ProbeError(f"{self.shown}: unpacking stopped by {signal.Signals(self.signum).name}")


def _unpack_file(path: str, dest: str, stop: _StopSignals) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    except OSError as exc:
        raise ProbeError(f"cannot read {path}: {exc.strerror}") from None
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ARCHIVE:
            raise ProbeError(f"{path}: not a topo capture archive (a file of at most {MAX_ARCHIVE >> 20} MiB); "
                             "make one with `topo capture FILE.tar.gz`")
        stream, errors = _decompressed(f)
        root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        tree = _Tree(root_fd)
        try:
            _Reader(stream, path).unpack(tree, stop)
        except errors as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise ProbeError(f"{path}: cannot unpack ({reason.splitlines()[0][:100]}); "
                             "make a new one with `topo capture FILE.tar.gz`") from None
        finally:
            tree.close()


def _decompressed(f) -> tuple[object, tuple[type[BaseException], ...]]:
    """The file's tar stream (gzip, bzip2, xz or none, told by the first bytes) and the errors its
    decompressor raises on bad data. Each decompressor is imported when an archive needs it."""
    magic = f.read(6)
    f.seek(0)
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
    if magic[:2] == b"\x1f\x8b":
        import gzip

        return gzip.GzipFile(fileobj=f, mode="rb"), errors
    if magic[:3] == b"BZh":
        import bz2

        return bz2.BZ2File(f), errors
    if magic == b"\xfd7zXZ\x00":
        import lzma

        return lzma.LZMAFile(f), (*errors, lzma.LZMAError)
    return f, errors  # a plain tar, or not an archive: the first header's checksum tells


class _Reader:
    """A tar stream read block by block, each header checked before its data is read."""

    def __init__(self, stream, shown: str) -> None:
        self.stream, self.shown = stream, shown
        self.read_so_far = 0
        self.members = 0
        self.links: dict[tuple[bytes, ...], tuple[bytes, ...]] = {}  # link -> the path it names

    def error(self, what: str) -> ProbeError:
        return ProbeError(f"{self.shown}: {what}; a topo capture is made by `topo capture FILE.tar.gz`")

    def read(self, size: int) -> bytes:
        """Exactly `size` bytes, counted against MAX_UNPACKED before they are read."""
        self.read_so_far += size
        if self.read_so_far > MAX_UNPACKED:
            raise self.error(f"more than {MAX_UNPACKED >> 20} MiB unpacked, more than any capture")
        data = self.stream.read(size)
        if len(data) != size:
            raise self.error("the archive ends in the middle of a member (truncated?)")
        return data

    def count(self, n: int = 1) -> None:
        self.members += n
        if self.members > MAX_MEMBERS:
            raise self.error(f"more than {MAX_MEMBERS} members, more than any capture")

    def unpack(self, tree: _Tree, stop: _StopSignals) -> None:
        pax: dict[bytes, bytes] = {}
        long_name = long_link = None
        while True:
            stop.check()
            block = self.stream.read(BLOCK)
            if len(block) != BLOCK:
                if not block and self.members:
                    return self.check_links()  # the end without the two zero blocks, as tar accepts
                raise self.error(_NOT_TAR if not self.members else "the archive ends in a header (truncated?)")
            if block == _ZERO:
                return self.check_links()  # the end: nothing after it is read
            self.read_so_far += BLOCK
            self.count()
            kind, size, name, link = self.header(block)
            if kind in (b"x", b"g", b"L", b"K"):
                if size > MAX_EXTENDED:
                    raise self.error(f"an extended header of {size} bytes (at most {MAX_EXTENDED})")
                data = self.read(_padded(size))[:size]
                if kind == b"x":
                    pax = self.pax_records(data)
                elif kind == b"L":
                    long_name = data.split(b"\0", 1)[0]
                elif kind == b"K":
                    long_link = data.split(b"\0", 1)[0]
                continue  # a global pax header (g) changes nothing topo reads
            name = pax.get(b"path", long_name or name)
            link = pax.get(b"linkpath", long_link or link)
            if b"size" in pax:
                size = _decimal(pax[b"size"])
                if size is None:
                    raise self.error(f"pax size {pax[b'size'][:40]!r} is not a number")
            pax, long_name, long_link = {}, None, None
            self.member(tree, kind, name, link, size)

    def check_links(self) -> None:
        """No link names a path through another link (so each resolves as its name reads, inside)."""
        for link, target in self.links.items():
            for end in range(1, len(target)):
                if target[:end] in self.links:
                    shown = b"/".join(link)[:80].decode("utf-8", "replace")
                    through = b"/".join(target[:end])[:80].decode("utf-8", "replace")
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
        if block[257:263] == b"ustar\0":  # POSIX ustar: the prefix field continues the name
            prefix = block[345:500].split(b"\0", 1)[0]
            if prefix:
                name = prefix + b"/" + name
        return block[156:157], size, name, block[157:257].split(b"\0", 1)[0]

    def pax_records(self, data: bytes) -> dict[bytes, bytes]:
        """`LEN KEY=VALUE\\n` records; LEN is at most 5 digits (the data is at most MAX_EXTENDED)."""
        records, pos = {}, 0
        while pos < len(data) and data[pos]:
            space = data.find(b" ", pos, pos + 6)
            length = _decimal(data[pos:space]) if space > pos else None
            end = pos + length if length is not None else 0
            if end <= space + 2 or end > len(data) or data[end - 1] != 0x0A:
                raise self.error("a malformed pax header")
            key, eq, value = data[space + 1:end - 1].partition(b"=")
            if not eq:
                raise self.error("a malformed pax header")
            self.count()
            records[key] = value
            pos = end
        return records

    def member(self, tree: _Tree, kind: bytes, name: bytes, link: bytes, size: int) -> None:
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
        if kind in _FILE_TYPES:
            if size > MAX_FILE:
                raise self.error(f"member {shown!r} is {size} bytes, more than a kernel writes in any "
                                 f"file topo reads ({MAX_FILE >> 20} MiB)")
        elif size:
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
            self.links[tuple(parts)] = target
        try:
            parent = tree.parent(parts[:-1])
            leaf = parts[-1]
            if kind == b"5":
                tree.mkdir(parent, leaf)
            elif kind == b"2":
                os.symlink(link, leaf, dir_fd=parent)
            else:
                fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=parent)
                try:
                    left = size
                    while left:
                        chunk = memoryview(self.read(min(left, 1 << 16)))
                        left -= len(chunk)
                        while chunk:
                            chunk = chunk[os.write(fd, chunk):]
                finally:
                    os.close(fd)
                if size % BLOCK:
                    self.read(BLOCK - size % BLOCK)
        except FileExistsError:
            raise self.error(f"member {shown!r} is there already (the same member twice, or a link of its "
                             "name)") from None
        except (NotADirectoryError, _BelowLink):
            raise self.error(f"member {shown!r} lies below a link or a file") from None


class _BelowLink(Exception):
    pass


class _Tree:
    """The unpack directory, reached through directory descriptors opened with O_NOFOLLOW: the
    descriptors of the last member's directories are kept, so a member is one system call or two."""

    def __init__(self, root_fd: int) -> None:
        self.fds = [root_fd]
        self.names: list[bytes] = []

    def parent(self, dirs: list[bytes]) -> int:
        """The descriptor of the directory `dirs` below the root, made where missing."""
        keep = 0
        while keep < len(dirs) and keep < len(self.names) and dirs[keep] == self.names[keep]:
            keep += 1
        for fd in self.fds[keep + 1:]:
            os.close(fd)
        del self.fds[keep + 1:], self.names[keep:]
        for name in dirs[keep:]:
            try:
                fd = self.open_dir(name)
            except FileNotFoundError:
                self.mkdir(self.fds[-1], name)
                fd = self.open_dir(name)
            self.fds.append(fd)
            self.names.append(name)
        return self.fds[-1]

    def open_dir(self, name: bytes) -> int:
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fds[-1])
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _BelowLink from exc  # ELOOP: a link; ENOTDIR: a file

    @staticmethod
    def mkdir(parent: int, name: bytes) -> None:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                raise _BelowLink from None  # a link or a file took the directory's name

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds, self.names = [], []


def _link_target(directory: list[bytes], target: bytes) -> tuple[bytes, ...] | None:
    """The path below the unpack directory that a link in `directory` to `target` names, or None
    when it names none: absolute, empty, a `..` after a name, or more leading `..` than `directory`
    has parts."""
    parts = [p for p in target.split(b"/") if p not in (b"", b".")]
    ups = 0
    while ups < len(parts) and parts[ups] == b"..":
        ups += 1
    if not target or target.startswith(b"/") or b"\0" in target or ups > len(directory) or b".." in parts[ups:]:
        return None
    return (*directory[:len(directory) - ups], *parts[ups:])


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _octal(field: bytes) -> int | None:
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if text.translate(None, b"01234567"):
        return None
    return int(text, 8)


def _size(field: bytes) -> int | None:
    """A size field: octal, or GNU's base-256 (first byte 0x80) for files of 8 GiB and more."""
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    return None if field[0] == 0xFF else _octal(field)


def _decimal(text: bytes) -> int | None:
    """ASCII digits, at most 20 (a pax size or record length), else None."""
    return int(text) if 0 < len(text) <= 20 and text.isdigit() else None
