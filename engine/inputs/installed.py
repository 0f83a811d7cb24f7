"""The version of an installed distribution, read from its metadata file without :mod:`importlib.metadata`.

Importing :mod:`importlib.metadata` (and the email parser it reads metadata with) takes longer than a whole
estimate from a local config. :func:`distribution_version` looks where :mod:`importlib.metadata` looks first --
the ``NAME-VERSION.dist-info`` / ``.egg-info`` folders of the folders on ``sys.path``, in order -- and reads the
``Version:`` header of the first one found. Anywhere it cannot look as cheaply (a zip file on ``sys.path``,
a metadata file without the header), it asks :mod:`importlib.metadata` instead, so the answer is the same.
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["distribution_version"]

_SEPARATORS = re.compile(r"[-_.]+")


def _normalise(name: str) -> str:
    return _SEPARATORS.sub("_", name).lower()


def _fallback(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _header_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                if not line.strip():
                    return None  # the headers end at the first blank line
                if line.startswith("Version:"):
                    return line[len("Version:"):].strip()
    except OSError:
        return None
    return None


def distribution_version(name: str) -> str | None:
    """The version of the installed distribution ``name`` (as ``importlib.metadata.version`` gives it), or None
    when it is not installed."""
    want = _normalise(name)
    for entry in sys.path:
        folder = entry or "."
        try:
            names = os.listdir(folder)
        except NotADirectoryError:  # a zip file on sys.path: importlib.metadata reads it
            return _fallback(name)
        except OSError:
            continue
        for item in names:
            stem, dot, suffix = item.rpartition(".")
            if not dot or suffix not in ("dist-info", "egg-info"):
                continue
            if _normalise(stem.partition("-")[0]) != want:
                continue
            meta = os.path.join(folder, item, "METADATA" if suffix == "dist-info" else "PKG-INFO")
            version = _header_version(meta)
            return version if version is not None else _fallback(name)
    return None
