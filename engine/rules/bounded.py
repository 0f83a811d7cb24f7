"""A bounded cache: the one shape of every process-wide or per-registry cache (oldest entry out when full)."""

from __future__ import annotations

__all__ = ["BoundedCache"]


class BoundedCache:
    """A bounded mapping: the oldest entry goes when it is full (resettable with ``clear``)."""

    __slots__ = ("_data", "_size", "get")

    def __init__(self, size: int):
        self._data: dict = {}
        self._size = size
        #: the entry of a key, or None: the dict's own get, called without a Python frame of the cache's
        self.get = self._data.get

    def put(self, key, value) -> None:
        if len(self._data) >= self._size:
            del self._data[next(iter(self._data))]
        self._data[key] = value

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
