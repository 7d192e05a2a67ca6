"""An archive given to `--root` (or TOPO_ROOT) is hostile until read (issue 17): each archive that
once broke `topo show --root` is kept (tests/fixtures/archives/, made by tests/hostile_archives.py)
or built here, and must now give one line, exit 2, and leave nothing behind or outside."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

import hostile_archives as hostile
import topo
from hostile_archives import end, header
from sysfs_builder import Machine, build
from topo import archive
from topo.archive import open_archive
from topo.errors import ProbeError
from topo.fsroot import PROCFS_LIMIT, SYSFS_LIMIT, TOOL_OUTPUT_LIMIT

ARCHIVES = Path(__file__).parent / "fixtures" / "archives"
SYSFS = Path(__file__).parent / "fixtures" / "sysfs"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def tmpdir_(tmp_path, monkeypatch) -> Path:
    """TMPDIR for this test (the unpack directory's parent), in-process and for subprocesses."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def topo_show(root: Path, tmpdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m topo show --root ROOT` of this tree with TMPDIR=tmpdir. The timeout only stops a
    hang (the quadratic cases took hours); no test asserts a duration."""
    env = dict(os.environ if env is None else env, TMPDIR=str(tmpdir),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "topo", "show", *args] + (["--root", str(root)] if root else [])
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def refused(done: subprocess.CompletedProcess, tmpdir: Path, words: str) -> str:
    """One line `topo: error: ...` with `words`, exit 2, no traceback, no copy left in TMPDIR."""
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("topo: error: ") and words in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert list(tmpdir.iterdir()) == []
    return done.stderr


def outside(tmp_path: Path, tmpdir: Path) -> list[str]:
    """What is in tmp_path besides TMPDIR and the archive: anything an archive wrote out there."""
    return sorted(p.name for p in tmp_path.iterdir() if p != tmpdir and not p.name.endswith((".gz", ".xz", ".tar")))


# ---- the archives that broke something -----------------------------------------------------


def test_symlink_chain_does_not_write_outside(tmp_path, tmpdir_):
    # extractall(filter="data") on Python 3.11.7 created ../../outside-written through the chain.
    refused(topo_show(ARCHIVES / "symlink-chain-write-outside.tar.gz", tmpdir_), tmpdir_,
            "has a name or link target longer than 1024 bytes")
    assert outside(tmp_path, tmpdir_) == []


def test_symlink_chain_does_not_read_outside(tmp_path, tmpdir_):
    # A stand-in for /etc/shadow beside TMPDIR, where the archive's cpu/online link led: its first
    # bytes were quoted in the parse error.
    (tmp_path / "secret.txt").write_text("root:SECRETHASH:19000:0:99999:7:::\n")
    message = refused(topo_show(ARCHIVES / "symlink-chain-read-outside.tar.gz", tmpdir_), tmpdir_, "member")
    assert "SECRETHASH" not in message


def test_symlink_chain_with_short_names_is_refused_by_the_link_rules(tmp_path, tmpdir_):
    # Within the name bounds the chain meets the rule itself: no member below a link.
    path = tmp_path / "chain.tar.gz"
    path.write_bytes(hostile.gz(hostile.symlink_chain(hostile.info("escape/outside-written"), b"x", 7, 7)))
    with pytest.raises(ProbeError, match="lies below a link or a file"):
        open_archive(str(path))
    assert outside(tmp_path, tmpdir_) == [] and list(tmpdir_.iterdir()) == []


def test_long_pax_number_is_refused_before_it_is_read(tmpdir_):
    # 419 bytes of gzip: a 300,000-digit pax header that tarfile's regex scanned for hours.
    refused(topo_show(ARCHIVES / "pax-number.tar.gz", tmpdir_), tmpdir_,
            "an extended header of 300000 bytes (at most 4096)")


def test_gnu_long_name_bomb_is_refused_before_it_is_read(tmp_path, tmpdir_):
    # ~160 KB of xz naming a member with 1 GiB: 28 s and 8 GB before; now the header is enough.
    path = tmp_path / "bomb.tar.xz"
    path.write_bytes(hostile.long_name_bomb())
    assert path.stat().st_size < 1 << 20
    refused(topo_show(path, tmpdir_), tmpdir_, "an extended header of 1073741824 bytes (at most 4096)")


def test_nested_directories_give_one_line(tmpdir_):
    # 2,000 nested directories were a RecursionError; 1,500 left /tmp/topo-capture-* behind.
    refused(topo_show(ARCHIVES / "nested-dirs-2000.tar.gz", tmpdir_), tmpdir_,
            f"lies more than {archive.MAX_DEPTH} directories deep")


def test_topo_root_from_the_environment_is_read_as_safely(tmp_path, tmpdir_):
    env = dict(os.environ, TOPO_ROOT=str(ARCHIVES / "symlink-chain-write-outside.tar.gz"))
    refused(topo_show(None, tmpdir_, env=env), tmpdir_, "has a name or link target longer than 1024 bytes")
    assert outside(tmp_path, tmpdir_) == []


def test_quadratic_lscpu_line_is_read_in_linear_time(tmpdir_):
    # A capture without NUMA directories, so discovery reads its stored lscpu outputs; `L3 cache: 1`
    # + a million spaces + `x` hung discovery (quadratic regex).
    done = topo_show(ARCHIVES / "lscpu-quadratic.tar.gz", tmpdir_, "--json")
    assert done.returncode == 0, done.stderr
    assert '"lscpu": "ok (1 NUMA node)"' in done.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_copy_is_removed_when_a_signal_stops_the_unpacking(tmp_path, tmpdir_, sig):
    path = tmp_path / "big.tar.gz"
    path.write_bytes(hostile.many_members(60_000))  # legal, and seconds to unpack
    env = dict(os.environ, TMPDIR=str(tmpdir_),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    # preexec_fn: a signal ignored by whoever started the tests (nohup) would be ignored here too
    proc = subprocess.Popen([sys.executable, "-m", "topo", "show", "--root", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    try:
        while not list(tmpdir_.glob("topo-capture-*/sys/d99")) and proc.poll() is None:
            time.sleep(0.005)  # until the unpacking is under way
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (130 if sig == signal.SIGINT else -sig), err
    assert list(tmpdir_.iterdir()) == []


def test_handlers_are_restored_after_unpacking(tmp_path, tmpdir_):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    copy, _ = open_archive(str(ARCHIVES / "lscpu-quadratic.tar.gz"))
    copy.cleanup()
    with pytest.raises(ProbeError):
        open_archive(str(ARCHIVES / "pax-number.tar.gz"))
    assert {s: signal.getsignal(s) for s in before} == before


# ---- each rule, on small hand-made archives ----------------------------------------------------


def tar_gz(tmp_path: Path, *blocks: bytes) -> Path:
    path = tmp_path / "evil.tar.gz"
    path.write_bytes(hostile.gz(b"".join(blocks) + end()))
    return path


def regular(name: bytes, content: bytes = b"1\n") -> bytes:
    return header(name, b"0", len(content)) + hostile.data(content)


@pytest.mark.parametrize("blocks, words", [
    ([header(b"sys/a", b"2", link=b"/etc/passwd")], "absolute, empty or climbs out"),
    ([header(b"sys/a", b"2", link=b"../../x")], "climbs out of the archive"),
    ([header(b"sys/a", b"2", link=b"b/../../x")], "climbs out of the archive"),
    ([header(b"sys/a", b"2", link=b"")], "absolute, empty or climbs out"),
    ([header(b"sys", b"5"), header(b"l", b"2", link=b"sys"), regular(b"l/x")], "lies below a link"),
    ([header(b"sys/x", b"2", link=b"y"), regular(b"sys/x")], "is there already"),
    ([regular(b"sys/x"), regular(b"sys/x")], "is there already"),
    ([regular(b"sys"), regular(b"sys/x")], "lies below a link or a file"),
    ([header(b"sys/x", b"2", link=b"y"), header(b"sys/x", b"5")], "lies below a link or a file"),
    ([header(b"sys/a", b"2", link=b"b"), header(b"sys/c", b"2", link=b"a/x")], "a link through the link 'sys/a'"),
    ([header(b"sys/c", b"2", link=b"../sys/a/x"), header(b"sys/a", b"2", link=b"b")],
     "a link through the link 'sys/a'"),
    ([regular(b"/sys/x")], "points outside the archive"),
    ([regular(b"sys/../../x")], "points outside the archive"),
    ([header(b"sys/h", b"1", link=b"sys/x")], "is not a file, directory or symlink"),
    ([header(b"sys/p", b"6")], "is not a file, directory or symlink"),
    ([header(b"sys/c", b"3")], "is not a file, directory or symlink"),
    ([header(b"sys/S", b"S")], "is not a file, directory or symlink"),
    ([header(b"sys/d", b"5", 10) + bytes(512)], "a directory or link, has data"),
    ([header(b"././@LongLink", b"L", 300) + hostile.data(b"s/" + b"x" * 298) + regular(b"short")],
     "a part longer than 255"),
])
def test_link_and_member_rules(tmp_path, tmpdir_, blocks, words):
    with pytest.raises(ProbeError, match=words) as caught:
        open_archive(str(tar_gz(tmp_path, *blocks)))
    assert len(str(caught.value).splitlines()) == 1
    assert list(tmpdir_.iterdir()) == [] and outside(tmp_path, tmpdir_) == []


def test_links_that_stay_inside_are_kept(tmp_path, tmpdir_):
    # What sysfs captures hold: "." (hwloc's node*/cpuN), a trailing slash, leading ".." no
    # higher than the unpack directory, a link to a link; read through several.
    path = tar_gz(tmp_path, header(b"sys/devices/system/cpu/cpu0", b"5"),
                  regular(b"sys/devices/system/cpu/cpu0/online"),
                  header(b"sys/bus/cpu/devices/cpu0", b"2", link=b"../../../devices/system/cpu/cpu0/"),
                  header(b"sys/here", b"2", link=b"."), header(b"top", b"2", link=b"sys/bus/cpu/devices/cpu0"),
                  header(b"sys/up", b"2", link=b".."))
    copy, root = open_archive(str(path))
    try:
        assert Path(root, "top/online").read_text() == "1\n"
        assert Path(root, "sys/here/up/sys/bus/cpu/devices/cpu0/online").read_text() == "1\n"
    finally:
        copy.cleanup()


@pytest.mark.parametrize("bound, value, blocks, words", [
    ("MAX_MEMBERS", 10, [header(b"d%d" % n, b"5") for n in range(11)], "more than 10 members"),
    ("MAX_MEMBERS", 4, [regular(b"a/b/c/d/f")], "more than 4 members"),  # a header and 4 directories made
    ("MAX_MEMBERS", 10, [header(b"././@PaxHeader", b"x", 60) + hostile.data(b"".join(b"6 a=b\n" for _ in range(10))),
                         regular(b"f")], "more than 10 members"),
    ("MAX_UNPACKED", 4096, [regular(b"f%d" % n, b"x" * 1000) for n in range(4)], "more than 0 MiB unpacked"),
    ("MAX_FILE", 100, [header(b"big", b"0", 101)], "is 101 bytes"),
    ("MAX_FILE", 100, [header(b"././@PaxHeader", b"x", 12) + hostile.data(b"12 size=999\n"), header(b"big", b"0")],
     "is 999 bytes"),
    ("MAX_EXTENDED", 100, [header(b"././@LongLink", b"K", 101)], "an extended header of 101 bytes"),
    ("MAX_NAME", 20, [regular(b"x" * 21)], "a name or link target longer than 20 bytes"),
    ("MAX_NAME", 20, [header(b"l", b"2", link=b"y" * 21)], "a name or link target longer than 20 bytes"),
    ("MAX_DEPTH", 3, [header(b"a/b/c/d/e", b"5")], "lies more than 3 directories deep"),
])
def test_each_bound_is_checked_before_the_work(tmp_path, tmpdir_, monkeypatch, bound, value, blocks, words):
    monkeypatch.setattr(archive, bound, value)
    with pytest.raises(ProbeError, match=words):
        open_archive(str(tar_gz(tmp_path, *blocks)))
    assert list(tmpdir_.iterdir()) == []


def test_archive_file_size_is_bounded(tmp_path, tmpdir_, monkeypatch):
    path = tmp_path / "plain.tar"
    path.write_bytes(regular(b"f") + end())
    monkeypatch.setattr(archive, "MAX_ARCHIVE", path.stat().st_size - 1)
    with pytest.raises(ProbeError, match="a file of at most 0 MiB"):
        open_archive(str(path))


@pytest.mark.parametrize("content, words", [
    (b"", "not a tar archive"),
    (b"hello\n", "not a tar archive"),
    (b"x" * 1024, "not a tar archive"),
    (header(b"f", b"0", 10_000) + b"short", "ends in the middle of a member"),
    (hostile.gz(header(b"f", b"0", 10))[:30], "cannot unpack"),
    (b"\xfd7zXZ\x00" + b"\x00" * 100, "cannot unpack"),
    (b"BZh9" + b"\x00" * 100, "cannot unpack"),
    (header(b"././@PaxHeader", b"x", 8) + hostile.data(b"12345678") + header(b"f"), "a malformed pax header"),
    (header(b"././@PaxHeader", b"x", 6) + hostile.data(b"0 a=b\n") + header(b"f"), "a malformed pax header"),
])
def test_damaged_archives_give_one_line(tmp_path, tmpdir_, content, words):
    path = tmp_path / "bad.tar"
    path.write_bytes(content)
    with pytest.raises(ProbeError, match=words) as caught:
        open_archive(str(path))
    assert len(str(caught.value).splitlines()) == 1
    assert list(tmpdir_.iterdir()) == []


# ---- cost: linear in the archive, whatever it repeats -----------------------------------------
# Each archive here once cost seconds with nothing unpacked; the work it causes is counted, not timed.


def counting(monkeypatch, *names: str) -> dict[str, int]:
    """Counts the calls of os.NAME for each name, from now to the test's end."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        def count(*args, _name=name, _real=getattr(os, name), **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(os, name, count)
    return calls


def test_link_check_walks_each_target_once_no_deeper_than_a_member(tmp_path, tmpdir_, monkeypatch):
    # 49,000 links whose 512-part targets run through 49 nested directories took 22 s: every prefix
    # of every target was looked up among all links. Each target is walked down the directories
    # made, once, and no further than a member can lie.
    links = 300
    path = tmp_path / "links.tar.xz"
    path.write_bytes(hostile.long_links(links, parts=512))
    walked: list[int] = []
    made = archive._Tree.made
    monkeypatch.setattr(archive._Tree, "made", lambda tree, parts: walked.append(len(parts)) or made(tree, parts))
    copy, root = open_archive(str(path))
    copy.cleanup()
    assert walked.count(archive.MAX_DEPTH + 1) >= links  # each target checked ...
    assert sum(walked) <= (links + 3) * (archive.MAX_DEPTH + 1)  # ... at no more than a member's depth


def test_repeated_deep_directories_cost_no_system_call(tmp_path, tmpdir_, monkeypatch):
    # 99,000 directory members naming two 49-deep directories in turn took 12 s: each one closed
    # and opened a descriptor per level. Each chain is made once; a repetition costs no system call.
    path = tmp_path / "dirs.tar.gz"
    path.write_bytes(hostile.repeated_dirs(2000))
    calls = counting(monkeypatch, "open", "mkdir", "stat", "close")
    copy, root = open_archive(str(path))
    assert sum(calls.values()) <= 2 * 49 * 3 + 20, calls  # mkdir, open and close of each directory
    assert Path(root, *["0"] + ["a"] * 48).is_dir() and Path(root, *["1"] + ["a"] * 48).is_dir()
    copy.cleanup()


def test_files_in_deep_directories_in_turn_cost_a_few_system_calls_each(tmp_path, tmpdir_, monkeypatch):
    # The same descriptors per level for files in two 48-deep directories named in turn (22 s for
    # 99,800); a directory is opened by its whole path (every part a directory made, none a link).
    files = 600
    path = tmp_path / "files.tar.gz"
    path.write_bytes(hostile.repeated_dirs(files, dirs=48, files=True))
    calls = counting(monkeypatch, "open", "mkdir", "close")
    copy, root = open_archive(str(path))
    assert calls["open"] + calls["mkdir"] <= 2 * files + 2 * 48 * 2 + 20, calls
    copy.cleanup()


def test_directories_made_for_names_count_as_members(tmp_path, tmpdir_, monkeypatch):
    # Files each in a new chain of 48 directories: 20,000 of them made 960,000 directories that no
    # bound counted; each directory made now counts as a member, before it is made.
    monkeypatch.setattr(archive, "MAX_MEMBERS", 200)
    path = tmp_path / "chains.tar.gz"
    path.write_bytes(hostile.repeated_dirs(10, dirs=48, files=True, chains=10))
    calls = counting(monkeypatch, "mkdir")
    with pytest.raises(ProbeError, match="more than 200 members"):
        open_archive(str(path))
    assert calls["mkdir"] <= 200
    assert list(tmpdir_.iterdir()) == []


def test_empty_gzip_members_are_refused_past_the_bound(tmp_path, tmpdir_):
    # 3.3 million empty gzip members (66 MB, nothing unpacked) took 8.8 s.
    path = tmp_path / "empty.tar.gz"
    path.write_bytes(hostile.empty_streams(archive.MAX_STREAMS))
    refused(topo_show(path, tmpdir_), tmpdir_, f"more than {archive.MAX_STREAMS} compressed streams")


@pytest.mark.parametrize("compress", [lambda raw: gzip.compress(raw, mtime=0), bz2.compress, lzma.compress],
                         ids=["gzip", "bzip2", "xz"])
def test_compressed_streams_are_bounded(tmp_path, tmpdir_, monkeypatch, compress):
    # Each format allows streams one after another, each empty one costs microseconds and unpacks
    # nothing: at most MAX_STREAMS are read.
    monkeypatch.setattr(archive, "MAX_STREAMS", 20)
    path = tmp_path / "streams.tar"
    path.write_bytes(hostile.empty_streams(19, compress))  # and the archive's own: 20
    copy, root = open_archive(str(path))
    assert Path(root, "f").is_file()
    copy.cleanup()
    path.write_bytes(hostile.empty_streams(20, compress))
    with pytest.raises(ProbeError, match="more than 20 compressed streams"):
        open_archive(str(path))
    assert list(tmpdir_.iterdir()) == []


# ---- what must still work ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_every_compression_reads_the_same_machine(tmp_path, tmpdir_, mode):
    root = build(tmp_path, Machine(packages=2, cores=2, threads=2))
    path = tmp_path / f"machine.{mode}.tar"
    with tarfile.open(path, mode) as tar:
        tar.add(root, arcname="machine")  # hwloc's layout: one top folder holding sys/ and proc/
    assert topo.discover(path).to_dict()["cores"] == topo.discover(root).to_dict()["cores"]
    assert list(tmpdir_.iterdir()) == []  # the copy went with the FsRoot


def test_long_names_from_pax_and_gnu_headers(tmp_path, tmpdir_):
    long = "sys/" + "/".join(["x" * 60] * 5) + "/file"
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        path = tmp_path / "long.tar"
        with tarfile.open(path, "w", format=fmt) as tar:
            info = tarfile.TarInfo(long)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"ok\n"))
            link = tarfile.TarInfo("sys/link")
            link.type, link.linkname = tarfile.SYMTYPE, long.removeprefix("sys/")
            tar.addfile(link)
        copy, root = open_archive(str(path))
        assert Path(root, long).read_text() == "ok\n" and Path(root, "sys/link").read_text() == "ok\n"
        copy.cleanup()


@pytest.mark.parametrize("tarball", ["16em64t-4s2c2t-offlines.tar.bz2", "2pa-pcidomain32bits.tar.bz2",
                                     "fakememinitiators-1np2c+1npp+gi.tar.bz2"])
def test_hwloc_tarballs_unpack_as_tar_does(tarball, tmpdir_):
    # Links to "." and with a trailing slash, the deepest PCI paths: member for member as tarfile
    # unpacks them.
    copy, _ = open_archive(str(SYSFS / tarball))
    try:
        with tarfile.open(SYSFS / tarball) as tar:
            for m in tar:
                path = os.path.join(copy.name, m.name.rstrip("/"))
                if m.isdir():
                    assert os.path.isdir(path) and not os.path.islink(path), m.name
                elif m.issym():
                    assert os.readlink(path) == m.linkname, m.name
                else:
                    assert Path(path).read_bytes() == tar.extractfile(m).read(), m.name
    finally:
        copy.cleanup()


@pytest.mark.parametrize("compress", [hostile.gz, bz2.compress, lzma.compress], ids=["gzip", "bzip2", "xz"])
def test_several_streams_and_plain_end_without_zero_blocks(tmp_path, tmpdir_, compress):
    # As bgzip, pbzip2 or `cat` write them: a member split between streams, and zero bytes between
    # them (gzip's and xz's padding).
    raw = header(b"a", b"5") + regular(b"a/f", b"x" * 700)
    path = tmp_path / "streams.tar"
    path.write_bytes(compress(raw[:600]) + bytes(8) + compress(raw[600:]))
    copy, root = open_archive(str(path))
    assert Path(root, "a/f").read_text() == "x" * 700
    copy.cleanup()


def test_bounds_hold_what_topo_reads():
    # An archive may hold any file FsRoot would read (procfs tables, tool outputs) and a capture of
    # a big machine; the README lists these values.
    assert archive.MAX_FILE >= max(PROCFS_LIMIT, SYSFS_LIMIT, TOOL_OUTPUT_LIMIT)
    assert archive.MAX_UNPACKED >= 2 * archive.MAX_FILE and archive.MAX_ARCHIVE <= archive.MAX_UNPACKED
    readme = (REPO / "README.md").read_text()
    for value in ("64 MiB", "128 MiB", "32 MiB", "100,000", "| 4,096 |", "4 KiB", "1,024 bytes, parts of 255", "| 48 |"):
        assert value in readme, value
    assert (archive.MAX_ARCHIVE, archive.MAX_UNPACKED, archive.MAX_FILE, archive.MAX_MEMBERS, archive.MAX_STREAMS,
            archive.MAX_EXTENDED, archive.MAX_NAME, archive.NAME_MAX, archive.MAX_DEPTH) == (
        64 << 20, 128 << 20, 32 << 20, 100_000, 4096, 4096, 1024, 255, 48)


@pytest.mark.parametrize("name", sorted(hostile.STORED))
def test_stored_fixtures_are_what_the_generator_makes(name):
    # The kept archives are the ones `python tests/hostile_archives.py` writes, byte for byte.
    assert (ARCHIVES / name).read_bytes() == hostile.STORED[name]()
