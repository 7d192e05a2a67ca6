"""A launcher interrupted while it starts its workers leaves none that topo cannot find: SIGKILL to
`topo launch --join=True` or `topo run` leaves no worker (each dies with it, even one whose
launcher died before it armed its death signal); SIGINT, SIGTERM, SIGHUP or SIGKILL to a detached
`topo launch` leaves no worker, or a launch.json through which `topo stop` stops each one.

Each case interrupts at several points of the start-up: the worker of local rank K signals its
launcher as soon as it runs, while the launcher is still starting the later ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from livehost import path_with_python
from processes import wait_for

WORKERS = 12
# the worker of LOCAL_RANK=$KILL_AT sends $SIG to its parent when that is a topo launcher (a
# worker re-parented to init must not signal init); every worker then sleeps, carrying $MARKER
WORKER = """\
if [ "$LOCAL_RANK" = "$KILL_AT" ] && tr '\\0' ' ' < /proc/$PPID/cmdline | grep -q ' -m topo '; then
  kill -s "$SIG" "$PPID"
fi
exec sleep 60
"""


def workers_with(marker: str) -> list[int]:
    found = []
    for process in psutil.process_iter(["environ"]):
        if (process.info["environ"] or {}).get("INTERRUPT_MARKER") == marker:
            found.append(process.pid)
    return found


def kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def interrupted(tmp_path: Path, command: list[str], kill_at: int, sig: str) -> tuple[str, Path]:
    """Run the launcher `command` (workers: sh worker.sh) until the worker of local rank
    `kill_at` sends it `sig`; the workers' marker and the log directory."""
    marker = os.urandom(8).hex()
    (tmp_path / "worker.sh").write_text(WORKER)
    logs = tmp_path / f"logs_{marker}"
    env = {**os.environ, "PATH": path_with_python(), "INTERRUPT_MARKER": marker, "KILL_AT": str(kill_at),
           "SIG": sig}
    argv = [sys.executable, "-m", "topo", *command, f"{'--log_dir' if command[0] == 'launch' else '--log-dir'}={logs}"]
    argv += ["--python=sh", "worker.sh"] if command[0] == "launch" else ["--no-python", "sh", "worker.sh"]
    launcher = subprocess.Popen(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode != 0 or "left running" in err.decode(), err.decode()[-2000:]
    return marker, logs


@pytest.mark.parametrize("command", [
    ["launch", f"--worker_num={WORKERS}", f"--local_worker_num={WORKERS}", "--join=True", "--no-scheduler"],
    ["run", f"--nproc-per-node={WORKERS}"],
], ids=["launch-join", "run"])
def test_sigkill_while_a_joined_job_starts_leaves_no_worker(tmp_path, command):
    for kill_at in (0, 3, 7):
        marker, _ = interrupted(tmp_path, command, kill_at, "KILL")
        left = []
        try:
            assert wait_for(lambda: not workers_with(marker), timeout=5), f"kill at rank {kill_at}"
        finally:
            left = workers_with(marker)
            kill_all(left)
        assert not left


@pytest.mark.parametrize("sig", ["INT", "TERM", "HUP", "KILL"])
def test_a_signal_while_a_detached_job_starts_leaves_no_worker_topo_stop_cannot_find(tmp_path, sig):
    command = ["launch", f"--worker_num={WORKERS}", f"--local_worker_num={WORKERS}", "--no-scheduler"]
    for kill_at in (0, 5):
        marker, logs = interrupted(tmp_path, command, kill_at, sig)
        try:
            time.sleep(0.1)  # a caught signal has stopped every worker before the launcher exits
            if workers_with(marker):  # the signal came after the last start, or could not be caught
                stop = subprocess.run([sys.executable, "-m", "topo", "stop", "--grace-period=1", str(logs)],
                                      capture_output=True, text=True, timeout=60)
                assert stop.returncode == 0, stop.stderr
            assert wait_for(lambda: not workers_with(marker), timeout=3), f"SIG{sig} at rank {kill_at}"
        finally:
            kill_all(workers_with(marker))
