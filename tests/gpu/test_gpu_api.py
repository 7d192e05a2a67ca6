"""On a real NVIDIA host: a `topo capture` replays with the devices, fields and links the live
machine shows, and NVIDIA gpu_affinity's own sample runs unchanged after `import topo as
gpu_affinity`, binding as gpu_affinity does. Marker `gpu`, skipped as tests/gpu/test_gpu_nvidia.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from test_gpu_nvidia import cuda_torch, gpu_affinity_checkout, nvidia_missing, run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(nvidia_missing() is not None, reason=str(nvidia_missing()))]

FIELDS = ("kind", "vendor", "index", "busid", "uuid", "name", "memory", "numa_node", "local_cpus", "source")


def show(*args: str) -> dict:
    return json.loads(run([sys.executable, "-m", "topo", "show", "--json", *args]).stdout)


def test_a_capture_of_this_host_replays_its_gpus(tmp_path):
    if os.sched_getaffinity(0) != set(range(os.cpu_count() or 1)):
        pytest.skip("this process's affinity is narrower than the machine: a capture cannot know it")
    archive = tmp_path / "host.tar.gz"
    run([sys.executable, "-m", "topo", "capture", str(archive)])
    live, again = show(), show("--root", str(archive))
    assert [{k: d.get(k) for k in FIELDS} for d in again["devices"]] == [
        {k: d.get(k) for k in FIELDS} for d in live["devices"]]
    assert any(d["source"] == "nvml" for d in again["devices"])
    assert again["links"] == live["links"]
    assert again["source"]["probes"]["nvml"] == live["source"]["probes"]["nvml"] + ", as stored by topo capture"


def test_gpu_affinity_sample_runs_after_import_topo_as_gpu_affinity(tmp_path):
    checkout = Path(gpu_affinity_checkout())
    if cuda_torch() is None:
        pytest.skip("the sample counts GPUs with torch.cuda.device_count(): needs CUDA torch")
    sample = (checkout / "examples" / "sample" / "sample.py").read_text()
    assert "\nimport gpu_affinity\n" in sample
    ours = tmp_path / "sample.py"
    ours.write_text(sample.replace("\nimport gpu_affinity\n", "\nimport topo as gpu_affinity\n"))
    args = ["--local-rank", "0", "--mode", "unique_contiguous", "--scope", "socket"]
    theirs = run([sys.executable, str(checkout / "examples" / "sample" / "sample.py"), *args],
                 env={**os.environ, "PYTHONPATH": str(checkout)})
    got = run([sys.executable, str(ours), *args])
    assert got.stdout.splitlines()[-1] == theirs.stdout.splitlines()[-1]  # rank 0: core affinity: [...]
