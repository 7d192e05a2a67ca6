"""Write tests/fixtures/console/: what hwloc's `lstopo-no-graphics` prints for each captured machine.

Run once, where Debian's `hwloc` package is installed, after a fixture is added or hwloc changes:

    cd tests && python gen_lstopo_console.py

For each tarball of tests/fixtures/sysfs/ it runs lstopo on the extracted root, as hwloc's own test
runner does (HWLOC_FSROOT, HWLOC_COMPONENTS=linux,stop, the `env:` lines of the fixture's .test
files but HWLOC_PCI_LOCALITY), once per index mode (`NAME.txt`, `NAME-p.txt`, `NAME-l.txt`), plus the VARIANTS below.
test_console_form.py compares `topo show` with these files, so it runs without lstopo.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import SYSFS, HwlocRoots, parse_test_file

OUT = Path(__file__).parent / "fixtures" / "console"
# Every run keeps the NVIDIA GPU memory nodes of POWER machines, as topo always shows them (lstopo
# hides them without this variable); HWLOC_PCI_LOCALITY, which topo does not read, is left out.
OPTIONS: list[str] = []
ENV = {"HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES": "1"}
IGNORED_ENV = ("HWLOC_PCI_LOCALITY",)
MODES = {"": [], "-p": ["-p"], "-l": ["-l"]}
# (machine, file suffix, extra lstopo options): views beyond the default one
VARIANTS = [("32amd64-4s2n4c-cgroup2", "-disallowed", ["--disallowed"]),
            ("40intel64-2g2n4c+pcilocality", "-whole-io", ["--whole-io"]),
            ("40intel64-2g2n4c+pcilocality", "-no-io", ["--no-io"])]


def machines() -> dict[str, dict[str, str]]:
    """Each tarball's name and the environment its .test files set."""
    found: dict[str, dict[str, str]] = {}
    for test in sorted(SYSFS.glob("*.test")):
        info = parse_test_file(test.stem)
        if info["source"] and info["source"].endswith(".tar.bz2"):
            env = {k: v for k, v in info["env"].items() if k not in IGNORED_ENV}
            found.setdefault(info["source"].removesuffix(".tar.bz2"), {}).update(env)
    return found


def lstopo(root: Path, env: dict[str, str], args: list[str]) -> str:
    run_env = dict(os.environ, HWLOC_FSROOT=str(root), HWLOC_COMPONENTS="linux,stop", LC_ALL="C", **ENV, **env)
    return subprocess.run(["lstopo-no-graphics", *OPTIONS, *args], env=run_env, capture_output=True,
                          text=True, check=True, timeout=60).stdout


def main() -> None:
    if shutil.which("lstopo-no-graphics") is None:
        sys.exit("lstopo-no-graphics is not installed (Debian package hwloc)")
    version = subprocess.run(["lstopo-no-graphics", "--version"], capture_output=True, text=True).stdout.strip()
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        roots = HwlocRoots(Path(tmp))
        for name, env in machines().items():
            root = roots.root(f"{name}.tar.bz2")
            for suffix, args in MODES.items():
                (OUT / f"{name}{suffix}.txt").write_text(lstopo(root, env, args))
            for machine, suffix, args in VARIANTS:
                if machine == name:
                    (OUT / f"{name}{suffix}.txt").write_text(lstopo(root, env, args))
    print(f"wrote {OUT} with {version}")


if __name__ == "__main__":
    main()
