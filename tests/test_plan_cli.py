"""`topo plan` through click's CliRunner: its options, --list-modes, --explain, -o,
--topology / --root, errors as one line; and the planner registry (entry-point group)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from click.testing import CliRunner

from topo import planners
from topo.planners import BindPlan, ProcessBinding, validate_bind
from topo.cli import main
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
    assert [line.split()[0] for line in lines] == list(planners.BUILTIN)
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_plan_exclusive_to_file_then_validate(dgx, tmp_path):
    out = tmp_path / "bind.json"
    result = run("plan", "--mode", "exclusive", "--topology", dgx, "-o", str(out))
    assert result.exit_code == 0 and result.output == ""
    data = json.loads(out.read_text())
    assert data["bind_config"] == {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"}
    assert data["bind_cpu"]["device0"] == {"main": "48-55,176-183"}
    assert data["topo"]["mode"] == "exclusive" and "shared_cpus" not in data["topo"]
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


def test_cpu_only_job_says_so_and_explain_shows_no_device(dgx):
    # rank r's key is device<r> (msrun's DEVICE_ID), not GPU r: no device, node or locality verdict
    result = run("plan", "--mode", "exclusive", "--topology", dgx, "--devices", "none", "--nproc-per-node", "4")
    assert json.loads(result.stdout)["topo"]["cpu_only"] is True
    result = run("plan", "--mode", "exclusive", "--topology", dgx, "--devices", "none", "--nproc-per-node", "4",
                 "--explain")
    rows = [line.split() for line in result.output.splitlines()[2:6]]
    assert [(r[1], r[2], r[3], r[-1]) for r in rows] == [(f"device{i}", "-", "-", "-") for i in range(4)]
    assert "remote" not in result.output
    with_devices = run("plan", "--mode", "exclusive", "--topology", dgx, "--nproc-per-node", "4")
    assert "cpu_only" not in json.loads(with_devices.stdout)["topo"]


def test_explain_table(dgx, tmp_path):
    out = tmp_path / "b.json"
    result = run("plan", "--mode", "exclusive", "--topology", dgx, "--explain", "-o", str(out))
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[1].split()[:4] == ["RANK", "KEY", "DEVICE", "NODE"]
    assert [line.split()[1] for line in lines[2:10]] == [f"device{i}" for i in range(8)]
    assert json.loads(out.read_text())["bind_cpu"]["device7"] == {"main": "88-95,216-223"}


def test_plan_on_captured_root(hwloc_roots, tmp_path):
    root = hwloc_roots.root("16em64t-4s2c2t.tar.bz2")
    out = tmp_path / "bind.json"
    assert run("plan", "--mode", "exclusive", "--root", str(root), "-o", str(out)).exit_code == 0
    result = run("validate", str(out), "--root", str(root))
    assert result.exit_code == 0, result.output


def test_plan_without_accelerators_says_how_many_it_planned(hwloc_roots, dgx):
    root = str(hwloc_roots.root("16em64t-4s2c2t.tar.bz2"))
    result = run("plan", "--mode", "exclusive", "--root", root)
    assert list(json.loads(result.stdout)["bind_cpu"]) == ["device0"]
    assert result.stderr == ("topo plan: no accelerator here: planned 1 process; "
                             "plan N with --devices none --nproc-per-node N\n")
    assert run("plan", "--mode", "exclusive", "--root", root, "--devices", "none", "--nproc-per-node", "2").stderr == ""
    assert run("plan", "--mode", "exclusive", "--topology", dgx).stderr == ""  # one process per GPU, as asked


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


def test_plugin_mode_is_a_cli_choice_and_its_facts_come_from_the_planner(monkeypatch, dgx):
    """--mode and --list-modes read the registry; "shares CPUs" is the Planner's, not a side list."""
    shared = planners.Planner("cpu-zero", "every process on CPU 0", custom_strategy, shares_cpus=True)
    monkeypatch.setattr(planners, "_registry", {**planners.BUILTIN, "cpu-zero": shared})
    assert run("plan", "--list-modes").output.splitlines()[-1].split(None, 1) == ["cpu-zero", "every process on CPU 0"]
    result = run("plan", "--mode", "cpu_zero", "--topology", dgx)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["topo"]["mode"] == "cpu-zero" and data["topo"]["shared_cpus"] is True
    assert validate_bind(data) == []  # overlapping main sets, accepted because the planner says so
    monkeypatch.setattr(planners, "_registry", {**planners.BUILTIN, "cpu-zero": dataclasses.replace(
        shared, shares_cpus=False)})
    data = json.loads(run("plan", "--mode", "cpu-zero", "--topology", dgx).stdout)
    assert any("overlap" in p.message for p in validate_bind(data))


# ---- purity: no file, directory, process or environment access while a strategy plans ------------
FORBIDDEN_EVENTS = ("open", "os.", "glob.", "shutil.", "subprocess.", "socket.", "ctypes.", "fcntl.", "mmap.")
_watch: list[list[str]] = []  # the innermost active recorder; audit hooks cannot be removed
_hooked: list[bool] = []  # installed once per interpreter


def _audit(event, args):
    if _watch and event.startswith(FORBIDDEN_EVENTS):
        _watch[-1].append(f"{event} {args[:1]!r}")
        raise AssertionError(f"a strategy did I/O: {event} {args[:1]!r}")


@contextlib.contextmanager
def no_io(monkeypatch):
    """Record (and refuse) every audited file, directory and process access, and environment reads."""
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked.append(True)

    def env(*a, **k):
        seen.append("os.environ")
        raise AssertionError("a strategy read the environment")

    seen: list[str] = []
    with monkeypatch.context() as m:
        for name in ("__getitem__", "get", "__contains__", "__iter__", "keys", "items", "copy"):
            m.setattr(os.environ.__class__, name, env)
        m.setattr(os, "getenv", env)
        _watch.append(seen)
        try:
            yield seen
        finally:
            _watch.pop()


def _every_mode_and_option(t):
    opts = [{}, {"scope": "socket", "balanced": False, "multithreading": "single-logical"},
            {"msrun_bind": "numa"}, {"modules": (("main", 0, 1),), "scheduler_base": "global"}]
    for name, planner in planners.registry().items():
        strategy = planner.load()  # imported outside the watch: importing reads files
        for o in opts:
            yield name, strategy, planners.Options.from_kwargs(**o)


def test_strategies_are_pure(monkeypatch):
    t = synthetic("pack:2 numa:2 l3:2 core:4 pu:2", gpus_per_numa=1)
    job = planners.Job.for_topology(t)
    cases = list(_every_mode_and_option(t))
    with no_io(monkeypatch) as seen:
        for name, strategy, options in cases:
            strategy(t, job, options)
    assert seen == []


def _reads(access):
    def strategy(topology, job, options):
        try:
            access()
        except BaseException:  # a strategy that swallows the refusal is still caught
            pass
        return custom_strategy(topology, job, options)
    return strategy


@pytest.mark.parametrize("access", [
    lambda: open(__file__).close(),
    lambda: io.open(__file__).close(),
    lambda: os.close(os.open(__file__, os.O_RDONLY)),
    lambda: Path(__file__).read_text(),
    lambda: Path(__file__).open().close(),
    lambda: Path(__file__).read_bytes(),
    lambda: os.listdir("/"),
    lambda: list(os.scandir("/")),
    lambda: list(Path("/").iterdir()),
    lambda: os.environ.get("HOME"),
    lambda: os.environ["PATH"],
    lambda: subprocess.run(["true"]),
], ids=["open", "io.open", "os.open", "read_text", "Path.open", "read_bytes", "listdir", "scandir", "iterdir",
        "environ.get", "environ[]", "subprocess"])
def test_the_purity_check_catches_a_planner_that_reads(monkeypatch, access):
    t = synthetic("pack:1 numa:1 core:4 pu:1", gpus_per_numa=1)
    job = planners.Job.for_topology(t)
    with no_io(monkeypatch) as seen:
        _reads(access)(t, job, planners.Options())
    assert seen, "the access went unnoticed"
