"""load_topology(): a Topology from a file, `topo show --json` output or hwloc XML (`lstopo --of xml`),
told apart by their first character, never by the file's name, and checked (`Topology.check()`); and
the bounded readers of files and JSON text (topology, bind and job record).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from typing import Any

from topo.errors import ProbeError
from topo.model import MAX_PUS, Topology

# The largest export hwloc writes (8192 PUs, thousands of PCI functions) is some 20 MB of XML.
MAX_BYTES = 64 << 20
# A topology JSON holds an object or two per PU, cache, device and NUMA node (a bind JSON one per
# process): sixteen per PU of MAX_PUS is more than any. An empty one costs 64 bytes for its 3.
MAX_JSON_CONTAINERS = 16 * MAX_PUS
_HOW = "write one with `topo show --json > FILE` or `lstopo --of xml FILE`"


class Refused(ValueError):
    """A file read_regular does not read: not a regular file (`size` None), or `size` bytes, over its limit."""

    def __init__(self, size: int | None = None) -> None:
        super().__init__("not a regular file" if size is None else f"it is {size} bytes")
        self.size = size


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of the regular file `path`, refused (Refused) by its size before they are read
    when over `limit`; OSError as the system raises it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block the open
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused()
        data = os.read(fd, limit + 1) if info.st_size <= limit else b""  # a regular file gives it all at once
        size = max(len(data), os.fstat(fd).st_size)  # a file grown since the first fstat counts too
    finally:
        os.close(fd)
    if size > limit:
        raise Refused(size)
    return data


def load_topology(path: str | os.PathLike) -> Topology:
    """The topology saved in `path`: our JSON or an hwloc XML export (v2, or v1)."""
    path = os.fspath(path)
    try:
        text = read_regular(path, MAX_BYTES).decode("utf-8")
    except OSError as exc:
        raise ProbeError(f"cannot read topology file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ProbeError(f"{path}: not a text file (byte {exc.start} is not UTF-8); {_HOW}") from None
    except Refused as exc:
        what = exc if exc.size is None else f"larger than {MAX_BYTES >> 20} MiB, more than any machine's topology"
        raise ProbeError(f"{path}: {what}; {_HOW}") from None
    head = text.lstrip()[:1]
    if head == "{":
        return _from_json(text, path)
    if head == "<":
        from topo.probes.hwloc_xml import parse_hwloc_xml

        return parse_hwloc_xml(text, path)
    raise ProbeError(f"{path}: neither topo JSON nor hwloc XML; {_HOW}")


def read_json(text: str, **hooks) -> Any:
    """`json.loads(text, **hooks)`, its memory in proportion to the text: more than
    MAX_JSON_CONTAINERS arrays and objects (brackets in strings too) are refused before decoding.
    json.JSONDecodeError for text that is not JSON, ValueError saying what is refused for the rest."""
    if text.count("[") + text.count("{") > MAX_JSON_CONTAINERS:
        raise ValueError(f"more than {MAX_JSON_CONTAINERS} arrays and objects")
    try:
        return json.loads(text, **hooks)
    except json.JSONDecodeError:
        raise
    except RecursionError:  # arrays nested 100000 deep
        raise ValueError("nested too deep") from None
    except ValueError:  # a number longer than Python's int digit limit (4300)
        raise ValueError("a number thousands of digits long") from None


def _from_json(text: str, path: str) -> Topology:
    try:
        topology = Topology.from_dict(read_json(text))
        topology.check()
    except json.JSONDecodeError as exc:
        raise ProbeError(f"{path}: not valid JSON ({exc}); write one with `topo show --json`") from None
    except ValueError as exc:
        raise ProbeError(f"{path}: not a topology JSON ({exc}); write one with `topo show --json`") from None
    except ProbeError as exc:
        fix = "" if "topo show --json" in str(exc) else "; write it again with `topo show --json`"
        raise ProbeError(f"{path}: {exc}{fix}") from None
    if topology.is_this_system:
        # Saved on some machine's "/", read here from a file: never this machine (hwloc marks an XML-loaded
        # topology is_thissystem=0), so nothing binds or reads this shell's CUDA_VISIBLE_DEVICES against it.
        topology = replace(topology, root=path)
    return topology
