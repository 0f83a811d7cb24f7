"""Plain JSON for fuzz cases: NaN/inf, bytes and tuples are tagged so that a case survives a round trip.

``{"$float": "nan" | "inf" | "-inf"}``, ``{"$bytes": "<base64>"}``, ``{"$tuple": [...]}``; a dict that
happens to have exactly one key starting with ``$`` is escaped as ``{"$dict": {...}}``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import sys
from typing import Any



def encode(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, tuple):
        return {"$tuple": [encode(x) for x in v]}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, dict):
        out = {str(k): encode(x) for k, x in v.items()}
        if len(out) == 1 and next(iter(out)).startswith("$"):
            return {"$dict": out}
        return out
    return v


def decode(v: Any) -> Any:
    if isinstance(v, list):
        return [decode(x) for x in v]
    if isinstance(v, dict):
        if len(v) == 1:
            (k, x), = v.items()
            if k == "$float":
                return float(x)
            if k == "$bytes":
                return base64.b64decode(x)
            if k == "$tuple":
                return tuple(decode(y) for y in x)
            if k == "$dict":
                return {kk: decode(y) for kk, y in x.items()}
        return {k: decode(x) for k, x in v.items()}
    return v


def dumps(v: Any, **kw) -> str:
    return json.dumps(encode(v), allow_nan=False, **kw)


def loads(text: str) -> Any:
    return decode(json.loads(text))


def short_hash(v: Any) -> str:
    return hashlib.sha256(dumps(v, sort_keys=True).encode()).hexdigest()[:12]
