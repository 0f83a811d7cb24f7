"""What a registry keeps between estimates: bounded caches, and the identity of a config for them.

A registry keeps resolved models by config (a mapping by its content, a local file by its
version), the static stages of estimates and normalised settings, each in a :class:`BoundedCache`
that forgets its oldest entry when full and that :meth:`Registry.clear_caches` empties.
"""

from __future__ import annotations

import marshal
import os
from collections.abc import Mapping
from typing import Any

from vramwise.rules.bounded import BoundedCache

__all__ = ["BoundedCache", "config_key", "same_config", "json_like"]


def _stat(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)


#: Mappings with a top-level field longer than this are not cached (their key would be the whole config).
_LARGE = 10_000

#: marshal's format 2: exact types (bool, int and float apart; a float by its bits) and no back-references, so
#: equal bytes mean equal content and the same content gives the same bytes whatever objects it shares.
_MARSHAL_VERSION = 2
_CONTAINERS = frozenset((list, tuple, dict))


def _has_long_field(model: Mapping) -> bool:
    """Whether a top-level field is a container of more than ``_LARGE`` entries (resolved each time rather than
    kept whole as a key)."""
    return any(isinstance(v, (list, tuple, dict)) and len(v) > _LARGE for v in model.values())


def config_key(model: Any) -> tuple | None:
    """A cheap identity of a model as given (a mapping, a path, a catalog name) for the model cache
    (None: do not cache). A local file is identified with its version: its size and modification
    time, and those of its folder and of the weights' index beside it."""
    if type(model) is dict or isinstance(model, Mapping):
        try:
            # JSON-like content serialised in C: a long list of floats (rope factors) costs a copy of its bits,
            # where repr spelled every float out on every call
            data = marshal.dumps(model, _MARSHAL_VERSION)
        except ValueError:  # a type marshal does not write exactly (a subclass, an object): identified by repr
            pass
        else:
            # every entry takes at least a byte, so only content longer than _LARGE bytes can hold a long field
            # (only plain containers reach marshal: a subclass fails it, and its mapping is checked below)
            if len(data) > _LARGE and any(type(v) in _CONTAINERS and len(v) > _LARGE for v in model.values()):
                return None  # a long field: resolved each time rather than kept whole as a key
            return ("mapping", data)
        if _has_long_field(model):
            return None
        try:
            return ("mapping", repr(model))
        except Exception:  # noqa: BLE001 - an unprintable mapping is simply not cached
            return None
    if isinstance(model, (str, os.PathLike)):
        text = os.path.expanduser(os.fspath(model))
        here = _stat(text)
        if here is None:  # a catalog name is resolved once; a hub id or a missing file each time
            from vramwise.inputs.catalog import CATALOG_PREFIX, HUB_PREFIX, find_model

            if not isinstance(model, str) or model.startswith(HUB_PREFIX):
                return None
            entry = find_model(model[len(CATALOG_PREFIX):] if model.startswith(CATALOG_PREFIX) else model)
            return ("catalog", entry.id) if entry is not None else None
        folder = text if os.path.isdir(text) else os.path.dirname(text) or "."
        config = os.path.join(text, "config.json") if folder == text else text
        index = os.path.join(folder, "model.safetensors.index.json")
        return ("path", text, _stat(config), _stat(folder), _stat(index))
    return None


def same_config(snapshot: Any, model: Any) -> bool:
    """Whether a kept copy of a mapping equals the mapping given now."""
    try:
        return bool(snapshot == model)
    except Exception:  # noqa: BLE001
        return False


_JSON_TYPES = (str, int, float, bool, type(None))


def json_like(value: Any) -> bool:
    """Whether ``value`` holds only dicts with string keys, lists and JSON scalars (walked iteratively)."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            if not all(type(k) is str for k in v):
                return False
            stack.extend(v.values())
        elif t is list:
            stack.extend(x for x in v if type(x) not in _JSON_TYPES)
        elif t not in _JSON_TYPES:
            return False
    return True
