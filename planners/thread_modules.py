"""gen_bind_json's thread-module layout as text: ``runtime=4-8,minddata=9-12,main=13-19``, positions
relative to a process's CPU list (``4-8``: its 5th to 9th CPU); ``option`` names it in messages."""

from __future__ import annotations

from topo.errors import UsageError
from topo.numbers import ascii_number

from topo.planners.bindplan import MODULES


def parse_range(option: str, text: str) -> tuple[int, int]:
    """``"4-8"`` -> (4, 8), with gen_bind_json's messages for anything else."""
    lo, dash, hi = text.partition("-")
    start, end = (ascii_number(lo.strip()), ascii_number(hi.strip())) if dash else (None, None)
    if start is None or end is None:
        raise UsageError(f"{option} must be in 'start-end' format, got '{text}'.")
    if start > end:
        raise UsageError(f"{option} start must be <= end, got '{text}'.")
    return start, end


def parse_modules(text: str, option: str = "modules") -> tuple[tuple[str, int, int], ...]:
    """``runtime=4-8,minddata=9-12,main=13-19`` -> (("runtime", 4, 8), ...), in the order given."""
    out: list[tuple[str, int, int]] = []
    for item in text.split(","):
        name, eq, span = item.strip().partition("=")
        name = name.strip()
        if not eq or name not in MODULES:
            raise UsageError(f"bad module {item.strip()!r} in {option} {text!r}: write NAME=START-END "
                             f"with NAME one of {', '.join(MODULES)}")
        if any(name == m for m, _, _ in out):
            raise UsageError(f"module {name!r} given twice in {option} {text!r}")
        out.append((name, *parse_range(f"{option} {name}", span)))
    return tuple(out)
