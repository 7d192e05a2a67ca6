"""Running the command-line tools some probes read (`lscpu`, `npu-smi`, ...): one wrapper, so each
gets the same timeout, locale and one-line failure."""

from __future__ import annotations

import os
import shutil

from topo.errors import ProbeError

TIMEOUT = 10.0  # seconds, as msrun's execute_command gives npu-smi


class ToolNotFound(ProbeError):
    """The tool is not installed (not on PATH)."""


def run_tool(argv: list[str], timeout: float | None = None) -> str:
    """The tool's stdout. ProbeError naming the command when it is missing, cannot be executed,
    times out or exits non-zero (with the first line it wrote to stderr, else stdout).

    LC_ALL=C: the parsers read English keys and '.' decimals.
    """
    shown = " ".join(argv)
    timeout = TIMEOUT if timeout is None else timeout
    if shutil.which(argv[0]) is None:  # before importing subprocess, which most runs never need
        raise ToolNotFound(f"{argv[0]} not found on PATH")
    import subprocess

    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace",
                              env=dict(os.environ, LC_ALL="C"))
    except FileNotFoundError:
        raise ToolNotFound(f"{argv[0]} not found on PATH") from None
    except PermissionError:
        raise ProbeError(f"permission denied to execute {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise ProbeError(f"'{shown}' timed out after {timeout:g}s") from None
    except OSError as exc:
        raise ProbeError(f"cannot run '{shown}': {exc.strerror}") from None
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip().splitlines()
        raise ProbeError(f"'{shown}' failed (exit {done.returncode})" + (f": {err[0][:120]}" if err else ""))
    return done.stdout
