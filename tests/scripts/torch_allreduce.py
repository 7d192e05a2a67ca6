"""A real PyTorch job: gloo all-reduce over env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

`torch_allreduce.py OUT_DIR`: rank r contributes [1, 2, 3, 4] * (r + 1) and writes the reduced
tensor, its CPU affinity and thread count to OUT_DIR/rank_<r>.json.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
tensor = torch.tensor([1.0, 2.0, 3.0, 4.0]) * (rank + 1)
dist.all_reduce(tensor)
with open(os.path.join(sys.argv[1], f"rank_{rank}.json"), "w") as fh:
    json.dump({"rank": rank, "world_size": dist.get_world_size(), "result": tensor.tolist(),
               "affinity": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads()}, fh)
print(f"rank {rank}: {tensor.tolist()}")
dist.destroy_process_group()
