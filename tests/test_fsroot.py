"""FsRoot: reading a root never blocks, never reads more than a kernel writes, and never takes an
error for an absent file; archives written by `topo capture` are read like directories, and
refused when they hold anything but what a capture holds."""

from __future__ import annotations

import io
import os
import socket
import tarfile
import time
from pathlib import Path

import pytest
from pyfakefs.fake_filesystem import set_uid
from pyfakefs.fake_filesystem_unittest import Patcher

import topo
from sysfs_builder import Machine, build
from topo.errors import ProbeError
from topo.fsroot import SYSFS_LIMIT, FsRoot

ONLINE = "sys/devices/system/cpu/online"


@pytest.fixture
def root(tmp_path) -> Path:
    return build(tmp_path, Machine(packages=2, cores=2, threads=2))


def refused(root: Path, rel: str, words: str, seconds: float = 5) -> None:
    start = time.monotonic()
    with pytest.raises(ProbeError) as err:
        topo.discover(root)
    assert time.monotonic() - start < seconds  # hang protection only
    assert str(root / rel) in str(err.value) and words in str(err.value)


def test_fifo_is_refused_without_blocking(root):
    (root / ONLINE).unlink()
    os.mkfifo(root / ONLINE)  # nobody ever writes: a blocking open would wait forever
    refused(root, ONLINE, "is a FIFO, not a file")


def test_socket_is_refused(root, tmp_path):
    (root / ONLINE).unlink()
    # AF_UNIX paths are limited to 108 bytes: bind from the directory
    cwd = os.getcwd()
    os.chdir(root / ONLINE.rsplit("/", 1)[0])
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind("online")
    finally:
        os.chdir(cwd)
    try:
        refused(root, ONLINE, "is a socket, not a file")
    finally:
        server.close()


def test_device_node_is_refused(root):
    (root / ONLINE).unlink()
    (root / ONLINE).symlink_to("/dev/zero")  # endless: reading it to EOF would never end
    refused(root, ONLINE, "is a character device, not a file")


def test_a_100_mb_file_fails_fast(root):
    with open(root / ONLINE, "r+b") as f:
        f.truncate(100 << 20)
    refused(root, ONLINE, f"is longer than {SYSFS_LIMIT} bytes", seconds=2)


def test_a_cpulist_of_8192_cpus_fits(root):
    longest = ",".join(str(i) for i in range(0, 8192, 2))  # no two ids adjacent: nothing to merge
    (root / "sys/devices/system/cpu/possible").write_text(longest + "\n")
    assert FsRoot(root).read_cpulist("/sys/devices/system/cpu/possible").weight() == 4096


def test_exists_does_not_swallow_permission_errors(root):
    # psutil's isfile_strict: EACCES is not "absent". CI runs as root, who may search any
    # directory, so pyfakefs serves the tree to an unprivileged user.
    cpu0 = root / "sys/devices/system/cpu/cpu0"
    fs = FsRoot(root)
    assert fs.exists("/sys/devices/system/cpu/cpu0/topology")
    assert not fs.exists("/sys/devices/system/cpu/cpu0/nothing")
    with Patcher() as patcher:
        patcher.fs.add_real_directory(str(root), read_only=False, lazy_read=False)
        set_uid(1000)
        try:
            cpu0.chmod(0o600)  # listable, not searchable
            with pytest.raises(ProbeError, match="cannot look at .*cpu0/topology: Permission denied"):
                fs.exists("/sys/devices/system/cpu/cpu0/topology")
        finally:
            set_uid(0)


def test_symlink_loop_is_an_error_not_absent(root):
    loop = root / "sys/devices/system/cpu/cpu0/topology"
    (root / "topology.real").mkdir()
    loop.rename(root / "topology.real" / "x")
    loop.symlink_to(loop)
    with pytest.raises(ProbeError, match="cannot look at"):
        FsRoot(root).exists("/sys/devices/system/cpu/cpu0/topology")


def test_unreadable_kernel_attribute_is_absent(root):
    # What the kernel does to some firmware attributes (EIO on read) means "absent", as in hwloc.
    (root / ONLINE).unlink()
    (root / ONLINE).symlink_to("/proc/self/mem")
    assert FsRoot(root).read("/sys/devices/system/cpu/online", "absent") == "absent"


# ---- archives ----------------------------------------------------------------------------------


def archive(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    path = tmp_path / "capture.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def member(name: str, kind=tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def test_directory_tree_packed_reads_the_same(root, tmp_path):
    path = tmp_path / "machine.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(root, arcname="machine")  # hwloc's layout: one top folder holding sys/ and proc/
    packed, unpacked = topo.discover(path), topo.discover(root)
    assert packed.to_dict()["cores"] == unpacked.to_dict()["cores"]
    assert packed.root == str(path) and not packed.is_this_system


@pytest.mark.parametrize("members, words", [
    ([(member("/sys/x"), b"1")], "points outside the archive"),
    ([(member("sys/../../x"), b"1")], "points outside the archive"),
    ([(member("sys/fifo", tarfile.FIFOTYPE), b"")], "is not a file, directory or symlink"),
    ([(member("sys/dev", tarfile.CHRTYPE), b"")], "is not a file, directory or symlink"),
    ([(member("sys/link", tarfile.SYMTYPE, "../../../etc/passwd"), b"")], "climbs out of the archive"),
    ([(member("sys/link", tarfile.SYMTYPE, "/etc/passwd"), b"")], "absolute, empty or climbs out"),
    ([(member("sys/hard", tarfile.LNKTYPE, "/etc/passwd"), b"")], "is not a file, directory or symlink"),
])
def test_archive_members_that_escape_or_are_special_are_refused(tmp_path, members, words):
    path = archive(tmp_path, *members)
    with pytest.raises(ProbeError, match=words) as err:
        FsRoot(path)
    assert str(path) in str(err.value)
    assert not list(Path("/tmp").glob("topo-capture-*/sys/link"))


def test_not_an_archive(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(ProbeError, match="not a topo capture archive"):
        FsRoot(path)


def test_archive_copy_is_removed(root, tmp_path):
    path = tmp_path / "machine.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(root, arcname=".")
    fs = FsRoot(path)
    copy = fs.path("/")
    assert os.path.isdir(copy) and fs.shown("/sys").startswith(f"{path}:")
    del fs
    assert not os.path.exists(copy)


def test_errors_inside_an_archive_name_the_file_in_the_archive(root, tmp_path):
    (root / "sys/devices/system/node/node0/cpumap").write_text("")
    path = tmp_path / "machine.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(root, arcname=".")
    with pytest.raises(ProbeError) as err:
        topo.discover(path)
    assert str(err.value).startswith(f"{path}:/sys/devices/system/node/node0/cpumap: empty")


CORE_ID = "sys/devices/system/cpu/cpu0/topology/core_id"


@pytest.mark.parametrize("text", ["\u0661", "\uff11", "\u00b2", "1_0", "1 2", "+1", "0x1", "-", "1" * 5000],
                         ids=["arabic-indic", "fullwidth", "superscript", "underscore", "space", "plus", "hex",
                              "minus", "5000-digits"])
def test_an_integer_file_holds_ascii_digits_of_bounded_length(root, text):
    # int() would read "١" (Arabic-Indic one) or "１" as 1 and "1_0" as 10, and raise ValueError on
    # "²" or on 5000 digits (past int()'s limit): an error naming the file instead.
    (root / CORE_ID).write_text(text + "\n")
    refused(root, CORE_ID, "expected a whole number of at most 20 digits")
    with pytest.raises(ProbeError, match="capture the machine again"):
        FsRoot(root).read_int("/" + CORE_ID)


@pytest.mark.parametrize("text, value", [("0\n", 0), ("-1\n", -1), ("983297", 983297), ("007", 7),
                                         (str((1 << 64) - 1), (1 << 64) - 1), ("", None)])
def test_an_integer_file_reads_what_kernels_write(root, text, value):
    (root / CORE_ID).write_text(text)
    assert FsRoot(root).read_int("/" + CORE_ID) == value


def test_an_integer_above_u64_is_refused(root):
    (root / CORE_ID).write_text(str(1 << 64))
    with pytest.raises(ProbeError, match="core_id: expected a whole number"):
        FsRoot(root).read_int("/" + CORE_ID)


@pytest.mark.parametrize("alias", ["01", "001", "+1", "1 ", "\u0661"])
def test_cpu_and_node_directories_by_other_names_are_not_read(root, alias):
    # The kernel names CPU 1 "cpu1"; hwloc formats that name back from the number and reads it, so
    # a "cpu01" directory is not CPU 1 (it silently stood for it). Likewise "node01".
    cpus, nodes = root / "sys/devices/system/cpu", root / "sys/devices/system/node"
    (cpus / "cpu1").rename(cpus / f"cpu{alias}")
    (nodes / "node1").rename(nodes / f"node{alias}")
    t = topo.discover(root)
    assert 1 not in t.pus and [n.os_index for n in t.numa_nodes] == [0]
