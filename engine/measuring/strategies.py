"""The multi-GPU strategies ``measure`` can run, and how many processes: stated once here, read by the
distributed runner and the command line's choices alike. Importing this module loads no torch
and reads no file."""

from __future__ import annotations

#: The strategies measure can run: names of formulas/strategies/strategies.yaml (a test holds them to it),
#: each with a wrapper in the distributed runner.
STRATEGIES = ("ddp", "fsdp", "fsdp_shard_grad_op", "zero1", "zero2", "zero3")
#: Process counts measure can start (each is a CPU process of this machine).
WORLD_SIZES = range(2, 9)
