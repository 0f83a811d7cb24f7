"""The torchtune profile's nf4_quantize setting: with ``whole`` (torchao 0.1, torchtune 0.1.x) the reserve the
QLoRA setup leaves (engine/profiles/nf4_setup.py, formulas/torchtune/reserve.yaml setup_reserved_bytes) is a floor
under the step's reserve; ``chunked`` (the default, torchao 0.2 on) leaves every figure as it was."""

from __future__ import annotations

import pytest

from vramwise import estimate
from vramwise.profiles import nf4_setup

# meta-llama/Llama-2-7b-hf's config.json (the numbers the torchtune llama2_7b builder takes)
LLAMA_2_7B = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
              "max_position_embeddings": 4096, "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
# torchtune's QLoRA tutorial at 0914d5c (docs/source/tutorials/qlora_finetune.rst): 7B_qlora_single_device,
# "Peak memory reserved, model init" 9.13 GB, "Peak memory reserved, training" 9.29 GB (GB = 10^9 bytes:
# torchtune 0.1's utils/memory.py divides by 1e9)
TUTORIAL = dict(method="qlora", lora_rank=8, target_modules="all-linear", batch_size=2, seq_len=512,
                optimizer="adamw_torch", gradient_checkpointing="true")


def tt(config=LLAMA_2_7B, **kw):
    return estimate(config, profile="torchtune", **{**TUTORIAL, **kw})


def value(est, fid):
    return next(t.value for t in est.trace if t.id == fid and t.layer_indices is None)


def test_the_tutorials_reserve_is_the_setups():
    e = tt(nf4_quantize="whole")
    # the step alone reserves far less than the setup (a 2 x 512-token step of a 4.2 GB model), so the reserve
    # at the peak is the setup's; the tutorial's 9.13 GB after init and 9.29 GB in training bound it
    assert e.figures["reserved"] == value(e, "setup_reserved_bytes")
    assert 9.13e9 * 0.99 < e.figures["reserved"] < 9.29e9 * 1.01
    # and the device total is that reserve plus the CUDA context the profile charges
    assert e.figures["device"] - e.figures["reserved"] == tt().figures["device"] - tt().figures["reserved"]


def test_the_setup_reserve_holds_the_model_and_more_than_as_much_again():
    # what the setup keeps, hand-derived in tests/unit/project/test_torchtune_nf4_load.py: 4,173,701,120 bytes
    # (32 layers of 114,043,904, the embedding and the head 262,144,000 each, the final norm 8,192); the freed
    # broadcasts (32 bytes per weight, twice) are left cached, split by the NF4 tensors made after them
    reserved = value(tt(nf4_quantize="whole"), "setup_reserved_bytes")
    assert reserved > 2 * 4_173_701_120


def test_chunked_is_the_default_and_changes_nothing():
    default, chunked = tt(), tt(nf4_quantize="chunked")
    assert value(chunked, "setup_reserved_bytes") == 0
    assert default.figures == chunked.figures
    assert default.to_dict()["total"] == chunked.to_dict()["total"]


def test_a_step_that_reserves_more_than_the_setup_keeps_its_own_reserve():
    # 8 x 4096 tokens without checkpointing: every layer's saved tensors (tens of GB) far above the setup's 9 GB
    kw = dict(batch_size=8, seq_len=4096, gradient_checkpointing="none")
    whole, chunked = tt(nf4_quantize="whole", **kw), tt(**kw)
    assert chunked.figures["reserved"] > 2 * value(whole, "setup_reserved_bytes")
    assert whole.figures == chunked.figures


def test_the_setting_is_for_torchtune_qlora_only():
    assert any("nf4_quantize" in w and "lora" in w for w in tt(method="lora", nf4_quantize="whole").warnings)
    hf = estimate(LLAMA_2_7B, profile="hf", method="qlora", nf4_quantize="whole")
    assert any("nf4_quantize" in w and "hf profile" in w for w in hf.warnings)
    ranks = tt(nf4_quantize="whole", strategy="fsdp", world_size=2)
    assert any("modelled on one GPU" in w for w in ranks.warnings)


def test_a_bad_value_is_refused_with_the_choices():
    from vramwise import SettingsError

    with pytest.raises(SettingsError, match="chunked"):
        tt(nf4_quantize="partly")


def test_deep_models_extend_the_replay_in_a_straight_line(monkeypatch):
    # past MAX_LAYERS the reserve grows by the per-layer step of the last replayed half: with MAX_LAYERS 4,
    # 8 layers = r(4) + 4 x (r(4) - r(2)) / 2
    monkeypatch.setattr(nf4_setup, "MAX_LAYERS", 4)
    nf4_setup.setup_reserved_bytes.cache_clear()
    args = dict(hidden=256, q_dim=256, kv_dim=128, mlp_width=768, vocab=1000, rope_bytes=4096, rank=8)

    def r(layers):
        return nf4_setup.replay_setup(layers=layers, **args).reserved

    got = nf4_setup.setup_reserved_bytes(256, 256, 128, 768, 8, 1000, 4096, 8, False, 512_000, 512_000)
    assert got == r(4) + 4 * (r(4) - r(2)) // 2
    nf4_setup.setup_reserved_bytes.cache_clear()


def test_chunks_past_the_second_leave_the_allocator_as_the_second_did():
    # each chunk frees all it takes, so replaying 2 full chunks stands for any number: an MLP projection of
    # 4096 x 11008 (43 chunks of 1 Mi elements and a remainder) replays as 2 + remainder; compared with a
    # replay that runs every chunk
    from vramwise.profiles.nf4_setup import CHUNK, _Replay, _nearest_chunked

    n = 4096 * 11008

    def every_chunk(r, n):
        qb = r.a(n)
        for start in range(0, n, CHUNK):
            c = min(CHUNK, n - start)
            sub, ab = r.a(32 * c), r.a(32 * c)
            r.f(sub)
            mv, mi = r.a(2 * c), r.a(8 * c)
            r.f(mv, ab)
            u8 = r.a(c)
            r.f(mi, u8)
        sh, orr = r.a(n / 2), r.a(n / 2)
        r.f(sh)
        r.f(qb)
        return orr

    a, b = _Replay(), _Replay()
    _nearest_chunked(a, n)
    every_chunk(b, n)
    assert (a.model.reserved, a.model.allocated, a.model.max_allocated, a.max_live) == \
        (b.model.reserved, b.model.allocated, b.model.max_allocated, b.max_live)
