"""Visible-device variables that name a GPU the machine lacks, or hide every GPU, on an 8-GPU
machine (a generated DGX H100 root, read as if it were this machine): set_affinity, `topo plan`
and `topo run --numa-binding` refuse the first with one line naming it, and plan the second
CPU-only with one warning line."""

from __future__ import annotations

import os
import warnings
from dataclasses import replace

import pytest
from click.testing import CliRunner

import machines
from topo import discovery
from topo.cli import main
from topo.discovery import discover
from topo.errors import UsageError
from topo.launcher import affinity
from topo.launcher.torchrun import plan_run
from topo.launcher.torchrun_flags import RunConfig

HIDDEN = "CUDA_VISIBLE_DEVICES={!r} hides every GPU of this machine: planning CPU-only"


@pytest.fixture(scope="module")
def dgx(tmp_path_factory):
    topology = discover(machines.build(machines.dgx_h100(), tmp_path_factory.mktemp("dgx")))
    gpus = [replace(d, uuid=f"GPU-{d.index:08x}-0000-0000-0000-000000000000") if d.kind == "gpu" else d
            for d in topology.devices]
    return replace(topology, root="/", devices=tuple(gpus))  # read as this machine: the variables apply


@pytest.fixture
def here(dgx, monkeypatch):
    """The DGX as this machine for set_affinity and the CLI, with no visible-device variable set."""
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LOCAL_WORLD_SIZE", "HIP_VISIBLE_DEVICES",
                "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(affinity, "this_machine", lambda: dgx)
    monkeypatch.setattr(discovery, "discover", lambda *a, **k: dgx)
    return dgx


@pytest.mark.parametrize("spec, named", [("9", "GPU 9"), ("0,8", "GPU 8"),
                                         ("GPU-0000dead", "'GPU-0000dead'")])
def test_a_gpu_the_machine_lacks_is_an_error_naming_it(here, monkeypatch, spec, named, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
    with pytest.raises(affinity.AffinityError, match=named):
        affinity.plan_affinity(here, 0)
    result = CliRunner().invoke(main, ["plan", "--mode", "node"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and named in result.output, result.output
    script = tmp_path / "x.py"
    script.write_text("")
    with pytest.raises(UsageError, match=named):
        plan_run(RunConfig(str(script), nproc_per_node=2, numa_binding="node"), topology=here)


@pytest.mark.parametrize("spec", ["", "-1"])
def test_hiding_every_gpu_plans_cpu_only_with_one_warning(here, monkeypatch, spec, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
    line = HIDDEN.format(spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        binding = affinity.plan_affinity(here, 0)
    assert [str(w.message) for w in caught] == [f"set_affinity: {line}"]
    assert binding.device is None and binding.cpus == here.numa_node(0).cpuset  # one process per node

    result = CliRunner().invoke(main, ["plan", "--mode", "node"])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"topo: warning: {line}\n"
    assert '"device0"' in result.stdout and '"device2"' not in result.stdout  # ranks 0, 1: the 2 nodes

    script = tmp_path / "x.py"
    script.write_text("")
    plan = plan_run(RunConfig(str(script), nproc_per_node=2, numa_binding="node"), topology=here)
    assert list(plan.warnings) == [line]


def test_a_visible_gpu_warns_nothing(here, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        binding = affinity.plan_affinity(here, 0)
    assert binding.device == 5 and binding.cpus <= here.numa_node(1).cpuset
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"


def test_topo_launch_says_it_binds_cpu_only(here):
    from topo.launcher.binding import resolve_bindings

    job = resolve_bindings(True, False, local_worker_num=2, topology=here,
                           environ={"CUDA_VISIBLE_DEVICES": "", "PATH": ""})
    assert list(job.warnings) == [HIDDEN.format("")]
    shown = resolve_bindings(True, False, local_worker_num=2, topology=here, environ={"PATH": ""})
    assert not any("hides" in w for w in shown.warnings)
