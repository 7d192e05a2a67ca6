"""A PyTorch worker whose main() is wrapped in torch's @record: rank 1 raises, so its error file
(TORCHELASTIC_ERROR_FILE) holds the exception and traceback the launcher reports."""
import os

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("boom on rank 1")


main()
