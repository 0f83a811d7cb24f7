"""llama.cpp's CPU compute buffer from its graph: the llama.cpp profile's graph templates (formulas/llama.cpp/compute.yaml
``graph``), their tensors placed as ggml-alloc places them (vramwise.profiles.ggml_alloc), against the buffers llama.cpp
itself reserved in the reference fixture (tests/fixtures/llama_cpp_reference.json: llama_get_memory_breakdown's
compute bytes, an independent source, exact). The files are written again from the fixture's headers as
test_llama_cpp_reference.py writes them."""

from __future__ import annotations

import shutil
from collections import ChainMap
from importlib import resources
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the gguf package writes the GGUF files these tests read")

import vramwise  # noqa: E402
from vramwise import FileFormatError  # noqa: E402

from helpers import every_nth, slow_unless  # noqa: E402
from test_llama_cpp_reference import CASES, FILES, case_id, profile, write_files  # noqa: E402

#: The architectures a template serves (compute.yaml graph.templates): every one the fixture recorded, latent
#: attention (deepseek2), short convolutions beside attention (lfm2) and a recurrent scan alone (mamba2) included.
SIMULATED = {"llama", "qwen2", "gemma2", "qwen3moe", "deepseek2", "lfm2", "mamba2"}
SIMULATED_CASES = [c for c in CASES if FILES[c["file"]]["architecture"] in SIMULATED]
FORMULAS = Path(str(resources.files("vramwise.formulas")))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("llama_cpp_graph"))


def test_the_fixture_has_every_simulated_architecture_at_each_flash_attention_setting():
    seen = {(FILES[c["file"]]["architecture"], c["settings"]["flash_attn"]) for c in SIMULATED_CASES}
    assert seen == {(a, fa) for a in SIMULATED for fa in ("auto", "on", "off")}
    # every context llama.cpp created: llama 29, qwen2 20 (and the F32 qwen2-odd 4), gemma2 21, qwen3moe 21,
    # deepseek2 20, lfm2 20, mamba2 20 (the refused ones have no buffer)
    assert SIMULATED_CASES == CASES
    assert len(SIMULATED_CASES) == 155


# every case in .ci/run's slow tier, every third (each architecture and flash-attention setting) in the default run
@pytest.mark.parametrize("case", slow_unless(SIMULATED_CASES, every_nth(3)), ids=case_id)
def test_the_cpu_compute_buffer_is_llama_cpps_to_the_byte(written, case):
    # n_gpu_layers 0: llama.cpp on the CPU alone, one compute buffer (the CPU's), the largest of the prompt-processing
    # and generation graphs as ggml-alloc placed them
    got = case["buffers"]["CPU"]["compute"]
    assert sum(b["compute"] for b in case["buffers"].values()) == got
    assert profile(written[case["file"]], case["settings"]).figures["host_compute_buffer"] == got


@pytest.mark.parametrize("settings, buffer", [
    ({}, 17827840), ({"flash_attn": "off"}, 45099008), ({"n_ctx": 3000, "n_parallel": 3}, 17828896),
    ({"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"}, 18352128),
])
def test_a_llama_file_with_experts_is_llama_cpps_to_the_byte(tmp_path, settings, buffer):
    # a Mixtral-style llama file (the mixtral family, formulas/gguf.yaml; the llama_moe template): llama.cpp's CPU
    # compute buffer for a file of this header (scripts/llama_cpp_graphs.py dump llama-moe F16, llama-cpp-python 0.3.36
    # at llama.cpp 0c1e5709, llama_get_memory_breakdown; its graphs compared tensor by tensor with the template's)
    from gguf_files import write_llama_moe

    write_llama_moe(tmp_path / "moe.gguf", vocab=8192)
    e = profile(tmp_path / "moe.gguf", {**CASES[0]["settings"], **settings})
    assert e.model.model_type == "mixtral"
    assert e.figures["host_compute_buffer"] == buffer


def test_a_model_type_no_template_serves_keeps_the_estimate(tmp_path, written):
    # the llama template made to serve another model type: a llama file has no template, the graph's value is 0 and
    # host_compute_bytes is the formula's max(attention peak, output peak, inputs), the largest-tensors estimate
    # (compute.yaml), under llama.cpp's buffer as the band says
    forms, _ = _copy(tmp_path, "      model_types: [llama]\n", "      model_types: [no_such_model_type]\n")
    case = CASES[0]
    e = vramwise.estimate(str(written[case["file"]]), profile="llama.cpp", n_gpu_layers=0,
                          registry=vramwise.Registry(formulas_dir=forms), **case["settings"])
    trace = {f.id: f.value for f in e.trace}
    assert trace["cb_graph_bytes"] == 0
    assert e.figures["host_compute_buffer"] == max(trace["cb_attention_bytes"], trace["cb_output_bytes"],
                                                   trace["cb_inputs_bytes"])
    assert e.figures["host_compute_buffer"] < case["buffers"]["CPU"]["compute"]


def test_an_eighty_layer_graph_reads_only_what_the_trace_records_and_holds_its_outputs(written):
    # the two graphs of a Llama-3-70B-sized model (80 layers, 8,192 wide, 64 heads of 128, 8 KV heads, FFN 28,672,
    # 128,256 tokens) built and placed; how fast is benchmarks/bench_llama_cpp_graph.py's to say, not a test's
    entry = next(f for f in profile(written["llama-gqa-F16"], CASES[0]["settings"]).trace if f.id == "cb_graph_bytes")
    expr = vramwise.Registry().profile("llama.cpp").formula("cb_graph_bytes").expr
    env = dict(entry.inputs, num_layers=80, hidden_size=8192, num_attention_heads=64, head_dim=128, cb_kv_dim=1024,
               intermediate_size=28672, stored_vocab_tokens=128256)
    assert expr.evaluate(entry.inputs) == entry.value  # what the trace records is all the graph reads
    # at least the logits and the final normed hidden state, both graph outputs: (128,256 + 8,192) x 512 x 4 bytes
    assert expr.evaluate(env) >= (128256 + 8192) * 512 * 4


@pytest.mark.parametrize("key, settings", [
    ("llama-gqa-F16", {}), ("llama-gqa-F16", {"flash_attn": "off", "n_parallel": 4, "n_ctx": 4100}),
    ("qwen2-tied-F16", {"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"}),
    ("gemma2-swa-F16", {}), ("gemma2-swa-F16", {"flash_attn": "off"}), ("qwen3moe-F16", {"n_ubatch": 128}),
    ("mamba2-ssm-F16", {}), ("mamba2-ssm-F16", {"n_parallel": 3, "n_ctx": 3000}),
    ("lfm2-hybrid-F16", {}), ("lfm2-hybrid-F16", {"flash_attn": "off", "cache_type_k": "q4_0", "cache_type_v": "f32"}),
    ("deepseek2-mla-F16", {}), ("deepseek2-mla-F16", {"flash_attn": "off"}),
])
def test_a_deep_graph_placed_with_fewer_layers_is_placed_as_with_all(written, key, settings):
    # a graph of more than 9 layers is placed with 8 or 9 where the allocator's state before a layer repeats and the
    # deep graph's layers repeat those between (GraphExpression._extent): the extent is that of every layer placed
    from vramwise.profiles.ggml_alloc import graph_extent
    from vramwise.profiles.graphs import LAYER_VALUES, _build

    entry = next(f for f in profile(written[key], {**CASES[0]["settings"], **settings}).trace
                 if f.id == "cb_graph_bytes")
    expr = vramwise.Registry().profile("llama.cpp").formula("cb_graph_bytes").expr
    (template,) = [t for t in expr.templates if entry.inputs["model_type"] in t.model_types]
    for layers in (10, 11, 12, 33, 80):
        env = dict(entry.inputs)
        if LAYER_VALUES in env:  # the model's layers repeated to the depth (lfm2: convolution, attention, ...)
            env = ChainMap({name: tuple(values[i % len(values)] for i in range(layers))
                            for name, values in env[LAYER_VALUES]}, env)
        for r in expr.reserves:
            bound = tuple(e.evaluate(env) for e in r)
            every = graph_extent(_build(template, env, bound, layers, "num_layers")[0])
            assert expr._extent(template, env, bound, layers) == every


def _copy(tmp_path: Path, old: str, new: str) -> tuple[Path, Path]:
    dst = tmp_path / "formulas"
    shutil.copytree(FORMULAS / "llama.cpp", dst / "llama.cpp", ignore=shutil.ignore_patterns("__*"))
    if (FORMULAS / "shared").is_dir():
        shutil.copytree(FORMULAS / "shared", dst / "shared", ignore=shutil.ignore_patterns("__*"))
    p = dst / "llama.cpp" / "compute.yaml"
    text = p.read_text(encoding="utf-8")
    assert old in text
    p.write_text(text.replace(old, new, 1), encoding="utf-8")  # the first template's (llama's)
    return dst, p


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in line)


def test_a_tensor_read_before_it_is_written_is_refused_at_its_place(tmp_path):
    needle = "        - {t: attn_norm, op: MUL, type: f32, shape: [hidden_size, n_tokens], src: [norm]}\n"
    forms, p = _copy(tmp_path, needle, needle.replace("src: [norm]", "src: [nrom]"))
    with pytest.raises(FileFormatError, match=rf"compute\.yaml:{_line(p, 'src: [nrom]')}:\d+: "
                                              r"\$\.graph\.templates\[0\]\.layer\[1\]\.src: 'nrom' is no earlier tensor"):
        vramwise.Registry(formulas_dir=forms).profile("llama.cpp")


def test_an_unknown_name_in_a_shape_is_refused_at_its_place(tmp_path):
    needle = "        - {t: inp_pos, type: i32, shape: [n_tokens]}\n"
    forms, p = _copy(tmp_path, needle, needle.replace("[n_tokens]", "[n_tokenz]"))
    with pytest.raises(FileFormatError, match=rf"compute\.yaml:{_line(p, '[n_tokenz]')}:\d+: "
                                              r"\$\.graph\.templates\[0\]\.inputs\[3\]\.shape\[0\]: unknown name `n_tokenz`"):
        vramwise.Registry(formulas_dir=forms).profile("llama.cpp")
