"""The model of torch's CUDA caching allocator, under the name the measuring tools use: it lives in
:mod:`vramwise.profiles.caching_allocator`, where an estimate's replays (:mod:`vramwise.profiles.nf4_setup`) reach it."""

from vramwise.profiles.caching_allocator import (  # noqa: F401 - the names this module has always given
    K_LARGE_BUFFER, K_MIN_BLOCK, K_MIN_LARGE_ALLOC, K_ROUND_LARGE, K_SMALL_BUFFER, K_SMALL_SIZE,
    CachingAllocatorModel, allocation_size, round_size,
)

__all__ = ["K_MIN_BLOCK", "K_SMALL_SIZE", "K_SMALL_BUFFER", "K_MIN_LARGE_ALLOC", "K_ROUND_LARGE", "K_LARGE_BUFFER",
           "round_size", "allocation_size", "CachingAllocatorModel"]
