"""A normal (not editable) install of this checkout in a fresh venv, for the benchmarks.

An editable install adds a `.pth` import hook that every interpreter pays for at start-up (about
12 ms here, workers included), and a developer's site-packages may hold more `.pth` files still;
users run a normal install. So the whole-process benchmarks time `VENV/bin/topo` from a venv made
here, with only topo and its dependencies (click, psutil) in it.

    python benchmarks/install.py            # make or refresh it, print the venv's bin directory
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VENV = Path(os.environ.get("TOPO_BENCH_VENV", Path.home() / ".cache" / "topo-bench" / "venv"))


def normal_install(where: Path = DEFAULT_VENV) -> Path:
    """The bin directory of a venv holding a normal install of this checkout (reinstalled each call,
    so the code timed is the working tree's)."""
    bin_dir = where / "bin"
    if not (bin_dir / "python").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(where)
        # setuptools' distutils-precedence.pth would run at every interpreter start
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], check=True)
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # dependencies once (they change rarely), then topo itself without them, from the working tree
    subprocess.run([*pip, "click>=8.0", "psutil>=5.9"], check=True)
    subprocess.run([*pip, "--no-deps", "--force-reinstall", str(REPO)], check=True,
                   stdout=subprocess.DEVNULL)
    if not (bin_dir / "topo").exists():
        raise SystemExit(f"no topo script in {bin_dir} after installing {REPO}")
    return bin_dir


if __name__ == "__main__":
    print(normal_install())
    sys.exit(0)
