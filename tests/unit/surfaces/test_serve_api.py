"""`vramwise serve`'s JSON API through Starlette's test client: each answer equals the library's and the
CLI's --json; bad input is a 4xx with the library's one-line message, never a 500 with a trace."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")


import vramwise  # noqa: E402
from serve_client import client, no_hub  # noqa: E402,F401 - the fixtures
from vramwise.inputs import config as _source  # noqa: E402
from vramwise.surfaces import serve as _serve  # noqa: E402
from vramwise.surfaces.cli import main as cli  # noqa: E402
from vramwise.surfaces.views import estimate_view  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B"


def cli_json(*argv) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(list(argv)) == 0
    return json.loads(out.getvalue())


def test_estimate_equals_the_library_and_the_cli(client):
    r = client.post("/api/estimate", json={"model": MODEL, "batch_size": 8, "method": "lora", "gpus": [1, 2]})
    assert r.status_code == 200
    est = vramwise.estimate(MODEL, batch_size=8, method="lora")
    assert r.json()["total"] == est.total
    assert r.json() == cli_json("estimate", MODEL, "--batch-size", "8", "--method", "lora", "--gpus", "1,2", "--json")
    default = client.post("/api/estimate", json={"model": MODEL}).json()
    assert default == cli_json("estimate", MODEL, "--json")


def test_inference_estimate_carries_the_kv_cache_view(client):
    r = client.post("/api/estimate", json={"model": MODEL, "method": "inference"}).json()
    assert r == cli_json("estimate", MODEL, "--method", "inference", "--json")
    assert r["inference_total"] > r["weights"]


def test_explain_fit_compare_equal_the_cli(client):
    assert client.post("/api/explain", json={"model": MODEL, "profile": "hf"}).json() == cli_json(
        "explain", MODEL, "--profile", "hf", "--json")
    fit = client.post("/api/fit", json={"model": MODEL, "gpu": "RTX 4090", "headroom": 0.1, "batch_size": 2}).json()
    assert fit == cli_json("fit", MODEL, "--gpu", "RTX 4090", "--headroom", "10%", "--batch-size", "2", "--json")
    assert fit == vramwise.fit(MODEL, gpu="RTX 4090", headroom=0.1, batch_size=2).to_dict()
    cmp = client.post("/api/compare", json={"model": MODEL, "profiles": ["unsloth", "hf"], "gpu": "H100", "gpus": 2}).json()
    assert cmp == cli_json("compare", MODEL, "--profiles", "unsloth,hf", "--gpu", "H100", "--gpus", "2", "--json")


def test_get_endpoints(client):
    assert client.get("/api/families").json() == cli_json("families", "--json")
    cat = client.get("/api/catalog", params={"q": "qwen3 moe"}).json()
    assert cat == cli_json("catalog", "qwen3", "moe", "--json")
    assert cat["models"] and all("qwen3" in m["id"].lower() or "qwen3" in m["family"] for m in cat["models"])
    gpus = client.get("/api/gpus").json()
    assert {g["id"] for g in gpus["catalog"]} == {g.id for g in vramwise.list_gpus()}
    assert gpus["local"] == cli_json("gpus", "--json")
    table = client.get("/api/settings").json()
    assert [s["name"] for s in table["settings"]] == [s.name for s in vramwise.SETTINGS]
    assert table["default_profile"] == "unsloth"  # the page's initial profile, the library's default


def test_missing_starlette_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "starlette", None)  # `import starlette` now raises ImportError
    with pytest.raises(vramwise.MissingDependencyError, match=r"pip install 'vramwise\[serve\]'") as exc:
        _serve.create_app()
    assert exc.value.extra == "serve"


def test_uploaded_config_equals_the_library(client):
    cfg = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
           "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}
    expected = estimate_view(vramwise.estimate(cfg, seq_len=4096), [1, 2, 4, 8])
    assert client.post("/api/estimate", json={"config": cfg, "seq_len": 4096}).json() == expected
    assert client.post("/api/estimate", json={"config_text": json.dumps(cfg), "seq_len": 4096}).json() == expected


def _message(fn) -> str:
    with pytest.raises(vramwise.VramwiseError) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("body, library", [
    ({"model": MODEL, "batch_size": 0}, lambda: vramwise.estimate(MODEL, batch_size=0)),
    ({"model": MODEL, "method": "dpo"}, lambda: vramwise.estimate(MODEL, method="dpo")),
    ({"model": MODEL, "attention": "xformers"}, lambda: vramwise.estimate(MODEL, attention="xformers")),
    ({"model": MODEL, "profile": "nope"}, lambda: vramwise.estimate(MODEL, profile="nope")),
    ({"config": {"model_type": "llama"}}, lambda: vramwise.estimate({"model_type": "llama"})),
    ({"config_text": "{bad json"},
     lambda: _source.parse_json_bytes(b"{bad json", "uploaded config.json")),
    ({"config_text": '{"a": NaN}'}, lambda: _source.parse_json_bytes(b'{"a": NaN}', "uploaded config.json")),
    ({"model": "no/such-model"}, lambda: vramwise.estimate("catalog:no/such-model")),
])
def test_bad_input_is_a_400_with_the_library_message(client, body, library):
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 400
    assert r.json() == {"error": " ".join(_message(library).split())}


def test_bad_requests_are_4xx_one_line(client):
    cases = [
        (client.post("/api/estimate", content=b"{not json", headers={"content-type": "application/json"}), 400),
        (client.post("/api/estimate", content=b"[1, 2]", headers={"content-type": "application/json"}), 400),
        (client.post("/api/estimate", content=b"", headers={"content-type": "application/json"}), 400),
        (client.post("/api/estimate", content=b"\xff\xfe{", headers={"content-type": "application/json"}), 400),
        (client.post("/api/estimate", content=b"[" * 5000, headers={"content-type": "application/json"}), 400),
        (client.post("/api/estimate", data={"model": MODEL}), 415),
        (client.post("/api/estimate", json={"model": MODEL, "surprise": 1}), 400),
        (client.post("/api/estimate", json={"model": MODEL, "config": {}}), 400),
        (client.post("/api/estimate", json={"model": MODEL, "gpus": [0]}), 400),
        (client.post("/api/estimate", json={"model": MODEL, "batch_size": "8; rm -rf /"}), 400),
        (client.post("/api/estimate", json={"model": MODEL, "target_modules": {"a": 1}}), 400),
        (client.post("/api/fit", json={"model": MODEL}), 400),
        (client.post("/api/fit", json={"model": MODEL, "gpu": "no such gpu"}), 400),
        (client.post("/api/compare", json={"model": MODEL, "methods": []}), 400),
        (client.post("/api/compare", json={"model": MODEL, "gpus": 2}), 400),
        (client.post("/api/nothing", json={}), 404),
        (client.get("/api/estimate"), 405),
        (client.put("/api/estimate", json={}), 405),
        (client.get("/api/catalog", params={"q": "x" * 500}), 400),
        (client.get("/etc/passwd"), 404),
        (client.get("/static/../../etc/passwd"), 404),
        (client.get("/static/app.py"), 404),
    ]
    for r, status in cases:
        assert r.status_code == status, (r.request.url, r.text)
        body = r.json()
        assert list(body) == ["error"] and "\n" not in body["error"] and "Traceback" not in body["error"]


def test_no_file_paths_and_no_hub_from_requests(client):
    for name in ("examples/llama-3.1-8b.json", "/etc/passwd", "examples", "hub:meta-llama/Llama-3.1-8B", "~/x.json"):
        r = client.post("/api/estimate", json={"model": name})
        assert r.status_code == 400 and "not in the model catalog" in r.json()["error"], name


def test_body_limit_is_one_mib(client):
    big = json.dumps({"config_text": " " * (2**20)})
    r = client.post("/api/estimate", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "1 MiB" in r.json()["error"]

    def chunks():  # no Content-Length: counted while it streams
        for _ in range(20):
            yield b" " * 65536

    r = client.post("/api/estimate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_unexpected_errors_are_one_line_500s(client, monkeypatch):
    def boom(body):
        raise RuntimeError("something broke\nwith a second line")

    monkeypatch.setitem(_serve._POST, "estimate", boom)
    r = client.post("/api/estimate", json={"model": MODEL})
    assert r.status_code == 500
    assert r.json() == {"error": "internal error: RuntimeError: something broke with a second line"}


def test_security_headers_no_cors_and_host_check(client):
    r = client.get("/", headers={"Origin": "http://evil.example"})
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert not any(k.lower().startswith("access-control-") for k in r.headers)
    pre = client.options("/api/estimate", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert pre.status_code in (404, 405) and "access-control-allow-origin" not in pre.headers
    rebound = client.get("/api/families", headers={"Host": "evil.example:8000"})
    assert rebound.status_code == 421
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
        assert client.get("/api/families", headers={"Host": host}).status_code == 200, host


def test_page_and_assets_are_small_and_local(client):
    total = 0
    page = client.get("/")
    total += len(page.content)
    for ref in ("/static/app.js", "/static/app.css"):
        assert ref in page.text
        r = client.get(ref)
        assert r.status_code == 200
        total += len(r.content)
    assert "http://" not in page.text and "https://" not in page.text  # no CDN
    assert "https://" not in client.get("/static/app.js").text
    assert total < 100_000


def test_strategy_estimate_and_fit_equal_the_cli(client):
    body = {"model": MODEL, "profile": "hf", "method": "full", "strategy": "fsdp", "world_size": 4}
    est = client.post("/api/estimate", json=body).json()
    assert est == cli_json("estimate", MODEL, "--profile", "hf", "--method", "full", "--strategy", "fsdp",
                           "--world-size", "4", "--json")
    assert est["per_rank"][0]["count"] == 4 and est["min_per_gpu"] == {"4": est["total"]}
    fit = client.post("/api/fit", json=dict(body, gpu="H100", gpus=4)).json()
    assert fit["settings"]["world_size"] == 4 and fit["per_gpu"] == est["total"]
    bad = client.post("/api/estimate", json=dict(body, profile="unsloth"))
    assert bad.status_code == 400 and "modelled on the hf, torchtune, litgpt profiles" in bad.json()["error"]
