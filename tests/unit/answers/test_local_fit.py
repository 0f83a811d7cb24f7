"""The local-inference answers (vramwise.answers.local) under the llama.cpp profile: the largest n_ctx, the layers to
offload, the parallel sequences and the host memory, each derived by hand below from the profile's formulas
(formulas/llama.cpp) and the small Qwen2 of tests/gguf_files.py.

That model: 2 layers of 446,464 bytes, the output layer 82,624 bytes (output.weight 81,600 + output_norm 1,024),
the token embedding 153,600 bytes (always on the host), 290 tokenizer tokens, training context 32,768, 2 KV heads of
64: a K or V row of 128 values. An f16 cell of one layer is 128 x 2 (K) + 128 x 2 (V) = 512 bytes; with both layers
on the GPU, 1,024 bytes a cell. So with every layer offloaded, n_parallel 1 and f16 caches:

    gpu_total = 2 x 446,464 + 82,624 + 1,024 x cells = 975,552 + 1,024 x cells,  cells = n_ctx padded to 256.
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


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    path = tmp_path_factory.mktemp("local") / "tiny-Q4_K_M.gguf"
    write_qwen2(path)
    return str(path)


def test_largest_n_ctx_is_a_multiple_of_the_padding(qwen2):
    r = local_fit(qwen2, gpu=8 * MIB, n_ctx=4096)
    # 975,552 + 1,024 x cells <= 8,388,608  ->  cells <= 7,239.3; n_ctx pads to 256, so 7,168 (28 x 256) fits and
    # 7,169 (padded to 7,424: 975,552 + 7,602,176 = 8,577,728) does not
    assert r.max_n_ctx == r.max_n_ctx_memory == 7168
    assert r.n_ctx_cap == 32768 and r.notes == ()
    assert isinstance(r, LocalFit) and r.headroom == 0.0  # no published llama.cpp run: no default headroom


def test_quantized_cache_holds_more_context(qwen2):
    r = local_fit(qwen2, gpu=8 * MIB, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    # q8_0: a row of 128 values is 4 blocks of 34 bytes = 136; K + V of 2 layers = 544 bytes a cell;
    # 544 x cells <= 7,413,056 -> cells <= 13,626.9 -> 13,568 (53 x 256)
    assert r.max_n_ctx == 13568


def test_headroom_is_kept_free(qwen2):
    r = local_fit(qwen2, gpu=8 * MIB, headroom=0.1)
    # usable int(8,388,608 x 0.9) = 7,549,747: 1,024 x cells <= 6,574,195 -> cells <= 6,420.1 -> 6,400 (25 x 256)
    assert r.usable_bytes == 7_549_747
    assert r.max_n_ctx == 6400


def test_capped_at_the_training_context_and_said(qwen2):
    r = local_fit(qwen2, gpu="24GiB")
    # 24 GiB = 25,769,803,776: cells <= (25,769,803,776 - 975,552) / 1,024 = 25,768,828,224 / 1,024 = 25,164,871.3
    # -> 25,164,800 (98,300 x 256)
    assert r.max_n_ctx_memory == 25_164_800
    assert r.max_n_ctx == 32768  # the GGUF's qwen2.context_length, one KV stream
    assert "capped at the model's training context of 32,768 tokens" in r.notes[0]
    assert "memory alone allows 25,164,800" in r.notes[0]


def test_cap_per_sequence_with_parallel_streams(qwen2):
    # n_parallel 2 without kv_unified: two streams, each sequence up to the training context: 2 x 32,768
    assert local_fit(qwen2, gpu="24GiB", n_parallel=2).n_ctx_cap == 65536
    # unified: one stream of n_ctx cells any sequence may fill
    assert local_fit(qwen2, gpu="24GiB", n_parallel=2, kv_unified=True).n_ctx_cap == 32768


def test_nothing_fits(qwen2):
    r = local_fit(qwen2, gpu=1 * MIB)
    # one token pads to 256 cells: 975,552 + 262,144 = 1,237,696 > 1,048,576
    assert r.max_n_ctx is None
    assert r.verdict.label == "does not fit"


@pytest.mark.parametrize("mib, label", [
    (5, "fits"),           # 975,552 + 1,024 x 4,096 = 5,169,856 <= 5,242,880
    (4, "does not fit"),   # 5,169,856 > 4,194,304: short by 975,552
])
def test_verdict_at_the_settings(qwen2, mib, label):
    r = local_fit(qwen2, gpu=mib * MIB, n_ctx=4096)
    assert r.estimate.figures["gpu_total"] == 5_169_856
    assert r.verdict.label == label and r.fits == (label == "fits")
    assert r.verdict.margin_bytes == mib * MIB - 5_169_856


def test_tight_inside_the_headroom(qwen2):
    # usable 5,242,880 x 0.9 = 4,718,592 < 5,169,856 <= 5,242,880
    assert local_fit(qwen2, gpu=5 * MIB, n_ctx=4096, headroom=0.1).verdict.label == "tight"


def test_layers_to_offload_and_the_host_memory(qwen2):
    r = local_fit(qwen2, gpu=4 * MIB, n_ctx=4096)
    # a layer's f16 cache at 4,096 cells: 4,096 x 512 = 2,097,152. n_gpu_layers k puts the output layer and the last
    # k - 1 layers (with their caches) on the GPU:
    #   k = 2: 82,624 + 446,464 + 2,097,152 = 2,626,240 <= 4,194,304;  k = 3: 5,169,856 > 4,194,304
    assert r.layers == 2
    assert r.max_n_gpu_layers == 2 and not r.all_layers
    assert r.gpu_bytes_at_max_layers == 2_626_240
    # the host: token embedding 153,600 + layer 0 446,464 + its cache 2,097,152 + logits 290 x 1 x 4 = 1,160
    assert r.host_bytes_at_max_layers == 153_600 + 446_464 + 2_097_152 + 1_160 == 2_698_376


def test_no_layer_fits_the_whole_model_on_the_host(qwen2):
    r = local_fit(qwen2, gpu=64 * 1024, n_ctx=4096)
    # k = 1 already puts the output layer's 82,624 bytes on a GPU of 65,536
    assert r.max_n_gpu_layers == 0
    assert r.gpu_bytes_at_max_layers == 0
    # everything on the host: the file's 1,129,152 bytes, both caches 2 x 2,097,152, the logits 1,160
    assert r.host_bytes_at_max_layers == 1_129_152 + 4_194_304 + 1_160


def test_all_layers_fit(qwen2):
    r = local_fit(qwen2, gpu=8 * MIB, n_ctx=4096)
    assert r.max_n_gpu_layers == 3 and r.all_layers  # 5,169,856 <= 8,388,608
    assert r.host_bytes_at_max_layers == 153_600 + 1_160


def test_parallel_sequences_at_a_context(qwen2):
    r = local_fit(qwen2, gpu=24 * MIB, n_ctx=4096)
    # each sequence holds 4,096 cells (n_ctx = 4,096 x n_parallel, one stream each): 4,096 x 1,024 = 4,194,304 a
    # sequence on the GPU; 975,552 + 4,194,304 x p <= 25,165,824 -> p <= 5.77 -> 5 (the logits stay on the host)
    assert r.slot_ctx == 4096
    assert r.max_n_parallel == 5


def test_fit_answers_locally_for_the_profile(qwen2):
    f = vramwise.fit(qwen2, gpu=8 * MIB, profile="llama.cpp", n_ctx=4096)
    assert isinstance(f, LocalFit)
    assert f.max_n_ctx == 7168
    d = f.to_dict()
    assert (d["max_n_ctx"], d["max_n_gpu_layers"], d["all_layers"]) == (7168, 3, True)
    with pytest.raises(SettingsError, match="gpus 2 and gpu_count 3 disagree"):  # gpu_count 1 is the default
        vramwise.fit(qwen2, gpu=8 * MIB, gpus=2, gpu_count=3, profile="llama.cpp")


def test_fit_over_two_gpus(qwen2):
    # 1,200,000 bytes a GPU. One GPU holds 975,552 of weights: 224,448 bytes left, 219 cells, less than the 256 a
    # context pads to: no context fits.
    assert vramwise.fit(qwen2, gpu=1_200_000, profile="llama.cpp", n_ctx=256).max_n_ctx is None
    # Two GPUs, split equally (llama.cpp's default by free memory): 3 layers on GPUs (2 and the output), split point
    # 0.5: positions 0 and 1 (1/3 < 0.5) on GPU 0, the output (2/3) on GPU 1. GPU 0: 2 x 446,464 = 892,928 of
    # weights and both layers' caches; (1,200,000 - 892,928) / 1,024 = 299.9 cells -> 256 fit: n_ctx 256
    f = vramwise.fit(qwen2, gpu=1_200_000, gpus=2, profile="llama.cpp", n_ctx=256)
    assert f.gpus == 2 and f.max_n_ctx == 256
    # GPU 0: 892,928 + 256 x 1,024 = 1,155,072; GPU 1: the output layer, 82,624
    assert f.per_gpu == (1_155_072, 82_624) and f.estimate.figures["gpu_total"] == 1_155_072
    d = f.to_dict()
    assert d["per_gpu"] == [{"gpu": 0, "total": 1_155_072, "fits": True}, {"gpu": 1, "total": 82_624, "fits": True}]
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
    # two streams: cells = 2 x pad(n_ctx / 2); the largest multiple of 2 x 256 with 975,552 + 1,024 x cells fitting
    # 8,388,608: cells <= 7,239.3 -> 7,168 (14 x 512); so num_ctx, the context of each request, is 3,584
    assert r.max_n_ctx == 7168
    assert dict(r.in_preset_names) == {"num_ctx": 3584, "num_gpu": 3}
    # a flag given wins over the preset, and is said to be given
    r = local_fit(qwen2, gpu=8 * MIB, modelfile=str(modelfile), n_parallel=1)
    assert r.settings["n_parallel"] == 1 and r.origins["n_parallel"] == "given"
