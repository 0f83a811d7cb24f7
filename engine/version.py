"""The version of vramwise, in one place: the package metadata (pyproject.toml reads it from here) and
``vramwise.__version__`` / ``vramwise --version`` all take it from this module."""

VERSION = "0.1.0"
