"""Profiles and settings: profile files, strategies, settings, bands (layer 4).

Importing the package registers the expression language's functions that live here
(``torchao_nf4_setup_reserved``: :mod:`vramwise.profiles.nf4_setup`), so every profile file is
compiled with them."""

from vramwise.profiles.nf4_setup import setup_reserved_bytes as _setup_reserved_bytes
from vramwise.rules.expr.language import register_function as _register_function

_register_function("torchao_nf4_setup_reserved", _setup_reserved_bytes)
