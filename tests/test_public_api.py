"""topo's public API: NVIDIA gpu_affinity's names (code written for it runs after `import topo as
gpu_affinity`), the typed signatures a user's `mypy --strict` checks, and the stable paths
help(topo) names."""

from __future__ import annotations

import os
import pathlib
import pydoc
import subprocess
import sys
import textwrap
import tomllib

import pytest

import topo
from topo.errors import TopoError

from livehost import NO_GPUS, hide_gpus

REPO = pathlib.Path(__file__).resolve().parent.parent

# gpu_affinity's enums (gpu_affinity/gpu_affinity.py): member -> value
GPU_AFFINITY_NAMES = {
    "Mode": {"ALL": "all", "SINGLE": "single", "SINGLE_UNIQUE": "single_unique",
             "UNIQUE_INTERLEAVED": "unique_interleaved", "UNIQUE_CONTIGUOUS": "unique_contiguous"},
    "Scope": {"NODE": "node", "SOCKET": "socket"},
    "Multithreading": {"ALL_LOGICAL": "all_logical", "SINGLE_LOGICAL": "single_logical"},
}


def python(code: str, *args: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with no GPU visible (the job's processes share the CPUs)."""
    env = hide_gpus({k: v for k, v in os.environ.items() if k not in ("TOPO_ROOT", "LOCAL_WORLD_SIZE")})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("enum_name", sorted(GPU_AFFINITY_NAMES))
def test_gpu_affinity_enums_have_its_members_and_values(enum_name):
    enum = getattr(topo, enum_name)
    assert {m.name: m.value for m in enum} == GPU_AFFINITY_NAMES[enum_name]
    for member in enum:
        assert str(member) == member.value and enum(member.value) is member  # argparse's type= and default


def test_a_gpu_affinity_handler_catches_set_affinitys_errors(monkeypatch):
    import topo as gpu_affinity

    for name, value in NO_GPUS.items():  # the view this test pins: the processes share the CPUs
        monkeypatch.setenv(name, value)

    assert gpu_affinity.GPUAffinityError is topo.AffinityError and issubclass(gpu_affinity.GPUAffinityError,
                                                                               TopoError)
    with pytest.raises(gpu_affinity.GPUAffinityError, match="should be smaller than nproc_per_node=2"):
        gpu_affinity.set_affinity(5, 2)


def test_a_machine_that_cannot_be_read_is_a_gpu_affinity_error_too(monkeypatch):
    from topo.errors import ProbeError
    from topo.launcher import affinity

    def unreadable(root):
        raise ProbeError("/sys/devices/system/cpu/online: Permission denied")

    monkeypatch.delenv("TOPO_BINDING", raising=False)
    monkeypatch.setattr(affinity, "discover", unreadable)
    affinity.this_machine.cache_clear()
    try:
        with pytest.raises(topo.GPUAffinityError, match=r"^cannot read this machine's topology: "
                                                        r"/sys/devices/system/cpu/online: Permission denied$"):
            topo.set_affinity(0, 1)
    finally:
        affinity.this_machine.cache_clear()


def test_gpu_affinity_sample_code_runs_after_one_import():
    # gpu_affinity's examples/sample/sample.py in outline: enums as argparse types, choices and
    # defaults, every keyword passed through; one process on the machine.
    proc = python("""
        import argparse, sys
        import topo as gpu_affinity

        parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        parser.add_argument("--mode", type=gpu_affinity.Mode, default=gpu_affinity.Mode.UNIQUE_CONTIGUOUS,
                            choices=list(gpu_affinity.Mode))
        parser.add_argument("--scope", type=gpu_affinity.Scope, default=gpu_affinity.Scope.NODE,
                            choices=list(gpu_affinity.Scope))
        parser.add_argument("--multithreading", type=gpu_affinity.Multithreading,
                            default=gpu_affinity.Multithreading.ALL_LOGICAL, choices=list(gpu_affinity.Multithreading))
        args = parser.parse_args()
        try:
            affinity = gpu_affinity.set_affinity(0, 1, mode=args.mode, scope=args.scope,
                                                 multithreading=args.multithreading, balanced=True,
                                                 min_physical_cores=1, max_physical_cores=None)
        except gpu_affinity.GPUAffinityError as exc:
            sys.exit(f"GPUAffinityError: {exc}")
        print(sorted(affinity) == sorted(__import__("os").sched_getaffinity(0)) and bool(affinity))
        try:
            gpu_affinity.set_affinity(0, 1, mode="fastest")
        except gpu_affinity.GPUAffinityError as exc:
            print("caught:", exc)
    """, "--mode", "single", "--scope", "socket", "--multithreading", "single_logical")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "True"
    assert proc.stdout.splitlines()[1].startswith("caught: unknown mode 'fastest'")


def test_help_names_the_stable_paths_and_they_exist():
    text = pydoc.render_doc(topo, renderer=pydoc.plaintext)
    for module, names in {"topo.launcher.spawn": ("bound_argv", "start_bound", "plan_child"),
                          "topo.launcher.ps": ("inspect", "as_json", "as_text", "ProcessView")}.items():
        assert module in text
        loaded = __import__(module, fromlist=["_"])
        for name in names:
            assert f"`{name}`" in text and callable(getattr(loaded, name)), (module, name)
    for name in topo.__all__:
        assert getattr(topo, name) is not None, name


def test_the_package_ships_py_typed():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["topo"]
    assert (REPO / "topo" / "py.typed").is_file()


USER_CODE = """\
import os
import subprocess

import topo
import topo as gpu_affinity
from topo.launcher import ps, spawn


def main() -> None:
    try:
        cpus: set[int] = gpu_affinity.set_affinity(int(os.environ.get("LOCAL_RANK", "0")), 1,
                                                   mode=gpu_affinity.Mode.UNIQUE_CONTIGUOUS,
                                                   scope=gpu_affinity.Scope.NODE,
                                                   multithreading=gpu_affinity.Multithreading.ALL_LOGICAL,
                                                   balanced=True, min_physical_cores=1, max_physical_cores=None)
    except gpu_affinity.GPUAffinityError as exc:
        print(exc)
        return
    t: topo.Topology = topo.discover("/")
    print(sorted(cpus), topo.plan_affinity(t, "0000:18:00.0", mode="node").cpus)
    subprocess.run(spawn.bound_argv(["python3", "w.py"], 0, 1), check=False)
    print(ps.as_text(ps.inspect([os.getpid()])))
"""

WRONG_CODE = """\
import topo

topo.set_affinity([0], 1)
topo.set_affinity(0, mode=3)
topo.set_affinity(0, multithreading=topo.Multithreading.FASTEST)
cpus: list[int] = topo.set_affinity(0)
from topo.launcher import spawn
spawn.bound_argv(["python3", "w.py"], 0, scope=2)
"""


def installed_layout(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder holding the package as pip installs it (pyproject's package-dir), made of links to
    this checkout: an editable install's import hook is invisible to mypy."""
    site = tmp_path / "site"
    (site / "topo").mkdir(parents=True)
    for entry in (REPO / "topo").iterdir():
        (site / "topo" / entry.name).symlink_to(entry)
    for package, folder in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
            "package-dir"].items():
        (site / "topo" / package.removeprefix("topo.")).symlink_to(REPO / folder)
    return site


def test_mypy_strict_passes_on_a_users_calls_and_catches_wrong_ones(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    site = installed_layout(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site)}  # a search path of installed (PEP 561) packages
    results = {}
    for name, code in (("user.py", USER_CODE), ("wrong.py", WRONG_CODE)):
        (tmp_path / name).write_text(code)
        results[name] = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                                        "--python-executable", sys.executable, name],
                                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert results["user.py"].returncode == 0, results["user.py"].stdout
    wrong = results["wrong.py"].stdout
    for line, words in ((3, 'Argument 1 to "set_affinity" has incompatible type "list[int]"'),
                        (4, 'Argument "mode" to "set_affinity" has incompatible type "int"; expected "Mode | str"'),
                        (5, '"type[Multithreading]" has no attribute "FASTEST"'),
                        (6, 'Incompatible types in assignment (expression has type "set[int]"'),
                        (8, 'Argument "scope" to "bound_argv" has incompatible type "int"; expected "Scope | str"')):
        assert f"wrong.py:{line}: error: {words}" in wrong, wrong
