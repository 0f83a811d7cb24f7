"""The llama.cpp profile against what llama.cpp itself allocated (tests/fixtures/llama_cpp_reference.json).

The fixture was recorded by scripts/llama_cpp_reference.py: llama-cpp-python (its vendored llama.cpp, the commit
the fixture names) built for the CPU loaded small GGUF files of random weights (llama with GQA, a tied Qwen2,
Gemma 2 with sliding-window layers, a Qwen3 MoE, a DeepSeek-V3-style deepseek2 with multi-head latent attention, an
LFM2 whose short-convolution layers keep a recurrent state beside the attention layers' KV cache, an
attention-free Mamba-2 with a recurrent state and no KV cache; F16, Q8_0, Q4_0 and Q4_K_M made by llama.cpp's own quantizer;
and a Qwen2 in F32 whose biases are not multiples of 32 bytes) and created a context under each setting of a grid. Its figures are llama.cpp's, an independent source, all
exact to the byte: llama_get_memory_breakdown's bytes per buffer type (the model's weights, the context's KV
cache, the compute buffer) and the output buffer's size (llama_context::buf_output; its log line, "CPU  output
buffer size = %8.2f MiB", is kept too and agrees within its rounding). The context's buffer holds the KV cache and,
for LFM2 and Mamba-2, the recurrent state (llama_memory_recurrent: its "RS buffer" log line is kept too).

Each file is written again here from the fixture's header (metadata, the tokenizer's arrays by their lengths,
the tensor table: names, ggml shapes and types) with zero weights: vramwise reads only the header. llama.cpp ran
on the CPU alone, so the profile is asked for n_gpu_layers 0: every buffer is the host's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                          "the GGUF files these tests read")
np = pytest.importorskip("numpy")

import vramwise  # noqa: E402
from helpers import every_nth, slow_unless  # noqa: E402

FIXTURE = json.loads((Path(__file__).parents[2] / "fixtures" / "llama_cpp_reference.json").read_text())
FILES = FIXTURE["files"]
CASES = [c for c in FIXTURE["cases"] if "refused" not in c]
REFUSED = [c for c in FIXTURE["cases"] if "refused" in c]
MIB = 1024 * 1024
T = gguf.GGMLQuantizationType


def write_header(path: Path, desc: dict) -> None:
    """The fixture's file again: its metadata and tensor table, every weight zero."""
    w = gguf.GGUFWriter(str(path), desc["architecture"])
    for key, vtype, value in desc["metadata"]:
        if key != "general.architecture":
            w.add_key_value(key, value, gguf.GGUFValueType[vtype])
    for key, (item, values) in desc.get("array_values", {}).items():  # a value a layer, kept whole
        w.add_key_value(key, values, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType[item])
    for key, length in desc["arrays"].items():
        if key in desc.get("array_values", {}):
            continue
        if key == "tokenizer.ggml.tokens":
            w.add_array(key, [f"t{i}" for i in range(length)])
        elif key == "tokenizer.ggml.scores":
            w.add_array(key, [0.0] * length)
        else:
            w.add_array(key, [1] * length)
    for name, shape, kind, _ in desc["tensors"]:
        kind = T[kind]
        dims = tuple(reversed(shape))  # numpy order: the ggml row length last
        if kind == T.F32:
            w.add_tensor(name, np.zeros(dims, np.float32))
        elif kind == T.F16:
            w.add_tensor(name, np.zeros(dims, np.float16))
        else:
            block, size = gguf.GGML_QUANT_SIZES[kind]
            w.add_tensor(name, np.zeros(dims[:-1] + (dims[-1] // block * size,), np.uint8), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_files(folder: Path) -> dict:
    """Every file of the fixture written into ``folder`` (its header and zero tensors): {file key: path}."""
    paths = {}
    for key, desc in FILES.items():
        paths[key] = folder / f"{key}.gguf"
        write_header(paths[key], desc)
    return paths


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("llama_cpp_reference"))


def profile(path: Path, settings: dict):
    return vramwise.estimate(str(path), profile="llama.cpp", n_gpu_layers=0, **settings)


def case_id(case: dict) -> str:
    s = case["settings"]
    return (f"{case['file']}-{case['load_mode']}-ctx{s['n_ctx']}-par{s['n_parallel']}{'u' if s['kv_unified'] else ''}-"
            f"{s['cache_type_k']}.{s['cache_type_v']}-fa{s['flash_attn']}-b{s['n_batch']}.{s['n_ubatch']}")


def test_the_fixture_covers_the_grid():
    # seven architectures (deepseek2: multi-head latent attention; lfm2: short convolutions beside attention;
    # mamba2: recurrent alone), four quantizations made by llama.cpp, and every
    # setting the profile takes varied
    assert {d["architecture"] for d in FILES.values()} == {"llama", "qwen2", "gemma2", "qwen3moe", "deepseek2", "lfm2",
                                                           "mamba2"}
    assert {d["quantization"] for d in FILES.values()} == {"F32", "F16", "Q8_0", "Q4_0", "Q4_K_M"}
    settings = [c["settings"] for c in CASES]
    assert {s["n_parallel"] for s in settings} >= {1, 2, 3, 4}
    assert {s["kv_unified"] for s in settings} == {False, True}
    assert {s["flash_attn"] for s in settings} == {"auto", "on", "off"}
    assert {"f16", "q8_0", "q4_0", "bf16"} <= {s["cache_type_k"] for s in settings}
    assert {"q8_0", "q5_1", "iq4_nl", "f32"} <= {s["cache_type_v"] for s in settings}
    assert len({(s["n_batch"], s["n_ubatch"]) for s in settings}) >= 3
    assert {c["load_mode"] for c in CASES} == {"mmap", "none"}
    assert FIXTURE["llama_cpp_commit"] and FIXTURE["llama_cpp_python_version"]


# the default run reads every sixth file again (each takes seconds); .ci/run's slow tier the others
@pytest.mark.parametrize("key", slow_unless(sorted(FILES), every_nth(6)))
def test_the_header_written_again_reads_as_recorded(written, key):
    # the file vramwise reads has the tensors llama.cpp loaded: same names, shapes, types and bytes
    desc = FILES[key]
    r = gguf.GGUFReader(str(written[key]))
    assert [[t.name, [int(x) for x in t.shape], t.tensor_type.name, int(t.n_bytes)] for t in r.tensors] \
        == desc["tensors"]


# the architectures of the compute buffer's stated band (test_compute_buffer_within_the_band_the_profile_states)
BAND_ARCHITECTURES = {"llama", "qwen2", "gemma2", "qwen3moe", "deepseek2", "lfm2", "mamba2"}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_weights_kv_cache_and_output_buffer_as_llama_cpp_allocates(written, case):
    desc = FILES[case["file"]]
    e = profile(written[case["file"]], case["settings"])
    f = e.figures
    buffers = case["buffers"]
    # the context as llama.cpp sized it, and the cells of each cache a stream (its log: the full cache, then the
    # sliding-window one where layers slide)
    assert (f["n_ctx"], f["n_ctx_seq"]) == (case["n_ctx"], case["n_ctx_seq"])
    cells = ([f["kv_cells"] // f["n_stream"]] if f["kv_cache"] else []) \
        + ([f["swa_kv_cells"] // f["n_stream"]] if f["swa_kv_cells"] else [])
    assert case["log"]["kv_cache_cells"] == cells
    # the recurrent state's rows (llama_memory_recurrent's log line, "(%6u cells ...)"): one a sequence, where a layer
    # has a recurrent mixer
    assert case["log"]["rs_cells"] == ([f["rs_cells"]] if f["recurrent_layers"] else [])
    # weights: the memory-mapped model buffer (CPU_Mapped) spans the file's tensor data, each tensor padded to the
    # GGUF's alignment (32 bytes); the buffer of a model read without the map (CPU) holds each tensor at the CPU
    # buffer's alignment (32 bytes too). A tied output is the embedding, once.
    weights = sum(b["model"] for b in buffers.values())
    assert buffers["CPU_Mapped" if case["load_mode"] == "mmap" else "CPU"]["model"] == weights
    assert weights == sum(-(-nbytes // 32) * 32 for *_, nbytes in desc["tensors"]) == desc["tensor_data_span"]
    # the profile counts the tensors' bytes: exact where every tensor is a multiple of 32 bytes (all the files but
    # qwen2-odd), short by the padding otherwise (qwen2-odd: 96 bytes, after its 200- and 800-byte vectors)
    assert f["host_weights"] == desc["tensor_bytes"]
    assert weights - f["host_weights"] == (96 if desc["model"] == "qwen2-odd" else 0)
    assert f["gpu_weights"] == 0
    # the KV cache and the recurrent state, exact: the context's bytes in the CPU buffer type (llama_kv_cache, both
    # caches of an iSWA one, and a hybrid model's llama_memory_recurrent beside its KV cache)
    assert f["kv_cache"] == f["host_kv_cache"]
    assert f["recurrent_state"] == f["host_recurrent_state"]
    assert f["kv_cache"] + f["recurrent_state"] == buffers["CPU"]["context"]
    assert f["gpu_kv_cache"] == f["gpu_recurrent_state"] == 0
    # the output buffer, exact; and as the log line printed it (%8.2f MiB)
    assert f["output_buffer"] == case["output_buffer"]
    assert case["log"]["output_buffer_mib"] == [round(f["output_buffer"] / MIB, 2)]
    # the KV buffer's log lines (one a cache: two with sliding-window layers), each within its rounding
    logged = case["log"]["kv_buffer_mib"]
    assert abs(sum(logged) - f["kv_cache"] / MIB) <= 0.005 * len(logged)
    logged = case["log"]["rs_buffer_mib"]
    assert abs(sum(logged) - f["recurrent_state"] / MIB) <= 0.005 * len(logged)


@pytest.mark.parametrize("case", REFUSED, ids=case_id)
def test_what_llama_cpp_refuses_is_flagged(written, case):
    # llama.cpp created no context: K and V caches of different types for a latent-attention model (checked first),
    # a quantized V cache with flash attention off, or a quantized K cache whose blocks (32 values) do not divide the
    # head size (qwen2-odd: 50) with flash attention on
    e = profile(written[case["file"]], case["settings"])
    s = case["settings"]
    if "model does not support different K" in case["refused"]:
        assert FILES[case["file"]]["architecture"] == "deepseek2" and s["cache_type_k"] != s["cache_type_v"]
        assert any(f"refuses different K ({s['cache_type_k']}) and V ({s['cache_type_v']}) cache types for a model "
                   "of multi-head latent attention" in w for w in e.warnings), e.warnings
    elif "quantized V cache requires flash_attn" in case["refused"]:
        assert any("refuses a quantized V cache" in w for w in e.warnings)
    else:
        assert "K cache type q8_0 with block size 32 does not divide n_embd_head_k=50" in case["refused"]
        assert any("refuses a q8_0 K cache for this model with flash attention: its blocks of 32 values do not "
                   "divide the head size, 50" in w for w in e.warnings)


def test_no_refusal_is_flagged_where_llama_cpp_created_the_context(written):
    for case in CASES:
        warnings = profile(written[case["file"]], case["settings"]).warnings
        assert not any("llama.cpp refuses" in w for w in warnings), (case_id(case), warnings)


def test_compute_buffer_within_the_band_the_profile_states(written):
    # llama.cpp's CPU compute buffer (llama_get_memory_breakdown, exact bytes) against the profile's figure
    # (formulas/llama.cpp/compute.yaml: with n_gpu_layers 0 the host runs the layers and the output; for every
    # architecture of the fixture a graph template's tensors placed as ggml-alloc places them, equal to the byte in
    # all 155 contexts, test_llama_cpp_compute_graph.py case by case). Before the simulation, the largest tensors'
    # estimate was 0.7 % to 29.7 % under for llama, qwen2, gemma2 and qwen3moe, 5.7 % to 23.4 % under for deepseek2
    # (the latent attention's absorbed products), 1.2 % to 3.1 % under for lfm2 and from 5.7 % under to 58 times
    # over for mamba2 (KQ masks it does not have). The profile takes flash attention auto as on (compute.yaml
    # cb_flash): so did llama.cpp in every recorded context.
    assert all(c["flash_attn_resolved"] == ("off" if c["settings"]["flash_attn"] == "off" else "on") for c in CASES)
    assert {FILES[c["file"]]["architecture"] for c in CASES} == BAND_ARCHITECTURES
    errors = {}
    for case in CASES:
        got = case["buffers"]["CPU"]["compute"]
        assert sum(b["compute"] for b in case["buffers"].values()) == got  # the one compute buffer, the CPU's
        est = profile(written[case["file"]], case["settings"]).figures["host_compute_buffer"]
        errors[case_id(case)] = (est - got) / got
    # what the report line states: llama.cpp's own to the byte in the 155 contexts
    assert set(errors.values()) == {0} and len(errors) == 155
    from vramwise.surfaces.views import report_lines

    line = next(t for t in report_lines(profile(written[CASES[0]["file"]], CASES[0]["settings"]), str)
                if t.startswith("compute buffer"))
    assert "on the CPU alone, for llama, qwen2, gemma2, qwen3moe, deepseek2, lfm2 and mamba2, ggml-alloc's placement " \
           "simulated: llama.cpp's own buffers to the byte (155 recorded contexts)" in line


def test_the_hybrid_keeps_a_recurrent_state_beside_the_attention_layers_kv_cache(written):
    # lfm2-hybrid: layers conv, attention, conv, attention (head_count_kv [0, 2, 0, 2]), hidden 256, 2 KV heads of 64,
    # shortconv.l_cache 3. By hand (src/llama-hparams.cpp:214-217 n_embd_r = n_embd x (l_cache - 1); n_embd_s 0):
    # each conv layer keeps 256 x 2 float32 values a sequence slot, 2,048 bytes; two layers, 4,096 bytes a slot,
    # n_parallel slots whatever the context. The KV cache is the two attention layers' alone: 2 x cells x (128 + 128)
    # values x 2 bytes (f16), 1,024 bytes a cell.
    case = next(c for c in CASES if c["file"] == "lfm2-hybrid-F16" and c["settings"]["n_parallel"] == 4
                and not c["settings"]["kv_unified"])
    f = profile(written["lfm2-hybrid-F16"], case["settings"]).figures
    assert (f["recurrent_layers"], f["rs_cells"]) == (2, 4)
    assert f["recurrent_state"] == 2 * 256 * 2 * 4 * 4 == 16_384
    assert f["kv_cells"] == 4 * 1280  # 4,100 padded to 4,352, / 4 sequences = 1,088, padded to 1,280 cells a stream
    assert f["kv_cache"] == 2 * 4 * 1280 * 256 * 2 == 5_242_880
    assert case["buffers"]["CPU"]["context"] == 5_242_880 + 16_384  # llama.cpp's own, both together
    from vramwise.surfaces.views import report_lines

    lines = [t for t in report_lines(profile(written["lfm2-hybrid-F16"], case["settings"]), str)
             if t.startswith("recurrent state")]
    assert len(lines) == 1 and "2 layers x 4 sequence slots" in lines[0]
    # a model without a recurrent mixer has none, and no such line
    e = profile(written["llama-gqa-F16"], CASES[0]["settings"])
    assert (e.figures["recurrent_state"], e.figures["recurrent_layers"]) == (0, 0)
    assert not any(t.startswith("recurrent state") for t in report_lines(e, str))


def test_a_recurrent_model_keeps_its_state_and_no_kv_cache(written):
    # mamba2-ssm: 3 layers, hidden 256, inner 512, 2 groups of state 64, kernel 4. By hand (src/llama-hparams.cpp:
    # 226-233 n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x d_state) = 3 x (512 + 256) = 2,304; :256-257
    # n_embd_s = d_state x d_inner = 64 x 512 = 32,768), float32: 140,288 bytes a layer and sequence slot, 420,864
    # for the 3 layers, whatever the context; no layer attends, so no KV cache (llama_memory_recurrent alone,
    # src/llama-model.cpp:2669-2678)
    by_slots = {}
    for case in (c for c in CASES if c["file"] == "mamba2-ssm-F16"):
        f = profile(written["mamba2-ssm-F16"], case["settings"]).figures
        assert f["kv_cache"] == 0 and case["log"]["kv_cache_cells"] == []
        assert f["recurrent_layers"] == 3
        assert f["recurrent_state"] == 3 * (3 * (512 + 2 * 2 * 64) + 64 * 512) * 4 * f["rs_cells"]
        by_slots[case["settings"]["n_parallel"]] = case["buffers"]["CPU"]["context"]
    # llama.cpp's own buffer: 420,864 bytes a sequence slot, at n_ctx 1,024 to 1,048,576 alike
    assert by_slots == {1: 420_864, 2: 841_728, 3: 1_262_592, 4: 1_683_456}


def test_the_latent_cache_in_each_type_llama_cpp_took(written):
    # deepseek2-mla: 3 layers, kv_lora_rank 192 + qk_rope_head_dim 64 = 256 values a cell in the K cache alone (no V
    # tensor under MLA, src/llama-kv-cache.cpp:163, 231-234), 4,096 cells. By hand, a row of 256 values: f16 512 bytes,
    # bf16 512, f32 1,024, q8_0 8 blocks of 34 = 272, q4_0 8 x 18 = 144; x 3 x 4,096
    row = {"f16": 512, "bf16": 512, "f32": 1024, "q8_0": 272, "q4_0": 144}
    seen = set()
    for case in (c for c in CASES if c["file"] == "deepseek2-mla-F16" and c["settings"]["n_ctx"] == 4096
                 and c["settings"]["n_parallel"] == 1):
        t = case["settings"]["cache_type_k"]
        assert case["settings"]["cache_type_v"] == t  # llama.cpp refused the others
        assert case["buffers"]["CPU"]["context"] == 3 * 4096 * row[t]
        assert profile(written["deepseek2-mla-F16"], case["settings"]).figures["kv_cache"] == 3 * 4096 * row[t]
        seen.add(t)
    assert seen == set(row)
