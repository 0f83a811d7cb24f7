"""Records of real runs: what vramwise predicted for a training run and what the run then used.

:mod:`vramwise.records.runs` keeps them in a local SQLite database (written by
:class:`vramwise.integrations.transformers.MemoryCheckCallback`, listed by ``vramwise runs``).
"""

from vramwise.records.runs import (
    DEFAULT_LIMIT,
    ENV_VAR,
    SCHEMA_VERSION,
    Run,
    RunsDB,
    default_path,
    error_percent,
    summarize,
)

__all__ = ["DEFAULT_LIMIT", "ENV_VAR", "SCHEMA_VERSION", "Run", "RunsDB", "default_path", "error_percent", "summarize"]
