"""set_affinity(threads=...) moves a thread started while it runs: one started by a thread not yet
moved has the old CPUs and is not in the first list of threads (issue 28)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from livehost import hide_gpus, planned_cpus

ROOT = Path(__file__).resolve().parent.parent

# syscalls.apply is wrapped so that, before the caller is bound, the caller starts one more thread:
# it inherits the old CPUs, after set_affinity listed the threads to move
CODE = """
    import json, os, threading
    from topo import syscalls
    from topo.launcher.affinity import bind_process
    real, started, done, ids = syscalls.apply, threading.Event(), threading.Event(), []

    def late():
        ids.append(threading.get_native_id()); started.set(); done.wait()

    def apply(binding, **kwargs):
        if not ids:
            threading.Thread(target=late).start(); started.wait()
        return real(binding, **kwargs)

    syscalls.apply = apply
    result = bind_process(0, 2, mode="single_unique", threads=os.environ["THREADS"])
    # threads the test did not start (a GPU driver's library may run some) share the CPUs: moved too
    others = len(os.listdir("/proc/self/task")) - 2
    print(json.dumps({"main": sorted(result.cpus), "late": sorted(os.sched_getaffinity(ids[0])),
                      "moved": result.threads_moved - others}))
    done.set()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two allowed CPUs")
@pytest.mark.parametrize("threads", ["shared", "all"])
def test_a_thread_started_while_set_affinity_runs_is_moved(threads):
    env = hide_gpus({k: v for k, v in os.environ.items() if k not in ("TOPO_ROOT", "TOPO_BINDING")})
    env.update(THREADS=threads, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CODE)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["main"] == got["late"] == planned_cpus(0, 2, mode="single_unique")
    assert got["moved"] == 1
