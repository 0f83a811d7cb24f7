"""benchmarks/torchtune_nf4_load.py: torchtune 0.1's QLoRA setup (torchao 0.1's NF4 quantization on the GPU)
replayed through vramwise's model of the caching allocator."""

from __future__ import annotations

import torchtune_nf4_load as L

# Llama-2-7B: hidden 4096, MLP 11008, 32 layers, vocab 32000, rank 8 on q, k, v, output_proj, w1, w2, w3.
N_ATTN = 4096 * 4096  # 16,777,216 elements
N_MLP = 4096 * 11008  # 45,088,768 elements


def test_what_the_setup_keeps_is_the_model_as_torchtune_holds_it():
    # Each NF4 projection of n elements keeps (every request rounded up to 512 bytes): its 16 code values
    # (32 B -> 512), int8 scalers n/64, the quantization factors' whole bf16 buffer n/32 (quantization_factor[:, 0]
    # is a view of it), the scalers' mean (2 B -> 512) and the packed data n/2:
    #   attention: 512 + 262,144 + 524,288 + 512 + 8,388,608 = 9,176,064
    #   MLP:       512 + 704,512 + 1,409,024 + 512 + 22,544,384 = 24,658,944
    # LoRA in bf16: q, k, v, output_proj 2 x 8 x 4096 x 2 = 131,072 each (524,288); w1, w2, w3 8 x (4096 + 11008)
    # x 2 = 241,664 each (724,992); the RoPE cache 4096 x 64 x 2 x 4 = 2,097,152; two norms 2 x 8,192.
    per_layer = 4 * 9_176_064 + 3 * 24_658_944 + 524_288 + 724_992 + 2_097_152 + 16_384  # 114,043,904
    # 32 layers, the embedding and the output head (32000 x 4096 x 2 = 262,144,000 each), the final norm 8,192
    expected = 32 * per_layer + 2 * 262_144_000 + 8_192  # 4,173,701,120
    assert L.replay_setup(L.LLAMA_2_7B).requested == expected == 4_173_701_120


def test_the_replayed_reserve_is_the_tutorials_published_one():
    # torchtune's QLoRA tutorial at 0914d5c (docs/source/tutorials/qlora_finetune.rst): "Peak memory reserved,
    # model init" 9.13 GB for llama2/7B_qlora_single_device; the reserve is what the allocator keeps, most of
    # it above the 4.17 GB the model holds (blocks of the 32-bytes-per-element broadcasts, split by the small
    # NF4 tensors made after them)
    setup = L.replay_setup(L.LLAMA_2_7B)
    assert abs(setup.reserved / L.PUBLISHED_INIT_RESERVED - 1) < 0.01
    assert setup.reserved > 2 * setup.requested


def test_the_broadcast_is_held_unchunked_and_bounded_by_chunks():
    whole = L.replay_setup(L.LLAMA_2_7B)
    chunked = L.replay_setup(L.LLAMA_2_7B, chunked=True)
    assert whole.requested == chunked.requested  # the same model is kept either way
    # torchao 0.1: loading an MLP projection with every other tensor in place holds the bf16 source (2n), the
    # scaled weight (2n), the difference and its absolute value (32n each): at least 68n above what is kept
    assert whole.max_requested - whole.requested >= 68 * N_MLP
    # torchao 0.2: at most, while the last copy is made, the builder's layer (114,043,904 B, dropped after the
    # copies) and one projection's dequantization (get_original_weight: two int64 halves 4n + 4n, four bf16 halves
    # n each, the flattened scalers n, the stacked weight 2n: 15n) or its quantization (source, scaled weight and
    # uint8 buffer 5n, the chunk's 32 + 32 + 8 + 1 bytes per element of 1 Mi elements)
    assert chunked.max_requested - chunked.requested <= 114_043_904 + 16 * N_MLP + 73 * L.CHUNK
