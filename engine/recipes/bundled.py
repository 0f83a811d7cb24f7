"""The bundled recipe formats (``frameworks/*.yaml``), read once: beside the reader and the launch lines, which
both need them, so that neither imports the other for them."""

from __future__ import annotations

from functools import lru_cache

from vramwise.recipes.formats import Formats

__all__ = ["bundled_formats"]


@lru_cache(maxsize=1)
def bundled_formats() -> Formats:
    """The bundled recipe formats (``frameworks/``), read once (``bundled_formats.cache_clear()`` forgets them)."""
    return Formats.load()
