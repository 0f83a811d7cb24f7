"""GGUF files (llama.cpp's format): the header only, and the config.json a family reads from it.

A model is one ``.gguf`` file, the shards of a split one (``NAME-00001-of-00003.gguf`` ..., named by any of
them), or a folder holding one of those. :func:`read_gguf` reads each file's header: its metadata
key/values and its tensor table (names, shapes, GGML types, offsets), from a read-only memory map of which
only the header's pages are touched; the tensors' data is never read (:func:`read_gguf_bytes` parses the same
header from a file's first bytes and its declared size: what a browser reads of a file it does not send). The
value types, the GGML types and their block sizes are those of the ``gguf`` package llama.cpp publishes
(``pip install 'vramwise[gguf]'``).
``gguf.GGUFReader`` reads the same header (the tests compare the two), but it parses every item of every
array into a numpy array of its own: a vocabulary of 150,000 tokens and its merges take seconds and hundreds
of MB, where this parser skips them by their lengths.

Each tensor's bytes come from its GGML type's block: ``elements / block_size * type_size``
(``gguf.constants.GGML_QUANT_SIZES``; Q4_K: 256 weights in 144 bytes), exact to the byte; their sum is what
the weights take as stored. :func:`gguf_config` maps the metadata to a config by the tables of
``formulas/gguf.yaml`` (data, one per llama.cpp architecture): the family of its model type then reads it as
it reads a config.json.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from vramwise.errors import ConfigError, EvaluationError, MissingDependencyError

__all__ = ["GGUFTensor", "GGUFPlacement", "GGUFModel", "read_gguf", "read_gguf_bytes", "gguf_config", "gguf_files",
           "read_projector", "PROJECTOR_ARCHITECTURE", "is_gguf", "TABLE_PATH", "MISSING", "known_architectures"]

#: Display path of the bundled tables.
TABLE_PATH = "formulas/gguf.yaml"
#: The message when the gguf package is not installed.
MISSING = "reading a GGUF file needs the gguf package (llama.cpp's reader): pip install 'vramwise[gguf]'"
#: Arrays of at most this many items are kept whole in :attr:`GGUFModel.metadata` (a vocabulary's are not).
SMALL_ARRAY = 64
#: ... and, outside the tokenizer's keys, arrays of at most this many (a value a layer: head_count_kv, ...).
LAYER_ARRAY = 4096

_MAGIC = b"GGUF"
_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.I)


@dataclass(frozen=True)
class GGUFTensor:
    """One entry of a GGUF tensor table."""

    name: str
    ggml_type: str  # the GGML type's name (F32, F16, Q8_0, Q4_K, ...)
    shape: tuple  # ggml order: shape[0] is a row's length
    elements: int
    nbytes: int  # elements / block size * type size, exact
    offset: int  # of its data in its file
    shard: int  # index of its file in GGUFModel.files


@dataclass(frozen=True)
class GGUFPlacement:
    """A GGUF model's tensor bytes by where llama.cpp's loader places them: each repeating layer's
    (``blk.N.*``), the input layer's (``token_embd.*``), the output layer's (every other tensor: ``output.weight``,
    ``output_norm.*``), and the token embedding a tied model duplicates as its output (no ``output.weight``)."""

    layer_bytes: tuple  # blk.0.* ... blk.(n-1).*, each summed
    embedding_bytes: int
    output_bytes: int
    duplicated_output_bytes: int
    vocab_tokens: int  # the tokenizer's tokens (tokenizer.ggml.tokens), the n_vocab llama.cpp's logits have


@dataclass(frozen=True)
class GGUFModel:
    """The header of a GGUF model (one file or the shards of a split one)."""

    files: tuple  # the paths, shard order
    architecture: str  # general.architecture
    file_type: str | None  # general.file_type as llama.cpp names it (Q4_K_M, Q8_0, F16, ...), None when absent
    metadata: Mapping[str, Any]  # the first file's key/values (the tokenizer's arrays longer than SMALL_ARRAY and
    #                              other arrays longer than LAYER_ARRAY: left out)
    array_lengths: Mapping[str, int]  # every array key -> its number of items
    tensors: tuple  # of GGUFTensor, every shard's, in file order
    header_bytes: int = 0  # of the first file: its key/values and tensor table end here (what a reader needs of it)

    @property
    def weight_bytes(self) -> int:
        """Bytes of every tensor as stored, summed."""
        return sum(t.nbytes for t in self.tensors)

    def tensor(self, name: str) -> GGUFTensor | None:
        return self._by_name().get(name)

    def _by_name(self) -> dict:
        got = self.__dict__.get("_names")
        if got is None:
            got = {t.name: t for t in self.tensors}
            object.__setattr__(self, "_names", got)
        return got

    def placement(self) -> "GGUFPlacement":
        """The tensors' bytes by where llama.cpp places them (:class:`GGUFPlacement`)."""
        n = max((int(t.name.split(".")[1]) + 1 for t in self.tensors
                 if t.name.startswith("blk.") and t.name.split(".")[1].isdigit()), default=0)
        layers = [0] * n
        embedding = output = 0
        for t in self.tensors:
            parts = t.name.split(".")
            if parts[0] == "blk" and len(parts) > 1 and parts[1].isdigit():
                layers[int(parts[1])] += t.nbytes
            elif parts[0] == "token_embd":
                embedding += t.nbytes
            else:
                output += t.nbytes
        tied = self.tensor("output.weight") is None and self.tensor("token_embd.weight") is not None
        duplicated = self.tensor("token_embd.weight").nbytes if tied else 0
        embd = self.tensor("token_embd.weight")
        tokens = self.array_lengths.get("tokenizer.ggml.tokens") or (embd.shape[1] if embd is not None else 0)
        return GGUFPlacement(tuple(layers), embedding, output, duplicated, tokens)

    def describe(self) -> str:
        """One line: the file (and shard count), the quantization, the tensors and their bytes."""
        shards = f" ({len(self.files)} shards)" if len(self.files) > 1 else ""
        kind = self.file_type or "file type not given"
        return (f"{len(self.tensors):,} tensors of {Path(self.files[0]).name}{shards} (GGUF {kind}, "
                f"architecture {self.architecture})")


def _gguf():
    try:
        import gguf
    except ImportError:
        raise MissingDependencyError(MISSING) from None
    return gguf


def is_gguf(path: Any) -> bool:
    """Whether a local path names a GGUF model: a ``.gguf`` file, a file that starts with the GGUF magic, or a
    folder without config.json that holds ``.gguf`` files (cheap: no header is parsed)."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    try:
        p = Path(os.fspath(path)).expanduser()
        st = os.stat(p)
    except (OSError, ValueError, TypeError, RuntimeError):
        return False
    if stat.S_ISDIR(st.st_mode):
        try:
            return not (p / "config.json").exists() and any(_model_files(p))
        except OSError:
            return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if p.suffix.lower() == ".gguf":
        return True
    if p.suffix.lower() == ".json":
        return False
    try:
        with open(p, "rb") as f:
            return f.read(4) == _MAGIC
    except OSError:
        return False


def _model_files(folder: Path) -> list[Path]:
    """The .gguf files of a folder that may hold a model (vision projectors, mmproj-*, are not one)."""
    return sorted(f for f in folder.iterdir() if f.suffix.lower() == ".gguf" and not f.name.lower().startswith("mmproj")
                  and f.is_file())


def gguf_files(path: Any) -> tuple[Path, ...]:
    """The files of the GGUF model a path names, shard order (ConfigError when a shard is missing or a folder
    holds no GGUF model, or several)."""
    p = Path(os.fspath(path)).expanduser()
    if p.is_dir():
        files = _model_files(p)
        if not files:
            raise ConfigError(f"folder {p} has no config.json and no .gguf file")
        models = {}
        for f in files:
            m = _SHARD.match(f.name)
            models.setdefault(m.group("prefix").lower() if m else f.name.lower(), f)
        if len(models) > 1:
            names = ", ".join(sorted(f.name for f in models.values()))
            raise ConfigError(f"folder {p} holds several GGUF models ({names}): name the file to read")
        p = next(iter(models.values()))
    m = _SHARD.match(p.name)
    if m is None:
        return (p,)
    count = int(m.group("count"))
    if not 1 <= int(m.group("no")) <= count:
        raise ConfigError(f"{p}: shard {int(m.group('no'))} of {count} is not a shard number")
    out = []
    for no in range(1, count + 1):
        shard = p.with_name(f"{m.group('prefix')}-{no:05d}-of-{count:05d}.gguf")
        if not shard.is_file():
            raise ConfigError(f"{p}: shard {no} of {count} ({shard.name}) is missing beside it")
        out.append(shard)
    return tuple(out)


def _float32(value: float) -> float:
    """The shortest decimal that is the same float32 (GGUF stores 1e-05 as 9.99999974737875e-06)."""
    for digits in range(1, 10):
        short = float(f"{value:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", short))[0] == value:
            return short
    return value


class _Truncated(Exception):
    pass


class _Header:
    """A GGUF header parsed from a read-only memory map of the file: only the bytes of the header are touched
    (the key/values and the tensor table; the tensor data that follows is never read). Written here with
    struct rather than with ``gguf.GGUFReader``, which parses every item of every array into a numpy array
    of its own (a vocabulary's 150,000 tokens and its merges: seconds and hundreds of MB); the value types,
    GGML types and their sizes are the package's."""

    _SCALARS = {"UINT8": "B", "INT8": "b", "UINT16": "H", "INT16": "h", "UINT32": "I", "INT32": "i",
                "FLOAT32": "f", "BOOL": "?", "UINT64": "Q", "INT64": "q", "FLOAT64": "d"}

    def __init__(self, buf, gguf):
        self.buf, self.pos = buf, 0
        vt = gguf.GGUFValueType
        self.string_type, self.array_type, self.float32 = int(vt.STRING), int(vt.ARRAY), int(vt.FLOAT32)
        self.formats = {int(getattr(vt, name)): struct.Struct("<" + code) for name, code in self._SCALARS.items()}

    def take(self, st: struct.Struct):
        end = self.pos + st.size
        if end > len(self.buf):
            raise _Truncated()
        value = st.unpack_from(self.buf, self.pos)[0]
        self.pos = end
        return value

    def string(self, keep: bool = True) -> str | None:
        n = self.take(_U64)
        end = self.pos + n
        if end > len(self.buf):
            raise _Truncated()
        raw = self.buf[self.pos:end] if keep else None
        self.pos = end
        return None if raw is None else raw.decode("utf-8", "replace")

    def value(self, kind: int, keep: bool = True, limit: int = SMALL_ARRAY):
        """A value of type ``kind`` (an array: (its items or None when longer than ``limit``, its length))."""
        if kind == self.string_type:
            return self.string(keep)
        st = self.formats.get(kind)
        if st is not None:
            return self.take(st)
        if kind != self.array_type:
            raise ValueError(f"unknown value type {kind}")
        item, count = self.take(_U32), self.take(_U64)
        keep = keep and count <= limit
        st = self.formats.get(item)
        if st is not None and not keep:  # fixed-size items: skipped at once
            self.pos += st.size * count
            if self.pos > len(self.buf):
                raise _Truncated()
            return None, count
        items = [self.value(item, keep) for _ in range(count)]
        if keep and item == self.float32:
            items = [_float32(v) for v in items]
        return (tuple(items) if keep else None), count


_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
#: GGML's most dimensions of a tensor, and GGUF's default alignment of the tensor data
_MAX_DIMS, _ALIGNMENT = 4, 32


def _read_one(path: Path, gguf) -> tuple[dict, dict, list, int]:
    """(metadata, array lengths, [(name, type id, shape, offset)], header length) of one file's header."""
    import mmap

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise ConfigError(f"{path}: not a GGUF file ({size} bytes, shorter than a GGUF header)")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise ConfigError(f"no such file: {path}") from None
    except OSError as e:
        raise ConfigError(f"cannot read GGUF file {path}: {e.strerror or e}") from None
    try:
        return _parse_checked(path, buf, size, gguf)
    except _Truncated:
        raise ConfigError(f"{path}: the GGUF header ends past the end of the file (truncated?)") from None
    finally:
        buf.close()


def _parse_checked(path, buf, size: int, gguf) -> tuple[dict, dict, list, int]:
    """:func:`_parse`, its failures one ConfigError naming ``path`` (``_Truncated`` passes: the caller says
    what the end of ``buf`` means)."""
    try:
        return _parse(path, buf, size, gguf)
    except (_Truncated, ConfigError):
        raise
    except (ValueError, struct.error, OverflowError, MemoryError) as e:
        raise ConfigError(f"{path}: not a readable GGUF file ({str(e)[:200]})") from None


def _parse(path: Path, buf, size: int, gguf) -> tuple[dict, dict, list, int]:
    if buf[:4] != _MAGIC:
        raise ConfigError(f"{path}: not a GGUF file (it does not start with the GGUF magic)")
    h = _Header(buf, gguf)
    h.pos = 4
    version = h.take(_U32)
    if version & 0xFFFF == 0:
        raise ConfigError(f"{path}: a big-endian GGUF file; only little-endian files are read")
    if version not in (2, 3):
        raise ConfigError(f"{path}: GGUF version {version}; versions 2 and 3 are read")
    n_tensors, n_kv = h.take(_U64), h.take(_U64)
    # every key/value takes at least 12 bytes and every tensor entry at least 24
    if n_kv * 12 + n_tensors * 24 > size:
        raise ConfigError(f"{path}: the header claims {n_kv:,} key/values and {n_tensors:,} tensors, more than "
                          f"its {size:,} bytes can hold")
    meta: dict = {}
    lengths: dict = {}
    for _ in range(n_kv):
        key = h.string()
        kind = h.take(_U32)
        value = h.value(kind, limit=SMALL_ARRAY if key.startswith("tokenizer.") else LAYER_ARRAY)
        if key in meta or key in lengths:
            raise ConfigError(f"{path}: metadata key {key} is given twice")
        if kind == h.array_type:
            items, lengths[key] = value
            if items is not None:
                meta[key] = items
        else:
            meta[key] = _float32(value) if kind == h.float32 else value
    table = []
    for _ in range(n_tensors):
        name = h.string()
        n_dims = h.take(_U32)
        if not 1 <= n_dims <= _MAX_DIMS:
            raise ConfigError(f"{path}: tensor {name} has {n_dims} dimensions (GGML has 1 to {_MAX_DIMS})")
        shape = tuple(h.take(_U64) for _ in range(n_dims))
        table.append((name, h.take(_U32), shape, h.take(_U64)))
    align = meta.get("general.alignment", _ALIGNMENT)
    if not isinstance(align, int) or isinstance(align, bool) or align <= 0 or align & (align - 1):
        raise ConfigError(f"{path}: general.alignment {align!r} is not a power of two")
    data_start = -(-h.pos // align) * align
    return meta, lengths, [(name, kind, shape, data_start + offset) for name, kind, shape, offset in table], h.pos


def _tensor(name: str, type_id: int, shape: tuple, offset: int, shard: int, path: Path, size: int,
            gguf) -> GGUFTensor:
    """A tensor entry with its bytes: elements / block size * type size (GGML_QUANT_SIZES)."""
    try:
        qt = gguf.GGMLQuantizationType(type_id)
        block, type_size = gguf.GGML_QUANT_SIZES[qt]
    except (ValueError, KeyError):
        raise ConfigError(f"{path}: tensor {name} has GGML type {type_id}, which gguf {_version(gguf)} does not size "
                          "(a newer gguf may)") from None
    elements = 1
    for d in shape:
        elements *= d
    if shape[0] % block:
        raise ConfigError(f"{path}: tensor {name} of {qt.name} has rows of {shape[0]} values, not a whole number of "
                          f"its {block}-value blocks")
    nbytes = elements // block * type_size
    if offset + nbytes > size:
        raise ConfigError(f"{path}: tensor {name} ends at byte {offset + nbytes:,}, past the file's {size:,} "
                          "(a truncated download?)")
    return GGUFTensor(name, qt.name, shape, elements, nbytes, offset, shard)


def _version(gguf) -> str:
    try:
        from importlib.metadata import version

        return version("gguf")
    except Exception:  # noqa: BLE001
        return getattr(gguf, "__version__", "(unknown version)")


def _file_type_name(value: Any, gguf) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        name = gguf.LlamaFileType(value).name
    except ValueError:
        return f"file type {value}"
    for prefix in ("MOSTLY_", "ALL_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def read_gguf(path: Any) -> GGUFModel:
    """The header of the GGUF model ``path`` names (a file, any shard of a split model, a folder); kept per
    files' identity (path, size, modification time), so an unchanged model is parsed once."""
    files = gguf_files(path)
    key = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError as e:
            raise ConfigError(f"cannot read GGUF file {f}: {e.strerror or e}") from None
        key.append((str(f), st.st_size, st.st_mtime_ns))
    return _read_files(tuple(key))


@lru_cache(maxsize=16)
def _read_files(key: tuple) -> GGUFModel:
    gguf = _gguf()
    files = tuple(Path(k[0]) for k in key)
    return _model(files, [(*_read_one(f, gguf), k[1]) for f, k in zip(files, key)], gguf)


def _model(files: tuple, headers: list, gguf) -> GGUFModel:
    """The model of ``files`` from each one's parsed header ((metadata, array lengths, table, header length,
    the file's size)), every tensor checked against its file's size."""
    metadata = lengths = None
    tensors: list = []
    seen: set = set()
    for shard, (f, (meta, arrays, table, _end, size)) in enumerate(zip(files, headers)):
        if shard == 0:
            metadata, lengths = meta, arrays
            count = meta.get("split.count")
            if count is not None and count != len(files):
                raise ConfigError(f"{f}: split.count is {count}, but the file name says {len(files)} shard(s) (a split "
                                  "model's files are named NAME-00001-of-00003.gguf ...)")
        for name, type_id, shape, offset in table:
            if name in seen:
                raise ConfigError(f"{f}: tensor {name} is in more than one shard")
            seen.add(name)
            tensors.append(_tensor(name, type_id, shape, offset, shard, f, size, gguf))
    expected = metadata.get("split.tensors.count")
    if expected is not None and expected != len(tensors):
        raise ConfigError(f"{files[0]}: split.tensors.count is {expected}, but the shards hold {len(tensors)} tensors")
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ConfigError(f"{files[0]}: the GGUF file has no general.architecture")
    return GGUFModel(files=tuple(str(f) for f in files), architecture=arch,
                     file_type=_file_type_name(metadata.get("general.file_type"), gguf),
                     metadata=MappingProxyType(metadata), array_lengths=MappingProxyType(lengths),
                     tensors=tuple(tensors), header_bytes=headers[0][3])


#: general.architecture of a multimodal projector file (llama.cpp's tools/mtmd/clip.cpp loads it; no model).
PROJECTOR_ARCHITECTURE = "clip"


def read_projector(path: Any, setting: str = "mmproj") -> GGUFModel:
    """The header of a multimodal projector's GGUF file (``--mmproj``: general.architecture ``clip``), read as a
    model's is; a file of another architecture is one ConfigError naming ``setting``. A projector is never a model:
    :func:`gguf_config` refuses it as an architecture without a table."""
    p = Path(os.fspath(path)).expanduser()
    if p.is_dir():
        raise ConfigError(f"{setting} {path}: give the projector's .gguf file (mmproj-*.gguf), not a folder")
    model = read_gguf(p)
    if model.architecture != PROJECTOR_ARCHITECTURE:
        raise ConfigError(f"{setting} {path}: general.architecture is {model.architecture!r}, not a projector's "
                          f"({PROJECTOR_ARCHITECTURE!r}, as llama.cpp's convert writes an mmproj file)")
    return model


def read_gguf_bytes(data: bytes, *, size: int, name: str) -> GGUFModel | None:
    """The header of a one-file GGUF model from its first bytes, ``data``, and the file's whole ``size`` in
    bytes (as declared by whoever read them: a browser's File.slice and File.size), the file called ``name``.
    The parser is :func:`read_gguf`'s; each tensor is checked against ``size``, so a truncated file is refused
    as it is when read from disk. None when ``data`` ends inside the header and the file goes on
    (``len(data) < size``): read more of it (:attr:`GGUFModel.header_bytes` of the answer is what is needed).
    A shard of a split model is refused (its tensors are in the other files)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ConfigError(f"{name}: the file's size must be a whole number of bytes, got {str(size)[:60]}")
    if len(data) > size:
        raise ConfigError(f"{name}: {len(data):,} bytes given of a file of {size:,}")
    if size < 24:
        raise ConfigError(f"{name}: not a GGUF file ({size} bytes, shorter than a GGUF header)")
    gguf = _gguf()
    try:
        header = _parse_checked(name, data if isinstance(data, (bytes, bytearray)) else bytes(data), size, gguf)
    except _Truncated:
        if len(data) < size:
            return None
        raise ConfigError(f"{name}: the GGUF header ends past the end of the file (truncated?)") from None
    count = header[0].get("split.count")
    if count is not None and count != 1:
        raise ConfigError(f"{name}: one file of a GGUF model split in {count} files; the model is read from all "
                          "of them (vramwise estimate/fit with the files side by side)")
    return _model((Path(name),), [(*header, size)], gguf)


# -- the tables: formulas/gguf.yaml ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Rule:
    key: str  # the config key
    sources: tuple  # of mappings (the file's sources)
    otherwise: Any  # Expression or None
    optional: bool
    where: str
    missing: str | None = None  # what a file without any of the sources lacks, said when it is refused


@dataclass(frozen=True)
class _Table:
    architecture: str
    model_type: str
    rules: tuple  # of _Rule, common ones first (an architecture's own replaces a common one)
    where: str
    refused: tuple = ()  # of (metadata key, why a file that has it is refused, where)


@lru_cache(maxsize=1)
def tables() -> Mapping[str, _Table]:
    """The bundled tables, compiled (``tables.cache_clear()`` forgets them)."""
    from vramwise.rules.datafiles import load_data_file, package_files, read_data_text

    item = package_files("vramwise.formulas").joinpath("gguf.yaml")
    return compile_tables(load_data_file(read_data_text(item, TABLE_PATH), TABLE_PATH, "gguf-1.schema.json",
                                         validate=False))


def compile_tables(df) -> Mapping[str, _Table]:
    """The tables of a loaded GGUF-tables file, their expressions checked against the config keys of the
    table (an :class:`~vramwise.errors.ExpressionError` names the file, line and node)."""
    from vramwise.rules.expr.language import compile_expression

    common = df.data["common"]
    out = {}
    for arch, entry in df.data["architectures"].items():
        own = entry.get("config") or {}
        merged = {**{k: ("common", k) for k in common}, **{k: ("architectures", arch, "config", k) for k in own}}
        names = frozenset(merged)
        rules = []
        for key, parts in merged.items():
            rule = common[key] if parts[0] == "common" else own[key]
            sources = rule["from"] if isinstance(rule["from"], list) else [rule["from"]]
            otherwise = rule.get("otherwise")
            if otherwise is not None:
                otherwise = compile_expression(otherwise, allowed=names - {key}, df=df, parts=parts + ("otherwise",))
            rules.append(_Rule(key, tuple(MappingProxyType(dict(s)) for s in sources), otherwise,
                               bool(rule.get("optional", False)), df.where(parts), rule.get("missing")))
        refused = tuple((key, why, df.where(("architectures", arch, "refuse", key)))
                        for key, why in (entry.get("refuse") or {}).items())
        out[arch] = _Table(arch, entry["model_type"], tuple(rules), df.where(("architectures", arch)), refused)
    return MappingProxyType(out)


def known_architectures() -> list[str]:
    return sorted(tables())


def _per_layer(value: Any, reduce: str) -> Any:
    """A metadata value that may hold one value a layer (an array), reduced: ``max``, the largest (a number given
    once is itself); ``nonzero_indices``, the layers whose value is not 0 (a number given once: None, every layer
    or none alike, which the config's default says)."""
    if reduce == "max":
        return max(value) if isinstance(value, tuple) else value
    if not isinstance(value, tuple):
        return None
    return [i for i, v in enumerate(value) if v]


def _source_value(model: GGUFModel, source: Mapping, arch: str) -> Any:
    """The value ``source`` finds in the file, or None when the file has no such key or tensor."""
    if "key" in source:
        key = source["key"].replace("{arch}", arch)
        value = model.metadata.get(key)
        if value is not None and "reduce" in source:
            return _per_layer(value, source["reduce"])
        if value is None and key in model.array_lengths:
            raise ConfigError(f"{model.files[0]}: metadata {key} holds an array of {model.array_lengths[key]} values "
                              "(one per layer); per-layer values are not read from GGUF files yet")
        if isinstance(value, tuple):
            raise ConfigError(f"{model.files[0]}: metadata {key} holds an array of {len(value)} values (one per "
                              "layer); per-layer values are not read from GGUF files yet")
        return value
    if "length" in source:
        return model.array_lengths.get(source["length"].replace("{arch}", arch))
    if "tensor" in source:
        t = model.tensor(source["tensor"])
        return t.shape[source["dim"]] if t is not None and source["dim"] < len(t.shape) else None
    if "absent" in source:
        return model.tensor(source["absent"]) is None
    return model.tensor(source["present"]) is not None


def _describe(source: Mapping, arch: str) -> str:
    if "key" in source:
        return f"metadata {source['key'].replace('{arch}', arch)}"
    if "length" in source:
        return f"the length of metadata {source['length']}"
    return f"dimension {source['dim']} of tensor {source['tensor']}"


def gguf_config(model: GGUFModel) -> dict:
    """The config.json of a GGUF model: its model type and each key its architecture's table maps."""
    table = tables().get(model.architecture)
    if table is None:
        raise ConfigError(f"{model.files[0]}: GGUF architecture {model.architecture!r} has no table in {TABLE_PATH} "
                          f"(known: {', '.join(known_architectures())})")
    for key, why, where in table.refused:
        name = key.replace("{arch}", model.architecture)
        if name in model.metadata or name in model.array_lengths:
            raise ConfigError(f"{model.files[0]}: the GGUF file has metadata {name}: {why} ({where})")
    config: dict = {"model_type": table.model_type}
    pending = []
    for rule in table.rules:
        value = None
        for source in rule.sources:
            value = _source_value(model, source, model.architecture)
            if value is not None:
                break
        if value is not None:
            config[rule.key] = value
        elif rule.otherwise is not None:
            pending.append(rule)
        elif not rule.optional:
            found = " or ".join(_describe(s, model.architecture) for s in rule.sources)
            why = f": {rule.missing}" if rule.missing else ""
            raise ConfigError(f"{model.files[0]}: the GGUF file has no {found} (the config's {rule.key}; "
                              f"{rule.where}){why}")
    for rule in pending:
        try:
            config[rule.key] = rule.otherwise.evaluate(config)
        except (EvaluationError, KeyError, TypeError, ArithmeticError) as e:
            raise ConfigError(f"{model.files[0]}: the config's {rule.key} cannot be derived ({rule.where}): {e}") from None
    return config
