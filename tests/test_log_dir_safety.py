"""A log directory is topo's or refused (issue 28): topo creates each log (O_EXCL) and writes over
nothing it did not create (a file its previous launch.json does not list, another user's, a FIFO,
a directory or a link), and refuses a log directory reached through another user's link or a
directory others may write without the sticky bit. Each refusal is one line before anything starts."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from livehost import path_with_python
from topo.errors import UsageError
from topo.launcher.config import LaunchConfig
from topo.launcher.job import plan_job

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root to make")
ENV = {**os.environ, "PATH": path_with_python()}
SCRIPT = "import os, sys; print('run', os.environ['RUN'])\n"


def plan(tmp_path: Path, logs: Path):
    (tmp_path / "net.py").write_text(SCRIPT)
    return plan_job(LaunchConfig.from_flags(script=str(tmp_path / "net.py"), worker_num=1, local_worker_num=1,
                                            scheduler=False, log_dir=str(logs), python="python"), environ={})


def launch(tmp_path: Path, logs: Path, run: str = "1") -> subprocess.CompletedProcess:
    (tmp_path / "net.py").write_text(SCRIPT)
    return subprocess.run([sys.executable, "-m", "topo", "launch", "--worker_num=1", "--local_worker_num=1",
                           "--join=True", "--no-scheduler", f"--log_dir={logs}", "net.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**ENV, "RUN": run})


def refused(tmp_path: Path, logs: Path, words: str) -> None:
    r = launch(tmp_path, logs)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert not (logs / "launch.json").is_file() or "run" not in (logs / "worker_0.log").read_text()


def test_a_rerun_replaces_the_logs_its_previous_record_lists(tmp_path):
    logs = tmp_path / "logs"
    assert launch(tmp_path, logs, "1").returncode == 0
    first = json.loads((logs / "launch.json").read_text())
    assert first["logs"] == [str(logs / "worker_0.log")]
    r = launch(tmp_path, logs, "2")
    assert r.returncode == 0, r.stderr
    assert (logs / "worker_0.log").read_text() == "run 2\n"


def test_an_existing_log_it_did_not_create_is_refused(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker_0.log").write_text("someone's\n")
    refused(tmp_path, logs, f"log file is not a file topo created, {logs / 'worker_0.log'}: ")
    assert (logs / "worker_0.log").read_text() == "someone's\n"
    # listed in a record: replaced
    (logs / "launch.json").write_text(json.dumps({"logs": [str(logs / "worker_0.log")]}))
    plan(tmp_path, logs)


@as_root
def test_another_users_log_is_refused_even_when_the_record_lists_it(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "worker_0.log"
    log.write_text("planted\n")
    os.chmod(log, 0o666)
    os.chown(log, NOBODY, NOBODY)
    (logs / "launch.json").write_text(json.dumps({"logs": [str(log)]}))
    refused(tmp_path, logs, f"log file is not a file topo created, {log}: ")
    assert log.read_text() == "planted\n"
    os.chown(log, 0, 0)
    os.chown(logs / "launch.json", NOBODY, NOBODY)  # a record of another user lists nothing
    with pytest.raises(UsageError, match="log file is not a file topo created"):
        plan(tmp_path, logs)


def test_a_fifo_log_is_refused_without_waiting(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    os.mkfifo(logs / "worker_0.log")
    refused(tmp_path, logs, f"log file is not a file topo created, {logs / 'worker_0.log'}: ")


def test_a_directory_named_launch_json_is_refused_before_anything_starts(tmp_path):
    logs = tmp_path / "logs"
    (logs / "launch.json").mkdir(parents=True)
    refused(tmp_path, logs, f"log file is a directory, {logs / 'launch.json'}: ")
    assert sorted(p.name for p in logs.iterdir()) == ["launch.json"]


def test_a_log_directory_others_may_write_without_the_sticky_bit_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UsageError, match=rf"mode 777, no sticky bit\), {shared} in --log_dir="):
        plan(tmp_path, shared / "logs")
    os.chmod(shared, 0o1777)  # as /tmp: others cannot remove or replace what topo creates
    plan(tmp_path, shared / "logs")
    os.chmod(shared, 0o755)
    (shared / "logs").mkdir()
    os.chmod(shared / "logs", 0o757)
    refused(tmp_path, shared / "logs", f"no sticky bit), {shared / 'logs'} in --log_dir=")


@as_root
def test_a_log_directory_reached_through_another_users_link_is_refused(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "precious").write_text("keep\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    plan(tmp_path, link)  # root's own link
    os.lchown(link, NOBODY, NOBODY)
    refused(tmp_path, link, f"symbolic link owned by another user, {link} in --log_dir={link}")
    with pytest.raises(UsageError, match="owned by another user"):
        plan(tmp_path, link / "sub")  # a link on the way, not only at the end
    assert sorted(p.name for p in target.iterdir()) == ["precious"]
    assert stat.S_ISLNK(os.lstat(link).st_mode)


def test_topo_run_refuses_a_log_dir_others_may_write_without_the_sticky_bit(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    r = subprocess.run([sys.executable, "-m", "topo", "run", "--dry-run", f"--log-dir={shared / 'logs'}",
                        "--no-python", "true"], capture_output=True, text=True, timeout=60, env=ENV)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"no sticky bit), {shared} in --log-dir=" in r.stderr, r.stderr
