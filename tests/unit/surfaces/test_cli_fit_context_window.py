"""`vramwise fit` says when its largest sequence stops at the model's context window."""

from __future__ import annotations

import json

import vramwise
from vramwise.inputs.catalog import catalog_model
from vramwise.surfaces.cli.main import main

LLAMA = "meta-llama/Llama-3.1-8B"
ARGS = ["fit", LLAMA, "--gpu", "80GiB", "--batch-size", "1", "--lora-rank", "32"]


def _run(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_the_table_names_the_cap(capsys):
    window = catalog_model(LLAMA).config["max_position_embeddings"]  # 131,072 in Meta's config.json
    rc, out, err = _run(ARGS, capsys)
    assert rc == 0 and err == ""
    assert f"largest sequence length at batch 1: {window:,}\n" in out
    text = " ".join(out.split())  # the note is wrapped at 100 columns
    memory = vramwise.fit(LLAMA, gpu="80GiB", batch_size=1, lora_rank=32).max_seq_len_memory
    assert (f"note: largest sequence length capped at the model's context window of {window:,} tokens "
            f"(max_position_embeddings; rope scaling llama3, factor 8); memory alone allows {memory:,}") in text
    frontier = out.split("frontier:")[1].splitlines()[2:]
    assert frontier[-1].split()[0] == f"{window:,}"  # the frontier's last length is the window


def test_json_carries_both_figures(capsys):
    rc, out, _ = _run(ARGS + ["--json"], capsys)
    data = json.loads(out)
    window = catalog_model(LLAMA).config["max_position_embeddings"]
    assert rc == 0 and data["max_seq_len"] == data["context_window"] == window
    assert data["max_seq_len_memory"] > window and len(data["notes"]) == 1


def test_no_note_without_a_window(tmp_path, capsys):
    config = dict(catalog_model(LLAMA).config)
    del config["max_position_embeddings"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    rc, out, _ = _run(["fit", str(path), "--gpu", "80GiB", "--batch-size", "1", "--lora-rank", "32"], capsys)
    assert rc == 0 and "context window" not in out and "note: largest sequence" not in out
