"""What the worst legal archive costs `topo show --root FILE` (topo.archive's bounds at work).

Each case is built at run time, compressed as it is made, then read by `python -m topo show --root`
of this checkout in a fresh process with TMPDIR in a temporary directory; printed: the archive's
size, the wall and CPU seconds of the process and its peak memory (ru_maxrss). The cases stop just
under a bound (members, unpacked bytes) or just over it (refused before the work):

  members     MAX_MEMBERS - 200 empty files in 100 directories (gzip)
  data.gz     MAX_UNPACKED - 2 MiB of zeros in files of MAX_FILE (gzip), then bzip2 and xz
  bomb.xz     a GNU long name of 1 GiB (refused at its header)

    python benchmarks/archive_bench.py [CASE ...]
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import resource
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


CASES = {
    "members": lambda: hostile.many_members(archive.MAX_MEMBERS - 200),
    "data.gz": lambda: data_archive(lambda out: gzip.GzipFile(fileobj=out, mode="wb", mtime=0)),
    "data.bz2": lambda: data_archive(lambda out: bz2.BZ2File(out, "wb")),
    "data.xz": lambda: data_archive(lambda out: lzma.LZMAFile(out, "wb", preset=0)),
    "bomb.xz": hostile.long_name_bomb,
}


def run(name: str, content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, name)
        path.write_bytes(content)
        tmpdir = Path(tmp, "tmp")
        tmpdir.mkdir()
        env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(REPO))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "topo", "show", "--root", str(path)], env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        left = list(tmpdir.iterdir())
        print(f"{name:9} {len(content) / 1e6:8.2f} MB  {wall:6.2f} s wall  {cpu:6.2f} s CPU  "
              f"{after.ru_maxrss / 1024:6.0f} MiB peak  exit {done.returncode}  left {len(left)}  "
              f"{done.stderr.strip()[:90]}")


def main() -> None:
    for name in sys.argv[1:] or CASES:
        run(name, CASES[name]())


if __name__ == "__main__":
    main()
