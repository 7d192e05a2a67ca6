"""topo on a real NVIDIA host: NVML discovery against `nvidia-smi topo -m` and sysfs,
`topo.set_affinity` against NVIDIA's gpu_affinity, `topo run --numa-binding` against torchrun's, and
a real NCCL all-reduce under `topo run`.

Marker `gpu`; everything here is skipped, with the reason, without an NVIDIA driver
(/proc/driver/nvidia) or when NVML cannot start. The gpu_affinity comparison runs NVIDIA's own
code from the checkout named by TOPO_TEST_GPU_AFFINITY (a clone of NVIDIA/gpu_affinity, holding
the `gpu_affinity` package); torchrun's and NCCL's need CUDA torch.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import samples
from processes import cpulist as cpus

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
GPU_AFFINITY_ENV = "TOPO_TEST_GPU_AFFINITY"
GPU_AFFINITY_MODES = ["all", "single", "single_unique", "unique_interleaved", "unique_contiguous"]
TORCH_MODES = ["node", "socket", "exclusive", "core-complex"]


def nvidia_missing() -> str | None:
    """Why there is no NVIDIA GPU to test on, or None."""
    if not os.path.isdir("/proc/driver/nvidia"):
        return "no NVIDIA driver (/proc/driver/nvidia is absent)"
    try:
        import pynvml
    except ImportError:
        return "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        return f"NVML does not start: {exc}"
    return None if count else "NVML sees no GPU"


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(nvidia_missing() is not None, reason=str(nvidia_missing()))]


def busid(nvml_busid: str | bytes) -> str:
    """NVML's "00000000:19:00.0" as sysfs names it, "0000:19:00.0"."""
    text = nvml_busid.decode() if isinstance(nvml_busid, bytes) else nvml_busid
    domain, rest = text.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def env_with(pythonpath: str) -> dict:
    return {**os.environ, "PYTHONPATH": pythonpath}


def run(argv: list[str], *, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, env=env or env_with(str(REPO)), timeout=timeout, cwd=REPO)
    assert p.returncode == 0, f"{argv} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@functools.lru_cache(maxsize=None)
def nvml_truth() -> list[dict]:
    """Per NVML index: bus id, UUID and NODE/SOCKET-scope CPU affinity, straight from pynvml."""
    import pynvml

    pynvml.nvmlInit()
    try:
        words = (os.cpu_count() + 63) // 64
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            scopes = {}
            for name, scope in (("node", pynvml.NVML_AFFINITY_SCOPE_NODE), ("socket", pynvml.NVML_AFFINITY_SCOPE_SOCKET)):
                bits = pynvml.nvmlDeviceGetCpuAffinityWithinScope(handle, words, scope)
                scopes[name] = {w * 64 + b for w, word in enumerate(bits) for b in range(64) if word >> b & 1}
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            gpus.append({"index": i, "busid": busid(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                         "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid, **scopes})
        return gpus
    finally:
        pynvml.nvmlShutdown()


@functools.lru_cache(maxsize=None)
def topo_gpus() -> list[dict]:
    show = json.loads(run([sys.executable, "-m", "topo", "show", "--json"]).stdout)
    return sorted((d for d in show["devices"] if d["kind"] == "gpu" and d["vendor"] == "nvidia"), key=lambda d: d["index"])


@functools.lru_cache(maxsize=None)
def topo_links() -> dict:
    return json.loads(run([sys.executable, "-m", "topo", "show", "--json"]).stdout)["links"]


def sysfs(bus: str, name: str) -> str:
    with open(f"/sys/bus/pci/devices/{bus}/{name}") as fh:
        return fh.read().strip()


# --- discovery --------------------------------------------------------------------------------

def test_nvml_discovery_matches_nvml_and_sysfs():
    truth = nvml_truth()
    gpus = topo_gpus()
    assert [g["index"] for g in gpus] == [t["index"] for t in truth]
    for gpu, t in zip(gpus, truth):
        assert gpu["busid"] == t["busid"]
        assert gpu["uuid"] == t["uuid"]
        assert sysfs(gpu["busid"], "vendor") == "0x10de"
        node = int(sysfs(gpu["busid"], "numa_node"))
        if node >= 0:  # -1 (no NUMA information in sysfs): NVML's memory affinity may still name one
            assert gpu["numa_node"] == node
        assert cpus(gpu["local_cpus"]) == cpus(sysfs(gpu["busid"], "local_cpulist"))
        # NVML's NODE-scope affinity is the device's local CPUs; SOCKET scope covers them
        assert cpus(gpu["local_cpus"]) == t["node"]
        assert t["node"] <= t["socket"]
        if gpu.get("socket_cpus"):
            assert cpus(gpu["socket_cpus"]) == t["socket"]


def test_nvml_discovery_matches_nvidia_smi_topo_m():
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not found")
    smi = samples.parse_topo_m(run(["nvidia-smi", "topo", "-m"]).stdout)
    for gpu in topo_gpus():
        name = f"GPU{gpu['index']}"
        assert cpus(gpu["local_cpus"]) == cpus(smi["cpus"][name]), name
        if name in smi["numa"]:
            assert gpu["numa_node"] == smi["numa"][name], name
    # every cell both matrices have (GPUs, and NICs under their mlx5 names)
    links = topo_links()
    compared = 0
    for row, cols in links.items():
        for col, level in cols.items():
            if row in smi["matrix"] and col in smi["matrix"][row]:
                assert level == smi["matrix"][row][col], (row, col)
                compared += 1
    assert compared >= len(topo_gpus())  # at least the diagonal


# --- topo.set_affinity against gpu_affinity ---------------------------------------------------

def gpu_affinity_checkout() -> str:
    path = os.environ.get(GPU_AFFINITY_ENV)
    if not path:
        pytest.skip(f"{GPU_AFFINITY_ENV} is not set (a checkout of NVIDIA/gpu_affinity)")
    if not (Path(path) / "gpu_affinity" / "__init__.py").is_file():
        pytest.skip(f"{GPU_AFFINITY_ENV}={path} holds no gpu_affinity package")
    return path


CALL = """
import json, sys
kwargs = json.loads(sys.argv[1])
if kwargs.pop("impl") == "gpu_affinity":
    import gpu_affinity
    kwargs["mode"] = gpu_affinity.Mode(kwargs["mode"])
    kwargs["scope"] = gpu_affinity.Scope(kwargs["scope"])
    kwargs["multithreading"] = gpu_affinity.Multithreading(kwargs["multithreading"])
    got = gpu_affinity.set_affinity(**kwargs)
else:
    import topo
    got = topo.set_affinity(kwargs.pop("gpu_id"), kwargs.pop("nproc_per_node"), **kwargs)
print(json.dumps(sorted(got)))
"""


def affinity_by(impl: str, pythonpath: str, **kwargs) -> list[int]:
    """The set a fresh process gets from `impl`'s set_affinity (it moves the process, so never ours)."""
    out = run([sys.executable, "-c", CALL, json.dumps({"impl": impl, **kwargs})], env=env_with(pythonpath))
    return json.loads(out.stdout)


@pytest.mark.parametrize("multithreading", ["all_logical", "single_logical"])
@pytest.mark.parametrize("scope", ["node", "socket"])
@pytest.mark.parametrize("mode", GPU_AFFINITY_MODES)
def test_set_affinity_matches_gpu_affinity(mode, scope, multithreading):
    checkout = gpu_affinity_checkout()
    n = len(nvml_truth())
    for gpu_id in range(n):
        kwargs = {"gpu_id": gpu_id, "nproc_per_node": n, "mode": mode, "scope": scope, "multithreading": multithreading}
        theirs = affinity_by("gpu_affinity", checkout, **kwargs)
        ours = affinity_by("topo", str(REPO), **kwargs)
        assert ours == theirs, (kwargs, ours, theirs)


# --- topo run against torchrun, and NCCL ------------------------------------------------------

@functools.lru_cache(maxsize=None)
def cuda_torch() -> tuple[int, list[str]] | None:
    """(CUDA device count, torch's --numa-binding modes) from a fresh interpreter, or None."""
    code = ("import json, torch\n"
            "try:\n    from torch.numa.binding import AffinityMode\n    modes = [m.value for m in AffinityMode]\n"
            "except ImportError:\n    modes = []\n"
            "print(json.dumps([torch.cuda.device_count() if torch.cuda.is_available() else 0, modes]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return None
    count, modes = json.loads(p.stdout)
    return (count, modes) if count else None


def need_cuda_torch() -> tuple[int, list[str]]:
    got = cuda_torch()
    if got is None:
        pytest.skip("torch with CUDA is not installed here")
    return got


def workers_of(out: Path, count: int) -> list[dict]:
    records = [json.loads((out / f"rank{r}.json").read_text()) for r in range(count)]
    return records


@pytest.mark.parametrize("mode", TORCH_MODES)
def test_run_numa_binding_matches_torchrun(mode, tmp_path):
    count, modes = need_cuda_torch()
    if mode not in modes:
        pytest.skip(f"this torch's --numa-binding has no mode {mode}")
    theirs, ours = tmp_path / "torchrun", tmp_path / "topo"
    theirs.mkdir()
    ours.mkdir()
    common = ["--standalone", f"--nproc-per-node={count}", f"--numa-binding={mode}"]
    run([sys.executable, "-m", "torch.distributed.run", *common, str(HERE / "gpu_worker.py"), str(theirs)])
    run([sys.executable, "-m", "topo", "run", *common, str(HERE / "gpu_worker.py"), str(ours)])
    for t, o in zip(workers_of(theirs, count), workers_of(ours, count)):
        assert cpus(o["cpus"]) == cpus(t["cpus"]), (mode, t, o)


def test_nccl_allreduce_under_topo_run(tmp_path):
    count, _ = need_cuda_torch()
    run([sys.executable, "-m", "topo", "run", "--standalone", f"--nproc-per-node={count}", "--numa-binding=node",
         str(HERE / "nccl_allreduce.py"), str(tmp_path)])
    gpus = topo_gpus()
    for r in range(count):
        rec = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert rec["world_size"] == count
        assert rec["sum"] == count * (count + 1) / 2
        assert rec["device"] == r
        assert set(rec["affinity"]) <= cpus(gpus[r]["local_cpus"]) or gpus[r]["numa_node"] is None
