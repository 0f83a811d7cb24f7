"""Fit.advice offers only changes that can run, keeps the effective batch exactly and asks for GPUs in
the counts machines come in (engine/answers/advice.py; docs/fit-advice.md).

A change whose estimate carries a warning the formula files mark ``blocks: true`` is listed under
``Fit.blocked`` with that warning, never ranked. Each blocking warning is made to hold by settings read
off its ``when:`` condition; the expected texts are the formula files' messages."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

import vramwise
from vramwise.answers.advice import advise, machine_counts
from vramwise.answers.fit import fit
from vramwise.estimation.registry import Registry
from unit.answers.advice_fakes import Settings as _Settings  # the fakes beside this file, by their folder

GIB = 2**30
LLAMA = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")
LLAMA_70B = "meta-llama/Llama-3.1-70B"  # the bundled catalog's config: no download
#: the run of the 70B model that does not fit 8 H100s under FSDP (94.71 GiB on each of 79.65 GiB)
FSDP_70B = dict(profile="hf", method="full", batch_size=1, seq_len=2048, gradient_checkpointing="true",
                optimizer="adamw_torch_fused", strategy="fsdp", gpu="H100", gpus=8)
#: formulas/strategies/fsdp.yaml, the warning of condition '"8bit" in optimizer'
FSDP_8BIT = "bitsandbytes' 8-bit optimizers cannot step FSDP2's sharded (DTensor) parameters"


def _example(family: str) -> dict:
    return json.loads(json.dumps(Registry.default().family_file(family).data["examples"][0]["config"]))


@pytest.fixture(scope="module")
def fsdp_70b():
    return fit(LLAMA_70B, seq_lens=(), headroom=0, **FSDP_70B)  # the whole GPU, as derived


# -- the 70B FSDP case ---------------------------------------------------------------------------------


def test_an_8bit_optimizer_under_fsdp_is_blocked_not_advised(fsdp_70b):
    f = fsdp_70b
    assert not f.fits and f.estimate.blocking == ()  # adamw_torch_fused runs under FSDP2
    assert all("8bit" not in str(a.changes.get("optimizer", "")) for a in f.advice)
    blocked = dict(f.blocked)
    change = "optimizer adamw_8bit instead of adamw_torch_fused"
    assert change in blocked
    # the why is the warning of an independent estimate at the change, the one marked blocks: true
    s = {k: v for k, v in FSDP_70B.items() if k not in ("gpu", "gpus")}
    e = vramwise.estimate(LLAMA_70B, **{**s, "optimizer": "adamw_8bit", "world_size": 8})
    assert blocked[change] == "; ".join(e.blocking) and e.blocking[0] in e.warnings
    assert blocked[change].startswith(FSDP_8BIT + " (adamw_8bit)")
    # paged_adamw_8bit's name holds "8bit" too: the same condition blocks it
    assert "optimizer paged_adamw_8bit instead of adamw_torch_fused" in blocked
    for a in f.advice:  # what is ranked runs
        got = vramwise.estimate(LLAMA_70B, **{**s, "world_size": a.gpus,
                                              **{k: v for k, v in a.changes.items() if k not in ("gpus",)}})
        assert got.blocking == ()
    d = json.loads(json.dumps(f.to_dict()))
    assert {"description": change, "why": blocked[change]} in d["blocked"]
    assert all("8bit" not in json.dumps(a["changes"]) for a in d["advice"])


def test_cli_text_and_json_list_the_blocked_change(capsys):
    from vramwise.surfaces.cli.main import main

    args = ["fit", LLAMA_70B, "--profile", "hf", "--method", "full", "--batch-size", "1", "--seq-len", "2048",
            "--gradient-checkpointing", "true", "--optimizer", "adamw_torch_fused", "--strategy", "fsdp",
            "--gpu", "H100", "--gpus", "8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    text = " ".join(out.split())  # the lines are wrapped
    assert f"blocked: optimizer adamw_8bit instead of adamw_torch_fused ({FSDP_8BIT} (adamw_8bit)" in text
    advice = out[out.index("advice:"):out.index("blocked:")]
    assert "8bit" not in advice
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any(b["description"] == "optimizer adamw_8bit instead of adamw_torch_fused" and FSDP_8BIT in b["why"]
               for b in data["blocked"])


# -- every warning marked blocks: true, made to hold by its condition ---------------------------------


def _gemma2_sdpa():
    return _example("gemma2"), dict(profile="hf", method="lora", attention="sdpa")


def _cases():
    gemma2 = _example("gemma2")  # Gemma2ForCausalLM: _supports_sdpa False; attn_logit_softcapping 50.0 by default
    # gemma (LitGPT): q_dim = heads x head_dim = 16 x 256 = 4096 differs from a hidden size of 3072 (Gemma 7B's)
    gemma7b = {**_example("gemma"), "hidden_size": 3072, "num_attention_heads": 16, "head_dim": 256}
    llama = json.loads(Path(LLAMA).read_text())
    return {
        # formulas/hf/activations.yaml: attention not in transformers_attention (gemma2 runs eager, FA2, FA3, flex)
        "hf kernel the class does not run": (gemma2, dict(profile="hf", method="lora", attention="sdpa"),
                                             "attention sdpa: transformers' model class for this config does not "
                                             "support it and refuses to build the model"),
        # formulas/hf/activations.yaml: attention == "sdpa" and attention_softcap
        "hf sdpa with soft-capping": (gemma2, dict(profile="hf", method="lora", attention="sdpa"),
                                      "transformers does not run sdpa with attention soft-capping "
                                      "(attn_logit_softcapping 50.0)"),
        # formulas/unsloth/activations.yaml: attention != "flash_attention_2" and attention not in transformers_attention
        "unsloth kernel the class does not run": (gemma2, dict(profile="unsloth", method="lora", attention="sdpa"),
                                                  "attention sdpa: transformers' model class for this config does "
                                                  "not support it"),
        # formulas/litgpt/activations.yaml: unbuildable_qkv_layers > 0 (q and v adapted, k not, q_dim != hidden)
        "litgpt partial q/k/v": (gemma7b, dict(profile="litgpt", method="lora", target_modules=["q_proj", "v_proj"]),
                                 "LitGPT 0.5.9 cannot adapt some of q, k and v"),
        # formulas/litgpt/optimizer.yaml: load_in_4bit and an optimizer other than the AdamWs
        "litgpt bnb optimizer": (llama, dict(profile="litgpt", method="qlora", optimizer="sgd"),
                                 "LitGPT's bitsandbytes precision only accepts AdamW (utils.instantiate_bnb_optimizer "
                                 "raises for 'sgd')"),
        # formulas/shared/transformers_build.yaml: embedding_padding_idx >= embedding_padding_rows (128,256 rows)
        "pad_token_id outside the embedding": ({**llama, "pad_token_id": llama["vocab_size"]}, dict(profile="hf"),
                                               f"pad_token_id {llama['vocab_size']} (the config's"),
        # formulas/strategies/fsdp.yaml: "8bit" in optimizer
        "fsdp 8-bit optimizer": (llama, dict(profile="hf", method="full", optimizer="adamw_8bit", strategy="fsdp",
                                             world_size=2), FSDP_8BIT),
        # formulas/torchtune/activations.yaml: activation_offloading and not checkpointing
        "torchtune offloading without checkpointing": (llama, dict(profile="torchtune", method="lora",
                                                                   activation_offloading=True,
                                                                   gradient_checkpointing="none"),
                                                       "torchtune's recipes refuse activation offloading without "
                                                       "activation checkpointing"),
        # formulas/vllm/serving.yaml: max_model_len > derived_max_model_len (131,072 for Llama 3.1)
        "vllm max_model_len beyond the context": (llama, dict(profile="vllm", method="inference",
                                                              max_model_len=2 * 131072, gpu="H100"),
                                                  "max_model_len 262144 is longer than the model's own context "
                                                  "(131072): vLLM refuses to start"),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_each_blocking_warning_blocks_where_its_condition_holds(name):
    config, settings, text = _cases()[name]
    e = vramwise.estimate(config, **settings)
    assert any(w.startswith(text) for w in e.blocking), (name, e.blocking)
    assert set(e.blocking) <= set(e.warnings)


@pytest.mark.parametrize("settings", [
    # formulas/strategies/fsdp.yaml: offload == "optimizer" is modelled as offload parameters, and runs
    dict(profile="hf", method="full", strategy="fsdp", world_size=2, optimizer="adamw_torch", offload="optimizer"),
    # formulas/strategies/zero.yaml: DeepSpeed steps its own Adam for an 8-bit optimizer
    dict(profile="hf", method="full", strategy="zero3", world_size=2, optimizer="adamw_8bit"),
    # formulas/shared/total.yaml: a sequence beyond max_position_embeddings (131,072) runs
    dict(profile="hf", method="lora", seq_len=2 * 131072),
])
def test_informative_warnings_do_not_block(settings):
    e = vramwise.estimate(LLAMA, **settings)
    assert e.warnings and e.blocking == ()


def test_a_change_that_removes_the_blocking_warning_is_advised():
    # torchtune LoRA with activation offloading and no checkpointing: the run itself carries the warning,
    # so every change that keeps checkpointing off is blocked; gradient checkpointing lifts it
    f = fit(LLAMA, gpu=24 * GIB, profile="torchtune", method="lora", batch_size=8, gradient_checkpointing="none",
            activation_offloading=True, seq_lens=())
    assert not f.fits and f.estimate.blocking
    assert f.advice and all(a.changes.get("gradient_checkpointing") == "true" for a in f.advice)
    blocked = dict(f.blocked)
    assert "batch 1 with 8 gradient accumulation steps (the same effective batch of 8)" in blocked
    assert all(why.startswith("torchtune's recipes refuse activation offloading") for why in blocked.values())


def test_qlora_advice_blocked_by_litgpts_bnb_optimizer():
    # litgpt LoRA with SGD (its optimizer table lists sgd): QLoRA sets load_in_4bit, and LitGPT's bitsandbytes
    # precision refuses any optimizer but AdamW
    f = fit(LLAMA, gpu=8 * GIB, profile="litgpt", method="lora", batch_size=8, optimizer="sgd", seq_lens=())
    assert not f.fits and f.estimate.blocking == ()
    assert all(a.changes.get("method") != "qlora" for a in f.advice)
    assert dict(f.blocked)["QLoRA: the base model in 4 bit"].startswith("LitGPT's bitsandbytes precision")


def test_no_advice_when_the_run_itself_cannot_run():
    # gemma2 with sdpa: no change of the advice touches the kernel, so each one is blocked
    config, settings = _gemma2_sdpa()
    f = fit(config, gpu=8 * GIB, batch_size=8, gradient_checkpointing="none", seq_lens=(), **settings)
    assert not f.fits and f.advice == () and f.blocked
    assert all("attention sdpa: transformers' model class" in why for _, why in f.blocked)


# -- the effective batch, exactly --------------------------------------------------------------------


class _Run:
    """An estimate whose need is ``base + per_sample x batch`` bytes."""

    def __init__(self, settings, base: int, per_sample: int):
        self.settings, self._base, self._per = settings, base, per_sample
        self.strategy, self.blocking = None, ()
        self.total = base + per_sample * settings.batch_size

    def min_per_gpu(self, k: int) -> int:
        return self.total


def test_a_largest_batch_that_does_not_divide_the_effective_batch_is_stepped_down():
    # batch 8 with 3 steps on one GPU: an effective batch of 8 x 3 = 24. Need = 72 + 4 x batch bytes on
    # 100 usable: batch 7 needs 100 and fits, batch 8 needs 104. 7 does not divide 24; the micro-batches
    # below 8 that do are 6, 4, 3, 2, 1, the largest under 7 is 6: 6 x 4 steps = 24, needing 72 + 24 = 96.
    # (6 does not divide the batch of 8: the effective batch is what is kept.)
    here = _Run(_Settings(batch_size=8), 72, 4)
    profile = SimpleNamespace(name="fake", settings_read=frozenset({"batch_size"}), tables=(), methods=("full",))
    registry = SimpleNamespace(strategy_info=lambda name: {"offload": (), "profiles": ()})
    (a,) = advise(here, lambda c: _Run(replace(here.settings, batch_size=c.get("batch_size", 8)), 72, 4), gpus=1,
                  usable=100, share=0.0, profile=profile, registry=registry, max_batch_size=7, max_seq_len=None,
                  max_lora_rank=None, min_gpus=None, max_gpus=1, accumulation=3)
    assert dict(a.changes) == {"batch_size": 6, "gradient_accumulation_steps": 4}
    assert a.description == "batch 6 with 4 gradient accumulation steps (the same effective batch of 24)"
    assert a.fits and a.per_gpu == 72 + 4 * 6 == 96


def test_every_batch_change_keeps_micro_batch_x_steps_x_gpus():
    # FSDP on 2 GPUs runs a micro-batch per GPU: batch 8 x 1 step x 2 GPUs = 16, whatever the advice's GPUs
    f = fit(LLAMA, gpu=40 * GIB, gpus=2, profile="hf", method="full", batch_size=8, optimizer="adamw_torch",
            gradient_checkpointing="none", strategy="fsdp", seq_lens=())
    changed = [a for a in f.advice if "batch_size" in a.changes]
    assert not f.fits and changed
    for a in changed:
        assert a.changes["batch_size"] * a.changes["gradient_accumulation_steps"] * a.gpus == 8 * 1 * 2, a
        assert "(the same effective batch of 16)" in a.description


class _Sharded(_Run):
    """A sharded run on ``k`` GPUs: ``400 // k`` bytes of states per GPU plus 10 per sample."""

    def __init__(self, settings):
        super().__init__(settings, 0, 10)
        self.strategy = "fsdp"

    def min_per_gpu(self, k: int) -> int:
        return 400 // k + 10 * self.settings.batch_size


def test_a_batch_change_on_more_gpus_keeps_the_effective_batch():
    # FSDP on 2 GPUs at batch 8, 1 step: an effective batch of 8 x 1 x 2 = 16, on GPUs of 100 bytes.
    # On 2 GPUs batch 1 needs 200 + 10 = 210: nothing fits there. Batch 8 alone fits from 400 / k + 80 <= 100,
    # k >= 20: fit's fewest GPUs, 20, is not a count machines of 8 come in; 24 is (16 + 80 = 96).
    # Batch 1 fits from 400 / k + 10 <= 100, k >= 5: the first machine count is 8, where the batch is relaxed
    # to the mildest that fits and keeps 16: batch 4 would need 16 / (4 x 8) steps, no whole number; batch 2
    # needs 16 / (2 x 8) = 1 step and 50 + 20 = 70 bytes.
    here = _Sharded(_Settings(batch_size=8))
    profile = SimpleNamespace(name="fake", settings_read=frozenset({"batch_size"}), tables=(), methods=("full",))
    registry = SimpleNamespace(strategy_info=lambda name: {"offload": (), "profiles": ()})
    advice = advise(here, lambda c: _Sharded(replace(here.settings, batch_size=c.get("batch_size", 8))), gpus=2,
                    usable=100, share=0.0, profile=profile, registry=registry, max_batch_size=None, max_seq_len=None,
                    max_lora_rank=None, min_gpus=20, max_gpus=64, accumulation=1)
    by_kinds = {a.kinds: a for a in advice}
    combo = by_kinds[("accumulation", "gpus")]
    assert dict(combo.changes) == {"batch_size": 2, "gradient_accumulation_steps": 1, "gpus": 8, "world_size": 8}
    assert combo.description == ("batch 2 with 1 gradient accumulation step (the same effective batch of 16); "
                                 "8 GPUs instead of 2")
    assert combo.fits and combo.per_gpu == 400 // 8 + 10 * 2 == 70
    more = by_kinds[("gpus",)]
    assert more.gpus == 24 and more.fits and more.per_gpu == 400 // 24 + 80 == 96


# -- GPU counts machines come in -----------------------------------------------------------------------


def test_machine_counts():
    # powers of two below a machine of 8, then whole machines
    assert machine_counts(8, 40) == (1, 2, 4, 8, 16, 24, 32, 40)
    assert machine_counts(6, 13) == (1, 2, 4, 6, 12)
    assert machine_counts(8, 3) == (1, 2)


def test_more_gpus_come_in_whole_machines(fsdp_70b):
    # the fewest GPUs is 11: independent estimates on 10 and 11 ranks against the H100's 85,520,809,984
    # bytes (hardware/gpus.yaml, no headroom); machines of 8 GPUs (gpus_per_node's default) give 16
    f = fsdp_70b
    s = {k: v for k, v in FSDP_70B.items() if k not in ("gpu", "gpus")}
    assert f.usable_bytes == 85_520_809_984
    ten, eleven = (vramwise.estimate(LLAMA_70B, **{**s, "world_size": k}).min_per_gpu(k) for k in (10, 11))
    assert ten > f.usable_bytes >= eleven and f.min_gpus == 11
    (more,) = [a for a in f.advice if a.kinds == ("gpus",)]
    assert more.gpus == 16 and more.fits and dict(more.changes) == {"gpus": 16, "world_size": 16}
    e = vramwise.estimate(LLAMA_70B, **{**s, "world_size": 16})
    assert more.per_gpu == e.min_per_gpu(16) <= f.usable_bytes
    # machines of 4 GPUs: 12, the first multiple of 4 at or above 11
    four = fit(LLAMA_70B, seq_lens=(), headroom=0, gpus_per_node=4, **FSDP_70B)
    assert four.min_gpus == 11 and [a.gpus for a in four.advice if a.kinds == ("gpus",)] == [12]
    for fits in (f, four):
        assert all(a.gpus in machine_counts(fits.settings["gpus_per_node"], 1024) for a in fits.advice)
