"""``vramwise gpus --catalog [QUERY]``: the GPUs ``--gpu`` knows, as text and JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from vramwise.surfaces.cli.main import main


def _catalog_file() -> dict:
    from importlib import resources

    return yaml.safe_load(resources.files("vramwise.hardware").joinpath("gpus.yaml").read_text(encoding="utf-8"))


def test_the_json_listing_is_the_catalog_file(capsys):
    assert main(["gpus", "--catalog", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    raw = _catalog_file()
    assert [g["id"] for g in data["gpus"]] == [g["id"] for g in raw["gpus"]]
    assert len(data["gpus"]) >= 100
    for shown, entry in zip(data["gpus"], raw["gpus"]):
        assert (shown["memory_bytes"], shown["memory_reading"], shown["source"]) == (
            entry["memory_bytes"], entry["memory_reading"], entry["source"])
    assert {a["name"] for a in data["ambiguous"]} == {a["name"] for a in raw["ambiguous"]}


def test_a_query_keeps_the_gpus_whose_names_hold_every_word(capsys):
    assert main(["gpus", "--catalog", "7900", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {g["id"] for g in data["gpus"]} == {"rx-7900-xtx", "rx-7900-xt", "rx-7900-gre", "radeon-pro-w7900"}
    assert main(["gpus", "--catalog", "intel", "--json"]) == 0  # the vendor is one of the names searched
    assert {g["vendor"] for g in json.loads(capsys.readouterr().out)["gpus"]} == {"intel"}


def test_the_text_listing_shows_the_reading_and_the_ambiguous_names_with_their_candidates(capsys):
    assert main(["gpus", "--catalog", "4060", "ti"]) == 0
    out = capsys.readouterr().out
    # RTX 4060 Ti 16GB: nvidia-smi 16380 MiB = 16380 / 1024 GiB = 15.996... -> 16.00; the 8 GB board 8188 MiB -> 8.00
    assert "rtx-4060-ti-16gb" in out and "16.00  nvidia-smi" in out
    assert "rtx-4060-ti-8gb" in out and "8.00  nvidia-smi" in out
    assert "'4060 ti' matches rtx-4060-ti-8gb, rtx-4060-ti-16gb: taken as rtx-4060-ti-8gb" in out
    assert out.rstrip().endswith("or the vendor's (spec-sheet)")
    assert "2 of " in out


def test_no_match_and_a_query_without_catalog(capsys):
    assert main(["gpus", "--catalog", "no-such-gpu"]) == 0
    assert "no GPU of the catalog matches 'no-such-gpu'" in capsys.readouterr().out
    assert main(["gpus", "h100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vramwise: error: ") and "--catalog" in err and "Traceback" not in err


def test_the_listing_does_not_import_torch():
    code = ("import sys; from vramwise.surfaces.cli.main import main; import io; "
            "main(['gpus', '--catalog', '--json']); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
