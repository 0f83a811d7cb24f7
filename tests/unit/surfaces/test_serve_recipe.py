"""A training recipe uploaded to `vramwise serve` (the page's "or your training recipe"), through Starlette's
test client: each bundled format's fixture read with its settings, origins (file:line key) and warnings,
the parts a recipe names, bad recipes as one-line 400s naming file, line and key, a model outside the
catalog, the body's settings over the recipe's, and fit advice in the recipe's own keys.

Expected values are read by hand from the fixture files (line numbers and values quoted in comments)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from serve_client import client, no_hub  # noqa: E402,F401 - the fixtures

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "recipes"
LLAMA = "meta-llama/Llama-3.1-8B"


def part(rel: str) -> dict:
    path = FIXTURES / rel
    return {"name": path.name, "text": path.read_text(encoding="utf-8")}


def read(client, *rels: str, **extra) -> dict:
    r = client.post("/api/recipe", json={"recipe": [part(x) for x in rels], **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_formats_lists_the_bundled_format_files(client):
    # GET /api/formats: one entry per frameworks/*.yaml, named by its own `format:` and `framework:` keys
    files = {}
    for path in (ROOT / "frameworks").glob("*.yaml"):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "format" in data:
            files[data["format"]] = data
    got = client.get("/api/formats").json()["formats"]
    assert sorted(f["format"] for f in got) == sorted(files)
    for f in got:
        src = files[f["format"]]
        assert (f["framework"], f["version"]) == (src["framework"]["name"], str(src["framework"]["version"]))
        assert f["description"] and f["part"] is bool(src.get("part", False))


def test_litgpt_recipe(client):
    d = read(client, "litgpt/llama-3.1-8b-lora.yaml")
    assert d["format"] == "litgpt" and d["profile"] == "litgpt"
    # checkpoint_dir: checkpoints/meta-llama/Meta-Llama-3.1-8B (line 3): litgpt's Meta-Llama-3.1-8B, whose hub
    # repository (litgpt/config.py:708, org meta-llama) is the catalog's Llama 3.1 8B
    assert d["catalog_model"] == LLAMA
    s, o = d["settings"], d["origins"]
    assert s["method"] == "lora"  # a finetune_lora config: lora_r: 32 (line 21)
    assert s["lora_rank"] == 32 and o["lora_rank"]["text"] == "llama-3.1-8b-lora.yaml:21 lora_r"
    assert s["batch_size"] == 1 and o["batch_size"]["text"] == "llama-3.1-8b-lora.yaml:69 train.micro_batch_size"
    assert s["seq_len"] == 512 and o["seq_len"]["file"] == "llama-3.1-8b-lora.yaml" and o["seq_len"]["line"] == 84
    # lora_query: true (30), lora_key: false, lora_value: true (36), lora_projection/mlp/head: false: LitGPT's
    # attention query and value, HF's q_proj and v_proj
    assert s["target_modules"] == ["q_proj", "v_proj"]
    assert s["world_size"] == 1 and o["world_size"]["text"] == "llama-3.1-8b-lora.yaml:15 devices"
    # train.global_batch_size: 8 (line 66) over micro_batch_size 1 on devices: 1
    assert d["extras"]["gradient_accumulation_steps"] == 8
    assert o["model"]["line"] == 3 and d["parts"] == [{"format": "litgpt", "file": "llama-3.1-8b-lora.yaml"}]
    assert o["attention"]["kind"] == "vramwise default"


def test_torchtune_recipe(client):
    d = read(client, "torchtune/llama3_1_8B_lora_single_device.yaml")
    assert d["format"] == "torchtune" and d["profile"] == "torchtune"
    # torchtune.models.llama3_1.lora_llama3_1_8b (line 24) with "Llama-3.1-8B-Instruct" in its checkpoint dir
    assert d["catalog_model"] == "meta-llama/Llama-3.1-8B-Instruct"
    s, o = d["settings"], d["origins"]
    f = "llama3_1_8B_lora_single_device.yaml"
    assert s["method"] == "lora" and o["method"]["text"] == f"{f}:24 model._component_"
    assert s["batch_size"] == 2 and o["batch_size"]["text"] == f"{f}:59 batch_size"
    assert s["lora_rank"] == 8 and o["lora_rank"]["text"] == f"{f}:28 model.lora_rank"
    # lora_attn_modules ['q_proj', 'v_proj', 'output_proj'] (25; output_proj is HF's o_proj) and
    # apply_lora_to_mlp: True (26: w1, w2, w3 = gate_proj, down_proj, up_proj)
    assert sorted(s["target_modules"]) == sorted(["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert s["gradient_checkpointing"] == "true" and o["gradient_checkpointing"]["line"] == 93
    assert s["optimizer"] == "adamw_torch_fused"  # torch.optim.AdamW with fused: True (63-64)
    assert s["loss"] == "chunked" and o["loss"]["line"] == 72  # CEWithChunkedOutputLoss
    assert d["extras"]["gradient_accumulation_steps"] == 8  # line 77
    # tokenizer.max_seq_len: null (line 36): no truncation, so the sequence length is not in the recipe
    assert o["seq_len"]["kind"] == "vramwise default"
    assert any(w.startswith(f"{f}:36: tokenizer.max_seq_len") for w in d["warnings"]), d["warnings"]


def test_llama_factory_recipe_reads_its_model_from_the_catalog_or_needs_its_config(client):
    d = read(client, "llama_factory/qwen3_lora_sft.yaml")
    assert d["format"] == "llama_factory" and d["profile"] == "hf"
    assert d["model"] == "Qwen/Qwen3-4B-Instruct-2507"  # line 3
    assert d["catalog_model"] == "Qwen/Qwen3-4B-Instruct-2507"  # in the catalog (catalog/sources)
    s, o = d["settings"], d["origins"]
    f = "qwen3_lora_sft.yaml"
    assert s["method"] == "lora" and o["method"]["text"] == f"{f}:9 finetuning_type"
    assert s["lora_rank"] == 8 and o["lora_rank"]["text"] == f"{f}:10 lora_rank"
    assert s["target_modules"] == ["all-linear"] and o["target_modules"]["line"] == 11  # lora_target: all
    assert s["seq_len"] == 2048 and o["seq_len"]["text"] == f"{f}:16 cutoff_len"
    assert s["batch_size"] == 1 and o["batch_size"]["text"] == f"{f}:31 per_device_train_batch_size"
    assert o["gradient_checkpointing"]["kind"] == "framework default"
    assert o["gradient_checkpointing"]["framework"] == "LLaMA-Factory"

    # the recipe estimates from the catalog's config, with the recipe's settings
    body = {"recipe": [part("llama_factory/qwen3_lora_sft.yaml")]}
    est = client.post("/api/estimate", json=body)
    assert est.status_code == 200, est.text
    e = est.json()
    assert (e["settings"]["method"], e["settings"]["lora_rank"], e["settings"]["seq_len"]) == ("lora", 8, 2048)
    assert e["recipe"]["origins"]["seq_len"]["text"] == f"{f}:16 cutoff_len"
    # or a catalog model chosen for it
    chosen = client.post("/api/estimate", json={**body, "model": LLAMA})
    assert chosen.status_code == 200 and chosen.json()["settings"]["lora_rank"] == 8

    # a recipe whose model is not in the catalog (axolotl's llama-3/lora-1b.yml, base_model
    # NousResearch/Llama-3.2-1B on line 2): a 400 naming it and the fix
    body = {"recipe": [part("axolotl/llama-3-lora-1b.yml")]}
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 400
    msg = r.json()["error"]
    assert "'NousResearch/Llama-3.2-1B' is not in the model catalog" in msg and "config.json" in msg
    # with its config.json uploaded (meta-llama/Llama-3.2-1B's dimensions, the model NousResearch re-uploads)
    # the recipe estimates: adapter lora (line 13), lora_r 16 (line 21), sequence_len 2048 (line 16)
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 2048,
           "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
           "head_dim": 64, "tie_word_embeddings": True, "max_position_embeddings": 131072}
    est = client.post("/api/estimate", json={**body, "config_text": json.dumps(cfg)})
    assert est.status_code == 200, est.text
    e = est.json()
    assert (e["settings"]["method"], e["settings"]["lora_rank"], e["settings"]["seq_len"]) == ("lora", 16, 2048)
    assert e["recipe"]["origins"]["seq_len"]["text"] == "llama-3-lora-1b.yml:16 sequence_len"


def test_axolotl_recipe_and_its_deepspeed_part(client):
    main = "axolotl/gpt-oss-20b-fft-deepspeed-zero3.yaml"
    f = "gpt-oss-20b-fft-deepspeed-zero3.yaml"
    d = read(client, main)
    assert d["format"] == "axolotl" and d["profile"] == "hf"
    assert d["catalog_model"] == "openai/gpt-oss-20b"  # base_model (line 2)
    s, o = d["settings"], d["origins"]
    assert s["method"] == "full" and o["method"]["kind"] == "framework default"  # no adapter: key
    assert s["batch_size"] == 1 and o["batch_size"]["text"] == f"{f}:37 micro_batch_size"
    assert s["seq_len"] == 4096 and o["seq_len"]["text"] == f"{f}:23 sequence_len"
    assert s["optimizer"] == "adamw_8bit" and o["optimizer"]["line"] == 40  # adamw_torch_8bit
    assert s["activation_offloading"] is True and o["activation_offloading"]["line"] == 50
    # deepspeed: deepspeed_configs/zero3_bf16.json (line 62) names a file the server does not read: a warning
    ds = [w for w in d["warnings"] if "zero3_bf16.json" in w]
    assert ds and ds[0].startswith(f"{f}:62: deepspeed") and "not read here" in ds[0]
    assert s["strategy"] == "none"
    # sample_packing: true (line 24) changes memory but is not modelled
    assert any(w.startswith(f"{f}:24: sample_packing") for w in d["warnings"])

    # its text given as a second part: zero_optimization.stage: 3 (zero3_bf16.json line 3)
    both = read(client, main, "axolotl/deepspeed_configs/zero3_bf16.json")
    assert both["settings"]["strategy"] == "zero3"
    assert both["origins"]["strategy"]["text"] == "zero3_bf16.json:3 zero_optimization.stage"
    assert [p["format"] for p in both["parts"]] == ["axolotl", "deepspeed"]


def test_a_named_format(client):
    # framework= names the main file's format; an unknown one is a 400 listing the formats
    d = read(client, "litgpt/llama-3.1-8b-lora.yaml", framework="litgpt@0.5.9")
    assert d["format"] == "litgpt" and d["framework_version"] == "0.5.9"
    r = client.post("/api/recipe", json={"recipe": [part("litgpt/llama-3.1-8b-lora.yaml")], "framework": "nope"})
    assert r.status_code == 400 and "'nope'" in r.json()["error"] and "axolotl" in r.json()["error"]


def test_bad_recipes_are_one_line_400s(client):
    # content of no format: the file's name and line 1
    r = client.post("/api/recipe", json={"recipe": [{"name": "notes.yaml", "text": "foo: 1\nbar: 2\n"}]})
    assert r.status_code == 400
    assert r.json()["error"].startswith("notes.yaml:1: not a recipe of a format vramwise reads")
    # a value of the wrong type: file, line and key (micro_batch_size is line 40 of llama-3-lora-1b.yml)
    text = part("axolotl/llama-3-lora-1b.yml")["text"].replace("micro_batch_size: 2", "micro_batch_size: two")
    r = client.post("/api/estimate", json={"recipe": [{"name": "lora.yml", "text": text}], "model": LLAMA})
    assert r.status_code == 400 and r.json()["error"].startswith("lora.yml:40: micro_batch_size")
    # not YAML at all
    r = client.post("/api/recipe", json={"recipe": [{"name": "broken.yaml", "text": "a: [1, 2\n"}]})
    assert r.status_code == 400 and "broken.yaml" in r.json()["error"]
    # the shape of the field
    for bad in ("text", [{"name": "a.yaml"}], [{"name": "a.yaml", "text": "x: 1", "path": "/etc/passwd"}], []):
        r = client.post("/api/recipe", json={"recipe": bad})
        assert r.status_code == 400 and "recipe" in r.json()["error"], bad
    r = client.post("/api/estimate", json={"model": LLAMA, "framework": "axolotl"})
    assert r.status_code == 400 and "give recipe too" in r.json()["error"]


def test_body_settings_override_the_recipe(client):
    body = {"recipe": [part("litgpt/llama-3.1-8b-lora.yaml")]}
    plain = client.post("/api/estimate", json=body).json()
    assert (plain["settings"]["batch_size"], plain["settings"]["lora_rank"], plain["profile"]) == (1, 32, "litgpt")
    over = client.post("/api/estimate", json={**body, "batch_size": 4, "profile": "hf"}).json()
    assert over["settings"]["batch_size"] == 4 and over["profile"] == "hf"
    assert over["settings"]["lora_rank"] == 32 and over["settings"]["seq_len"] == 512  # the recipe's still
    assert over["total"] > plain["total"]
    same = client.post("/api/estimate", json={"model": LLAMA, "profile": "hf", "method": "lora", "batch_size": 4,
                                              **{k: v for k, v in over["settings"].items() if k != "batch_size"}})
    assert same.json()["total"] == over["total"]


def test_fit_advice_in_the_recipes_keys(client):
    # llama-3-lora-1b.yml: micro_batch_size: 2 (line 40), gradient_accumulation_steps: 2 (line 39), so the same
    # effective batch of 4 at micro batch 1 is 4 steps, written in axolotl's own keys. Its model
    # (NousResearch/Llama-3.2-1B) is not in the catalog: the catalog's Llama 3.1 8B stands in, which does
    # not fit a T4 (15 GiB) at these settings.
    body = {"recipe": [part("axolotl/llama-3-lora-1b.yml")], "model": LLAMA, "gpu": "t4"}
    r = client.post("/api/fit", json=body)
    assert r.status_code == 200, r.text
    f = r.json()
    assert f["fits"] is False and f["recipe"]["format"] == "axolotl"
    acc = next(a for a in f["advice"] if a["kinds"] == ["accumulation"])
    assert acc["changes"] == {"batch_size": 1, "gradient_accumulation_steps": 4}
    assert acc["recipe_changes"] == {"micro_batch_size": 1, "gradient_accumulation_steps": 4}
    assert all("recipe_changes" in a for a in f["advice"])
    # without the recipe (the same settings given one by one) there are no recipe keys
    plain = client.post("/api/fit", json={"model": LLAMA, "gpu": "t4", **f["recipe"]["settings"]}).json()
    assert plain["advice"] and all(not a.get("recipe_changes") for a in plain["advice"])


def test_answers_show_the_recipes_values_as_the_cli_table_does(client):
    # mistral-mixtral.yml: lora_target_linear: true (line 43), optimizer: adamw_bnb_8bit (line 63; transformers'
    # other name of adamw_8bit, training_args.py:129-130). Its model is read as the catalog's Llama 3.1 8B here
    # (LlamaForCausalLM: q/k/v/o_proj, gate/up/down_proj and the lm_head output layer, which all-linear leaves out).
    from vramwise.surfaces.cli.common import recipe_lines

    body = {"recipe": [part("axolotl/mistral-mixtral.yml"), part("axolotl/deepspeed_configs/zero2.json")],
            "model": LLAMA}
    for route in ("/api/estimate", "/api/explain"):
        r = client.post(route, json=body)
        assert r.status_code == 200, r.text
        rec = r.json()["recipe"]
        assert rec["shown"]["target_modules"] == ("all-linear (adapts: down_proj,gate_proj,k_proj,o_proj,q_proj,"
                                                  "up_proj,v_proj)")
        assert rec["shown"]["optimizer"] == "adamw_8bit (recipe: adamw_bnb_8bit)"
        assert rec["origins"]["optimizer"]["written"] == "adamw_bnb_8bit"
    # the CLI's table of the same recipe words them alike
    import vramwise

    recipe = vramwise.read_recipe([FIXTURES / "axolotl" / "mistral-mixtral.yml"], overrides={"model": LLAMA})
    est = vramwise.estimate(recipe)
    table = "\n".join(recipe_lines(recipe, lora_targets=est.lora_targets))
    assert rec["shown"]["target_modules"] in table and rec["shown"]["optimizer"] in table
