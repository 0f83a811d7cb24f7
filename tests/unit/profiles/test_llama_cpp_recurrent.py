"""The llama.cpp profile's recurrent state on GPUs: where llama.cpp puts each recurrent layer's r and s rows.

llama_memory_recurrent creates each layer's state in the buffer type of model.dev_layer(il) when it is offloaded
(offload_kqv, on by default; src/llama-memory-recurrent.cpp:86-91 at 0c1e5709), so the state follows its layer as the
KV cache does. The file is tests/gguf_files.py's LFM2: layers conv, attention, conv, attention (head_count_kv
[0, 2, 0, 2]), hidden 256, shortconv.l_cache 3, so a conv layer keeps (3 - 1) x 256 float32 values a sequence slot,
2,048 bytes (src/llama-hparams.cpp:214-217 n_embd_r; n_embd_s 0), and an attention layer none. The reference fixture
checks the same state on the CPU against llama.cpp itself (test_llama_cpp_reference.py).
"""

from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                          "the GGUF files these tests read")
np = pytest.importorskip("numpy")

import vramwise  # noqa: E402

from gguf_files import write_lfm2  # noqa: E402  (tests/gguf_files.py)

CONV_SLOT = (3 - 1) * 256 * 4  # one conv layer's r row, float32: 2,048 bytes


@pytest.fixture
def lfm2(tmp_path):
    path = tmp_path / "lfm2.gguf"
    write_lfm2(path)
    return path


def llama(path, **settings):
    return vramwise.estimate(str(path), profile="llama.cpp", n_ctx=1024, **settings)


def test_every_layer_offloaded_keeps_its_state_on_the_gpu(lfm2):
    # the default n_gpu_layers offloads the 4 layers and the output: both conv layers' state on the GPU, 3 slots
    f = llama(lfm2, n_parallel=3).figures
    assert f["recurrent_state"] == f["gpu_recurrent_state"] == 2 * CONV_SLOT * 3 == 12_288
    assert f["host_recurrent_state"] == 0
    # in the GPU's total, beside the KV cache of the two attention layers (1,024 cells over 3 streams: n_ctx_seq
    # = GGML_PAD(1024 / 3, 256) = 512, 3 x 512 cells x 2 x 128 values x 2 bytes a layer)
    assert f["kv_cache"] == 2 * 3 * 512 * 256 * 2
    assert f["gpu_total"] == f["gpu_weights"] + f["gpu_kv_cache"] + 12_288 + f["gpu_compute_buffer"]


def test_a_partial_offload_splits_the_state_by_layer(lfm2):
    # n_gpu_layers 3: the output layer and layers i_gpu_start = 4 + 1 - 3 = 2 and 3 (src/llama-model.cpp:1589), so
    # conv layer 2's state on the GPU and conv layer 0's on the host, 2,048 bytes each at one slot
    f = llama(lfm2, n_gpu_layers=3).figures
    assert (f["gpu_recurrent_state"], f["host_recurrent_state"]) == (CONV_SLOT, CONV_SLOT)
    assert f["host_total"] == (f["host_weights"] + f["host_kv_cache"] + CONV_SLOT + f["output_buffer"]
                               + f["host_compute_buffer"])
    # n_gpu_layers 0: every layer on the host
    f = llama(lfm2, n_gpu_layers=0).figures
    assert (f["gpu_recurrent_state"], f["host_recurrent_state"]) == (0, 2 * CONV_SLOT)


def test_two_gpus_each_hold_the_state_of_their_layers(lfm2):
    # split_mode layer over 2 GPUs of equal share: the 5 offloaded positions (4 layers and the output) go to GPU 0
    # while il / 5 < 0.5 (layers 0, 1, 2) and to GPU 1 after (layer 3 and the output; src/llama-model.cpp
    # load_tensors, split.yaml): both conv layers' state on GPU 0, none on GPU 1
    f = llama(lfm2, gpu_count=2, n_parallel=2).figures
    rs0 = f["gpu0_total"] - f["gpu0_weights"] - f["gpu0_kv_cache"] - f["gpu0_compute_buffer"]
    rs1 = f["gpu1_total"] - f["gpu1_weights"] - f["gpu1_kv_cache"] - f["gpu1_compute_buffer"]
    assert (rs0, rs1) == (2 * CONV_SLOT * 2, 0)


def test_the_overhead_counts_the_state(lfm2):
    # the overhead component: KV cache + recurrent state + output buffer (500 tokens x 1 slot x 4 bytes)
    e = llama(lfm2)
    f = e.figures
    assert f["output_buffer"] == 500 * 4
    assert e.overhead == f["kv_cache"] + 2 * CONV_SLOT + 500 * 4
