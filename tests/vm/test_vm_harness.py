"""The VM harness itself: what it needs, the initramfs it builds, and a hung boot being killed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import vmharness


def test_missing_names_each_absent_tool(monkeypatch):
    monkeypatch.setattr(vmharness.shutil, "which", lambda name: None)
    assert "qemu-system-x86" in vmharness.missing()
    monkeypatch.setattr(vmharness.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(vmharness, "kernel", lambda: None)
    assert "linux-image-amd64" in vmharness.missing()
    monkeypatch.setattr(vmharness, "kernel", lambda: ("/boot/vmlinuz-x", "x"))
    monkeypatch.setattr(vmharness, "busybox", lambda: None)
    assert "busybox-static" in vmharness.missing()


def test_cpio_archive_unpacks_with_cpio(tmp_path):
    if shutil.which("cpio") is None:
        pytest.skip("cpio not found")
    archive = vmharness._cpio([("d", 0o40755, b""), ("d/run", 0o100755, b"#!/bin/sh\n"), ("odd", 0o100644, b"abc")])
    subprocess.run(["cpio", "-idm", "--quiet"], input=archive, cwd=tmp_path, check=True)
    assert (tmp_path / "d" / "run").read_bytes() == b"#!/bin/sh\n"
    assert (tmp_path / "d" / "run").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "odd").read_bytes() == b"abc"


def test_modules_come_after_their_dependencies():
    found = vmharness.kernel()
    if found is None:
        pytest.skip("no kernel with modules under /lib/modules")
    names = [p.name.split(".ko")[0] for p in vmharness.module_files(found[1])]
    assert all(p.is_file() for p in vmharness.module_files(found[1]))
    for before, after in [("virtio_ring", "virtio"), ("virtio", "virtio_pci"), ("9pnet", "9pnet_virtio"),
                          ("9pnet_virtio", "9p"), ("netfs", "9p")]:
        if before in names and after in names:  # a module built into the kernel is not listed
            assert names.index(before) < names.index(after), names


@pytest.mark.vm
def test_hung_boot_is_killed():
    if vmharness.missing():
        pytest.skip(vmharness.missing())
    boot = vmharness.boot(vmharness.Machine("hang", 1, 128, ()), "sleep 100000\n", timeout=20)
    assert boot.timed_out and not boot.finished
