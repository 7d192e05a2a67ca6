"""CPU kinds from sysfs, by hwloc 2.9's Linux rules (`look_sysfscpukinds`, `lstopo --cpukinds`).

PUs are grouped by `cpuinfo_max_freq` (where every PU has a base frequency, max frequencies within 10%
among PUs of one base merged to the lowest: Turbo Boost Max 3.0 cores are no other kind), `base_frequency`,
then `cpu_capacity`, each cutting the kinds found so far; ranked by distinct capacities, else by base
(or max) frequency.
"""

from __future__ import annotations

import struct

from topo.cpuset import CpuSet
from topo.fsroot import FsRoot
from topo.model import CpuKind
from topo.numbers import ascii_number

CPU = "/sys/devices/system/cpu"
ADJUST_MAX = 10  # percent, hwloc's default (HWLOC_CPUKINDS_MAXFREQ=adjust=10)


def _value(fs: FsRoot, path: str) -> int | None:
    """The unsigned number in a sysfs file, None when it is missing or not one (hwloc skips those)."""
    return ascii_number((fs.read(path) or "").strip(), (1 << 32) - 1)


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _adjust_maxfreqs(maxes: dict[int, set[int]], bases: dict[int, set[int]]) -> None:
    """Merge max frequencies within ADJUST_MAX% among PUs of one base into the lowest, in float32 as hwloc."""
    for base_pus in bases.values():
        values = [value for value, pus in maxes.items() if pus & base_pus]
        low, high = min(values, default=0), max(values, default=0)
        if low == high or _f32(_f32(_f32(high - low) / _f32(low)) * 100) >= ADJUST_MAX:
            continue
        for value in list(maxes):
            moved = maxes[value] & base_pus
            if value != low and moved:
                maxes[low] |= moved
                maxes[value] -= moved
                if not maxes[value]:
                    del maxes[value]


def _register(kinds: list[dict], pus: set[int], forced: int | None, name: str, value: str) -> None:
    """Cut the kinds by a new set of PUs (hwloc_internal_cpukinds_register)."""
    for kind in list(kinds):
        if not pus:
            break
        common = pus & kind["pus"]
        if not common:
            continue
        if kind["pus"] <= pus:  # the new set contains the kind: the kind gets the info
            kind["infos"].setdefault(name, value)
            kind["forced"] = forced if kind["forced"] is None else kind["forced"]
        else:  # the new set takes part of the kind: a new kind with both kinds' infos
            kind["pus"] -= common
            kinds.append({"pus": common, "forced": forced, "infos": {**kind["infos"], name: value}})
        pus = pus - common
    if pus:
        kinds.append({"pus": pus, "forced": forced, "infos": {name: value}})


def rank_kinds(kinds: list[dict]) -> list[tuple[dict, int | None]]:
    """The kinds ({"pus", "forced", "infos"}) with their efficiency, least efficient first (None: unranked)."""
    if len(kinds) == 1:
        return [(kinds[0], 0)]
    keys = [k["forced"] for k in kinds]
    if None in keys or len(set(keys)) < len(keys):
        base = [ascii_number(k["infos"].get("FrequencyBaseMHz", "")) or 0 for k in kinds]
        top = [ascii_number(k["infos"].get("FrequencyMaxMHz", "")) or 0 for k in kinds]
        keys = base if all(base) else top if all(top) else None
        if keys is None or len(set(keys)) < len(keys):
            return [(k, None) for k in kinds]
    return [(kinds[i], rank) for rank, (_, i) in enumerate(sorted(zip(keys, range(len(kinds)))))]


def probe_cpukinds(fs: FsRoot, pus: CpuSet) -> tuple[CpuKind, ...]:
    """The CPU kinds of `pus` (none where sysfs has no cpufreq or capacity files)."""
    maxes, bases, capacities = {}, {}, {}  # value -> its PUs (hwloc_linux_cpukinds_add)
    max_without_base = False
    for pu in pus:
        top = _value(fs, f"{CPU}/cpu{pu}/cpufreq/cpuinfo_max_freq")
        base = _value(fs, f"{CPU}/cpu{pu}/cpufreq/base_frequency")
        if top:
            maxes.setdefault(top // 1000, set()).add(pu)
        if base:
            bases.setdefault(base // 1000, set()).add(pu)
        max_without_base |= bool(top and not base)
        capacity = _value(fs, f"{CPU}/cpu{pu}/cpu_capacity")
        if capacity is not None:
            capacities.setdefault(capacity, set()).add(pu)
    if maxes and not max_without_base:
        _adjust_maxfreqs(maxes, bases)
    kinds: list[dict] = []
    for sets, name, forced in ((maxes, "FrequencyMaxMHz", False), (bases, "FrequencyBaseMHz", False),
                               (capacities, "LinuxCapacity", True)):
        for i, (value, members) in enumerate(sorted(sets.items())):
            _register(kinds, set(members), i if forced else None, name, str(value))
    return tuple(CpuKind(CpuSet(k["pus"]), rank, k["infos"]) for k, rank in rank_kinds(kinds))
