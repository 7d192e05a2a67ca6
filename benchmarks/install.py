"""A normal (not editable) install of this checkout in a fresh venv, for the benchmarks.

An editable install adds a `.pth` import hook that every interpreter pays for at start-up (about
12 ms here, workers included), and a developer's site-packages may hold more `.pth` files still;
users run a normal install. So the whole-process benchmarks time `VENV/bin/topo` from a venv made
here, with only topo and its dependencies (click, psutil) in it, and torch when a benchmark compares
with torchrun (the same torch as the calling interpreter's, so torchrun and its workers start from
this venv as topo's do).

    python benchmarks/install.py            # make or refresh it, print the venv's bin directory
    python benchmarks/install.py --torch    # the same, with torch (for torchrun)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VENV = Path(os.environ.get("TOPO_BENCH_VENV", Path.home() / ".cache" / "topo-bench" / "venv"))


def torch_requirement() -> str | None:
    """`torch==<version>` of the torch installed for this interpreter (read from its metadata,
    without importing it), or None when there is none."""
    from importlib import metadata

    try:
        return f"torch=={metadata.version('torch')}"
    except metadata.PackageNotFoundError:
        return None


def normal_install(where: Path = DEFAULT_VENV, extras: tuple[str, ...] = ()) -> Path:
    """The bin directory of a venv holding a normal install of this checkout (reinstalled each call,
    so the code timed is the working tree's), and the requirements `extras` (installed once)."""
    bin_dir = where / "bin"
    if not (bin_dir / "python").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(where)
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # dependencies once (they change rarely), then topo itself without them, from the working tree
    subprocess.run([*pip, "click>=8.0", "psutil>=5.9", *extras], check=True)
    # setuptools (the venv's own, or torch's dependency) has a distutils-precedence.pth that would
    # run at every interpreter start; nothing timed here needs it
    if any(where.glob("lib/python*/site-packages/distutils-precedence.pth")):
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], check=True)
    subprocess.run([*pip, "--no-deps", "--force-reinstall", str(REPO)], check=True,
                   stdout=subprocess.DEVNULL)
    if not (bin_dir / "topo").exists():
        raise SystemExit(f"no topo script in {bin_dir} after installing {REPO}")
    return bin_dir


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", action="store_true", help="also install this interpreter's torch version")
    args = parser.parse_args()
    extras = ()
    if args.torch:
        requirement = torch_requirement()
        if requirement is None:
            raise SystemExit("--torch: this interpreter has no torch to match; pip install torch first")
        extras = (requirement,)
    print(normal_install(extras=extras))
    sys.exit(0)
