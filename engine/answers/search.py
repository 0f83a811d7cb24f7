"""Searches over a whole number (a batch size, a sequence length, a GPU count) for the answers: each assumes
the predicate changes once over the range (monotone) and bisects to the boundary, so every answer costs a
logarithmic number of estimates."""

from __future__ import annotations

from typing import Callable

__all__ = ["largest", "fewest", "boundary", "largest_below", "fewest_above"]


def largest(pred: Callable[[int], bool], hi: int) -> int | None:
    """The largest x in [1, hi] with pred(x), assuming pred holds up to some point; checked at the answer."""
    if not pred(1):
        return None
    lo, step = 1, 1  # lo fits; grow exponentially, then bisect between lo and the first failure
    while True:
        nxt = min(lo + step, hi)
        if nxt == lo:
            return lo
        if not pred(nxt):
            bad = nxt
            break
        lo, step = nxt, step * 2
    return boundary(pred, lo, bad)


def fewest(pred: Callable[[int], bool], hi: int) -> int | None:
    """The smallest k in [1, hi] with pred(k), assuming pred holds from some point on."""
    if not pred(hi):
        return None
    lo, good = 0, 1  # lo fails (0 stands for "none checked"); find a good k by doubling, then bisect
    while not pred(good):
        lo, good = good, min(good * 2, hi)
    return boundary(pred, good, lo)


def boundary(pred: Callable[[int], bool], yes: int, no: int) -> int:
    """Bisect between ``yes`` (pred holds) and ``no`` (it does not), either side of the other: the x next
    to the boundary on the side where pred holds."""
    while abs(yes - no) > 1:
        mid = (yes + no) // 2
        if pred(mid):
            yes = mid
        else:
            no = mid
    return yes


def largest_below(pred: Callable[[int], bool], hi: int) -> int | None:
    """The largest x in [1, hi] with pred(x), bisecting (pred assumed to hold up to some point)."""
    if hi < 1 or not pred(1):
        return None
    if pred(hi):
        return hi
    return boundary(pred, 1, hi)


def fewest_above(pred: Callable[[int], bool], low: int, hi: int) -> int | None:
    """The smallest k in (low, hi] with pred(k) (pred assumed to hold from some point on)."""
    k = low + 1
    no = low
    while k <= hi and not pred(k):
        no, k = k, min(hi, k * 2) if k < hi else hi + 1
    if k > hi:
        return None
    return boundary(pred, k, no)
