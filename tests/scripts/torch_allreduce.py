"""A real PyTorch job: gloo all-reduce over env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

`torch_allreduce.py OUT_DIR [ACTION]`: rank r contributes [1, 2, 3, 4] * (r + 1) and writes the
reduced tensor, its local rank, attempt, CPU affinity and thread count to OUT_DIR/rank_<r>.json.
ACTION:
- kill-once: on the first attempt (TORCHELASTIC_RESTART_COUNT 0) the last rank is killed (SIGKILL)
  and the others wait until the agent stops them, all before joining the group (torch's agent keeps
  its store across restarts, where a first attempt's keys would mislead the second's gloo).
Without TORCHELASTIC_RESTART_COUNT (mpirun), RANK and WORLD_SIZE fall back to Open MPI's.
"""
import json
import os
import signal
import sys
import time

for ours, theirs in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")):
    if ours not in os.environ and theirs in os.environ:
        os.environ[ours] = os.environ[theirs]
action = sys.argv[2] if len(sys.argv) > 2 else ""
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if action == "kill-once" and attempt == 0:
    if int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(300)  # the agent stops this worker once the last rank is gone
    sys.exit(3)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
tensor = torch.tensor([1.0, 2.0, 3.0, 4.0]) * (rank + 1)
dist.all_reduce(tensor)
with open(os.path.join(sys.argv[1], f"rank_{rank}.json"), "w") as fh:
    json.dump({"rank": rank, "world_size": dist.get_world_size(), "result": tensor.tolist(), "attempt": attempt,
               "local_rank": int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "-1"))),
               "affinity": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads()}, fh)
print(f"rank {rank}: {tensor.tolist()}")
dist.destroy_process_group()
