"""topo run's command line: torchrun's flag names, spellings and defaults, the rendezvous it accepts
and refuses, Slurm's values, and one-line errors. Nothing here starts a worker."""

from __future__ import annotations

import re
import sys

import pytest
from click.testing import CliRunner

from topo.launcher.torchrun import plan_run
from topo.launcher.torchrun_errors import format_failures, read_failure
from topo.launcher.torchrun_flags import (DEFAULT_MASTER_PORT, TORCHRUN_RELEASES, RunConfig, config_from_flags,
                                         installed_torch, parse_endpoint, parse_nnodes, parse_std, torchrun_release)
from topo.errors import UsageError
from topo.cli import main


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


NEWEST = TORCHRUN_RELEASES[-1].release


def config(script, environ=None, torch_version=NEWEST, **given):
    """config_from_flags as the newest torchrun (or `torch_version`; None: no torch) has it."""
    return config_from_flags(script, ("--lr", "1"), given, environ=environ or {}, torch_version=torch_version)


def dry_run(*args, env=None):
    return CliRunner().invoke(main, ["run", "--dry-run", *args], env=env)


# ------------------------------------------------------------------ defaults and the rendezvous
def test_torchruns_defaults(script):
    c, note = config(script, master_port=29501)
    assert (c.nnodes, c.nproc_per_node, c.node_rank, c.master_addr, c.master_port) == (1, 1, 0, "127.0.0.1", 29501)
    assert (c.run_id, c.max_restarts, c.role, c.monitor_interval) == ("none", 0, "default", 0.1)
    assert c.script_args == ("--lr", "1") and note is None


def test_one_node_without_a_port_is_a_local_rendezvous(script):
    """torchrun 2.13: no --master-port on one node means localhost, a free port and a new run id."""
    c, _ = config(script, nproc_per_node="2")
    assert (c.master_addr, c.master_port, c.run_id) == ("localhost", None, "")
    standalone, _ = config(script, standalone=True, master_addr="10.0.0.9", master_port=1234, rdzv_id="x")
    assert (standalone.master_addr, standalone.master_port, standalone.run_id) == ("localhost", None, "")
    plan = plan_run(standalone, environ={"PATH": "/usr/bin:/bin"})
    assert 0 < int(plan.processes[0].env["MASTER_PORT"]) < 65536
    import uuid

    run_id = plan.processes[0].env["TORCHELASTIC_RUN_ID"]
    assert str(uuid.UUID(run_id)) == run_id and uuid.UUID(run_id).version == 4


def test_several_nodes_default_to_port_29500(script):
    c, _ = config(script, nnodes="2", node_rank=1, master_addr="10.0.0.1")
    assert (c.nnodes, c.node_rank, c.master_addr, c.master_port) == (2, 1, "10.0.0.1", DEFAULT_MASTER_PORT)
    assert [c.rank(i) for i in range(c.nproc_per_node)] == [1]


def test_rdzv_endpoint_is_the_static_master(script):
    c, _ = config(script, rdzv_endpoint="node7:29400", rdzv_id="job9", nnodes="2:2", node_rank=0)
    assert (c.master_addr, c.master_port, c.run_id, c.nnodes) == ("node7", 29400, "job9", 2)
    assert parse_endpoint("[::1]:29500") == ("::1", 29500)


@pytest.mark.parametrize("given, words", [
    ({"nnodes": "0"}, "at least 1"),
    ({"nnodes": "3:2"}, "MIN is more than MAX"),
    ({"nnodes": "1:2:3"}, "not N or MIN:MAX"),
    ({"nnodes": "two"}, "not a node count"),
    ({"rdzv_endpoint": "host"}, "not HOST:PORT"),
    ({"master_port": 70000}, "outside 1-65535"),
    ({"nnodes": "2", "node_rank": 2}, "give 0 to 1"),
    ({"nproc_per_node": "0"}, "at least 1 worker"),
    ({"nproc_per_node": "many"}, "gpu, cpu, xpu or auto"),
    ({"max_restarts": -1}, "0 or more"),
    ({"monitor_interval": 0}, "more than 0"),
    ({"monitor_interval": float("nan")}, "more than 0 seconds, at most 604800"),
    ({"monitor_interval": "inf"}, r"--monitor-interval='inf' is not a number of seconds \(ASCII digits"),
    ({"grace_period": "\u0661"}, r"--shutdown-timeout='\u0661' is not a number of seconds"),
    ({"grace_period": float("inf")}, "must be 0 to 604800 seconds"),
    ({"redirects": "4"}, "is not 0 .none., 1"),
    ({"tee": "0:1,x"}, "LOCAL_RANK:STD"),
    ({"local_ranks_filter": "0,a"}, "comma-separated"),
    ({"module": True, "no_python": True}, "together"),
    ({"standalone": True, "nnodes": "2"}, "one node"),
    ({"signals_to_handle": "SIGNOPE"}, "not a signal name"),
    ({"signals_to_handle": "SIGTERM,SIGKILL"}, "SIGKILL cannot be caught"),
    ({"nproc_per_node": "xpu"}, "does not count Intel XPUs"),
    # ASCII digits only: int() read "١" as 1 and raised a ValueError traceback on "²"
    ({"nproc_per_node": "²"}, "gpu, cpu, xpu or auto"),
    ({"nproc_per_node": "١"}, "gpu, cpu, xpu or auto"),
    ({"nnodes": "١"}, "not a node count"),
    ({"redirects": "²:1"}, "LOCAL_RANK:STD"),
    ({"local_ranks_filter": "0,١"}, "comma-separated"),
    ({"local_ranks_filter": "-1"}, "comma-separated"),
    ({"rdzv_endpoint": "h:٢٩٥٠٠"}, "not HOST:PORT"),
    ({"rdzv_endpoint": "h:" + "9" * 5000}, "outside 1-65535"),
])
def test_bad_values_are_named(script, given, words):
    with pytest.raises(UsageError, match=words):
        config(script, **given)


# the forms only torch's rendezvous and agent run (launcher.elastic), and the flag each is named by
TORCH_FORMS = [
    ({"nnodes": "1:4", "rdzv_backend": "c10d", "rdzv_endpoint": "h:29400"}, "--nnodes=1:4"),
    ({"nnodes": "2", "rdzv_backend": "c10d", "rdzv_endpoint": "h:29400"}, "--rdzv-backend=c10d with --nnodes=2"),
    ({"nnodes": "2", "node_rank": 1, "rdzv_backend": "c10d", "rdzv_endpoint": "h:29400"},
     "--rdzv-backend=c10d with --nnodes=2"),
    ({"rdzv_backend": "etcd-v2", "rdzv_endpoint": "etcd:2379"}, "--rdzv-backend='etcd-v2'"),
    ({"rdzv_backend": "zookeeper"}, "--rdzv-backend='zookeeper'"),
    ({"rdzv_conf": "timeout=30,last_call_timeout=1"}, "--rdzv-conf='timeout=30,last_call_timeout=1'"),
    ({"logs_specs": "mine"}, "--logs-specs='mine'"),
    ({"duplicate_stdout_filters": "loss"}, "--duplicate-stdout-filters"),
]


@pytest.mark.parametrize("given, flag", TORCH_FORMS)
def test_forms_that_need_torchs_rendezvous_run_on_its_agent(script, given, flag):
    c, _ = config(script, **given)
    assert c.torch_agent == flag
    assert (c.min_nodes, c.nnodes) == parse_nnodes(given.get("nnodes", "1"))
    assert (c.rdzv_backend, c.rdzv_endpoint) == (given.get("rdzv_backend", "static"), given.get("rdzv_endpoint", ""))


@pytest.mark.parametrize("given, flag", [(g, f) for g, f in TORCH_FORMS if "node_rank" not in g])
def test_without_torch_a_form_that_needs_it_says_so(script, given, flag):
    with pytest.raises(UsageError) as error:
        config(script, torch_version=None, **given)
    message = str(error.value)
    assert message.startswith(f"{flag} needs torch's rendezvous and agent (torch.distributed.elastic), and torch is "
                              f"not importable by {sys.executable}: install torch beside topo"), message
    assert ("--node-rank=N" in message) == (given.get("rdzv_backend") == "c10d" and ":" not in given["nnodes"])
    assert len(message.splitlines()) == 1


def test_one_node_and_static_nodes_stay_on_topos_plan(script):
    for given in ({}, {"standalone": True}, {"nnodes": "1", "rdzv_backend": "c10d", "rdzv_endpoint": "h:29400"},
                  {"nnodes": "2", "node_rank": 1, "master_addr": "h0"}, {"nnodes": "1:1"}, {"max_restarts": 3}):
        assert config(script, **given)[0].torch_agent is None, given


def test_torchruns_defaults_follow_the_installed_release(script):
    """torchrun 2.12 made a one-node job without --master-port a local rendezvous (29500 before),
    2.10 gave the workers TORCHELASTIC_SIGNALS_TO_HANDLE, 2.15 --virtual-local-rank HIP_VISIBLE_DEVICES."""
    old, _ = config(script, torch_version=(2, 11), nproc_per_node="2")
    assert (old.master_addr, old.master_port, old.run_id) == ("127.0.0.1", DEFAULT_MASTER_PORT, "none")
    new, _ = config(script, torch_version=(2, 12), nproc_per_node="2")
    assert (new.master_addr, new.master_port, new.run_id) == ("localhost", None, "")
    environ = {"PATH": "/usr/bin:/bin", "HIP_VISIBLE_DEVICES": "4,6"}
    envs = {}
    for version in ((2, 9), (2, 10), (2, 14), (2, 15)):
        c, _ = config(script, torch_version=version, nproc_per_node="2", master_port=29510, virtual_local_rank=True)
        envs[version] = plan_run(c, environ=environ).processes[1].env
    assert "TORCHELASTIC_SIGNALS_TO_HANDLE" not in envs[(2, 9)]
    assert envs[(2, 10)]["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    assert (envs[(2, 14)]["CUDA_VISIBLE_DEVICES"], envs[(2, 14)].get("HIP_VISIBLE_DEVICES")) == ("1", None)
    assert (envs[(2, 15)]["CUDA_VISIBLE_DEVICES"], envs[(2, 15)]["HIP_VISIBLE_DEVICES"]) == ("6", "6")


def test_release_rows():
    assert torchrun_release(None) == torchrun_release((3, 0)) == TORCHRUN_RELEASES[-1]
    assert torchrun_release((2, 8)) == torchrun_release((2, 9)) == TORCHRUN_RELEASES[0]
    assert torchrun_release((2, 11)).release == (2, 10) and torchrun_release((2, 13)).release == (2, 12)


def test_installed_torch_is_read_without_importing_it():
    torch = pytest.importorskip("torch", reason="torch is not importable")
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    assert installed_torch() == (major, minor)


def test_shutdown_timeout_flag_then_torchs_variable_then_30(script):
    assert config(script)[0].grace_period == 30.0
    assert config(script, environ={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "7"})[0].grace_period == 7.0
    assert config(script, environ={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "7"}, grace_period=2)[0].grace_period == 2.0
    assert config(script, environ={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": " 0.25 "})[0].grace_period == 0.25
    # float() took all of these: other scripts' digits, "_", exponents, inf and nan
    for odd in ("soon", "\u0661", "1_0", "1e3", "inf", "nan", "-1", "604801", "9" * 5000):
        with pytest.raises(UsageError, match=rf"TORCH_ELASTIC_SHUTDOWN_TIMEOUT='{re.escape(odd[:10])}.*' is not a "
                                             r"number of seconds \(ASCII digits, optionally a point and decimals, "
                                             r"at most 604800\): fix it or give --shutdown-timeout"):
            config(script, environ={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": odd})


@pytest.mark.parametrize("flag", ["--grace-period", "--shutdown-timeout", "--monitor-interval"])
def test_seconds_flags_take_ascii_decimals_only(script, flag):
    for odd in ("\u0661", "1_0", "1e3", "inf", "nan", "-1", "\u00b2", "9" * 5000):
        r = dry_run(f"{flag}={odd}", script)
        assert r.exit_code == 2 and "is not a number of seconds (ASCII digits" in r.output, r.output
        assert len(r.output.splitlines()) == 1
    assert dry_run(f"{flag}=2.5", script).exit_code == 0


def test_shutdown_timeout_variables_take_ascii_decimals_only(script):
    r = dry_run(script, env={"PET_SHUTDOWN_TIMEOUT": "\u0661"})
    assert r.exit_code == 2 and "is not a number of seconds" in r.output and len(r.output.splitlines()) == 1
    r = dry_run(script, env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "inf"})
    assert r.exit_code == 2 and r.output.startswith("topo: error: TORCH_ELASTIC_SHUTDOWN_TIMEOUT='inf' is not")
    assert len(r.output.splitlines()) == 1


def test_flags_accepted_for_torchrun_change_nothing(script):
    """--local-addr (the static rendezvous never uses it), --event-log-handler (no events are
    recorded), empty duplicate filters, --monitor-interval and --start-method: the same job."""
    plain = dry_run("--master-port=29510", "--rdzv-id=r", script)
    extra = dry_run("--master-port=29510", "--rdzv-id=r", "--local-addr=10.1.1.1", "--event_log_handler=console",
                    "--duplicate-stdout-filters=", "--monitor-interval=5", "--start-method=fork", script)
    assert plain.exit_code == extra.exit_code == 0, plain.output + extra.output
    assert plain.output == extra.output


def test_virtual_local_rank(script):
    c, _ = config(script, nproc_per_node="2", virtual_local_rank=True, master_port=29510)
    plan = plan_run(c, environ={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "3,5"})
    envs = [plan.processes[r].env for r in (0, 1)]
    assert [(e["LOCAL_RANK"], e["RANK"], e["CUDA_VISIBLE_DEVICES"]) for e in envs] == [("0", "0", "3"), ("0", "1", "5")]
    unset = plan_run(c, environ={"PATH": "/usr/bin:/bin"})
    assert [unset.processes[r].env["CUDA_VISIBLE_DEVICES"] for r in (0, 1)] == ["0", "1"]
    with pytest.raises(UsageError, match="local rank 1 has no GPU in CUDA_VISIBLE_DEVICES=3"):
        plan_run(c, environ={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "3"})


def test_c10d_is_static_without_torch_when_each_node_knows_its_rank(script):
    c, _ = config(script, torch_version=None, nnodes="2", node_rank=1, rdzv_backend="c10d", rdzv_endpoint="h0:29400")
    assert (c.master_addr, c.master_port, c.node_rank, c.torch_agent) == ("h0", 29400, 1, None)
    one, _ = config(script, rdzv_backend="c10d", rdzv_endpoint="localhost:29400")
    assert one.master_port == 29400 and one.torch_agent is None


def test_nproc_per_node_words(script):
    import os

    assert config(script, nproc_per_node="cpu")[0].nproc_per_node == len(os.sched_getaffinity(0))
    gpuless = _cpu_only_topology()
    with pytest.raises(UsageError, match="no GPU is visible"):
        config_from_flags(script, (), {"nproc_per_node": "gpu"}, environ={}, topology=lambda: gpuless)
    auto, _ = config_from_flags(script, (), {"nproc_per_node": "auto"}, environ={}, topology=lambda: gpuless)
    assert auto.nproc_per_node == len(os.sched_getaffinity(0))


def _cpu_only_topology():
    from topo.discovery import discover

    topology = discover()
    if any(d.kind in ("gpu", "npu") for d in topology.devices):
        pytest.skip("this machine has accelerators")
    return topology


def test_std_flags_per_rank():
    assert [parse_std("3", "-r")(r) for r in range(2)] == [3, 3]
    assert [parse_std("0:1,1:2", "-r")(r) for r in range(3)] == [1, 2, 0]
    c = RunConfig("x.py", redirects="1", tee="0:2")
    assert c.streams(0) == (3, 2) and c.streams(1) == (1, 0)


def test_parse_nnodes():
    assert parse_nnodes("3") == parse_nnodes("3:3") == (3, 3)
    assert parse_nnodes(" 1:4 ") == (1, 4)


# ------------------------------------------------------------------ Slurm
SLURM = {"SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "n[01-02]",
         "SLURM_NTASKS_PER_NODE": "2"}


def test_slurm_fills_what_was_not_given(script):
    c, note = config(script, environ=SLURM)
    assert (c.nnodes, c.node_rank, c.master_addr, c.master_port, c.nproc_per_node) == (2, 1, "n01", 29500, 2)
    assert note.startswith("from Slurm job 77: --nnodes=2 (SLURM_NNODES), --node-rank=1 (SLURM_NODEID)")
    mine, note = config(script, environ=SLURM, nnodes="1", nproc_per_node="3")
    assert (mine.nnodes, mine.node_rank, mine.master_addr, mine.nproc_per_node) == (1, 0, "localhost", 3)
    assert note is None


def test_slurm_note_is_printed_and_pet_variables_count_as_given(script):
    r = dry_run(script, env={**SLURM, "PET_NPROC_PER_NODE": "1"})
    assert r.exit_code == 0, r.output
    assert "topo run: from Slurm job 77: --nnodes=2 (SLURM_NNODES)" in r.output
    assert "--nproc-per-node" not in r.output.split("from Slurm")[1].splitlines()[0]
    assert "rank 1, local rank 0:" in r.output and "WORLD_SIZE=2" in r.output and "rank 2" not in r.output


# ------------------------------------------------------------------ the click layer
def test_dry_run_of_a_job_for_torchs_agent(script):
    pytest.importorskip("torch", reason="torch is not importable: such a job is refused (see the test above)")
    r = dry_run("--nnodes=1:2", "--rdzv-backend=c10d", "--rdzv-endpoint=h0:29400", "--rdzv-id=j1",
                "--nproc-per-node=2", script, "x")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("torch's agent runs this job (--nnodes=1:2): rendezvous c10d at h0:29400, run id j1, "
                               "1 to 2 node(s) x 2 worker(s), restarts up to 0\n"), r.output
    assert f"every worker: {sys.executable} -u {script} x  (${{local_rank}}: its local rank)" in r.output
    assert "local rank 1: binding: not bound" in r.output


def test_line_prefix_template(script):
    c, _ = config(script, tee="3", master_port=29510, nproc_per_node="2", role="trainer",
                  log_line_prefix_template="${hostname}:${rank}/${local_rank} ${role_name}|")
    import socket

    prefixes = [p.tail_prefix for p in plan_run(c, environ={"PATH": "/usr/bin:/bin"}).processes]
    assert prefixes == [f"{socket.gethostname()}:{r}/{r} trainer|" for r in (0, 1)]
    variable, _ = config(script, environ={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<${rank}>"}, master_port=29510)
    assert [p.tail_prefix for p in plan_run(variable, environ={"PATH": "/bin"}).processes] == ["<0>"]
    plain, _ = config(script, master_port=29510, role="r")
    assert [p.tail_prefix for p in plan_run(plain, environ={"PATH": "/bin"}).processes] == ["[r0]:"]


def test_print_completion_prints_topos():
    r = CliRunner().invoke(main, ["run", "--print-completion", "bash"])
    assert r.exit_code == 0 and "_TOPO_COMPLETE=bash_complete" in r.output, r.output


def test_spellings_mean_the_same(script):
    a = dry_run("--nproc-per-node=2", "--master-port=29510", "--rdzv-id=r", "--max-restarts=1", script, "x")
    b = dry_run("--nproc_per_node", "2", "--master_port=29510", "--rdzv_id=r", "--max_restarts=1", script, "x")
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    assert a.output == b.output
    assert "TORCHELASTIC_MAX_RESTARTS=1" in a.output and "TORCHELASTIC_RUN_ID=r" in a.output


def test_options_after_the_script_belong_to_it(script):
    r = dry_run("--master-port=29510", script, "--nproc-per-node=4", "-m")
    assert r.exit_code == 0, r.output
    assert f"-u {script} --nproc-per-node=4 -m" in r.output
    assert "rank 1" not in r.output


def test_module_and_no_python_commands(script):
    m = dry_run("--master-port=29510", "-m", "json.tool", "--help")
    assert m.exit_code == 0, m.output
    assert f"{sys.executable} -u -m json.tool --help" in m.output
    n = dry_run("--master-port=29510", "--no-python", "true")
    assert n.exit_code == 0 and "local rank 0: true\n" in n.output


def test_python_exec_is_the_interpreter(script, tmp_path):
    r = dry_run("--master-port=29510", script, env={"PYTHON_EXEC": "/bin/sh"})
    assert r.exit_code == 0, r.output
    assert f"/bin/sh -u {script}" in r.output


def test_usage_errors_are_one_line_and_exit_2(script, tmp_path):
    r = dry_run("--nnodes=2:1", script)
    assert r.exit_code == 2
    assert r.output.startswith("topo: error: --nnodes=2:1: MIN is more than MAX")
    assert len(r.output.splitlines()) == 1
    missing = dry_run(str(tmp_path / "nope.py"))
    assert missing.exit_code == 2 and "does not exist" in missing.output
    mode = dry_run("--numa-binding=bogus", script)
    assert mode.exit_code == 2 and "unknown mode 'bogus'" in mode.output
    proc = dry_run("--log-dir=/proc/x", script)
    assert proc.exit_code == 2 and "pseudo-filesystem, --log-dir=/proc/x" in proc.output
    unknown = dry_run("--elastic", script)
    assert unknown.exit_code == 2 and "No such option" in unknown.output


def test_whole_number_flags_take_ascii_digits_only(script):
    # click's INT read ARABIC-INDIC ONE as 1 and "1_0" as 10
    for args, env in ((["--node-rank=\u0661"], None), (["--max-restarts=1_0"], None),
                      (["--master-port=" + "9" * 5000], None), ([], {"PET_NODE_RANK": "\u00b2"})):
        r = dry_run(*args, script, env=env)
        assert r.exit_code == 2 and "is not a whole number" in r.output, r.output
        assert len(r.output.splitlines()) == 1
    assert dry_run("--max-restarts= 2", script).exit_code == 0


def test_help_has_examples():
    r = CliRunner().invoke(main, ["run", "--help"])
    assert r.exit_code == 0
    assert "Examples:" in r.output and "--nproc-per-node, --nproc_per_node" in r.output


# ------------------------------------------------------------------ error files
def test_error_file_of_record_is_the_root_cause(tmp_path):
    path = tmp_path / "error.json"
    path.write_text('{"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": '
                    '"Traceback (most recent call last):\\n  File \\"t.py\\", line 3\\nValueError: boom\\n", '
                    '"timestamp": "1700000000"}}}')
    f = read_failure(rank=3, local_rank=1, pid=42, exitcode=1, error_file=str(path))
    assert (f.message, f.timestamp, f.error_file) == ("ValueError: boom", 1700000000, str(path))
    text = format_failures("t.py FAILED", f, [])
    assert "rank      : 3 (local_rank: 1)" in text and "exitcode  : 1 (pid: 42)" in text
    assert "  traceback : Traceback (most recent call last):\n    File \"t.py\", line 3\n  ValueError: boom" in text
    assert "<NO_OTHER_FAILURES>" in text


def test_failure_without_an_error_file(tmp_path):
    killed = read_failure(rank=0, local_rank=0, pid=7, exitcode=-15, error_file=str(tmp_path / "none.json"))
    assert killed.error_file == "<N/A>" and killed.message == "Signal 15 (SIGTERM) received by PID 7"
    plain = read_failure(rank=0, local_rank=0, pid=7, exitcode=3, error_file=str(tmp_path / "none.json"))
    assert "errors.record" in plain.message
    old = tmp_path / "old.json"
    old.write_text('{"message": "RuntimeError: x", "timestamp": 5}')
    assert read_failure(rank=0, local_rank=0, pid=7, exitcode=1, error_file=str(old)).message == "RuntimeError: x"
    text = format_failures("t.py FAILED", plain, [killed])
    assert "exitcode  : -15 (pid: 7) (SIGTERM)" in text.split("Root Cause")[0]


def test_a_master_addr_that_is_no_host_name_is_one_line_exit_2(script):
    r = dry_run("--master-addr=a..b", "--master-port=29500", script)
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "--master-addr='a..b' has an empty label" in r.output
    assert dry_run("--master-addr=[::1]", "--master-port=29500", script).exit_code == 0
