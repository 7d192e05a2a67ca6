"""Costly topology files (hwloc XML, topology and bind JSON), hostile or just under a bound, and the
peak memory a fresh interpreter needs to read one: shared by tests/test_input_bounds.py and
benchmarks/input_bench.py. Files are written in pieces, so the writer itself stays small.

`measure` runs the reader in a child Python, modules imported and a small file read first, and
reports the growth of its resident peak (VmHWM, which unlike ru_maxrss is not inherited from the
parent through exec) while reading the file: what the file itself cost.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n<topology version="2.0">\n<object type="Machine" cpuset="0x1">'
TAIL = "</object>\n</topology>\n"
_BATCH = 1 << 16  # units written at a time


def write(path: Path, head: str, unit: str, count: int, tail: str) -> Path:
    """`head`, `unit` `count` times, then `tail`, written in batches."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(head)
        for done in range(0, count, _BATCH):
            f.write(unit * min(_BATCH, count - done))
        f.write(tail)
    return path


def fill(size: int, unit: str, head: str = HEAD, tail: str = TAIL) -> int:
    """How many `unit`s make a file of `size` bytes between head and tail."""
    return (size - len(head) - len(tail)) // len(unit)


def entity_xml(path: Path, size: int) -> Path:
    """One internal entity of 240 characters, referenced 100 times in each info value: expanded
    some 80 times over, under expat's amplification cap (100), so expat alone does not stop it."""
    head = HEAD.replace("<topology", f'<!DOCTYPE topology [<!ENTITY e "{"x" * 240}">]>\n<topology', 1)
    unit = f'<info name="e" value="{"&e;" * 100}"/>\n'
    return write(path, head, unit, fill(size, unit, head), TAIL)


def empty_elements_xml(path: Path, size: int) -> Path:
    """`<i/>` as often as `size` holds: four bytes each, some 80 bytes of tree each if built."""
    return write(path, HEAD, "<i/>", fill(size, "<i/>"), TAIL)


def attributes_xml(path: Path, size: int, per_element: int = 8) -> Path:
    """Info elements of `per_element` two-digit attributes each, as many as `size` and the element
    and attribute bounds allow: the costliest legal XML found (a dict entry and a string per
    attribute); it reads as a one-CPU machine."""
    from topo.probes.hwloc_xml import MAX_ATTRIBUTES, MAX_ELEMENTS

    unit = "<info " + " ".join(f'{chr(97 + i)}="{i:02}"' for i in range(per_element)) + "/>"
    count = min(fill(size, unit), MAX_ELEMENTS - 8, (MAX_ATTRIBUTES - 64) // per_element)
    return write(path, HEAD, unit, count, TAIL)


def empty_lists_json(path: Path, size: int, head: str = '{"schema": "topo.topology/1", "packages": [') -> Path:
    """A JSON whose list (packages of a topology, by default) holds `[]` as often as `size` holds:
    64 bytes each if built."""
    return write(path, head, "[],", fill(size, "[],", head, "[]]}"), "[]]}")


def unique_keys_json(path: Path, size: int) -> Path:
    """One object with distinct keys filling `size`: the costliest JSON without containers
    found (a key string, a memo entry and a dict entry each)."""
    head, tail = '{"schema": "topo.topology/1", "info": {', '"end":0}}'
    with open(path, "w", encoding="utf-8") as f:
        f.write(head)
        written, key = len(head) + len(tail), 0
        while written + 20 * 4096 < size:
            batch = "".join(f'"{k:x}":0,' for k in range(key, key + 4096))
            f.write(batch)
            written, key = written + len(batch), key + 4096
        f.write("".join(f'"{k:x}":0,' for k in range(key, key + (size - written) // 12)) + tail)
    return path


_CHILD = r"""
import json, re, resource, sys, time
from pathlib import Path

def hwm():
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())[1]) << 10

import topo
from topo.loader import load_topology
from topo.planners.bindload import read_bind_json
fixtures = Path(sys.argv[3]) / "fixtures"
load_topology(fixtures / "topology-json" / "synthetic-pack2-numa2-gpu.json")  # modules a read imports
load_topology(fixtures / "hwloc-v1" / "16ia64-8n2s.xml")
read = read_bind_json if sys.argv[2] == "bind" else load_topology
before, cpu, wall = hwm(), time.process_time(), time.monotonic()
try:
    read(sys.argv[1])
    error = ""
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"growth": hwm() - before, "cpu": time.process_time() - cpu, "wall": time.monotonic() - wall,
                  "error": error}))
"""


def measure(path: Path, reader: str = "topology") -> dict:
    """{"growth": bytes, "cpu": s, "wall": s, "error": "Type: message" or ""} of one read of `path`
    by load_topology (reader "topology") or read_bind_json ("bind") in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), reader, str(HERE)], capture_output=True,
                         text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)
