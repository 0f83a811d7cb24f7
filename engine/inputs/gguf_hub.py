"""The GGUF files of a Hugging Face hub repository, their headers only, read by HTTP range requests.

:func:`hub_gguf` lists a repository's ``.gguf`` files and their sizes at one commit (huggingface_hub's
``model_info``; vision projectors and importance matrices left out) and groups them into models
(:mod:`vramwise.inputs.gguf_sets`).
:func:`fetch_header` reads one model's headers: for each of its files the first :data:`FIRST_BYTES` (8 MiB) with a
range request of the file's resolve URL at that commit, written at offset 0 of a sparse file truncated to the size
the hub reports, so :func:`vramwise.inputs.gguf.read_gguf` parses it unchanged from its memory map (it touches the
header's pages only; the rest of the file reads as zeros and is never read). Where a header is longer than the
bytes fetched (the tensor data would start past them, or the parse ran into the zeros) the range doubles, up to
:data:`MAX_HEADER_BYTES`. No weight is downloaded and no code of the repository runs.

Offline (``HF_HUB_OFFLINE``) or without a network, one line says so and names the ways on (a local folder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from vramwise.errors import ConfigError
from vramwise.inputs.gguf_sets import GGUFSet, group_gguf

__all__ = ["HubFile", "HubGGUF", "hub_gguf", "fetch_header", "FIRST_BYTES", "MAX_HEADER_BYTES", "ways_on"]

#: The first range read of each file.
FIRST_BYTES = 8 * 2**20
#: The longest header read (a range doubles up to it).
MAX_HEADER_BYTES = 256 * 2**20
#: Seconds a request may wait for the hub.
TIMEOUT = 30.0


@dataclass(frozen=True)
class HubFile:
    path: str  # in the repository
    size: int  # bytes, as the hub reports them (the LFS object's size)


@dataclass(frozen=True)
class HubGGUF:
    """A repository's GGUF models at one commit."""

    repo: str
    revision: str  # the commit every file is read at
    endpoint: str
    files: tuple  # of HubFile, the .gguf files of the models (no projector, no importance matrix)
    models: tuple  # of GGUFSet over the files' paths

    def size(self, path: str) -> int:
        return next(f.size for f in self.files if f.path == path)

    def url(self, path: str) -> str:
        """The file's resolve URL at the commit."""
        return f"{self.endpoint}/{self.repo}/resolve/{quote(self.revision, safe='')}/{quote(path)}"


def ways_on(repo: str) -> str:
    return (f"download the quantizations to compare into a folder (hf download {repo} --include '*Q4_K_M*' "
            f"--local-dir DIR) and give the folder, or give one downloaded .gguf file")


def _offline_error(repo: str, why: str) -> ConfigError:
    return ConfigError(f"cannot read the GGUF headers of hub:{repo}: {why}; ways on: {ways_on(repo)}")


def _network() -> tuple:
    from vramwise.inputs.config import _network_errors

    try:
        import httpx2

        extra: tuple = (httpx2.TransportError,)
    except Exception:  # noqa: BLE001 - huggingface_hub's client of another release
        extra = ()
    try:
        import httpx

        extra += (httpx.TransportError,)
    except Exception:  # noqa: BLE001
        pass
    return _network_errors() + extra + (OSError,)


def hub_gguf(repo: str, *, endpoint: str | None = None, revision: str | None = None) -> HubGGUF:
    """The ``.gguf`` files of hub repository ``repo`` (``ORG/NAME``) with their sizes, at ``revision`` (None: the
    default branch, pinned to its commit), and the models they make; ``endpoint``: the hub's address (None:
    huggingface_hub's, ``HF_ENDPOINT``)."""
    from vramwise.inputs.config import _hub_offline

    if _hub_offline():
        raise _offline_error(repo, "HF_HUB_OFFLINE is set (unset it to list the repository's files)")
    try:
        from huggingface_hub import HfApi, constants
        from huggingface_hub import errors as hub_errors
    except ImportError:
        raise ConfigError("reading a hub repository needs huggingface_hub (pip install huggingface_hub)") from None
    endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    try:
        info = HfApi(endpoint=endpoint).model_info(repo, revision=revision, files_metadata=True, timeout=TIMEOUT)
    except hub_errors.OfflineModeIsEnabled:
        raise _offline_error(repo, "HF_HUB_OFFLINE is set (unset it to list the repository's files)") from None
    except hub_errors.RepositoryNotFoundError:
        raise ConfigError(f"hub:{repo}: no such repository on {endpoint} (or it is private or gated: log in with "
                          "hf auth login)") from None
    except hub_errors.RevisionNotFoundError:
        raise ConfigError(f"hub:{repo}: no revision {revision!r}") from None
    except hub_errors.HfHubHTTPError as e:
        if getattr(getattr(e, "response", None), "status_code", None) == 404:
            raise ConfigError(f"hub:{repo}: no such repository on {endpoint} (or it is private or gated: log in with "
                              "hf auth login)") from None
        raise ConfigError(f"hub:{repo}: the hub answered {_first_line(e)}") from None
    except _network() as e:
        raise _offline_error(repo, f"the hub at {endpoint} cannot be reached ({type(e).__name__})") from None
    files = []
    for s in info.siblings or ():
        if not s.rfilename.lower().endswith(".gguf"):
            continue
        size = s.lfs.size if s.lfs is not None else s.size
        if not isinstance(size, int) or size < 0:
            raise ConfigError(f"hub:{repo}: the hub gives no size for {s.rfilename}")
        files.append(HubFile(s.rfilename, size))
    models = group_gguf(f.path for f in files)
    if not models:
        raise ConfigError(f"hub:{repo} holds no .gguf model file (the llama.cpp profile reads GGUF files; a "
                          "repository of safetensors is estimated by its hub id without --profile llama.cpp)")
    kept = {p for m in models for p in m.files}
    return HubGGUF(repo, info.sha or revision or "main", endpoint, tuple(f for f in files if f.path in kept), models)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _get_range(hub: HubGGUF, path: str, start: int, end: int) -> bytes:
    """Bytes ``start`` to ``end`` (inclusive) of a file, by one range request (a server that ignores the range is
    read only up to ``end``)."""
    from huggingface_hub.utils import build_hf_headers, get_session

    want = end - start + 1
    headers = {**build_hf_headers(), "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
    url = hub.url(path)
    try:
        with get_session().stream("GET", url, headers=headers, timeout=TIMEOUT, follow_redirects=True) as r:
            if r.status_code >= 400:
                raise ConfigError(f"hub:{hub.repo}: {path}: the hub answered HTTP {r.status_code} to a range request")
            skip = 0
            if r.status_code == 206:
                total = r.headers.get("content-range", "").rpartition("/")[2]
                if total.isdigit() and int(total) != hub.size(path):
                    raise ConfigError(f"hub:{hub.repo}: {path} is {int(total):,} bytes, not the {hub.size(path):,} "
                                      "the hub's listing gives")
            else:  # the whole file: read what was asked for, no further
                skip = start
            got = bytearray()
            for chunk in r.iter_bytes():
                got += chunk
                if len(got) >= skip + want:
                    break
    except ConfigError:
        raise
    except _network() as e:
        raise _offline_error(hub.repo, f"the hub at {hub.endpoint} cannot be reached ({type(e).__name__})") from None
    data = bytes(got[skip:skip + want])
    if len(data) != want:
        raise ConfigError(f"hub:{hub.repo}: {path}: {len(data):,} bytes came back for a range of {want:,}")
    return data


def _write_sparse(path: Path, data: bytes, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.truncate(size)


def fetch_header(hub: HubGGUF, model: GGUFSet, dest: Any, *, first: int = FIRST_BYTES,
                 cap: int = MAX_HEADER_BYTES):
    """Read ``model``'s headers (each of its files') into sparse files under the folder ``dest``, and parse them:
    the :class:`~vramwise.inputs.gguf.GGUFModel` and the path of its first file under ``dest`` (the model as a
    local file while ``dest`` is kept)."""
    from vramwise.inputs.gguf import read_gguf

    sizes = {p: hub.size(p) for p in model.files}
    have = {p: b"" for p in model.files}
    want = {p: min(first, sizes[p], cap) for p in model.files}
    root = Path(os.fspath(dest))
    for attempt in range(64):
        for p in model.files:
            if len(have[p]) < want[p]:
                have[p] += _get_range(hub, p, len(have[p]), want[p] - 1)
        here = root / str(attempt)  # a fresh name each time: the parse is kept per file identity
        for p in model.files:
            _write_sparse(here / PurePosixPath(p), have[p], sizes[p])
        error = None
        try:
            got = read_gguf(here / PurePosixPath(model.files[0]))
        except ConfigError as e:  # the parse ran into the zeros, or the file is not readable
            error, short = e, [p for p in model.files if len(have[p]) < sizes[p]]
            named = [p for p in short if str(e).startswith(f"{here / PurePosixPath(p)}:")]
            short = named or short  # the file the error names, else every one read in part
        else:
            starts: dict = {}
            for t in got.tensors:
                starts[t.shard] = min(starts.get(t.shard, t.offset), t.offset)
            # every header byte lies before the file's first tensor data; a file without tensors is read whole
            short = [p for i, p in enumerate(model.files)
                     if len(have[p]) < sizes[p] and (i not in starts or starts[i] > len(have[p]))]
            if not short:
                return got, str(here / PurePosixPath(model.files[0]))
        if not short:
            raise error
        for p in short:
            if want[p] >= cap:
                raise ConfigError(f"hub:{hub.repo}: {p}: its GGUF header is longer than {cap:,} bytes, the most read; "
                                  "download the file and give it")
            want[p] = min(2 * want[p], sizes[p], cap)
    raise ConfigError(f"hub:{hub.repo}: {model.files[0]}: the header could not be read")  # pragma: no cover
