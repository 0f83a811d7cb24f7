"""The family files of a registry, and the index of the model types they serve.

A registry reads every family file once when it is created; a file is composed, checked and
compiled only when a model needs its family (:class:`FamilyFiles`). Which family serves which
``model_type``, and which one is the fallback, must be known before that: :func:`build_index`
reads the top-level ``model_types`` and ``fallback`` entries of each file with a YAML parser,
whatever style they are written in, without composing the rest of the file (the examples and
module rules that make up most of it). A file whose top level cannot be split into its entries
that way (a flow mapping, a directive, a key the split does not recognise) is parsed whole.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Iterator

from vramwise.rules import diskcache
from vramwise.rules.datafiles import DataFile, json_path, load_data_file, yaml  # PyYAML, imported on first use
from vramwise.errors import FileFormatError
from vramwise.models.stack_manifest import MANIFEST_PATH, stack_manifest

__all__ = ["FamilyFiles", "build_index", "read_head", "OWN_KEYS"]


_SCHEMA = "family-1.schema.json"
_OVERLAY_SCHEMA = "family-stack-1.schema.json"


class FamilyFiles(Mapping):
    """Family name -> DataFile, loading (and validating, if asked) each file on first access; and each
    family's stack overlays (:meth:`overlays`), loaded the same way.

    ``overlay_texts``: (stack, family) -> (display path, text) of ``stacks/<stack>/<family>.yaml``.
    """

    def __init__(self, texts: dict[str, tuple[str, str]], validate: bool,
                 overlay_texts: Mapping[tuple[str, str], tuple[str, str]] | None = None):
        self._texts = texts
        self._validate = validate
        self._loaded: dict[str, DataFile] = {}
        self._overlay_texts: dict[str, list] = {}  # family -> [(stack, display path, text)] in the manifest's order
        self._overlays: dict[str, tuple] = {}
        order = {name: k for k, name in enumerate(stack_manifest().names)}
        for (stack, family), (shown, text) in sorted((overlay_texts or {}).items(), key=lambda kv: (order.get(kv[0][0], len(order)), kv[0][0])):
            if stack not in order:
                raise FileFormatError(f"{shown}:1:1: $: the folder names no stack of {MANIFEST_PATH} "
                                      f"({stack!r}; known: {', '.join(order)})")
            if family not in texts:
                raise FileFormatError(f"{shown}:1:1: $: no family {family!r} to add the {stack} stack's facts to")
            self._overlay_texts.setdefault(family, []).append((stack, shown, text))

    def __getitem__(self, name: str) -> DataFile:
        if name not in self._loaded:
            shown, text = self._texts[name]
            df = load_data_file(text, shown, _SCHEMA, validate=self._validate)
            if df.data["family"] != name:
                raise FileFormatError(df.problem(("family",), f"family name {df.data['family']!r} differs from the file name {name!r}"))
            self._loaded[name] = df
        return self._loaded[name]

    def overlays(self, name: str) -> tuple:
        """The loaded stack overlays of family ``name`` (the facts each stack needs of it), in the
        manifest's order of the stacks; each file's stack and family are its folder's and its name's, and
        each of its facts carries its stack's prefix."""
        if name not in self._overlays:
            manifest = stack_manifest()
            loaded = []
            for stack, shown, text in self._overlay_texts.get(name, ()):
                df = load_data_file(text, shown, _OVERLAY_SCHEMA, validate=self._validate)
                for key, want in (("stack", stack), ("family", name)):
                    if df.data.get(key) != want:
                        raise FileFormatError(df.problem((key,), f"{key} {df.data.get(key)!r} differs from the file's "
                                                                 f"{'folder' if key == 'stack' else 'name'} {want!r}"))
                prefix = manifest.stacks[stack].facts_prefix
                for fact in df.data["facts"]:
                    if not fact.startswith(prefix):
                        raise FileFormatError(f"{df.key_where(('facts', fact))}: {json_path(('facts', fact))}: fact {fact!r} "
                                              f"is not the {stack} stack's: its facts start with {prefix!r} ({MANIFEST_PATH})")
                loaded.append(df)
            self._overlays[name] = tuple(loaded)
        return self._overlays[name]

    def shown(self, name: str) -> str:
        """The display path of a family's file."""
        return self._texts[name][0]

    def text(self, name: str) -> str:
        return self._texts[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def __contains__(self, name: object) -> bool:
        return name in self._texts


#: A line at column 0 that starts a top-level entry: not blank, not a comment, not a "- " item of a
#: sequence written at the key's indentation (a "---" or "..." marker counts, and stops the split).
_ENTRY = re.compile(r"^(?:[^\s#-]|-\S)[^\n]*", re.M)
#: The key of a top-level entry in block style (a plain key followed by ": " or the end of the line).
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(?=[ \t]|\r?$)", re.M)
_HEAD_KEYS = ("model_types", "fallback")
#: The top-level entries of a family file that a family does not inherit: the compiled family's values are
#: the file's own (what :func:`read_head` may read of a file without composing or compiling it).
OWN_KEYS = ("model_types", "fallback", "abstract", "examples", "reference")


def _split_head(text: str, keys: tuple = _HEAD_KEYS) -> dict | None:
    """The top-level entries ``keys`` of a family file (those it has) from its top-level entries alone; None
    when the top level is not a block mapping of plain keys at column 0 (then the whole file is parsed)."""
    starts = [m.start() for m in _ENTRY.finditer(text)]
    chunks: dict[str, str] = {}
    for k, start in enumerate(starts):
        key = _KEY.match(text, start)
        if key is None:
            return None
        name = key.group(1)
        if name in keys:
            if name in chunks:
                return None  # a duplicate key: the whole parse reports it
            chunks[name] = text[start:starts[k + 1] if k + 1 < len(starts) else len(text)]
    head: dict = {}
    for name, chunk in chunks.items():
        try:
            data = yaml.load(chunk, Loader=getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader)
        except (yaml.YAMLError, RecursionError, ValueError):
            return None
        if not isinstance(data, dict) or list(data) != [name]:
            return None
        head[name] = data[name]
    return head


def read_head(text: str, shown: str, whole: bool = False, keys: tuple = _HEAD_KEYS) -> dict | None:
    """The top-level ``model_types`` and ``fallback`` of a family file (a mapping with those of the two
    it has), or its top-level entries ``keys`` (of :data:`OWN_KEYS`); None when the file cannot be parsed
    (its problem is reported, with its position, when it is loaded). ``whole``: parse the whole file even
    when its top-level entries can be split."""
    head = None if whole else _split_head(text, keys)
    if head is not None:
        return head
    try:
        data = load_data_file(text, shown, _SCHEMA, validate=False).data
    except FileFormatError:
        return None
    return {k: data[k] for k in keys if k in data} if isinstance(data, dict) else None


def build_index(files: FamilyFiles, whole: bool = False) -> tuple[dict[str, str], str | None]:
    """(model type -> the family serving it, the fallback family or None) of the family files
    (``whole``: each file parsed whole, as for files that are validated anyway).

    Raises :class:`FileFormatError` when a file cannot be read, ``model_types`` is not a list of
    names, a model type is served twice, or more than one family is the fallback. An index built
    without a problem is kept in the cache on disk (:mod:`vramwise.rules.diskcache`), keyed by every
    file's name and bytes: the same files give it without reading their heads again.
    """
    key = _index_key(files, whole) if diskcache.cache_dir() is not None else None
    if key is not None:
        stored = diskcache.get("family-index", key)
        if type(stored) is tuple and len(stored) == 2 and type(stored[0]) is dict \
                and (stored[1] is None or type(stored[1]) is str):
            return stored
    index = _build_index(files, whole)
    if key is not None:
        diskcache.put("family-index", key, index)
    return index


def _index_key(files: FamilyFiles, whole: bool) -> bytes:
    h = hashlib.blake2b(diskcache.source_digest(__file__), digest_size=32)
    h.update(b"whole" if whole else b"split")
    for name in files:
        shown, text = files.shown(name), files.text(name)
        h.update(f"\0{name}\0{shown}\0{len(text)}\0".encode("utf-8", "surrogatepass"))
        h.update(text.encode("utf-8", "surrogatepass"))
    return h.digest()


def _build_index(files: FamilyFiles, whole: bool) -> tuple[dict[str, str], str | None]:
    problems: list[str] = []
    owners: dict[str, str] = {}
    first_at: dict[str, tuple] = {}  # model type -> (family, index in its model_types), to say where it was first
    fallbacks = []
    for name in files:
        head = read_head(files.text(name), files.shown(name), whole)
        if head is None:  # report it properly, with its position
            files[name]
            continue
        types = head.get("model_types") or []
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            files[name]  # the schema names the problem with its position
            raise FileFormatError(files[name].problem(("model_types",), "a list of model type names"))
        for i, mt in enumerate(types):
            if mt in owners:
                first, j = first_at[mt]
                problems.append(files[name].problem(
                    ("model_types", i), f"model type {mt!r} is already served by family {first!r} "
                                        f"({files[first].where(('model_types', j))})"))
                continue
            owners[mt], first_at[mt] = name, (name, i)
        if head.get("fallback") is True:
            fallbacks.append(name)
    if len(fallbacks) > 1:
        first = fallbacks[0]
        for name in fallbacks[1:]:
            problems.append(files[name].problem(
                ("fallback",), f"family {name!r} is marked fallback, and so is family {first!r} "
                               f"({files[first].where(('fallback',))}): only one family may be; remove one of the two"))
    if problems:
        raise FileFormatError(problems)
    return owners, (fallbacks[0] if fallbacks else None)
