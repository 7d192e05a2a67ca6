"""lstopo's habits: `topo show` takes lstopo's options with lstopo's output, and `topo calc` answers
hwloc-calc's questions with hwloc-calc's output, checked against the installed hwloc on captured
machines; the cases that do not need hwloc pin what they check."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest
from click.testing import CliRunner

from gen_lstopo_console import ENV, lstopo, machines
from lstopo_oracle import LSTOPO, comparable_verbose, needs_lstopo
from test_console_form import CONSOLE
from topo.cli import main as cli

MACHINES = ["16em64t-4s2c2t", "8ia64-2n2s2c", "40intel64-2g2n4c+pcilocality", "memorysidecaches",
            "fakememinitiators-1np2c+1npp+gi", "20em64t-hybrid-1p6c2t+2ca4co1t", "128ia64-17n4s2c"]
OPTIONS = ["-v", "-v -p", "-s", "--only core", "--only numa -p", "--only pu -l", "--only l2", "--only pci",
           "--only os", "--only group", "-c", "-C", "--taskset", "--no-icaches", "--merge", "--no-smt",
           "--filter core:none", "--filter all:structure", "--filter l3:none", "--filter all:none",
           "--filter io:none", "--filter group:none", "--distances", "-p --distances", "--restrict 0x00000003",
           "--restrict 0x00000f0f -p", "--merge --no-smt -c", "--no-caches"]
# hwloc keeps Groups the model merged where a filtered type leaves room for them: the hybrid CPU's
# E-core clusters, whose CPUs are an L2's (README: Differences from lstopo).
KNOWN = {("20em64t-hybrid-1p6c2t+2ca4co1t", "--no-caches")}


def topo_show(root, *args: str) -> str:
    result = CliRunner().invoke(cli, ["show", "--root", str(root), *args])
    assert result.exit_code == 0, result.output
    return result.output


@needs_lstopo
@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("options", [o for o in OPTIONS])
def test_show_options_print_what_lstopo_prints(hwloc_roots, name, options):
    if (name, options) in KNOWN:
        pytest.skip("a difference the README lists")
    root = hwloc_roots.root(f"{name}.tar.bz2")
    args = shlex.split(options)
    theirs, ours = lstopo(root, machines()[name], args).splitlines(), topo_show(root, *args).splitlines()
    if "-v" in args:
        theirs, ours = comparable_verbose(theirs), comparable_verbose(ours)
    if "-p" in args:  # caches have no P# in topo (the sysfs cache `id` is not read)
        theirs = [re.sub(r"\b(L\d[di]?) P#\d+", r"\1", x) for x in theirs]
    assert ours == theirs


def test_only_and_cpusets_on_a_stored_machine(hwloc_roots):
    root = hwloc_roots.root("2arm-2c.tar.bz2")
    assert topo_show(root, "--only", "core") == "Core L#0\nCore L#1\n"
    assert topo_show(root, "--only", "pu", "-p", "--taskset") == "PU P#0 cpuset=0x1\nPU P#1 cpuset=0x2\n"
    assert topo_show(root, "-C").splitlines() == ["0x00000003", "  0x00000003", "    0x00000003", "    0x00000001",
                                                  "      0x00000001", "    0x00000002", "      0x00000002"]
    assert topo_show(root, "--no-smt") == "Machine (274MB total) + Package L#0\n  NUMANode L#0 (P#0 274MB)\n" \
        "  Core L#0\n  Core L#1\n"
    assert topo_show(root, "-s").splitlines()[-1] == "Special depth -3:  1 NUMANode (type #13)"


def test_input_reads_a_root_a_file_or_a_synthetic_machine(hwloc_roots, tmp_path):
    root = hwloc_roots.root("2arm-2c.tar.bz2")
    stored = (CONSOLE / "2arm-2c.txt").read_text()
    assert CliRunner().invoke(cli, ["show", "-i", str(root)]).output == stored
    saved = tmp_path / "m.json"
    saved.write_text(topo_show(root, "--json"))
    assert CliRunner().invoke(cli, ["show", "--input", str(saved)]).output == stored
    synthetic = CliRunner().invoke(cli, ["show", "-i", "pack:2 core:2 pu:2", "--only", "pu"]).output
    assert synthetic.count("PU L#") == 8
    both = CliRunner().invoke(cli, ["show", "-i", str(root), "--root", str(root)])
    assert both.exit_code == 2 and "give one of them" in both.output


@pytest.mark.parametrize("args, message", [
    (["--only", "frobnicator"], "--only frobnicator: not a type"),
    (["--filter", "core:maybe"], "KIND must be all, none, structure or important"),
    (["--restrict", "0x00010000"], "none of these CPUs"),
    (["--restrict", "nodeset=0x1"], "not a cpuset"),
    (["-c", "--of", "json"], "-c shapes the console form"),
    (["--long", "-v"], "--long is topo's own form"),
])
def test_bad_options_are_one_line_errors(hwloc_roots, args, message):
    result = CliRunner().invoke(cli, ["show", "--root", str(hwloc_roots.root("2arm-2c.tar.bz2")), *args])
    assert result.exit_code == 2 and result.output.startswith("topo: error: ") and message in result.output
    assert result.output.count("\n") == 1


def test_restrict_binding_is_this_process_cpus(hwloc_roots):
    root = hwloc_roots.root("16em64t-4s2c2t.tar.bz2")
    mask = sum(1 << c for c in os.sched_getaffinity(0) if c < 16)
    if not mask:
        pytest.skip("this process runs on none of the captured machine's CPUs")
    assert topo_show(root, "--restrict", "binding") == topo_show(root, "--restrict", f"0x{mask:08x}")


@pytest.mark.parametrize("name", ["16em64t-4s2c2t", "40intel64-2g2n4c+pcilocality"])
def test_ascii_draws_every_pu_once_in_closed_boxes(hwloc_roots, name):
    text = topo_show(hwloc_roots.root(f"{name}.tar.bz2"), "--of", "ascii").splitlines()
    console = (CONSOLE / f"{name}.txt").read_text()
    assert sorted(re.findall(r"PU L#\d+ \(P#\d+\)", "\n".join(text))) == sorted(re.findall(r"PU L#\d+ \(P#\d+\)", console))
    assert len({len(line) for line in text}) == 1  # one rectangle
    assert text[0].startswith("┌") and text[-1].startswith("└") and "Machine" in text[1]
    for line in text:  # every box opened on a line is closed on it
        assert line.count("┌") == line.count("┐") and line.count("└") == line.count("┘")


# ---- topo calc ---------------------------------------------------------------------------------
CALC = ["pu:17 --intersect numa", "pu:17 -I numa -p", "numa:1 --number-of core", "os=eth0", "os=eth0 -I pu",
        "pci=0000:02:00.0", "numa:1", "numa:1 --taskset", "core:2-3 -H package.core", "pu:0-3 --largest",
        "pu:3 --local-memory", "0x3", "node:1.pu:2", "numa:0 numa:1 -N pu", "all -N core", "pu:1:3", "pu:odd",
        "all ~pu:0", "all xnuma:1", "numa:0 ^numa:0", "pu:0 pu:1 --single", "package:1.core:2 -I pu",
        "package:1.core:2 -I pu -p", "--pi pu:4 -I core --po", "0x3 -H numa.pu", "all -H numa.core --sep ,",
        "package:0 -I l2 --sep ' '", "all --largest", "numa:2 --local-memory -p", "all -N 3",
        "0x00000001,0x00000003", "0x10000000f", "package:1 --no-smt", "all -N os", "pci:2 -I pu"]


@needs_lstopo
@pytest.mark.parametrize("args", CALC)
def test_calc_answers_as_hwloc_calc(hwloc_roots, args):
    root = hwloc_roots.root("40intel64-2g2n4c+pcilocality.tar.bz2")
    theirs = subprocess.run([os.path.join(os.path.dirname(LSTOPO), "hwloc-calc"), "-i", str(root),
                             *shlex.split(args)], env=dict(os.environ, LC_ALL="C", **ENV),
                            capture_output=True, text=True, timeout=60)
    result = CliRunner().invoke(cli, ["calc", "--root", str(root), *shlex.split(args)])
    assert result.exit_code == 0, result.output
    assert result.output == theirs.stdout


def test_calc_on_a_stored_machine(hwloc_roots):
    root = str(hwloc_roots.root("16em64t-4s2c2t.tar.bz2"))

    def calc(*args: str) -> str:
        result = CliRunner().invoke(cli, ["calc", "--root", root, *args])
        assert result.exit_code == 0, result.output
        return result.output.strip()

    assert calc("core:1") == "0x00001010" and calc("core:1", "--cpuset-output-format", "list") == "4,12"
    assert calc("package:1", "-I", "pu", "-p") == "1,9,5,13" and calc("pu:2", "-I", "package") == "0"
    assert calc("all", "-N", "core") == "8" and calc("package:3.core:1.pu:1", "--po", "-I", "pu") == "15"
    assert calc("core:0-1", "-H", "package.core") == "Package:0.Core:0 Package:0.Core:1"
    for bad, message in (("core:99", "no such object"), ("frob:1", "unknown type"), ("0-3", "not a location"),
                         ("os=eth9", "no OS device eth9")):
        result = CliRunner().invoke(cli, ["calc", "--root", root, bad])
        assert result.exit_code == 2 and message in result.output and result.output.count("\n") == 1
