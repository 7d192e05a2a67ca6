"""A stand-in for `pynvml`, driven by a JSON description of a machine's GPUs.

Tests put it in `sys.modules["pynvml"]` after `load(description)`. It implements the calls topo's
NVML probe makes, with NVML's conventions: handles per index, `00000000:`-prefixed bus ids,
affinity arrays of 64-bit words (word 0 = CPUs 0-63), NVMLError subclasses for failures.

Description (every key but `busid` optional):
    {"init_error": "Driver Not Loaded",
     "gpus": [{"busid": "0000:07:00.0", "uuid": "GPU-...", "name": "...", "memory": 85899345920,
               "node_cpus": "48-63,176-191", "socket_cpus": "0-63,128-191", "numa_node": 3,
               "nvlinks": [["0000:c3:00.0", 2], ...], "mig": ["MIG-..."], "error": "GPU is lost"}],
     "pcie": {"0,1": 20}}   # nvmlDeviceGetTopologyCommonAncestor levels by index pair
"""

from __future__ import annotations

NVML_AFFINITY_SCOPE_NODE = 0
NVML_AFFINITY_SCOPE_SOCKET = 1
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18

_machine: dict = {}
_initialised = False


class NVMLError(Exception):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    def __init__(self, msg="Not Supported"):
        super().__init__(msg)


class NVMLError_InvalidArgument(NVMLError):
    def __init__(self, msg="Invalid Argument"):
        super().__init__(msg)


class NVMLError_GpuIsLost(NVMLError):
    pass


class NVMLError_Uninitialized(NVMLError):
    def __init__(self, msg="Uninitialized"):
        super().__init__(msg)


def load(description: dict) -> None:
    global _machine, _initialised
    _machine = description
    _initialised = False


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _cpus(text: str) -> set[int]:
    out = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _words(cpus: set[int], size: int) -> list[int]:
    words = [0] * size
    for c in cpus:
        if c // 64 < size:  # NVML truncates to the array the caller passed
            words[c // 64] |= 1 << (c % 64)
    return words


def _gpu(handle):
    if not _initialised:
        raise NVMLError_Uninitialized()
    kind, index, slot = handle
    return _machine["gpus"][index]


def nvmlInit():
    global _initialised
    if _machine.get("init_error"):
        raise NVMLError_DriverNotLoaded(_machine["init_error"])
    _initialised = True


def nvmlShutdown():
    global _initialised
    _initialised = False


def nvmlDeviceGetCount():
    if not _initialised:
        raise NVMLError_Uninitialized()
    return len(_machine.get("gpus", []))


def nvmlDeviceGetHandleByIndex(index):
    if not _initialised:
        raise NVMLError_Uninitialized()
    gpu = _machine["gpus"][index]
    if gpu.get("error"):
        raise NVMLError_GpuIsLost(gpu["error"])
    return ("gpu", index, None)


def nvmlDeviceGetPciInfo(handle):
    dom, rest = _gpu(handle)["busid"].split(":", 1)
    return _Obj(busId=f"{int(dom, 16):08X}:{rest.upper()}".encode())


def nvmlDeviceGetUUID(handle):
    gpu = _gpu(handle)
    if handle[0] == "mig":
        return gpu["mig"][handle[2]]
    if "uuid" not in gpu:
        raise NVMLError_NotSupported()
    return gpu["uuid"]


def nvmlDeviceGetName(handle):
    return _gpu(handle).get("name", "NVIDIA Fake GPU")


def nvmlDeviceGetMemoryInfo(handle):
    gpu = _gpu(handle)
    if "memory" not in gpu:
        raise NVMLError_NotSupported()
    return _Obj(total=gpu["memory"], free=gpu["memory"], used=0)


def nvmlDeviceGetCpuAffinityWithinScope(handle, size, scope):
    gpu = _gpu(handle)
    key = {NVML_AFFINITY_SCOPE_NODE: "node_cpus", NVML_AFFINITY_SCOPE_SOCKET: "socket_cpus"}[scope]
    if key not in gpu:
        raise NVMLError_NotSupported()
    return _words(_cpus(gpu[key]), size)


def nvmlDeviceGetCpuAffinity(handle, size):
    return nvmlDeviceGetCpuAffinityWithinScope(handle, size, NVML_AFFINITY_SCOPE_NODE)


def nvmlDeviceGetMemoryAffinity(handle, size, scope):
    gpu = _gpu(handle)
    if "numa_node" not in gpu:
        raise NVMLError_NotSupported()
    return _words({gpu["numa_node"]}, size)


def _links(gpu):
    out = []
    for remote, count in gpu.get("nvlinks", []):
        out.extend([remote] * count)
    return out


def nvmlDeviceGetNvLinkState(handle, link):
    links = _links(_gpu(handle))
    if not links:
        raise NVMLError_NotSupported()
    if link >= NVML_NVLINK_MAX_LINKS:
        raise NVMLError_InvalidArgument()
    return NVML_FEATURE_ENABLED if link < len(links) else NVML_FEATURE_DISABLED


def nvmlDeviceGetNvLinkRemotePciInfo(handle, link):
    dom, rest = _links(_gpu(handle))[link].split(":", 1)
    return _Obj(busId=f"{int(dom, 16):08X}:{rest.upper()}".encode())


def nvmlDeviceGetTopologyCommonAncestor(h1, h2):
    a, b = sorted((h1[1], h2[1]))
    level = _machine.get("pcie", {}).get(f"{a},{b}")
    if level is None:
        raise NVMLError_NotSupported()
    return level


def nvmlDeviceGetMigMode(handle):
    mode = NVML_FEATURE_ENABLED if _gpu(handle).get("mig") else NVML_FEATURE_DISABLED
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(handle):
    return 7


def nvmlDeviceGetMigDeviceHandleByIndex(handle, slot):
    gpu = _gpu(handle)
    if slot >= len(gpu.get("mig", [])):
        raise NVMLError("Not Found")
    return ("mig", handle[1], slot)
