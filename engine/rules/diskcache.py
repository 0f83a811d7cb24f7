"""The compiled data kept between processes: a content-keyed cache on disk.

What reading a data file produces before any rule runs -- its constructed data and the line and column of
each node -- is stored under the user's cache folder, keyed by a digest of the file's bytes, the schema
it is read under, vramwise's version and Python's bytecode magic number. A later process that reads the
same bytes takes the entry instead of composing the YAML again. Beside it, under the same rules: the checked
expressions' code (kind ``expressions``), the family index (``family-index``) and the profiles' generated
dynamic stages (``programs``), each keyed by what it is made from, the source of the code that makes it included.

- Where: ``$VRAMWISE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/vramwise``, else ``~/.cache/vramwise``
  (``%LOCALAPPDATA%\\vramwise`` on Windows), beside the runs database of ``vramwise runs``;
  ``VRAMWISE_CACHE_DIR=""`` (or ``off``) turns the cache off.
- Entries are written to a temporary file and renamed into place, so a reader never sees half an entry;
  each carries a checksum of its content, and an entry that is unreadable, truncated, corrupt or of another
  format is ignored (and written again), never an error and never a figure.
- Entries are :mod:`marshal` data (dicts, lists, strings, numbers), read only from a folder that belongs
  to the user and that no one else may write to; a folder that cannot be created or written is simply not
  used. Each kind's folder holds at most :data:`MAX_ENTRIES` entries and :data:`MAX_KIND_BYTES` bytes, of at
  most :data:`MAX_ENTRY_BYTES` each (the oldest go first), and the whole cache is safe to delete at any time.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from importlib.util import MAGIC_NUMBER

from vramwise.version import VERSION

__all__ = ["cache_dir", "get", "put", "source_digest", "MAX_ENTRIES", "MAX_ENTRY_BYTES", "MAX_KIND_BYTES", "FORMAT"]

#: The entries' format: a new one makes every older entry a miss.
FORMAT = b"vramwise-cache-1"
#: Most entries of one kind kept on disk; beyond it the oldest (by modification time) are removed.
MAX_ENTRIES = 2048
#: Largest entry stored (a larger value is not cached).
MAX_ENTRY_BYTES = 8 << 20
#: Most bytes of one kind's entries kept on disk; beyond it the oldest are removed.
MAX_KIND_BYTES = 64 << 20
#: A process looks over a kind's folder (count and bytes) at its first write there and then every this many writes.
PRUNE_EVERY = 256
_OFF = ("", "off", "0", "none", "false")
_SALT = FORMAT + b"\0" + VERSION.encode() + b"\0" + MAGIC_NUMBER + b"\0" + str(sys.version_info[:2]).encode()
_CHECK = 16  # bytes of the entry's checksum


def cache_dir() -> str | None:
    """The cache folder, or None when the cache is turned off (read at each use, so it can be moved at run time)."""
    environ = os.environ
    key = (environ.get("VRAMWISE_CACHE_DIR"), environ.get("XDG_CACHE_HOME"), environ.get("LOCALAPPDATA"),
           environ.get("HOME"))
    try:
        return _DIRS[key]
    except KeyError:
        pass
    env = key[0]
    if env is not None:
        if env.strip().lower() in _OFF:
            return None
        found = os.path.abspath(os.path.expanduser(env))
        if not os.path.isabs(os.path.expanduser(env)):
            return found  # relative to the working folder, which may change: not remembered
    else:
        base = environ.get("XDG_CACHE_HOME") or (environ.get("LOCALAPPDATA") if os.name == "nt" else None)
        found = os.path.join(os.path.expanduser(base) if base else os.path.join(os.path.expanduser("~"), ".cache"),
                             "vramwise")
    if len(_DIRS) >= 16:
        _DIRS.clear()
    _DIRS[key] = found
    return found


#: cache_dir's answer by the environment variables it reads (a lookup costs four reads of the environment, not the
#: path arithmetic; a relative VRAMWISE_CACHE_DIR is not kept, the working folder can change)
_DIRS: dict = {}


def source_digest(*files: str) -> bytes:
    """A digest of the source files whose code makes an entry (a key's part): an edited checkout whose version
    did not change still never meets an entry made by other code."""
    h = hashlib.blake2b(digest_size=16)
    for name in files:
        try:
            with open(name, "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(b"\0unreadable\0" + name.encode())
    return h.digest()


def _digest(kind: str, key: bytes) -> str:
    return hashlib.blake2b(_SALT + kind.encode() + b"\0" + key, digest_size=20).hexdigest()


def _trusted(folder: str) -> bool:
    """The folder is the user's own and no one else may write to it (POSIX); elsewhere, that it exists."""
    try:
        st = os.stat(folder)
    except OSError:
        return False
    if hasattr(os, "getuid"):
        return st.st_uid == os.getuid() and not st.st_mode & 0o022
    return True


def get(kind: str, key: bytes):
    """The value stored for (``kind``, ``key``), or None when there is none or it cannot be trusted."""
    root = cache_dir()
    if root is None:
        return None
    folder = os.path.join(root, kind)
    try:
        with open(os.path.join(folder, _digest(kind, key)), "rb") as f:
            raw = f.read(MAX_ENTRY_BYTES + _CHECK + 1)
    except OSError:
        return None
    if len(raw) <= _CHECK or len(raw) > MAX_ENTRY_BYTES + _CHECK or not _trusted(folder):
        return None
    body = raw[_CHECK:]
    if hashlib.blake2b(body, digest_size=_CHECK).digest() != raw[:_CHECK]:
        return None
    try:
        return marshal.loads(body)
    except (ValueError, EOFError, TypeError):
        return None


def put(kind: str, key: bytes, value, *, root: str | None = None) -> bool:
    """Store ``value`` (marshal data) for (``kind``, ``key``) in ``root`` (default: :func:`cache_dir`); False, and
    nothing written, when the cache is off, the value cannot be stored or the folder cannot be written."""
    root = root or cache_dir()
    if root is None:
        return False
    try:
        body = marshal.dumps(value)
    except ValueError:  # a type marshal does not store (a YAML timestamp, say): not cached
        return False
    if len(body) > MAX_ENTRY_BYTES:
        return False
    folder = os.path.join(root, kind)
    target = os.path.join(folder, _digest(kind, key))
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not _trusted(folder):
            return False
        with open(tmp, "wb") as f:
            f.write(hashlib.blake2b(body, digest_size=_CHECK).digest() + body)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    writes = _WRITES[folder] = _WRITES.get(folder, -1) + 1
    if writes % PRUNE_EVERY == 0:
        _prune(folder)
    return True


#: Writes of this process by folder (the folder is looked over at the first and every PRUNE_EVERY-th).
_WRITES: dict[str, int] = {}


def _prune(folder: str) -> None:
    """Keep at most MAX_ENTRIES entries and MAX_KIND_BYTES bytes in ``folder``: beyond either, the least recently
    written go, down to three quarters of the bound."""
    try:
        aged = []
        for name in os.listdir(folder):
            try:
                st = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            aged.append((st.st_mtime, st.st_size, name))
    except OSError:
        return
    total = sum(size for _, size, _ in aged)
    if len(aged) <= MAX_ENTRIES and total <= MAX_KIND_BYTES:
        return
    aged.sort()
    count = len(aged)
    for _, size, name in aged:
        if count <= MAX_ENTRIES * 3 // 4 and total <= MAX_KIND_BYTES * 3 // 4:
            break
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            continue
        count, total = count - 1, total - size
