"""Whole numbers and seconds given as options or through their environment variables (PET_*, MS_*): ASCII digits
only, read by topo.numbers.ascii_number and ascii_seconds. click's INT would also take "١" as 1, "1_0" as 10 and a
5000-digit value to a ValueError past its own message; click's FLOAT "inf", "nan" and "1e3" as well."""

from __future__ import annotations

import click

from topo.numbers import SECONDS_FORM, ascii_number, ascii_seconds

_MOST = (1 << 31) - 1  # more than any count, port, rank or timeout in seconds a launcher takes


class _Ascii:
    def convert(self, value, param, ctx):
        if isinstance(value, str):
            text = value.strip()
            number = ascii_number(text.removeprefix("-"), _MOST)
            if number is None:
                self.fail(f"{value[:40]!r} is not a whole number (ASCII digits, at most {_MOST})", param, ctx)
            value = -number if text.startswith("-") else number
        return super().convert(value, param, ctx)


class Whole(_Ascii, click.types.IntParamType):
    """click.INT, in ASCII digits."""


class WholeRange(_Ascii, click.IntRange):
    """click.IntRange, in ASCII digits."""


WHOLE = Whole()


class Seconds(click.ParamType):
    """A non-negative number of seconds: ASCII digits, optionally a point and decimals (topo.numbers.ascii_seconds)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value  # a default, already a number
        number = ascii_seconds(value.strip())
        if number is None:
            self.fail(f"{value[:40]!r} is not {SECONDS_FORM}", param, ctx)
        return number


SECONDS = Seconds()
