"""The GGUF models of a folder or of a hub repository, each a quantization of one model.

The files are grouped into models (the shards of a split one, ``NAME-00001-of-00003.gguf`` ..., as one), vision
projectors (``mmproj-*``) and importance matrices (``*imatrix*``) left out, and each model is named by its file
name as its publisher wrote it (``Q4_K_M``, ``UD-Q4_K_XL``, ``IQ4_XS``): the part of the name after what every
model's name shares."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Sequence

from vramwise.errors import ConfigError

__all__ = ["GGUFSet", "group_gguf", "folder_gguf", "is_projector", "SHARD"]

#: A split model's shard: NAME-00001-of-00003.gguf
SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.I)
_PARTS = re.compile(r"([-.])")


@dataclass(frozen=True)
class GGUFSet:
    """One model among several: its files (shard order, as given: local paths or a repository's paths), the name
    of the model (its file name less ``.gguf`` and the shard suffix, with its folder) and its short name."""

    files: tuple  # of str
    stem: str  # e.g. Qwen2.5-7B-Instruct-Q4_K_M (a subfolder's: Q8_0/Qwen2.5-72B-Instruct-Q8_0)
    name: str  # the part of the stem after what every model's stem shares (the stem itself when alone)


def is_projector(path: str) -> bool:
    """Whether a GGUF file is not a model: a vision projector (``mmproj-*.gguf``, ``*mmproj*.gguf``) or an
    importance matrix (``*imatrix*.gguf``, llama-imatrix's output that some repositories publish beside the
    quantizations)."""
    name = PurePosixPath(path).name.lower()
    return "mmproj" in name or "imatrix" in name


def _stem(path: str) -> tuple[str, int]:
    """(the model's stem, the shard number: 0 for a file that is not a shard) of a ``/``-separated path."""
    p = PurePosixPath(path)
    m = SHARD.match(p.name)
    name = m.group("prefix") if m else p.name[:-len(".gguf")] if p.name.lower().endswith(".gguf") else p.name
    parent = "" if str(p.parent) in ("", ".") else f"{p.parent}/"
    return parent + name, int(m.group("no")) if m else 0


def _short_names(stems: Sequence[str]) -> list[str]:
    """Each stem less the leading parts (split at ``-`` and ``.``) every stem shares; a stem's folder is left out
    when the stem itself names the model (Q8_0/Qwen-Q8_0 -> Q8_0)."""
    bases = [s.rsplit("/", 1)[-1] for s in stems]
    if len(bases) < 2:
        return list(bases)
    split = [_PARTS.split(b) for b in bases]
    common = 0
    while all(len(s) > common + 1 for s in split) and len({s[common] for s in split}) == 1:
        common += 1
    while common and split[0][common - 1] not in "-.":  # cut after a separator, never inside a part
        common -= 1
    names = ["".join(s[common:]) for s in split]
    return names if len(set(names)) == len(names) else list(stems)


def group_gguf(paths: Iterable[str]) -> tuple[GGUFSet, ...]:
    """The models of ``paths`` (``/``-separated: a repository's, or a folder's relative paths), vision projectors
    left out: a split model's shards as one set (shard order), named as the module says; sorted by stem."""
    groups: dict = {}
    for path in paths:
        if not str(path).lower().endswith(".gguf") or is_projector(str(path)):
            continue
        stem, no = _stem(str(path))
        groups.setdefault(stem.lower(), (stem, []))[1].append((no, str(path)))
    stems = sorted(groups.values(), key=lambda g: g[0].lower())
    names = _short_names([s for s, _ in stems])
    return tuple(GGUFSet(tuple(p for _, p in sorted(files)), stem, name) for (stem, files), name in zip(stems, names))


def folder_gguf(folder: Any) -> tuple[GGUFSet, ...]:
    """The GGUF models of a local folder and its subfolders (a downloaded repository's layout), their files as
    paths; a folder with a config.json holds none here (it is read from its config)."""
    root = Path(os.fspath(folder)).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder")
    if (root / "config.json").exists():
        return ()
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = Path(dirpath).relative_to(root)
        found += [(rel / f).as_posix() for f in filenames if f.lower().endswith(".gguf")]
    return tuple(GGUFSet(tuple(str(root / f) for f in s.files), s.stem, s.name) for s in group_gguf(found))
