"""The llama.cpp profile's KV cache under multi-head latent attention (deepseek2: DeepSeek-V2/V3, R1, Kimi K2).

At 0c1e5709 llama.cpp caches, per layer and cell, one K row of n_embd_k_gqa = n_embd_head_k x n_head_kv elements,
which for an MLA file is key_length (kv_lora_rank + qk_rope_head_dim: the compressed latent and the RoPE part) x
head_count_kv 1, and no V tensor: has_v = !is_mla (src/llama-kv-cache.cpp:163, 231-234; src/llama-hparams.cpp:156-160,
298-303). Every expected figure is derived by hand below from that rule and the small deepseek2 file of
tests/gguf_files.py (3 layers, hidden 256, 4 heads, kv_lora_rank 64, qk_rope_head_dim 32, qk_nope_head_dim 48,
v_head_dim 48), written with gguf's own writer.
"""

from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                          "the GGUF files these tests read")
np = pytest.importorskip("numpy")

import vramwise  # noqa: E402

from gguf_files import write_deepseek2  # noqa: E402  (tests/gguf_files.py)


def llama(path, **settings):
    return vramwise.estimate(str(path), profile="llama.cpp", **settings)


@pytest.fixture
def deepseek2(tmp_path):
    path = tmp_path / "deepseek2.gguf"
    write_deepseek2(path)
    return path


def test_the_latent_and_rope_rows_only(deepseek2):
    f = llama(deepseek2, n_ctx=1024).figures
    assert (f["n_ctx"], f["kv_cells"]) == (1024, 1024)
    # 3 layers x 1024 cells x one K row of (64 latent + 32 RoPE) f16 values, no V: 589,824 bytes; full K and V heads
    # (4 x (48 + 32) + 4 x 48 values a cell) would be 3 x 1024 x 512 x 2 = 3,145,728
    assert f["kv_cache"] == 3 * 1024 * (64 + 32) * 2 == 589_824
    assert f["gpu_kv_cache"] == f["kv_cache"] and f["host_kv_cache"] == 0


def test_the_k_cache_type_counts_the_v_type_does_not(deepseek2):
    # q8_0 K: 96 values are 3 blocks of 32, 34 bytes each: 102 bytes a cell; 3 x 1024 x 102 = 313,344. The V cache's
    # type changes nothing (there is no V tensor); flash attention on, which llama.cpp wants for a quantized V
    e = llama(deepseek2, n_ctx=1024, cache_type_k="q8_0", cache_type_v="q4_0", flash_attn="on")
    assert e.figures["kv_cache"] == 3 * 1024 * 3 * 34 == 313_344
    # llama.cpp refuses the context, though: an MLA model's K and V cache types must be the same
    # (src/llama-context.cpp:3835-3838; the reference fixture's deepseek2-mla file, refused at q4_0 / q5_1)
    assert any("refuses different K (q8_0) and V (q4_0) cache types" in w for w in e.warnings), e.warnings
    assert not any("refuses different K" in w
                   for w in llama(deepseek2, n_ctx=1024, cache_type_k="q8_0", cache_type_v="q8_0").warnings)
    f = llama(deepseek2, n_ctx=1024, cache_type_v="f32").figures
    assert f["kv_cache"] == 589_824


def test_offloaded_layers_keep_their_latent_cache_on_the_gpu(deepseek2):
    # n_gpu_layers 2: the output layer and one repeating layer (i_gpu_start = n_layer + 1 - n_gpu_layers = 2), the last
    # of the 3 layers on the GPU with its 1024 x 96 x 2 = 196,608 bytes; the other two on the host
    f = llama(deepseek2, n_ctx=1024, n_gpu_layers=2).figures
    assert f["gpu_kv_cache"] == 1024 * 96 * 2 == 196_608
    assert f["host_kv_cache"] == 2 * 196_608


def test_a_quantized_k_cache_is_checked_against_the_latent_head(tmp_path):
    # kv_lora_rank 64 + qk_rope_head_dim 16 = 80, llama.cpp's n_embd_head_k for this file: q8_0's blocks of 32 do not
    # divide it (80 = 2 x 32 + 16), so llama.cpp refuses the context with flash attention, although hidden / heads
    # (256 / 4 = 64) is a multiple of 32
    path = tmp_path / "odd.gguf"
    write_deepseek2(path, rope=16)
    e = llama(path, n_ctx=1024, cache_type_k="q8_0")
    assert any("do not divide the head size, 80" in w for w in e.warnings), e.warnings
    # the default (32 + 64 = 96 = 3 x 32) divides: no such warning
    write_deepseek2(tmp_path / "even.gguf")
    assert not any("do not divide" in w for w in llama(tmp_path / "even.gguf", n_ctx=1024,
                                                          cache_type_k="q8_0").warnings)
