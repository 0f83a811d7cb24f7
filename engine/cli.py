"""The ``vramwise`` command (entry point ``vramwise.cli:main``); it lives in :mod:`vramwise.surfaces.cli`."""

from vramwise.surfaces.cli.main import main

__all__ = ["main"]
