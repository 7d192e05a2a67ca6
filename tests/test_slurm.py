"""Slurm: hostlist expansion, the values launchers take from an allocation, and a real single-host
Slurm (munged + slurmctld + slurmd started here as root) running `srun ... topo bind` and
`srun ... topo run`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topo.launcher.slurm import (MAX_HOSTS, default_master_port, expand_hostlist, first_host, launch_defaults,
                            run_defaults, slurm_node,
                            task_env)
from topo.errors import UsageError

SCRIPTS = Path(__file__).parent / "scripts"


# ------------------------------------------------------------------ hostlists
@pytest.mark.parametrize("text, hosts", [
    ("vm", ["vm"]),
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("gpu[01-04,07],login1", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("a[1]-ib,b", ["a1-ib", "b"]),
    ("node[3],node[1]", ["node3", "node1"]),
    ("x1,x2", ["x1", "x2"]),
])
def test_hostlist_expands_like_scontrol(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, words", [
    ("gpu[01-04", "without ']'"),
    ("gpu]1", "without '['"),
    ("n[3-1]", "backwards"),
    ("n[a-b]", "not a number"),
    ("a,,b", "empty entry"),
    ("n[[1]]", "nest"),
    ("n[0-99999999]", "more than"),
])
def test_bad_hostlists_are_named(text, words):
    for read in (expand_hostlist, first_host):
        with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("]", r"\]")):
            read(text)


@pytest.mark.parametrize("text, words", [
    ("n[\u0661-\u0663]", "is not a number or a range"),  # int() reads ARABIC-INDIC digits
    ("n[1-\u00b2]", "is not a number or a range"),  # and raises a ValueError on "²"
    ("n[1_0]", "is not a number or a range"),
    ("n[" + "9" * 5000 + "]", "has a host number above 4294967295"),  # int(): a ValueError past 4300 digits
    ("n[0-99999999999]", "has a host number above 4294967295"),
    ("n[0-4294967295]", f"names more than {MAX_HOSTS} hosts"),
    ("r[0-1024]n[0-1023]", f"names more than {MAX_HOSTS} hosts"),  # counted, not listed
    (",".join(f"n[0-{(1 << 19) - 1}]" for _ in range(3)), f"names more than {MAX_HOSTS} hosts"),
])
def test_hostlist_numbers_are_ascii_and_bounded(text, words):
    for read in (expand_hostlist, first_host):
        with pytest.raises(UsageError, match=re.escape(words)):
            read(text)


@pytest.mark.parametrize("text", ["vm", "gpu[07-09,01]x,b", "a[1]-ib,b", "r[1-2]n[08-10]", "n[000-1048574]"])
def test_first_host_is_the_first_expanded(text):
    assert first_host(text) == expand_hostlist(text)[0]


def test_master_addr_does_not_expand_the_node_list(monkeypatch):
    monkeypatch.setattr("topo.launcher.slurm.expand_hostlist", lambda text: pytest.fail("expanded"))
    node = slurm_node({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "r[0-1023]n[0000-1022],login1"})
    assert node.master_addr == "r0n0000"
    with pytest.raises(UsageError, match="SLURM_JOB_NODELIST: hostlist 'n\\[\u0661\\]': '\u0661' is not a number"):
        slurm_node({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[\u0661]"})


# ------------------------------------------------------------------ values from the environment
STEP = {
    "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2",
    "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_STEP_NODELIST": "gpu[03-04]",
    "SLURM_NTASKS_PER_NODE": "4", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
}


def test_outside_slurm_nothing_is_taken():
    assert slurm_node({}) is None
    assert run_defaults({}, {}).values == {}
    assert run_defaults({}, {}).note() is None
    assert launch_defaults({"SLURM_NTASKS_PER_NODE": "4"}, {}).values == {}
    assert task_env({"SLURM_PROCID": "0"}) == {}


def test_a_step_describes_its_own_nodes():
    node = slurm_node(STEP)
    assert (node.nnodes, node.node_rank, node.master_addr) == (2, 1, "gpu03")
    assert expand_hostlist(node.nodelist) == ["gpu03", "gpu04"]
    assert (node.nproc_per_node, node.nproc_source) == (4, "SLURM_NTASKS_PER_NODE")


def test_gpus_on_node_come_before_tasks_per_node():
    node = slurm_node({**STEP, "SLURM_GPUS_ON_NODE": "8"})
    assert (node.nproc_per_node, node.nproc_source) == (8, "SLURM_GPUS_ON_NODE")
    assert slurm_node({"SLURM_JOB_ID": "1"}).nproc_per_node == 1


def test_run_defaults_fill_what_was_not_given_and_say_so():
    taken = run_defaults(STEP, {})
    assert taken.values == {"nnodes": 2, "node_rank": 1, "master_addr": "gpu03", "nproc_per_node": 4}
    assert taken.note() == ("from Slurm job 4242: --nnodes=2 (SLURM_STEP_NUM_NODES), --node-rank=1 (SLURM_NODEID), "
                            "--master-addr=gpu03 (SLURM_STEP_NODELIST), --nproc-per-node=4 (SLURM_NTASKS_PER_NODE)")
    mine = run_defaults(STEP, {"nnodes": 2, "node_rank": 0, "master_addr": "10.0.0.1", "nproc_per_node": "2"})
    assert mine.values == {} and mine.note() is None
    endpoint = run_defaults(STEP, {"rdzv_endpoint": "h:1"})
    assert "master_addr" not in endpoint.values


def test_one_topo_run_per_node():
    step = {**STEP, "SLURM_STEP_ID": "0"}
    with pytest.raises(UsageError, match="runs 4 tasks on this node.*--ntasks-per-node=1"):
        run_defaults(step, {})
    assert run_defaults(step, {"node_rank": 5}).values["nnodes"] == 2
    assert run_defaults({**step, "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}, {}).values["node_rank"] == 1


def test_a_single_node_rendezvouses_on_itself():
    one = {**STEP, "SLURM_STEP_NUM_NODES": "1", "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "gpu03"}
    assert run_defaults(one, {}).values == {"nnodes": 1, "nproc_per_node": 4}
    assert "master_addr" not in run_defaults(STEP, {"nnodes": 1}).values


def test_launch_defaults_multiply_per_node_by_nodes():
    taken = launch_defaults(STEP, {})
    assert taken.values == {"local_worker_num": 4, "worker_num": 8, "node_rank": 1, "master_addr": "gpu03"}
    given = launch_defaults(STEP, {"local_worker_num": 2, "worker_num": 4, "node_rank": 0, "master_addr": "h"})
    assert given.values == {}
    assert launch_defaults(STEP, {"local_worker_num": 3}).values == {"worker_num": 6, "node_rank": 1,
                                                                     "master_addr": "gpu03"}
    assert "--worker_num=8" in taken.note(lambda n: f"--{n}")


def test_bad_counts_are_named():
    with pytest.raises(UsageError, match="SLURM_NNODES='two'"):
        slurm_node({"SLURM_JOB_ID": "1", "SLURM_NNODES": "two"})
    with pytest.raises(UsageError, match="SLURM_JOB_NODELIST"):
        slurm_node({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-"})


def test_slurm_numbers_are_ascii_digits():
    # int() raised a ValueError traceback on "²" and read "١" as 1
    for bad in ("²", "١"):
        with pytest.raises(UsageError, match=f"SLURM_NNODES='{bad}' is not a count"):
            slurm_node({"SLURM_JOB_ID": "1", "SLURM_NNODES": bad})
        with pytest.raises(UsageError, match=f"SLURM_NODEID='{bad}' is not a count"):
            task_env({**STEP, "SLURM_NODEID": bad})
    assert default_master_port("12²") == default_master_port("12")
    # a repeat count is not expanded into a list (this one was 10**11 entries)
    assert task_env({**STEP, "SLURM_STEP_TASKS_PER_NODE": "3(x99999999999)"})["LOCAL_WORLD_SIZE"] == "3"
    assert task_env({**STEP, "SLURM_STEP_TASKS_PER_NODE": "3,4(x2)"})["LOCAL_WORLD_SIZE"] == "4"


def test_task_env_follows_slurm_and_keeps_what_is_set():
    env = task_env(STEP)
    assert env == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                   "MASTER_ADDR": "gpu03", "MASTER_PORT": str(default_master_port("4242"))}
    kept = task_env({**STEP, "MASTER_PORT": "1234", "RANK": "0"})
    assert "MASTER_PORT" not in kept and "RANK" not in kept
    assert default_master_port("4242") == default_master_port("4242") == 19242
    assert default_master_port("17") != default_master_port("18")


# ------------------------------------------------------------------ a real Slurm
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slurm:
    """munged, slurmctld and slurmd for one host, configured and run from `base`."""

    def __init__(self, base: Path):
        self.base = base
        self.env = {**os.environ, "SLURM_CONF": str(base / "slurm.conf"), "PATH": SLURM_PATH}
        for var in [v for v in self.env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
            del self.env[var]
        self.socket = base / "munge.sock"

    def write_config(self) -> None:
        b = self.base
        (b / "state").mkdir()
        (b / "spool").mkdir()
        (b / "munge.key").write_bytes(os.urandom(1024))
        (b / "munge.key").chmod(0o600)
        (b / "plugstack.conf").write_text("")
        host = socket.gethostname()
        cpus = os.cpu_count() or 1
        (b / "slurm.conf").write_text("\n".join([
            "ClusterName=topotest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.socket}",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={b / 'state'}",
            f"SlurmdSpoolDir={b / 'spool'}",
            f"SlurmctldPidFile={b / 'slurmctld.pid'}",
            f"SlurmdPidFile={b / 'slurmd.pid'}",
            f"SlurmctldLogFile={b / 'slurmctld.log'}",
            f"SlurmdLogFile={b / 'slurmd.log'}",
            f"PlugStackConfig={b / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
            "",
        ]))

    def start(self) -> None:
        b = self.base
        self.write_config()
        subprocess.run(["munged", "--force", f"--socket={self.socket}", f"--key-file={b / 'munge.key'}",
                        f"--log-file={b / 'munged.log'}", f"--pid-file={b / 'munged.pid'}",
                        f"--seed-file={b / 'munged.seed'}"], check=True, env=self.env, timeout=30)
        subprocess.run(["slurmctld", "-i"], check=True, env=self.env, timeout=30)
        subprocess.run(["slurmd", "-N", socket.gethostname()], check=True, env=self.env, timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env)
            if out.returncode == 0 and out.stdout.strip() in ("idle", "mixed"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"slurm did not come up: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.base.glob("*.log")))

    def stop(self) -> None:
        """Ask each daemon to stop; whichever is still there after a while gets SIGKILL."""
        for command in (["scontrol", "shutdown"], ["munged", "--stop", f"--socket={self.socket}"]):
            try:
                subprocess.run(command, env=self.env, capture_output=True, timeout=30)
            except (subprocess.SubprocessError, OSError):
                pass
            if command[0] == "scontrol":
                for name in ("slurmd.pid", "slurmctld.pid"):
                    _wait_gone(self.base / name)
        _wait_gone(self.base / "munged.pid")

    def srun(self, *args: str, timeout: float = 120, cwd=None) -> subprocess.CompletedProcess:
        return subprocess.run(["srun", "--quiet", *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout, cwd=cwd)


def _wait_gone(pid_file: Path, timeout: float = 15.0) -> None:
    """Wait for the daemon of `pid_file` to exit; SIGKILL it if it will not."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# the daemons live in the sbin directories, which a user's PATH may leave out
SLURM_PATH = os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"])


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = [tool for tool in ("munged", "slurmctld", "slurmd", "srun", "sinfo", "scontrol")
               if not shutil.which(tool, path=SLURM_PATH)]
    if missing:
        pytest.skip(f"a real Slurm needs {', '.join(missing)} (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("starting slurmd and munged needs root")
    cluster = Slurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except (subprocess.SubprocessError, RuntimeError, OSError) as exc:
        cluster.stop()
        pytest.skip(f"could not start a single-host Slurm here: {exc}\n{cluster.logs()}")
    yield cluster
    cluster.stop()


def _bind_json(path: Path, ntasks: int) -> Path:
    cpus = sorted(os.sched_getaffinity(0))
    process = {f"device{i}": {"main": str(cpus[i % len(cpus)])} for i in range(ntasks)}
    path.write_text(json.dumps({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "none"},
                                "bind_cpu": process}))
    return path


def test_hostlist_agrees_with_scontrol(slurm):
    text = "gpu[01-04,07],login1,r[1-2]n[08-10],n[8-10]"
    out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True,
                         env=slurm.env, timeout=30, check=True)
    assert expand_hostlist(text) == out.stdout.split()


def test_srun_topo_bind_gives_each_task_its_binding_and_torch_env(slurm, tmp_path):
    bind = _bind_json(tmp_path / "bind.json", 2)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = slurm.srun("-n2", sys.executable, "-m", "topo", "bind", "--bind-file", str(bind), "--",
                   sys.executable, str(SCRIPTS / "envdump.py"), str(out_dir))
    assert r.returncode == 0, r.stderr + slurm.logs()
    dumps = [json.loads(p.read_text()) for p in sorted(out_dir.glob("*.json"))]
    assert len(dumps) == 2
    cpus = sorted(os.sched_getaffinity(0))
    port = {d["env"]["MASTER_PORT"] for d in dumps}
    assert len(port) == 1
    for d in dumps:
        env = d["env"]
        rank = int(env["RANK"])
        assert env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "2"
        assert env["LOCAL_RANK"] == env["SLURM_LOCALID"] == str(rank)
        assert env["MASTER_ADDR"] == socket.gethostname()
        assert env["MASTER_PORT"] == str(default_master_port(env["SLURM_JOB_ID"]))
        assert d["affinity"] == [cpus[rank % len(cpus)]]
    assert sorted(int(d["env"]["RANK"]) for d in dumps) == [0, 1]


def test_srun_topo_run_takes_the_job_shape_from_slurm(slurm, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = slurm.srun("-N1", "-n1", sys.executable, "-m", "topo", "run", "--nproc-per-node=2",
                   str(SCRIPTS / "run_worker.py"), str(out_dir), "ok")
    assert r.returncode == 0, r.stdout + r.stderr + slurm.logs()
    dumps = {p.stem: json.loads(p.read_text()) for p in out_dir.glob("*.json")}
    assert sorted(dumps) == ["rank0_attempt0", "rank1_attempt0"]
    for rank in (0, 1):
        env = dumps[f"rank{rank}_attempt0"]["env"]
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (str(rank), str(rank), "2")
        assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"]) == ("0", "1")
        assert env["SLURM_JOB_ID"]  # the workers run inside the step
    # one node: the count came from Slurm, the rendezvous stays on this node
    assert "topo run: from Slurm job" in r.stderr and "--nnodes=1 (SLURM_STEP_NUM_NODES)" in r.stderr
    assert dumps["rank0_attempt0"]["env"]["MASTER_ADDR"] == "localhost"


def test_srun_topo_run_takes_workers_per_node_from_slurm(slurm, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = slurm.srun("-N1", "-n1", "--ntasks-per-node=1", sys.executable, "-m", "topo", "run", "--dry-run",
                   str(SCRIPTS / "run_worker.py"), str(out_dir), "ok")
    assert r.returncode == 0, r.stdout + r.stderr + slurm.logs()
    assert "--nproc-per-node=1 (SLURM_NTASKS_PER_NODE)" in r.stderr
    assert "rank 0, local rank 0:" in r.stdout and "rank 1" not in r.stdout


def test_topo_launch_takes_missing_counts_from_slurm(tmp_path):
    from click.testing import CliRunner

    from topo.cli import main

    script = tmp_path / "net.py"
    script.write_text("")
    env = {"SLURM_JOB_ID": "9", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "localhost,n2",
           "SLURM_NTASKS_PER_NODE": "2"}
    r = CliRunner().invoke(main, ["launch", "--dry-run", "--no-scheduler", f"--python={sys.executable}",
                                  f"--log_dir={tmp_path}", str(script)], env=env)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("topo launch: from Slurm job 9: --local_worker_num=2 (SLURM_NTASKS_PER_NODE), "
                               "--worker_num=4 (SLURM_NNODES=2 x local_worker_num), --node_rank=1 (SLURM_NODEID), "
                               "--master_addr=localhost (SLURM_JOB_NODELIST)\n")
    assert "rank 2, DEVICE_ID=0" in r.output and "rank 3, DEVICE_ID=1" in r.output
    mine = CliRunner().invoke(main, ["launch", "--dry-run", "--no-scheduler", f"--python={sys.executable}",
                                     "--worker_num=1", "--local_worker_num=1", f"--log_dir={tmp_path}", str(script)],
                              env={**env, "SLURM_NNODES": "1"})
    assert mine.exit_code == 0, mine.output
    assert "from Slurm" not in mine.output and "rank 0, DEVICE_ID=0" in mine.output


def test_srun_topo_launch_starts_slurms_workers_per_node(slurm, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = slurm.srun("-N1", "-n1", "--ntasks-per-node=1", sys.executable, "-m", "topo", "launch", "--join=True",
                   "--no-scheduler", f"--python={sys.executable}", f"--log_dir={tmp_path / 'logs'}",
                   f"--master_port={_free_port()}",
                   str(SCRIPTS / "envdump.py"), str(out_dir))
    assert r.returncode == 0, r.stdout + r.stderr + slurm.logs()
    assert "--local_worker_num=1 (SLURM_NTASKS_PER_NODE), --worker_num=1" in r.stderr
    assert [p.name for p in out_dir.glob("*.json")] == ["worker_0.json"]
