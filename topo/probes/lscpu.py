"""`lscpu`: the CPU side where sysfs does not give it (containers hiding /sys/devices/system/node or the CPU
topology; msrun reads NUMA nodes from lscpu alone). Two pure parsers: `lscpu -p=CPU,CORE,SOCKET,NODE,CACHE`
(caches as columns since util-linux 2.38, before as one `L1d:L1i:L2:L3` field; empty or `-` = unknown)
and plain `lscpu` (a cache's total with `(N instances)` since 2.37, the total alone in 2.34-2.36, per
instance as `32768K` before).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from topo.cpuset import MAX_ID, CpuSet, excerpt, union_all
from topo.numbers import ascii_number
from topo.errors import ParseError, ProbeError
from topo.fsroot import FsRoot
from topo.model import Cache, Core, NumaNode, Package
from topo.probes.sysfs import RawCpus, RawNodes
from topo.probes.tools import run_tool, stored_runner

PARSABLE_ARGS = ["lscpu", "-p=CPU,CORE,SOCKET,NODE,CACHE"]
# ASCII digits only ("١" would be 1 to int(), "²" a ValueError); sizes bounded so float() stays finite
_CACHE_NAME = re.compile(r"\AL([0-9])([di]?)\Z", re.I)
_SIZE = re.compile(r"\A([0-9]{1,15}(?:\.[0-9]{1,9})?)\s*([KMGT]?)(i?B)?\Z", re.I)
_NODE_KEY = re.compile(r"NUMA node(\S+) CPU\(s\)")  # the id checked by _int
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_LABEL = (1 << 64) - 1  # core, socket and cache ids are labels: the kernel's cache ids can be large
_MAX_NODES = 1024  # the kernel's MAX_NUMNODES


@dataclass(frozen=True)
class CpuRow:
    cpu: int
    core: int | None
    socket: int | None
    node: int | None
    caches: tuple[tuple[str, int], ...] = ()  # (("L1d", 0), ("L3", 1), ...)
    online: bool = True


@dataclass
class LscpuSummary:
    fields: dict[str, str] = field(default_factory=dict)
    numa_nodes: dict[int, CpuSet] = field(default_factory=dict)  # every listed node, CPU-less too
    cache_sizes: dict[str, int] = field(default_factory=dict)  # "L3" -> bytes per instance (if known)
    cache_totals: dict[str, int] = field(default_factory=dict)  # "L3" -> bytes, all instances

    @property
    def cpu_nodes(self) -> dict[int, CpuSet]:
        return {n: c for n, c in self.numa_nodes.items() if c}


def _int(text: str, most: int = MAX_ID, optional: bool = False) -> int | None:
    """A number lscpu printed: ASCII digits, at most `most` (MAX_ID for CPU and node ids); None for an
    `optional` one left empty or `-`."""
    text = text.strip()
    if optional and text in ("", "-"):
        return None
    number = ascii_number(text, most)
    if number is None:
        raise ParseError(f"expected a number up to {most} or '-', found {excerpt(text, 40)!r}")
    return number


def parse_parsable(text: str) -> list[CpuRow]:
    """`lscpu -p=CPU,CORE,SOCKET,NODE,CACHE` (either cache layout)."""
    columns, rows = None, []
    for line in text.splitlines():
        if line.startswith("#"):
            header = line[1:].strip()
            if header.upper().startswith("CPU,"):
                columns = [c.strip() for c in header.split(",")]
        elif line.strip():
            if columns is None:
                raise ParseError("lscpu -p output has no '# CPU,Core,...' header line")
            rows.append(_row(dict(zip(columns, line.split(","))), line))
    if not rows:
        raise ParseError("lscpu -p output lists no CPU")
    return rows


def _row(row: dict[str, str], line: str) -> CpuRow:
    """One CPU's row by header name (`Core` or `CORE`; caches as `L1d` columns or one `L1d:L1i:L2:L3` field)."""
    get = {name.upper(): value for name, value in row.items()}.get
    try:
        caches = []
        for name, value in row.items():
            if ":" in name or _CACHE_NAME.match(name):
                caches += [(sub, cache) for sub, v in zip(name.split(":"), value.split(":"))
                           if (cache := _int(v, _LABEL, True)) is not None]
        return CpuRow(_int(get("CPU", "")), _int(get("CORE", ""), _LABEL, True), _int(get("SOCKET", ""), _LABEL, True),
                      _int(get("NODE", ""), MAX_ID, True), tuple(caches), get("ONLINE", "yes") != "no")
    except ParseError as exc:
        raise ParseError(f"lscpu -p: cannot read line {excerpt(line.strip())!r}: {exc}") from None


def _bytes(text: str) -> int | None:
    m = _SIZE.match(text.strip())
    return round(float(m[1]) * _UNITS[m[2].upper()]) if m else None


def _instances(value: str) -> tuple[str, str] | None:
    """("32 MiB", "2") from "32 MiB (2 instances)", else None. One pass, no regex: a lazy group
    before spaces (`(.+?) *[(]`) takes time quadratic in the spaces of "1" + a million spaces + "x"."""
    size, sep, rest = value.rpartition("(")
    count, space, word = rest.partition(" ")
    if sep and size.strip() and space and word in ("instance)", "instances)") and count.isascii() and count.isdigit():
        return size.rstrip(), count
    return None


def parse_summary(text: str) -> LscpuSummary:
    """Plain `lscpu`, both layouts."""
    out = LscpuSummary()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        out.fields.setdefault(key, value)
        if m := _NODE_KEY.fullmatch(key):
            try:
                out.numa_nodes[_int(m.group(1))] = CpuSet.parse(value)
            except ParseError as exc:
                raise ParseError(f"lscpu: {key}: {exc}") from None
        elif m := re.fullmatch(r"(L[0-9][di]?) cache", key):
            name, inst, size = m.group(1), _instances(value), _bytes(value)
            if inst:
                total, count = _bytes(inst[0]), ascii_number(inst[1])
                if total is not None and count:  # an unreadable size or count is skipped, as sizes are
                    out.cache_totals[name] = total
                    out.cache_sizes[name] = total // count
            elif size is not None:
                # util-linux < 2.34: per instance ("32768K"); 2.34-2.36: the total, count unknown here
                (out.cache_sizes if re.fullmatch(r"[0-9]+K", value) else out.cache_totals)[name] = size
    if count := out.fields.get("NUMA node(s)"):
        nodes = ascii_number(count, _MAX_NODES)
        if nodes is None:
            raise ParseError(f"lscpu: NUMA node(s): expected a count up to {_MAX_NODES}, found {count[:40]!r}")
        for n in range(nodes):
            out.numa_nodes.setdefault(n, CpuSet())
    return out


@dataclass
class LscpuCpus:
    online: CpuSet
    packages: list[Package]
    cores: list[Core]
    caches: list[Cache]
    nodes: list[NumaNode]


def build_cpus(rows: list[CpuRow], summary: LscpuSummary | None = None) -> LscpuCpus:
    """Packages, cores, caches and NUMA nodes of the online rows. A cache's size is the summary's per
    instance, else its total over the rows' instances; without one the cache is left out, as hwloc
    drops zero-sized caches. No CPU-less node: lscpu says neither its memory nor its distances."""
    rows = [r for r in rows if r.online]
    online = CpuSet(r.cpu for r in rows)

    def grouped(key) -> dict:
        groups: dict = {}
        for r in rows:
            k = key(r)
            if k is not None:
                groups[k] = groups.get(k, CpuSet()) | CpuSet([r.cpu])
        return groups

    packages = [Package(s, c) for s, c in grouped(lambda r: r.socket if r.socket is not None else 0).items()]
    packages.sort(key=lambda p: p.cpuset.first())
    cores = [Core(core, sock, c) for (sock, core), c in grouped(
        lambda r: (r.socket if r.socket is not None else 0, r.core if r.core is not None else r.cpu)).items()]
    cores.sort(key=lambda c: c.cpuset.first())

    caches = []
    for name in sorted({name for r in rows for name, _ in r.caches}):
        m = _CACHE_NAME.match(name)
        if not m or summary is None:
            continue
        sets = grouped(lambda r, name=name: dict(r.caches).get(name))
        size = summary.cache_sizes.get(name)
        if size is None and name in summary.cache_totals and sets:
            size = summary.cache_totals[name] // len(sets)
        if size:
            kind = {"d": "data", "i": "instruction", "": "unified"}[m.group(2).lower()]
            caches.extend(Cache(int(m.group(1)), kind, size, c) for c in sets.values())
    caches.sort(key=lambda c: (c.level, c.type != "data", c.cpuset.first()))

    node_sets = grouped(lambda r: r.node)
    if not node_sets and summary is not None:
        node_sets = summary.cpu_nodes
    nodes = [NumaNode(n, c & online, 0, False, c & online, {}) for n, c in sorted(node_sets.items()) if c & online]
    return LscpuCpus(online, packages, cores, caches, nodes)


def probe_lscpu(runner=None) -> LscpuCpus:
    """The CPU side from lscpu -p and, for cache sizes, plain lscpu; `runner(argv)` gives a command's output."""
    runner = runner or run_tool
    rows = parse_parsable(runner(PARSABLE_ARGS))
    try:
        summary = parse_summary(runner(["lscpu"]))
    except (ProbeError, ParseError):
        summary = None  # sizes are a bonus; the layout stands without them
    return build_cpus(rows, summary)


def fill_gaps(fs: FsRoot, cpus: RawCpus, nodes: RawNodes, *, live: bool = False) -> tuple[RawCpus, RawNodes, str]:
    """The CPU side and NUMA nodes with lscpu's where sysfs had none, and the `probes["lscpu"]` status.
    lscpu runs only when `live`; on a captured root it would describe the wrong machine, so there the
    outputs a `topo capture` stored are read instead."""
    need_nodes, need_cpus = not nodes.from_sysfs, not cpus.has_topology
    runner = None if live else stored_runner(fs, "lscpu")
    if not live and runner is None:
        return cpus, nodes, "off: not this system"
    try:
        found = probe_lscpu(runner)
    except (ProbeError, ParseError) as exc:
        return cpus, nodes, f"unavailable: {exc}"
    online = cpus.online
    used = []
    if need_cpus:
        def restrict(objs):
            return [replace(o, cpuset=o.cpuset & online) for o in objs if o.cpuset & online]

        cpus = replace(cpus, packages=restrict(found.packages), cores=restrict(found.cores),
                       caches=restrict(found.caches) or cpus.caches, dies=[], clusters=[])
        used.append(f"{len(cpus.packages)} packages, {len(cpus.cores)} cores")
    if need_nodes and found.nodes:
        kept = [replace(n, cpuset=n.cpuset & online, locality=n.locality & online)
                for n in found.nodes if n.cpuset & online]
        covered = union_all(n.cpuset for n in kept)
        if covered != online:
            return cpus, nodes, f"ignored: lscpu's NUMA nodes miss CPUs {online - covered}"
        nodes = RawNodes(kept, [], False)
        used.append(f"{len(kept)} NUMA node{'' if len(kept) == 1 else 's'}")
    return cpus, nodes, "ok (" + ", ".join(used) + ")" if used else "ok (nothing new)"
