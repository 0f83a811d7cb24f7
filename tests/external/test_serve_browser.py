"""The page in a real browser: Debian's headless Chromium driven by Playwright (no browser download).

Start the server on a free loopback port, open the page, choose a model from the catalog and a GPU,
change the batch size; the displayed total must equal /api/estimate (and vramwise.estimate) for the same
settings, the charts must have bars, the address must hold the settings, and a bad upload must show the
library's error message. A second test uploads a training recipe: the form takes its values, its
origins show file:line and the fit advice is written in the recipe's keys. A third switches to the serving
mode (vllm): the KV-cache tokens, the table and the charts must be /api/fit's, and the address must restore
the serving settings. The first run takes a
screenshot of the page in its temporary folder; to refresh docs/serve.png, the picture of the
documentation, name it in VRAMWISE_SCREENSHOT:

    VRAMWISE_SCREENSHOT=docs/serve.png python -m pytest -q -m external tests/external/test_serve_browser.py

Skipped when Chromium or Playwright is missing, unless VRAMWISE_REQUIRE_BROWSER=1 (set by .ci/run).
"""

from __future__ import annotations

import os
import shutil

import pytest

import vramwise
from vramwise.inputs import config as _source

from serve_live import live_server

CHROMIUM = os.environ.get("VRAMWISE_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
#: where a copy of the screenshot goes (docs/serve.png to refresh the documentation's picture); none by default
SCREENSHOT = os.environ.get("VRAMWISE_SCREENSHOT")
MODEL = "meta-llama/Llama-3.1-8B"


def _require():
    missing = None
    try:
        import playwright.sync_api  # noqa: F401
    except ModuleNotFoundError:
        missing = "playwright is not installed"
    if missing is None and not (os.path.isfile(CHROMIUM) or shutil.which(CHROMIUM)):
        missing = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if missing:
        if os.environ.get("VRAMWISE_REQUIRE_BROWSER") == "1":
            pytest.fail(missing)
        pytest.skip(missing)


def _warm(url: str) -> None:
    """The first /api/families compiles every family; on a loaded machine it may pass the server's compute
    timeout (503) once: asked again until it answers, so no test waits on it."""
    import httpx

    with httpx.Client(base_url=url, timeout=60) as c:
        for _ in range(6):
            if c.get("/api/families").status_code == 200:
                return
    pytest.fail("/api/families did not answer")


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB"


def test_page_in_headless_chromium(monkeypatch, tmp_path):
    _require()
    import httpx
    from playwright.sync_api import sync_playwright

    def refuse(repo, trust):  # pragma: no cover - reached only on a bug
        raise AssertionError(f"the page made the server ask the hub for {repo!r}")

    monkeypatch.setattr(_source, "_read_hub", refuse)
    with live_server() as url, sync_playwright() as p:
        _warm(url)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            outside: list[str] = []
            page.on("request", lambda r: None if r.url.startswith((url, "data:")) else outside.append(r.url))
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)

            # choose a model from the catalog by searching for it, a GPU, then change the batch size
            page.fill("#model-search", "Llama-3.1-8B")
            assert MODEL in page.eval_on_selector_all("#model-list option", "os => os.map(o => o.value)")
            page.select_option("#model-list", MODEL)
            page.select_option("#gpu", "rtx-4090")
            page.fill("#batch_size", "8")
            with httpx.Client(base_url=url, timeout=10) as c:
                api = c.post("/api/estimate", json={"model": MODEL, "batch_size": 8}).json()
            assert api["total"] == vramwise.estimate(MODEL, batch_size=8).total
            page.wait_for_function("b => document.getElementById('total').dataset.bytes === b", arg=str(api["total"]),
                                   timeout=15_000)
            assert page.text_content("#total").strip() == _gib(api["total"])
            with httpx.Client(base_url=url, timeout=60) as c:
                verdict = c.post("/api/fit", json={"model": MODEL, "batch_size": 8, "gpu": "rtx-4090"}).json()["verdict"]
            assert page.text_content("#verdict").startswith(verdict["label"] + " ")
            # the two bands: tensors (accuracy/bands.yaml) and device total (accuracy/device_bands.yaml)
            assert page.text_content("#band-tensors").strip() == api["error_band"]["tensors"]["summary"]
            assert page.text_content("#band-device").strip() == api["error_band"]["device"]["summary"]

            # the charts exist and have bars; the frontier has points
            bars = page.eval_on_selector_all("#chart rect.bar", "rs => rs.map(r => [r.dataset.component, +r.dataset.bytes])")
            assert len(bars) >= 4
            assert sum(b for _, b in bars) == api["total"]
            assert dict(bars)["weights"] == api["weights"]
            assert page.locator("#gpu-line").count() == 1
            assert page.locator("#frontier circle.point").count() >= 5
            assert page.locator("#compare rect.bar").count() >= 6

            # the address holds the settings: opening it again gives the same total
            assert "batch_size=8" in page.url and "gpu=rtx-4090" in page.url and "model=meta-llama" in page.url
            shared = browser.new_page(viewport={"width": 1280, "height": 900})
            shared.goto(page.url)
            shared.wait_for_selector("body[data-ready='1']", timeout=30_000)
            assert shared.get_attribute("#total", "data-bytes") == str(api["total"])
            shared.close()

            # the trace (collapsed) opens with the formulas
            page.click("#trace summary")
            page.wait_for_function("() => document.getElementById('trace-body').textContent.includes('formulas/')",
                                   timeout=15_000)
            page.click("#trace summary")

            page.screenshot(path=str(tmp_path / "serve.png"), full_page=True)

            # a bad upload shows the library's message
            page.click("#upload-box summary")
            page.set_input_files("#upload", files=[{"name": "config.json", "mimeType": "application/json",
                                                    "buffer": b'{"model_type": "llama", oops}'}])
            page.wait_for_selector("#error:not([hidden])", timeout=15_000)
            with httpx.Client(base_url=url, timeout=10) as c:
                bad = c.post("/api/estimate", json={"config_text": '{"model_type": "llama", oops}', "batch_size": 8})
            assert bad.status_code == 400
            assert page.text_content("#error").strip() == bad.json()["error"]
            assert "invalid JSON" in bad.json()["error"]

            # a good upload clears it and estimates the uploaded config
            cfg = b'{"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288, ' \
                  b'"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}'
            page.set_input_files("#upload", files=[{"name": "config.json", "mimeType": "application/json", "buffer": cfg}])
            import json

            want = vramwise.estimate(json.loads(cfg), batch_size=8).total
            page.wait_for_function("b => document.getElementById('total').dataset.bytes === b", arg=str(want),
                                   timeout=15_000)
            assert page.is_hidden("#error")
            assert not errors, errors
            assert not outside, outside  # nothing fetched from anywhere else
        finally:
            browser.close()
    assert (tmp_path / "serve.png").stat().st_size > 10_000
    if SCREENSHOT:
        shutil.copyfile(tmp_path / "serve.png", SCREENSHOT)


def test_two_band_lines_and_the_verdict_with_its_headroom(monkeypatch):
    """The page shows the tensor band and the device band on two lines, as /api/estimate words them, and the
    verdict of /api/fit: at the device band's headroom when the field is empty, at the headroom typed in."""
    _require()
    import httpx
    from playwright.sync_api import sync_playwright

    monkeypatch.setattr(_source, "_read_hub", lambda repo, trust: (_ for _ in ()).throw(AssertionError(repo)))
    settings = {"model": MODEL, "profile": "hf", "method": "lora", "batch_size": 1}
    with live_server() as url, sync_playwright() as p:
        _warm(url)
        with httpx.Client(base_url=url, timeout=60) as c:
            bands = c.post("/api/estimate", json=settings).json()["error_band"]
            by_band = c.post("/api/fit", json={**settings, "gpu": "rtx-4090"}).json()
            given = c.post("/api/fit", json={**settings, "gpu": "rtx-4090", "headroom": 0}).json()
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url.rstrip("/") + "/?model=" + MODEL + "&profile=hf&method=lora&batch_size=1&gpu=rtx-4090")
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            page.wait_for_function("() => document.getElementById('band-device').textContent.length > 0", timeout=15_000)
            tensors, device = page.text_content("#band-tensors").strip(), page.text_content("#band-device").strip()
            assert tensors == bands["tensors"]["summary"] and tensors.startswith("tensors: ")
            assert device == bands["device"]["summary"] and device.startswith("device total: ")
            assert page.get_attribute("#band-device", "data-measured") == str(bands["device"]["covered"]).lower()
            # no headroom typed: the device band's p90 shortfall is kept free
            assert by_band["verdict"]["headroom_source"] == "device band"
            page.wait_for_function("l => document.getElementById('verdict').textContent.startsWith(l + ' ')",
                                   arg=by_band["verdict"]["label"], timeout=15_000)
            # the fit card words the verdict with its margin and the headroom's source
            assert page.text_content("#fit-verdict") == by_band["verdict"]["summary"]
            assert page.get_attribute("#verdict", "title") == by_band["verdict"]["summary"]
            assert "the device band's p90 shortfall" in by_band["verdict"]["summary"]
            # a headroom typed in wins, 0 included
            page.fill("#headroom", "0")
            page.wait_for_function("() => document.getElementById('fit-verdict').textContent.includes('0 % given')",
                                   timeout=15_000)
            assert page.text_content("#fit-verdict") == given["verdict"]["summary"]
            assert page.text_content("#verdict").startswith(given["verdict"]["label"] + " ")
            assert "headroom=0%25" in page.url or "headroom=0%" in page.url
            assert not errors, errors
        finally:
            browser.close()


def test_recipe_upload_in_headless_chromium(monkeypatch):
    # tests/fixtures/recipes/axolotl/llama-3-lora-1b.yml: base_model NousResearch/Llama-3.2-1B (line 2, not in
    # the catalog), adapter: lora (13), sequence_len: 2048 (16), sample_packing: true (17), lora_r: 16 (21),
    # gradient_accumulation_steps: 2 (39), micro_batch_size: 2 (40), optimizer: adamw_8bit (43)
    _require()
    import httpx
    from pathlib import Path
    from playwright.sync_api import sync_playwright

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "axolotl" / "llama-3-lora-1b.yml"
    monkeypatch.setattr(_source, "_read_hub", lambda repo, trust: pytest.fail(f"the hub was asked for {repo!r}"))
    with live_server() as url, sync_playwright() as p:
        _warm(url)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            page.click("#recipe-box summary")
            page.set_input_files("#recipe-files", str(fixture))
            page.wait_for_selector("#recipe-loaded:not([hidden])", timeout=15_000)
            # the form takes the recipe's values
            fields = ("method", "batch_size", "seq_len", "lora_rank", "optimizer")
            values = {f: page.input_value("#" + f) for f in fields}
            assert values == {"method": "lora", "batch_size": "2", "seq_len": "2048", "lora_rank": "16",
                              "optimizer": "adamw_8bit"}
            missing = "NousResearch/Llama-3.2-1B is not in the catalog: upload its config.json"
            assert missing in page.text_content("#recipe-model")
            # each setting with its origin, file:line and key; the warnings
            batch = "#recipe-origins li[data-setting='batch_size']"
            assert "llama-3-lora-1b.yml:40 micro_batch_size" in page.text_content(batch)
            assert "llama-3-lora-1b.yml:17: sample_packing" in page.text_content("#recipe-warnings")

            # a catalog model for it (Llama 3.1 8B) on a T4: advice in axolotl's keys (2 x 2 = 1 x 4 samples a step)
            page.select_option("#model-list", MODEL)
            page.select_option("#gpu", "t4")
            page.wait_for_function("() => document.getElementById('advice-list').textContent.includes("
                                   "'in the recipe: micro_batch_size: 1, gradient_accumulation_steps: 4')",
                                   timeout=15_000)
            parts = [{"name": fixture.name, "text": fixture.read_text(encoding="utf-8")}]
            with httpx.Client(base_url=url, timeout=10) as c:
                want = c.post("/api/estimate", json={"recipe": parts, "model": MODEL}).json()["total"]
                over = c.post("/api/estimate", json={"recipe": parts, "model": MODEL, "batch_size": 1}).json()["total"]
            assert page.get_attribute("#total", "data-bytes") == str(want)
            assert "batch_size=2" in page.url and "base_model" not in page.url and "recipe" not in page.url

            # a field changed on the page overrides the recipe's value
            page.fill("#batch_size", "1")
            page.wait_for_function("b => document.getElementById('total').dataset.bytes === b", arg=str(over),
                                   timeout=15_000)
            assert "overridden" in page.get_attribute(batch, "class")

            page.click("#recipe-clear")
            assert page.is_hidden("#recipe-loaded")
            assert not errors, errors
        finally:
            browser.close()


def test_serving_mode_in_headless_chromium(monkeypatch):
    # the serving mode: Qwen3-30B-A3B on an H100 with max_model_len 32768 (vllm profile); the KV tokens shown are
    # /api/fit's and vramwise.fit's, the training controls are hidden, the address restores the serving settings
    _require()
    import httpx
    from playwright.sync_api import sync_playwright

    model, lib = "Qwen/Qwen3-30B-A3B", {"profile": "vllm", "method": "inference", "max_model_len": 32768}
    monkeypatch.setattr(_source, "_read_hub", lambda repo, trust: pytest.fail(f"the hub was asked for {repo!r}"))
    with live_server() as url, sync_playwright() as p:
        _warm(url)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            page.select_option("#model-list", model)
            page.select_option("#mode", "serving")
            assert page.is_hidden("#training-box") and page.is_hidden("#gpus") and page.is_hidden("#strategy")
            assert page.is_visible("#serving-box") and page.is_hidden("#compare-card")
            page.select_option("#gpu", "h100-sxm")
            page.fill("#max_model_len", "32768")
            body = {"model": model, "gpu": "h100-sxm", **lib}
            with httpx.Client(base_url=url, timeout=10) as c:
                fit = c.post("/api/fit", json=body).json()
                tp2 = c.post("/api/fit", json={**body, "tensor_parallel_size": 2}).json()
            want = vramwise.fit(model, gpu="h100-sxm", **lib)
            assert fit["kv_cache_tokens"] == want.kv_cache_tokens
            page.wait_for_function("t => document.getElementById('total').dataset.tokens === t",
                                   arg=str(fit["kv_cache_tokens"]), timeout=15_000)
            assert page.text_content("#total").strip() == f"{fit['kv_cache_tokens']:,} tokens of KV cache"
            assert ("vLLM starts on" if fit["starts"] else "vLLM does not start on") in page.text_content("#verdict")
            row = lambda key: page.text_content(f"#serving-table tr[data-key='{key}'] td.num").strip()  # noqa: E731
            assert row("kv_cache_tokens").startswith(f"{fit['kv_cache_tokens']:,} tokens")
            assert row("weights") == _gib(fit["figures"]["weights"])
            assert row("largest_max_model_len") == f"{fit['largest_max_model_len']:,}"
            assert row("utilization_needed") == f"{fit['utilization_needed']:.2f}"
            # the budget bar sums vLLM's parts; the charts have a bar per TP size and a point per share
            bars = page.eval_on_selector_all("#chart rect.bar", "rs => rs.map(r => [r.dataset.component, +r.dataset.bytes])")
            assert dict(bars)["KV cache"] == fit["figures"]["kv_cache_bytes"]
            tps = page.eval_on_selector_all("#kv-by-tp rect.tp-bar", "rs => rs.map(r => [+r.dataset.tp, +r.dataset.tokens])")
            assert tps == [[r["tensor_parallel_size"], r["kv_cache_tokens"]] for r in fit["by_tp_size"]
                           if r["kv_cache_tokens"] is not None]
            points = page.eval_on_selector_all("#kv-by-util circle.util-point", "cs => cs.map(c => +c.dataset.tokens)")
            assert points == [r["kv_cache_tokens"] for r in fit["by_utilization"]]

            # a serving setting changes the answer; the address holds the serving settings and restores them
            page.fill("#tensor_parallel_size", "2")
            page.wait_for_function("t => document.getElementById('total').dataset.tokens === t",
                                   arg=str(tp2["kv_cache_tokens"]), timeout=15_000)
            for part in ("profile=vllm", "gpu=h100-sxm", "max_model_len=32768", "tensor_parallel_size=2"):
                assert part in page.url, (part, page.url)
            assert "batch_size" not in page.url
            shared = browser.new_page(viewport={"width": 1280, "height": 900})
            shared.goto(page.url)
            shared.wait_for_selector("body[data-ready='1']", timeout=30_000)
            assert shared.input_value("#mode") == "serving" and shared.input_value("#tensor_parallel_size") == "2"
            assert shared.get_attribute("#total", "data-tokens") == str(tp2["kv_cache_tokens"])
            shared.close()

            # back to fine-tuning: the training form and its total again
            page.select_option("#mode", "training")
            page.wait_for_function("() => document.getElementById('total').dataset.bytes !== ''", timeout=15_000)
            assert page.is_visible("#training-box") and page.is_hidden("#serving-box") and page.is_hidden("#serving-card")
            assert "profile=vllm" not in page.url
            assert not errors, errors
        finally:
            browser.close()


def test_the_address_accepts_what_the_cli_accepts_and_is_written_back_canonical(monkeypatch):
    """A shared link written as a user types the command line: a GPU alias (H100), a model alias in another
    case, a method in capitals, checkpointing 'on', and a field the page does not have."""
    _require()
    from playwright.sync_api import sync_playwright

    from vramwise.inputs.gpu_catalog import gpu_spec
    from vramwise.inputs.catalog import find_model

    monkeypatch.setattr(_source, "_read_hub", lambda repo, trust: (_ for _ in ()).throw(AssertionError(repo)))
    # the CLI's own readings of the same values, the independent side of the comparison
    gpu = gpu_spec("H100")
    model = find_model("OLMOE-1B-7B")
    assert model is not None and gpu.matched_by == "ambiguous"
    want = vramwise.estimate(model.id, batch_size=8, gradient_checkpointing="true").total
    with live_server() as url, sync_playwright() as p:
        _warm(url)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url + "?model=OLMOE-1B-7B&gpu=H100&method=QLoRA&batch_size=8&gradient_checkpointing=on&colour=blue")
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            page.wait_for_function("b => document.getElementById('total').dataset.bytes === b", arg=str(want),
                                   timeout=15_000)
            assert page.input_value("#gpu") == gpu.id
            assert page.input_value("#model-list") == model.id
            assert not page.is_hidden("#fit-card")  # the GPU was read: the fit section is there
            # written back in canonical form (qlora is the default method, so it is left out)
            assert f"gpu={gpu.id}" in page.url and "gradient_checkpointing=true" in page.url, page.url
            assert "QLoRA" not in page.url and "colour" not in page.url and "H100" not in page.url, page.url
            note = page.text_content("#address-note")
            assert "colour: not a field of this page" in note and gpu.note in note, note

            # a size, as --gpu 24GiB takes it: a GPU of that size is chosen and kept in the address
            page.goto(url + "?model=" + model.id + "&gpu=24%20gib")
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            assert page.input_value("#gpu") == "24GiB"
            page.wait_for_selector("#fit-card:not([hidden])", timeout=15_000)
            assert "gpu=24GiB" in page.url, page.url

            # a value the CLI refuses is named, not dropped unsaid
            page.goto(url + "?model=" + model.id + "&gpu=H1000")
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            assert "gpu: unknown GPU 'H1000'" in page.text_content("#address-note")
            assert not errors, errors
        finally:
            browser.close()


def test_the_fit_card_names_the_strategy_on_several_gpus(monkeypatch):
    """On several GPUs without a strategy the fit card words what /api/fit judged by: the best strategy's figure
    per GPU, named in the verdict, beside each method and in the fewest GPUs."""
    _require()
    import httpx
    from playwright.sync_api import sync_playwright

    monkeypatch.setattr(_source, "_read_hub", lambda repo, trust: (_ for _ in ()).throw(AssertionError(repo)))
    settings = {"model": MODEL, "profile": "hf", "method": "full", "optimizer": "adamw_torch",
                "gradient_checkpointing": "true", "batch_size": 4, "seq_len": 2048}
    with live_server() as url, sync_playwright() as p:
        _warm(url)
        with httpx.Client(base_url=url, timeout=60) as c:
            fit = c.post("/api/fit", json={**settings, "gpu": "rtx-4090", "gpus": 8, "headroom": 0}).json()
        # with no headroom some count up to 1,024 fits (the fewest GPUs row then names its strategy too)
        assert fit["min_gpus"] is not None and fit["per_gpu_strategy"] and fit["verdict"]["placed"] == f"on 8 GPUs with {fit['per_gpu_strategy']}"
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            query = "&".join(f"{k}={v}" for k, v in settings.items() if k != "model")
            page.goto(url.rstrip("/") + f"/?model={MODEL}&{query}&gpu=rtx-4090&gpus=8&headroom=0%25")
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            page.wait_for_function("s => document.getElementById('fit-verdict').textContent === s",
                                   arg=fit["verdict"]["summary"], timeout=15_000)
            table = " ".join(page.text_content("#fit-table").split())
            full = next(m for m in fit["methods"] if m["method"] == "full")
            assert f"{_gib(full['per_gpu'])} per GPU with {full['strategy']}" in table
            assert (f"fewest GPUs{fit['min_gpus']} with {fit['min_gpus_strategy']}, "
                    f"{_gib(fit['min_gpus_per_gpu'])} each") in table
            assert not errors, errors
        finally:
            browser.close()


def test_local_inference_mode_in_headless_chromium(monkeypatch, tmp_path):
    """The local mode: a small GGUF file (tests/gguf_files.py) picked with set_input_files; the page sends its header's
    bytes, never the whole file; the verdict comes first, then the GPU's and the host's figures, then the answers, the
    largest n_ctx the one vramwise.fit gives for the file on disk; the address keeps the settings and asks for the file
    again; a file that is not a GGUF is one error."""
    _require()
    pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]') writes the GGUF file")
    from playwright.sync_api import sync_playwright

    from gguf_files import write_qwen2
    from vramwise.answers.local import local_fit
    from vramwise.inputs.gguf import read_gguf

    path = tmp_path / "tiny-Q4_K_M.gguf"
    write_qwen2(path)
    size, head = path.stat().st_size, read_gguf(path).header_bytes
    want = vramwise.fit(str(path), profile="llama.cpp", gpu="rtx-4090", n_ctx=4096)
    # on 8 MiB memory bounds the context: 8,388,608 - 975,552 bytes of weights - 2,097,152 of the compute buffer's
    # hidden states = 5,315,904 for cells of 2,048 bytes (the f16 cache and the mask; tests/unit/answers/test_local_fit.py)
    small = vramwise.fit(str(path), profile="llama.cpp", gpu="8MiB", n_ctx=4096)
    ollama = local_fit(str(path), gpu="rtx-4090", preset="ollama", n_ctx=4096)
    monkeypatch.setattr(_source, "_read_hub", lambda repo, trust: pytest.fail(f"the hub was asked for {repo!r}"))
    largest = "v => (document.querySelector(\"#local-answers tr[data-key='max_n_ctx'] td.num\") || {dataset: {}}).dataset.value === v"
    with live_server() as url, sync_playwright() as p:
        _warm(url)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            sent: list[int] = []
            page.on("request", lambda r: sent.append(len(r.post_data_buffer or b"")) if "/api/local" in r.url else None)
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            page.select_option("#mode", "local")
            assert page.is_visible("#local-box") and page.is_hidden("#model-box") and page.is_hidden("#training-box")
            assert page.is_hidden("#compare-card") and page.is_hidden("#gpus")
            assert "a shared link asks for the file again" in page.text_content("#local-box")
            page.wait_for_function("() => document.getElementById('total').textContent.startsWith('choose a GGUF file')")
            page.select_option("#gpu", "rtx-4090")
            page.fill("#n_ctx", "4096")
            page.set_input_files("#gguf-file", str(path))
            page.wait_for_function(largest, arg=str(want.max_n_ctx), timeout=15_000)

            # the verdict first, then the figures of the GPU and the host, then the answers
            top = lambda sel: page.locator(sel).bounding_box()["y"]  # noqa: E731
            assert top("#verdict") < top("#total") < top("#local-figures") < top("#local-answers")
            assert page.text_content("#verdict") == f"{want.verdict.label} on {want.gpu.name}"
            assert page.text_content("#summary").startswith(want.verdict.to_dict()["summary"])  # the margin
            figures = want.estimate.figures
            cell = lambda key, col: page.get_attribute(f"#local-figures tr[data-key='{key}'] td:nth-child({col})",  # noqa: E731
                                                       "data-bytes")
            assert cell("weights", 2) == str(figures["gpu_weights"]) and cell("kv_cache", 2) == str(figures["gpu_kv_cache"])
            assert cell("output_buffer", 3) == str(figures["output_buffer"]) and cell("total", 3) == str(figures["host_total"])
            assert cell("compute_buffer", 2) == str(figures["gpu_compute_buffer"])
            assert cell("compute_buffer", 3) == str(figures["host_compute_buffer"])
            answer = lambda key: page.text_content(f"#local-answers tr[data-key='{key}'] td.num").strip()  # noqa: E731
            assert answer("max_n_ctx").startswith(f"{want.max_n_ctx:,} (n_parallel 1")
            assert answer("max_n_gpu_layers").startswith("all (3: the 2 layers and the output layer)")
            # the weights never travel: the first slice (256 KiB) and then the header alone
            assert sent and all(n < size for n in sent) and sent[-1] in (head, min(size, 256 * 1024))

            # Ollama's defaults: its answers and each setting's origin
            page.select_option("#local-preset", "ollama")
            page.wait_for_function("() => !document.getElementById('local-origins-box').hidden", timeout=15_000)
            page.wait_for_function(largest, arg=str(ollama.max_n_ctx), timeout=15_000)
            assert sent[-1] == head
            assert page.get_attribute("#local-origins li[data-setting='n_ctx']", "data-setting") == "n_ctx"
            assert "given" in page.text_content("#local-origins li[data-setting='n_ctx']")
            for part in ("profile=llama.cpp", "preset=ollama", "n_ctx=4096", "gpu=rtx-4090"):
                assert part in page.url, (part, page.url)
            assert "model=" not in page.url

            # Ollama's environment typed into the form: read as --ollama-env reads the process's, kept in the address
            page.fill("#ollama_env", "OLLAMA_NUM_PARALLEL=2")
            origin = "(document.querySelector(\"#local-origins li[data-setting='n_parallel']\") || {textContent: ''})"
            page.wait_for_function(f"() => {origin}.textContent.includes('environment OLLAMA_NUM_PARALLEL=2')",
                                   timeout=15_000)
            assert "ollama_env=OLLAMA_NUM_PARALLEL%3D2" in page.url
            page.fill("#ollama_env", "")
            page.wait_for_function(f"() => !{origin}.textContent.includes('OLLAMA_NUM_PARALLEL')", timeout=15_000)

            # the address restores the settings and asks for the file again; on 8 MiB the memory bounds n_ctx
            shared = browser.new_page(viewport={"width": 1280, "height": 900})
            shared.on("pageerror", lambda e: errors.append(str(e)))
            shared.goto(url.rstrip("/") + "/?profile=llama.cpp&gpu=8MiB&n_ctx=4096")
            shared.wait_for_selector("body[data-ready='1']", timeout=30_000)
            assert shared.input_value("#mode") == "local" and shared.input_value("#n_ctx") == "4096"
            assert shared.text_content("#total").startswith("choose a GGUF file: the address keeps the settings")
            shared.set_input_files("#gguf-file", str(path))
            shared.wait_for_function(largest, arg=str(small.max_n_ctx), timeout=15_000)
            assert small.max_n_ctx == 2560  # 5,315,904 / 2,048 = 2,595.7 cells, padded down to 10 x 256
            assert shared.text_content("#verdict") == f"{small.verdict.label} on {small.gpu.name}"

            # a file that is not a GGUF: the server's one line, no figures
            bad = tmp_path / "config.json"
            bad.write_text('{"model_type": "llama", "hidden_size": 4096}')
            shared.set_input_files("#gguf-file", str(bad))
            shared.wait_for_function("() => !document.getElementById('error').hidden", timeout=15_000)
            assert shared.text_content("#error") == "config.json: not a GGUF file (it does not start with the GGUF magic)"
            assert shared.text_content("#total") == "no figures: see the message above" and shared.is_hidden("#local-card")
            shared.close()
            assert not errors, errors
        finally:
            browser.close()
