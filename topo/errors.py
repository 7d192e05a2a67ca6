"""The exceptions topo raises. The CLI turns each into one line and a non-zero exit, once, at the edge."""


class TopoError(Exception):
    """Base of every error meant for the user: its message names the thing and the fix."""

    exit_code = 1


class ParseError(TopoError, ValueError):
    """Text (a cpulist, a mask, a JSON value) that does not parse."""


class ProbeError(TopoError):
    """A source of topology information that exists but cannot be read or makes no sense."""


class UsageError(TopoError):
    """A request that cannot be satisfied as asked (bad option combination, unknown device, ...)."""

    exit_code = 2
