"""CpuSet: the one immutable set type for CPUs and NUMA nodes, and the one parser of range text.

Backed by a Python int used as a bitmask, so union/intersection/difference are
single big-int operations even on machines with thousands of CPUs.

Every cpulist or node list topo reads (sysfs, hwloc XML, topology JSON, ``--devices``, bind JSON,
msrun's ``--bind_core`` / ``--bind_numa`` tables) is parsed here, by ``CpuSet.parse`` (the kernel's
cpulist format) or ``CpuSet.parse_msrun`` (msrun's ``_expand_ranges``: whitespace removed, msrun's
messages). Both are bounded:

- ids above ``MAX_ID`` (2**20 - 1) are refused. The kernel's NR_CPUS tops out at 8192 and
  MAX_NUMNODES at 1024; a larger id in text is garbage, and honouring ``0-99999999999`` would
  allocate a 12 GB bitmask. 2**20 bits is a 128 KiB mask, cheap to build and to intersect.
- a number longer than ``MAX_ID`` is refused before ``int()`` converts it (conversion is quadratic in
  the digits), and only ASCII digits count (``int()`` would also read "١", "０" or "²").
- the mask is built from the sorted, merged runs in a byte buffer, so the time is O(k log k) for
  k ranges plus O(MAX_ID / 8) at most, whatever the ranges overlap; nothing expands a range
  element by element.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, Iterator

from topo.errors import ParseError
from topo.numbers import MAX_ID, ascii_number

# ASCII digits only: `\d` alone would also accept other scripts' digits ("١" is 1 to int()).
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_KERNEL_MASK = re.compile(r"\A[0-9a-fA-F]{1,8}(?:,[0-9a-fA-F]{8})*\Z")
_HEXWORD = re.compile(r"\A(?:0x)?[0-9a-fA-F]+\Z")
_WHITESPACE = re.compile(r"\s+")
# Runs ORed straight into the int below this count; above it, a byte buffer (see _mask_of_runs).
_DIRECT_RUNS = 32
# ranges() reads a mask wider than this as bytes (one pass) rather than with big-int steps
_NARROW = 1024


def excerpt(text: str, limit: int = 60) -> str:
    """Text for an error message: long inputs are cut, so a 100 MB file does not become the message."""
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} characters)"


def _mask_of_runs(runs: list[tuple[int, int]]) -> int:
    """The bitmask of inclusive runs (lo, hi), all within 0..MAX_ID.

    ORing a run into a big int costs the int's size, so many runs near MAX_ID would be quadratic;
    past a few runs they are sorted, merged and written into a byte buffer instead (each byte once).
    """
    if len(runs) <= _DIRECT_RUNS:
        mask = 0
        for lo, hi in runs:
            mask |= ((1 << (hi - lo + 1)) - 1) << lo
        return mask
    runs.sort()
    buf = bytearray(max(hi for _, hi in runs) // 8 + 1)
    done = -1  # every id up to here is already set
    for lo, hi in runs:
        if hi <= done:
            continue
        lo = max(lo, done + 1)
        done = hi
        first, last = lo >> 3, hi >> 3
        if first == last:
            buf[first] |= ((1 << (hi - lo + 1)) - 1) << (lo & 7)
            continue
        buf[first] |= (0xFF << (lo & 7)) & 0xFF
        buf[first + 1:last] = b"\xff" * (last - first - 1)
        buf[last] |= (1 << ((hi & 7) + 1)) - 1
    return int.from_bytes(buf, "little")


class CpuSet:
    """An immutable, hashable set of integers 0..MAX_ID (CPU or NUMA node ids)."""

    __slots__ = ("_mask",)

    def __init__(self, items: Iterable[int] = ()) -> None:
        mask = 0
        for i in items:
            i = int(i)
            if i < 0:
                raise ParseError(f"negative id {i} in CPU set")
            if i > MAX_ID:
                raise ParseError(f"id {excerpt(str(i))} in CPU set exceeds {MAX_ID}, the largest CPU or node id")
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
        if mask.bit_length() > MAX_ID + 1:
            raise ParseError(f"bitmask with bit {mask.bit_length() - 1} exceeds {MAX_ID}, the largest CPU or node id")
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_mask", mask)
        return obj

    @classmethod
    def parse(cls, text: str) -> "CpuSet":
        """Parse a Linux cpulist (``0-3,8,10-11``). Empty text is the empty set; spaces around the
        elements are allowed (sysfs files end in a newline)."""
        s = text.strip()
        if not s:
            return EMPTY
        runs = []
        for part in s.split(","):
            m = _RANGE.fullmatch(part.strip())
            if not m:
                raise ParseError(f"malformed cpulist {excerpt(s)!r}: bad element {excerpt(part)!r}")
            lo = ascii_number(m.group(1))
            hi = lo if m.group(2) is None else ascii_number(m.group(2))
            if lo is None or hi is None:
                raise ParseError(f"malformed cpulist {excerpt(s)!r}: id in {excerpt(part)!r} exceeds {MAX_ID}")
            if hi < lo:
                raise ParseError(f"malformed cpulist {excerpt(s)!r}: range {part!r} runs backwards")
            runs.append((lo, hi))
        return cls.from_mask(_mask_of_runs(runs))

    @classmethod
    def parse_msrun(cls, text: str) -> "CpuSet":
        """Parse a range string as msrun's ``_expand_ranges`` does: every whitespace character removed
        first, then ``a-b`` and ``a`` segments joined by commas; msrun's messages
        (``CPU range '3-1' start should not exceed end.``, ``CPU range '1,,2' is invalid due to
        empty segment.``, ``CPU range 'x' is invalid.``). msrun uses the same words for NUMA node
        strings. Empty text is the empty set."""
        s = _WHITESPACE.sub("", text)
        if not s:
            return EMPTY
        runs = []
        for seg in s.split(","):
            if not seg:
                raise ParseError(f"CPU range '{excerpt(s)}' is invalid due to empty segment.")
            m = _RANGE.fullmatch(seg)
            if not m:
                raise ParseError(f"CPU range '{excerpt(seg)}' is invalid.")
            lo = ascii_number(m.group(1))
            hi = lo if m.group(2) is None else ascii_number(m.group(2))
            if lo is None or hi is None:
                raise ParseError(f"CPU range '{excerpt(seg)}' is invalid: ids above {MAX_ID} are not supported.")
            if lo > hi:
                raise ParseError(f"CPU range '{seg}' start should not exceed end.")
            runs.append((lo, hi))
        return cls.from_mask(_mask_of_runs(runs))

    @classmethod
    def parse_mask(cls, text: str) -> "CpuSet":
        """Parse a sysfs hex mask (``cpumap``: ``ffffffff,00000000``, most significant word first)."""
        s = text.strip()
        if not s:
            return EMPTY
        if _KERNEL_MASK.match(s):
            # What the kernel writes (full 32-bit words after the first): one int() of the whole
            # string; shifting word by word is quadratic on 4096-bit masks (ia64, big servers).
            return cls._from_hex(s.replace(",", ""), s)
        words = s.split(",")
        for word in words:
            if not _HEXWORD.match(word):
                raise ParseError(f"malformed CPU mask {excerpt(s)!r}: bad word {excerpt(word)!r}")
        words = [w[2:] if w.startswith("0x") else w for w in words]
        if len(words) == 1:  # old 2.6 kernels wrote one long word without commas
            return cls._from_hex(words[0], s)
        if any(len(w) > 8 for w in words):
            raise ParseError(f"malformed CPU mask {excerpt(s)!r}: a word has more than 32 bits")
        return cls._from_hex("".join(w.zfill(8) for w in words), s)

    @classmethod
    def _from_hex(cls, digits: str, text: str) -> "CpuSet":
        # lstrip only for a long text: it costs microseconds on a 1024-digit mask of zeros
        if len(digits) > (MAX_ID + 1) // 4 and len(digits.lstrip("0")) > (MAX_ID + 1) // 4:
            raise ParseError(f"CPU mask {excerpt(text)!r} has bits above {MAX_ID}, the largest CPU or node id")
        return cls.from_mask(int(digits, 16))

    @classmethod
    def range(cls, lo: int, hi: int) -> "CpuSet":
        """The inclusive range lo..hi."""
        if hi < lo:
            return EMPTY
        if lo < 0 or hi > MAX_ID:
            raise ParseError(f"range {lo}-{excerpt(str(hi))} is outside 0-{MAX_ID}, the CPU and node ids topo accepts")
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
        # Each step below costs several passes over the whole mask: fine for a few ranges of a
        # narrow mask, quadratic for many (every other CPU of a 32768-PU machine took 0.2 s).
        # After four ranges, or while what is left from the next member up is wider than _NARROW
        # bits, read bytes instead. The zeros below the next member are skipped first, so a few
        # CPUs high in a wide mask (one process's set on a big machine) take the narrow steps
        # rather than a bytes pass over every zero byte below them.
        for _ in range(4):
            if not m:
                return
            # skip zeros
            tz = (m & -m).bit_length() - 1
            m >>= tz
            base += tz
            if m.bit_length() > _NARROW:
                break
            # count ones
            ones = (~m & (m + 1)).bit_length() - 1
            yield base, base + ones - 1
            m >>= ones
            base += ones
        if m:
            yield from _ranges_of_bytes(m, base)

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


# zero bytes skipped in one tight loop, then a run of full bytes or one partial byte
_BYTE_TOKENS = re.compile(rb"\x00*(\xff+|[^\x00\xff])")
@functools.cache
def _byte_runs(v: int) -> tuple[tuple[int, int], ...]:
    """The runs of ones in byte value ``v``, lowest first (computed on first use: a table of all 256
    built at import would cost every command several milliseconds)."""
    return tuple((lo, hi) for lo in range(8) for hi in range(lo, 8)
                 if all(v >> b & 1 for b in range(lo, hi + 1))
                 and (lo == 0 or not v >> (lo - 1) & 1) and (hi == 7 or not v >> (hi + 1) & 1))


# byte value -> _byte_runs(value), filled as values are met (a list index is cheaper than a call)
_RUNS_OF_BYTE: list[tuple[tuple[int, int], ...] | None] = [None] * 256


def _ranges_of_bytes(mask: int, base: int) -> Iterator[tuple[int, int]]:
    """Runs of ones of ``mask``, offset by ``base``: one pass over its bytes. A run starting at bit 0
    is not joined to anything below ``base`` (the caller's last run ended before a clear bit)."""
    data = mask.to_bytes((mask.bit_length() + 7) // 8, "little")
    lo = hi = -2
    table = _RUNS_OF_BYTE
    for token in _BYTE_TOKENS.finditer(data):
        start, end = token.span(1)
        at = base + start * 8
        v = data[start]
        if v == 0xFF:
            runs = ((0, 8 * (end - start) - 1),)
        else:
            runs = table[v]
            if runs is None:
                runs = table[v] = _byte_runs(v)
        for a, b in runs:
            if at + a == hi + 1:
                hi = at + b
            else:
                if lo >= 0:
                    yield lo, hi
                lo, hi = at + a, at + b
    yield lo, hi


EMPTY = CpuSet()


def union_all(sets: Iterable[CpuSet]) -> CpuSet:
    mask = 0
    for s in sets:
        mask |= s.mask
    return CpuSet.from_mask(mask)
