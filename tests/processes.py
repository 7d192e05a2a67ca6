"""Process checks the launcher tests share: is a pid alive, and waiting for a condition."""

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
