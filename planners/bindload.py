"""Reading a binding from what a user gives: a bind JSON file, inline JSON text, or msrun's dict
form of --bind_core/--bind_numa (``{"device0": ["0-9", "20-29"]}``, read by position: the i-th
``deviceX`` key is local rank i's). One loader for `topo launch`, `topo bind` and `topo validate`.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

from topo.cpuset import CpuSet
from topo.errors import ParseError
from topo.loader import read_json, read_regular

from topo.planners.bindplan import CPU_MODES, MEMORY_MODES, BindPlan, ProcessBinding, as_written, normalize_key

UNIFIED_KEYS = ("bind_config", "bind_cpu", "bind_memory")
# The largest bind JSON file read: msrun's are a few KB (a few hundred bytes per device), so 16 MiB
# is thousands of times any real one; a larger file is refused by its size before it is read.
BIND_JSON_LIMIT = 16 << 20
_TABLE_KEY = re.compile(r"device[0-9]{1,18}|scheduler")
# msrun's per-item pattern (ASCII digits): "0-9" or "1,2,3"; a mixed "0-3,5" must be ["0-3", "5"].
_TABLE_ITEM = re.compile(r"[0-9]+-[0-9]+|[0-9]+(?:,[0-9]+)*")


class JsonObject(dict):
    """A JSON object as read, plus the keys it held more than once (``json.loads`` keeps the last)."""
    duplicate_keys: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, Any]]) -> JsonObject:
    obj = JsonObject(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.duplicate_keys = tuple(dict.fromkeys(k for k, _ in pairs if k in seen or seen.add(k)))
    return obj


def parse_json(text: str) -> Any:
    """``read_json`` (bounded ``json.loads``) with duplicate keys recorded (see JsonObject); ValueError."""
    return read_json(text, object_pairs_hook=_object)


@dataclass(frozen=True)
class BindSource:
    data: Any  # the JSON value as read (a JsonObject once the argparse-time checks pass)
    path: str | None  # absolute path (MSRUN_BIND_FILE), None for inline JSON text
    sha256: str | None  # of the file's bytes (MSRUN_BIND_FILE_HASH)


@dataclass(frozen=True)
class LoadedBind:
    plan: BindPlan
    path: str | None = None
    sha256: str | None = None
    table: bool = False  # msrun's dict form: read by position, combined with the other flag's table


def read_bind_json(value: str) -> BindSource:
    """A bind JSON from a file path or inline JSON text, with msrun's argparse-time checks."""
    if value.endswith(".json") and not os.path.exists(value):
        raise ParseError(f"bind_numa json file '{value}' does not exist.")
    if not os.path.exists(value):
        try:
            data = parse_json(value)
        except ValueError as exc:
            raise ParseError(f"bind file {value[:200]!r} is neither an existing file nor JSON text; "
                             "pass the path of a bind JSON (see `topo plan -o FILE`)") from exc
        if not isinstance(data, dict) or "bind_config" not in data:
            raise ParseError(f"inline bind JSON must be an object with a 'bind_config' key, got {value[:200]!r}")
        return BindSource(data, None, None)
    if not os.path.isfile(value):
        raise ParseError(f"bind_numa json path '{value}' is not a file.")
    try:
        raw = read_regular(value, BIND_JSON_LIMIT)
        data = parse_json(raw.decode("utf-8"))
    except (OSError, ValueError) as exc:
        # msrun's words first (scripts match them), then what is wrong and where
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        if getattr(exc, "size", None):
            why = f"{why}, more than the {BIND_JSON_LIMIT} a bind JSON can be; msrun's are a few KB"
        raise ParseError(f"Failed to load bind_numa json file: {value}. ({why}; fix the file or "
                         "write a new one with `topo plan -o FILE`)") from exc
    if not isinstance(data, dict):
        raise ParseError(f"bind_numa json file '{value}' should be a json object.")
    config = data.get("bind_config", {})
    if not isinstance(config, dict):
        raise ParseError("bind_config must be a json object.")
    if str(config.get("bind_cpu_mode", "none")).lower() not in CPU_MODES:
        raise ParseError("'bind_cpu_mode' only supports 'cpu'/'numa'/'none'.")
    if str(config.get("bind_memory_mode", "none")).lower() not in MEMORY_MODES:
        raise ParseError("'bind_memory_mode' only supports 'numa'/'none'.")
    return BindSource(data, os.path.abspath(value), hashlib.sha256(raw).hexdigest())


def load_bind(value: str) -> LoadedBind:
    """A bind JSON (path or inline text) read and checked against msrun's schema."""
    return plan_of(read_bind_json(value))


def plan_of(source: BindSource) -> LoadedBind:
    """The BindPlan of a bind JSON read by read_bind_json; ParseError naming the first schema error."""
    return LoadedBind(plan_from_json(source.data, where=source.path or "inline bind JSON"),
                      source.path, source.sha256)


def plan_from_json(data: Any, *, where: str = "bind JSON") -> BindPlan:
    """The BindPlan of a decoded bind JSON object; ParseError naming the first schema error."""
    from topo.planners.bindcheck import one_line, read_plan

    plan, problems = read_plan(data)
    if plan is None:
        raise ParseError(f"{where}: {one_line([p for p in problems if p.severity == 'error'])}")
    return plan


def load_table(value: Mapping, flag: str) -> LoadedBind:
    """msrun's table form of --bind_core (CPUs) or --bind_numa (NUMA nodes), as a positional plan."""
    label, desc = ("NUMA", "numaidX") if flag == "--bind_numa" else ("CPU", "cpuidX")
    repeated = getattr(value, "duplicate_keys", ())
    if repeated:
        raise ParseError(f"{flag}: key {repeated[0]!r} appears more than once; keep one entry per device")
    seen: dict[str, str] = {}
    processes = []
    for key, items in value.items():
        if not _TABLE_KEY.fullmatch(str(key)):
            raise ParseError(f"{flag}: key {key!r} must be 'scheduler' or 'deviceX'")
        norm = normalize_key(key)
        if norm in seen:
            raise ParseError(f"{flag}: keys {seen[norm]!r} and {key!r} name the same device; keep one")
        seen[norm] = key
        if not isinstance(items, list):
            raise ParseError(f"{flag}: value of {key} should be a list like [\"0-9\"], got {items!r}")
        cleaned = []
        for item in items:
            if not isinstance(item, str):
                raise ParseError(f"{flag}: {label} {item!r} of {key} should be a string")
            item = as_written(item)
            if not _TABLE_ITEM.fullmatch(item):
                raise ParseError(
                    f"{flag}: {label} {item[:60]!r} of {key} should look like '{desc}', "
                    f"'{desc},{desc[:-1]}Y' or '{desc}-{desc[:-1]}Y' (split '0-3,5' into [\"0-3\", \"5\"])")
            cleaned.append(item)
        text = ",".join(cleaned)
        try:
            ids = CpuSet.parse(text, msrun=True)
        except ParseError as exc:
            raise ParseError(f"{flag}: {key}: {exc}") from None
        if not text:
            processes.append(ProcessBinding(norm))
        elif label == "CPU":
            processes.append(ProcessBinding(norm, (("main", text),), module_cpus=(("main", ids),)))
        else:
            processes.append(ProcessBinding(norm, cpu_nodes=text, memory=text, cpu_node_set=ids, memory_nodes=ids))
    cpu_mode, memory_mode = ("cpu", "none") if label == "CPU" else ("numa", "numa")
    return LoadedBind(BindPlan.build(processes, cpu_mode=cpu_mode, memory_mode=memory_mode), table=True)

