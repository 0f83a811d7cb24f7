"""`vramwise serve` in serving mode (the vllm profile): /api/estimate and /api/fit answer what the library and the
CLI's --json answer for a serving request, bad serving input is a 400 with the library's one-line message,
/api/settings tells the page which profiles serve and which settings apply to them, and the page ships the
serving form and its script."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

import vramwise  # noqa: E402
from serve_client import client, no_hub  # noqa: E402,F401 - the fixtures
from vramwise.answers.serving import UTILIZATIONS  # noqa: E402
from vramwise.estimation.registry import Registry  # noqa: E402
from vramwise.surfaces.cli import main as cli  # noqa: E402

MODEL = "Qwen/Qwen3-30B-A3B"  # in the model catalog: no hub
BODY = {"model": MODEL, "profile": "vllm", "method": "inference", "gpu": "H100", "max_model_len": 32768}
LIB = {"profile": "vllm", "method": "inference", "max_model_len": 32768}
#: the serving settings by vLLM's own names (vllm/engine/arg_utils.py EngineArgs), and the GPU
SERVING = ("gpu", "gpu_memory", "vllm_version", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
           "max_num_batched_tokens", "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "block_size",
           "enforce_eager")


def cli_json(*argv) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(list(argv)) == 0
    return json.loads(out.getvalue())


def test_serving_estimate_equals_the_library_and_the_cli(client):
    r = client.post("/api/estimate", json=BODY)
    assert r.status_code == 200
    est = vramwise.estimate(MODEL, gpu="H100", **LIB)
    got = r.json()
    assert got["figures"] == est.figures
    assert got["serving"] == est.serving
    assert got["total"] == est.total
    assert got == cli_json("estimate", MODEL, "--profile", "vllm", "--method", "inference", "--gpu", "H100",
                           "--max-model-len", "32768", "--json")


def test_serving_fit_equals_the_library_and_the_cli(client):
    body = {**BODY, "tensor_parallel_size": 2, "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.85}
    r = client.post("/api/fit", json=body)
    assert r.status_code == 200
    f = vramwise.fit(MODEL, gpu="H100", tensor_parallel_size=2, kv_cache_dtype="fp8", gpu_memory_utilization=0.85, **LIB)
    got = r.json()
    assert got == f.to_dict()
    assert got == cli_json("fit", MODEL, "--profile", "vllm", "--method", "inference", "--gpu", "H100",
                           "--max-model-len", "32768", "--tensor-parallel-size", "2", "--kv-cache-dtype", "fp8",
                           "--gpu-memory-utilization", "0.85", "--json")
    # the page's answers, each one of the fit's
    assert (got["starts"], got["kv_cache_tokens"], got["largest_max_model_len"]) == (
        f.starts, f.kv_cache_tokens, f.largest_max_model_len)
    assert got["figures"]["kv_cache_tokens"] == got["kv_cache_tokens"]
    assert [row["tensor_parallel_size"] for row in got["by_tp_size"]] == [1, 2, 4, 8]
    assert got["settings"]["tensor_parallel_size"] == 2 and got["settings"]["kv_cache_dtype"] == "fp8"


def test_kv_capacity_by_utilization():
    f = vramwise.fit(MODEL, gpu="H100", **LIB)
    rows = f.to_dict()["by_utilization"]
    # 0.50, 0.55 ... 1.00: eleven shares, a twentieth apart
    assert [r["gpu_memory_utilization"] for r in rows] == [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0]
    assert UTILIZATIONS == tuple(r["gpu_memory_utilization"] for r in rows)
    tokens = [r["kv_cache_tokens"] for r in rows]
    assert tokens == sorted(tokens) and tokens[-1] > tokens[0]  # more of the GPU, never fewer tokens
    # vLLM starts at a share from the least share max_model_len needs (searched in hundredths) on
    assert f.utilization_needed is not None
    assert [r["starts"] for r in rows] == [u >= f.utilization_needed - 1e-9 for u in UTILIZATIONS]
    # each row is the estimate at that share on the same GPU
    for r in rows[::5]:
        est = vramwise.estimate(MODEL, gpu_memory=f.gpu.memory_bytes, gpu_memory_utilization=r["gpu_memory_utilization"],
                                **LIB)
        assert (r["kv_cache_tokens"], r["starts"]) == (est.serving["kv_cache_tokens"], est.serving["starts"])


def test_serving_fit_and_estimate_read_the_same_gpu_memory():
    # both size the budget from what CUDA reports of a catalog GPU (the H100 SXM's 79.19 GiB), not nvidia-smi's total
    f = vramwise.fit(MODEL, gpu="H100", **LIB)
    est = vramwise.estimate(MODEL, gpu="H100", **LIB)
    assert f.estimate.figures["gpu_memory"] == est.figures["gpu_memory"]


def _message(**settings) -> str:
    with pytest.raises(vramwise.VramwiseError) as info:
        vramwise.estimate(MODEL, **{**LIB, "gpu": "H100", **settings})
    return " ".join(str(info.value).split())


@pytest.mark.parametrize("bad", [
    {"gpu_memory_utilization": 2}, {"gpu_memory_utilization": 0}, {"gpu_memory_utilization": "most"},
    {"vllm_version": "9.9"}, {"vllm_version": "0.7.3"}, {"vllm_version": "latest-ish"},
    {"kv_cache_dtype": "int3"}, {"block_size": 7}, {"tensor_parallel_size": 0}, {"max_model_len": -5},
    {"gpu": "no such gpu"},
])
@pytest.mark.parametrize("endpoint", ["estimate", "fit"])
def test_bad_serving_input_is_a_400_with_the_library_message(client, endpoint, bad):
    r = client.post(f"/api/{endpoint}", json={**BODY, **bad})
    assert r.status_code == 400
    message = r.json()["error"]
    assert "\n" not in message
    if endpoint == "estimate" or "gpu" not in bad:  # fit reads its gpu field as the GPU it answers for
        assert message == _message(**bad)
    else:
        assert message.startswith("unknown GPU 'no such gpu'")


@pytest.mark.parametrize("body, says", [
    ({k: v for k, v in BODY.items() if k != "gpu"}, "vLLM sizes its KV cache from the GPU's total memory"),
    ({**BODY, "method": "lora"}, "profile vllm does not model lora"),
])
def test_serving_estimate_needs_a_gpu_and_inference(client, body, says):
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 400 and says in r.json()["error"]


@pytest.mark.parametrize("extra, says", [
    ({"gpus": 2}, "runs on tensor_parallel_size x pipeline_parallel_size GPUs (1), not on 2"),
    ({"headroom": 0.1}, "set --gpu-memory-utilization instead of --headroom"),
])
def test_serving_fit_refuses_the_training_fields(client, extra, says):
    r = client.post("/api/fit", json={**BODY, **extra})
    assert r.status_code == 400 and says in r.json()["error"]


def test_settings_describe_the_serving_mode(client):
    table = client.get("/api/settings").json()
    reg = Registry.default()
    assert table["serving_profiles"] == [p for p in reg.profile_names() if reg.profile(p).serving is not None]
    assert "vllm" in table["serving_profiles"] and "hf" not in table["serving_profiles"]
    by_name = {s["name"]: s for s in table["settings"]}
    for name in SERVING:
        assert by_name[name]["applies_to"] == ["inference"], name
    assert by_name["gpu_memory_utilization"]["type"] == "float"
    assert by_name["tensor_parallel_size"]["default"] == 1
    # vllm/config/cache.py CacheDType (0.34.0) less the ones the profile does not model
    assert set(by_name["kv_cache_dtype"]["choices"]) >= {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}


def test_the_page_has_the_serving_form(client):
    page = client.get("/").text
    assert 'id="mode"' in page and 'value="serving"' in page and 'id="serving-card"' in page
    for name in SERVING[2:]:  # the GPU is the page's GPU list; gpu_memory is not asked for
        assert f'id="{name}"' in page, name
    assert 'id="kv-by-tp"' in page and 'id="kv-by-util"' in page
    script = client.get("/static/serving.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "/static/serving.js" in page and page.index("/static/serving.js") < page.index("/static/app.js")
    assert "by_utilization" in script.text and "by_tp_size" in script.text
    assert "https://" not in script.text
    size = sum(len(client.get(p).content) for p in ("/", "/static/app.js", "/static/serving.js", "/static/app.css"))
    assert size < 100_000
