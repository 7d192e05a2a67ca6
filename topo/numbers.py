"""Readers of whole numbers and seconds given as text: ASCII digits only, bounded before conversion."""

from __future__ import annotations

import re

MAX_ID = (1 << 20) - 1  # the largest CPU or node id topo takes (why: topo.cpuset), and ascii_number's bound


def ascii_number(text: str, most: int = MAX_ID) -> int | None:
    """The value of ``text`` when it is ASCII digits alone (no sign, space or "_") and at most
    ``most``, else None. int() alone would also read "١" as 1 and "1_0" as 10, raise ValueError on
    "²", and take time quadratic in the digits, so the digits are checked and counted first."""
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0")
    if len(significant) > len(str(most)):
        return None
    value = int(significant) if significant else 0
    return value if value <= most else None


MAX_SECONDS = 7 * 24 * 3600  # a week: more than any grace period, interval or timeout topo waits
_SECONDS = re.compile(r"\A[0-9]{1,%d}(?:\.[0-9]{1,9})?\Z" % len(str(MAX_SECONDS)))
# What ascii_seconds reads, for the messages that refuse anything else.
SECONDS_FORM = f"a number of seconds (ASCII digits, optionally a point and decimals, at most {MAX_SECONDS})"


def ascii_seconds(text: str, most: float = MAX_SECONDS) -> float | None:
    """The value of ``text`` when it is ASCII seconds (``[0-9]+(.[0-9]+)?``, at most nine decimals)
    and at most ``most``, else None. float() alone would also read "١", "1_0", "1e3", "inf", "nan"."""
    if not _SECONDS.match(text):
        return None
    value = float(text)
    return value if value <= most else None
