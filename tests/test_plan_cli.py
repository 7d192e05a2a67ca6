"""`topo plan` through click's CliRunner: options of contracts §2, --list-modes, --explain, -o,
--topology / --root, errors as one line; and the planner registry (entry-point group)."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint

import pytest
from click.testing import CliRunner

import planners
from planners import BindPlan, ProcessBinding, validate_bind
from topo_cli import main
from topo.synthetic import synthetic


@pytest.fixture
def dgx(tmp_path):
    t = synthetic("pack:2 numa:4 l3:4 core:4 pu:2", pu_order="scatter", gpu_nodes=[3, 3, 1, 1, 7, 7, 5, 5])
    path = tmp_path / "dgx.json"
    path.write_text(json.dumps(t.to_dict()))
    return str(path)


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_list_modes_one_line_each():
    result = run("plan", "--list-modes")
    assert result.exit_code == 0
    lines = result.output.strip().splitlines()
    assert [line.split()[0] for line in lines] == [
        "msrun-auto", "node", "socket", "exclusive", "core-complex", "all", "single", "single-unique",
        "unique-interleaved", "unique-contiguous"]
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_plan_exclusive_to_file_then_validate(dgx, tmp_path):
    out = tmp_path / "sub" / "bind.json"
    result = run("plan", "--mode", "exclusive", "--topology", dgx, "-o", str(out))
    assert result.exit_code == 0 and result.output == ""
    data = json.loads(out.read_text())
    assert data["bind_config"] == {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"}
    assert data["bind_cpu"]["device0"] == {"main": "48-55,176-183"}
    assert data["topo"]["mode"] == "exclusive"
    assert len(data["topo"]["fingerprint"]) == 16
    result = run("validate", str(out), "--topology", dgx)
    assert result.exit_code == 0
    assert result.output == f"{out}: ok (8 processes)\n"


def test_plan_to_stdout_with_options_and_underscores(dgx):
    result = run("plan", "--mode", "unique_contiguous", "--topology", dgx, "--scope", "socket",
                 "--multithreading", "single_logical", "--no-balanced", "--max-physical-cores", "4",
                 "--memory", "none", "--devices", "0,2", "--nproc-per-node", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["bind_config"]["bind_memory_mode"] == "none"
    assert list(data["bind_cpu"]) == ["device0", "device2"]
    assert data["bind_cpu"]["device0"]["main"] == "48-51"
    assert "bind_memory" not in data
    assert data["topo"]["options"]["scope"] == "socket"


def test_plan_msrun_numa_and_modules(dgx):
    data = json.loads(run("plan", "--mode", "msrun-auto", "--msrun-bind", "numa", "--topology", dgx).stdout)
    assert data["bind_config"]["bind_cpu_mode"] == "numa"
    data = json.loads(run("plan", "--mode", "msrun_auto", "--topology", dgx, "--modules",
                          "runtime=0-3,main=4-15", "--scheduler-base", "global").stdout)
    assert data["bind_cpu"]["device0"] == {"runtime": "48-51", "main": "52-63"}
    assert data["bind_cpu"]["scheduler"] == {"main": "20-23"}


def test_plan_cpu_only_nproc(dgx):
    data = json.loads(run("plan", "--mode", "node", "--topology", dgx, "--devices", "none",
                          "--nproc-per-node", "2").stdout)
    assert data["bind_cpu"] == {"device0": {"main": "0-63,128-191"}, "device1": {"main": "64-127,192-255"}}


def test_explain_table(dgx, tmp_path):
    out = tmp_path / "b.json"
    result = run("plan", "--mode", "exclusive", "--topology", dgx, "--explain", "-o", str(out))
    assert result.exit_code == 0
    assert result.output.splitlines()[1].split()[:4] == ["RANK", "KEY", "DEVICE", "NODE"]
    assert len(result.output.splitlines()) == 10
    assert json.loads(out.read_text())["bind_cpu"]["device7"] == {"main": "88-95,216-223"}


def test_plan_on_captured_root(hwloc_roots, tmp_path):
    root = hwloc_roots.root("16em64t-4s2c2t.tar.bz2")
    out = tmp_path / "bind.json"
    assert run("plan", "--mode", "exclusive", "--root", str(root), "-o", str(out)).exit_code == 0
    result = run("validate", str(out), "--root", str(root))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("args,message", [
    (["--mode", "bogus"], "topo: error: unknown mode 'bogus'; choose one of msrun-auto, node,"),
    ([], "topo: error: --mode is required"),
    (["--mode", "node", "--devices", "0,9"], "topo: error: device 9 is not in the topology (devices: 0,1,2,3,4,5,6,7)"),
    (["--mode", "node", "--devices", "a"], "topo: error: --devices 'a': "),
    (["--mode", "node", "--nproc-per-node", "9"], "topo: error: 9 processes but only 8 devices"),
    (["--mode", "all", "--min-physical-cores", "40"], "topo: error: Number of available physical cores for GPU 0"),
    (["--mode", "msrun-auto", "--modules", "main=5"], "topo: error: --modules main must be in 'start-end' format"),
])
def test_errors_are_one_line(dgx, args, message):
    result = CliRunner().invoke(main, ["plan", "--topology", dgx, *args])
    assert result.exit_code == 2
    err = result.output.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), result.output


def test_root_and_topology_exclusive(dgx, tmp_path):
    result = CliRunner().invoke(main, ["plan", "--mode", "node", "--topology", dgx, "--root", str(tmp_path)])
    assert result.exit_code == 2 and "--root DIR and --topology FILE both name a machine" in result.output


def test_topology_file_wins_over_topo_root_from_the_environment(dgx, tmp_path):
    """TOPO_ROOT set in the shell does not stop a command that names a saved topology."""
    result = CliRunner().invoke(main, ["plan", "--mode", "node", "--topology", dgx],
                                env={"TOPO_ROOT": str(tmp_path / "nowhere")})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["bind_cpu"]


# ---- registry ------------------------------------------------------------------------------------
def custom_strategy(topology, job, options):
    """every process on CPU 0"""
    return BindPlan.build([ProcessBinding(job.key(r), (("main", "0"),), local_rank=r) for r in range(job.nproc)])


def test_third_party_planner_via_entry_point(monkeypatch):
    ep = EntryPoint(name="cpu_zero", value="tests.test_plan_cli:custom_strategy", group="topo.planners")
    monkeypatch.setattr(planners, "_entry_points", lambda: [ep])
    monkeypatch.setattr(planners, "_registry", None)
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent.parent))
    try:
        assert "cpu-zero" in planners.modes()
        assert planners.registry()["cpu-zero"].summary == "every process on CPU 0"
        t = synthetic("pack:1 numa:1 core:4 pu:1", gpus_per_numa=2)
        plan = planners.plan(t, "cpu_zero")
        assert validate_bind(plan.to_json(), t, allow_overlap=True) == []
        assert [p.cpus() for p in plan.workers()] == [p.cpus() for p in plan.workers()][:1] * 2
    finally:
        planners._registry = None


def test_strategies_are_pure(monkeypatch):
    """No file, environment or process access while planning."""
    import builtins
    import os

    t = synthetic("pack:2 numa:2 l3:2 core:4 pu:2", gpus_per_numa=1)

    def forbidden(*a, **k):
        raise AssertionError("a strategy did I/O")

    monkeypatch.setattr(builtins, "open", forbidden)
    monkeypatch.setattr(os, "listdir", forbidden)
    monkeypatch.setattr(os, "sched_getaffinity", forbidden, raising=False)
    monkeypatch.setattr(os, "getenv", forbidden)
    monkeypatch.setattr(os.environ.__class__, "__getitem__", forbidden)
    monkeypatch.setattr(os.environ.__class__, "get", forbidden)
    for mode in planners.BUILTIN:
        planners.plan(t, mode)
