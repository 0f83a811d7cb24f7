"""Which data files have passed :meth:`Registry.check_all <vramwise.estimation.registry.Registry.check_all>`.

Checking every family, profile and strategy compiles all of them (seconds); the outcome depends only on
the bytes of the data files (and on the code, which does not change within a process). A
:class:`CheckedContents` keeps the digests of the data that passed: a registry over the same bytes, with the
same validation, passes again without compiling anything, and a file edited since (or a file added, removed
or renamed) gives another digest and is checked again. Failures are not kept (they are checked each time,
with the file names of the registry at hand). The process keeps one, :data:`CHECKED`, in memory only;
:meth:`CheckedContents.clear` forgets it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

from vramwise.rules.datafiles import MAX_FILE_BYTES

__all__ = ["CHECKED", "CheckedContents", "folder_digest"]


def _files(location: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(path relative to ``location``, item) of every ``*.yaml`` under a folder or package resource, in name order."""
    for item in sorted(location.iterdir(), key=lambda p: p.name):
        if item.is_dir():
            if item.name != "__pycache__":
                yield from _files(item, f"{prefix}{item.name}/")
        elif item.name.endswith(".yaml") and item.is_file():
            yield f"{prefix}{item.name}", item


def folder_digest(*locations: Any) -> str | None:
    """A digest of the names and bytes of every ``*.yaml`` under ``locations`` (folders or package
    resources); None when one cannot be read or is over the data-file limit (such data is not kept)."""
    h = hashlib.sha256()
    try:
        for k, location in enumerate(locations):
            for rel, item in _files(location):
                raw = item.read_bytes()
                if len(raw) > MAX_FILE_BYTES:
                    return None
                h.update(f"{k}\0{rel}\0{len(raw)}\0".encode())
                h.update(raw)
    except OSError:
        return None
    return h.hexdigest()


class CheckedContents:
    """The digests of data that passed a registry's full check, with the validation it passed under."""

    __slots__ = ("_passed",)

    def __init__(self) -> None:
        self._passed: set[tuple[str, bool]] = set()

    def passed(self, digest: str | None, validate: bool) -> bool:
        """Whether data of this digest passed a check with this validation (``validate``) or a stricter one."""
        return digest is not None and ((digest, validate) in self._passed or (digest, True) in self._passed)

    def add(self, digest: str | None, validate: bool) -> None:
        if digest is not None:
            self._passed.add((digest, validate))

    def clear(self) -> None:
        """Forget every check (the next one compiles everything again)."""
        self._passed.clear()

    def __len__(self) -> int:
        return len(self._passed)


#: The checks passed in this process (:meth:`CheckedContents.clear` forgets them).
CHECKED = CheckedContents()
