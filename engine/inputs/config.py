"""Reading a model's config from where the caller names it: a config.json path or folder, a mapping,
a PretrainedConfig, a catalog name or a hub id; or a GGUF file, its shards or their folder, whose
metadata :mod:`vramwise.inputs.gguf` maps to a config (with the ``gguf`` extra).

Reading a local file needs neither torch nor transformers. A hub id goes
through transformers' ``AutoConfig`` (local cache and ``HF_HUB_OFFLINE``
honoured); remote code is never run unless the caller passes
``trust_remote_code=True``. A hub config whose model type transformers does
not know is then read as its raw ``config.json``.

Local JSON files (``config.json`` and ``model.safetensors.index.json``) are read
defensively: every way such a file can be bad ends as one :class:`ConfigError`
that names the path. The limits:

- a config is at most :data:`MAX_CONFIG_BYTES` (16 MiB), a weights index at most
  :data:`MAX_INDEX_BYTES` (64 MiB), checked on the file's size before it is read;
- the text is UTF-8 (a leading UTF-8 byte-order mark is accepted; UTF-16 and other
  encodings are rejected);
- arrays and objects nest at most :data:`MAX_JSON_DEPTH` (64) levels; a file holds at most
  :data:`MAX_JSON_VALUES` (1,000,000) values and :data:`MAX_JSON_CONTAINERS` (100,000) arrays and
  objects, so that memory stays bounded;
- integers have at most 4,300 digits (Python's own limit) and numbers are finite:
  ``NaN``, ``Infinity`` and floats that overflow (``1e400``) are rejected;
- the file is a regular, non-empty file holding a JSON object.

A hub id fails fast when the hub cannot be reached: one request with a short timeout
(:data:`HUB_PROBE_TIMEOUT` seconds, or ``HF_HUB_ETAG_TIMEOUT`` when that is set),
no retries; a config already in the local cache is then used offline, otherwise the
error says how to work offline.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Mapping

from vramwise.errors import ConfigError

__all__ = ["read_config", "parse_json_bytes", "text_view", "checkpoint_size", "checkpoint_source", "stored_placement", "MAX_CONFIG_BYTES", "MAX_INDEX_BYTES", "MAX_JSON_DEPTH"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

#: the largest config.json read (real configs are a few KiB; the largest known are under 1 MiB)
MAX_CONFIG_BYTES = 16 * 2**20
#: the largest model.safetensors.index.json read (its weight map lists every tensor)
MAX_INDEX_BYTES = 64 * 2**20
#: the deepest nesting of arrays and objects accepted in a JSON file
MAX_JSON_DEPTH = 64
#: seconds the hub may take to answer the first request before it counts as unreachable
HUB_PROBE_TIMEOUT = 5.0

_UTF8_BOM = b"\xef\xbb\xbf"
# a JSON string, or one of the non-standard constants Python's json module accepts
_STRING_OR_CONSTANT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(-?Infinity|NaN)', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
#: at most this many values (commas) and this many arrays and objects in one JSON file, so that
#: what a file of the largest size allowed expands to in memory stays bounded (about 100 MB)
MAX_JSON_VALUES = 1_000_000
MAX_JSON_CONTAINERS = 100_000


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def _os_reason(e: OSError) -> str:
    import errno

    if e.errno == errno.ENAMETOOLONG:
        return "the path or one of its components is too long (a file name may have at most 255 characters)"
    if isinstance(e, PermissionError):
        return "permission denied"
    return e.strerror or str(e) or type(e).__name__


def _stat(path: Path, what: str) -> os.stat_result | None:
    """``os.stat`` of ``path``; None when it does not exist; ConfigError for any other OS error."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {_os_reason(e)}") from None
    except ValueError as e:  # an embedded NUL byte
        raise ConfigError(f"cannot read {what} {path!r}: {e}") from None


class _BadNumber(ValueError):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(text)
    return value


def _reject_constant(name: str):
    raise _BadNumber(name)


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _json_shape_problem(text: str) -> str | None:
    """Why ``text`` holds too many values or nests too deep (strings ignored), else None.

    Cheap for real configs: the raw counts of brackets and commas bound the real ones, and only
    when those are large are the strings taken out (escapes first, then every other ``"`` piece).
    """
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH and text.count(",") < MAX_JSON_VALUES:
        return None
    bare = "".join(text.replace("\\\\", "").replace('\\"', "").split('"')[0::2])
    if bare.count(",") >= MAX_JSON_VALUES:
        return f"more than {MAX_JSON_VALUES:,} values"
    brackets = bare.encode("utf-8", "replace").translate(None, _NOT_BRACKETS)
    opens = brackets.count(b"[") + brackets.count(b"{")
    if opens > MAX_JSON_CONTAINERS:
        return f"more than {MAX_JSON_CONTAINERS:,} arrays and objects"
    if opens <= MAX_JSON_DEPTH or len(brackets) > 2 * MAX_JSON_CONTAINERS + 2:
        return None  # shallow, or unbalanced: the parser reports it
    from array import array
    from itertools import accumulate

    if max(accumulate(array("b", brackets.translate(_DEPTH_STEP)))) > MAX_JSON_DEPTH:
        return f"arrays and objects nest deeper than {MAX_JSON_DEPTH} levels"
    return None


def _read_json(path: Path, *, what: str = "config", limit: int = MAX_CONFIG_BYTES) -> dict:
    """A JSON object from a local file, or one ConfigError naming the file (see the module's limits)."""
    st = _stat(path, what)
    if st is None:
        raise ConfigError(f"no such file: {path}")
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{path} is a folder, not a {what} file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path} is not a regular file (a {what} must be a UTF-8 JSON file)")
    if st.st_size > limit:
        raise ConfigError(f"{path}: {_size(st.st_size)} is larger than the {_size(limit)} a {what} file may have")
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {_os_reason(e)}") from None
    if len(raw) > limit:
        raise ConfigError(f"{path}: larger than the {_size(limit)} a {what} file may have")
    return parse_json_bytes(raw, str(path), what=what, limit=limit)


def parse_json_bytes(raw: bytes, path: str, *, what: str = "config", limit: int = MAX_CONFIG_BYTES) -> dict:
    """A JSON object from bytes read elsewhere (an upload), checked as a local file is: UTF-8, the
    nesting and count limits, finite numbers; ``path`` names it in the one ConfigError."""
    if len(raw) > limit:
        raise ConfigError(f"{path}: larger than the {_size(limit)} a {what} file may have")
    if raw.startswith(b"GGUF"):
        raise ConfigError(f"{path}: a GGUF file (llama.cpp's quantized weights), not a JSON {what}: vramwise reads one "
                          "from its path, for inference (vramwise estimate MODEL.gguf --method inference)")
    if raw.startswith(_UTF8_BOM):
        raw = raw[len(_UTF8_BOM):]
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(raw) >= 2 and b"\x00" in raw[:4]):
        raise ConfigError(f"{path}: the file looks like UTF-16; a {what} must be UTF-8 JSON")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}); a {what} must be UTF-8 JSON"
        ) from None
    if not text.strip():
        raise ConfigError(f"{path}: the file is empty; a {what} must be a JSON object")
    shape = _json_shape_problem(text)
    if shape is not None:
        raise ConfigError(f"{path}: a {what} file may not hold {shape}" if shape.startswith("more")
                          else f"{path}: invalid JSON: {shape}")
    try:
        data = json.loads(text, parse_float=_finite_float, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except _BadNumber as e:
        where = ""
        for m in _STRING_OR_CONSTANT.finditer(text):
            if m.group(1):
                line, col = _line_col(text, m.start(1))
                where = f":{line}:{col}"
                break
        raise ConfigError(
            f"{path}{where}: invalid JSON: {e.args[0][:40]} is not a finite number (NaN and Infinity are not JSON)"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid JSON: arrays and objects nest too deep") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise ConfigError(f"{path}: invalid JSON: {_first_line(e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} must be a JSON object, got {type(data).__name__}")
    return data


def _local_path(model: Any) -> tuple[str, Path]:
    """The text and the expanded path of a model named by a str or PathLike (ConfigError when it is no path)."""
    try:
        text = os.fspath(model)
    except TypeError as e:
        raise ConfigError(f"cannot read a model from {type(model).__name__}: {e}") from None
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\x00" in text:
        raise ConfigError(f"cannot read {text!r}: a path may not contain a NUL character")
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~user that cannot be expanded: taken literally
        path = Path(text)
    return text, path


def local_kind(model: Any) -> str | None:
    """``"dir"``, ``"file"`` (anything that is not a folder) or None (nothing there) for a model named by a path.

    OS errors other than "does not exist" (permission, a component too long) raise ConfigError.
    """
    if not isinstance(model, (str, os.PathLike)):
        return None
    text, path = _local_path(model)
    if not text:
        return None
    st = _stat(path, "model path")
    if st is None:
        return None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def read_config(model: Any, *, trust_remote_code: bool = False) -> tuple[dict, str]:
    """Return ``(config mapping, description of where it came from)``."""
    if isinstance(model, Mapping):
        return dict(model), "mapping"
    if hasattr(model, "to_dict") and hasattr(model, "model_type"):
        return model.to_dict(), f"{type(model).__name__} object"
    if not isinstance(model, (str, os.PathLike)):
        raise ConfigError(
            f"cannot read a model from {type(model).__name__}: pass a config.json path, a model folder, "
            "a dict, a transformers PretrainedConfig or a hub id"
        )
    text, path = _local_path(model)
    if not text:
        raise ConfigError("no model given: the path is empty")
    from vramwise.inputs.catalog import CATALOG_PREFIX, HUB_PREFIX, catalog_model, find_model

    if isinstance(model, str) and text.startswith(HUB_PREFIX):  # the hub even when the catalog has it
        repo = text[len(HUB_PREFIX):]
        if not _HUB_ID.match(repo):
            raise ConfigError(f"{text[:200]!r}: after {HUB_PREFIX!r} give a hub id such as meta-llama/Llama-3.1-8B")
        return _read_hub(repo, trust_remote_code), f"hub:{repo}"
    if isinstance(model, str) and text.startswith(CATALOG_PREFIX):
        entry = catalog_model(text[len(CATALOG_PREFIX):])
        return _catalog_config(entry), f"catalog:{entry.id}"
    st = _stat(path, "config")
    if st is not None and stat.S_ISDIR(st.st_mode):
        cfg = path / "config.json"
        cst = _stat(cfg, "config")
        if cst is None:
            from vramwise.inputs.gguf import is_gguf

            if is_gguf(path):
                return _gguf_config(path)
            raise ConfigError(f"folder {path} has no config.json (nor a .gguf file)")
        return _read_json(cfg), str(cfg)
    if st is not None:
        if not path.name.lower().endswith(".json"):
            from vramwise.inputs.gguf import is_gguf

            if is_gguf(path):
                return _gguf_config(path)
        return _read_json(path), str(path)
    entry = find_model(text) if isinstance(model, str) else None
    if entry is not None:  # the bundled catalog, before the hub: no network, no cache
        return _catalog_config(entry), f"catalog:{entry.id}"
    if _HUB_ID.match(text) and not text.endswith(".json"):
        return _read_hub(text, trust_remote_code), f"hub:{text}"
    raise ConfigError(f"no such file or folder: {text}")


def _gguf_config(path: Path) -> tuple[dict, str]:
    """The config a GGUF model's metadata maps to (:mod:`vramwise.inputs.gguf`), and its first file."""
    from vramwise.inputs.gguf import gguf_config, read_gguf

    model = read_gguf(path)
    return gguf_config(model), model.files[0]


def _catalog_config(entry) -> dict:
    """A private copy of a catalog entry's config (the catalog itself is never modified)."""
    return json.loads(json.dumps(entry.config))


# -- the hub ---------------------------------------------------------------------------------------

def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _hub_offline() -> bool:
    if _truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(os.environ.get("TRANSFORMERS_OFFLINE")):
        return True
    try:
        from huggingface_hub import constants

        return bool(constants.is_offline_mode())
    except Exception:  # noqa: BLE001 - an unusual huggingface_hub: treat as online
        return False


def _probe_timeout() -> float:
    try:
        value = float(os.environ.get("HF_HUB_ETAG_TIMEOUT", ""))
    except ValueError:
        return HUB_PROBE_TIMEOUT
    return value if math.isfinite(value) and value > 0 else HUB_PROBE_TIMEOUT


def _network_errors() -> tuple[type[BaseException], ...]:
    """The exception types huggingface_hub retries on: the hub was not reached at all."""
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from huggingface_hub.utils import _http

        kinds.extend(getattr(_http, "_DEFAULT_RETRY_ON_EXCEPTIONS", ()))
    except Exception:  # noqa: BLE001
        pass
    return tuple(kinds)


def _hub_reachable(repo_id: str) -> bool:
    """One HEAD request for the repo's config.json with a short timeout and no retry.

    False when the hub could not be reached (no network, DNS failure, timeout); True when it
    answered, whatever the answer (a missing or gated repo is reported by the normal path).
    """
    try:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
    except Exception:  # noqa: BLE001 - no huggingface_hub: the normal path reports it
        return True
    network = _network_errors()
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=_probe_timeout())
    except network:
        return False
    except Exception:  # noqa: BLE001 - the hub answered (404, 401, ...)
        return True
    return True


def _cached_config(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001
        return False


def _read_hub(repo_id: str, trust_remote_code: bool) -> dict:
    """A hub config through transformers' AutoConfig (cache and offline mode honoured).

    When transformers does not know the model type and remote code is not allowed, the raw
    config.json is read instead (no code runs) and the generic family takes it. When the hub
    cannot be reached, a cached config is used offline; without one the error says how to
    work offline, after one short request (no retry storm).
    """
    offline = _hub_offline()
    local_only = offline  # HF_HUB_OFFLINE honoured even when it was set after huggingface_hub was imported
    if not offline and not _hub_reachable(repo_id):
        if not _cached_config(repo_id):
            raise ConfigError(f"cannot reach the Hugging Face hub to get {repo_id!r}; ways on: {_ways_on(repo_id)}")
        local_only = True  # the hub is unreachable but the cache has the config: use it as offline mode would
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(
            repo_id, trust_remote_code=trust_remote_code, **({"local_files_only": True} if local_only else {})
        ).to_dict()
    except Exception as e:  # noqa: BLE001 - fall back to the raw file, or report one clear message
        if trust_remote_code:
            raise ConfigError(f"cannot load the config of {repo_id!r}: {type(e).__name__}: {_first_line(e)}") from None
    try:
        from huggingface_hub import hf_hub_download

        local = hf_hub_download(repo_id, "config.json", **({"local_files_only": True} if local_only else {}))
    except Exception as e:  # noqa: BLE001
        if offline and not _cached_config(repo_id):
            raise ConfigError(
                f"cannot get config.json of {repo_id!r}: it is not in the local Hugging Face cache and "
                f"HF_HUB_OFFLINE is set (unset it to download the config); ways on: {_ways_on(repo_id)}"
            ) from None
        raise ConfigError(
            f"cannot get config.json of {repo_id!r} from the hub or the local cache ({_first_line(e)}); "
            f"ways on: {_ways_on(repo_id)}"
        ) from None
    return _read_json(Path(local))


def _ways_on(repo_id: str) -> str:
    from vramwise.inputs.catalog import ways_on

    return ways_on(repo_id)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def text_view(root: Mapping) -> Mapping:
    """The text tower of a config: its ``text_config`` when it has one, else the config itself."""
    sub = root.get("text_config")
    return sub if isinstance(sub, Mapping) else root


def checkpoint_size(model: Any) -> tuple[int | None, str | None]:
    """Bytes of the weights stored beside a local config, and where the figure comes from.

    ``model.safetensors.index.json``'s ``metadata.total_size`` when present, else the sizes of the
    ``*.safetensors`` files; ``(None, None)`` for models not named by a local folder or file.
    An index that cannot be read as JSON (see the module's limits) is a ConfigError naming it;
    an index without a positive integer ``metadata.total_size`` is passed over for the files' sizes.
    A GGUF model's figure is its tensors' bytes as stored (see :func:`checkpoint_source`).
    """
    size, origin, _ = checkpoint_source(model)
    return size, origin


def checkpoint_source(model: Any) -> tuple[int | None, str | None, str | None]:
    """:func:`checkpoint_size`'s bytes and origin, and the format of a checkpoint a runtime loads as it is
    stored: ``"GGUF"`` and its file type (``"GGUF Q4_K_M"``) for a GGUF model (the bytes are its tensors', each
    by its GGML type, summed), else None
    (the bytes are the files' sizes beside a config, what its 16-bit weights do not explain)."""
    if not isinstance(model, (str, os.PathLike)):
        return None, None, None
    kind = local_kind(model)
    if kind is None:
        return None, None, None
    _, path = _local_path(model)
    if kind == "dir" or not path.name.lower().endswith(".json"):
        from vramwise.inputs.gguf import is_gguf, read_gguf

        if is_gguf(path):
            gg = read_gguf(path)
            return gg.weight_bytes, gg.describe(), f"GGUF {gg.file_type}" if gg.file_type else "GGUF"
    size, origin = _beside_config(path, kind)
    return size, origin, None


def stored_placement(model: Any):
    """The :class:`~vramwise.inputs.gguf.GGUFPlacement` of a GGUF model (its tensors' bytes by where
    llama.cpp places them), None for anything else."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    kind = local_kind(model)
    if kind is None:
        return None
    _, path = _local_path(model)
    if kind == "dir" or not path.name.lower().endswith(".json"):
        from vramwise.inputs.gguf import is_gguf, read_gguf

        if is_gguf(path):
            return read_gguf(path).placement()
    return None


def _beside_config(path: Path, kind: str) -> tuple[int | None, str | None]:
    folder = path if kind == "dir" else path.parent
    index = folder / "model.safetensors.index.json"
    ist = _stat(index, "weights index")
    if ist is not None:
        data = _read_json(index, what="weights index", limit=MAX_INDEX_BYTES)
        meta = data.get("metadata")
        total = meta.get("total_size") if isinstance(meta, dict) else None
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            return total, str(index)
    try:
        files = sorted(folder.glob("*.safetensors"))
    except OSError as e:
        raise ConfigError(f"cannot list the weights in {folder}: {_os_reason(e)}") from None
    if files:
        total = 0
        for f in files:
            try:
                total += f.stat().st_size
            except OSError as e:
                raise ConfigError(f"cannot read weights file {f}: {_os_reason(e)}") from None
        return total, f"{len(files)} safetensors file(s) in {folder}"
    return None, None
