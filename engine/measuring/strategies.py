"""The multi-GPU strategies ``measure`` can run, and how many processes: stated once here, read by the
distributed runner and the command line's choices alike. Importing this module loads no torch."""

from __future__ import annotations

from vramwise.core.settings import STRATEGIES as ALL_STRATEGIES

#: The strategies measure can run (each is one of core's strategies; the runner holds a wrapper per name).
STRATEGIES = tuple(s for s in ALL_STRATEGIES if s in ("ddp", "fsdp", "fsdp_shard_grad_op"))
#: Process counts measure can start (each is a CPU process of this machine).
WORLD_SIZES = range(2, 9)
