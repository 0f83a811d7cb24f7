"""explain's inputs: every fact, attribute, constant and table entry points at the line that defines it."""

from __future__ import annotations

from pathlib import Path

import vramwise

REPO = Path(__file__).resolve().parents[3]
CFG = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
       "num_hidden_layers": 2, "num_attention_heads": 4}


def _by_name(est, kind):
    return {p.name: p for p in est.provenance if p.kind == kind}


def test_facts_say_where_their_value_came_from():
    facts = _by_name(vramwise.estimate(CFG), "fact")
    assert facts["hidden_size"].how == "config field hidden_size" and facts["hidden_size"].value == 256
    # no num_key_value_heads in the config: derived from the heads, as LlamaConfig does
    assert facts["num_key_value_heads"].how == "derived as `num_attention_heads`" and facts["num_key_value_heads"].value == 4
    assert facts["head_dim"].value == 256 // 4 and facts["head_dim"].how.startswith("derived as")
    assert facts["tie_word_embeddings"].how == "default" and facts["tie_word_embeddings"].unit == "flag"


def test_every_location_names_the_entry_it_points_at():
    est = vramwise.estimate(CFG, profile="hf", method="lora")
    assert est.provenance
    for p in est.provenance:
        if p.line is None:
            continue
        line = (REPO / p.file).read_text().splitlines()[p.line - 1]
        if p.kind == "attribute":
            assert line.strip().startswith(("expr", "'", '"', "cases", "-")) or p.name in line, (p.name, line)
        else:
            assert p.name in line, (p.kind, p.name, p.file, p.line, line)


def test_table_entries_and_constants():
    est = vramwise.estimate(CFG, profile="studio", optimizer="adamw_torch")
    tables = _by_name(est, "table")
    assert tables["optimizer_bytes_per_param"].value == 6 and "adamw_torch" in tables["optimizer_bytes_per_param"].how
    consts = _by_name(est, "constant")
    assert consts["nf4_factor"].value == 3.2 and consts["nf4_factor"].unit == "ratio"
    inventory = _by_name(est, "inventory")
    # 2 layers x (q, k, v, o: 4 x 256 x 256, gate/up/down: 3 x 512 x 256) quantizable linear weights
    assert inventory["quantizable_params"].value == 2 * (4 * 256 * 256 + 3 * 512 * 256)


def test_explain_prints_the_inputs(capsys, tmp_path):
    import json

    from vramwise.surfaces.cli.main import main

    p = tmp_path / "config.json"
    p.write_text(json.dumps(CFG))
    assert main(["explain", str(p)]) == 0
    out = capsys.readouterr().out
    assert "[facts of the config]" in out and "num_key_value_heads = 4 count  derived as `num_attention_heads`" in out
    assert "[constants]" in out and "formulas/unsloth/weights.yaml:" in out
    assert main(["explain", str(p), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {p["kind"] for p in data["provenance"]} == {"fact", "attribute", "constant", "table", "inventory"}
