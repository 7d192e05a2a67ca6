"""A worker run inside the VM: `vm_worker.py OUT_DIR [MIB]`.

Touches MIB MiB (default 32) of fresh anonymous memory, then writes OUT_DIR/rank<R>.json with what
the kernel says about this process: Cpus_allowed_list and Mems_allowed_list from /proc/self/status,
the memory policy and per-node page counts of that mapping from /proc/self/numa_maps, and the
environment variables a launcher sets. R is RANK, else RANK_ID, else "solo".
"""

import ctypes
import json
import mmap
import os
import sys

out_dir = sys.argv[1]
size = int(sys.argv[2] if len(sys.argv) > 2 else 32) << 20
buf = mmap.mmap(-1, size)
for off in range(0, size, mmap.PAGESIZE):
    buf[off] = 1
start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
status = {}
with open("/proc/self/status") as fh:
    for line in fh:
        key, _, value = line.partition(":")
        status[key] = value.strip()
mapping = None
with open("/proc/self/numa_maps") as fh:
    for line in fh:
        fields = line.split()
        if len(fields) > 2 and fields[2].startswith("(many)"):  # MPOL_PREFERRED_MANY: "prefer (many):0-1"
            fields[1:3] = [fields[1] + " " + fields[2]]
        if int(fields[0], 16) == start:
            mapping = {"policy": fields[1],
                       "pages": {f[1:f.index("=")]: int(f[f.index("=") + 1:]) for f in fields[2:]
                                 if f.startswith("N") and "=" in f}}
rank = os.environ.get("RANK", os.environ.get("RANK_ID", "solo"))
record = {"rank": rank, "pid": os.getpid(), "cpus": status["Cpus_allowed_list"],
          "mems_allowed": status["Mems_allowed_list"], "mapping": mapping,
          "env": {k: os.environ[k] for k in ("RANK", "RANK_ID", "LOCAL_RANK", "OMP_NUM_THREADS", "DEVICE_ID")
                  if k in os.environ}}
with open(os.path.join(out_dir, f"rank{rank}.json.part"), "w") as fh:
    json.dump(record, fh)
os.replace(os.path.join(out_dir, f"rank{rank}.json.part"), os.path.join(out_dir, f"rank{rank}.json"))
