"""The page of `vramwise serve` as a person reads it, in Debian's headless Chromium driven by Playwright.

Each test is one thing a person sees: no figures for an address the page cannot read, the serving verdict
before the token count, the GPU's key of the compare chart clear of its bars, menus and catalog entries not cut
off, the GPU menu in the size the figures use, and no word of how the catalog was built. They assert text,
visibility, bounding boxes and computed styles, not the page's code.

Skipped when Chromium or Playwright is missing, unless VRAMWISE_REQUIRE_BROWSER=1 (set by .ci/run).
"""

from __future__ import annotations

import re

import pytest

from vramwise.inputs import config as _source

from serve_live import live_server
from test_serve_browser import ARGS, CHROMIUM, MODEL, _require, _warm

# Chromium's drop-down arrow and its margin beside a select's text: the width a menu's text may not reach
ARROW_PX = 20
GIB_FIGURE = re.compile(r"\d[\d,]*\.\d\d GiB")


@pytest.fixture(scope="module")
def site():
    """One server and one browser for the module; the hub is never asked (the catalog holds every model)."""
    _require()
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_source, "_read_hub", lambda repo, trust: pytest.fail(f"the hub was asked for {repo!r}"))
        with live_server() as url, sync_playwright() as p:
            _warm(url)
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                yield url, browser
            finally:
                browser.close()


@pytest.fixture
def open_page(site):
    """open_page(query) -> a page at 1280 x 900, ready; page errors fail the test."""
    url, browser = site
    pages, errors = [], []

    def go(query: str = ""):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("pageerror", lambda e: errors.append(str(e)))
        pages.append(page)
        page.goto(url + query)
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)  # cold: the registry compiles
        return page

    yield go
    for page in pages:
        page.close()
    assert not errors, errors


def _api(site, path: str, body: dict | None = None) -> dict:
    import httpx

    with httpx.Client(base_url=site[0], timeout=30) as c:
        r = c.post(path, json=body) if body is not None else c.get(path)
    assert r.status_code == 200, r.text
    return r.json()


def _wait_bytes(page, want: int):
    page.wait_for_function("b => document.getElementById('total').dataset.bytes === b", arg=str(want), timeout=20_000)


def _figures_shown(page) -> list[str]:
    """Every GiB figure in the result cards shown (the address note and the error box are not cards)."""
    return GIB_FIGURE.findall(page.evaluate(
        "() => [...document.querySelectorAll('#results > .card')].filter(e => !e.hidden).map(e => e.innerText).join('\\n')"))


def _overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and \
        a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def test_an_address_it_cannot_read_shows_no_figures_until_the_inputs_are_whole(site, open_page):
    page = open_page("?model=nobody/nothing&gpu=H1000")
    note = page.text_content("#address-note")
    assert "model: 'nobody/nothing'" in note and "gpu: unknown GPU 'H1000'" in note, note
    # no model is chosen for the person, and nothing of any model is drawn
    assert page.input_value("#model-list") == ""
    assert page.get_attribute("#total", "data-bytes") == ""
    assert "GiB" not in page.text_content("#total")
    assert _figures_shown(page) == []
    assert page.locator("#chart rect").count() == 0 and page.locator("#compare rect").count() == 0
    assert page.is_hidden("#fit-card")
    assert "choose a model and a GPU" in page.text_content("#total")

    # the model chosen: still no figures, the GPU is missing
    page.select_option("#model-list", MODEL)
    page.wait_for_function("() => document.getElementById('total').textContent.includes('choose a GPU')", timeout=10_000)
    assert _figures_shown(page) == [] and page.get_attribute("#total", "data-bytes") == ""

    # the GPU chosen: the inputs are whole, the figures are those of the model and GPU chosen
    want = _api(site, "/api/estimate", {"model": MODEL})["total"]
    page.select_option("#gpu", "rtx-4090")
    _wait_bytes(page, want)
    assert page.is_visible("#fit-card") and page.locator("#chart rect.bar").count() >= 4

    # an unknown model alone: no other model stands in for it
    page = open_page("?model=nobody/nothing")
    assert page.input_value("#model-list") == "" and page.get_attribute("#total", "data-bytes") == ""
    assert _figures_shown(page) == []

    # a setting it cannot read: no figures of the default in its place until the person types one
    page = open_page(f"?model={MODEL}&batch_size=lots")
    assert "batch_size must be a whole number" in page.text_content("#address-note")
    assert page.get_attribute("#total", "data-bytes") == "" and _figures_shown(page) == []
    assert "choose batch_size" in page.text_content("#total")
    page.fill("#batch_size", "8")
    _wait_bytes(page, _api(site, "/api/estimate", {"model": MODEL, "batch_size": 8})["total"])
    # one of the serving form read wrong holds back no fine-tuning figures, which do not use it
    page = open_page(f"?model={MODEL}&max_model_len=x")
    _wait_bytes(page, _api(site, "/api/estimate", {"model": MODEL})["total"])


def test_a_failed_estimate_leaves_no_earlier_figures_under_its_message(site, open_page):
    page = open_page("?model=" + MODEL)
    _wait_bytes(page, _api(site, "/api/estimate", {"model": MODEL})["total"])
    page.click("#upload-box summary")
    page.set_input_files("#upload", files=[{"name": "config.json", "mimeType": "application/json",
                                            "buffer": b'{"model_type": "llama", oops}'}])
    page.wait_for_selector("#error:not([hidden])", timeout=15_000)
    assert page.get_attribute("#total", "data-bytes") == "" and _figures_shown(page) == []


def test_serving_leads_with_the_verdict(site, open_page):
    # Llama-3.1-70B cannot start on one H100: its bf16 weights alone are 70.55e9 params x 2 bytes = 131.4 GiB,
    # more than the GPU's 79.19 GiB (vLLM's total_memory on an H100 80GB)
    model = "meta-llama/Llama-3.1-70B"
    fit = _api(site, "/api/fit", {"model": model, "gpu": "h100-sxm", "profile": "vllm", "method": "inference"})
    assert fit["starts"] in (0, False)
    page = open_page(f"?model={model}&profile=vllm&gpu=h100-sxm")
    page.wait_for_function("() => document.getElementById('total').dataset.tokens !== ''", timeout=20_000)
    verdict, total = page.locator("#verdict"), page.locator("#total")
    assert verdict.text_content().startswith("vLLM does not start on NVIDIA H100")
    style = lambda loc, prop: loc.evaluate("(e, p) => getComputedStyle(e)[p]", prop)  # noqa: E731
    size = lambda loc: float(style(loc, "fontSize").removesuffix("px"))  # noqa: E731
    # first, larger and red (--bad: #b3261e); the token count after it, smaller
    vb, tb = verdict.bounding_box(), total.bounding_box()
    assert vb["y"] + vb["height"] <= tb["y"] + 1, (vb, tb)
    assert size(verdict) > size(total), (size(verdict), size(total))
    assert style(verdict, "color") == "rgb(179, 38, 30)"
    assert int(style(verdict, "fontWeight")) >= 600

    # back to fine-tuning: the total leads again, in the large type
    page.select_option("#mode", "training")
    page.wait_for_function("() => document.getElementById('total').dataset.bytes !== ''", timeout=20_000)
    tb, vb = total.bounding_box(), verdict.bounding_box()
    assert size(total) > size(verdict) and tb["x"] < vb["x"]


def test_the_gpu_key_of_the_compare_chart_is_clear_of_its_bars(site, open_page):
    # Llama-3.1-8B on an RTX 4090 at batch 8: the 24 GB line runs through the middle of the full fine-tuning bars
    page = open_page(f"?model={MODEL}&gpu=rtx-4090&batch_size=8")
    page.wait_for_function("() => document.querySelectorAll('#compare rect.bar').length >= 6", timeout=20_000)
    name = "NVIDIA GeForce RTX 4090 24GB"
    key = page.locator("#compare text", has_text=name)
    assert key.count() == 1
    kb = key.bounding_box()
    chart = page.locator("#compare").bounding_box()
    # the key whole inside the chart
    assert kb["x"] >= chart["x"] and kb["x"] + kb["width"] <= chart["x"] + chart["width"] + 0.5, (kb, chart)
    assert key.text_content().endswith("GiB")
    # and over none of the bars or their labels
    others = page.eval_on_selector_all(
        "#compare rect.bar, #compare text",
        "es => es.map(e => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, width: r.width, "
        "height: r.height, text: e.textContent}; })")
    hits = [o for o in others if o["text"] != key.text_content() and _overlap(kb, o)]
    assert not hits, hits


def _cut_off(page) -> list[str]:
    """The visible selects whose text does not fit: a list box wider inside than its box, a menu whose widest
    choice (measured in the menu's own font) does not fit beside the arrow."""
    return page.evaluate("""(arrow) => {
        const out = [];
        const ctx = document.createElement('canvas').getContext('2d');
        for (const s of document.querySelectorAll('select')) {
            if (!s.offsetParent) continue;  // hidden
            if (s.size > 1) { if (s.scrollWidth > s.clientWidth) out.push(s.id + ': ' + s.scrollWidth + ' > ' + s.clientWidth); continue; }
            const cs = getComputedStyle(s);
            ctx.font = cs.font;
            const room = s.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - arrow;
            for (const o of s.options) {
                const w = ctx.measureText(o.text).width;
                if (w > room) out.push(s.id + ': ' + JSON.stringify(o.text) + ' ' + Math.round(w) + ' > ' + Math.round(room));
            }
        }
        return out;
    }""", ARROW_PX)


def test_catalog_entries_and_menus_are_not_cut_off(site, open_page):
    summaries = _api(site, "/api/families")["profile_summaries"]
    page = open_page("?model=" + MODEL)
    assert page.locator("#model-list option").count() == len(_api(site, "/api/catalog")["models"])  # all of it
    assert _cut_off(page) == []
    # the profile's description, whole, beside its menu
    assert page.text_content("#profile-info") == summaries[page.input_value("#profile")]
    page.select_option("#profile", "torchtune")
    assert page.text_content("#profile-info") == summaries["torchtune"]
    assert page.is_visible("#profile-info")
    page.select_option("#mode", "serving")
    assert _cut_off(page) == []
    assert page.text_content("#serving-profile-info") == summaries["vllm"]


def test_the_gpu_menu_gives_the_size_the_figures_use(site, open_page):
    # hardware/gpus.yaml, h100-sxm: nvidia-smi's 81559 MiB = 85520809984 bytes = 79.65 GiB, the memory a training
    # step fits in; vLLM's start-up log reports total_memory=79.19GiB (cuda_total_bytes 85029615043), the total it
    # sizes its cache from
    # headroom 0: the usable memory is the GPU's whole figure (empty, the device band's headroom comes off it)
    page = open_page(f"?model={MODEL}&gpu=h100-sxm&headroom=0")
    page.wait_for_selector("#fit-card:not([hidden])", timeout=20_000)
    label = lambda: page.eval_on_selector("#gpu", "s => s.options[s.selectedIndex].text")  # noqa: E731
    assert label().endswith("(79.65 GiB)"), label()
    assert "79.65 GiB usable" in page.text_content("#verdict")

    page.select_option("#mode", "serving")
    page.wait_for_function("() => document.getElementById('total').dataset.tokens !== ''", timeout=20_000)
    assert label().endswith("(79.19 GiB)"), label()
    assert page.text_content("#per-gpu").endswith("of 79.19 GiB")
    assert "the GPU's 79.19 GiB" in page.text_content("#serving-table tr[data-key='available_kv']")
    # every catalog GPU's menu size is the one its figures use: the serving fit's GPU total for each
    menu = page.eval_on_selector_all("#gpu option", "os => os.map(o => [o.value, o.text])")
    for gpu_id in ("rtx-4090", "a100-sxm-80gb", "l4"):
        fit = _api(site, "/api/fit", {"model": MODEL, "gpu": gpu_id, "profile": "vllm", "method": "inference"})
        text = dict(menu)[gpu_id]
        assert text.endswith(f"({fit['figures']['gpu_memory'] / 2**30:,.2f} GiB)"), (gpu_id, text)


# words of how the catalog was built, which mean nothing to a reader of the page
INTERNAL = ("corpus", "configs/", "configs_extra", "INDEX.tsv")


def test_no_internal_words_reach_the_page(site, open_page):
    page = open_page(f"?model={MODEL}&gpu=rtx-4090")
    page.wait_for_selector("#fit-card:not([hidden])", timeout=20_000)
    # the line under the catalog for every model of it
    infos = page.evaluate("""() => {
        const sel = document.getElementById('model-list'), out = [];
        for (const o of [...sel.options]) {
            sel.value = o.value; sel.dispatchEvent(new Event('change'));
            out.push(document.getElementById('model-info').textContent);
        }
        return out;
    }""")
    assert len(infos) > 100
    bad = [t for t in infos if any(w in t for w in INTERNAL)]
    assert not bad, bad[:3]
    assert all("dimensions" in t for t in infos)
    text = page.inner_text("body")
    assert not [w for w in INTERNAL if w in text]
    page.select_option("#mode", "serving")
    page.wait_for_function("() => document.getElementById('total').dataset.tokens !== ''", timeout=20_000)
    text = page.inner_text("body")
    assert not [w for w in INTERNAL if w in text]


def test_the_largest_sequence_says_when_the_context_window_caps_it(site, open_page):
    # Llama-3.1-8B QLoRA at batch 1 on an H100: memory alone allows more than the config's max_position_embeddings
    # (131,072); fit caps its answer there and says so (Fit.notes), and the page shows the note under the row
    fit = _api(site, "/api/fit", {"model": MODEL, "gpu": "h100-sxm", "batch_size": 1})
    assert fit["max_seq_len"] == fit["context_window"] == 131_072 < fit["max_seq_len_memory"], fit
    assert fit["notes"], fit
    page = open_page(f"?model={MODEL}&gpu=h100-sxm&batch_size=1")
    page.wait_for_selector("#fit-card:not([hidden])", timeout=20_000)
    table = page.text_content("#fit-table")
    assert f"{fit['max_seq_len']:,}" in table
    assert fit["notes"][0] in table
