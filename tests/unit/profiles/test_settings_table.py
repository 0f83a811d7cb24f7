"""One table defines the settings: the API, the normalisation and the command line follow it."""

from __future__ import annotations

import inspect

import pytest

import vramwise
from vramwise.surfaces.cli.main import build_parser


def test_estimate_signature_is_the_table():
    params = inspect.signature(vramwise.estimate).parameters
    for s in vramwise.SETTINGS:
        assert params[s.name].default == s.default and params[s.name].kind is inspect.Parameter.KEYWORD_ONLY


def test_cli_options_are_the_table():
    estimate_parser = build_parser()._subparsers._group_actions[0].choices["estimate"]
    flags = {a.option_strings[0]: a for a in estimate_parser._actions if a.option_strings}
    for s in vramwise.SETTINGS:
        assert flags[s.flag].default == s.default


def test_unknown_setting_is_named():
    with pytest.raises(vramwise.SettingsError, match="unknown setting.*batchsize"):
        vramwise.estimate({"model_type": "llama"}, batchsize=2)


def test_training_settings_fields_are_the_table():
    e = vramwise.estimate({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
                           "num_hidden_layers": 1, "num_attention_heads": 2}, batch_size=3)
    assert set(e.settings.to_dict()) == {s.name for s in vramwise.SETTINGS}
    assert e.settings.batch_size == 3 and e.settings.method == "qlora"
