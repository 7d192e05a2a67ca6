"""hwloc's own answer for a generated root: `lstopo-no-graphics --of xml` with HWLOC_FSROOT.

Tests that generate a machine with `sysfs_builder` compare topo with what the real hwloc (Debian's
package, installed in CI) reports for the same files. `answer(root)` reduces lstopo's XML to the
fields topo models; tests skip when lstopo is absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from topo.cpuset import CpuSet

from conftest import fixture_names, parse_test_file

LSTOPO = shutil.which("lstopo-no-graphics")
needs_lstopo = pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (Debian package hwloc) is not installed")


def lstopo_of(root: Path, *args: str, **env: str) -> str:
    """What lstopo-no-graphics prints of the sysfs below `root` (Linux backend alone, C locale)."""
    run_env = dict(os.environ, HWLOC_FSROOT=str(root), HWLOC_COMPONENTS="linux,stop", LC_ALL="C", **env)
    return subprocess.run([LSTOPO, *args], env=run_env, capture_output=True, text=True, timeout=60,
                          check=True).stdout


def topo_console(root: Path) -> str:
    """`topo show` of the sysfs below `root`, with the I/O objects lstopo shows by default."""
    from topo.discovery import discover
    from topo.views.console import Options, render_console

    return render_console(discover(root).io_view("important"), Options()) + "\n"


def captured_tarballs() -> list[str]:
    """One fixture name per captured tarball (several fixtures reuse one with other lstopo options)."""
    seen = {}
    for name in fixture_names():
        source = parse_test_file(name)["source"]
        if source and source.endswith(".tar.bz2"):
            seen.setdefault(source, name)
    return sorted(seen.values())


_IO_TYPES = {"Bridge", "PCIDev", "OSDev", "Misc"}


@dataclass
class Answer:
    pus: str = ""
    packages: list[tuple[int | None, str]] = field(default_factory=list)
    cores: list[tuple[int | None, str]] = field(default_factory=list)
    numa_nodes: list[tuple[int, str, str | None]] = field(default_factory=list)  # (P#, cpuset, subtype)
    caches: list[tuple[int, str, str]] = field(default_factory=list)  # (level, type, cpuset)
    pci: dict[str, str] = field(default_factory=dict)  # busid -> cpuset of the normal parent
    stderr: str = ""


def _set(text: str | None) -> str:
    """hwloc's XML bitmap: 32-bit words most significant first, "0x" each, an all-zero word
    possibly left empty ("0x000000ff,,0x0000ffff")."""
    if not text:
        return ""
    mask = 0
    for word in text.split(","):
        mask = (mask << 32) | int(word.removeprefix("0x") or "0", 16)
    return CpuSet.from_mask(mask).to_list()


def _index(el: ET.Element) -> int | None:
    value = el.get("os_index")
    return None if value is None else int(value)


def answer(root: Path, *args: str, env: dict[str, str] | None = None) -> Answer:
    """What lstopo reports for the machine below `root` (whole I/O tree, linux backend only)."""
    run_env = dict(os.environ, HWLOC_FSROOT=str(root), HWLOC_COMPONENTS="linux,stop", LC_ALL="C")
    run_env.update(env or {})
    proc = subprocess.run([LSTOPO, "--of", "xml", "--whole-io", *args], env=run_env,
                          capture_output=True, text=True, timeout=60, check=True)
    out = Answer(stderr=proc.stderr)
    top = ET.fromstring(proc.stdout).find("object")
    assert top is not None and top.get("type") == "Machine"
    out.pus = _set(top.get("cpuset"))

    def walk(el: ET.Element, normal_parent: ET.Element, in_package: bool = False) -> None:
        kind = el.get("type")
        if kind == "Package" and not in_package:
            # A Package hwloc nests inside another (a CPU's smaller, stale package mask) is not
            # listed: topo's packages are disjoint and keep the outer one.
            out.packages.append((_index(el), _set(el.get("cpuset"))))
        elif kind == "Core":
            out.cores.append((_index(el), _set(el.get("cpuset"))))
        elif kind == "NUMANode":
            subtype = el.get("subtype")
            out.numa_nodes.append((_index(el), _set(el.get("cpuset")), subtype))
        elif kind.startswith("L") and kind.endswith("Cache"):
            cache_type = {"0": "unified", "1": "data", "2": "instruction"}[el.get("cache_type")]
            out.caches.append((int(el.get("depth")), cache_type, _set(el.get("cpuset"))))
        elif kind == "PCIDev":
            out.pci[el.get("pci_busid")] = _set(normal_parent.get("cpuset"))
        parent = normal_parent if kind in _IO_TYPES else el
        for child in el.findall("object"):
            walk(child, parent, in_package or kind == "Package")

    walk(top, top)
    return out


# ---- lstopo -v, reduced to what topo models ------------------------------------------------------
# Attributes topo prints in verbose mode; every other `Name=value` is an info topo does not read
# (DMI strings, OS device addresses and sizes, hwloc's own version) or writes for itself (topo...).
VERBOSE_KEPT = {"local", "total", "size", "linesize", "ways", "busid", "id", "class", "buses"}
_INFO = re.compile(r'(?<=[ (])([A-Za-z][A-Za-z0-9_]*)=("[^"]*"|[^ )]*) ?')


def comparable_verbose(lines: list[str]) -> list[str]:
    """lstopo -v lines without the infos topo does not model (a Package's CPUModel kept), the CPU
    kinds and memory attributes, cache P# (topo does not read the sysfs cache id) and a memory-side cache's line size and
    associativity."""
    out = []
    for line in lines:
        if line.startswith(("CPU kind", "Memory attribute")) or (line.startswith("  ") and " = " in line):
            continue
        package = line.lstrip().startswith("Package")
        line = _INFO.sub(lambda m: m.group(0) if m.group(1) in VERBOSE_KEPT or (package and m.group(1) == "CPUModel")
                         else "", line)
        line = re.sub(r"^( *L\d[di]?Cache)( L#\d+ \()P#\d+ ?", r"\1\2", line)
        line = re.sub(r"^( *L\d[di]?Cache) P#\d+", r"\1", line)
        if line.lstrip().startswith("MemCache"):  # topo does not read a memory-side cache's geometry
            line = re.sub(r" linesize=\d+( ways=\d+)?", "", line)
        out.append(line.replace(" )", ")").replace(" ()", "").rstrip())
    return out
