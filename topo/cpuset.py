"""CpuSet: the one immutable set type for CPUs and NUMA nodes.

Backed by a Python int used as a bitmask, so union/intersection/difference are
single big-int operations even on machines with thousands of CPUs.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator

from topo.errors import ParseError

# ASCII digits only: `\d` alone would also accept other scripts' digits ("١" is 1 to int()).
_RANGE = re.compile(r"\A([0-9]+)(?:-([0-9]+))?\Z")
_KERNEL_MASK = re.compile(r"\A[0-9a-fA-F]{1,8}(?:,[0-9a-fA-F]{8})*\Z")
_HEXWORD = re.compile(r"\A(?:0x)?[0-9a-fA-F]+\Z")
# Far above any kernel's NR_CPUS (8192) or node count; a larger id in text is garbage, and
# honouring "0-99999999999" would try to allocate a 12 GB bitmask.
MAX_ID = (1 << 20) - 1


class CpuSet:
    """An immutable, hashable set of non-negative integers (CPU or NUMA node ids)."""

    __slots__ = ("_mask",)

    def __init__(self, items: Iterable[int] = ()) -> None:
        mask = 0
        for i in items:
            i = int(i)
            if i < 0:
                raise ParseError(f"negative id {i} in CPU set")
            mask |= 1 << i
        object.__setattr__(self, "_mask", mask)

    def __setattr__(self, name, value):
        raise AttributeError("CpuSet is immutable")

    def __delattr__(self, name):
        raise AttributeError("CpuSet is immutable")

    # ---- construction -------------------------------------------------
    @classmethod
    def from_mask(cls, mask: int) -> "CpuSet":
        if mask < 0:
            raise ParseError("negative bitmask for CPU set")
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_mask", mask)
        return obj

    @classmethod
    def parse(cls, text: str) -> "CpuSet":
        """Parse a Linux cpulist (``0-3,8,10-11``). Empty text is the empty set."""
        s = text.strip()
        if not s:
            return EMPTY
        mask = 0
        for part in s.split(","):
            m = _RANGE.match(part.strip())
            if not m:
                raise ParseError(f"malformed cpulist {text.strip()!r}: bad element {part!r}")
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            if hi < lo:
                raise ParseError(f"malformed cpulist {text.strip()!r}: range {part!r} runs backwards")
            if hi > MAX_ID:
                raise ParseError(f"malformed cpulist {text.strip()!r}: id in {part!r} exceeds {MAX_ID}")
            mask |= ((1 << (hi - lo + 1)) - 1) << lo
        return cls.from_mask(mask)

    @classmethod
    def parse_mask(cls, text: str) -> "CpuSet":
        """Parse a sysfs hex mask (``cpumap``: ``ffffffff,00000000``, most significant word first)."""
        s = text.strip()
        if not s:
            return EMPTY
        if _KERNEL_MASK.match(s):
            # What the kernel writes (full 32-bit words after the first): one int() of the whole
            # string; shifting word by word is quadratic on 4096-bit masks (ia64, big servers).
            return cls.from_mask(int(s.replace(",", ""), 16))
        mask = 0
        for word in s.split(","):
            if not _HEXWORD.match(word):
                raise ParseError(f"malformed CPU mask {s!r}: bad word {word!r}")
            if word.startswith("0x"):
                word = word[2:]
            mask = (mask << 32) | int(word, 16)
        return cls.from_mask(mask)

    @classmethod
    def range(cls, lo: int, hi: int) -> "CpuSet":
        """The inclusive range lo..hi."""
        if hi < lo:
            return EMPTY
        return cls.from_mask(((1 << (hi - lo + 1)) - 1) << lo)

    # ---- formatting ---------------------------------------------------
    def to_list(self) -> str:
        """Format as a sorted, compacted Linux cpulist; '' for the empty set."""
        out = []
        for lo, hi in self.ranges():
            out.append(str(lo) if lo == hi else f"{lo}-{hi}")
        return ",".join(out)

    def to_mask(self) -> str:
        """Format as a sysfs-style hex mask of 32-bit words."""
        m = self._mask
        words = []
        while True:
            words.append(f"{m & 0xFFFFFFFF:08x}")
            m >>= 32
            if not m:
                break
        return ",".join(reversed(words))

    def ranges(self) -> Iterator[tuple[int, int]]:
        m = self._mask
        base = 0
        while m:
            # skip zeros
            tz = (m & -m).bit_length() - 1
            m >>= tz
            base += tz
            # count ones
            ones = (~m & (m + 1)).bit_length() - 1
            yield base, base + ones - 1
            m >>= ones
            base += ones

    # ---- set algebra --------------------------------------------------
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

    union = __or__
    intersection = __and__
    difference = __sub__

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
        return hash(("CpuSet", self._mask))

    def __repr__(self) -> str:
        return f"CpuSet({self.to_list()!r})"

    def __str__(self) -> str:
        return self.to_list()

    def __reduce__(self):
        return (CpuSet.from_mask, (self._mask,))


EMPTY = CpuSet()


def union_all(sets: Iterable[CpuSet]) -> CpuSet:
    mask = 0
    for s in sets:
        mask |= s.mask
    return CpuSet.from_mask(mask)
