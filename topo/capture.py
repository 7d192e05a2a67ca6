"""`topo capture`: this machine's topology files in one archive, like hwloc's hwloc-gather-topology.

Discovery runs over a recording root (as the process sees the machine, then with everything disallowed);
every file it read, directory it listed and symlink on the way is stored at its path, with cpuinfo,
meminfo, mounts and self/status; under `topo-capture/`, tool outputs (topo.archive.TOOLS) and what NVML
said (nvml.json), which a replay reads back as the live machine's. Nothing private: no process environment
or command line, of the kernel's command line only its numa= options, nothing under /etc, no file longer
than a kernel writes.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
import time

from topo import __version__
from topo.archive import TOOLS, TOOLS_DIR
from topo.discovery import discover
from topo.errors import ProbeError, TopoError
from topo.fsroot import FsRoot
from topo.probes import nvml
from topo.probes.devices import vendor_absent
from topo.probes.tools import ToolNotFound, run_tool

EXTRA_FILES = ("/proc/cmdline", "/proc/cpuinfo", "/proc/meminfo", "/proc/mounts", "/proc/self/status")
# Never stored, whatever discovery reads: path components naming a process's environment, command
# line, memory or open files, and the trees holding host keys and users' files. Of /proc/cmdline
# only the numa= options discovery reads are stored (the rest can name hosts, ports and tokens).
_PRIVATE_NAMES = frozenset({"environ", "cmdline", "mem", "maps", "smaps", "fd", "keys", "auxv"})
_PRIVATE_TREES = ("/etc/", "/root/", "/home/", "/var/")


class _Recorder(FsRoot):
    """An FsRoot of this machine that notes every path discovery looks at."""

    def __init__(self, root: str | os.PathLike) -> None:
        super().__init__(root)
        self.seen: set[str] = set()  # read or looked up
        self.listed: set[str] = set()
        self.links: set[str] = set()  # read as links: the link is stored, not what it points to

    def read_bytes(self, path, prefix=None):  # read() comes here too
        self.seen.add(path)
        return super().read_bytes(path, prefix)

    def exists(self, path):
        self.seen.add(path)
        return super().exists(path)

    def listdir(self, path):
        self.listed.add(path)
        return super().listdir(path)

    def readlink(self, path):
        self.links.add(path)
        return super().readlink(path)


def capture(dest: str | os.PathLike, *, root: str | os.PathLike = "/", run_tools: bool = True,
            live_probes: bool = False) -> list[str]:
    """Write the archive `dest` (.tar.gz) of the machine below `root` (this one by default);
    returns the notes on what could not be stored. The archive is written to a new temporary file
    beside `dest` (O_EXCL|O_NOFOLLOW, a name unique to this writer) and renamed onto `dest`: a
    link planted at either name is replaced, never followed. With `run_tools`, NVML is asked
    on this machine, or with `live_probes` below any root (a built root with a stand-in NVML)."""
    recorder = _Recorder(root)
    if recorder.root != "/" and not os.path.isdir(recorder.root):
        raise ProbeError(f"{root}: capture a directory, not an archive")
    topology = discover(recorder, probes=())
    discover(recorder, include_disallowed=True, probes=())
    dest = os.fspath(dest)
    notes: list[str] = []
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.", suffix=".tmp",
                                   dir=os.path.dirname(os.path.abspath(dest)))
        with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w:gz", compresslevel=6) as tar:
            writer = _Writer(tar, recorder, notes)
            for path in sorted(recorder.seen | recorder.listed | set(EXTRA_FILES)):
                writer.store(path, list_it=path in recorder.listed)
            for path in sorted(recorder.links):
                parent, _, name = path.rpartition("/")
                real = writer.store(parent)
                if real and os.path.islink(writer.base + os.path.join(real, name)):
                    writer.link(os.path.join(real, name))  # a driver link: its name is what is read
            tools = _tool_outputs(notes) if run_tools and recorder.is_this_system else {}
            for name, text in tools.items():
                writer.add(f"{TOOLS_DIR}/{name}", data=text.encode())
            asked = run_tools and (recorder.is_this_system or live_probes) and not vendor_absent(topology, "nvidia")
            if asked:
                writer.add(nvml.STORED, data=nvml.report_json(nvml.probe_for(topology)).encode())
            writer.add(f"{TOOLS_DIR}/README.txt", data=_readme(tools, notes, asked).encode())
        os.replace(tmp, dest)
        tmp = None
    except OSError as exc:
        raise ProbeError(f"cannot write {dest}: {exc.strerror}") from None
    finally:
        if tmp is not None:
            os.unlink(tmp)
    return notes


class _Writer:
    """Adds paths of the live filesystem to the archive, each once, links as links."""

    def __init__(self, tar: tarfile.TarFile, fs: FsRoot, notes: list[str]) -> None:
        self.tar, self.fs, self.notes = tar, fs, notes
        self.base = fs.path("")  # the real location of "/"
        self.done: set[str] = set()
        self.mtime = int(time.time())

    def store(self, path: str, list_it: bool = False) -> str | None:
        """`path` and everything on the way to it (each symlink met is stored and followed), and
        with `list_it` the directory's entries; returns the real path stored, None if not stored."""
        if _private(path):
            return None
        real, parts, hops = "/", [p for p in path.split("/") if p], 0
        while parts:
            here = os.path.join(real, parts.pop(0))
            try:
                mode = os.lstat(self.base + here).st_mode
            except OSError:
                return None  # absent: discovery saw it missing, the archive leaves it missing
            if stat.S_ISLNK(mode) and here != "/proc/self":
                target = os.readlink(self.base + here)
                hops += 1
                if hops > 40 or target.startswith("/") and not target.startswith(("/sys/", "/proc/")):
                    return None
                self.link(here, target)
                parts = [p for p in os.path.normpath(os.path.join(real, target)).split("/") if p] + parts
                real = "/"
            elif stat.S_ISDIR(mode) or here == "/proc/self":
                self.add(here, tarfile.DIRTYPE)
                real = here
            elif parts:
                return None  # a file in the middle of the path
            else:
                if stat.S_ISREG(mode) and here.lstrip("/") not in self.done:
                    self._file(here)
                return here
        if list_it:  # the subdirectories and links, so a listing of the copy names them too
            try:
                entries = list(os.scandir(self.base + real))
            except OSError:
                entries = []
            for entry in entries:  # sysfs and procfs give each entry's type: no lstat
                if entry.is_symlink():
                    self.link(os.path.join(real, entry.name))
                elif entry.is_dir(follow_symlinks=False):
                    self.add(os.path.join(real, entry.name), tarfile.DIRTYPE)
        return real

    def add(self, path: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", target: str = "") -> None:
        """A member at `path` (a file holding `data`, a directory, a link to `target`), once."""
        name = path.lstrip("/")
        if name in self.done:
            return
        self.done.add(name)
        info = tarfile.TarInfo(name)
        info.type, info.mtime, info.size, info.linkname = kind, self.mtime, len(data), target
        info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
        self.tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

    def link(self, path: str, target: str | None = None) -> None:
        """The symlink at the real path `path` itself, pointing to `target` (default: as it does)."""
        if _private(path):
            return
        target = os.readlink(self.base + path) if target is None else target
        if target.startswith("/"):  # /proc/mounts -> self/mounts is relative; keep links inside
            target = os.path.relpath(target, os.path.dirname(path))
        self.add(path, tarfile.SYMTYPE, target=target)

    def _file(self, path: str) -> None:
        try:
            data = self.fs.read_bytes(path)  # as it is: binary attributes (PCI config) stay binary
        except TopoError as exc:
            self.notes.append(str(exc))
            return
        if data is not None:
            if path == "/proc/cmdline":
                data = b" ".join(t for t in data.split() if t.startswith(b"numa=")) + b"\n"
            self.add(path, data=data)


def _private(path: str) -> bool:
    return path != "/proc/cmdline" and (path.startswith(_PRIVATE_TREES)
                                        or not _PRIVATE_NAMES.isdisjoint(path.split("/")))


def _tool_outputs(notes: list[str]) -> dict[str, str]:
    out = {}
    for name, argv in TOOLS.items():
        try:
            out[name] = run_tool(argv)
        except ToolNotFound:
            pass
        except TopoError as exc:
            notes.append(str(exc))
    return out


def _readme(tools: dict[str, str], notes: list[str], nvml_asked: bool) -> str:
    lines = [
        f"A topo capture (topo {__version__}, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}).",
        "sys/ and proc/ hold the files topo's discovery reads, at their paths; read it back with",
        "  topo show --root THIS.tar.gz",
        "Tool outputs in this folder:",
        *(f"  {name}: {' '.join(TOOLS[name])}" for name in sorted(tools)),
    ]
    if nvml_asked:
        lines.append("  nvml.json: what NVML said: GPUs, their CPU and NUMA affinity, links, MIG devices")
    if not tools:
        lines.append("  (none of lscpu, nvidia-smi, npu-smi was on PATH)")
    if notes:
        lines += ["Not stored:", *(f"  {n}" for n in notes)]
    return "\n".join(lines) + "\n"
