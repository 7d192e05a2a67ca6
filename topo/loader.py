"""load_topology(): a Topology from a file, either format a user may have.

`topo show --json` output (schema topo.topology/1) and hwloc XML (`lstopo --of xml`) are told apart
by their first character, so a file's name or extension never matters.
"""

from __future__ import annotations

import json
import os

from topo.errors import ProbeError
from topo.model import Topology


def load_topology(path: str | os.PathLike) -> Topology:
    """The topology saved in `path`: our JSON or an hwloc XML export (v2, or v1)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ProbeError(f"cannot read topology file {path}: {exc.strerror}") from None
    head = text.lstrip()[:1]
    if head == "{":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProbeError(f"{path}: not valid JSON ({exc}); write one with `topo show --json`") from None
        return Topology.from_dict(data)
    if head == "<":
        from topo.probes.hwloc_xml import parse_hwloc_xml

        return parse_hwloc_xml(text, path)
    raise ProbeError(
        f"{path}: neither topo JSON nor hwloc XML; write one with `topo show --json > FILE` "
        "or `lstopo --of xml FILE`"
    )
