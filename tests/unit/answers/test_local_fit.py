"""The local-inference answers (vramwise.answers.local) under the llama.cpp profile: the largest n_ctx, the layers to
offload, the parallel sequences and the host memory, each derived by hand below from the profile's formulas
(formulas/llama.cpp) and the small Qwen2 of tests/gguf_files.py.

That model: 2 layers of 446,464 bytes, the output layer 82,624 bytes (output.weight 81,600 + output_norm 1,024),
the token embedding 153,600 bytes (always on the host), 290 tokenizer tokens, training context 32,768, 2 KV heads of
64: a K or V row of 128 values. An f16 cell of one layer is 128 x 2 (K) + 128 x 2 (V) = 512 bytes; with both layers
on the GPU, 1,024 bytes a cell. So with every layer offloaded, n_parallel 1 and f16 caches:

    gpu_total = 2 x 446,464 + 82,624 + 1,024 x cells = 975,552 + 1,024 x cells,  cells = n_ctx padded to 256,

and the GPU's compute buffer (formulas/llama.cpp/compute.yaml) at the defaults (n_ubatch 512 when n_ctx >= 512,
flash attention auto, which is on: no attention scores, an f16 mask): the mask cells x 512 x 2 = 1,024 x cells and
four hidden states 4 x 256 x 512 x 4 = 2,097,152 (above the logits 290 x 512 x 4 = 593,920 and one hidden state
524,288), so

    gpu_total = 975,552 + 2,097,152 + 2,048 x cells = 3,072,704 + 2,048 x cells.

The host's compute buffer with every layer on the GPU is the inputs, the mask and one hidden state: 1,024 x cells
+ 524,288.
"""

from __future__ import annotations

import pytest

pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes the "
                                   "GGUF files these tests read")

import vramwise  # noqa: E402
from vramwise.answers.local import LocalFit, local_fit  # noqa: E402  (LocalFit: vramwise.answers.offload)
from vramwise.errors import SettingsError  # noqa: E402

from gguf_files import write_qwen2  # noqa: E402  (tests/gguf_files.py)

MIB = 2**20
WEIGHTS_ON_GPU = 2 * 446_464 + 82_624  # 975,552
CELL = 2 * 512  # both layers' f16 K and V rows, bytes a cell
FIXED = WEIGHTS_ON_GPU + 4 * 256 * 512 * 4  # the weights and the compute buffer's four hidden states: 3,072,704


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    path = tmp_path_factory.mktemp("local") / "tiny-Q4_K_M.gguf"
    write_qwen2(path)
    return str(path)


def test_largest_n_ctx_is_a_multiple_of_the_padding(qwen2):
    r = local_fit(qwen2, gpu=8 * MIB, n_ctx=4096)
    # 3,072,704 + 2,048 x cells <= 8,388,608  ->  cells <= 2,595.7; n_ctx pads to 256, so 2,560 (10 x 256) fits and
    # 2,561 (padded to 2,816: 3,072,704 + 5,767,168 = 8,839,872) does not
    assert r.max_n_ctx == r.max_n_ctx_memory == 2560
    assert r.n_ctx_cap == 32768 and r.notes == ()
    assert isinstance(r, LocalFit) and r.headroom == 0.0  # no published llama.cpp run: no default headroom


def test_quantized_cache_holds_more_context(qwen2):
    r = local_fit(qwen2, gpu=8 * MIB, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    # q8_0: a row of 128 values is 4 blocks of 34 bytes = 136; K + V of 2 layers = 544 bytes a cell, and the f16 mask
    # 1,024 a cell: 3,072,704 + 1,568 x cells <= 8,388,608 -> cells <= 3,390.2 -> 3,328 (13 x 256)
    assert r.max_n_ctx == 3328


def test_headroom_is_kept_free(qwen2):
    r = local_fit(qwen2, gpu=8 * MIB, headroom=0.1)
    # usable int(8,388,608 x 0.9) = 7,549,747: 2,048 x cells <= 4,477,043 -> cells <= 2,186.1 -> 2,048 (8 x 256)
    assert r.usable_bytes == 7_549_747
    assert r.max_n_ctx == 2048


def test_capped_at_the_training_context_and_said(qwen2):
    r = local_fit(qwen2, gpu="24GiB")
    # 24 GiB = 25,769,803,776: cells <= (25,769,803,776 - 3,072,704) / 2,048 = 25,766,731,072 / 2,048 = 12,581,411.7
    # -> 12,581,376 (49,146 x 256)
    assert r.max_n_ctx_memory == 12_581_376
    assert r.max_n_ctx == 32768  # the GGUF's qwen2.context_length, one KV stream
    assert "capped at the model's training context of 32,768 tokens" in r.notes[0]
    assert "memory alone allows 12,581,376" in r.notes[0]


def test_cap_per_sequence_with_parallel_streams(qwen2):
    # n_parallel 2 without kv_unified: two streams, each sequence up to the training context: 2 x 32,768
    assert local_fit(qwen2, gpu="24GiB", n_parallel=2).n_ctx_cap == 65536
    # unified: one stream of n_ctx cells any sequence may fill
    assert local_fit(qwen2, gpu="24GiB", n_parallel=2, kv_unified=True).n_ctx_cap == 32768


def test_nothing_fits(qwen2):
    r = local_fit(qwen2, gpu=1 * MIB)
    # one token pads to 256 cells and reserves a ubatch of 1 token (min(n_ctx, n_ubatch)): 975,552 + 262,144 of cache
    # + a compute buffer of 256 x 1 x 2 (mask) + 4 x 256 x 1 x 4 (hidden states) = 4,608: 1,242,304 > 1,048,576
    assert r.max_n_ctx is None
    assert r.verdict.label == "does not fit"


@pytest.mark.parametrize("mib, label", [
    (11, "fits"),          # 3,072,704 + 2,048 x 4,096 = 11,461,312 <= 11,534,336
    (10, "does not fit"),  # 11,461,312 > 10,485,760: short by 975,552
])
def test_verdict_at_the_settings(qwen2, mib, label):
    r = local_fit(qwen2, gpu=mib * MIB, n_ctx=4096)
    assert r.estimate.figures["gpu_total"] == FIXED + 2_048 * 4096 == 11_461_312
    assert r.verdict.label == label and r.fits == (label == "fits")
    assert r.verdict.margin_bytes == mib * MIB - 11_461_312


def test_tight_inside_the_headroom(qwen2):
    # usable 11,534,336 x 0.9 = 10,380,902.4 < 11,461,312 <= 11,534,336
    assert local_fit(qwen2, gpu=11 * MIB, n_ctx=4096, headroom=0.1).verdict.label == "tight"


def test_layers_to_offload_and_the_host_memory(qwen2):
    r = local_fit(qwen2, gpu=10 * MIB, n_ctx=4096)
    # a layer's f16 cache at 4,096 cells: 4,096 x 512 = 2,097,152. n_gpu_layers k puts the output layer and the last
    # k - 1 layers (with their caches) on the GPU; the GPU's compute buffer is the output's (logits 593,920 + a hidden
    # state 524,288 = 1,118,208) with the output alone, the attention peak (mask 4,096 x 512 x 2 = 4,194,304 + 4 x
    # 524,288 = 6,291,456) once it runs a layer:
    #   k = 2: 82,624 + 446,464 + 2,097,152 + 6,291,456 = 8,917,696 <= 10,485,760;  k = 3: 11,461,312 > 10,485,760
    assert r.layers == 2
    assert r.max_n_gpu_layers == 2 and not r.all_layers
    assert r.gpu_bytes_at_max_layers == 8_917_696
    # the host: token embedding 153,600 + layer 0 446,464 + its cache 2,097,152 + logits 290 x 1 x 4 = 1,160, and its
    # compute buffer: it runs layer 0, the attention peak 6,291,456
    assert r.host_bytes_at_max_layers == 153_600 + 446_464 + 2_097_152 + 1_160 + 6_291_456 == 8_989_832


def test_no_layer_fits_the_whole_model_on_the_host(qwen2):
    r = local_fit(qwen2, gpu=64 * 1024, n_ctx=4096)
    # k = 1 already puts the output layer's 82,624 bytes on a GPU of 65,536
    assert r.max_n_gpu_layers == 0
    assert r.gpu_bytes_at_max_layers == 0
    # everything on the host: the file's 1,129,152 bytes, both caches 2 x 2,097,152, the logits 1,160 and the compute
    # buffer of the whole graph on the CPU alone (ggml-alloc's placement of it, simulated: the estimate's own figure,
    # checked against llama.cpp's buffers in tests/unit/profiles/test_llama_cpp_compute_graph.py)
    one_device = vramwise.estimate(qwen2, profile="llama.cpp", n_ctx=4096, n_gpu_layers=0).figures
    assert one_device["host_compute_buffer"] > 6_291_456  # above the attention peak's tensors alone
    assert r.host_bytes_at_max_layers == 1_129_152 + 4_194_304 + 1_160 + one_device["host_compute_buffer"]


def test_all_layers_fit(qwen2):
    r = local_fit(qwen2, gpu=11 * MIB, n_ctx=4096)
    assert r.max_n_gpu_layers == 3 and r.all_layers  # 11,461,312 <= 11,534,336
    # the token embedding, the logits, and the inputs of the graph (mask 4,194,304 + a hidden state 524,288)
    assert r.host_bytes_at_max_layers == 153_600 + 1_160 + 4_718_592


def test_parallel_sequences_at_a_context(qwen2):
    r = local_fit(qwen2, gpu=24 * MIB, n_ctx=4096)
    # each sequence holds 4,096 cells (n_ctx = 4,096 x n_parallel, one stream each): 4,096 x 1,024 = 4,194,304 a
    # sequence on the GPU. The compute buffer: the reserved ubatch is 512 rounded up to a multiple of p (t tokens),
    # its mask a stream's 4,096 cells x t x 2 and four hidden states 4 x 256 x t x 4: 12,288 x t.
    #   p = 4: t = 512: 975,552 + 16,777,216 + 6,291,456 = 24,044,224 <= 25,165,824
    #   p = 5: t = 515: 975,552 + 20,971,520 + 6,328,320 = 28,275,392 > 25,165,824  -> 4 (the logits stay on the host)
    assert r.slot_ctx == 4096
    assert r.max_n_parallel == 4


def test_fit_answers_locally_for_the_profile(qwen2):
    f = vramwise.fit(qwen2, gpu=8 * MIB, profile="llama.cpp", n_ctx=4096)
    assert isinstance(f, LocalFit)
    assert f.max_n_ctx == 2560  # as test_largest_n_ctx_is_a_multiple_of_the_padding
    d = f.to_dict()
    # at n_ctx 4,096 the 3 layers need 11,461,312 > 8,388,608; 2 need 8,917,696 (test_layers_to_offload_...): too
    # much as well; the output alone 82,624 + 1,118,208 = 1,200,832 fits
    assert (d["max_n_ctx"], d["max_n_gpu_layers"], d["all_layers"]) == (2560, 1, False)
    with pytest.raises(SettingsError, match="gpus 2 and gpu_count 3 disagree"):  # gpu_count 1 is the default
        vramwise.fit(qwen2, gpu=8 * MIB, gpus=2, gpu_count=3, profile="llama.cpp")


def test_fit_over_two_gpus(qwen2):
    # n_ctx 256: 256 cells and a ubatch of 256 tokens (min(n_ctx, n_ubatch)): a hidden state 256 x 256 x 4 = 262,144,
    # the f16 mask 256 x 256 x 2 = 131,072; a GPU running layers: 131,072 + 4 x 262,144 = 1,179,648. One GPU:
    # 975,552 + 256 x 1,024 + 1,179,648 = 2,417,344 > 2,400,000. Below 256 tokens the cache keeps 256 cells and the
    # ubatch is n_ctx tokens, c: 975,552 + 262,144 + c x (256 x 2 + 4 x 256 x 4 = 4,608) <= 2,400,000 -> c <= 252.2:
    # 252
    assert vramwise.fit(qwen2, gpu=2_400_000, profile="llama.cpp", n_ctx=256).max_n_ctx == 252
    # Two GPUs, split equally (llama.cpp's default by free memory): 3 layers on GPUs (2 and the output), split point
    # 0.5: positions 0 and 1 (1/3 < 0.5) on GPU 0, the output (2/3) on GPU 1. Every layer on the GPUs: pipeline
    # parallelism, each GPU keeping 4 copies of its inputs (mask + hidden state: 4 x 393,216 = 1,572,864).
    # GPU 0: 2 x 446,464 = 892,928 of weights, both caches 262,144, 1,179,648 + 1,572,864: 3,907,584;
    # GPU 1: the output layer 82,624, the logits 290 x 256 x 4 = 296,960 and a hidden state 262,144, the copies
    # 1,572,864: 2,214,592. Two GPUs of 2,400,000 hold less context than one: each GPU's copies outweigh the split.
    # At c tokens (< 256): GPU 0 892,928 + 262,144 + 4,608 x c + 4 x (512 + 1,024) x c = 1,155,072 + 10,752 x c <=
    # 2,400,000 -> c <= 115.8: 115
    assert vramwise.fit(qwen2, gpu=2_400_000, gpus=2, profile="llama.cpp", n_ctx=256).max_n_ctx == 115
    # Of 4,000,000 each: GPU 0 grows by 1,024 (cache) + 512 (mask) + 4 x 512 (its copies) = 3,584 a cell:
    # (4,000,000 - 892,928 - 8 x 262,144) / 3,584 = 281.8 cells -> 256: n_ctx 256
    f = vramwise.fit(qwen2, gpu=4_000_000, gpus=2, profile="llama.cpp", n_ctx=256)
    assert f.gpus == 2 and f.max_n_ctx == 256
    assert f.per_gpu == (3_907_584, 2_214_592) and f.estimate.figures["gpu_total"] == 3_907_584
    d = f.to_dict()
    assert d["per_gpu"] == [{"gpu": 0, "total": 3_907_584, "fits": True}, {"gpu": 1, "total": 2_214_592, "fits": True}]
    assert d["max_n_gpu_layers"] == 3 and d["fits"]


def test_ollama_preset_answers_in_its_names(qwen2, tmp_path):
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("FROM ./tiny-Q4_K_M.gguf\nPARAMETER num_ctx 2048\n")
    r = local_fit(qwen2, gpu=8 * MIB, modelfile=str(modelfile), environ={"OLLAMA_NUM_PARALLEL": "2"})
    # Ollama runs llama-server with -c num_ctx x OLLAMA_NUM_PARALLEL = 4,096, -np 2, -b and -ub 512
    assert (r.settings["n_ctx"], r.settings["n_parallel"], r.settings["n_batch"], r.settings["n_ubatch"]) == \
        (4096, 2, 512, 512)
    assert r.origins["n_parallel"] == "environment OLLAMA_NUM_PARALLEL=2"
    assert f"{modelfile}:2 (PARAMETER num_ctx)" in r.origins["n_ctx"]
    # two streams of s = pad(n_ctx / 2) cells; flash attention auto (OLLAMA_FLASH_ATTENTION unset): on. The GPU:
    # 975,552 + 1,024 x 2s of cache + the compute buffer, a stream's mask s x 512 x 2 and 4 hidden states 2,097,152:
    # 3,072,704 + 3,072 x s <= 8,388,608 -> s <= 1,730.4 -> 1,536: n_ctx 3,072 (6 x 512); num_ctx, the context of
    # each request, 1,536
    assert r.max_n_ctx == 3072
    # at the preset's n_ctx 4,096 (s = 2,048): all 3 layers need 3,072,704 + 3,072 x 2,048 = 9,364,160 > 8,388,608;
    # 2 (the output and layer 1): 82,624 + 446,464 + 2,048 x 2 x 512 + 2,048 x 512 x 2 + 2,097,152 = 6,820,544 fit
    assert dict(r.in_preset_names) == {"num_ctx": 1536, "num_gpu": 2}
    # a flag given wins over the preset, and is said to be given
    r = local_fit(qwen2, gpu=8 * MIB, modelfile=str(modelfile), n_parallel=1)
    assert r.settings["n_parallel"] == 1 and r.origins["n_parallel"] == "given"
