"""A real NCCL job: `nccl_allreduce.py OUT_DIR`. Rank r puts (r + 1) on cuda:LOCAL_RANK, all-reduces
with NCCL and writes the sum, its device and its CPU affinity to OUT_DIR/rank<r>.json."""
import json
import os
import sys

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
rank = dist.get_rank()
tensor = torch.full((1024,), float(rank + 1), device="cuda")
dist.all_reduce(tensor)
torch.cuda.synchronize()
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as fh:
    json.dump({"rank": rank, "world_size": dist.get_world_size(), "sum": tensor[0].item(),
               "device": torch.cuda.current_device(), "affinity": sorted(os.sched_getaffinity(0))}, fh)
dist.destroy_process_group()
