"""The local database of training runs: the predicted and the measured memory of each.

One SQLite file (:func:`default_path`: ``$VRAMWISE_RUNS_DB``, else ``runs.sqlite3`` in the vramwise
folder of the user's cache directory) with one table, ``runs``: a row per run, written when the run
starts (the prediction) and completed after its first steps (the measurement). A run that stops
before it is measured keeps its prediction and an empty measurement.

- The schema is versioned by SQLite's ``user_version``; a file of a newer version is refused, not
  changed.
- Every operation opens its own connection with a busy timeout and writes inside ``BEGIN
  IMMEDIATE``, so several processes (the ranks of a distributed run, runs side by side) can write
  to one file.
- The table is bounded: after each insert only the newest ``limit`` rows (:data:`DEFAULT_LIMIT`)
  are kept, and a JSON column over :data:`MAX_JSON` characters is replaced by a note.

The error of a run is ``(predicted - measured) / measured`` in percent (:func:`error_percent`), the
sign convention of the accuracy page: positive when vramwise predicted more than the run used.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from vramwise.errors import UsageError

__all__ = ["SCHEMA_VERSION", "DEFAULT_LIMIT", "ENV_VAR", "MAX_JSON", "Run", "RunsDB", "default_path",
           "error_percent", "summarize"]

#: the version of the table's layout, kept in SQLite's ``PRAGMA user_version``
SCHEMA_VERSION = 1
#: rows kept: after an insert, older rows beyond this many are deleted
DEFAULT_LIMIT = 10_000
#: the environment variable naming the database file
ENV_VAR = "VRAMWISE_RUNS_DB"
#: characters of one JSON column at most (a larger value is replaced by a note saying so)
MAX_JSON = 256 * 1024
#: seconds a writer waits for another one's lock before giving up
TIMEOUT = 30.0

_COLUMNS = (  # name, SQL type; the JSON columns hold mappings or lists
    ("started", "TEXT NOT NULL"), ("updated", "TEXT"), ("model", "TEXT"), ("profile", "TEXT"), ("method", "TEXT"),
    ("device", "TEXT"), ("device_bytes", "INTEGER"), ("rank", "INTEGER"), ("world_size", "INTEGER"),
    ("predicted_peak", "INTEGER"), ("predicted_reserved", "INTEGER"), ("predicted_total", "INTEGER"),
    ("measured_peak", "INTEGER"), ("measured_reserved", "INTEGER"), ("measured_steps", "INTEGER"),
    ("settings", "TEXT"), ("predicted", "TEXT"), ("measured", "TEXT"), ("versions", "TEXT"), ("notes", "TEXT"),
)
_JSON = frozenset({"settings", "predicted", "measured", "versions", "notes"})
_NAMES = tuple(n for n, _ in _COLUMNS)
_SCHEMA = ("CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY AUTOINCREMENT, "
           + ", ".join(f"{n} {t}" for n, t in _COLUMNS) + ")")


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$VRAMWISE_RUNS_DB``, else ``$XDG_CACHE_HOME/vramwise/runs.sqlite3`` (``~/.cache`` when unset;
    ``%LOCALAPPDATA%`` on Windows)."""
    env = os.environ if environ is None else environ
    given = env.get(ENV_VAR)
    if given:
        return Path(given).expanduser()
    base = env.get("XDG_CACHE_HOME") or (env.get("LOCALAPPDATA") if os.name == "nt" else None)
    root = Path(base).expanduser() if base else Path.home() / ".cache"
    return root / "vramwise" / "runs.sqlite3"


def error_percent(predicted: int | None, measured: int | None) -> float | None:
    """``(predicted - measured) / measured`` in percent; None when either is unknown or nothing was measured."""
    if predicted is None or not measured:
        return None
    return (predicted - measured) / measured * 100.0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _dump(value: Any) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, sort_keys=True, default=str)
    if len(text) > MAX_JSON:
        text = json.dumps({"omitted": f"{len(text):,} characters of JSON, over the {MAX_JSON:,} kept"})
    return text


def _load(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Run:
    """One row: a training run's prediction (bytes) and, once measured, its measurement."""

    id: int
    started: str
    updated: str | None = None
    model: str | None = None
    profile: str | None = None
    method: str | None = None
    device: str | None = None
    device_bytes: int | None = None
    rank: int | None = None
    world_size: int | None = None
    predicted_peak: int | None = None
    predicted_reserved: int | None = None
    predicted_total: int | None = None
    measured_peak: int | None = None
    measured_reserved: int | None = None
    measured_steps: int | None = None
    settings: dict = field(default_factory=dict)
    predicted: dict | None = None
    measured: dict | None = None
    versions: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def error(self) -> float | None:
        """The predicted against the measured tensor peak, in percent (None until measured)."""
        return error_percent(self.predicted_peak, self.measured_peak)

    @property
    def reserved_error(self) -> float | None:
        """The predicted against the measured reserved memory (CUDA), in percent."""
        return error_percent(self.predicted_reserved, self.measured_reserved)

    def to_dict(self) -> dict:
        out = {n: getattr(self, n) for n in ("id", *_NAMES)}
        out["error_percent"] = self.error
        out["reserved_error_percent"] = self.reserved_error
        return out


def summarize(runs: Iterable[Run]) -> list[dict]:
    """Per profile and method: runs, measured runs, and the mean and largest absolute error (percent)."""
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault((r.profile or "", r.method or ""), []).append(r)
    out = []
    for (profile, method), rows in sorted(groups.items()):
        errors = [abs(e) for r in rows if (e := r.error) is not None and math.isfinite(e)]
        out.append({
            "profile": profile or None, "method": method or None, "runs": len(rows), "measured": len(errors),
            "mean_abs_error_percent": sum(errors) / len(errors) if errors else None,
            "max_abs_error_percent": max(errors) if errors else None,
        })
    return out


class RunsDB:
    """The runs database at ``path`` (default: :func:`default_path`), created on the first write.

    ``limit``: rows kept (the newest); ``timeout``: seconds a writer waits for another's lock.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, limit: int = DEFAULT_LIMIT, timeout: float = TIMEOUT):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"limit must be a whole number of runs from 1, got {limit!r}")
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.limit = limit
        self.timeout = timeout

    # -- connections ----------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as e:
            raise UsageError(f"{self.path}: cannot open the runs database: {e}") from None
        con.row_factory = sqlite3.Row
        return con

    def _version(self, con: sqlite3.Connection) -> int:
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as e:
            raise UsageError(f"{self.path}: not a runs database ({e})") from None
        if version > SCHEMA_VERSION:
            raise UsageError(f"{self.path}: a runs database of schema version {version}, newer than this "
                             f"vramwise's ({SCHEMA_VERSION}); upgrade vramwise or name another file")
        return version

    def _write(self, action) -> Any:
        """Run ``action(connection)`` in one write transaction, creating the file and table first."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{self.path}: cannot create its folder: {e}") from None
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            try:
                if self._version(con) < SCHEMA_VERSION:
                    con.execute(_SCHEMA)
                    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                result = action(con)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
            return result
        except sqlite3.DatabaseError as e:
            raise UsageError(f"{self.path}: cannot write the runs database: {e}") from None
        finally:
            con.close()

    # -- writing --------------------------------------------------------------------------
    def add(self, **values: Any) -> int:
        """Insert a run (columns by name, see :class:`Run`; ``started`` defaults to now, UTC); returns its id."""
        row = self._row(values)
        row.setdefault("started", _now())

        def insert(con):
            names = list(row)
            cur = con.execute(f"INSERT INTO runs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                              [row[n] for n in names])
            con.execute("DELETE FROM runs WHERE id NOT IN (SELECT id FROM runs ORDER BY id DESC LIMIT ?)", (self.limit,))
            return int(cur.lastrowid)

        return self._write(insert)

    def update(self, run_id: int, **values: Any) -> bool:
        """Change columns of run ``run_id`` (``updated`` set to now); False when the row is gone (pruned)."""
        row = self._row(values)
        row["updated"] = row.get("updated") or _now()

        def change(con):
            cur = con.execute(f"UPDATE runs SET {', '.join(f'{n} = ?' for n in row)} WHERE id = ?",
                              [*row.values(), int(run_id)])
            return cur.rowcount > 0

        return self._write(change)

    @staticmethod
    def _row(values: Mapping[str, Any]) -> dict:
        unknown = set(values) - set(_NAMES)
        if unknown:
            raise UsageError(f"unknown run field(s) {', '.join(sorted(unknown))} (fields: {', '.join(_NAMES)})")
        return {n: (_dump(v) if n in _JSON else v) for n, v in values.items()}

    # -- reading --------------------------------------------------------------------------
    def runs(self, limit: int | None = None) -> list[Run]:
        """The runs, oldest first (``limit``: only the newest that many); none when the file does not exist."""
        if not self.path.exists():
            return []
        con = self._connect()
        try:
            if self._version(con) == 0:
                return []
            sql = "SELECT * FROM runs ORDER BY id DESC" + (" LIMIT ?" if limit is not None else "")
            rows = con.execute(sql, () if limit is None else (int(limit),)).fetchall()
        except sqlite3.DatabaseError as e:
            raise UsageError(f"{self.path}: cannot read the runs database: {e}") from None
        finally:
            con.close()
        return [self._run(r) for r in reversed(rows)]

    def get(self, run_id: int) -> Run | None:
        """Run ``run_id``, or None when there is no such row."""
        if not self.path.exists():
            return None
        con = self._connect()
        try:
            if self._version(con) == 0:
                return None
            row = con.execute("SELECT * FROM runs WHERE id = ?", (int(run_id),)).fetchone()
        except sqlite3.DatabaseError as e:
            raise UsageError(f"{self.path}: cannot read the runs database: {e}") from None
        finally:
            con.close()
        return None if row is None else self._run(row)

    @staticmethod
    def _run(row: sqlite3.Row) -> Run:
        values = {n: row[n] for n in row.keys()}
        for n in _JSON:
            values[n] = _load(values.get(n))
        for n, empty in (("settings", {}), ("versions", {}), ("notes", [])):
            if not isinstance(values.get(n), type(empty)):
                values[n] = empty
        known = {"id", *_NAMES}
        return Run(**{k: v for k, v in values.items() if k in known})
