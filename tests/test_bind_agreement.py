"""validate == launch == bind: every bind JSON of the suite (tests/bind_corpus.py), run through `topo
validate`, `topo launch --bind_numa` (planned, nothing started) and `topo bind` (planned, no exec), is
accepted by all three or refused by all three with the same first problem."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from bind_corpus import corpus
from topo.launcher.bindcmd import plan_bind
from topo.launcher.config import LaunchConfig
from topo.launcher.job import plan_job
from topo.cpuset import CpuSet
from topo.errors import TopoError, UsageError
from topo.synthetic import synthetic
from topo.cli import main

# 2 packages x 2 nodes x 8 cores (node n: CPUs 8n..8n+7), a GPU per node with its own HBM node (4-7);
# the cgroup allows CPUs 0-27 and nodes 0-2 and 4
MACHINE = synthetic("pack:2 numa:2 core:8 pu:1", gpus_per_numa=1, gpu_memory_nodes=True, allowed="0-27",
                    allowed_nodes="0-2,4")
LIVE = dataclasses.replace(MACHINE, root="/")  # the launcher binds only on "this machine"
ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # the synthetic GPUs count as different models
CORPUS = corpus()


@pytest.fixture(scope="module")
def topology_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("machine") / "topo.json"
    path.write_text(json.dumps(MACHINE.to_dict()))
    return str(path)


def validate(path: str, topology_file: str) -> tuple[bool, str]:
    """(accepted, the first error as `path: message`) from `topo validate`'s output."""
    result = CliRunner().invoke(main, ["validate", path, "--topology", topology_file])
    assert result.exit_code in (0, 1), result.output
    lines = [line[2:] for line in result.output.splitlines()
             if line.startswith("  ") and not line.startswith("    ") and ": warning: " not in line]
    if result.exit_code == 0:
        return True, ""
    first = lines[0]
    return False, first.removeprefix("(file): ")


def launch(path: str, script: str) -> tuple[bool, str]:
    try:
        plan_job(LaunchConfig.from_flags(script=script, worker_num=2, local_worker_num=2, bind_numa=path, python="python"),
                 environ=ENV, topology=LIVE)
    except UsageError as exc:
        return False, str(exc)
    return True, ""


def bind(path: str) -> tuple[bool, str]:
    """The file as `topo bind` judges it, for a local rank the file has (a rank it lacks is an
    error of the invocation, not of the file)."""
    for rank in (1, 0, 2, 3, 4, 5, 6, 7):
        try:
            plan_bind(["app"], bind_file=path, local_rank=rank, environ=ENV, topology=LIVE)
        except UsageError as exc:
            if f"has no device{rank} for local rank {rank}" in str(exc):
                continue
            return False, str(exc)
        return True, ""
    return False, "no entry for local ranks 0-7"


@pytest.mark.parametrize("name,text", CORPUS, ids=[name for name, _ in CORPUS])
def test_validate_launch_and_bind_agree(name, text, tmp_path, topology_file):
    path = tmp_path / "bind.json"
    path.write_text(text, encoding="utf-8")
    script = tmp_path / "net.py"
    script.write_text("pass\n")
    start = time.monotonic()
    v_ok, v_first = validate(str(path), topology_file)
    l_ok, l_message = launch(str(path), str(script))
    b_ok, b_message = bind(str(path))
    assert time.monotonic() - start < 20, "a bind JSON must be judged quickly, whatever its ranges"
    assert (v_ok, l_ok, b_ok) in ((True, True, True), (False, False, False)), (v_first, l_message, b_message)
    if not v_ok:
        assert v_first in l_message, (v_first, l_message)
        assert v_first in b_message, (v_first, b_message)


def test_corpus_has_both_outcomes(tmp_path, topology_file):
    """The agreement test means something only if the corpus has files each way, and the reproductions
    that once crashed launch are among the refused."""
    outcomes = {}
    for name, text in CORPUS:
        path = tmp_path / f"{name}.json"
        path.write_text(text, encoding="utf-8")
        outcomes[name] = validate(str(path), topology_file)[0]
    accepted = {n for n, ok in outcomes.items() if ok}
    assert {"fits-cpu-numa", "fits-numa-none", "fits-memory-only", "fits-overlap-warning", "fits-shared-cpus",
            "fits-hbm-membind", "preferred-ok", "validate-warnings-only"} <= accepted
    for name in ("arabic-indic-one", "fullwidth-zero", "device0-and-device_0",
                 "device0-and-device00", "repeated-device-key", "repeated-module-key", "range-0-99999999",
                 "memory-node-huge-int", "superscript-two", "preferred-with-numa-mode", "preferred-two-nodes"):
        assert not outcomes[name], name


def test_refusals_name_the_path_and_text(tmp_path, topology_file):
    cases = {
        "arabic-indic-one": "bind_cpu.device0.main: CPU range '\u0661' is invalid.",
        "fullwidth-zero": "bind_cpu.device0.main: CPU range '\uff10' is invalid.",
        "range-0-99999999": "bind_cpu.device0.main: CPU range '0-99999999' is invalid: ids above 1048575",
        "memory-node-huge-int": "bind_memory.device0: CPU range '99999999999999999999' is invalid: ids above",
        "device0-and-device00": "bind_cpu.device00: key 'device00' names the same process as 'device0'.",
        "repeated-device-key": "bind_cpu.device0: key 'device0' appears more than once in bind_cpu",
        "preferred-two-nodes": "bind_memory.device0: a preferred memory policy takes one node",
    }
    texts = dict(CORPUS)
    for name, expected in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(texts[name], encoding="utf-8")
        ok, first = validate(str(path), topology_file)
        assert not ok and first.startswith(expected), (name, first)


def test_unknown_module_is_a_warning_everywhere(tmp_path, topology_file):
    """{"main": "0", "other": ["1"]} once passed validate and then crashed launch with a TypeError: an
    unknown module is ignored, as MindSpore ignores it; validate says so, launch and bind bind main."""
    path = tmp_path / "bind.json"
    path.write_text(json.dumps({"bind_config": {"bind_cpu_mode": "cpu"},
                                "bind_cpu": {"device0": {"main": "0", "other": ["1"]}}}))
    result = CliRunner().invoke(main, ["validate", str(path), "--topology", topology_file])
    assert result.exit_code == 0 and "bind_cpu.device0.other: warning: unknown module 'other'." in result.output
    script = tmp_path / "net.py"
    script.write_text("pass\n")
    job = plan_job(LaunchConfig.from_flags(script=str(script), worker_num=1, local_worker_num=1, bind_numa=str(path),
                                python="python"), environ=ENV, topology=LIVE)
    assert job.processes[-1].argv[:3] == ("taskset", "-c", "0")
    assert plan_bind(["app"], bind_file=str(path), local_rank=0, environ=ENV, topology=LIVE)[2].cpus == CpuSet([0])


# ------------------------------------------------------------------ the real CLI, on this machine
def topo(*args, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "TOPO_ROOT", "OMP_NUM_THREADS")}
    return subprocess.run([sys.executable, "-m", "topo", *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=cwd)


@pytest.mark.parametrize("name", ["arabic-indic-one", "range-0-9999999999", "unknown-module-list",
                                  "device0-and-device_0", "repeated-module-key", "deep-nesting"])
def test_cli_refuses_with_one_line_and_the_same_problem(name, tmp_path):
    """On this machine: `topo validate` exits 1 listing the problem; `topo launch --dry-run` and
    `topo bind` exit 2 with one line `topo: error: ...` containing the same problem, no traceback."""
    path = tmp_path / "bind.json"
    path.write_text(dict(CORPUS)[name], encoding="utf-8")
    (tmp_path / "net.py").write_text("pass\n")
    v = topo("validate", str(path))
    launch_ = topo("launch", "--dry-run", "--worker_num=1", "--local_worker_num=1", f"--bind_numa={path}",
                   f"--python={sys.executable}", "net.py", cwd=tmp_path)
    bind_ = topo("bind", "--bind-file", str(path), "--local-rank", "0", "--", "true")
    if name == "unknown-module-list":  # a warning, not an error: accepted by all three
        assert (v.returncode, launch_.returncode, bind_.returncode) == (0, 0, 0), (v.stdout, launch_.stderr,
                                                                                   bind_.stderr)
        return
    assert v.returncode == 1, v.stdout
    first = next(line[2:] for line in v.stdout.splitlines()
                 if line.startswith("  ") and not line.startswith("    ") and ": warning: " not in line)
    first = first.removeprefix("(file): ")
    for r in (launch_, bind_):
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("topo: error: ") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr and first in r.stderr, (first, r.stderr)


def test_library_errors_are_topo_errors(tmp_path):
    """What the launcher library raises for a bad file is a TopoError (the CLI's edge turns it into one line)."""
    path = tmp_path / "bind.json"
    path.write_text(dict(CORPUS)["superscript-two"], encoding="utf-8")
    with pytest.raises(TopoError):
        plan_bind(["app"], bind_file=str(path), local_rank=0, environ=ENV, topology=LIVE)
