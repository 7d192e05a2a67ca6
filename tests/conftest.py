"""Shared fixtures: hwloc's captured machines, extracted once per test session."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SYSFS = FIXTURES / "sysfs"


def parse_test_file(name: str) -> dict:
    """An hwloc `.test` descriptor: source tarball, target, lstopo options, env lines."""
    info = {"source": None, "target": None, "options": "", "env": {}, "exclude": None}
    for line in (SYSFS / f"{name}.test").read_text().splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key in ("source", "target", "options", "exclude"):
            info[key] = value
        elif key == "env":
            m = re.match(r"(?:export\s+)?(\w+)(?:=(.*))?", value)
            if m and m.group(2) is not None:
                info["env"][m.group(1)] = m.group(2).strip('"')
    return info


class HwlocRoots:
    """Extracts each tarball on first use; `root(tarball)` is the single folder inside it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._roots: dict[str, Path] = {}

    def root(self, tarball: str) -> Path:
        if tarball not in self._roots:
            dest = self.base / tarball.removesuffix(".tar.bz2")
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(SYSFS / tarball) as tar:
                tar.extractall(dest, filter="tar")
            (inner,) = [p for p in dest.iterdir() if p.is_dir()]
            self._roots[tarball] = inner
        return self._roots[tarball]

    def for_fixture(self, name: str) -> Path:
        return self.root(parse_test_file(name)["source"])


@pytest.fixture(scope="session")
def hwloc_roots(tmp_path_factory) -> HwlocRoots:
    return HwlocRoots(tmp_path_factory.mktemp("hwloc-roots"))


def fixture_names() -> list[str]:
    return sorted(p.stem for p in (SYSFS / "expected").glob("*.json"))


# Every run tries the same examples (a red build must be reproducible), `.ci/run` included, which
# sets no CI variable: the default profile is derandomized. `--hypothesis-profile=explore` lets
# hypothesis pick new examples (and replay failures from its database); `thorough` digs deeper.
# Each fuzz test bounds its own time per input; deadline=None keeps a loaded machine from failing it.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile("ci")
