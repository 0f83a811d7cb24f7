"""The llama.cpp profile's draft model against what llama.cpp itself allocated for one
(tests/fixtures/llama_cpp_draft_reference.json).

scripts/llama_cpp_draft_reference.py created, through llama.cpp's C API (llama-cpp-python 0.3.36, the commit the
fixture names, on the CPU), the model's context and then a draft's context with the parameters llama-server's
speculative decoding gives it (common/speculative.cpp:2446-2550: the model's n_seq_max, kv_unified, flash
attention and batches, the draft's cache types, n_ctx = llama_n_ctx of the model's context), and recorded the draft
context's buffers: an independent source, exact to the byte. The files are those of
tests/fixtures/llama_cpp_reference.json (the script checked their tensor tables equal), written again here from
that fixture's headers with zero weights.

With n_gpu_layers 0 and n_gpu_layers_draft 0 every buffer is the host's: the draft's weights are its model buffer,
its KV cache the context's buffer, its output buffer llama_context::buf_output; the model's padded n_ctx is the
draft's. The draft's compute buffer is recorded but not compared: the profile leaves it out (a warning says so).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                   "the GGUF files these tests read")

import vramwise  # noqa: E402

from test_llama_cpp_reference import FILES, write_header  # noqa: E402  (the same files, from their fixture)

FIXTURE = json.loads((Path(__file__).parents[2] / "fixtures" / "llama_cpp_draft_reference.json").read_text())
CASES = FIXTURE["cases"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama_cpp_draft_reference")
    paths = {}
    for key in {c["model"] for c in CASES} | {c["draft"] for c in CASES}:
        paths[key] = folder / f"{key}.gguf"
        write_header(paths[key], FILES[key])
    return paths


def _id(case: dict) -> str:
    return f"{case['draft']}-" + "-".join(f"{k}{v}" for k, v in case["settings"].items())


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_draft_buffers_equal_llama_cpps(case, written):
    s = case["settings"]
    e = vramwise.estimate(str(written[case["model"]]), profile="llama.cpp", n_gpu_layers=0, n_gpu_layers_draft=0,
                          model_draft=str(written[case["draft"]]), **s)
    f = e.figures
    assert f["n_ctx"] == case["model_n_ctx"] == case["draft_n_ctx"]
    model = sum(b["model"] for b in case["draft_buffers"].values())
    context = sum(b["context"] for b in case["draft_buffers"].values())
    assert f["draft_host_weights"] == f["draft_weights"] == model
    assert f["draft_gpu_weights"] == 0 and f["draft_gpu_kv_cache"] == 0
    assert f["draft_host_kv_cache"] == f["draft_kv_cache"] == context
    assert f["draft_output_buffer"] == case["draft_output_buffer"]
    assert f["draft_host"] == model + context + case["draft_output_buffer"]
