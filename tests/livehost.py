"""What the tests that run on this machine expect of it, derived from the machine itself.

Such a test assumes no number of CPUs, nodes or GPUs. It pins the view it checks: it hides the
GPUs (`NO_GPUS`), so that a host with none, one or eight plans a job's processes alike, on the CPUs
they may use, and it takes what each process gets from topo's own plan for this machine in that
view. It names the interpreter its processes run: `python` on PATH (`path_with_python`) is the one
running the tests.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
import warnings

import pytest

from processes import cpulist

# CUDA and ROCm read an empty list as "no GPU" (HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES
# index into what ROCR_VISIBLE_DEVICES leaves)
NO_GPUS = {"CUDA_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}


def hide_gpus(env) -> dict:
    """`env` with every GPU hidden and no job size of its own (LOCAL_WORLD_SIZE)."""
    return {**{k: v for k, v in env.items() if k != "LOCAL_WORLD_SIZE"}, **NO_GPUS}


@functools.cache
def python_dir() -> str:
    """A directory whose `python` is this interpreter: its own directory where it holds one (a venv,
    pyenv, conda), else a temporary one with a link named `python` (a system python3 without a
    `python`; outside a venv the link runs the same interpreter)."""
    here = os.path.dirname(sys.executable)
    mine = os.path.join(here, "python")
    if os.path.exists(mine) and os.path.samefile(mine, sys.executable):
        return here
    made = tempfile.mkdtemp(prefix="topo-tests-python-")
    atexit.register(shutil.rmtree, made, True)
    os.symlink(sys.executable, os.path.join(made, "python"))
    return made


def path_with_python(path: str | None = None) -> str:
    """`path` (default: this process's PATH) with `python_dir()` first: topo launch runs `python`
    from PATH, as msrun does."""
    return python_dir() + os.pathsep + (os.environ.get("PATH", os.defpath) if path is None else path)


def planned(rank: int, nproc: int, **options):
    """The binding set_affinity(rank, nproc, **options) applies on this machine with no GPU visible."""
    from topo import discover
    from topo.launcher.affinity import plan_affinity

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan_affinity(discover("/"), rank, nproc, env=NO_GPUS, **options)


def planned_cpus(rank: int, nproc: int, **options) -> list[int]:
    """The CPUs of `planned(rank, nproc, **options)`, in order."""
    return sorted(planned(rank, nproc, **options).cpus)


def bind_core_cpus(nproc: int) -> list[list[int]]:
    """Per local rank, the CPUs `topo launch --bind_core=True` gives `nproc` workers on this
    machine with no GPU visible: the msrun-auto plan of a job without devices."""
    from topo import discover, planners

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = planners.plan(discover("/"), "msrun-auto", devices=(), nproc=nproc, msrun_bind="core",
                             memory="none").to_json()
    return [sorted(cpulist(plan["bind_cpu"][f"device{r}"]["main"])) for r in range(nproc)]


def cpus_text(cpus) -> str:
    """A cpulist as topo prints it ("0-3,8")."""
    from topo.cpuset import CpuSet

    return str(CpuSet(cpus))


def _gloo_blocker() -> str | None:
    """Why gloo (torch's CPU collectives) cannot start here, or None: creating its group reads the
    `class` of every PCI function in sysfs and aborts where one has none (a faked or damaged /sys)."""
    base = "/sys/bus/pci/devices"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return None
    for name in names:
        if not os.path.exists(os.path.join(base, name, "class")):
            return f"gloo aborts on this machine: it reads every PCI function's class and {base}/{name}/class is missing"
    return None


needs_gloo = pytest.mark.skipif(_gloo_blocker() is not None, reason=str(_gloo_blocker()))
