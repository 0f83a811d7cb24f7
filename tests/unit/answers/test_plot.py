"""The pictures: each file exists and decodes, and the series it plotted equal the result's JSON
(``to_dict()``) in GiB. Pixels are never compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import vramwise
from vramwise import COMPONENTS, MissingDependencyError, SettingsError
from vramwise.answers.plots import MISSING, plot_compare, plot_estimate, plot_fit, plot_sweep

GIB = 2**30
REPO = Path(__file__).resolve().parents[3]
EXAMPLE = str(REPO / "examples" / "llama-3.1-8b.json")
SVG = "{http://www.w3.org/2000/svg}"

needs_mpl = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("matplotlib") is None, reason="matplotlib is not installed ([plot] extra)")


# -- results to plot (built once) -------------------------------------------------------------
@pytest.fixture(scope="module")
def est():
    return vramwise.estimate(EXAMPLE)


@pytest.fixture(scope="module")
def comparison():
    # hf does not model inference: one cell without an estimate
    return vramwise.compare(EXAMPLE, methods=("qlora", "lora", "full", "inference"), profiles=("unsloth", "hf"),
                            gpu="RTX 4090")


@pytest.fixture(scope="module")
def fit():
    return vramwise.fit(EXAMPLE, gpu="RTX 4090")


@pytest.fixture(scope="module")
def sweep2():
    return vramwise.sweep(EXAMPLE, batch_size=[1, 2, 4, 8], seq_len=[512, 2048, 8192])


# -- reading the files back -------------------------------------------------------------------
def _png(path: Path):
    import matplotlib.image

    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[0] >= 300 and img.shape[1] >= 400
    assert img.std() > 0  # not a blank canvas
    return img


def _svg(path: Path) -> ET.Element:
    assert path.is_file()
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg" and len(root) > 0
    return root


def _ids(root: ET.Element, prefix: str) -> list[str]:
    return [el.get("id") for el in root.iter() if (el.get("id") or "").startswith(prefix)]


def _texts(root: ET.Element) -> str:
    return "\n".join("".join(el.itertext()) for el in root.iter(f"{SVG}text"))


def _gib(v):
    return None if v is None else v / GIB


def _plain(data) -> None:
    """The returned data is plain Python that survives JSON unchanged."""
    assert json.loads(json.dumps(data)) == data


# -- estimate ---------------------------------------------------------------------------------
@needs_mpl
def test_estimate_png(est, tmp_path):
    path = tmp_path / "estimate.png"
    data = plot_estimate(est, path)
    _png(path)
    d = est.to_dict()
    assert data["series"] == {c: [d[c] / GIB] for c in COMPONENTS}
    assert data["totals"] == [d["total"] / GIB]
    assert data["unit"] == "GiB" and len(data["labels"]) == 1
    _plain(data)


@needs_mpl
def test_estimate_svg(tmp_path):
    e = vramwise.estimate(EXAMPLE, profile="hf", method="full")
    path = tmp_path / "estimate.svg"
    data = plot_estimate(e, str(path))
    root = _svg(path)
    assert sorted(_ids(root, "bar-")) == sorted(f"bar-{c}-0" for c in COMPONENTS)
    text = _texts(root)
    assert f"{e.total / GIB:,.2f} GiB" in text and "memory (GiB" in text and "llama-3.1-8b.json" in text
    assert data["series"]["optimizer"] == [e.optimizer / GIB]


# -- compare ----------------------------------------------------------------------------------
@needs_mpl
def test_compare_series_match_json(comparison, tmp_path):
    path = tmp_path / "compare.png"
    data = plot_compare(comparison, path)
    _png(path)
    cells = comparison.to_dict()["cells"]
    assert data["profiles"] == [c["profile"] for c in cells]
    assert data["methods"] == [c["method"] for c in cells]
    for comp in COMPONENTS:
        assert data["series"][comp] == [_gib(c.get(comp)) for c in cells]
    assert data["totals"] == [_gib(c.get("total")) for c in cells]
    assert data["fits"] == [c["fits"] for c in cells]
    assert data["problems"] == [c["problem"] for c in cells]
    assert None in data["totals"]  # the hf inference cell has no estimate
    assert data["gpu"]["memory_gib"] == comparison.gpu.memory_bytes / GIB
    _plain(data)


@needs_mpl
def test_compare_svg_bars_and_gpu_line(comparison, tmp_path):
    path = tmp_path / "compare.svg"
    data = plot_compare(comparison, path)
    root = _svg(path)
    estimated = [i for i, t in enumerate(data["totals"]) if t is not None]
    assert len(_ids(root, "bar-")) == len(COMPONENTS) * len(estimated)
    assert {f"bar-weights-{i}" for i in estimated} <= set(_ids(root, "bar-weights-"))
    assert _ids(root, "gpu-line") == ["gpu-line"]
    text = _texts(root)
    assert comparison.gpu.name in text and "does not fit" in text and "n/a" in text


@needs_mpl
def test_compare_without_gpu(tmp_path):
    c = vramwise.compare(EXAMPLE, methods=("qlora", "full"))
    path = tmp_path / "compare.svg"
    data = plot_compare(c, path)
    root = _svg(path)
    assert _ids(root, "gpu-line") == [] and data["gpu"] is None and data["fits"] == [None, None]
    assert len(_ids(root, "bar-")) == 2 * len(COMPONENTS)
    assert data["totals"] == [cell["total"] / GIB for cell in c.to_dict()["cells"]]


# -- fit --------------------------------------------------------------------------------------
@needs_mpl
def test_fit_frontier_matches_json(fit, tmp_path):
    path = tmp_path / "fit.png"
    data = plot_fit(fit, path)
    _png(path)
    d = fit.to_dict()
    assert data["seq_len"] == [p["seq_len"] for p in d["frontier"]]
    assert data["max_batch_size"] == [p["max_batch_size"] for p in d["frontier"]]
    assert data["usable_gib"] == d["usable_bytes"] / GIB
    assert data["gpu"] == d["gpu"]["name"] and data["gpus"] == d["gpus"] and data["xscale"] == "log"
    _plain(data)


@needs_mpl
def test_fit_svg_states_usable_memory(fit, tmp_path):
    path = tmp_path / "fit.svg"
    plot_fit(fit, path)
    root = _svg(path)
    text = _texts(root)
    assert fit.gpu.name in text and f"{fit.usable_bytes / GIB:,.2f} GiB usable" in text
    assert _ids(root, "frontier") == ["frontier"]
    assert ("does-not-fit" in _ids(root, "does-not-fit")) == (None in [b for _, b in fit.frontier])
    assert "sequence length (tokens" in text and "largest batch size" in text


@needs_mpl
def test_fit_where_nothing_fits(tmp_path):
    f = vramwise.fit(EXAMPLE, gpu="2GiB", seq_lens=[512, 2048])
    path = tmp_path / "fit.svg"
    data = plot_fit(f, path)
    root = _svg(path)
    assert data["max_batch_size"] == [None, None]
    assert _ids(root, "frontier") == [] and _ids(root, "does-not-fit") == ["does-not-fit"]


# -- sweep ------------------------------------------------------------------------------------
@needs_mpl
def test_sweep_heatmap_matches_json(sweep2, tmp_path):
    path = tmp_path / "sweep.png"
    data = plot_sweep(sweep2, path)
    _png(path)
    d = sweep2.to_dict()
    assert data["kind"] == "heatmap"
    assert data["y"] == {"name": "batch_size", "values": d["axes"]["batch_size"]}
    assert data["x"] == {"name": "seq_len", "values": d["axes"]["seq_len"]}
    by = {(r["batch_size"], r["seq_len"]): r["total"] / GIB for r in d["rows"]}
    assert data["totals"] == [[by[(b, s)] for s in data["x"]["values"]] for b in data["y"]["values"]]
    _plain(data)


@needs_mpl
def test_sweep_heatmap_svg(sweep2, tmp_path):
    path = tmp_path / "sweep.svg"
    data = plot_sweep(sweep2, path)
    root = _svg(path)
    (heat,) = [el for el in root.iter() if el.get("id") == "heatmap"]
    assert len(list(heat.iter(f"{SVG}image"))) == 1  # the grid itself (the colour bar is another image)
    text = _texts(root)
    for row in data["totals"]:
        for v in row:
            assert f"{v:,.2f}" in text  # every cell is labelled with its GiB
    assert "total memory (GiB)" in text


@needs_mpl
def test_sweep_one_axis_bars(tmp_path):
    s = vramwise.sweep(EXAMPLE, method=["qlora", "lora", "full"])
    path = tmp_path / "sweep1.svg"
    data = plot_sweep(s, path)
    root = _svg(path)
    d = s.to_dict()
    assert data["kind"] == "bars" and data["axis"] == "method" and data["values"] == ["qlora", "lora", "full"]
    for comp in COMPONENTS:
        assert data["series"][comp] == [r[comp] / GIB for r in d["rows"]]
    assert data["totals"] == [r["total"] / GIB for r in d["rows"]]
    assert len(_ids(root, "bar-")) == 3 * len(COMPONENTS)


def test_sweep_three_axes_is_refused(tmp_path):
    s = vramwise.sweep(EXAMPLE, batch_size=[1, 2], seq_len=[512, 1024], lora_rank=[8, 16])
    path = tmp_path / "sweep.png"
    with pytest.raises(SettingsError, match="at most two axes") as exc:
        plot_sweep(s, path)
    assert "\n" not in str(exc.value) and not path.exists()


# -- paths and the missing extra --------------------------------------------------------------
@pytest.mark.parametrize("name", ["plot.jpg", "plot.pdf", "plot", "plot.png.txt"])
def test_wrong_suffix(est, tmp_path, name):
    with pytest.raises(SettingsError, match=r"\.png or \.svg") as exc:
        plot_estimate(est, tmp_path / name)
    assert "\n" not in str(exc.value) and not (tmp_path / name).exists()


@needs_mpl
def test_suffix_is_case_insensitive(est, tmp_path):
    plot_estimate(est, tmp_path / "plot.PNG")
    _png(tmp_path / "plot.PNG")


@needs_mpl
def test_unwritable_path_is_a_settings_error(est, tmp_path):
    with pytest.raises(SettingsError, match="cannot write plot") as exc:
        plot_estimate(est, tmp_path / "no" / "such" / "folder" / "plot.png")
    assert "\n" not in str(exc.value)


@needs_mpl
def test_svg_is_reproducible(est, tmp_path):
    plot_estimate(est, tmp_path / "a.svg")
    plot_estimate(est, tmp_path / "b.svg")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_missing_matplotlib_is_one_line(monkeypatch, est, comparison, fit, sweep2, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    calls = [(plot_estimate, est), (plot_compare, comparison), (plot_fit, fit), (plot_sweep, sweep2)]
    for fn, result in calls:
        path = tmp_path / f"{fn.__name__}.png"
        with pytest.raises(MissingDependencyError) as exc:
            fn(result, path)
        assert str(exc.value) == MISSING == "plots need matplotlib: pip install 'vramwise[plot]'"
        assert exc.value.extra == "plot"
        assert not path.exists()


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=full, capture_output=True, text=True, timeout=120)


def test_import_never_imports_matplotlib():
    r = _run("import sys, vramwise, vramwise.answers.plots\n"
             f"vramwise.estimate({EXAMPLE!r})\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@needs_mpl
def test_no_pyplot_and_no_display(tmp_path):
    # an interactive backend asked for in the environment and no display: the plot still works on
    # Agg, without pyplot (the user's figures and backend are left alone)
    out = tmp_path / "x.png"
    r = _run("import sys, vramwise\nfrom vramwise.answers.plots import plot_estimate\n"
             f"plot_estimate(vramwise.estimate({EXAMPLE!r}), {str(out)!r})\n"
             "print('matplotlib.pyplot' in sys.modules)", MPLBACKEND="TkAgg")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
    _png(out)
