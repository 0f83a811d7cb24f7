"""Model sources: a config.json path or folder, a mapping, a PretrainedConfig, or a hub id.

Reading a local file needs neither torch nor transformers. A hub id goes
through transformers' ``AutoConfig`` (local cache and ``HF_HUB_OFFLINE``
honoured); remote code is never run unless the caller passes
``trust_remote_code=True``. A hub config whose model type transformers does
not know is then read as its raw ``config.json``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from ._errors import ConfigError

__all__ = ["read_config", "text_view", "checkpoint_size"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _read_json(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a JSON object, got {type(data).__name__}")
    return data


def read_config(source: Any, *, trust_remote_code: bool = False) -> tuple[dict, str]:
    """Return ``(config mapping, description of where it came from)``."""
    if isinstance(source, Mapping):
        return dict(source), "mapping"
    if hasattr(source, "to_dict") and hasattr(source, "model_type"):
        return source.to_dict(), f"{type(source).__name__} object"
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(
            f"cannot read a model from {type(source).__name__}: pass a config.json path, a model folder, "
            "a dict, a transformers PretrainedConfig or a hub id"
        )
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ConfigError(f"folder {path} has no config.json")
        return _read_json(cfg), str(cfg)
    if path.is_file():
        return _read_json(path), str(path)
    if _HUB_ID.match(text) and not text.endswith(".json"):
        return _read_hub(text, trust_remote_code), f"hub:{text}"
    raise ConfigError(f"no such file or folder: {text}")


def _read_hub(repo_id: str, trust_remote_code: bool) -> dict:
    """A hub config through transformers' AutoConfig (cache and offline mode honoured).

    When transformers does not know the model type and remote code is not allowed, the raw
    config.json is read instead (no code runs) and the generic family takes it.
    """
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(repo_id, trust_remote_code=trust_remote_code).to_dict()
    except Exception as e:  # noqa: BLE001 - fall back to the raw file, or report one clear message
        if trust_remote_code:
            raise ConfigError(f"cannot load the config of {repo_id!r}: {type(e).__name__}: {_first_line(e)}") from None
    try:
        from huggingface_hub import hf_hub_download

        local = hf_hub_download(repo_id, "config.json")
    except Exception as e:  # noqa: BLE001
        raise ConfigError(
            f"cannot get config.json of {repo_id!r} from the hub or the local cache ({_first_line(e)}); "
            "pass a local config.json or model folder instead"
        ) from None
    return _read_json(Path(local))


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def text_view(root: Mapping) -> Mapping:
    """The text tower of a config: its ``text_config`` when it has one, else the config itself."""
    sub = root.get("text_config")
    return sub if isinstance(sub, Mapping) else root


def checkpoint_size(source: Any) -> tuple[int | None, str | None]:
    """Bytes of the weights stored beside a local config, and where the figure comes from.

    ``model.safetensors.index.json``'s ``metadata.total_size`` when present, else the sizes of the
    ``*.safetensors`` files; ``(None, None)`` for sources that are not local folders or files.
    """
    if not isinstance(source, (str, os.PathLike)):
        return None, None
    path = Path(os.fspath(source)).expanduser()
    folder = path if path.is_dir() else path.parent if path.is_file() else None
    if folder is None:
        return None, None
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text(encoding="utf-8"))["metadata"]["total_size"]
            if isinstance(total, int) and total > 0:
                return total, str(index)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return sum(f.stat().st_size for f in files), f"{len(files)} safetensors file(s) in {folder}"
    return None, None
