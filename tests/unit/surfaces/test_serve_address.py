"""GET /api/address reads a page address as the command line reads the same values: each field's canonical
value comes from the library's own readers (the GPU catalog, the model catalog, the settings' parsers),
and a value the CLI refuses is answered with the same message."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from vramwise.errors import SettingsError  # noqa: E402
from vramwise.inputs.gpu_catalog import gpu_spec  # noqa: E402
from vramwise.profiles.settings import normalise_static  # noqa: E402
from vramwise.inputs.catalog import find_model  # noqa: E402
from vramwise.surfaces.cli.main import main  # noqa: E402

from serve_client import client, no_hub  # noqa: E402,F401


def test_aliases_sizes_and_spellings_are_read_as_the_cli_reads_them(client):
    r = client.get("/api/address", params={
        "model": "OLMOE-1B-7B", "gpu": "H100", "method": "QLoRA", "gradient_checkpointing": "on", "batch_size": "8",
        "attention": " SDPA ", "load_in_4bit": "yes", "profile": "HF", "compare": "hf,unsloth,hf", "gpus": "2",
        "headroom": "10%", "target_modules": "q_proj,v_proj", "colour": "blue"})
    assert r.status_code == 200
    f = r.json()["fields"]
    h100 = gpu_spec("H100")
    assert f["gpu"] == {"value": h100.id, "name": h100.name, "note": h100.note}
    assert f["model"] == {"value": find_model("olmoe-1b-7b").id}
    # the settings as the library normalises the same raw values (booleans as --load-in-4bit reads 'yes')
    lib = normalise_static({"method": "QLoRA", "gradient_checkpointing": "on", "attention": " SDPA ", "load_in_4bit": True,
                            "target_modules": "q_proj,v_proj"})
    for name in ("method", "gradient_checkpointing", "attention", "load_in_4bit"):
        assert f[name] == {"value": lib[name]}, name
    assert f["target_modules"] == {"value": list(lib["target_modules"])}
    assert f["batch_size"] == {"value": 8}
    assert f["profile"] == {"value": "hf"}
    assert f["compare"] == {"value": ["hf", "unsloth"]}
    assert f["gpus"] == {"value": 2} and f["headroom"] == {"value": 0.1}  # 10% as --headroom 10% reads it
    assert r.json()["unknown"] == ["colour"]


def test_a_gpu_size_is_written_in_one_form():
    from vramwise.surfaces.serve_address import read_address

    assert read_address({"headroom": "0.1"})["fields"]["headroom"] == {"value": 0.1}  # --headroom 0.1

    # 24 GiB however it is typed; the form is the number and the unit as parse_size reads them
    for typed in ("24GiB", "24 gib", " 24GIB "):
        assert read_address({"gpu": typed})["fields"]["gpu"] == {"value": "24GiB", "name": gpu_spec("24GiB").name}
    assert read_address({"gpu": "Local"})["fields"]["gpu"]["value"] == "local"


def test_what_the_cli_refuses_is_answered_with_its_message(client, capsys):
    r = client.get("/api/address", params={"gpu": "H1000", "batch_size": "-1", "model": "no-such-model", "gpus": "0",
                                            "profile": "nope", "headroom": "10", "seq_len": "long"})
    f = r.json()["fields"]
    with pytest.raises(SettingsError) as e:
        gpu_spec("H1000")
    assert f["gpu"] == {"error": str(e.value)}
    # the CLI's own message for --gpu H1000 carries the same text
    assert main(["estimate", "examples/llama-3.1-8b.json", "--gpu", "H1000"]) == 2
    assert str(e.value) in capsys.readouterr().err
    assert "batch_size must be a positive integer" in f["batch_size"]["error"]
    assert "not in the model catalog" in f["model"]["error"]
    assert f["gpus"]["error"].startswith("gpus must be a whole number from 1 to 1,024")
    assert "unknown profile 'nope'" in f["profile"]["error"]
    # a bare 10 is a share of 10 to --headroom, not 10 %: refused, naming both spellings
    assert "expected a share from 0 to 0.9 (or 0% to 90%)" in f["headroom"]["error"]
    assert f["seq_len"]["error"] == "seq_len must be a whole number, got 'long'"
