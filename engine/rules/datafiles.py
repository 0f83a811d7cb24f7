"""Reading data files: YAML with node positions, schema validation, error locations.

Every family and formula file goes through :func:`load_data_file`. The YAML is
composed once (keeping line/column marks), turned into plain data, and validated
against its JSON Schema. Problems are reported as ``path:line:col: $.json.path:
message`` so that they read as a trail to the node.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramwise.errors import FileFormatError
from vramwise.rules import diskcache

if TYPE_CHECKING:
    import yaml


class _LazyYaml:
    """PyYAML, imported on first use: a file read from the cache on disk needs no YAML parser (nor the
    milliseconds of importing one); the first attribute read replaces this object by the module."""

    def __getattr__(self, name: str):
        import yaml as module

        globals()["yaml"] = module
        return getattr(module, name)


globals()["yaml"] = _LazyYaml()


def _loader():
    """libyaml's safe loader, which keeps marks too and is several times faster; PyYAML's own without libyaml."""
    return getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader

__all__ = ["DataFile", "VALID_TEXTS", "ValidTexts", "compose_yaml", "iter_nodes", "load_data_file", "read_data_text", "read_folder", "json_path", "load_schema", "MAX_FILE_BYTES",
           "MAX_DEPTH", "MAX_NODES"]


def json_path(parts: tuple) -> str:
    """Render a path of keys and indices as ``$.a.b[0].c``."""
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


@dataclass(frozen=True)
class DataFile:
    """A loaded data file: its data, its display path and the composed node tree.

    A file taken from the cache on disk (:mod:`vramwise.rules.diskcache`) comes with ``marks`` (the 0-based line
    and column of each node by its path, and of each mapping key) instead of its nodes, and its ``text``: the
    nodes are composed again only when something asks for more than a position on a path that exists."""

    path: str
    data: Any
    root: yaml.Node | None = None
    text: str | None = field(default=None, repr=False, compare=False)
    marks: tuple | None = field(default=None, repr=False, compare=False)

    def tree(self) -> yaml.Node:
        """The composed root node (composed from ``text`` on first use when the file came from the cache)."""
        if self.root is None and self.text is not None:
            object.__setattr__(self, "root", compose_yaml(self.text, lambda node: None)[1])
        return self.root

    def node_at(self, parts: tuple) -> yaml.Node:
        """The deepest YAML node on ``parts`` (a path of keys and indices)."""
        node = self.tree()
        for p in parts:
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if k.value == p:
                        node = v
                        break
                else:
                    return node
            elif isinstance(node, yaml.SequenceNode) and isinstance(p, int) and p < len(node.value):
                node = node.value[p]
            else:
                return node
        return node

    def key_node(self, parts: tuple, key: str) -> yaml.Node | None:
        node = self.node_at(parts)
        if isinstance(node, yaml.MappingNode):
            for k, _ in node.value:
                if k.value == key:
                    return k
        return None

    def where(self, parts: tuple, column_offset: int = 0, line_offset: int = 0) -> str:
        """``path:line:col`` of the node at ``parts`` (1-based line and column)."""
        mark = self.marks[0].get(parts) if self.marks is not None else None
        if mark is None:
            node = self.node_at(parts)
            mark = node.start_mark.line, node.start_mark.column
        return f"{self.path}:{mark[0] + 1 + line_offset}:{mark[1] + 1 + column_offset}"

    def key_where(self, parts: tuple) -> str:
        """``path:line:col`` of the key that names the entry at ``parts`` (its value's position if none)."""
        mark = self.marks[1].get(parts) if self.marks is not None and parts else None
        if mark is not None:
            return f"{self.path}:{mark[0] + 1}:{mark[1] + 1}"
        key = self.key_node(parts[:-1], parts[-1]) if parts else None
        if key is None:
            return self.where(parts)
        return f"{self.path}:{key.start_mark.line + 1}:{key.start_mark.column + 1}"

    def problem(self, parts: tuple, message: str) -> str:
        return f"{self.where(parts)}: {json_path(parts)}: {message}"


def _check_keys(node: yaml.Node, path: str, problems: list[str], parts: tuple = ()) -> None:
    """Reject duplicate keys, which plain YAML loading would silently drop."""
    if isinstance(node, yaml.MappingNode):
        seen: set = set()
        for k, v in node.value:
            if k.value in seen:
                problems.append(
                    f"{path}:{k.start_mark.line + 1}:{k.start_mark.column + 1}: {json_path(parts)}: "
                    f"duplicate key {k.value!r}"
                )
            seen.add(k.value)
            _check_keys(v, path, problems, parts + (k.value,))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _check_keys(v, path, problems, parts + (i,))


def package_files(package: str):
    """The folder of files shipped in ``package`` (``vramwise.formulas``, ``vramwise.schemas``, ...): its directory
    where the package is one (a wheel's install, an editable checkout), else importlib.resources' view of it (a
    zipped install). The same files :func:`importlib.resources.files` gives, without importing importlib.resources
    (and the archive modules it brings) on every command's path."""
    spec = find_spec(package)
    for location in (spec.submodule_search_locations or ()) if spec is not None else ():
        if os.path.isdir(location):
            return Path(location)
    from importlib import resources

    return resources.files(package)


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """A schema shipped in ``vramwise.schemas`` (read-only, so caching it is harmless)."""
    text = package_files("vramwise.schemas").joinpath(name).read_text(encoding="utf-8")
    return json.loads(text)


#: Where the shipped schemas live by their ``$id``; a ``$ref`` to another shipped schema resolves to its file.
_SCHEMA_BASE = "https://vramwise.dev/schemas/"


@lru_cache(maxsize=None)
def _validator(name: str):
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
    from referencing.exceptions import NoSuchResource

    def shipped(uri: str) -> Resource:
        if not uri.startswith(_SCHEMA_BASE) or "/" in uri[len(_SCHEMA_BASE):]:
            raise NoSuchResource(ref=uri)
        return Resource.from_contents(load_schema(uri[len(_SCHEMA_BASE):]))

    # the shipped schemas are checked against the metaschema by the test suite, not at every start
    return Draft202012Validator(load_schema(name), registry=Registry(retrieve=shipped))


def _schema_problem(df: DataFile, err) -> str:
    while err.context:  # oneOf/anyOf: report the branch that came closest, at its own node
        err = max(err.context, key=lambda e: (len(e.absolute_path), e.validator != "type"))
    parts = tuple(err.absolute_path)
    message = err.message
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        extra = [k for k in err.instance if k not in allowed]
        if extra:
            key = df.key_node(parts, extra[0])
            names = ", ".join(repr(k) for k in extra)
            message = f"unknown key {names} (allowed: {', '.join(sorted(allowed))})"
            if key is not None:
                return (
                    f"{df.path}:{key.start_mark.line + 1}:{key.start_mark.column + 1}: "
                    f"{json_path(parts + (extra[0],))}: {message}"
                )
    return df.problem(parts, message)


#: Limits of a data file (they are untrusted input): size, nesting depth and number of YAML nodes.
#: The size limit holds wherever a data file is read (a registry, ``vramwise check``).
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_NODES = 100_000


def read_data_text(item, shown: str) -> str:
    """The text of one data file (a path or a package resource), read under the limits every data file
    is read under: at most :data:`MAX_FILE_BYTES`, UTF-8. :class:`FileFormatError` names ``shown``."""
    try:
        size = item.stat().st_size if hasattr(item, "stat") else 0
        if size > MAX_FILE_BYTES:
            raise FileFormatError(f"{shown}:1:1: $: the file has {size:,} bytes; data files hold at most {MAX_FILE_BYTES:,}")
        raw = item.read_bytes()
    except OSError as e:
        raise FileFormatError(f"{shown}:1:1: $: cannot be read ({e.strerror or e})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise FileFormatError(f"{shown}:1:1: $: the file has {len(raw):,} bytes; data files hold at most {MAX_FILE_BYTES:,}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileFormatError(f"{shown}:1:1: $: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}): "
                              "data files are UTF-8 YAML") from None


def read_folder(location, display: str | None) -> list[tuple[str, str]]:
    """(display path, text) of each ``*.yaml`` in a folder or package resource folder, in name order,
    each read by :func:`read_data_text` (``display``: the folder as shown, else its path)."""
    try:
        items = sorted(location.iterdir(), key=lambda p: p.name)
    except OSError as e:
        raise FileFormatError(f"{display or location}: cannot list the folder ({e.strerror or e})") from None
    out = []
    for item in items:
        if item.name.endswith(".yaml") and item.is_file():
            shown = f"{display}/{item.name}" if display else str(item)
            out.append((shown, read_data_text(item, shown)))
    return out


def iter_nodes(root: yaml.Node):
    """(node, depth) of every composed node, depth first, without recursion; an alias's node comes once per
    use. Lazy: a caller that stops (raises) at a bound never walks an alias bomb or a self-reference."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, depth + 1) for v in node.value)


def _check_tree(root: yaml.Node, path: str) -> None:
    """Reject YAML aliases (a node met twice), nesting beyond MAX_DEPTH and more than MAX_NODES nodes.

    Walks the composed nodes iteratively, so a self-referencing alias or an alias bomb is caught
    before anything expands it.
    """
    seen: set[int] = set()
    for node, depth in iter_nodes(root):
        mark = node.start_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}"
        if id(node) in seen:
            raise FileFormatError(f"{where}: $: YAML aliases (*name) are not allowed in data files")
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            raise FileFormatError(f"{where}: $: more than {MAX_NODES:,} YAML nodes")
        if depth > MAX_DEPTH:
            raise FileFormatError(f"{where}: $: nested more than {MAX_DEPTH} levels deep")


def compose_yaml(text: str, check) -> tuple[Any, yaml.Node | None]:
    """(data, root node) of one YAML document, its nodes kept for their positions; ``check(root)`` runs on
    the composed nodes before anything is constructed (the limits on aliases, depth and size). An empty
    document is (None, None); invalid YAML raises yaml.MarkedYAMLError."""
    loader = _loader()(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        check(root)
        return loader.construct_document(root), root
    finally:
        loader.dispose()


class ValidTexts:
    """Digests of the texts that passed a schema's validation, with the schema's name: the same text validates the
    same way under any display path, so a copied or re-read file is not validated again (the schemas do not
    change within a process). Bounded; :meth:`clear` forgets every entry."""

    __slots__ = ("_data", "_size")

    def __init__(self, size: int):
        self._data: dict = {}
        self._size = size

    @staticmethod
    def key(schema: str, text: str) -> tuple[str, bytes]:
        return schema, hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()

    def __contains__(self, key) -> bool:
        return key in self._data

    def add(self, key) -> None:
        if len(self._data) >= self._size:
            del self._data[next(iter(self._data))]
        self._data[key] = True

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


#: The texts that passed validation in this process (:meth:`ValidTexts.clear` forgets them).
VALID_TEXTS = ValidTexts(1 << 12)


def load_data_file(text: str, path: str, schema: str, *, validate: bool = True) -> DataFile:
    """Compose, construct and (unless ``validate`` is false) validate one YAML data file.

    Raises :class:`FileFormatError` listing every problem with its position. The bundled files
    are loaded without validation (the test suite validates them); files from elsewhere with it.
    Every file is limited in size, depth and node count and may not use YAML aliases.
    """
    if len(text) > MAX_FILE_BYTES:
        raise FileFormatError(f"{path}:1:1: $: the file has {len(text):,} characters; data files hold at most {MAX_FILE_BYTES:,}")
    stored = _stored(text, schema)
    if stored is not None:  # composed by an earlier process: the same bytes passed the checks below then
        df = DataFile(path=path, data=stored[0], text=text, marks=stored[1])
        if not validate:
            return df
        return _validated(df, text, schema, [])
    try:
        data, root = compose_yaml(text, lambda node: _check_tree(node, path))
        if root is None:
            raise FileFormatError(f"{path}:1:1: $: the file is empty")
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise FileFormatError(f"{path}:{line}:{col}: $: invalid YAML: {e.problem or e}") from None
    except (RecursionError, MemoryError, ValueError) as e:  # parser limits (deep flow collections, huge scalars)
        raise FileFormatError(f"{path}:1:1: $: cannot be read as YAML ({type(e).__name__})") from None
    df = DataFile(path=path, data=data, root=root)
    problems: list[str] = []
    _check_keys(root, path, problems)
    if not problems:
        _store(text, schema, data, root)
    if not validate and not problems:
        return df
    return _validated(df, text, schema, problems)


def _validated(df: DataFile, text: str, schema: str, problems: list[str]) -> DataFile:
    valid = ValidTexts.key(schema, text)
    if not problems and valid in VALID_TEXTS:
        return df
    errors = sorted(_validator(schema).iter_errors(df.data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    problems.extend(_schema_problem(df, e) for e in errors)
    if problems:
        raise FileFormatError(problems)
    VALID_TEXTS.add(valid)
    return df


def _marks(root: yaml.Node) -> tuple[dict, dict] | None:
    """(0-based line and column of each node by its path, of each mapping key (or sequence item) by its entry's
    path): the positions
    :meth:`DataFile.where` and :meth:`DataFile.key_where` give, without the nodes. None when a mapping has a key
    that is not a scalar (such a file keeps its nodes)."""
    nodes: dict = {}
    keys: dict = {}
    stack = [((), root)]
    while stack:
        parts, node = stack.pop()
        nodes[parts] = (node.start_mark.line, node.start_mark.column)
        if isinstance(node, yaml.MappingNode):
            for k, v in reversed(node.value):  # the first of equal keys wins, as in DataFile.node_at
                if not isinstance(k.value, str):
                    return None
                keys[parts + (k.value,)] = (k.start_mark.line, k.start_mark.column)
                stack.append((parts + (k.value,), v))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):  # an item has no key: key_where gives the item's own position
                keys[parts + (i,)] = (v.start_mark.line, v.start_mark.column)
                stack.append((parts + (i,), v))
    return nodes, keys


def _cache_key(text: str, schema: str) -> bytes:
    # the limits are part of the key: the checks an entry passed are those of the limits it was composed under
    return _source_key() + f"{schema}\0{MAX_DEPTH}\0{MAX_NODES}\0".encode() + text.encode("utf-8", "surrogatepass")


@lru_cache(maxsize=1)
def _source_key() -> bytes:
    """This module's source and PyYAML's (its version is in it), part of every key: the composing code of an
    entry is the code that reads it. PyYAML is found, not imported."""
    from importlib.util import find_spec

    spec = find_spec("yaml")
    return diskcache.source_digest(__file__, *([spec.origin] if spec is not None and spec.origin else []))


def _stored(text: str, schema: str):
    """(data, marks) of ``text`` from the cache on disk, or None."""
    entry = diskcache.get("datafiles", _cache_key(text, schema))
    if type(entry) is tuple and len(entry) == 2 and type(entry[1]) is tuple and len(entry[1]) == 2 \
            and type(entry[1][0]) is dict and type(entry[1][1]) is dict:
        return entry
    return None


def _store(text: str, schema: str, data, root: yaml.Node) -> None:
    if diskcache.cache_dir() is None:
        return
    marks = _marks(root)
    if marks is not None:
        diskcache.put("datafiles", _cache_key(text, schema), (data, marks))
