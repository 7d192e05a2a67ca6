"""CPU kinds from sysfs, by hwloc 2.9's Linux rules (`look_sysfscpukinds`, `lstopo --cpukinds`).

Per PU, cpufreq's `cpuinfo_max_freq` and `base_frequency` (intel_pstate) and `cpu_capacity` (ARM
big.LITTLE) group the PUs by value. Where every PU has a base frequency, max frequencies that
differ by less than 10% among PUs of one base frequency are merged to the lowest (Turbo Boost Max
3.0 favoured cores are not another kind). The groupings are registered in that order - max, base,
capacity - each cut into the kinds found so far, as `hwloc_internal_cpukinds_register` does, and
ranked (`hwloc_internal_cpukinds_rank`): by capacity order where every kind has one and no two
share it, else by base frequency (max where some kind lacks a base), else not at all (efficiency
None, registration order).
"""

from __future__ import annotations

import struct

from topo.cpuset import CpuSet
from topo.fsroot import FsRoot
from topo.model import CpuKind
from topo.numbers import ascii_number

CPU = "/sys/devices/system/cpu"
ADJUST_MAX = 10  # percent, hwloc's default (HWLOC_CPUKINDS_MAXFREQ=adjust=10)


def _value(fs: FsRoot, path: str) -> int:
    """The unsigned number in a sysfs file, 0 when it is missing or not one (hwloc skips those)."""
    return ascii_number((fs.read(path) or "").strip(), (1 << 32) - 1) or 0


def _add(sets: list[list], value: int, pu: int) -> None:
    """Put `pu` in the set of `value`, sets kept in first-seen order (hwloc_linux_cpukinds_add)."""
    for entry in sets:
        if entry[0] == value:
            entry[1].add(pu)
            return
    sets.append([value, {pu}])


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _adjust_maxfreqs(maxes: list[list], bases: list[list]) -> None:
    """Merge max frequencies within ADJUST_MAX% of each other among PUs of one base frequency into
    the lowest, as hwloc does in single-precision floats."""
    for _, base_pus in bases:
        values = [value for value, pus in maxes if pus & base_pus]
        if not values or min(values) == max(values):
            continue
        low, high = min(values), max(values)
        if _f32(_f32(_f32(high - low) / _f32(low)) * 100) >= ADJUST_MAX:
            continue
        first = next(entry for entry in maxes if entry[0] == low)
        for entry in list(maxes):
            moved = entry[1] & base_pus
            if entry is not first and moved:
                first[1] |= moved
                entry[1] -= moved
                if not entry[1]:
                    maxes.remove(entry)


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
    """The kinds ({"pus", "forced", "infos"}) with their efficiency, least efficient first; as
    registered, None, when unranked."""
    if len(kinds) == 1:
        return [(kinds[0], 0)]
    keys = [k["forced"] for k in kinds]
    if None in keys or len(set(keys)) < len(keys):
        base = [ascii_number(k["infos"].get("FrequencyBaseMHz", "")) or 0 for k in kinds]
        top = [ascii_number(k["infos"].get("FrequencyMaxMHz", "")) or 0 for k in kinds]
        keys = base if all(base) else top if all(top) else None
        if keys is None or len(set(keys)) < len(keys):
            return [(k, None) for k in kinds]
    ordered = sorted(zip(keys, range(len(kinds))))
    return [(kinds[i], rank) for rank, (_, i) in enumerate(ordered)]


def probe_cpukinds(fs: FsRoot, pus: CpuSet) -> tuple[CpuKind, ...]:
    """The CPU kinds of `pus` (none where sysfs has no cpufreq or capacity files)."""
    maxes: list[list] = []
    bases: list[list] = []
    capacities: list[list] = []
    max_without_base = False
    for pu in pus:
        top = _value(fs, f"{CPU}/cpu{pu}/cpufreq/cpuinfo_max_freq")
        base = _value(fs, f"{CPU}/cpu{pu}/cpufreq/base_frequency")
        if top:
            _add(maxes, top // 1000, pu)
        if base:
            _add(bases, base // 1000, pu)
        max_without_base |= bool(top and not base)
        capacity = ascii_number((fs.read(f"{CPU}/cpu{pu}/cpu_capacity") or "").strip(), (1 << 32) - 1)
        if capacity is not None:
            _add(capacities, capacity, pu)
    if maxes and not max_without_base:
        _adjust_maxfreqs(maxes, bases)
    kinds: list[dict] = []
    for sets, name, forced in ((maxes, "FrequencyMaxMHz", False), (bases, "FrequencyBaseMHz", False),
                               (capacities, "LinuxCapacity", True)):
        for i, (value, members) in enumerate(sorted(sets, key=lambda entry: entry[0])):
            _register(kinds, set(members), i if forced else None, name, str(value))
    return tuple(CpuKind(CpuSet(k["pus"]), rank, k["infos"]) for k, rank in rank_kinds(kinds))
