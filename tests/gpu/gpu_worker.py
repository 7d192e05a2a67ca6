"""A worker for the GPU checks: `gpu_worker.py OUT_DIR` writes OUT_DIR/rank<LOCAL_RANK>.json with
its Cpus_allowed_list and Mems_allowed_list as /proc/self/status gives them (what the launcher's
binding left this process with)."""
import json
import os
import sys

status = {}
with open("/proc/self/status") as fh:
    for line in fh:
        key, _, value = line.partition(":")
        status[key] = value.strip()
rank = os.environ["LOCAL_RANK"]
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as fh:
    json.dump({"local_rank": int(rank), "cpus": status["Cpus_allowed_list"],
               "mems_allowed": status["Mems_allowed_list"]}, fh)
