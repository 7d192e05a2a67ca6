"""CpuSet: the one immutable set type for CPU and NUMA node ids, and the one parser of range text.

A CpuSet is a Python int used as a bitmask. Ids above ``MAX_ID`` (2**20 - 1) are refused: the
kernel's NR_CPUS tops out at 8192 and MAX_NUMNODES at 1024, and ``0-99999999999`` would need a
12 GB mask.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator

from topo.errors import ParseError
from topo.numbers import MAX_ID, ascii_number

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_HEXWORD = re.compile(r"\A(?:0x)?[0-9a-fA-F]+\Z")
_WHITESPACE = re.compile(r"\s+")
# A set of up to _BUILT_RUNS runs is built, and the first _READ_RUNS runs of a set are read, a run
# at a time, each step costing the mask's width; past that, through the mask's binary text in one
# pass. Most sets a planner makes are a few runs on a wide machine: benchmarks/plan_bench.py, 2k ->
# 16k PUs, msrun-auto with gen_bind_json modules grows 8x so, 17x with the text alone.
_BUILT_RUNS = 32
_READ_RUNS = 4
# What parse() says of a bad range, in the kernel's cpulist words or in msrun's (_expand_ranges).
_CPULIST_WORDS = {"empty": "malformed cpulist {text!r}: bad element {part!r}",
                  "bad": "malformed cpulist {text!r}: bad element {part!r}",
                  "big": "malformed cpulist {text!r}: id in {part!r} exceeds {MAX_ID}",
                  "backwards": "malformed cpulist {text!r}: range {part!r} runs backwards"}
_MSRUN_WORDS = {"empty": "CPU range '{text}' is invalid due to empty segment.",
                "bad": "CPU range '{part}' is invalid.",
                "big": "CPU range '{part}' is invalid: ids above {MAX_ID} are not supported.",
                "backwards": "CPU range '{part}' start should not exceed end."}


def excerpt(text: str, limit: int = 60) -> str:
    """Text for an error message, cut: a 100 MB file does not become the message."""
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} characters)"


def _mask_of_runs(runs: list[tuple[int, int]]) -> int:
    """The bitmask of inclusive runs (lo, hi): a few ORed in, more sorted, merged and written as one
    binary numeral, so the time grows with the text and the highest id, never runs x width."""
    if len(runs) <= _BUILT_RUNS:
        mask = 0
        for lo, hi in runs:
            mask |= ((1 << (hi - lo + 1)) - 1) << lo
        return mask
    chunks, end = [], 0
    for lo, hi in sorted(runs):
        if hi >= end:
            lo = max(lo, end)
            chunks += ("0" * (lo - end), "1" * (hi - lo + 1))
            end = hi + 1
    return int("".join(reversed(chunks)) or "0", 2)


class CpuSet:
    """An immutable, hashable set of integers 0..MAX_ID (CPU or NUMA node ids)."""

    __slots__ = ("_mask",)

    def __init__(self, items: Iterable[int] = ()) -> None:
        ids = [int(i) for i in items]
        for i in (min(ids), max(ids)) if ids else ():
            if i < 0:
                raise ParseError(f"negative id {i} in CPU set")
            if i > MAX_ID:
                raise ParseError(f"id {excerpt(str(i))} in CPU set exceeds {MAX_ID}, the largest CPU or node id")
        object.__setattr__(self, "_mask", _mask_of_runs([(i, i) for i in ids]))

    def _immutable(self, *args):
        raise AttributeError("CpuSet is immutable")

    __setattr__ = __delattr__ = _immutable

    @classmethod
    def from_mask(cls, mask: int) -> "CpuSet":
        if mask < 0:
            raise ParseError("negative bitmask for CPU set")
        if mask.bit_length() > MAX_ID + 1:
            raise ParseError(f"bitmask with bit {mask.bit_length() - 1} exceeds {MAX_ID}, the largest CPU or node id")
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_mask", mask)
        return obj

    @classmethod
    def parse(cls, text: str, *, msrun: bool = False) -> "CpuSet":
        """Parse a Linux cpulist (``0-3,8,10-11``, spaces around elements allowed); empty text is the
        empty set. With ``msrun``, as msrun's ``_expand_ranges``: every whitespace character is
        removed first, and errors use msrun's words (``CPU range '3-1' start should not exceed end.``)."""
        words = _MSRUN_WORDS if msrun else _CPULIST_WORDS
        s = _WHITESPACE.sub("", text) if msrun else text.strip()
        if not s:
            return EMPTY
        runs = []
        for part in s.split(","):
            m = _RANGE.fullmatch(part if msrun else part.strip())
            lo = hi = None
            if m:
                lo = ascii_number(m.group(1))
                hi = lo if m.group(2) is None else ascii_number(m.group(2))
            problem = ("empty" if not part else "bad" if not m else "big" if lo is None or hi is None
                       else "backwards" if hi < lo else None)
            if problem:
                raise ParseError(words[problem].format(text=excerpt(s), part=excerpt(part), MAX_ID=MAX_ID))
            runs.append((lo, hi))
        return cls.from_mask(_mask_of_runs(runs))

    @classmethod
    def parse_mask(cls, text: str) -> "CpuSet":
        """Parse a sysfs hex mask (``cpumap``: ``ffffffff,00000000``, most significant word first)."""
        s = text.strip()
        if not s:
            return EMPTY
        words = s.split(",")
        for word in words:
            if not _HEXWORD.match(word):
                raise ParseError(f"malformed CPU mask {excerpt(s)!r}: bad word {excerpt(word)!r}")
        words = [w.removeprefix("0x") for w in words]
        # old 2.6 kernels wrote one long word without commas
        if len(words) > 1 and any(len(w) > 8 for w in words):
            raise ParseError(f"malformed CPU mask {excerpt(s)!r}: a word has more than 32 bits")
        digits = "".join(w.zfill(8) for w in words)
        if len(digits.lstrip("0")) > (MAX_ID + 1) // 4:
            raise ParseError(f"CPU mask {excerpt(s)!r} has bits above {MAX_ID}, the largest CPU or node id")
        return cls.from_mask(int(digits, 16))

    @classmethod
    def range(cls, lo: int, hi: int) -> "CpuSet":
        """The inclusive range lo..hi."""
        if hi < lo:
            return EMPTY
        if lo < 0 or hi > MAX_ID:
            raise ParseError(f"range {lo}-{excerpt(str(hi))} is outside 0-{MAX_ID}, the CPU and node ids topo accepts")
        return cls.from_mask(((1 << (hi - lo + 1)) - 1) << lo)

    def to_list(self) -> str:
        """Format as a sorted, compacted Linux cpulist; '' for the empty set."""
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges())

    def to_mask(self) -> str:
        """Format as a sysfs-style hex mask of 32-bit words."""
        digits = f"{self._mask:x}"
        digits = digits.zfill(-(-len(digits) // 8) * 8)
        return ",".join(digits[i:i + 8] for i in range(0, len(digits), 8))

    def ranges(self) -> Iterator[tuple[int, int]]:
        """Inclusive (lo, hi) runs of members, lowest first: the first few by shifting the mask (a
        step costs its width), the rest from its binary text (one pass)."""
        m, base = self._mask, 0
        for _ in range(_READ_RUNS):
            if not m:
                return
            low = (m & -m).bit_length() - 1  # the lowest member
            m >>= low
            length = (~m & (m + 1)).bit_length() - 1  # the ones from there up
            yield base + low, base + low + length - 1
            m >>= length
            base += low + length
        bits = f"{m:b}"  # highest bit first: bit i of m is bits[top - i]
        top, end = len(bits) - 1, len(bits)
        while (one := bits.rfind("1", 0, end)) >= 0:
            end = bits.rfind("0", 0, one) + 1
            yield base + top - one, base + top - end

    @property
    def mask(self) -> int:
        return self._mask

    def __or__(self, other: "CpuSet") -> "CpuSet":
        return CpuSet.from_mask(self._mask | other._mask)

    def __and__(self, other: "CpuSet") -> "CpuSet":
        return CpuSet.from_mask(self._mask & other._mask)

    def __sub__(self, other: "CpuSet") -> "CpuSet":
        return CpuSet.from_mask(self._mask & ~other._mask)

    def __xor__(self, other: "CpuSet") -> "CpuSet":
        return CpuSet.from_mask(self._mask ^ other._mask)

    def issubset(self, other: "CpuSet") -> bool:
        return self._mask & ~other._mask == 0

    def issuperset(self, other: "CpuSet") -> bool:
        return other._mask & ~self._mask == 0

    def intersects(self, other: "CpuSet") -> bool:
        return bool(self._mask & other._mask)

    __le__ = issubset
    __ge__ = issuperset

    def __lt__(self, other: "CpuSet") -> bool:
        return self._mask != other._mask and self.issubset(other)

    def __gt__(self, other: "CpuSet") -> bool:
        return self._mask != other._mask and self.issuperset(other)

    def weight(self) -> int:
        return self._mask.bit_count()

    __len__ = weight

    def first(self) -> int:
        """Lowest member; -1 for the empty set (as hwloc_bitmap_first)."""
        m = self._mask
        return (m & -m).bit_length() - 1 if m else -1

    def last(self) -> int:
        return self._mask.bit_length() - 1

    def __bool__(self) -> bool:
        return self._mask != 0

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and i >= 0 and bool(self._mask >> i & 1)

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.ranges():
            yield from range(lo, hi + 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CpuSet) and other._mask == self._mask

    def __hash__(self) -> int:
        # An int's hash is its value modulo 2**61 - 1, so sets 61 ids apart collide; the top bit
        # tells most of them apart (each process's CPUs of a wide machine).
        return hash(("CpuSet", self._mask.bit_length(), self._mask))

    def __repr__(self) -> str:
        return f"CpuSet({self.to_list()!r})"

    __str__ = to_list

    def __reduce__(self):
        return (CpuSet.from_mask, (self._mask,))


EMPTY = CpuSet()


def union_all(sets: Iterable[CpuSet]) -> CpuSet:
    mask = 0
    for s in sets:
        mask |= s._mask
    return CpuSet.from_mask(mask)
