"""Checks inside a training script: the run estimated from the trainer's own objects before its first
step, then compared with what its first steps used.

- :mod:`vramwise.integrations.transformers`: :class:`~vramwise.integrations.transformers.MemoryCheckCallback`,
  a ``transformers.TrainerCallback`` (needs transformers; imported only when named).

Each run is recorded in the runs database (:mod:`vramwise.records.runs`) that ``vramwise runs`` lists.
"""

__all__: list = []
