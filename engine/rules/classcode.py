"""The generated methods of vramwise's data classes, compiled once and kept in the disk cache.

Creating a :func:`dataclasses.dataclass` generates the source of its ``__init__``, ``__repr__``, ``__eq__``,
``__hash__`` and (frozen) ``__setattr__`` / ``__delattr__`` and compiles each; for vramwise's 50-odd frozen
records, compiling is most of the time an ``import vramwise`` takes. While :func:`compiled_methods` is active,
:mod:`dataclasses` execs, in place of each generated source, the code compiled from that same source, taken from
a table kept in :mod:`vramwise.rules.diskcache` (kind ``dataclass-code``, keyed by Python's bytecode magic number
and this module's source) and compiled only when the table lacks it. The classes are the same either way: the
same source, compiled under the same file name (``<string>``, as :func:`exec` names it), run in the same
namespaces. With the cache off, or a :mod:`dataclasses` that does not generate through ``exec``, nothing changes.
"""

from __future__ import annotations

import _thread
import dataclasses
import hashlib
from contextlib import contextmanager
from functools import lru_cache
from types import CodeType
from typing import Iterator

from vramwise.rules import diskcache

__all__ = ["compiled_methods", "clear"]

_KIND = "dataclass-code"
#: Most sources kept (a few hundred are vramwise's; a full table is not grown further).
MAX_SOURCES = 2048
_lock = _thread.allocate_lock()
_state = {"depth": 0, "table": None, "root": None, "added": 0}


@lru_cache(maxsize=1)
def _key() -> bytes:
    """This module's source, read once: the table is what this code stores."""
    return diskcache.source_digest(__file__)


def _exec(source, globals=None, locals=None):  # noqa: A002 - the signature dataclasses calls
    """:func:`exec`, with a source string replaced by its stored compiled code."""
    table = _state["table"]
    if type(source) is str and table is not None:
        digest = hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        code = table.get(digest)
        if type(code) is not CodeType:
            code = compile(source, "<string>", "exec")
            if len(table) < MAX_SOURCES:
                table[digest] = code
                _state["added"] += 1
        source = code
    return exec(source, globals, locals)  # noqa: S102 - dataclasses' own generated source, or its compiled code


@contextmanager
def compiled_methods() -> Iterator[None]:
    """Data classes defined inside take their generated methods' code from the stored table (see the module)."""
    with _lock:
        _state["depth"] += 1
        if _state["depth"] == 1:
            root = diskcache.cache_dir()
            if root is not None and getattr(dataclasses, "exec", None) is None:
                stored = diskcache.get(_KIND, _key())
                _state.update(table=stored if type(stored) is dict else {}, root=root, added=0)
                dataclasses.exec = _exec  # read by dataclasses' generator as a module global, before builtins
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["table"] is not None:
                if getattr(dataclasses, "exec", None) is _exec:
                    del dataclasses.exec
                if _state["added"]:
                    diskcache.put(_KIND, _key(), _state["table"], root=_state["root"])
                _state.update(table=None, root=None, added=0)


def clear() -> None:
    """Forget the table of this process (the next :func:`compiled_methods` reads the cache again)."""
    with _lock:
        if _state["depth"] == 0:
            _state.update(table=None, root=None, added=0)
