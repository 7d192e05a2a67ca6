"""The master address as msrun treats it: resolved to an IP, "local" when one of this machine's
interfaces carries it, and the source IP used to reach it ({ip} in --worker_log_name)."""

from __future__ import annotations

import functools
import socket

from topo.cpuset import excerpt
from topo.errors import UsageError

MAX_LABEL = 63  # DNS: each dot-separated label of a host name is 1 to 63 octets (RFC 1035)
MAX_NAME = 253  # and the whole name at most 253 characters, written without its final dot


def check_host(name: str, what: str | None = None, fix: str | None = None) -> None:
    """UsageError naming the value (`what`, by default --master_addr='NAME') when `name` is not a
    host name DNS and IDNA take (checked before socket calls, where it ends as a UnicodeError); one
    final dot (a fully qualified name) is allowed."""
    what = what or f"--master_addr={excerpt(name)!r}"
    fix = fix or "give an IP address or a host name of dot-separated labels of 1 to 63 characters"
    body = name[:-1] if name.endswith(".") else name
    if not body:
        raise UsageError(f"{what} is empty; {fix}")
    if len(body) > MAX_NAME:
        raise UsageError(f"{what} is {len(body)} characters long, more than the {MAX_NAME} of a host name; {fix}")
    for label in body.split("."):
        if not label:
            raise UsageError(f"{what} has an empty label (two dots in a row, or a leading dot); {fix}")
        if len(label) > MAX_LABEL:
            raise UsageError(f"{what} has a label of {len(label)} characters, more than {MAX_LABEL}; {fix}")
    try:
        body.encode("idna")
    except UnicodeError as exc:
        raise UsageError(f"{what} is not a host name IDNA can encode ({exc}); {fix}") from None


def resolve_master(addr: str) -> str:
    """The IP for --master_addr: a literal as-is (brackets of "[::1]" dropped), else DNS."""
    text = addr.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    for family in (socket.AF_INET, socket.AF_INET6):  # a literal, written the canonical way
        try:
            return socket.inet_ntop(family, socket.inet_pton(family, text))
        except (OSError, ValueError):  # ValueError: a NUL byte
            continue
    check_host(text, f"--master_addr={excerpt(addr)!r}")
    try:
        return socket.getaddrinfo(text, None, socket.AF_UNSPEC, socket.SOCK_STREAM)[0][4][0]
    except (OSError, IndexError, UnicodeError) as exc:
        raise UsageError(f"--master_addr={addr!r} does not resolve ({exc}); give an IP or a resolvable host "
                         "name") from None


def is_local(ip: str) -> bool:
    """True when `ip` belongs to this machine (msrun parses `ip -j addr`; a bind asks the kernel)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((ip, 0))
        return True
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def local_ip(master_ip: str) -> str:
    """The source address towards `master_ip` (msrun's `{ip}` in --worker_log_name): a UDP "connect"
    picks the route without sending anything."""
    family = socket.AF_INET6 if ":" in master_ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((master_ip, 8117))
            return s.getsockname()[0]
    except OSError as exc:
        raise UsageError(f"cannot find a route to --master_addr={master_ip} ({exc}); give an address this "
                         "machine reaches") from None
