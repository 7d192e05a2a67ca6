"""A worker for the topo run tests: `run_worker.py OUT_DIR ACTION`.

Every worker writes OUT_DIR/rank<RANK>_attempt<TORCHELASTIC_RESTART_COUNT>.json (its environment,
pid, affinity), prints one line to stdout and one to stderr, then:
- ok: exits 0;
- fail-once: rank 1 exits 3 on the first attempt (once every rank wrote its record), every worker exits 0 after a restart;
- fail: rank 1 exits 3 on every attempt;
- sleep: sleeps until it is killed;
- daemon: leaves a daemonised grandchild (double fork, own session) sleeping, writes its pid to
  OUT_DIR/daemon<RANK>.pid, and exits 0;
- daemon+sleep: leaves that daemon, then sleeps until it is killed;
- fail-slow-stop: rank 1 exits 3 (once every rank wrote its record); the others, told to stop,
  write OUT_DIR/stopping<RANK>, take 2 s to stop, and exit 0;
- raise: rank 1 raises ValueError (a traceback on stderr); the others sleep until killed.
"""
import signal
import json
import os
import sys
import time

out_dir, action = sys.argv[1], sys.argv[2]
rank = os.environ["RANK"]
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
# written whole or not at all (a worker stopped with its group never leaves half a record)
record = os.path.join(out_dir, f"rank{rank}_attempt{attempt}.json")
with open(record + ".part", "w") as fh:
    json.dump({"env": dict(os.environ), "pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)),
               "argv": sys.argv[1:]}, fh)
os.replace(record + ".part", record)
print(f"out of rank {rank}", flush=True)
print(f"err of rank {rank}", file=sys.stderr, flush=True)
if action == "fail-slow-stop" and rank != "1":
    def slow_stop(signum, frame):
        open(os.path.join(out_dir, f"stopping{rank}"), "w").close()
        time.sleep(2)
        sys.exit(0)

    signal.signal(signal.SIGTERM, slow_stop)
    signal.signal(signal.SIGINT, slow_stop)
    while True:
        time.sleep(1)
if action == "raise" and rank == "1":
    raise ValueError("boom from rank 1")
if action == "raise":
    while True:
        time.sleep(1)
if action in ("fail", "fail-once", "fail-slow-stop") and rank == "1" and (action != "fail-once" or attempt == "0"):
    # the failure stops the group: first let every rank of this attempt write its record
    wanted = [os.path.join(out_dir, f"rank{r}_attempt{attempt}.json") for r in range(int(os.environ["WORLD_SIZE"]))]
    deadline = time.monotonic() + 10
    while not all(map(os.path.exists, wanted)) and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(3)
if action in ("daemon", "daemon+sleep"):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(os.path.join(out_dir, f"daemon{rank}.pid"), "w") as fh:
                fh.write(str(os.getpid()))
            time.sleep(600)
        os._exit(0)
    os.wait()
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(out_dir, f"daemon{rank}.pid")) and time.monotonic() < deadline:
        time.sleep(0.01)
if action in ("sleep", "daemon+sleep"):
    while True:
        time.sleep(1)
