"""The quantization picker (vramwise.answers.quant_pick) over a folder of GGUF files: each quantization's figures
equal its own file's local answers, and the pick follows them. The figures are derived by hand from the llama.cpp
profile's terms (docs/gguf.md) and the two-layer Qwen2 of tests/gguf_files.py (write_qwen2_as):

A layer holds 589,824 matrix values (q 256x256, k and v 128x256, o 256x256, gate and up 512x256, down 256x512) and
1,024 F32 values (the norms and the biases: 4,096 bytes):
    F16     589,824 x 2          + 4,096 = 1,183,744 bytes
    Q8_0    589,824 / 32 x 34    + 4,096 =   630,784  (Q8_0: 32 values in 34 bytes)
    Q4_K_M  589,824 / 256 x 144  + 4,096 =   335,872  (Q4_K: 256 values in 144 bytes)
The output layer: output.weight 300x256 (F16 153,600; Q8_0 300 x 8 x 34 = 81,600; Q4_K 300 x 144 = 43,200) and
output_norm 1,024. The token embedding, F16 in every file, 153,600 bytes, stays on the host.

With every layer on the GPU: weights 2 x layer + output = F16 2,522,112; Q8_0 1,344,192; Q4_K_M 715,968; the f16 KV
cache 1,024 bytes a cell (2 layers x 2 KV heads x 64 x 2 bytes, K and V), and the compute buffer
(formulas/llama.cpp/compute.yaml; n_ubatch 512, flash attention auto: on) of a GPU running the layers: the f16 mask
1,024 bytes a cell (cells x 512 x 2) and four hidden states 4 x 256 x 512 x 4 = 2,097,152. At n_ctx 4,096:
+ 4,194,304 + 4,194,304 + 2,097,152 = + 10,485,760:
    F16 13,007,872    Q8_0 11,829,952    Q4_K_M 11,201,728
The host: the token embedding and the logits, 290 tokens x 4 bytes: 153,600 + 1,160 = 154,760, and its compute
buffer, the graph's inputs (the mask 4,194,304 and a hidden state 524,288): 4,873,352.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes the "
                                   "GGUF files these tests read")

from vramwise.answers.local import local_fit  # noqa: E402
from vramwise.answers.quant_pick import QuantPick, quant_pick  # noqa: E402
from vramwise.errors import ConfigError, SettingsError  # noqa: E402

from gguf_files import write_qwen2_as  # noqa: E402  (tests/gguf_files.py)

MIB = 2**20
GPU_AT_4096 = {"F16": 13_007_872, "Q8_0": 11_829_952, "Q4_K_M": 11_201_728}
WEIGHTS = {"F16": 2 * 1_183_744 + 153_600 + 1_024 + 153_600,       # 2,675,712
           "Q8_0": 2 * 630_784 + 81_600 + 1_024 + 153_600,          # 1,497,792
           "Q4_K_M": 2 * 335_872 + 43_200 + 1_024 + 153_600}        # 869,568


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("quants")
    write_qwen2_as(d / "tiny-F16.gguf", "F16")
    write_qwen2_as(d / "tiny-Q8_0.gguf", "Q8_0")
    write_qwen2_as(d / "tiny-Q4_K_M.gguf", "Q4_K_M", split_max_tensors=15)  # two shards, one model
    (d / "mmproj-tiny-F16.gguf").write_bytes(b"GGUF")  # a vision projector: left out, never read
    (d / "tiny.imatrix.gguf").write_bytes(b"GGUF")  # an importance matrix: likewise
    return d


def test_each_quantization_at_the_settings(folder):
    p = quant_pick(folder, gpu=12 * MIB, n_ctx=4096)
    assert isinstance(p, QuantPick)
    assert [o.name for o in p.options] == ["F16", "Q8_0", "Q4_K_M"]  # the most bytes of weights first
    assert [o.file_type for o in p.options] == ["F16", "Q8_0", "Q4_K_M"]  # general.file_type, llama.cpp's names
    assert {o.name: o.weight_bytes for o in p.options} == WEIGHTS
    assert {o.name: o.gpu_bytes for o in p.options} == GPU_AT_4096
    assert {o.host_bytes for o in p.options} == {154_760 + 4_718_592}
    # 12 MiB = 12,582,912: F16 is short by 424,960, the others fit
    assert [o.fit.verdict.label for o in p.options] == ["does not fit", "fits", "fits"]
    # largest n_ctx, all layers: (12,582,912 - weights - 2,097,152) / 2,048 cells (cache and mask), down to a multiple
    # of 256: F16 7,963,648 / 2,048 = 3,888.5 -> 3,840; Q8_0 9,141,568 / 2,048 = 4,463.6 -> 4,352;
    # Q4_K_M 9,769,792 / 2,048 = 4,770.4 -> 4,608
    assert [o.fit.max_n_ctx for o in p.options] == [3840, 4352, 4608]
    assert len(p.option("Q4_K_M").files) == 2


def test_the_pick_is_the_largest_that_fits_every_layer(folder):
    p = quant_pick(folder, gpu=12 * MIB, n_ctx=4096)
    assert p.pick.name == "Q8_0" and "largest quantization that fits" in p.reason
    # 11 MiB = 11,534,336: only Q4_K_M's 11,201,728 fits
    assert quant_pick(folder, gpu=11 * MIB, n_ctx=4096).pick.name == "Q4_K_M"


def test_else_the_one_that_keeps_the_most_layers(folder):
    p = quant_pick(folder, gpu=9 * MIB, n_ctx=4096)
    # n_gpu_layers 2: the output layer, the last layer and its cache of 4,096 x 512 = 2,097,152 bytes, and the compute
    # buffer of a GPU running a layer, 4,194,304 + 2,097,152 = 6,291,456:
    #   Q4_K_M 44,224 + 335,872 + 2,097,152 + 6,291,456 = 8,768,704 and Q8_0 82,624 + 630,784 + 2,097,152 +
    #   6,291,456 = 9,102,016 fit 9 MiB = 9,437,184; F16 154,624 + 1,183,744 + 2,097,152 + 6,291,456 = 9,727,000
    #   does not (1: 154,624 and the output's compute buffer, logits 290 x 512 x 4 + a hidden state = 1,118,208, do);
    #   3 layers: Q4_K_M 11,201,728 does not
    assert [o.fit.max_n_gpu_layers for o in p.options] == [1, 2, 2]
    assert p.pick.name == "Q8_0"  # of the two that keep two, the larger
    assert "n_gpu_layers 2 of 3" in p.reason
    # 40,000 bytes hold not even Q4_K_M's output layer (44,224)
    nothing = quant_pick(folder, gpu=40_000, n_ctx=4096)
    assert nothing.pick is None and "no quantization" in nothing.reason


def test_the_picker_equals_each_files_own_answers(folder):
    p = quant_pick(folder, gpu=5 * MIB, n_ctx=8192, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    for o in p.options:
        alone = local_fit(o.files[0], gpu=5 * MIB, n_ctx=8192, cache_type_k="q8_0", cache_type_v="q8_0",
                          flash_attn="on")
        assert dict(o.fit.estimate.figures) == dict(alone.estimate.figures)
        assert (o.fit.max_n_ctx, o.fit.max_n_gpu_layers, o.fit.max_n_parallel, o.fit.verdict.label) == \
            (alone.max_n_ctx, alone.max_n_gpu_layers, alone.max_n_parallel, alone.verdict.label)
    d = p.to_dict()
    assert d["pick"] == p.pick.name and [o["name"] for o in d["options"]] == ["F16", "Q8_0", "Q4_K_M"]
    assert d["options"][0]["gpu_bytes"] == p.options[0].gpu_bytes


def test_quant_by_name(folder):
    p = quant_pick(folder, gpu=6 * MIB, n_ctx=4096, quant="q4_k_m")
    assert [o.name for o in p.options] == ["Q4_K_M"] and p.pick.name == "Q4_K_M"
    with pytest.raises(SettingsError, match="no quantization Q5_K_M in .*; present: F16, Q8_0, Q4_K_M"):
        quant_pick(folder, gpu=6 * MIB, quant="Q5_K_M")


def test_names_as_the_files_name_them(tmp_path):
    write_qwen2_as(tmp_path / "Tiny-8B-UD-Q4_K_XL.gguf", "Q4_K_M")  # unsloth's dynamic quant: a Q4_K_M file type
    write_qwen2_as(tmp_path / "Tiny-8B-Q4_K_M.gguf", "Q4_K_M")
    p = quant_pick(tmp_path, gpu=6 * MIB, n_ctx=4096)
    assert sorted((o.name, o.file_type) for o in p.options) == [("Q4_K_M", "Q4_K_M"), ("UD-Q4_K_XL", "Q4_K_M")]
    assert quant_pick(tmp_path, gpu=6 * MIB, quant="UD-Q4_K_XL").options[0].files[0].endswith("UD-Q4_K_XL.gguf")
    # the file name's Q4_K_M wins over the file type both share
    assert quant_pick(tmp_path, gpu=6 * MIB, quant="Q4_K_M").options[0].name == "Q4_K_M"


def test_different_models_are_refused(tmp_path):
    write_qwen2_as(tmp_path / "a-Q8_0.gguf", "Q8_0")
    write_qwen2_as(tmp_path / "b-Q8_0.gguf", "Q8_0", architecture="llama")
    with pytest.raises(ConfigError, match="different architectures .*qwen2.*llama"):
        quant_pick(tmp_path, gpu=6 * MIB)
    os.remove(tmp_path / "b-Q8_0.gguf")
    write_qwen2_as(tmp_path / "c-Q8_0.gguf", "Q8_0", layers=3)  # the same architecture, another model
    with pytest.raises(ConfigError, match="different models"):
        quant_pick(tmp_path, gpu=6 * MIB)
