"""The llama.cpp profile over several GPUs (formulas/llama.cpp/split.yaml): split_mode, tensor_split and main_gpu
as llama.cpp's load_tensors places the layers (src/llama-model.cpp:1556-1614 at 0c1e5709).

The Qwen2 of tests/gguf_files.py written in F16 with 7 or 9 layers. Its bytes by hand: a layer's norms and biases
in F32, 4,096 bytes (attn_norm 1,024, q bias 1,024, k bias 512, v bias 512, ffn_norm 1,024), its matrices in F16,
1,179,648 bytes (q 256 x 256 x 2 = 131,072, k and v 128 x 256 x 2 = 65,536 each, o 131,072, gate, up and down
512 x 256 x 2 = 262,144 each): LAYER = 1,183,744. The output layer: output_norm 1,024 + output.weight 300 x 256 x 2
= 153,600: OUTPUT = 154,624. The token embedding (on the host) 153,600. KV cache per layer at n_ctx 4096 in f16:
4,096 cells x (128 K + 128 V values) x 2 bytes = 2,097,152.

The compute buffer (formulas/llama.cpp/compute.yaml) at the defaults (n_ubatch 512, flash attention auto, which is
on: no scores, an f16 mask): a hidden state 256 x 512 x 4 = 524,288 bytes; the mask 4,096 x 512 x 2 = 4,194,304; a
GPU that runs layers holds mask + 4 hidden states = 6,291,456 (ATTENTION), more than the output's logits 300 x 512 x
4 = 614,400 and a hidden state (1,138,688). The inputs are the mask and a hidden state, 4,718,592; with every layer
on several GPUs split by layers (pipeline parallelism) each GPU keeps 4 copies of them, 18,874,368 (COPIES).

llama.cpp's rule: the layers on GPUs are i_gpu_start .. n_layer (the output layer last), act_gpu_layers of them;
layer il goes to the first GPU whose normalised cumulative share is above (il - i_gpu_start) / act_gpu_layers.
"""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")

from gguf_files import write_qwen2_as  # noqa: E402

from vramwise import estimate  # noqa: E402
from vramwise.errors import SettingsError  # noqa: E402

LAYER = 1_183_744
OUTPUT = 154_624
EMBEDDING = 153_600
KV = 2_097_152  # one layer's cache at n_ctx 4096
ATTENTION = 6_291_456  # the compute buffer of a GPU that runs layers: 4,194,304 + 4 x 524,288
COPIES = 18_874_368  # pipeline parallelism's 4 copies of the inputs: 4 x (4,194,304 + 524,288)


@pytest.fixture(scope="module")
def seven(tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "qwen2-7.gguf"
    write_qwen2_as(str(path), "F16", layers=7)
    return str(path)


def llama(path, **settings):
    return estimate(path, profile="llama.cpp", n_ctx=4096, **settings)


def per_gpu(f, n):
    return [(f[f"gpu{g}_weights"], f[f"gpu{g}_kv_cache"], f[f"gpu{g}_total"]) for g in range(n)]


def test_one_gpu_is_gpu_0(seven):
    f = llama(seven).figures
    # every layer and the output on the one GPU: 7 x 1,183,744 + 154,624 = 8,440,832; KV 7 x 2,097,152 = 14,680,064;
    # compute 6,291,456: 29,412,352 (one GPU: no pipeline parallelism)
    assert per_gpu(f, 2) == [(8_440_832, 14_680_064, 29_412_352), (0, 0, 0)]
    assert f["gpus"] == 1 and f["gpu_total"] == 29_412_352 == f["gpu_weights"] + f["gpu_kv_cache"] + ATTENTION
    assert f["gpu0_compute_buffer"] == ATTENTION and f["gpu1_compute_buffer"] == 0


def test_tensor_split_3_1(seven):
    f = llama(seven, gpu_count=2, tensor_split="3,1").figures
    # act_gpu_layers = 8 (7 layers and the output), split points 0.75 and 1: positions 0..5 (5/8 < 0.75, 6/8 is not
    # below) on GPU 0, layer 6 and the output on GPU 1; every layer on the GPUs: pipeline parallelism, each GPU's
    # compute buffer ATTENTION + COPIES = 25,165,824 (GPU 1's attention peak is above its output peak)
    assert per_gpu(f, 3) == [
        (6 * LAYER, 6 * KV, 6 * LAYER + 6 * KV + ATTENTION + COPIES),     # 7,102,464 + 12,582,912 + 25,165,824
        (LAYER + OUTPUT, KV, LAYER + OUTPUT + KV + ATTENTION + COPIES),   # 1,338,368 + 2,097,152 + 25,165,824
        (0, 0, 0),
    ]
    assert f["gpus"] == 2
    assert f["gpu_total"] == 6 * LAYER + 6 * KV + ATTENTION + COPIES  # the larger GPU's
    assert f["gpu_weights"] == 7 * LAYER + OUTPUT and f["host_weights"] == EMBEDDING  # the GPUs together; the host


def test_default_split_is_equal_for_gpus_of_one_kind(seven):
    f = llama(seven, gpu_count=2).figures
    # split points 0.5 and 1 over 8 positions: 0..3 on GPU 0 (4/8 = 0.5 is not below 0.5), layers 4..6 and the
    # output on GPU 1
    assert per_gpu(f, 2) == [(4 * LAYER, 4 * KV, 4 * LAYER + 4 * KV + ATTENTION + COPIES),
                             (3 * LAYER + OUTPUT, 3 * KV, 3 * LAYER + OUTPUT + 3 * KV + ATTENTION + COPIES)]
    assert llama(seven, gpu_count=2, tensor_split="0,0").figures == f  # all zero: the default split


def test_partial_offload_over_two_gpus(seven):
    f = llama(seven, gpu_count=2, n_gpu_layers=5).figures
    # i_gpu_start = 7 + 1 - 5 = 3, act = 5: layers 3, 4, 5 (positions 0, 1, 2 below 0.5 x 5) on GPU 0, layer 6 and
    # the output on GPU 1; layers 0..2 and the token embedding on the host. Not every layer on the GPUs: no pipeline
    # parallelism, each GPU's compute buffer ATTENTION, and the host, which runs layers 0..2, ATTENTION too
    assert per_gpu(f, 2) == [(3 * LAYER, 3 * KV, 3 * LAYER + 3 * KV + ATTENTION),
                             (LAYER + OUTPUT, KV, LAYER + OUTPUT + KV + ATTENTION)]
    assert f["host_weights"] == EMBEDDING + 3 * LAYER and f["host_kv_cache"] == 3 * KV
    assert f["host_compute_buffer"] == ATTENTION


def test_split_point_equal_to_a_position_goes_to_the_next_gpu(tmp_path):
    path = tmp_path / "qwen2-9.gguf"
    write_qwen2_as(str(path), "F16", layers=9)
    f = llama(str(path), gpu_count=2, tensor_split="0.7,0.3").figures
    # act = 10; the split point 0.7 / 1.0 and position 7 / 10 are the same float32 in llama.cpp, so layer 7 goes to
    # GPU 1 (upper_bound): layers 0..6 on GPU 0, layers 7, 8 and the output on GPU 1 (10 x 0.7 is
    # 7.000000000000001 in float64)
    assert per_gpu(f, 2) == [(7 * LAYER, 7 * KV, 7 * LAYER + 7 * KV + ATTENTION + COPIES),
                             (2 * LAYER + OUTPUT, 2 * KV, 2 * LAYER + OUTPUT + 2 * KV + ATTENTION + COPIES)]


def test_split_mode_none_keeps_main_gpu(seven):
    f = llama(seven, gpu_count=2, split_mode="none", main_gpu=1).figures
    # one device kept: no pipeline parallelism
    assert per_gpu(f, 2) == [(0, 0, 0), (7 * LAYER + OUTPUT, 7 * KV, 7 * LAYER + OUTPUT + 7 * KV + ATTENTION)]
    assert f["gpus"] == 1


def test_refusals(seven):
    assert any("split buffers" in w for w in llama(seven, gpu_count=2, split_mode="row").blocking)
    assert any("main_gpu 2" in w for w in llama(seven, gpu_count=2, split_mode="none", main_gpu=2).blocking)
    assert any("3 proportions for 2" in w for w in llama(seven, gpu_count=2, tensor_split="2,1,1").warnings)
    with pytest.raises(SettingsError, match="tensor_split"):
        llama(seven, gpu_count=2, tensor_split="3,x")
    with pytest.raises(SettingsError, match="gpu_count"):
        llama(seven, gpu_count=9)


def test_report_lines_follow_the_gpus(seven):
    from vramwise.surfaces.views import report_lines

    one = report_lines(llama(seven), str)
    assert any(line.startswith("GPU: weights 8440832") for line in one)  # one GPU: the line as before
    assert not any(line.startswith("GPU 0") for line in one)
    two = report_lines(llama(seven, gpu_count=2, tensor_split="3,1"), str)
    assert [line.split(":")[0] for line in two if line.startswith("GPU")] == ["GPU 0", "GPU 1"]
    assert (f"GPU 1: weights {LAYER + OUTPUT} GiB, KV cache {KV} GiB, compute buffer {ATTENTION + COPIES} GiB; "
            f"total {LAYER + OUTPUT + KV + ATTENTION + COPIES} GiB") in two


def test_a_report_condition_names_figures_only(tmp_path):
    import shutil
    from importlib import resources
    from pathlib import Path

    import vramwise
    from vramwise.errors import FileFormatError

    src = Path(str(resources.files("vramwise.formulas")))
    dst = tmp_path / "formulas"
    for folder in ("llama.cpp", "shared"):
        if (src / folder).is_dir():
            shutil.copytree(src / folder, dst / folder, ignore=shutil.ignore_patterns("__*"))
    p = dst / "llama.cpp" / "profile.yaml"
    text = p.read_text(encoding="utf-8")
    p.write_text(text.replace("    when: gpus == 1\n", "    when: gpu_count == 1\n", 1), encoding="utf-8")
    line = next(i for i, t in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "when: gpu_count == 1" in t)
    with pytest.raises(FileFormatError, match=rf"profile\.yaml:{line}:\d+: \$\.report\[\d+\]\.when: unknown name `gpu_count`"):
        vramwise.Registry(formulas_dir=dst).profile("llama.cpp")


def test_split_points_are_float32_as_llama_cpp_computes_them(tmp_path):
    path = tmp_path / "qwen2-8.gguf"
    write_qwen2_as(str(path), "F16", layers=8)
    f = llama(str(path), gpu_count=2, tensor_split="0.2,0.7").figures
    # act = 9. In exact fractions position 2 is on the split point (2 / 9 = 0.2 / 0.9) and would go to GPU 1; llama.cpp
    # sums and divides in float32 (numpy.float32 by hand): the point 0.2f / (0.2f + 0.7f) is 0x3E638E3A
    # (0.22222224), the position float(2) / 9 is 0x3E638E39 (0.22222222), one unit below. So position 2 is below the
    # point: layers 0..2 on GPU 0, layers 3..7 and the output on GPU 1 (every layer on the GPUs: pipeline parallelism)
    assert per_gpu(f, 2) == [(3 * LAYER, 3 * KV, 3 * LAYER + 3 * KV + ATTENTION + COPIES),
                             (5 * LAYER + OUTPUT, 5 * KV, 5 * LAYER + OUTPUT + 5 * KV + ATTENTION + COPIES)]


def _llama_cpp_devices(n_layer: int, ngl: int, tensor_split) -> list:
    """load_tensors' placement, statement by statement in float32 (src/llama-model.cpp:1556-1614 at 0c1e5709): the
    device of each layer 0..n_layer (the last the output layer), -1 for the CPU."""
    import bisect

    np = pytest.importorskip("numpy")
    f32 = np.float32
    splits, total = [], f32(0)
    for x in tensor_split:
        total = f32(total + f32(x))
        splits.append(total)
    splits = [f32(x / total) for x in splits]
    start, act = max(n_layer + 1 - ngl, 0), min(ngl, n_layer + 1)
    return [-1 if il < start or il - start >= act else bisect.bisect_right(splits, f32(f32(il - start) / f32(act)))
            for il in range(n_layer + 1)]


@pytest.mark.parametrize("tensor_split", ["1,1", "3,1", "10,6", "0.2,0.7", "1,1,1", "0.3,0.3,0.4", "5,1,1,2"])
@pytest.mark.parametrize("ngl", [1, 2, 5, 8])
def test_placement_matches_load_tensors_statement_by_statement(seven, tensor_split, ngl):
    shares = [float(x) for x in tensor_split.split(",")]
    devices = _llama_cpp_devices(7, ngl, shares)
    f = llama(seven, gpu_count=len(shares), tensor_split=tensor_split, n_gpu_layers=ngl).figures
    for g in range(len(shares)):
        layers = sum(1 for d in devices[:7] if d == g)
        output = devices[7] == g
        assert f[f"gpu{g}_kv_cache"] == layers * KV, (g, devices)
        assert f[f"gpu{g}_weights"] == layers * LAYER + (OUTPUT if output else 0), (g, devices)
