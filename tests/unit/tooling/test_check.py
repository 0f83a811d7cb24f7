"""``vramwise check``: family and formula files validated with file:line:col per problem."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

import vramwise
from vramwise.surfaces.cli.main import main

FAMILY = """\
schema_version: 1
family: myllama
description: a family made for the test
source: none
extends: llama
model_types: [myllama]
examples:
  - name: tiny
    config: {model_type: myllama, vocab_size: 1000, hidden_size: 256, intermediate_size: 512,
             num_hidden_layers: 2, num_attention_heads: 4}
    expect:
      facts: {head_dim: 64}
      params:
        total: 2 * (4 * 256 * 256 + 3 * 256 * 512 + 2 * 256) + 256 + 2 * 1000 * 256
"""


def _family(tmp_path, text=FAMILY, name="myllama.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _profile(tmp_path, name="hf") -> Path:
    src = resources.files("vramwise.formulas").joinpath(name)
    dst = tmp_path / name
    dst.mkdir()
    for item in src.iterdir():
        if item.name.endswith(".yaml"):
            (dst / item.name).write_text(item.read_text(encoding="utf-8"))
    return dst


def test_api_is_exported():
    assert "check" in vramwise.__all__ and callable(vramwise.check)


def test_a_new_family_that_extends_a_bundled_one(tmp_path, capsys):
    p = _family(tmp_path)
    assert vramwise.check([p]) == []
    assert main(["check", str(p)]) == 0
    assert "no problems" in capsys.readouterr().out


def test_bundled_files_are_fine():
    root = Path(__file__).resolve().parents[3]
    assert vramwise.check([root / "families", root / "formulas" / "hf", root / "formulas" / "unsloth",
                           root / "formulas" / "size_only" / "profile.yaml"]) == []


def test_broken_expression_reports_file_line_col(tmp_path, capsys):
    text = FAMILY.replace("examples:", "facts:\n  head_dim:\n    description: d\n    unit: count\n"
                                       "    derive: hidden_size // nosuchname\nexamples:")
    p = _family(tmp_path, text)
    problems = vramwise.check(p)
    assert problems and problems[0].startswith(f"{p}:11:13: ")
    assert "nosuchname" in problems[0]
    assert main(["check", str(p)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{p}:11:13: ")


def test_failed_example_is_located_at_the_expected_value(tmp_path):
    p = _family(tmp_path, FAMILY.replace("+ 2 * 1000 * 256", "+ 2 * 1000 * 256 + 1"))
    problems = vramwise.check([str(p)])
    assert len(problems) == 1
    assert problems[0].startswith(f"{p}:14:16: example 'tiny': params total is 1,824,000, expected 1,824,001")
    p = _family(tmp_path, FAMILY.replace("head_dim: 64", "head_dim: 65"))
    (problem,) = vramwise.check([str(p)])
    assert problem.startswith(f"{p}:12:25: ") and "fact head_dim is 64, expected 65" in problem


def test_example_config_that_cannot_resolve(tmp_path):
    p = _family(tmp_path, FAMILY.replace("vocab_size: 1000, ", ""))
    (problem,) = vramwise.check([p])
    assert problem.startswith(f"{p}:9:13: example 'tiny': ") and "vocab_size" in problem


@pytest.mark.parametrize("change,needle,where", [
    (("extends: llama", "extends: nosuchparent"), "unknown family 'nosuchparent'", ":5:"),
    (("schema_version: 1\n", ""), "'schema_version' is a required property", ":1:1:"),
    (("source: none\n", "source: none\nsource: twice\n"), "duplicate key 'source'", ":5:1:"),
    (("model_types: [myllama]", "model_types: [llama]"), "already served by family", ""),
    (("family: myllama", "family: other"), "differs from the file name", ":2:"),
    (("    expect:", "  bad: [\n    expect:"), "invalid YAML", ""),
])
def test_family_problems(tmp_path, change, needle, where):
    p = _family(tmp_path, FAMILY.replace(*change))
    problems = vramwise.check([p])
    assert problems, change
    assert any(needle in x and x.startswith(str(p)) and where in x for x in problems), problems


def test_overriding_a_bundled_family_checks_its_children(tmp_path):
    llama = resources.files("vramwise.families").joinpath("llama.yaml").read_text(encoding="utf-8")
    p = _family(tmp_path, llama, "llama.yaml")
    assert vramwise.check([p]) == []
    broken = llama.replace("vocab_size: 128256", "vocab_size: 128257", 1)
    assert broken != llama
    p.write_text(broken)
    problems = vramwise.check([p])
    assert problems and all(x.startswith(str(p)) for x in problems)


def test_profile_folder_and_its_files(tmp_path):
    folder = _profile(tmp_path)
    assert vramwise.check([folder]) == []
    weights = folder / "weights.yaml"
    text = weights.read_text()
    assert "expr: fp32_bytes if kbit_upcast else bf16_bytes" in text
    weights.write_text(text.replace("expr: fp32_bytes if kbit_upcast else bf16_bytes", "expr: fp32_bytes if kbit_upcast else nosuch_x", 1))
    for given in (folder, weights, folder / "profile.yaml"):
        problems = vramwise.check([given])
        assert len(problems) == 1 and problems[0].startswith(f"{weights}:") and "nosuch_x" in problems[0], problems


def test_profile_listing_and_name(tmp_path):
    folder = _profile(tmp_path)
    (folder / "extra.yaml").write_text("schema_version: 1\n")
    problems = vramwise.check([folder])
    assert any("files not listed" in x and x.startswith(str(folder / "profile.yaml")) for x in problems), problems
    other = tmp_path / "renamed"
    (tmp_path / "b").mkdir()
    shutil.copytree(_profile(tmp_path / "b", "unsloth"), other)
    problems = vramwise.check([other])
    assert any("differs from its folder 'renamed'" in x for x in problems), problems


def test_not_utf8_and_several_files(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"family: caf\xe9\n")
    good = _family(tmp_path)
    problems = vramwise.check([good, bad])
    assert problems == [f"{bad}:1:1: $: not UTF-8 text (byte 0xe9 at offset 11): data files are UTF-8 YAML"]
    assert main(["check", str(good), str(bad)]) == 1


def test_bad_usage_exits_2(tmp_path, capsys):
    assert main(["check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("vramwise: error: ") and err[1] == "run 'vramwise check --help' for usage"
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "x.txt").write_text("x")
    assert main(["check", str(tmp_path / "x.txt")]) == 2
    with pytest.raises(vramwise.UsageError, match="nothing to check"):
        vramwise.check([])
    with pytest.raises(vramwise.UsageError, match="no such file or folder"):
        vramwise.check([tmp_path / "missing.yaml"])


def test_files_over_the_data_file_limit_are_refused(tmp_path):
    big = _family(tmp_path, FAMILY + "#" + "x" * (1 << 20) + "\n")  # a comment past 1 MiB (1,048,576 bytes)
    (problem,) = vramwise.check([big])
    assert problem.startswith(f"{big}:1:1: ") and "data files hold at most 1,048,576" in problem


def test_a_folder_checks_its_own_kinds_of_data_file_by_their_schema(tmp_path):
    # the bundled formulas folder (profiles, strategies, and the settings, stacks, checkpoint-format and GGUF tables
    # at its top) is clean; its top-level data files were read as family files, each failing the family schema
    bundled = Path(str(resources.files("vramwise.formulas")))
    assert vramwise.check([bundled]) == []
    # a folder holding a settings-rules file with a key the settings schema does not allow: one problem, named by
    # that schema's keys, not by the family schema's
    folder = tmp_path / "data"
    folder.mkdir()
    settings = folder / "settings.yaml"
    settings.write_text(bundled.joinpath("settings.yaml").read_text() + "nosuch_key: 1\n")
    problems = vramwise.check([folder])
    assert len(problems) == 1 and problems[0].startswith(f"{settings}:") and "nosuch_key" in problems[0], problems
    assert "'family' is a required property" not in problems[0]
