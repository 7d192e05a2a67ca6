"""Process checks the tests share: is a pid alive, waiting for a condition, a cpulist read as a set."""

from __future__ import annotations

import time


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie has exited; only its parent's reap is left)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(predicate, timeout: float = 20.0) -> bool:
    """Whether `predicate()` became true within `timeout` seconds (checked every 20 ms, and once at the end)."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def cpulist(text: str) -> set[int]:
    """A Linux cpulist ("0-2,5") as a set, parsed here rather than by the code under test."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out
