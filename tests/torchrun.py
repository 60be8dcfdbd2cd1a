"""torchrun's failure summary as torch/distributed/elastic/multiprocessing/errors prints it
(its ChildFailedError's templates), for tests that build merged job logs."""

from __future__ import annotations

NO_TRACEBACK = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def child_failed(
    host: str,
    rank: int,
    local_rank: int,
    *,
    exitcode: int = 1,
    traceback: str = NO_TRACEBACK,
    time: str = "2024-11-21_10:00:05",
) -> list[str]:
    """What the torchrun on `host` prints when its worker `rank` failed first."""
    return [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {time}",
        f"  host      : {host}",
        f"  rank      : {rank} (local_rank: {local_rank})",
        f"  exitcode  : {exitcode} (pid: 3456)",
        "  error_file: <N/A>",
        f"  traceback : {traceback}",
        "============================================================",
    ]
