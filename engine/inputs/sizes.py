"""Memory sizes written as text (``16GB``, ``15 GiB``, ``1.5e10``): the one parser of them.

Used by the command line's ``--weight-bytes`` and by the GPU catalog's sizes (``--gpu 24GiB``).

The grammar, case-insensitive, spaces allowed around and between its parts::

    size   = number [unit]
    number = digits with an optional fraction and exponent: 16, 1.5, .5, 1.6e10 (never negative)
    unit   = B | KB | MB | GB | TB        (decimal: 1, 10**3, 10**6, 10**9, 10**12 bytes)
           | KiB | MiB | GiB | TiB       (binary: 2**10, 2**20, 2**30, 2**40 bytes)

A number without a unit is a count of bytes (``unit`` is None, so a caller that needs a unit,
such as a GPU size where ``24`` could mean GB or GiB, can say so). The value is the number times
the unit, rounded to the nearest whole byte (a half to the even one, as Python's ``round``); a
value too large for a float (``1e400``) is refused. ``G``, ``M``, ``T`` and the like are not units here: ``24G`` is not a size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from vramwise.errors import SettingsError

__all__ = ["Size", "UNITS", "UNIT_BASES", "parse_size", "split_number"]

#: bytes per unit, by the unit's name
UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
#: each unit as a power: what a GPU's source line says
UNIT_BASES = {"B": "1", "KB": "10**3", "MB": "10**6", "GB": "10**9", "TB": "10**12",
              "KiB": "2**10", "MiB": "2**20", "GiB": "2**30", "TiB": "2**40"}
_BY_LOWER = {u.lower(): u for u in UNITS}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class Size:
    """A size as parsed: its whole bytes, the number as written and the unit (None: none given)."""

    bytes: int
    number: str
    unit: str | None


def split_number(text: str) -> tuple[str, str] | None:
    """(the number, the letters after it) of ``text`` such as ``7.5B`` or ``16 GiB``; None when
    ``text`` is not a number followed by letters. The number grammar of sizes, shared with counts."""
    m = _NUMBER.match(text)
    return None if m is None else (m.group(1), m.group(2))


def parse_size(text: str) -> Size | None:
    """The :class:`Size` that ``text`` writes, by the grammar of this module; None when ``text``
    is not a size (no number, or letters that are not a unit). Raises
    :class:`~vramwise.SettingsError` for a value too large for a float."""
    parts = split_number(text)
    if parts is None:
        return None
    number, letters = parts
    unit = _BY_LOWER.get(letters.lower()) if letters else None
    if letters and unit is None:
        return None
    value = float(number) * UNITS[unit or "B"]
    if not math.isfinite(value):
        raise SettingsError(f"the size {text.strip()!r} is too large")
    return Size(int(round(value)), number, unit)
