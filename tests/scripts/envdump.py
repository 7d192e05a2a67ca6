"""Write this process's environment, affinity, memory policy and argv to OUT_DIR/<role>_<rank>.json.

Used by the launcher tests as the job script: `envdump.py OUT_DIR [ARGS...]`. With `--linger` among
the ARGS it stays 1 s after writing, so the launcher reads its binding from a live process.
"""
import json
import os
import sys

out_dir = sys.argv[1]
role = os.environ.get("MS_ROLE", "noms")
name = "scheduler" if role == "MS_SCHED" else f"worker_{os.environ.get('RANK_ID', os.environ.get('LOCAL_RANK', 'x'))}"
with open("/proc/self/numa_maps") as fh:
    policy = fh.readline().split()[1]
record = {
    "env": dict(os.environ),
    "argv": sys.argv[1:],
    "orig_argv": getattr(sys, "orig_argv", None),
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "sid": os.getsid(0),
    "affinity": sorted(os.sched_getaffinity(0)),
    "memory_policy": policy,
    "stdin_isatty": os.isatty(0),
}
with open(os.path.join(out_dir, name + ".json"), "w") as fh:
    json.dump(record, fh)
print(f"[envdump] {name} pid={os.getpid()} affinity={record['affinity']}")
if "--linger" in sys.argv[2:]:
    import time

    time.sleep(1)
