"""A preferred memory policy: `topo plan --memory preferred` writes a bind JSON MindSpore still loads
(and that msrun applies no memory policy from), and `topo launch` / `topo bind` apply
`numactl --preferred N` from it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
from click.testing import CliRunner

from topo import planners
from topo.launcher.binding import binding_of
from topo.launcher.bindcmd import plan_bind
from topo.launcher.config import LaunchConfig
from topo.launcher.job import plan_job
from topo.planners.bindcheck import validate_bind
from topo.planners.bindload import plan_from_json, read_bind_json
from topo.synthetic import synthetic
from topo.cli import main

MACHINE = synthetic("pack:2 numa:2 core:8 pu:1", gpus_per_numa=1)  # node n: CPUs 8n..8n+7, GPU n
LIVE = dataclasses.replace(MACHINE, root="/")
ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def msrun_memory_prefix(data: dict, key: str) -> list[str]:
    """What msrun 2.10 does with a unified bind JSON's memory for one process: its modes are checked
    against numa|none, and `bind_memory` is read only in numa mode (then `--membind N`)."""
    config = data["bind_config"]
    assert config.get("bind_cpu_mode", "none").lower() in ("cpu", "numa", "none")
    mode = config.get("bind_memory_mode", "none").lower()
    assert mode in ("numa", "none")
    if mode == "numa" and key in data.get("bind_memory", {}):
        return ["--membind", str(data["bind_memory"][key])]
    return []


@pytest.fixture
def topology_file(tmp_path):
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(MACHINE.to_dict()))
    return str(path)


def test_plan_writes_preferred_where_mindspore_does_not_look(tmp_path, topology_file):
    out = tmp_path / "bind.json"
    r = CliRunner().invoke(main, ["plan", "--mode", "exclusive", "--memory", "preferred", "--topology", topology_file,
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["bind_config"] == {"bind_cpu_mode": "cpu", "bind_memory_mode": "none"}
    assert data["bind_memory"] == {"device0": 0, "device1": 1, "device2": 2, "device3": 3}
    assert data["topo"]["memory_policy"] == "preferred"
    # MindSpore's own checks pass, and msrun binds no memory from it: never stricter than asked
    read_bind_json(str(out))
    assert all(msrun_memory_prefix(data, f"device{i}") == [] for i in range(4))
    assert CliRunner().invoke(main, ["validate", str(out), "--topology", topology_file]).exit_code == 0
    plan = plan_from_json(data)
    assert plan.memory_mode == "preferred" and plan.memory_policy == "preferred"
    assert plan_from_json(plan.to_json()) == plan


# plan_job and plan_bind look for numactl on the job's PATH; ENV has none, so on os.defpath as exec does
@pytest.mark.skipif(shutil.which("numactl", path=ENV.get("PATH", os.defpath)) is None,
                    reason=f"numactl is not installed (looked for in {ENV.get('PATH', os.defpath)})")
def test_launch_and_bind_apply_numactl_preferred(tmp_path):
    plan = planners.plan(MACHINE, "exclusive", memory="preferred")
    path = tmp_path / "bind.json"
    path.write_text(json.dumps(plan.to_json()))
    script = tmp_path / "net.py"
    script.write_text("pass\n")
    job = plan_job(LaunchConfig.from_flags(script=str(script), worker_num=4, local_worker_num=4, bind_numa=str(path),
                                python="python", scheduler=False), environ=ENV, topology=LIVE)
    assert [p.argv[:5] for p in job.processes] == [
        ("numactl", "--preferred", str(i), "--physcpubind", f"{8 * i}-{8 * i + 7}") for i in range(4)]
    binding = job.processes[2].binding
    assert (binding.memory_policy, str(binding.memory_nodes)) == ("preferred", "2")
    assert binding.describe() == "CPUs 16-23, memory preferred on node 2"
    argv, _, bound, key = plan_bind(["app"], bind_file=str(path), local_rank=1, environ=ENV, topology=LIVE)
    assert key == "device1" and argv == ["numactl", "--preferred", "1", "--physcpubind", "8-15", "app"]
    assert bound.memory_policy == "preferred"


def test_numa_mode_preferred():
    plan = planners.plan(MACHINE, "msrun-auto", msrun_bind="numa", memory="preferred")
    data = plan.to_json()
    assert data["bind_config"] == {"bind_cpu_mode": "numa", "bind_memory_mode": "none"}
    assert validate_bind(data, MACHINE) == []
    b = binding_of(plan.get("device3"), LIVE, memory_policy=plan.memory_policy)
    assert b.prefix == ("numactl", "--preferred", "3", "--cpunodebind", "3")


def test_a_process_homed_on_two_nodes_prefers_one():
    # one CPU-only process over a 2-node machine is homed on both nodes: --membind takes both,
    # --preferred takes one node, the first
    t = synthetic("pack:1 numa:2 core:4 pu:1")
    assert planners.plan(t, "exclusive", memory="numa", nproc=1).get("device0").memory == "0-1"
    plan = planners.plan(t, "exclusive", memory="preferred", nproc=1)
    assert plan.get("device0").memory == 0
    assert validate_bind(plan.to_json(), t) == []


@pytest.mark.parametrize("extra, memory, memory_mode, message", [
    ({"memory_policy": "preferred"}, {"device0": 0}, "numa", "msrun would bind memory strictly"),
    ({"memory_policy": "preferred"}, {"device0": "0-1"}, "none", "a preferred memory policy takes one node"),
    ({"memory_policy": "interleave"}, {"device0": 0}, "none", "memory policy 'interleave' is not one topo applies"),
])
def test_wrong_preferred_files_are_refused(extra, memory, memory_mode, message):
    data = {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": memory_mode},
            "bind_cpu": {"device0": {"main": "0-3"}}, "bind_memory": memory, "topo": extra}
    problems = [p for p in validate_bind(data, MACHINE) if p.severity == "error"]
    assert len(problems) == 1 and message in problems[0].message and problems[0].fix


def test_explicit_bind_policy_is_msruns():
    data = {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
            "bind_cpu": {"device0": {"main": "0-3"}}, "bind_memory": {"device0": 0}, "topo": {"memory_policy": "bind"}}
    plan = plan_from_json(data)
    assert plan.memory_policy == "bind"
    assert binding_of(plan.get("device0"), LIVE, memory_policy=plan.memory_policy).prefix == (
        "numactl", "--membind", "0", "--physcpubind", "0-3")
