"""Which physical device a job's local rank i gets: the runtimes' visible-device variables.

`visible_devices(topology)[i]` is local rank i's device, as the runtime numbers them:
- NVIDIA: `CUDA_DEVICE_ORDER` orders the GPUs (FASTEST_FIRST is bus order for one model),
  `CUDA_VISIBLE_DEVICES` picks indices, `GPU-` UUID prefixes or `MIG-` UUIDs; as CUDA, `-1` or a
  repeated GPU ends the list. An index past the GPUs or a UUID prefix matching none or several is
  an error naming it (a plan for fewer GPUs than asked is never what was meant).
- AMD: `ROCR_VISIBLE_DEVICES` selects, then `HIP_VISIBLE_DEVICES` (or `CUDA_VISIBLE_DEVICES`).
- Intel XPUs: `ZE_AFFINITY_MASK` lists indices in PCI bus order, or `device.subdevice` (a tile
  runs where its card sits). Ascend (`ASCEND_RT_VISIBLE_DEVICES`, NPU ids) and Gaudi
  (`HABANA_VISIBLE_MODULES`, module ids): local rank i gets `sorted(ids)[i]`, as msrun and the runtime.
`find_device` finds a device by UUID or PCI bus id.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Mapping

from topo.cpuset import excerpt
from topo.numbers import ascii_number
from topo.errors import UsageError
from topo.model import Device, Topology
from topo.probes.devices import ACCELERATOR_KINDS
from topo.probes.nvml import pci_bus_id
from topo.probes.pci import bus_key

_INDEX = re.compile(r"\A[+-]?[0-9]+\Z")  # ASCII digits only: int() would also read "١" as 1
# The variables that choose or order a job's devices.
VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
             "ZE_AFFINITY_MASK", "ASCEND_RT_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES")


def default_kind(topology: Topology) -> str | None:
    """The accelerator kind a job's processes go to: GPUs, else NPUs, else other accelerators."""
    kinds = {d.kind for d in topology.devices}
    return next((k for k in ACCELERATOR_KINDS if k in kinds), None)


def job_env(topology: Topology, env: Mapping[str, str] | None) -> Mapping[str, str]:
    """`env`, by default this process's environment on the live machine and none for a topology read
    from elsewhere (another root, a JSON or XML file)."""
    return (os.environ if topology.is_this_system else {}) if env is None else env


def visible_devices(topology: Topology, kind: str | None = None,
                    env: Mapping[str, str] | None = None) -> list[Device]:
    """The devices local ranks 0, 1, ... get, in order (`env`: see `job_env`)."""
    env = job_env(topology, env)
    kind = kind or default_kind(topology)
    devices = [d for d in topology.devices if d.kind == kind]
    for vendor, reader in (("nvidia", _cuda), ("amd", _rocm), ("intel", _level_zero)):
        ours = [d for d in devices if d.vendor == vendor and kind == "gpu"]
        if ours:
            return reader(ours, env, [d for d in topology.devices if d.kind == "mig"])
    if kind == "npu":
        return _listed_ids(devices, env, "ASCEND_RT_VISIBLE_DEVICES", "NPU", "an")
    habana = [d for d in devices if d.vendor == "habana"]
    if kind == "accel" and habana:
        return _listed_ids(habana, env, "HABANA_VISIBLE_MODULES", "Gaudi module", "a")
    return sorted(devices, key=lambda d: d.index)


def visible_device_ids(topology: Topology, env: Mapping[str, str] | None = None) -> tuple[int, ...] | None:
    """Physical ids of the devices local ranks 0, 1, ... get, or None when no visible-device
    variable is set (then a job uses every device, by physical id)."""
    env = job_env(topology, env)
    if not any(name in env for name in VARIABLES):
        return None
    return tuple(d.index for d in visible_devices(topology, env=env))


def hidden_warning(topology: Topology, env: Mapping[str, str] | None = None) -> str | None:
    """The warning line when the variables hide every accelerator (`CUDA_VISIBLE_DEVICES=""` or `-1`,
    as CPU-side jobs on GPU hosts set on purpose) and the job is planned CPU-only; else None."""
    env = job_env(topology, env)
    kind = default_kind(topology)
    if kind is None or not any(name in env for name in VARIABLES) or visible_devices(topology, env=env):
        return None
    return f"{describe_env(env).strip(' ()')} hides every {kind.upper()} of this machine: planning CPU-only"


def describe_env(env: Mapping[str, str]) -> str:
    """` (CUDA_VISIBLE_DEVICES='2,3')`: the variables that are set, for messages; "" when none is."""
    shown = [f"{n}={env[n]!r}" for n in VARIABLES if n in env and n != "CUDA_DEVICE_ORDER"]
    return f" ({', '.join(shown)})" if shown else ""


def _cuda(gpus: list[Device], env: Mapping[str, str], migs: list[Device]) -> list[Device]:
    order = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip() or "FASTEST_FIRST"
    if order not in ("FASTEST_FIRST", "PCI_BUS_ID"):
        raise UsageError(f"CUDA_DEVICE_ORDER={order!r} is not a CUDA order: use PCI_BUS_ID or FASTEST_FIRST")
    base = _bus_order(gpus)
    if order == "FASTEST_FIRST" and len({d.name for d in base if d.name}) > 1:
        # CUDA ranks mixed models by its own speed estimate, which we cannot reproduce.
        warnings.warn("GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA may number them "
                      "differently from PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID", stacklevel=3)
    spec = env.get("CUDA_VISIBLE_DEVICES")
    return base if spec is None else _chosen(base, spec, "CUDA_VISIBLE_DEVICES", migs)


def _rocm(gpus: list[Device], env: Mapping[str, str], _migs) -> list[Device]:
    devices = sorted(gpus, key=lambda d: d.index)  # ROCm's order: KFD's nodes (bus order without them)
    hip = "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in env else "CUDA_VISIBLE_DEVICES"
    for var in ("ROCR_VISIBLE_DEVICES", hip):  # ROCR selects, then HIP numbers what is left
        if env.get(var) is not None:
            devices = _chosen(devices, env[var], var)
    return devices


def _chosen(devices: list[Device], spec: str, var: str, migs: list[Device] | None = None) -> list[Device]:
    """The devices a CUDA/HIP/ROCR list names by index or `GPU-` UUID prefix, and for CUDA (`migs`
    given) by `MIG-` UUID. As CUDA, "" hides every GPU, and -1 or a repeated GPU ends the list."""
    chosen: list[Device] = []
    if spec.strip() == "":
        return chosen
    for token in (t.strip() for t in spec.split(",")):
        if _INDEX.match(token):
            n = _index(token, devices, var)
            device = devices[n] if n >= 0 else None
        elif token.startswith("GPU-"):
            device = _by_uuid_prefix(devices, token, var, "GPU")
        elif token.startswith("MIG-") and migs is not None:
            chosen.append(_mig_parent(devices, migs, token))  # several MIG instances of one GPU are distinct
            continue
        else:
            uuids = "GPU-" if migs is None else "GPU-/MIG-"
            raise UsageError(f"{var} entry {token!r} is neither a GPU index nor a {uuids} UUID "
                             f"(e.g. {var}=0,1 or GPU-<uuid>)")
        if device is None or device in chosen:
            break
        chosen.append(device)
    return chosen


def _index(token: str, devices: list[Device], var: str) -> int:
    """The index an `_INDEX` token names, negative for CUDA's "no more devices" (`-1`); UsageError
    when no device has it (int() reads at most 9 digits here: it refuses more than 4300)."""
    n = int(token) if len(token.lstrip("+-")) <= 9 else (-1 if token.startswith("-") else 1 << 40)
    if n >= len(devices):
        kind = devices[0].kind.upper() if devices else "device"
        have = f"0-{len(devices) - 1}" if len(devices) > 1 else ("0" if devices else "none")
        raise UsageError(f"{var} names {kind} {excerpt(token)}, which this machine lacks (its {kind}s are {have}); "
                         f"list existing indices, or set {var}= (empty) to hide every {kind}")
    return n


def _bus_order(devices: list[Device]) -> list[Device]:
    return sorted(devices, key=lambda d: (bus_key(d.busid) if d.busid else (1 << 33, 0, 0, 0), d.index))


def _by_uuid_prefix(devices: list[Device], prefix: str, var: str, what: str) -> Device:
    known = [d for d in devices if d.uuid]
    if not known:
        raise UsageError(f"{var} names {prefix!r} but the topology has no {what} UUIDs (they come from NVML: "
                         "install 'topo-affinity[nvidia]' and the NVIDIA driver, or use indices)")
    hits = [d for d in known if d.uuid.startswith(prefix)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise UsageError(f"{var}: no {what} UUID starts with {prefix!r} (known: {', '.join(d.uuid for d in known)})")
    raise UsageError(f"{var}: {prefix!r} matches {len(hits)} {what}s ({', '.join(d.uuid for d in hits)}); "
                     "give more of the UUID")


def _mig_parent(gpus: list[Device], migs: list[Device], token: str) -> Device:
    # Old drivers name an instance MIG-GPU-<gpu uuid>/<gi>/<ci>; its GPU is in the name.
    m = re.match(r"\AMIG-(GPU-[0-9a-fA-F-]+)/\d+/\d+\Z", token)
    if m:
        return _by_uuid_prefix(gpus, m.group(1), "CUDA_VISIBLE_DEVICES", "GPU")
    if not migs and any(g.uuid for g in gpus):
        raise UsageError(f"CUDA_VISIBLE_DEVICES names MIG instance {token!r} but no GPU has MIG mode enabled")
    return _parent(gpus, _by_uuid_prefix(migs, token, "CUDA_VISIBLE_DEVICES", "MIG instance"), "CUDA_VISIBLE_DEVICES: ")


def _parent(gpus: list[Device], mig: Device, where: str = "") -> Device:
    for gpu in gpus:
        if gpu.busid == mig.busid and gpu.index == mig.index:
            return gpu
    raise UsageError(f"{where}MIG instance {mig.uuid} belongs to no listed GPU")


_ZE_ENTRY = re.compile(r"\A([0-9]{1,9})(?:\.([0-9]{1,9}))?\Z")


def _level_zero(gpus: list[Device], env: Mapping[str, str], _migs) -> list[Device]:
    devices = _bus_order(gpus)
    spec = env.get("ZE_AFFINITY_MASK")
    if spec is None or not spec.strip():
        return devices  # unset or empty: every device, as Level Zero
    chosen: list[Device] = []
    for token in (t.strip() for t in spec.split(",")):
        m = _ZE_ENTRY.match(token)
        if not m:
            raise UsageError(f"ZE_AFFINITY_MASK entry {excerpt(token)!r} is neither a device index nor "
                             "device.subdevice (e.g. ZE_AFFINITY_MASK=0,1 or 0.0,0.1)")
        chosen.append(devices[_index(m.group(1), devices, "ZE_AFFINITY_MASK")])
    return chosen


def _listed_ids(devices: list[Device], env: Mapping[str, str], var: str, what: str, a: str) -> list[Device]:
    """The devices whose ids `var` lists, by id; all where it is unset or empty (msrun's and Habana's rule)."""
    by_id = {d.index: d for d in devices}
    spec = (env.get(var) or "").strip()
    if not spec:
        return [by_id[i] for i in sorted(by_id)]
    ids = [ascii_number(t.strip()) for t in spec.split(",")]
    if None in ids:
        token = spec.split(",")[ids.index(None)].strip()
        raise UsageError(f"{var} entry {token!r} is not {a} {what} id (e.g. 0,1,2,3)")
    if len(set(ids)) != len(ids):
        raise UsageError(f"{var}={spec} names {a} {what} twice")
    missing = [i for i in ids if i not in by_id]
    if missing:
        have = ",".join(str(i) for i in sorted(by_id)) or "none"
        raise UsageError(f"{var}={spec} names {what} {missing[0]}, but this machine's {what}s are {have}")
    return [by_id[i] for i in sorted(ids)]


# torch.cuda.get_device_properties(i).uuid prints the UUID without its GPU-/MIG- prefix
_BARE_UUID = re.compile(r"\A[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
DEVICE_FORMS = "a local index, a GPU-/MIG- UUID (nvidia-smi -L), a bare UUID, or a PCI bus id such as 0000:3b:00.0"


def normal_bus_id(text: str) -> str | None:
    """`text` as sysfs writes a PCI bus id ("0000:3b:00.0"), or None when it is not one or its domain is past 0xffff."""
    return pci_bus_id(text, max_domain=0xFFFF)


def find_device(topology: Topology, name) -> tuple[Device, Device | None]:
    """The accelerator `name` names, whatever the visible-device variables say, and the MIG instance
    when it names one: a `GPU-`/`MIG-` UUID or unique prefix, a bare UUID (torch's `get_device_properties(i).uuid`,
    text or object), or a PCI bus id in any form `pci_bus_id` reads. UsageError naming the text and the forms."""
    text = str(name).strip()
    accelerators = [d for d in topology.devices if d.kind in ACCELERATOR_KINDS]
    gpus = [d for d in accelerators if d.kind == "gpu"]
    migs = [d for d in topology.devices if d.kind == "mig"]
    what = f"device {text[:80]!r}"
    busid = normal_bus_id(text)
    if busid is not None:
        hits = [d for d in accelerators if d.busid and normal_bus_id(d.busid) == busid]
        if not hits:
            have = ", ".join(d.busid for d in accelerators if d.busid) or "none"
            raise UsageError(f"{what}: no accelerator at PCI bus id {busid} (this machine's: {have}); "
                             f"name the device as {DEVICE_FORMS}")
        return hits[0], None
    if _BARE_UUID.match(text):
        low = text.lower()
        for device in gpus + migs:
            if device.uuid and device.uuid.lower() in (f"gpu-{low}", f"mig-{low}"):
                return (_parent(gpus, device), device) if device.kind == "mig" else (device, None)
        if not any(d.uuid for d in gpus):
            raise UsageError(f"{what}: this machine's GPUs report no UUIDs (they come from NVML: install "
                             "nvidia-ml-py and the NVIDIA driver), so name the device by PCI bus id or local index")
        raise UsageError(f"{what}: no GPU or MIG instance has this UUID (known: "
                         f"{', '.join(d.uuid for d in gpus + migs if d.uuid)}); name the device as {DEVICE_FORMS}")
    if text[:4].upper() == "GPU-":
        return _by_uuid_prefix(gpus, "GPU-" + text[4:], what, "GPU"), None
    if text[:4].upper() == "MIG-":
        token = "MIG-" + text[4:]
        if re.match(r"\AMIG-GPU-", token):
            return _mig_parent(gpus, migs, token), None
        mig = _by_uuid_prefix(migs, token, what, "MIG instance") if migs else None
        if mig is None:
            raise UsageError(f"{what} names a MIG instance but no GPU has MIG mode enabled")
        return _parent(gpus, mig), mig
    raise UsageError(f"{what} is not a device name: give {DEVICE_FORMS}")

