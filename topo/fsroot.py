"""Reading files below one filesystem root, like hwloc's HWLOC_FSROOT.

Every probe gets an FsRoot and never touches an absolute path itself, so a captured machine and the
live one are read by the same code.
"""

from __future__ import annotations

import os

from topo.cpuset import CpuSet
from topo.errors import ParseError, ProbeError


class FsRoot:
    __slots__ = ("root", "_prefix")

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        root = os.fspath(root) if root else "/"
        if not os.path.isdir(root):
            raise ProbeError(f"topology root {root!r} is not a directory (pass --root DIR or set TOPO_ROOT)")
        self.root = os.path.abspath(root)
        self._prefix = "" if self.root == "/" else self.root

    @property
    def is_this_system(self) -> bool:
        return self.root == "/"

    def path(self, path: str) -> str:
        """The real path of an absolute path inside the root."""
        return self._prefix + path

    def exists(self, path: str) -> bool:
        return os.path.exists(self._prefix + path)

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(self._prefix + path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise ProbeError(f"cannot list {self.path(path)}: {exc.strerror}") from exc

    def link_name(self, path: str) -> str | None:
        """The last component of a symlink's target (a PCI function's driver), or None."""
        try:
            return os.path.basename(os.readlink(self._prefix + path))
        except OSError:
            return None

    def read(self, path: str, default: str | None = None) -> str | None:
        """The file's text, stripped; `default` when it does not exist or cannot be read.

        Sysfs attributes that exist but fail with EINVAL/EIO/ENODEV (some firmware files) count as
        absent, as hwloc treats them; a permission error or a directory where a file belongs is an
        error naming the path.
        """
        try:
            # os.open/os.read: a third cheaper than open() for thousands of tiny sysfs files.
            fd = os.open(self._prefix + path, os.O_RDONLY)
            try:
                data = os.read(fd, 65536)
                if len(data) == 65536:  # rare: long cpulists on huge machines
                    chunks = [data]
                    while chunk := os.read(fd, 65536):
                        chunks.append(chunk)
                    data = b"".join(chunks)
            finally:
                os.close(fd)
        except (PermissionError, IsADirectoryError) as exc:
            # Present but unreadable: silently dropping it would yield a wrong topology.
            raise ProbeError(
                f"cannot read {self.path(path)}: {exc.strerror} "
                "(run topo as a user who can read it, or point --root at a readable copy)"
            ) from None
        except OSError:
            return default
        try:
            # Some captured sysfs files end in NUL bytes; the kernel pads a few attributes so.
            return data.decode("utf-8", "replace").strip(" \t\r\n\x00")
        except Exception:  # pragma: no cover - decode with "replace" cannot fail
            return default

    def read_int(self, path: str, default: int | None = None) -> int | None:
        text = self.read(path)
        if text is None or text == "":
            return default
        try:
            return int(text, 0) if text.startswith("0x") else int(text)
        except ValueError:
            raise ProbeError(f"{self.path(path)}: expected an integer, found {text[:40]!r}") from None

    def read_cpulist(self, path: str) -> CpuSet | None:
        text = self.read(path)
        if text is None:
            return None
        try:
            return CpuSet.parse(text)
        except ParseError as exc:
            raise ProbeError(f"{self.path(path)}: {exc}") from None

    def read_cpumask(self, path: str) -> CpuSet | None:
        text = self.read(path)
        if text is None:
            return None
        try:
            return CpuSet.parse_mask(text)
        except ParseError as exc:
            raise ProbeError(f"{self.path(path)}: {exc}") from None

    def read_set(self, list_path: str, mask_path: str | None = None) -> CpuSet | None:
        """A hex-mask file, else its cpulist sibling.

        The mask is read first because hwloc does so: where a (fake or buggy) dump has both and
        they disagree, lstopo's answer is the mask's.
        """
        found = self.read_cpumask(mask_path) if mask_path else None
        if found is None:
            found = self.read_cpulist(list_path)
        return found
