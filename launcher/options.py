"""msrun's option values, parsed the way msrun 2.10 parses them (spec/anchors.md §1.2, §1.9, §1.10, §1.12).

msrun reports bad values as argparse errors (exit 2) and bad resource ids later as tracebacks
(exit 1); here every problem is a UsageError (exit 2) raised before anything starts.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Mapping

from topo.errors import ParseError, UsageError

if TYPE_CHECKING:  # planners is imported only when a bind JSON is actually given
    from planners.bindjson import LoadedBind

_TABLE_KEY = re.compile(r"device\d+|scheduler")
# msrun's per-item pattern: "0-9" or "1,2,3"; a mixed "0-3,5" must be written ["0-3", "5"].
_TABLE_ITEM = re.compile(r"^(\d+-\d+|\d+(?:,\d+)*)$")
_UNIFIED_KEYS = ("bind_config", "bind_cpu", "bind_memory")

# What --bind_core / --bind_numa hold after parsing: off/auto, msrun's legacy table
# ({"device0": ["0-9", "20-29"], "scheduler": [...]}), or (bind_numa only) a unified bind JSON
# loaded by planners.bindjson (LoadedBind: data, path, sha256).
BindTable = Mapping[str, tuple[str, ...]]
BindValue = "bool | BindTable | LoadedBind"


def parse_literal_bool(text: str | bool, flag: str) -> bool:
    """msrun's `--join=True`: ast.literal_eval restricted to True/False (so 1/0 pass too).
    Lower-case true/false are accepted as well; msrun rejects them, nothing relies on that."""
    if isinstance(text, bool):
        return text
    value = str(text).strip()
    if value in ("True", "true", "1"):
        return True
    if value in ("False", "false", "0"):
        return False
    raise UsageError(f"{flag}={text!r}: expected True or False")


def parse_tail_worker_log(text: str | int) -> tuple[int, ...] | None:
    """`--tail_worker_log`: '-1' (every worker) -> None, else the ranks to tail."""
    ranks = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            ranks.append(int(part))
        except ValueError:
            raise UsageError(
                f"--tail_worker_log={text!r}: {part!r} is not a rank; give a comma list like 0,3 or -1 for all"
            ) from None
    if -1 in ranks:
        return None
    return tuple(ranks)


def parse_bind_core(value: Any) -> BindValue:
    """--bind_core: True/False (any case) or a JSON table {"deviceX"|"scheduler": ["cpus", ...]}."""
    return _parse_bind(value, "--bind_core", "CPU", "cpuidX")


def parse_bind_numa(value: Any) -> BindValue:
    """--bind_numa: True/False, a JSON table of NUMA ids, a unified bind JSON file, or inline unified JSON."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        if not text.startswith("{"):
            return _load_unified(text)
    return _parse_bind(value, "--bind_numa", "NUMA", "numaidX")


def _load_unified(value: str) -> LoadedBind:
    from planners.bindjson import load_bind

    try:
        return load_bind(value)
    except ParseError as exc:
        raise UsageError(f"--bind_numa: {exc}") from None


def _parse_bind(value: Any, flag: str, label: str, desc: str) -> BindValue:
    if isinstance(value, bool):
        return value
    if not isinstance(value, (str, Mapping)):
        from planners.bindjson import LoadedBind

        if isinstance(value, LoadedBind):
            return value
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        try:
            value = json.loads(text)
        except ValueError:
            raise UsageError(f"{flag}={text!r}: not True, False or a JSON object") from None
    if not isinstance(value, Mapping):
        raise UsageError(f"{flag}: {value!r} should be True, False or a JSON object, not {type(value).__name__}")
    if any(k in value for k in _UNIFIED_KEYS):
        if flag != "--bind_numa":
            raise UsageError(f"{flag}: a unified bind JSON (bind_config/bind_cpu/bind_memory) goes to --bind_numa")
        return _load_unified(json.dumps(value))
    table: dict[str, tuple[str, ...]] = {}
    for key, items in value.items():
        if not _TABLE_KEY.fullmatch(str(key)):
            raise UsageError(f"{flag}: key {key!r} must be 'scheduler' or 'deviceX'")
        if not isinstance(items, list):
            raise UsageError(f"{flag}: value of {key} should be a list like [\"0-9\"], got {items!r}")
        cleaned = []
        for item in items:
            if not isinstance(item, str):
                raise UsageError(f"{flag}: {label} {item!r} of {key} should be a string")
            item = re.sub(r"\s", "", item)
            if not _TABLE_ITEM.match(item):
                raise UsageError(
                    f"{flag}: {label} {item!r} of {key} should look like '{desc}', "
                    f"'{desc},{desc[:-1]}Y' or '{desc}-{desc[:-1]}Y' (split '0-3,5' into [\"0-3\", \"5\"])"
                )
            cleaned.append(item)
        table[str(key)] = tuple(cleaned)
    return table
