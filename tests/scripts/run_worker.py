"""A worker for the topo run tests: `run_worker.py OUT_DIR ACTION`.

Every worker writes OUT_DIR/rank<RANK>_attempt<TORCHELASTIC_RESTART_COUNT>.json (its environment,
pid, affinity), prints one line to stdout and one to stderr, then:
- ok: exits 0;
- fail-once: rank 1 exits 3 on the first attempt, every worker exits 0 after a restart;
- fail: rank 1 exits 3 on every attempt;
- sleep: sleeps until it is killed.
"""
import json
import os
import sys
import time

out_dir, action = sys.argv[1], sys.argv[2]
rank = os.environ["RANK"]
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(os.path.join(out_dir, f"rank{rank}_attempt{attempt}.json"), "w") as fh:
    json.dump({"env": dict(os.environ), "pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)),
               "argv": sys.argv[1:]}, fh)
print(f"out of rank {rank}", flush=True)
print(f"err of rank {rank}", file=sys.stderr, flush=True)
if action == "fail-once" and rank == "1" and attempt == "0":
    sys.exit(3)
if action == "fail" and rank == "1":
    sys.exit(3)
if action == "sleep":
    while True:
        time.sleep(1)
