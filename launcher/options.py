"""msrun's option values, parsed as msrun 2.10 parses them; every problem is a UsageError raised
before anything starts (msrun: argparse errors, or tracebacks later)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Mapping

from topo.errors import ParseError, UsageError

_RANK = re.compile(r"-?[0-9]{1,9}")
if TYPE_CHECKING:  # planners is imported only when a binding is actually given
    from topo.planners.bindload import LoadedBind


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
        if not _RANK.fullmatch(part):  # ASCII digits only: int() would also read "١" as 1
            raise UsageError(f"--tail_worker_log={str(text)[:100]!r}: {part[:20]!r} is not a rank; give a comma "
                             "list like 0,3 or -1 for all")
        ranks.append(int(part))
    if -1 in ranks:
        return None
    return tuple(ranks)


def is_bind_file(value) -> bool:
    """A --bind_numa string naming a file (not True/False, not inline JSON)."""
    if not isinstance(value, str):
        return False
    text = value.strip()
    return text.lower() not in ("true", "false") and not text.startswith("{")


def parse_bind_core(value: Any) -> bool | LoadedBind:
    """--bind_core: True/False (any case) or a JSON table {"deviceX"|"scheduler": ["cpus", ...]}."""
    return _parse_bind(value, "--bind_core")


def parse_bind_numa(value: Any) -> bool | LoadedBind:
    """--bind_numa: True/False, a JSON table of NUMA ids, a unified bind JSON file, or inline unified JSON."""
    return _parse_bind(value, "--bind_numa")


def _parse_bind(value: Any, flag: str) -> bool | LoadedBind:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"  # without importing the planners, as an unbound launch
    from topo.planners.bindload import UNIFIED_KEYS, BindSource, LoadedBind, load_bind, load_table, parse_json, plan_of
    if isinstance(value, LoadedBind):
        return value
    try:
        if isinstance(value, str):
            text = value.strip()
            if flag == "--bind_numa" and is_bind_file(text):
                return load_bind(text)
            try:
                value = parse_json(text)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{flag}={text[:200]!r}: not True, False or a JSON object: {exc.msg} at line "
                                 f"{exc.lineno} column {exc.colno} (character {exc.pos})") from None
            except (ValueError, RecursionError):
                raise UsageError(f"{flag}={text[:200]!r}: not True, False or a JSON object") from None
        if not isinstance(value, Mapping):
            raise UsageError(f"{flag}: {value!r} should be True, False or a JSON object, not {type(value).__name__}")
        if any(k in value for k in UNIFIED_KEYS):
            if flag != "--bind_numa":
                raise UsageError(f"{flag}: a unified bind JSON (bind_config/bind_cpu/bind_memory) goes to --bind_numa")
            if "bind_config" not in value:
                raise UsageError(f"{flag}: inline bind JSON must be an object with a 'bind_config' key")
            return plan_of(BindSource(value, None, None))
        return load_table(value, flag)
    except ParseError as exc:
        raise UsageError(str(exc) if str(exc).startswith(flag) else f"{flag}: {exc}") from None
