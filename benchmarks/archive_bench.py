"""What the worst archives cost `topo show --root FILE` (topo.archive's bounds at work).

Each case is built at run time, compressed as it is made, then read by `python -m topo show --root`
of this checkout in a fresh process with TMPDIR in a temporary directory; printed: the archive's
size, the wall and CPU seconds of that process and its own peak memory (wait4's ru_maxrss), its
exit status and first line of error (a legal archive unpacks, then fails discovery: it holds no
machine). Legal cases stop just under a bound; refused ones go over it and must cost little:

  members     MAX_MEMBERS - 200 empty files in 100 directories (gzip)
  data.gz     MAX_UNPACKED - 2 MiB of zeros in files of MAX_FILE (gzip), then bzip2 and xz
  links.xz    49,000 links whose 512-part targets run through 49 nested directories
  dirs.gz     99,000 directory members, two 49-deep directories named in turn
  files.gz    MAX_MEMBERS - 200 files in two 48-deep directories in turn
  chains.gz   20,000 files, each in a new chain of 48 directories (refused past MAX_MEMBERS of them)
  streams.gz  MAX_STREAMS - 1 empty gzip members, then the archive (MAX_STREAMS in all); bzip2, xz
  blocks.xz   a 66 MB xz stream of one-byte blocks (2.5 MB of tar), as many as MAX_ARCHIVE holds
  bomb.xz     a GNU long name of 1 GiB (refused at its header)
  empty.gz    3.3 million empty gzip members in 66 MB (refused past MAX_STREAMS); then bzip2, xz

    python benchmarks/archive_bench.py [CASE ...]

The last line names the legal case that cost the most CPU.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import hostile_archives as hostile  # noqa: E402
from topo import archive  # noqa: E402


def data_archive(compress) -> bytes:
    out = io.BytesIO()
    with compress(out) as f:
        left, n = (archive.MAX_UNPACKED >> 20) - 2, 0  # MiB: 2 for the headers and the end
        zeros = bytes(1 << 20)
        while left > 0:
            size = min(archive.MAX_FILE >> 20, left)
            f.write(hostile.header(b"f%d" % n, b"0", size << 20))
            for _ in range(size):
                f.write(zeros)
            left -= size
            n += 1
        f.write(hostile.end())
    return out.getvalue()


def xz(raw: bytes) -> bytes:
    return lzma.compress(raw, preset=0)


# name -> (legal, what builds it)
CASES = {
    "members": (True, lambda: hostile.many_members(archive.MAX_MEMBERS - 200)),
    "data.gz": (True, lambda: data_archive(lambda out: gzip.GzipFile(fileobj=out, mode="wb", mtime=0))),
    "data.bz2": (True, lambda: data_archive(lambda out: bz2.BZ2File(out, "wb"))),
    "data.xz": (True, lambda: data_archive(lambda out: lzma.LZMAFile(out, "wb", preset=0))),
    "links.xz": (True, lambda: hostile.long_links(49_000)),
    "dirs.gz": (True, lambda: hostile.repeated_dirs(99_000)),
    "files.gz": (True, lambda: hostile.repeated_dirs(archive.MAX_MEMBERS - 200, dirs=48, files=True)),
    "chains.gz": (False, lambda: hostile.repeated_dirs(20_000, dirs=48, files=True, chains=20_000)),
    "streams.gz": (True, lambda: hostile.empty_streams(archive.MAX_STREAMS - 1)),
    "streams.bz2": (True, lambda: hostile.empty_streams(archive.MAX_STREAMS - 1, bz2.compress)),
    "streams.xz": (True, lambda: hostile.empty_streams(archive.MAX_STREAMS - 1, xz)),
    "blocks.xz": (True, lambda: hostile.xz_blocks(hostile.header(b"f", b"0", 2_560_000) + bytes(2_560_000)
                                                   + hostile.end())),
    "bomb.xz": (False, hostile.long_name_bomb),
    "empty.gz": (False, lambda: hostile.empty_streams(3_300_000)),
    "empty.bz2": (False, lambda: hostile.empty_streams(4_700_000, bz2.compress)),
    "empty.xz": (False, lambda: hostile.empty_streams(2_000_000, xz)),
}


def run(name: str) -> float:
    """Reads case `name`; prints what it cost and returns the CPU seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, name)
        # built by another process, so that this one stays small: a child's peak memory counts
        # what it shared with this process when it started
        subprocess.run([sys.executable, __file__, "--build", name, str(path)], check=True)
        tmpdir = Path(tmp, "tmp")
        tmpdir.mkdir()
        env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(REPO))
        with open(Path(tmp, "stderr"), "w+") as err:
            start = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "topo", "show", "--root", str(path)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time and peak memory
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - start
            err.seek(0)
            message = err.read().strip()
        cpu = usage.ru_utime + usage.ru_stime
        left = list(tmpdir.iterdir())
        print(f"{name:11} {path.stat().st_size / 1e6:8.2f} MB  {wall:6.2f} s wall  {cpu:6.2f} s CPU  "
              f"{usage.ru_maxrss / 1024:6.0f} MiB peak  exit {proc.returncode}  left {len(left)}  "
              f"{message[:90]}", flush=True)
        return cpu


def main() -> None:
    if sys.argv[1:2] == ["--build"]:
        Path(sys.argv[3]).write_bytes(CASES[sys.argv[2]][1]())
        return
    costs = {}
    for name in sys.argv[1:] or CASES:
        cpu = run(name)
        if CASES[name][0]:
            costs[name] = cpu
    if costs:
        worst = max(costs, key=costs.get)
        print(f"worst legal case: {worst}, {costs[worst]:.2f} s CPU")


if __name__ == "__main__":
    main()
