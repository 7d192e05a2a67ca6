"""CPU kinds (`topo show --cpukinds`, JSON `cpukinds`) as `lstopo --cpukinds` finds them on
generated roots: priority cores (Intel SST-TF), Turbo Boost Max 3.0 favoured cores within 10%,
hybrid P/E cores, ARM big.LITTLE by capacity, kinds that cannot be ranked, and none at all."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

import machines_2026
from lstopo_oracle import LSTOPO, lstopo_of, needs_lstopo
from sysfs_builder import Machine, build
from topo.cli import main
from topo.discovery import discover

MACHINES = {
    "priority": machines_2026.priority_cores,
    "priority-favoured": lambda: machines_2026.priority_cores(mixed_max=True),
    "hybrid": machines_2026.hybrid,
    "big-little": machines_2026.big_little,
    "uniform": lambda: Machine(packages=2, cores=4, cpufreq={"0-7": (3_800_000, 2_000_000)}),
    # max frequencies 15% apart, no base: two kinds ranked by max
    "max-only": lambda: Machine(packages=1, cores=4, cpufreq={"0-1": (3_450_000, None), "2-3": (3_000_000, None)}),
    # one capacity, two max frequencies: forced ranks tie, no base: ranked by max
    "capacity-tie": lambda: Machine(packages=1, cores=4, cpufreq={"0-1": (3_000_000, None), "2-3": (2_000_000, None)},
                                    capacity={"0-3": 1024}),
    # two kinds of equal base, different max beyond 10%: unranked
    "unranked": lambda: Machine(packages=1, cores=4, cpufreq={"0-1": (2_000_000, 2_000_000),
                                                               "2-3": (3_000_000, 2_000_000)}),
    "none": lambda: Machine(packages=1, cores=4),
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("cpukinds")
    return {name: build(base, make(), name) for name, make in MACHINES.items()}


def show(root, *args):
    result = CliRunner().invoke(main, ["show", "--root", str(root), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@needs_lstopo
@pytest.mark.parametrize("name", MACHINES)
def test_cpukinds_are_lstopos(roots, name):
    assert show(roots[name], "--cpukinds") == lstopo_of(roots[name], "--cpukinds")


@pytest.mark.parametrize("name, expected", [
    ("priority", [("2-7,10-15,18-23,26-31", 0, {"FrequencyMaxMHz": "4600", "FrequencyBaseMHz": "2000"}),
                  ("0-1,8-9,16-17,24-25", 1, {"FrequencyMaxMHz": "4600", "FrequencyBaseMHz": "2600"})]),
    ("priority-favoured", [("2-7,10-15,18-23,26-31", 0, {"FrequencyMaxMHz": "4600", "FrequencyBaseMHz": "2000"}),
                           ("0-1,8-9,16-17,24-25", 1, {"FrequencyMaxMHz": "4600", "FrequencyBaseMHz": "2600"})]),
    ("big-little", [("10-19", 0, {"FrequencyMaxMHz": "2800", "LinuxCapacity": "512"}),
                    ("0-9", 1, {"FrequencyMaxMHz": "3900", "LinuxCapacity": "1024"})]),
    ("unranked", [("0-1", None, {"FrequencyMaxMHz": "2000", "FrequencyBaseMHz": "2000"}),
                  ("2-3", None, {"FrequencyMaxMHz": "3000", "FrequencyBaseMHz": "2000"})]),
    ("none", []),
])
def test_json_cpukinds(roots, name, expected):
    kinds = json.loads(show(roots[name], "--json"))["cpukinds"]
    assert [(k["cpuset"], k["efficiency"], k["infos"]) for k in kinds] == expected
    t = discover(roots[name])
    assert [(str(k.cpuset), k.efficiency, dict(k.infos)) for k in t.cpukinds] == expected


def test_verbose_form_lists_the_kinds_after_the_distances(roots):
    lines = show(roots["priority"], "-v").splitlines()
    assert lines[-8:-1] == ["     1    20    10", "CPU kind #0 efficiency 0 cpuset 0xfcfcfcfc", "  FrequencyMaxMHz = 4600",
                            "  FrequencyBaseMHz = 2000", "CPU kind #1 efficiency 1 cpuset 0x03030303",
                            "  FrequencyMaxMHz = 4600", "  FrequencyBaseMHz = 2600"]


@pytest.mark.parametrize("name", ["priority", "big-little", "unranked"])
def test_xml_carries_the_kinds(roots, name, tmp_path):
    from topo.probes.hwloc_xml import parse_hwloc_xml
    from topo.views.hwloc_xml import to_xml

    t = discover(roots[name])
    text = to_xml(t)
    assert parse_hwloc_xml(text, "machine.xml").cpukinds == t.cpukinds
    if LSTOPO is not None:  # hwloc reads topo's file and ranks the kinds alike
        (tmp_path / "machine.xml").write_text(text)
        theirs = subprocess.run([LSTOPO, "--cpukinds", "-i", str(tmp_path / "machine.xml")], capture_output=True,
                                text=True, timeout=60, check=True, env=dict(os.environ, LC_ALL="C"))
        assert show(roots[name], "--cpukinds") == theirs.stdout
