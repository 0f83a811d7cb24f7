"""A model of torch's CUDA caching allocator, fed a sequence of allocations and frees.

It follows the native allocator of ``c10/cuda/CUDACachingAllocator.cpp`` in its default configuration
(``PYTORCH_CUDA_ALLOC_CONF`` unset: no ``max_split_size_mb``, no ``roundup_power2_divisions``, no
expandable segments) on one stream:

- every request is rounded up to a multiple of 512 bytes (``round_size``, ``kMinBlockSize``);
- requests of 1 MiB or less go to the small pool, larger ones to the large pool (``get_pool``,
  ``kSmallSize``);
- a request is served by the smallest cached free block of its pool that holds it, the lowest address
  among equals (``get_free_block``: ``pool.blocks.lower_bound`` over blocks ordered by size, then address);
- when none does, a new segment is reserved (``alloc_block``): 2 MiB for a small request, 20 MiB for one
  under 10 MiB, else the request rounded up to 2 MiB (``get_allocation_size``, ``kSmallBuffer``,
  ``kLargeBuffer``, ``kMinLargeAlloc``, ``kRoundLarge``);
- the block is split when the rest is at least 512 bytes (small pool) or more than 1 MiB (large pool),
  the rest staying cached in the pool (``should_split``, ``alloc_found_block``);
- a freed block merges with a free neighbour of its segment and goes back to its pool
  (``free_block``, ``try_merge_blocks``); segments are never released.

``allocated`` is what ``torch.cuda.memory_allocated`` reads (the rounded sizes of live blocks),
``reserved`` what ``torch.cuda.memory_reserved`` reads (the segments), each with its peak. Memory is
unbounded here: a real run near its GPU's limit frees cached segments and retries when a new one does not
fit (``release_cached_blocks``), which the model does not do, so its ``max_reserved`` is what the run
reserves when nothing presses it. Other streams (each has its own cached blocks), CUDA graphs' private
pools and expandable segments are not modelled.
"""

from __future__ import annotations

import bisect

__all__ = ["K_MIN_BLOCK", "K_SMALL_SIZE", "K_SMALL_BUFFER", "K_MIN_LARGE_ALLOC", "K_ROUND_LARGE", "K_LARGE_BUFFER",
           "round_size", "allocation_size", "CachingAllocatorModel"]

#: c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize, every size is rounded up to a multiple of it.
K_MIN_BLOCK = 512
#: kSmallSize: the largest request of the small pool (1 MiB).
K_SMALL_SIZE = 1_048_576
#: kSmallBuffer: the segment a small request opens (2 MiB).
K_SMALL_BUFFER = 2_097_152
#: kMinLargeAlloc: requests under it (and above 1 MiB) open a kLargeBuffer segment (10 MiB).
K_MIN_LARGE_ALLOC = 10_485_760
#: kRoundLarge: larger requests open a segment of their size rounded up to it (2 MiB).
K_ROUND_LARGE = 2_097_152
#: kLargeBuffer: the segment of a request between 1 and 10 MiB (20 MiB).
K_LARGE_BUFFER = 20_971_520


def round_size(nbytes: int) -> int:
    """The block size of a request (``round_size``): at least 512 bytes, a multiple of 512."""
    if nbytes < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return -(-nbytes // K_MIN_BLOCK) * K_MIN_BLOCK


def allocation_size(size: int) -> int:
    """The segment a (rounded) request opens when no cached block holds it (``get_allocation_size``)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


class _Block:
    __slots__ = ("size", "ptr", "small", "allocated", "prev", "next")

    def __init__(self, size: int, ptr: int, small: bool):
        self.size, self.ptr, self.small = size, ptr, small
        self.allocated = False
        self.prev: _Block | None = None
        self.next: _Block | None = None


class CachingAllocatorModel:
    """The caching allocator's blocks and segments under a sequence of :meth:`malloc` and :meth:`free`.

    ``malloc(nbytes)`` returns a handle (``None`` for 0 bytes, which torch serves without a block) that
    ``free`` takes back. The counters: ``allocated``, ``reserved``, ``max_allocated``, ``max_reserved``,
    ``segments``."""

    def __init__(self) -> None:
        # each pool: free blocks as (size, ptr, block), kept sorted: the allocator's std::set ordered by size
        # then address, whose lower_bound is the best fit
        self._pools: dict[bool, list] = {True: [], False: []}
        self._live: dict[int, _Block] = {}
        self._next_handle = 0
        self._next_ptr = 0  # segments at increasing addresses, never adjacent (a gap between any two)
        self.allocated = self.reserved = self.max_allocated = self.max_reserved = 0
        self.segments = 0

    def malloc(self, nbytes: int) -> int | None:
        """Serve a request of ``nbytes`` bytes; the handle to free it with."""
        if nbytes < 0:
            raise ValueError(f"a request of {nbytes} bytes")
        if nbytes == 0:
            return None
        size = round_size(nbytes)
        small = size <= K_SMALL_SIZE
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = pool.pop(i)[2]
        else:
            block = self._new_segment(allocation_size(size), small)
        rest = block.size - size
        if (rest >= K_MIN_BLOCK) if small else (rest > K_SMALL_SIZE):
            remaining = _Block(rest, block.ptr + size, small)
            remaining.prev, remaining.next = block, block.next
            if block.next is not None:
                block.next.prev = remaining
            block.next = remaining
            block.size = size
            bisect.insort(pool, (remaining.size, remaining.ptr, remaining))
        block.allocated = True
        self.allocated += block.size
        self.max_allocated = max(self.max_allocated, self.allocated)
        handle = self._next_handle
        self._next_handle += 1
        self._live[handle] = block
        return handle

    def free(self, handle: int | None) -> None:
        """Give back the block of ``handle`` (``None``, a 0-byte request, is nothing)."""
        if handle is None:
            return
        block = self._live.pop(handle)
        block.allocated = False
        self.allocated -= block.size
        pool = self._pools[block.small]
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                pool.remove((neighbour.size, neighbour.ptr, neighbour))
                if neighbour is block.prev:
                    block.ptr = neighbour.ptr
                    block.prev = neighbour.prev
                    if block.prev is not None:
                        block.prev.next = block
                else:
                    block.next = neighbour.next
                    if block.next is not None:
                        block.next.prev = block
                block.size += neighbour.size
        bisect.insort(pool, (block.size, block.ptr, block))

    def _new_segment(self, size: int, small: bool) -> _Block:
        block = _Block(size, self._next_ptr, small)
        self._next_ptr += size + K_ROUND_LARGE
        self.reserved += size
        self.max_reserved = max(self.max_reserved, self.reserved)
        self.segments += 1
        return block

    def replay(self, events) -> CachingAllocatorModel:
        """Run a trace: each event ``("alloc", key, nbytes)`` or ``("free", key)``, keys naming the tensors;
        returns the model."""
        handles: dict = {}
        for event in events:
            if event[0] == "alloc":
                handles[event[1]] = self.malloc(event[2])
            elif event[0] == "free":
                self.free(handles.pop(event[1]))
            else:
                raise ValueError(f"unknown event {event[0]!r}")
        return self
