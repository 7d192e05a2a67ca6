"""A job script whose behaviour each test picks per rank: `job.py OUT_DIR ACTION[@RANK] ...`.

Actions (all ranks, or only RANK with @RANK):
  exit=N           exit with code N (after the other actions)
  sleep=S          sleep S seconds
  raise            raise RuntimeError
  ignore-term      ignore SIGTERM (so only SIGKILL stops it)
  ignore-int       ignore SIGINT
  affinity=CPUS    move itself to CPUs CPUS (a comma list), as a worker pinning its own threads does
  grandchild       start `sleep 300` in our process group, pid written to OUT_DIR/grandchild_<rank>
  daemon           start `sleep 300` in a new session (escapes killpg), pid to OUT_DIR/daemon_<rank>
  readline         read one line from stdin and print it back as "got: <line>"
  prompt           write "(Pdb) " without a newline, then sleep 1
  ready            create OUT_DIR/ready_<rank> (after the other setup actions)
  print=TEXT       print TEXT
  kill=N           send ourselves signal N
  waitfor=NAME     wait until OUT_DIR/NAME exists (e.g. another rank's ready_0)
"""
import os
import signal
import subprocess
import sys
import time

out_dir = sys.argv[1]
rank = os.environ.get("RANK", os.environ.get("RANK_ID", "sched" if os.environ.get("MS_ROLE") == "MS_SCHED" else "x"))
if os.environ.get("MS_ROLE") == "MS_SCHED":
    rank = "sched"


def mine(spec):
    action, _, who = spec.partition("@")
    return action, (who == "" or who == rank)


exit_code = 0
for spec in sys.argv[2:]:
    action, applies = mine(spec)
    if not applies:
        continue
    name, _, value = action.partition("=")
    if name == "exit":
        exit_code = int(value)
    elif name == "sleep":
        time.sleep(float(value))
    elif name == "raise":
        raise RuntimeError(f"rank {rank} fails on purpose")
    elif name == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif name == "ignore-int":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    elif name == "affinity":
        os.sched_setaffinity(0, {int(c) for c in value.split(",")})
    elif name in ("grandchild", "daemon"):
        child = subprocess.Popen(["sleep", "300"], start_new_session=(name == "daemon"))
        with open(os.path.join(out_dir, f"{name}_{rank}"), "w") as fh:
            fh.write(str(child.pid))
    elif name == "readline":
        print("got: " + sys.stdin.readline().strip(), flush=True)
    elif name == "prompt":
        sys.stdout.write("(Pdb) ")
        sys.stdout.flush()
        time.sleep(1)
    elif name == "ready":
        open(os.path.join(out_dir, f"ready_{rank}"), "w").close()
    elif name == "print":
        print(value, flush=True)
    elif name == "waitfor":
        while not os.path.exists(os.path.join(out_dir, value)):
            time.sleep(0.01)
    elif name == "kill":
        os.kill(os.getpid(), int(value))
sys.exit(exit_code)
