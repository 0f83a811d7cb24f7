"""The llama.cpp profile: a GGUF file's weights per device, its KV cache and output buffer, as llama.cpp (3514e9f6)
allocates them. Every expected figure is derived by hand below from llama.cpp's rules (cited in
formulas/llama.cpp) and the tensors written here with gguf's own writer (``gguf.GGUFWriter``).

The small Qwen2 of tests/gguf_files.py: 2 layers, hidden 256, 4 heads of 64, 2 KV heads (n_embd_k_gqa =
n_embd_v_gqa = 2 x 64 = 128), 290 tokenizer tokens (the token embedding has 300 rows), training context 32768,
an untied output. Its bytes (tests/gguf_files.py): 446,464 a layer, token_embd 153,600, output.weight 81,600,
output_norm 1,024.
"""

from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                          "the GGUF files these tests read")
np = pytest.importorskip("numpy")

import vramwise  # noqa: E402
from vramwise.errors import SettingsError  # noqa: E402
from vramwise.surfaces.cli.main import main  # noqa: E402

from gguf_files import write_qwen2  # noqa: E402  (tests/gguf_files.py)

LAYER = 446_464
EMBEDDING = 153_600
OUTPUT = 81_600 + 1_024  # output.weight and output_norm.weight: the output layer
F16_CELL = 128 * 2 + 128 * 2  # one cell of one layer: K and V rows of 128 f16 values


@pytest.fixture
def qwen2(tmp_path):
    path = tmp_path / "tiny-Q4_K_M.gguf"
    write_qwen2(path)
    return str(path)


def llama(path, **settings):
    return vramwise.estimate(path, profile="llama.cpp", **settings)


def test_defaults_f16_cache_all_layers_offloaded(qwen2):
    e = llama(qwen2, n_ctx=4096)  # no method given: the profile's one method, inference
    f = e.figures
    assert e.settings.method == "inference"
    # n_ctx 4096 is a multiple of 256: 4096 cells, one stream (n_parallel 1)
    assert (f["n_ctx"], f["n_ctx_seq"], f["kv_cells"], f["n_stream"]) == (4096, 4096, 4096, 1)
    # 2 layers x 4096 cells x (128 x 2 bytes of K + 128 x 2 of V) = 4,194,304
    assert f["kv_cache"] == f["gpu_kv_cache"] == 2 * 4096 * F16_CELL == 4_194_304
    assert f["host_kv_cache"] == 0
    # n_gpu_layers all: both layers and the output layer on the GPU, the token embedding on the host
    assert f["offloaded_layers"] == 2
    assert f["gpu_weights"] == 2 * LAYER + OUTPUT == 975_552
    assert f["host_weights"] == EMBEDDING
    # logits of n_vocab (the 290 tokenizer tokens, not the embedding's 300 rows) x 1 sequence x 4 bytes
    assert f["output_buffer"] == 290 * 1 * 4
    # the compute buffer at n_ubatch 512 with flash attention (auto: on): a hidden state 256 x 512 x 4 = 524,288, the
    # f16 mask 4096 x 512 x 2 = 4,194,304; the GPU runs the layers: mask + 4 hidden states = 6,291,456 (above the
    # logits 290 x 512 x 4 = 593,920 and a hidden state); the host holds the inputs, mask + a hidden state, 4,718,592
    assert (f["gpu_compute_buffer"], f["host_compute_buffer"]) == (6_291_456, 4_718_592)
    assert f["gpu_total"] == 975_552 + 4_194_304 + 6_291_456
    assert f["host_total"] == EMBEDDING + 1_160 + 4_718_592
    assert e.total == f["gpu_total"] + f["host_total"]
    assert e.min_per_gpu(1) == f["gpu_total"]


def test_q8_0_cache_and_padding(qwen2):
    e = llama(qwen2, n_ctx=5000, cache_type_k="q8_0", cache_type_v="q8_0")
    f = e.figures
    # 5000 padded to 256: 5120 cells; a q8_0 row of 128 values is 128 / 32 = 4 blocks of 34 bytes = 136 bytes
    assert f["kv_cells"] == 5120
    assert f["kv_cache"] == 2 * 5120 * (136 + 136) == 2_785_280


def test_q4_0_k_and_f32_v(qwen2):
    f = llama(qwen2, n_ctx=4096, cache_type_k="q4_0", cache_type_v="f32").figures
    # K: 4 blocks of 18 bytes = 72 a row; V: 128 x 4 = 512 a row; 2 layers x 4096 cells
    assert f["kv_cache"] == 2 * 4096 * (72 + 512) == 4_784_128


@pytest.mark.parametrize("unified, cells, seq_cells, streams", [
    # n_ctx 4100 -> 4352 (17 x 256); a stream each: 4352 // 4 = 1088 -> 1280 per sequence, n_ctx = 1280 x 4 = 5120
    (False, 5120, 1280, 4),
    # unified: one stream of the whole 4352 cells
    (True, 4352, 4352, 1),
])
def test_n_parallel_4_with_and_without_kv_unified(qwen2, unified, cells, seq_cells, streams):
    f = llama(qwen2, n_ctx=4100, n_parallel=4, kv_unified=unified).figures
    assert (f["n_ctx"], f["n_ctx_seq"], f["n_stream"], f["kv_cells"]) == (cells, seq_cells, streams, cells)
    assert f["kv_cache"] == 2 * cells * F16_CELL
    assert f["output_buffer"] == 290 * 4 * 4  # logits for n_seq_max = 4 outputs


def test_n_ctx_0_the_default_is_the_training_context(qwen2):
    # common/common.h at 3514e9f6: n_ctx = 0, the context the model was trained with
    assert llama(qwen2).figures == llama(qwen2, n_ctx=0).figures
    f = llama(qwen2).figures
    assert f["kv_cells"] == 32768  # qwen2.context_length
    assert f["kv_cache"] == 2 * 32768 * F16_CELL == 33_554_432


@pytest.mark.parametrize("ngl, layers, output_on_gpu", [
    (0, 0, False),   # i_gpu_start = 2 + 1 - 0 = 3: nothing on the GPU
    (1, 0, True),    # i_gpu_start = 2: only the output layer (index n_layer = 2)
    (2, 1, True),    # i_gpu_start = 1: layer 1 and the output layer
    (3, 2, True),    # i_gpu_start = 0: everything
    (99, 2, True),
])
def test_n_gpu_layers_partial(qwen2, ngl, layers, output_on_gpu):
    f = llama(qwen2, n_ctx=4096, n_gpu_layers=ngl).figures
    assert f["offloaded_layers"] == layers
    assert f["gpu_weights"] == layers * LAYER + (OUTPUT if output_on_gpu else 0)
    assert f["host_weights"] == EMBEDDING + (2 - layers) * LAYER + (0 if output_on_gpu else OUTPUT)
    # every layer caches alike: the offloaded layers' caches on the GPU, the others' on the host
    assert f["gpu_kv_cache"] == layers * 4096 * F16_CELL
    assert f["host_kv_cache"] == (2 - layers) * 4096 * F16_CELL
    assert f["gpu_weights"] + f["host_weights"] == 1_129_152 + 0  # the file's bytes (untied: no duplicate)


def _write_gemma2(path, layers: int = 4, window: int = 4096):
    """A Gemma 2 of ``layers`` layers (hidden 256, 2 heads, 1 KV head of 64, window ``window``), tied: only its
    token embedding (600 x 256 in F16) is written, so its weights are the embedding's 307,200 bytes."""
    w = gguf.GGUFWriter(path, "gemma2")
    w.add_block_count(layers)
    w.add_embedding_length(256)
    w.add_feed_forward_length(1024)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_key_length(64)
    w.add_value_length(64)
    w.add_context_length(8192)
    w.add_sliding_window(window)
    w.add_token_list([f"t{i}" for i in range(600)])
    w.add_tensor("token_embd.weight", np.zeros((600, 256), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_sliding_window_layers_have_their_own_cache(tmp_path):
    path = tmp_path / "gemma2.gguf"
    _write_gemma2(path)
    e = llama(str(path), n_ctx=8192)
    f = e.figures
    # Gemma 2 alternates: layers 0 and 2 slide (window 4096), 1 and 3 attend fully (transformers' layer_types;
    # llama.cpp's swa pattern 2). n_embd_k_gqa = 1 x 64: an f16 cell is 64 x 2 + 64 x 2 = 256 bytes.
    # full layers: 8192 cells; sliding layers: GGML_PAD(min(8192, 4096 x 1 + 512 (n_ubatch)), 256) = 4608
    assert (f["kv_cells"], f["swa_kv_cells"]) == (8192, 4608)
    assert f["kv_cache"] == 2 * 8192 * 256 + 2 * 4608 * 256 == 6_553_600
    # tied: the token embedding stays on the host and is loaded again as the output layer on the GPU
    assert f["host_weights"] == 600 * 256 * 2
    assert f["gpu_weights"] == 600 * 256 * 2


def test_sliding_window_unified_counts_every_sequence(tmp_path):
    path = tmp_path / "gemma2.gguf"
    _write_gemma2(path, window=512)
    f = llama(str(path), n_ctx=8192, n_parallel=4, kv_unified=True, n_ubatch=256).figures
    # unified: one stream of 8192 cells; the sliding cache holds the window for each of the 4 sequences and one
    # ubatch: GGML_PAD(min(8192, 512 x 4 + 256), 256) = 2304
    assert (f["kv_cells"], f["swa_kv_cells"]) == (8192, 2304)
    assert f["kv_cache"] == 2 * 8192 * 256 + 2 * 2304 * 256
    g = llama(str(path), n_ctx=8192, n_parallel=4, n_ubatch=256).figures
    # a stream each: 2048 cells per sequence; the sliding cache: GGML_PAD(min(2048, 512 + 256), 256) = 768 a stream
    assert (g["kv_cells"], g["swa_kv_cells"]) == (8192, 768 * 4)


def test_refusals_are_one_line(qwen2, tmp_path):
    with pytest.raises(SettingsError, match=r"^profile llama.cpp does not model lora \(it models inference\)$"):
        llama(qwen2, method="lora")
    with pytest.raises(SettingsError, match="unknown cache type k 'q9_0' \\(choose one of: f16, f32, bf16, q8_0"):
        llama(qwen2, cache_type_k="q9_0")
    with pytest.raises(SettingsError, match="n_parallel must be a positive integer"):
        llama(qwen2, n_parallel=0)
    with pytest.raises(SettingsError, match=r"^n_ctx must be a number of tokens up to 33,554,432, or 0 for the model's "
                                            r"training context, got -5$"):
        llama(qwen2, n_ctx=-5)
    with pytest.raises(SettingsError, match=r"^n_gpu_layers must be a number of layers \(0 to 65,536\) or all, "
                                            r"got 'some'$"):
        llama(qwen2, n_gpu_layers="some")
    assert llama(qwen2, n_ctx=256, n_gpu_layers="all").figures == llama(qwen2, n_ctx=256, n_gpu_layers=-1).figures
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, '
                      '"intermediate_size": 512, "vocab_size": 300}')
    with pytest.raises(SettingsError, match="the llama.cpp profile estimates a GGUF file"):
        llama(str(config))


def test_quantized_v_without_flash_attention_is_flagged(qwen2):
    e = llama(qwen2, n_ctx=4096, cache_type_v="q8_0", flash_attn="off")
    assert any("refuses a quantized V cache (q8_0) without flash attention" in w for w in e.warnings)
    assert not any("flash attention" in w for w in llama(qwen2, cache_type_v="q8_0").warnings)


def test_cli_prints_per_device(qwen2, capsys):
    assert main(["estimate", qwen2, "--profile", "llama.cpp", "--n-ctx", "8192", "--n-gpu-layers", "2"]) == 0
    out = capsys.readouterr().out
    assert "inference, GGUF Q4_K_M weights as stored, n_ctx 8192" in out
    assert "n_gpu_layers 2" in out
    assert "1 layers offloaded" in out
    assert "GPU: weights" in out and "host: weights" in out and "output buffer" in out
    assert ("compute buffer: on the CPU alone, for llama, qwen2, gemma2, qwen3moe, deepseek2, lfm2 and mamba2, "
            "ggml-alloc's placement simulated") in out
    assert main(["estimate", qwen2, "--profile", "llama.cpp", "--method", "qlora"]) != 0
    assert "does not model qlora" in capsys.readouterr().err


def test_explain_names_llama_cpp_settings(qwen2, capsys):
    assert main(["explain", qwen2, "--profile", "llama.cpp", "--n-parallel", "2"]) == 0
    out = capsys.readouterr().out
    assert "settings: inference, GGUF Q4_K_M weights as stored, n_ctx 0, n_parallel 2" in out
    # the repeating layers' bytes from layer i on: 2 x 446,464, 446,464, then none
    assert "stored_layer_bytes_from = (892928, 446464, 0)" in out


@pytest.mark.parametrize("ngl, gpu_kv", [
    # n_gpu_layers 2: layer 3 (full attention, 8192 cells x 256 bytes) and the output layer on the GPU
    (2, 8192 * 256),
    # 3: layers 2 (sliding, 4608 cells) and 3
    (3, 4608 * 256 + 8192 * 256),
    # 4: layers 1 to 3: two full layers and one sliding
    (4, 4608 * 256 + 2 * 8192 * 256),
    (0, 0),
])
def test_partial_offload_of_sliding_and_full_layers_is_layer_by_layer(tmp_path, ngl, gpu_kv):
    path = tmp_path / "gemma2.gguf"
    _write_gemma2(path)
    f = llama(str(path), n_ctx=8192, n_gpu_layers=ngl).figures
    assert f["gpu_kv_cache"] == gpu_kv
    assert f["host_kv_cache"] == 6_553_600 - gpu_kv


HIDDEN = 256 * 512 * 4  # one hidden state of the default ubatch (n_ubatch 512), float32: 524,288
LOGITS = 290 * 512 * 4  # the logits of 512 outputs over the 290 tokenizer tokens, float32: 593,920


def test_compute_buffer_without_flash_attention(qwen2):
    f = llama(qwen2, n_ctx=4096, flash_attn="off").figures
    # float32 mask 4096 x 512 x 4 = 8,388,608; scores 4 heads x 4096 x 512 x 4 = 33,554,432; the GPU (layers and
    # output): max(33,554,432 + 8,388,608 + 4 x 524,288, 593,920 + 524,288) = 44,040,192; the host: the mask and a
    # hidden state, 8,912,896
    assert f["gpu_compute_buffer"] == f["gpu0_compute_buffer"] == 44_040_192
    assert f["host_compute_buffer"] == 8_388_608 + HIDDEN == 8_912_896
    assert f["compute_buffer"] == 44_040_192 + 8_912_896


def test_compute_buffer_on_the_cpu_alone(qwen2):
    f = llama(qwen2, n_ctx=4096, flash_attn="off", n_gpu_layers=0).figures
    # n_gpu_layers 0: the host runs the layers and the output, the one device's buffer as ggml-alloc places the
    # graph's tensors (compute.yaml graph, the qwen2 template), by hand from ggml-alloc.c (best fit, frees after the
    # last consumer, in-place ops). The inputs first, in leaf order: tokens 2,048, inp_embd 524,288, positions
    # 2,048, K rows 4,096, V rows (V transposed without flash attention: 512 x 128 of i64) 524,288, the float32 mask
    # 8,388,608, out_ids 2,048: 9,447,424 bytes, never freed before the layers end. Layer 0: embd (the residual)
    # at 9,447,424, the norm at 9,971,712 (attn_norm in its place), Q at 10,496,000 (its bias added in place), Q
    # after RoPE at 11,020,288 (a new tensor: its parent is a reshape); Q's 524,288 freed. V 262,144 and K 262,144
    # fill that hole; attn_norm freed; K after RoPE in the norm's hole; the cache writes free K and V, so that
    # 9,971,712 to 11,020,288 is free. The scores (4 heads x 4,096 x 512 x 4 = 33,554,432, softmaxed in place)
    # fit no hole: at the end, 11,544,576. Nothing later reaches higher (the next layer reuses the same places,
    # the logits are 290 x 512 x 4): 11,544,576 + 33,554,432 = 45,099,008 (the fixture's qwen3moe, of the same
    # widths, has llama.cpp's own buffer at this figure: tests/fixtures/llama_cpp_reference.json). No GPU's.
    assert (f["gpu_compute_buffer"], f["host_compute_buffer"]) == (0, 45_099_008)
    assert f["host_total"] == EMBEDDING + 2 * LAYER + OUTPUT + 2 * 4096 * F16_CELL + 290 * 4 + 45_099_008


def test_compute_buffer_when_only_the_output_is_offloaded(qwen2):
    f = llama(qwen2, n_ctx=4096, flash_attn="off", n_gpu_layers=1).figures
    # the GPU holds the output layer alone: the logits and a hidden state, 593,920 + 524,288 = 1,118,208; the host
    # runs both layers: 44,040,192
    assert f["gpu_compute_buffer"] == LOGITS + HIDDEN == 1_118_208
    assert f["host_compute_buffer"] == 44_040_192


def test_compute_buffer_at_a_smaller_ubatch_and_context(qwen2):
    f = llama(qwen2, n_ctx=256, n_ubatch=128).figures
    # n_ctx 256, n_ubatch 128, flash attention (auto: on): hidden 256 x 128 x 4 = 131,072; f16 mask 256 x 128 x 2 =
    # 65,536; attention 65,536 + 4 x 131,072 = 589,824; output 290 x 128 x 4 + 131,072 = 279,552: the attention
    assert f["gpu_compute_buffer"] == 589_824
    # n_ctx 256, n_ubatch 512 (512 tokens: the reserve takes min(n_ctx, n_ubatch) = 256): hidden 262,144, mask 256 x
    # 256 x 2 = 131,072; attention 131,072 + 4 x 262,144 = 1,179,648; logits 290 x 256 x 4 = 296,960 + 262,144
    assert llama(qwen2, n_ctx=256).figures["gpu_compute_buffer"] == 1_179_648


def test_compute_buffer_rounds_the_ubatch_to_the_sequences(qwen2):
    f = llama(qwen2, n_ctx=3 * 1024, n_parallel=3, flash_attn="off").figures
    # 3 sequences, each a stream of 1,024 cells; the reserved ubatch 512 rounded up to 513 (3 x 171) tokens, the
    # logits 512 outputs. hidden 256 x 513 x 4 = 525,312; mask 1,024 x 513 x 4 = 2,101,248; scores 4 x 1,024 x 513 x
    # 4 = 8,404,992: attention 8,404,992 + 2,101,248 + 4 x 525,312 = 12,607,488
    assert f["gpu_compute_buffer"] == 12_607_488
    assert f["host_compute_buffer"] == 2_101_248 + 525_312
