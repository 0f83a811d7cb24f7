"""The llama.cpp profile's companions: a draft model for speculative decoding (model_draft) and a multimodal
projector (mmproj), as llama-server loads them at 0c1e5709 (formulas/llama.cpp/companions.yaml). Every expected
figure is derived by hand below from the tensors written here with gguf's own writer and llama.cpp's rules.

The model: tests/gguf_files.py's small Qwen2 (write_qwen2): 446,464 bytes a layer, token_embd 153,600, the
output layer 81,600 + 1,024; 2 layers of 2 KV heads of 64 (K and V rows of 128 values), 290 tokenizer tokens.

The draft: the same Qwen2 in Q8_0 (write_qwen2_as "Q8_0"), a Q8_0 row of 32 values in 34 bytes. A layer:
  F32 norms and biases: attn_norm 256 x 4 + q bias 256 x 4 + k bias 128 x 4 + v bias 128 x 4 + ffn_norm 256 x 4
      = 1,024 + 1,024 + 512 + 512 + 1,024 = 4,096
  Q8_0 matrices, rows x (cols / 32) x 34: attn_q 256 x 8 x 34 = 69,632; attn_k and attn_v 128 x 8 x 34 = 34,816
      each; attn_output 69,632; ffn_gate and ffn_up 512 x 8 x 34 = 139,264 each; ffn_down 256 x 16 x 34 = 139,264
      = 69,632 + 2 x 34,816 + 69,632 + 3 x 139,264 = 626,688
  = 630,784 a layer. The output layer: output.weight 300 x 8 x 34 = 81,600 and output_norm 1,024 = 82,624; the
  token embedding F16 300 x 256 x 2 = 153,600.
The draft's context is the model's n_ctx with the model's n_parallel (common/speculative.cpp:2446-2530).
"""

from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                          "the GGUF files these tests read")
np = pytest.importorskip("numpy")

import vramwise  # noqa: E402
from vramwise.errors import ConfigError  # noqa: E402
from vramwise.surfaces.cli.main import main  # noqa: E402

from gguf_files import write_qwen2, write_qwen2_as  # noqa: E402  (tests/gguf_files.py)

D_LAYER = 630_784
D_OUTPUT = 82_624
D_EMBEDDING = 153_600
F16_CELL = 128 * 2 + 128 * 2  # one cell of one layer: K and V rows of 128 f16 values
# the projector: v.patch_embd F16 64 x 588 x 2 = 75,264 and mm.0.weight F32 256 x 64 x 4 = 65,536
MMPROJ = 75_264 + 65_536


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("companions")
    write_qwen2(d / "model.gguf")
    write_qwen2_as(d / "draft-Q8_0.gguf", "Q8_0")
    w = gguf.GGUFWriter(d / "mmproj-model-f16.gguf", "clip")  # as llama.cpp's converter names a projector's arch
    w.add_bool("clip.has_vision_encoder", True)
    w.add_tensor("v.patch_embd.weight", np.zeros((64, 3 * 14 * 14), np.float16))
    w.add_tensor("mm.0.weight", np.zeros((256, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {k: str(d / f) for k, f in (("model", "model.gguf"), ("draft", "draft-Q8_0.gguf"),
                                       ("mmproj", "mmproj-model-f16.gguf"))}


def llama(path, **settings):
    return vramwise.estimate(path, profile="llama.cpp", **settings)


def test_draft_defaults_every_layer_on_the_gpu(files):
    alone = llama(files["model"], n_ctx=4096)
    e = llama(files["model"], n_ctx=4096, model_draft=files["draft"])
    f, a = e.figures, alone.figures
    # n_gpu_layers_draft all: both layers and the output layer on the GPU, the token embedding on the host
    assert f["draft_gpu_weights"] == 2 * D_LAYER + D_OUTPUT == 1_344_192
    assert f["draft_host_weights"] == D_EMBEDDING
    assert f["draft_weights"] == 1_497_792
    # the model's context, 4096 cells, f16 caches: 2 layers x 4096 x 512 bytes, on the GPU with the layers
    assert f["draft_kv_cache"] == f["draft_gpu_kv_cache"] == 2 * 4096 * F16_CELL == 4_194_304
    assert f["draft_host_kv_cache"] == 0
    # its logits: 290 tokens x 1 sequence x 4 bytes
    assert f["draft_output_buffer"] == 290 * 4
    assert f["draft_gpu0"] == 1_344_192 + 4_194_304
    assert f["draft_host"] == D_EMBEDDING + 1_160
    # the model's own figures are unchanged; each device's total holds the draft's share
    for name in ("gpu_weights", "gpu_kv_cache", "gpu_compute_buffer", "host_weights", "output_buffer"):
        assert f[name] == a[name]
    assert f["gpu_total"] == a["gpu_total"] + 1_344_192 + 4_194_304
    assert f["host_total"] == a["host_total"] + D_EMBEDDING + 1_160
    assert e.total == alone.total + 1_497_792 + 4_194_304 + 1_160
    assert e.min_per_gpu(1) == f["gpu_total"]
    assert any("draft model's compute buffer is not counted" in w for w in e.warnings)


def test_draft_settings_its_layers_and_cache_types(files):
    e = llama(files["model"], n_ctx=4096, model_draft=files["draft"], n_gpu_layers_draft=1,
              cache_type_k_draft="q8_0", cache_type_v_draft="f16")
    f = e.figures
    # n_gpu_layers_draft 1: the output layer alone on the GPU (i_gpu_start = 2 + 1 - 1 = 2), both layers on the host
    assert f["draft_gpu_weights"] == D_OUTPUT
    assert f["draft_host_weights"] == D_EMBEDDING + 2 * D_LAYER
    # the draft's cache on its layers' device, the host: K q8_0 (128 / 32 x 34 = 136 bytes a row), V f16 256
    assert f["draft_kv_cache"] == f["draft_host_kv_cache"] == 2 * 4096 * (136 + 256) == 3_211_264
    assert f["draft_gpu_kv_cache"] == 0
    assert f["draft_host"] == D_EMBEDDING + 2 * D_LAYER + 3_211_264 + 1_160
    # the model keeps its own settings: every layer and f16 caches
    assert f["offloaded_layers"] == 2 and f["gpu_kv_cache"] == 2 * 4096 * F16_CELL


def test_draft_context_is_the_models_padded_context(files):
    # n_ctx 5000 over 2 sequences: the model's n_ctx_seq is GGML_PAD(2500, 256) = 2560 and its n_ctx 5120
    # (llama-context.cpp:292-303); the draft's context is llama_n_ctx(ctx_tgt) = 5120 with n_parallel 2: 2 streams
    # of 2560 cells
    f = llama(files["model"], n_ctx=5000, n_parallel=2, model_draft=files["draft"]).figures
    assert (f["n_ctx"], f["n_ctx_seq"]) == (5120, 2560)
    assert f["draft_kv_cache"] == 2 * 5120 * F16_CELL == 5_242_880
    # its output buffer: 290 tokens x 2 sequences x 4 bytes
    assert f["draft_output_buffer"] == 290 * 2 * 4
    # n_ctx 0: the model's training context, 32768 cells, for the draft too
    f = llama(files["model"], model_draft=files["draft"]).figures
    assert f["draft_kv_cache"] == 2 * 32768 * F16_CELL


def test_draft_split_over_two_gpus_as_the_model(files):
    # 2 GPUs, equal shares: 3 positions (2 layers and the output), split at 0.5; layer 0 at 0/3 and layer 1 at
    # 1/3 on GPU 0, the output layer at 2/3 on GPU 1 (split.yaml); the draft follows the model's split settings
    f = llama(files["model"], n_ctx=4096, gpu_count=2, model_draft=files["draft"]).figures
    assert f["draft_gpu0"] == 2 * D_LAYER + 2 * 4096 * F16_CELL == 5_455_872
    assert f["draft_gpu1"] == D_OUTPUT
    alone = llama(files["model"], n_ctx=4096, gpu_count=2).figures
    assert f["gpu0_total"] == alone["gpu0_total"] + 5_455_872
    assert f["gpu1_total"] == alone["gpu1_total"] + D_OUTPUT


def test_mmproj_weights_on_the_first_gpu_or_the_host(files):
    alone = llama(files["model"], n_ctx=4096).figures
    f = llama(files["model"], n_ctx=4096, mmproj=files["mmproj"]).figures
    assert f["mmproj_weights"] == f["gpu_mmproj"] == MMPROJ == 140_800
    assert f["host_mmproj"] == 0
    assert f["gpu_total"] == alone["gpu_total"] + MMPROJ and f["host_total"] == alone["host_total"]
    f = llama(files["model"], n_ctx=4096, mmproj=files["mmproj"], mmproj_offload=False).figures
    assert (f["gpu_mmproj"], f["host_mmproj"]) == (0, MMPROJ)
    assert f["gpu_total"] == alone["gpu_total"] and f["host_total"] == alone["host_total"] + MMPROJ
    # over two GPUs, on the first only (clip.cpp initialises the first GPU's backend)
    two = llama(files["model"], n_ctx=4096, gpu_count=2).figures
    f = llama(files["model"], n_ctx=4096, gpu_count=2, mmproj=files["mmproj"]).figures
    assert (f["gpu0_total"], f["gpu1_total"]) == (two["gpu0_total"] + MMPROJ, two["gpu1_total"])


def test_projector_refused_as_a_model_and_a_model_as_a_projector(files):
    with pytest.raises(ConfigError, match="GGUF architecture 'clip' has no table in formulas/gguf.yaml"):
        llama(files["mmproj"])
    with pytest.raises(ConfigError, match=r"general.architecture is 'qwen2', not a projector's \('clip'"):
        llama(files["model"], mmproj=files["model"])
    with pytest.raises(ConfigError, match=r"the draft model \(model_draft\): .*architecture 'clip' has no table"):
        llama(files["model"], model_draft=files["mmproj"])


def test_draft_settings_without_a_draft_are_flagged(files):
    e = llama(files["model"], n_ctx=4096, n_gpu_layers_draft=3)
    assert any("without model_draft there is no draft" in w for w in e.warnings)
    assert e.figures["draft_weights"] == 0


def test_cli_prints_the_companions_per_device(files, capsys):
    assert main(["estimate", files["model"], "--profile", "llama.cpp", "--n-ctx", "4096", "--model-draft",
                 files["draft"], "--n-gpu-layers-draft", "1", "--mmproj", files["mmproj"], "--no-mmproj-offload"]) == 0
    out = capsys.readouterr().out
    assert "model_draft " in out and "n_gpu_layers_draft 1" in out and "mmproj_offload false" in out
    assert "draft model: weights" in out and "projector (mmproj): weights" in out
    assert main(["fit", files["model"], "--profile", "llama.cpp", "--gpu", "64MiB", "--n-ctx", "4096", "--gpus", "2",
                 "--model-draft", files["draft"], "--mmproj", files["mmproj"]]) == 0
    out = " ".join(capsys.readouterr().out.split())
    # GPU 0: both draft layers and their cache, 5,455,872 bytes = 0.01 GiB; GPU 1 the output layer; the projector
    # on GPU 0
    assert "these totals hold the draft model's weights, KV cache and output buffer (GPU 0 0.01 GiB, GPU 1 0.00 GiB" in out
    assert "the projector's weights (0.00 GiB on GPU 0" in out
