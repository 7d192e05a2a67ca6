"""A real MindSpore data-parallel step on CPU: 2 workers all-reduce a 4-element tensor.

`mindspore_allreduce.py OUT_DIR`: rank r contributes [1, 2, 3, 4] * (r + 1) and writes the reduced
tensor, the interpreter that ran it and its CPU affinity to OUT_DIR/rank_<r>.json. Under a
launcher the scheduler process runs this script too; `init()` does not return there.
"""
import json
import os
import sys

import mindspore as ms
import numpy as np
from mindspore import ops
from mindspore.communication import get_group_size, get_rank, init

ms.set_device("CPU")
init()
rank = get_rank()
x = ms.Tensor(np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32) * (rank + 1))
result = ops.AllReduce()(x).asnumpy().tolist()
with open(os.path.join(sys.argv[1], f"rank_{rank}.json"), "w") as fh:
    json.dump({"rank": rank, "world_size": get_group_size(), "result": result, "executable": sys.executable,
               "affinity": sorted(os.sched_getaffinity(0))}, fh)
print(f"rank {rank}: {result}")
