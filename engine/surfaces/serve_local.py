"""``POST /api/local``: local inference (llama.cpp, Ollama) of a GGUF file the page's user picked on their machine.

The weights never travel: the page reads the first bytes of the file (its header: the key/values and the
tensor table) and sends them as the request body (``application/octet-stream``, at most
:data:`MAX_HEADER_BYTES`), with the file's name and whole size and the settings in the query string, spelled
as the page's address and the command line spell them (``n_ctx=8192``, ``cache_type_k=q8_0``, ``gpu=RTX 4090``,
``headroom=10%``, ``preset=ollama``; ``modelfile``: an Ollama Modelfile's text, whose ``PARAMETER`` lines are
read as ``--modelfile`` reads a file's, and ``ollama_env``: ``NAME=VALUE`` lines read as ``--ollama-env`` reads the
process's environment; either takes the Ollama preset). The header is read by :func:`vramwise.inputs.gguf.read_gguf_bytes` (the
parser of a file on disk; the size declared is the one its tensors are checked against), the model resolved by
its family as a file's is, and the answer is ``fit MODEL.gguf --profile llama.cpp --json`` (or ``--preset
ollama``): :meth:`~vramwise.answers.offload.LocalFit.to_dict`, with ``gguf``: the file as read (name, size,
``header_bytes``, the bytes a request needs, architecture, file type, tensors, weight bytes, family).

Bytes that end inside the header of a longer file are answered ``400`` with ``"more": true``: the page sends a
longer slice (:data:`MAX_HEADER_BYTES` at most).
"""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from vramwise.errors import ConfigError, SettingsError

__all__ = ["api_local", "MAX_HEADER_BYTES", "LOCAL_FIELDS", "MoreBytes"]

#: the largest header the page sends (a vocabulary of 256,000 tokens and its merges take about 10 MiB)
MAX_HEADER_BYTES = 64 * 2**20
#: the settings of the llama.cpp profile a request may give (by their names in vramwise.SETTINGS)
LOCAL_FIELDS = ("n_ctx", "n_gpu_layers", "n_parallel", "cache_type_k", "cache_type_v", "flash_attn", "kv_unified",
                "n_batch", "n_ubatch")
_OWN = ("name", "size", "gpu", "headroom", "preset", "profile", "modelfile", "ollama_env")
#: the largest file size a request may declare (2**50 bytes: a PiB)
_MAX_SIZE = 2**50


class MoreBytes(ConfigError):
    """The bytes sent end inside the header of a longer file (the server answers 400 with ``"more": true``)."""


def _name(text: str) -> str:
    """The file's own name (no folder: a browser gives none, and none is kept)."""
    name = PureWindowsPath(PurePosixPath(text.strip()).name).name
    if not name or len(name) > 255 or any(ord(c) < 32 for c in name):
        raise SettingsError(f"name must be the GGUF file's name, got {text[:60]!r}")
    return name


def _size(text: str) -> int:
    t = text.strip()
    if not t.isdigit() or not 0 < int(t) <= _MAX_SIZE:
        raise SettingsError(f"size must be the file's size in bytes, a whole number from 1 to {_MAX_SIZE:,}, got "
                            f"{t[:60]!r}")
    return int(t)


def _fields(query: dict) -> tuple[dict, dict]:
    """(the request's own fields, the settings), each read as the address reads it (the command line's readers)."""
    from vramwise.profiles.settings import SETTINGS
    from vramwise.surfaces.serve_address import read_address

    unknown = sorted(k for k in query if k not in _OWN and k not in LOCAL_FIELDS)
    if unknown:
        raise SettingsError(f"unknown field(s) {', '.join(k[:60] for k in unknown[:8])}: give name, size, gpu, and "
                            f"any of headroom, preset, profile, modelfile, ollama_env, {', '.join(LOCAL_FIELDS)}")
    for need in ("name", "size", "gpu"):
        if not str(query.get(need, "")).strip():
            raise SettingsError(f"{need} is required (the GGUF file's name and size in bytes, and the GPU)")
    own = {"name": _name(query["name"]), "size": _size(query["size"])}
    read = read_address({k: v for k, v in query.items() if k not in ("name", "size")})
    problems = [f"{k}: {v['error']}" if not v["error"].startswith(k) else v["error"]
                for k, v in read["fields"].items() if "error" in v]
    if problems:
        raise SettingsError("; ".join(problems))
    got = {k: v["value"] for k, v in read["fields"].items()}
    own["gpu"], own["headroom"] = got.pop("gpu"), got.pop("headroom", None)
    own["preset"], own["profile"] = got.pop("preset", None), got.pop("profile", None)
    own["modelfile"], own["ollama_env"] = got.pop("modelfile", None), got.pop("ollama_env", None)
    names = {s.name for s in SETTINGS}
    return own, {k: v for k, v in got.items() if k in names}


def api_local(request: dict) -> dict:
    """The local answers for ``request``: ``{"query": the query's fields, "data": the header's bytes}``."""
    from vramwise.answers.local import local_fit
    from vramwise.estimation.registry import Registry
    from vramwise.inputs.gguf import gguf_config, read_gguf_bytes

    own, settings = _fields(request["query"])
    data = request["data"]
    if not data:
        raise SettingsError("send the first bytes of the GGUF file (its header) as the request body")
    gg = read_gguf_bytes(data, size=own["size"], name=own["name"])
    if gg is None:
        raise MoreBytes(f"the first {len(data):,} bytes of {own['name']} end inside its GGUF header: send more of "
                        f"the file (at most {MAX_HEADER_BYTES:,} bytes)")
    reg = Registry.default()
    fmt = f"GGUF {gg.file_type}" if gg.file_type else "GGUF"
    spec = reg.resolve(gguf_config(gg), origin=own["name"], checkpoint_bytes=gg.weight_bytes,
                       checkpoint_origin=gg.describe(), checkpoint_as_stored=fmt, stored_placement=gg.placement())
    from vramwise.inputs.presets import read_environment, read_modelfile

    modelfile = None if not own["modelfile"] else read_modelfile("Modelfile", text=own["modelfile"])
    environ = None if not own["ollama_env"] else read_environment(own["ollama_env"])
    f = local_fit(spec, gpu=own["gpu"], headroom=own["headroom"], profile=own["profile"], preset=own["preset"],
                  modelfile=modelfile, environ=environ, registry=reg, **settings)
    return {**f.to_dict(), "gguf": {
        "name": own["name"], "size": own["size"], "header_bytes": gg.header_bytes, "architecture": gg.architecture,
        "file_type": gg.file_type, "tensors": len(gg.tensors), "weight_bytes": gg.weight_bytes,
        "family": spec.family, "model_type": spec.model_type, "describe": gg.describe()}}


def presets() -> list[dict[str, Any]]:
    """The runtime presets of local inference (the page's menu beside plain llama.cpp)."""
    from vramwise.inputs.presets import PRESETS, preset

    return [{"name": n, "release": preset(n).release, "summary": preset(n).summary, "profile": preset(n).profile}
            for n in PRESETS]
