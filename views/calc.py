"""hwloc-calc's everyday answers on the one tree (`topo calc`): the CPUs of locations, and what they meet.

A location is `all`, a cpuset (`0x000000ff,0x0000ffff`, or taskset's `0xff0000ffff`), `TYPE:RANGE`
(`core:2-3`, `pu:1:3` three from 1, `numa:all`, `odd`, `even`), below it `.TYPE:RANGE` (`node:1.pu:2`,
counted inside the object above), or `os=eth0` / `pci=0000:01:00.0` (the CPUs the device hangs from);
`~` before it removes its CPUs, `x` intersects, `^` XORs. Indexes are logical unless asked physical.
"""

from __future__ import annotations

import re

from topo.cpuset import EMPTY, CpuSet, union_all
from topo.errors import ParseError, UsageError
from topo.model import Topology
from topo.numbers import MAX_ID
from topo.tree import IO_TYPES, Obj, bitmap, build, levels, matches, parse_type, type_name, walk

_RANGE = re.compile(r"(?:(all|odd|even)|([0-9]{1,7})(?:(-)([0-9]{0,7})|:([0-9]{1,7}))?)\Z")
_TASKSET = re.compile(r"0x[0-9a-fA-F]{1,%d}\Z" % ((MAX_ID + 1) // 4))


class Calc:
    """Locations and questions on one machine, by L# (or P#: `physical_input`/`physical_output`)."""

    def __init__(self, t: Topology, *, physical_input: bool = False, physical_output: bool = False):
        self.machine = build(t)
        self.objects = list(walk(self.machine))
        self.physical_input, self.physical_output = physical_input, physical_output

    def cpus(self, locations: list[str]) -> CpuSet:
        """The CPUs of `locations`, each added (or removed, intersected, XORed) in turn."""
        out = EMPTY
        for text in locations:
            op = {"~": CpuSet.__sub__, "x": CpuSet.__and__, "^": CpuSet.__xor__}.get(text[:1])
            out = (op or CpuSet.__or__)(out, self._location(text[1:] if op else text, text))
        return out

    def _location(self, text: str, given: str) -> CpuSet:
        if text in ("all", "root"):
            return self.machine.cpuset
        m = re.match(r"([A-Za-z0-9]+)([:=])(.*)\Z", text)
        if m is None:
            return _cpuset(text, given)
        if m.group(2) == "=":
            kind = self._kind(m.group(1), given)[0]
            for o in self.objects:
                if (kind == "OSDev" and o.type == kind and o.model.name == m.group(3)) or (
                        kind == "PCIDev" and o.type == kind and o.model.busid == m.group(3).lower()):
                    return _cpus(o)
            raise UsageError(f"{given}: no {'OS device' if kind == 'OSDev' else 'PCI device'} {m.group(3)}; "
                             f"`topo show{' --whole-io' if kind == 'PCIDev' else ''}` lists them")
        return union_all(_cpus(o) for o in self._pick(self.machine.cpuset, text, given))

    def _pick(self, root: CpuSet, text: str, given: str) -> list[Obj]:
        """The objects `TYPE:RANGE[.TYPE:RANGE...]` names inside `root`."""
        word, _, spec = text.partition(":")
        spec, dot, below = spec.partition(".")
        candidates = [o for o in self._level(word, given) if o.type in IO_TYPES
                      or (o.cpuset <= root and (o.cpuset or o.type == "NUMANode"))]
        m = _RANGE.match(spec)
        if m is None:
            raise UsageError(f"{given}: bad index range {spec!r}; give N, N-M, N-, N:COUNT, all, odd or even")
        keyword, first, dash, last, count = m.groups()
        first = {"odd": 1, "even": 0, "all": 0}.get(keyword, int(first or 0))
        step = 2 if keyword in ("odd", "even") else 1
        amount = (int(last) - first + 1 if last else -1) if dash else int(count) if count else -1 if keyword else 1
        if amount < 0:
            amount = max(0, (len(candidates) - first + step - 1) // step)
        found, i = [], first
        for _ in range(amount):
            if count and i >= len(candidates):
                i = 0
            if self.physical_input and candidates and candidates[0].type not in IO_TYPES:
                obj = next((o for o in candidates if o.os_index == i), None)
            else:
                obj = candidates[i] if i < len(candidates) else None
            if obj is not None:
                found.append(obj)
            i += step
        if not found:
            raise UsageError(f"{given}: no such object; `topo show{' -p' if self.physical_input else ''}` lists them")
        if dot:
            return [x for o in found for x in self._pick(o.cpuset, below, given)]
        return found

    def _kind(self, word: str, given: str):
        wanted = parse_type(word)
        if wanted is None:
            raise UsageError(f"{given}: unknown type {word!r}; name one such as package, numa, l3, core, pu, pci, os")
        return wanted

    def _level(self, word: str, given: str) -> list[Obj]:
        """The objects of a type (or at a depth), in logical order."""
        if word.isdigit():
            normal = levels(self.machine)
            if int(word) >= len(normal):
                raise UsageError(f"{given}: depth {word}, but the machine has {len(normal)} levels "
                                 f"(0-{len(normal) - 1})")
            return normal[int(word)]
        wanted = self._kind(word, given)
        found = sorted((o for o in self.objects if matches(o, wanted) or o.type == wanted[0] == "Bridge"),
                       key=lambda o: o.logical)
        if not found:
            raise UsageError(f"{given}: this machine has no {word} object")
        return found

    # ---- the answers ----------------------------------------------------------------------------
    def index(self, obj: Obj) -> str:
        if not self.physical_output:
            return str(obj.logical)
        return "-1" if obj.os_index is None else str(obj.os_index)

    def intersecting(self, cpus: CpuSet, word: str) -> list[Obj]:
        """The objects of a type (or at a depth) whose CPUs meet `cpus` (-I, -N)."""
        return [o for o in self._level(word, word) if _cpus(o).intersects(cpus)]

    def hierarchical(self, cpus: CpuSet, words: list[str], root: CpuSet | None = None, prefix: str = "") -> list[str]:
        """-H TYPE1.TYPE2: each object of TYPE1 meeting `cpus`, then each of TYPE2 inside it, as
        `Package:1.Core:2` (indexes counted inside the object above)."""
        root = self.machine.cpuset if root is None else root
        out = []
        inside = [o for o in self._level(words[0], words[0]) if _cpus(o).intersects(root)]
        for n, o in enumerate(inside):
            if not o.cpuset.intersects(cpus):
                continue
            index = self.index(o) if self.physical_output else n  # logical: inside the object above
            name = f"{prefix}{'.' if prefix else ''}{type_name(o, True)}:{index}"
            out += self.hierarchical(cpus & o.cpuset, words[1:], o.cpuset, name) if words[1:] else [name]
        return out

    def largest(self, cpus: CpuSet) -> list[str]:
        """The largest objects inside `cpus`, first one first, until they cover it (--largest)."""
        out, left = [], cpus & self.machine.cpuset
        while left:
            obj = self.machine
            while not obj.cpuset <= left:
                child = next((c for c in obj.children if c.cpuset.intersects(left)), None)
                if child is None:
                    break
                obj = child
            out.append(f"{type_name(obj, True)}:{self.index(obj)}")
            if not obj.cpuset & left:
                break
            left -= obj.cpuset
        return out

    def local_memory(self, cpus: CpuSet) -> list[Obj]:
        """The NUMA nodes whose CPUs hold `cpus` or lie inside them (--local-memory)."""
        nodes = sorted((o for o in self.objects if o.type == "NUMANode"), key=lambda o: o.logical)
        return [n for n in nodes if cpus <= n.cpuset or n.cpuset <= cpus]


def _cpus(obj: Obj) -> CpuSet:
    """An object's CPUs; an I/O object's are those of the object it hangs from."""
    while obj.type in IO_TYPES and obj.parent is not None:
        obj = obj.parent
    return obj.cpuset


def _cpuset(text: str, given: str) -> CpuSet:
    """hwloc's 32-bit words (`0x00000001,0xffffffff`) or taskset's one number (`0x1ffffffff`)."""
    if "," not in text and _TASKSET.match(text):
        return CpuSet.from_mask(int(text[2:], 16))
    from topo.probes.hwloc_xml import parse_bitmap

    try:
        if text and "," in text or text.startswith("0x"):
            return parse_bitmap(text)
    except ParseError:
        pass
    raise UsageError(f"{given}: not a location; give all, a cpuset such as 0x000000ff, TYPE:INDEX such as "
                     "core:2 or numa:1.pu:0, os=NAME or pci=BUSID")


def format_cpus(cpus: CpuSet, output_format: str = "hwloc") -> str:
    """A cpuset as hwloc-calc prints it: hwloc's words, taskset's number, or a cpulist."""
    return {"hwloc": bitmap, "taskset": lambda s: f"0x{s.mask:x}", "list": CpuSet.to_list}[output_format](cpus)


def single(cpus: CpuSet) -> CpuSet:
    return CpuSet.from_mask(cpus.mask & -cpus.mask)


def no_smt(calc: Calc, cpus: CpuSet) -> CpuSet:
    """The first PU of each core among `cpus` (hwloc_bitmap_singlify_per_core)."""
    out = cpus
    for core in (o for o in calc.objects if o.type == "Core"):
        mine = core.cpuset & cpus
        out = (out - mine) | single(mine)
    return out
