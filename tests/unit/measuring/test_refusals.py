"""Inputs transformers refuses: one user error in `measure`, a warning in `estimate` (hf profile).

The expectations are derived by hand from transformers 5.24 and torch:

- Gemma2PreTrainedModel sets ``_supports_sdpa = False`` (``_supports_flash_attn`` and
  ``_supports_flex_attn`` True), so ``get_correct_attn_implementation`` raises for an explicit
  ``attn_implementation="sdpa"``; Phi3ForCausalLM supports every kernel.
- Phi3Config's ``pad_token_id`` defaults to 32000, and Phi3Model builds
  ``nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)``; torch asserts
  ``-num_embeddings <= padding_idx < num_embeddings``, so with ``vocab_size`` 1000 the default id is refused
  and 999 or -1000 are not.
- torch's flex attention has no backward pass on the CPU; flash-attn runs on CUDA GPUs only.
- torchtune and LitGPT run their own attention, not transformers' kernels.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramwise
from vramwise import SettingsError
from vramwise.errors import StackUnsupportedError
from vramwise.profiles.settings import normalise_settings

TINY = {"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2}
GEMMA2 = {"model_type": "gemma2", **TINY, "head_dim": 16}
PHI3 = {"model_type": "phi3", **TINY}
LLAMA = {"model_type": "llama", **TINY}


def _warnings(config, **settings) -> list:
    return list(vramwise.estimate(config, profile="hf", method="lora", **settings).warnings)


# -- estimate: a warning, the estimate still given -------------------------------------------------------------


def test_gemma2_with_sdpa_warns_and_still_estimates():
    est = vramwise.estimate(GEMMA2, profile="hf", method="lora", attention="sdpa")
    assert est.total > 0
    (w,) = [w for w in est.warnings if w.startswith("attention sdpa:")]
    # the kernels Gemma2ForCausalLM runs: eager always, flash 2 and 3 (_supports_flash_attn), flex (_supports_flex_attn)
    assert "does not support it" in w
    assert "(it runs eager, flash_attention_2, flash_attention_3, flex_attention)" in w
    assert "eager always runs" in w


@pytest.mark.parametrize("attention", ["eager", "flash_attention_2", "flash_attention_3", "flex_attention"])
def test_gemma2_with_a_kernel_its_class_runs_does_not_warn(attention):
    assert not [w for w in _warnings(GEMMA2, attention=attention) if "does not support it" in w]


@pytest.mark.parametrize("attention", ["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"])
def test_llama_runs_every_kernel(attention):
    assert not [w for w in _warnings(LLAMA, attention=attention) if "does not support it" in w]


def test_phi3_default_pad_token_outside_a_small_vocabulary_warns():
    (w,) = [w for w in _warnings(PHI3, attention="sdpa") if w.startswith("pad_token_id")]
    assert w.startswith("pad_token_id 32000 ")  # Phi3Config's default, the config sets none
    assert "outside the 1000 rows" in w
    assert "set pad_token_id to null or an id below 1000" in w


@pytest.mark.parametrize("pad", [None, 0, 999, -1, -1000])
def test_a_pad_token_within_the_table_or_null_does_not_warn(pad):
    assert not [w for w in _warnings({**PHI3, "pad_token_id": pad}) if w.startswith("pad_token_id")]


@pytest.mark.parametrize("pad", [1000, -1001])
def test_a_pad_token_just_outside_the_table_warns(pad):
    (w,) = [w for w in _warnings({**PHI3, "pad_token_id": pad}) if w.startswith("pad_token_id")]
    assert w.startswith(f"pad_token_id {pad} ")


def test_a_family_whose_embedding_takes_no_padding_idx_does_not_warn():
    # GPT2Model builds nn.Embedding(vocab_size, n_embd) with no padding_idx: any pad_token_id builds
    gpt2 = {"model_type": "gpt2", "vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 4, "pad_token_id": 50256}
    assert not [w for w in _warnings(gpt2) if w.startswith("pad_token_id")]


def test_the_unsloth_profile_warns_for_a_kernel_asked_for_by_name():
    # Unsloth loads through transformers: a kernel named (attn_implementation) is refused as there; its default,
    # flash_attention_2 ("Unsloth's choice": it falls back itself), is not warned about, even for a class without it
    (w,) = [w for w in vramwise.estimate(GEMMA2, attention="sdpa").warnings if "does not support it" in w]
    assert w.startswith("attention sdpa:")
    llama4 = {"model_type": "llama4_text", **TINY, "head_dim": 16}  # Llama4ForCausalLM: _supports_flash_attn False
    assert not [w for w in vramwise.estimate(llama4).warnings if "does not support it" in w]
    assert [w for w in vramwise.estimate(llama4, profile="hf", method="lora").warnings if "does not support it" in w]
    (p,) = [w for w in vramwise.estimate(PHI3).warnings if w.startswith("pad_token_id")]
    assert p.startswith("pad_token_id 32000 ")


# -- measure: one user error, before the model is built --------------------------------------------------------


def _settings(**kw):
    return normalise_settings(method="full", optimizer="sgd", gradient_checkpointing="none", **kw)


def test_measure_refuses_gemma2_with_sdpa_naming_the_class_and_the_fix():
    pytest.importorskip("transformers")
    from vramwise.measuring.stacks import hf

    with pytest.raises(StackUnsupportedError) as e:
        hf.check_config(GEMMA2, _settings(attention="sdpa"), device="cpu")
    assert str(e.value) == (
        "--attention sdpa: transformers' Gemma2ForCausalLM does not support it and refuses to build the model "
        "(it runs eager, flash_attention_2, flash_attention_3, flex_attention); use --attention eager")


def test_measure_refuses_phi3s_default_pad_token_naming_the_id_and_the_fix():
    pytest.importorskip("transformers")
    from vramwise.measuring.stacks import hf

    with pytest.raises(StackUnsupportedError) as e:
        hf.check_config(PHI3, _settings(attention="sdpa"), device="cpu")
    assert str(e.value) == (
        "pad_token_id 32000 (Phi3Config's default: the config sets none) lies outside the 1000 rows of the "
        "embedding transformers' Phi3ForCausalLM builds with it as padding_idx, which refuses it; set pad_token_id "
        "to null or an id below 1000 in the config")
    hf.check_config({**PHI3, "pad_token_id": None}, _settings(attention="sdpa"), device="cpu")  # the fix holds
    with pytest.raises(StackUnsupportedError, match=r"^pad_token_id 5000 \(the config's\)"):
        hf.check_config({**PHI3, "pad_token_id": 5000}, _settings(attention="sdpa"), device="cpu")


@pytest.mark.parametrize("attention, why", [
    ("flash_attention_2", "the flash-attn package runs on CUDA GPUs only"),
    ("flash_attention_3", "the flash-attn 3 package runs on CUDA GPUs (Hopper) only"),
    ("flex_attention", "torch's flex attention has no backward pass on the CPU"),
])
def test_measure_on_the_cpu_refuses_the_kernels_no_cpu_runs(attention, why):
    pytest.importorskip("transformers")
    from vramwise.measuring.stacks import hf

    with pytest.raises(SettingsError) as e:
        hf.check_config(LLAMA, _settings(attention=attention), device="cpu")
    assert str(e.value).startswith(f"--attention {attention} is not runnable here: {why}; on the CPU use "
                                   "--attention sdpa or eager")


def test_a_kernel_the_class_lacks_is_named_before_the_device():
    pytest.importorskip("transformers")
    from vramwise.measuring.stacks import hf

    # GPT2LMHeadModel has no _supports_flex_attn: the class's refusal comes first, a GPU would not help
    gpt2 = {"model_type": "gpt2", "vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 4}
    with pytest.raises(StackUnsupportedError, match=r"^--attention flex_attention: transformers' GPT2LMHeadModel"):
        hf.check_config(gpt2, _settings(attention="flex_attention"), device="cpu")


def test_a_model_type_without_a_causal_lm_is_a_stack_error():
    pytest.importorskip("transformers")
    from vramwise.measuring.stacks import hf

    # transformers maps mllama (the whole model) to a causal LM, not its text tower's own type
    text = {"model_type": "mllama_text_model", **TINY}
    with pytest.raises(StackUnsupportedError, match="no causal language model for model_type 'mllama_text_model'"):
        hf.check_config(text, _settings(attention="sdpa"), device="cpu")


@pytest.mark.parametrize("stack", ["torchtune", "litgpt"])
def test_torchtune_and_litgpt_run_their_own_attention(stack):
    from vramwise.measuring.stacks.registry import stack_module

    check = stack_module(stack).check
    check(_settings(attention="sdpa"), device="cpu", fake=True)  # the default: the stack's own attention
    with pytest.raises(SettingsError, match=rf"^--attention eager: --stack {stack} runs .* own attention"):
        check(_settings(attention="eager"), device="cpu", fake=True)


def test_the_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    pytest.importorskip("transformers")
    import json

    from vramwise.surfaces.cli.main import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA2))
    code = main(["measure", str(path), "--fake", "--attention", "sdpa", "--batch-size", "1", "--seq-len", "8",
                 "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("vramwise: error: --attention sdpa: transformers' Gemma2ForCausalLM does not support it")
    assert not [line for line in err if "internal error" in line or "Traceback" in line]


# -- a failure inside the step: whose code raised it ------------------------------------------------------------


def _raised_in(filename: str, exc: Exception, via_dispatch: bool = False) -> Exception:
    """``exc`` raised by a function whose code says it lives in ``filename`` (optionally passed on by a dispatch
    mode's ``__torch_dispatch__`` defined in vramwise), caught here with its traceback."""
    inner = {}
    exec(compile("def step(exc):\n    raise exc\n", filename, "exec"), inner)
    outer = {"step": inner["step"]}
    exec(compile("def __torch_dispatch__(exc):\n    step(exc)\n", "/x/engine/measuring/tracker.py", "exec"), outer)
    try:
        (outer["__torch_dispatch__"] if via_dispatch else inner["step"])(exc)
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("not raised")


def test_a_failure_in_transformers_model_code_is_the_configs_for_transformers():
    from vramwise.measuring.refusals import step_failure

    path = "/venv/lib/python3.11/site-packages/transformers/models/gptj/modeling_gptj.py"
    for via_dispatch in (False, True):  # the allocation tracker's dispatch frame passes the operator on
        told = step_failure(_raised_in(path, RuntimeError("k not in range for dimension"), via_dispatch), fake=False)
        assert isinstance(told, StackUnsupportedError)
        assert str(told).startswith("transformers cannot run a training step of this config (RuntimeError: k not in "
                                    "range for dimension; at transformers/models/gptj/modeling_gptj.py:2)")


def test_a_failure_in_vramwise_or_elsewhere_stays_an_internal_error():
    from vramwise.measuring import refusals

    ours = str(Path(refusals.__file__).resolve())  # a frame of vramwise's own code
    assert refusals.step_failure(_raised_in(ours, KeyError("x")), fake=False) is None
    other = "/venv/lib/python3.11/site-packages/numpy/core/x.py"
    assert refusals.step_failure(_raised_in(other, ValueError("x")), fake=False) is None
    assert refusals.step_failure(MemoryError(), fake=False) is None


def test_a_fake_tensor_device_failure_names_fake():
    from vramwise.measuring.refusals import step_failure

    e = RuntimeError('Attempted to set the storage of a tensor on device "meta" to a storage on different device "cpu".')
    assert str(step_failure(e, fake=True)).startswith("--fake: this model's step does not run on fake tensors")
    assert step_failure(e, fake=False) is None  # with real tensors the same words are not the simulation's
