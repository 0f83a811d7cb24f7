"""The caching allocator model (vramwise.profiles.caching_allocator) against traces worked out by hand from the rules
of c10/cuda/CUDACachingAllocator.cpp: round_size (512-byte multiples), get_pool (small up to 1 MiB),
get_allocation_size (2 MiB small segments, 20 MiB for 1-10 MiB, else rounded up to 2 MiB), best fit in the
pool, should_split (rest >= 512 bytes small, > 1 MiB large), free_block merging free neighbours."""

from __future__ import annotations

import pytest

from vramwise.profiles.caching_allocator import CachingAllocatorModel, allocation_size, round_size

KiB, MiB = 1024, 1024 * 1024


def test_rounding_and_segment_sizes():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert allocation_size(512) == 2 * MiB and allocation_size(1 * MiB) == 2 * MiB  # small pool: 2 MiB segments
    assert allocation_size(1 * MiB + 512) == 20 * MiB and allocation_size(10 * MiB - 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB and allocation_size(10 * MiB + 512) == 12 * MiB


def test_small_requests_share_a_two_mib_segment():
    m = CachingAllocatorModel()
    a = m.malloc(100)  # 512 bytes, opens a 2 MiB segment, split (rest 2 MiB - 512 >= 512)
    b = m.malloc(1000)  # 1,024 bytes from the rest
    assert (m.allocated, m.reserved, m.segments) == (512 + 1024, 2 * MiB, 1)
    m.free(a)
    m.free(b)  # both merge back into one free 2 MiB block
    c = m.malloc(2 * MiB - 4 * KiB)  # a large request (over 1 MiB): the small pool's block cannot serve it
    assert (m.reserved, m.segments) == (2 * MiB + 20 * MiB, 2)
    m.free(c)


def test_a_mid_size_request_opens_twenty_mib_and_later_ones_fill_it():
    m = CachingAllocatorModel()
    a = m.malloc(3 * MiB)  # 20 MiB segment: 3 MiB taken, 17 MiB cached
    b = m.malloc(5 * MiB)  # best fit: the 17 MiB rest; 12 MiB left
    assert (m.allocated, m.reserved) == (8 * MiB, 20 * MiB)
    m.free(a)  # a free 3 MiB block at the segment's start (its neighbour b is live: no merge)
    c = m.malloc(4 * MiB)  # the 3 MiB block is too small; the 12 MiB one serves (8 MiB left)
    assert (m.allocated, m.reserved, m.segments) == (9 * MiB, 20 * MiB, 1)
    d = m.malloc(3 * MiB)  # best fit: the 3 MiB block at the start, not the 8 MiB one
    m.free(b)
    m.free(c)
    m.free(d)
    assert m.max_reserved == 20 * MiB and m.max_allocated == 12 * MiB  # 5 + 4 + 3 MiB live at once


def test_a_freed_large_block_split_for_a_smaller_request_fragments():
    m = CachingAllocatorModel()
    a = m.malloc(100 * MiB)  # a 100 MiB segment
    m.free(a)  # cached
    b = m.malloc(50 * MiB)  # split: 50 MiB taken, 50 MiB cached (rest > 1 MiB)
    c = m.malloc(60 * MiB)  # no cached block of 60 MiB: a new 60 MiB segment
    assert (m.allocated, m.reserved, m.max_reserved) == (110 * MiB, 160 * MiB, 160 * MiB)
    m.free(b)  # merges with the cached 50 MiB: one free 100 MiB block again
    d = m.malloc(100 * MiB)  # served by it: nothing new reserved
    assert (m.reserved, m.segments) == (160 * MiB, 2)
    m.free(c)
    m.free(d)
    assert m.allocated == 0 and m.reserved == 160 * MiB  # segments are never released


def test_a_large_rest_of_one_mib_or_less_stays_with_the_block():
    m = CachingAllocatorModel()
    a = m.malloc(10 * MiB + 512)  # a 12 MiB segment; the rest, 2 MiB - 512, is over 1 MiB: split
    assert m.allocated == 10 * MiB + 512
    m.free(a)
    b = m.malloc(11 * MiB + 512)  # from the merged 12 MiB block; the rest, 1 MiB - 512, is not split off
    assert (m.allocated, m.reserved) == (12 * MiB, 12 * MiB)
    m.free(b)


def test_replay_and_zero_byte_requests():
    events = [("alloc", "x", 0), ("alloc", "y", 30 * MiB), ("free", "x"), ("alloc", "z", 30 * MiB),
              ("free", "y"), ("free", "z")]
    m = CachingAllocatorModel().replay(events)
    # x takes no block; y and z each a 30 MiB segment (y is live when z comes)
    assert (m.max_allocated, m.max_reserved, m.segments, m.allocated) == (60 * MiB, 60 * MiB, 2, 0)
    with pytest.raises(ValueError, match="unknown event"):
        CachingAllocatorModel().replay([("resize", "x", 1)])
