"""Shared test helpers: the shared config corpus and transformers' meta-device reference."""

from __future__ import annotations

import csv
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CONFIGS = SHARED / "configs"
# the words every skip for want of the corpus uses, so that VRAMWISE_REQUIRE_SHARED=1 can find them
SHARED_MISSING = "the shared config corpus ../shared/configs is absent"
# the words every skip for want of DeepSpeed uses (require_deepspeed; pytest.importorskip's own words are
# recognised too), so that VRAMWISE_REQUIRE_DEEPSPEED=1 (.ci/run) can turn such a skip into a failure
DEEPSPEED_MISSING = "deepspeed is not installed"


def deepspeed_missing(reason: str) -> bool:
    """Whether a skip's ``reason`` is the absence of DeepSpeed."""
    return DEEPSPEED_MISSING in reason or "could not import 'deepspeed'" in reason


def deepspeed_present() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


def require_deepspeed():
    """The ``deepspeed`` module, or a skip (of the test, or of the module at its top) that says it is missing."""
    import pytest

    return pytest.importorskip("deepspeed", reason=DEEPSPEED_MISSING)


def require_installed(*modules: str) -> None:
    """At the top of a test module: skip the module, in pytest.importorskip's words, unless each of ``modules``
    is installed, without importing it. The tests import what they use: torch, transformers' models, PEFT and
    accelerate take seconds to import, which every worker's collection paid before running any test."""
    import importlib.util

    import pytest

    for name in modules:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"could not import {name!r}: it is not installed", allow_module_level=True)


def tier_deselected(markexpr: str, tier: str) -> bool:
    """Whether the marker expression ``markexpr`` (``-m``) deselects every test of the folder ``tests/<tier>/``: each of
    them is marked ``tier``, and the expression is false with ``tier`` true whatever the other markers it names are
    (False when unsure)."""
    import itertools
    import re

    text = markexpr
    if not text.strip():
        return False
    try:
        from _pytest.mark.expression import Expression

        expression = Expression.compile(text)
    except Exception:  # noqa: BLE001 - pytest reports a bad expression itself; collect as usual
        return False
    others = sorted(set(re.findall(r"[^\s()]+", text)) - {"and", "or", "not", "True", "False", tier})
    if len(others) > 8 or any(not re.fullmatch(r"\w+", name) for name in others):
        return False  # markers with arguments, or too many to enumerate
    for values in itertools.product((False, True), repeat=len(others)):
        truth = dict(zip(others, values), **{tier: True})
        if expression.evaluate(lambda name, **kwargs: truth.get(name, False)):
            return False
    return True


def shared_present() -> bool:
    return (CONFIGS / "INDEX.tsv").is_file()


def checkout_mismatch(repo: Path = REPO) -> str | None:
    """None when the imported ``vramwise`` and each of its data packages (``package-dir`` in ``pyproject.toml``:
    families/, formulas/, schemas/, ...) are the folders of the checkout at ``repo``; else one line naming the
    first that is not (an installed copy would hide every edit of the checkout from the tests)."""
    import re
    from importlib import resources

    import vramwise

    # the one-line package-dir table, read without tomllib (Python 3.11+; the package supports 3.10)
    line = next(ln for ln in (REPO / "pyproject.toml").read_text(encoding="utf-8").splitlines()
                if ln.startswith("package-dir"))
    folders = dict(re.findall(r'"([\w.]+)"\s*=\s*"([^"]+)"', line))
    assert folders.get("vramwise") == "engine", line
    for package, folder in folders.items():
        if package == "vramwise":
            imported = Path(vramwise.__file__).resolve().parent
        else:
            imported = Path(str(resources.files(package))).resolve()
        wanted = (repo / folder).resolve()
        if imported != wanted:
            return (f"the imported {package} is {imported}, not this checkout's {folder}/ ({wanted}): "
                    f"install the checkout editable (pip install -e '.[test]') so the tests run against it")
    return None


def from_shared(params, n_args: int = 1) -> list:
    """Parameter sets of a test fed by the shared corpus: ``params`` as they are where the corpus is present,
    else ``params`` and one set skipped with a reason that names ../shared, so the test shows as skipped
    (and fails under VRAMWISE_REQUIRE_SHARED=1) instead of vanishing from the run."""
    import pytest

    if shared_present():
        return list(params)
    return [*params, pytest.param(*([None] * n_args), marks=pytest.mark.skip(reason=SHARED_MISSING),
                                  id="shared-corpus-absent")]


def shared_configs(model_types) -> list[tuple[str, Path]]:
    """(file name, path) of every config in ../shared/configs and configs_extra whose model_type is in ``model_types``."""
    out = []
    for folder in (CONFIGS, SHARED / "configs_extra"):
        out.extend(_indexed(folder, model_types))
    return sorted(out)


def _indexed(folder: Path, model_types) -> list[tuple[str, Path]]:
    return sorted((name, path) for name, path, mt, text_mt in _index_rows(folder)
                  if mt in model_types or text_mt in model_types)


#: folder -> its INDEX.tsv's configs as (file, path, model_type, text_config's model_type): a test session
#: collects families by the hundred, each asking for its model types (reset with _INDEX_ROWS.clear())
_INDEX_ROWS: dict = {}


def _index_rows(folder: Path) -> list[tuple]:
    if folder in _INDEX_ROWS:
        return _INDEX_ROWS[folder]
    index = folder / "INDEX.tsv"
    rows = []
    if index.is_file():
        with index.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                path = folder / row["file"]
                if path.is_file():
                    cfg = json.loads(path.read_text())
                    rows.append((row["file"], path, cfg.get("model_type"), (cfg.get("text_config") or {}).get("model_type")))
    _INDEX_ROWS[folder] = rows
    return rows


_TEXT_ROOTS = ("model.language_model.", "language_model.model.", "language_model.")
_OTHER_TOWERS = ("model.resampler_model.", "model.vision_model.", "model.visual.", "model.vision_embedder.", "model.audio_embedder.", "model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector.",
                 "model.audio_tower.", "model.embed_vision.", "model.embed_audio.", "model.embed_tokens_extend.")


def reference_params(config_dict: dict) -> dict[str, int]:
    """Parameter count per module path of the model transformers builds on the meta device.

    Text-tower prefixes of vision-language models are mapped to ``model.``; other towers are left out.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = dict(config_dict)
    mt = d.pop("model_type")
    cfg = AutoConfig.for_model(mt, **d)
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(cfg)
        except ValueError:  # vision-language models without a causal-LM mapping
            from transformers import AutoModelForImageTextToText

            model = AutoModelForImageTextToText.from_config(cfg)
    out: dict[str, int] = {}
    for name, p in model.named_parameters():  # tied weights are listed once
        if name.startswith(_OTHER_TOWERS):
            continue
        for root in _TEXT_ROOTS:
            if name.startswith(root):
                name = "model." + name[len(root):]
                break
        # weights and biases belong to their module; a bare parameter (fused experts, sinks) is its own entry
        module = name.rsplit(".", 1)[0] if name.rsplit(".", 1)[-1] in ("weight", "bias") else name
        out[module] = out.get(module, 0) + p.numel()
    return out


def kind_of(path: str) -> str:
    """Parameter group of a transformers module path, by its name."""
    leaf = path.rsplit(".", 1)[-1]
    if path.startswith("lm_head"):
        return "lm_head"
    if "embed" in leaf or leaf == "wte":
        return "embeddings"
    if "norm" in leaf:
        return "norms"
    if "shared_expert" in path or ".shared_mlp." in path:
        return "shared_experts"
    if ".experts." in path or path.endswith(".experts"):
        return "experts"
    if ".router." in path + ".":
        return "router"
    if any(f".{k}.{r}." in path + "." for k in ("mlp", "feed_forward", "block_sparse_moe", "ffn", "text_moe", "vision_moe") for r in ("gate", "router")):
        return "router"
    if any(f".{a}." in path + "." for a in ("self_attn", "attn", "linear_attn", "attention")):
        return "attention"
    if any(f".{k}." in path + "." for k in ("mlp", "feed_forward", "ffn")):
        return "mlp"
    return "other"


def by_kind(per_module: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for path, n in per_module.items():
        k = kind_of(path)
        out[k] = out.get(k, 0) + n
    return {k: v for k, v in sorted(out.items()) if v}


# -- the configs a family's `reference:` block asks to build (test_exact_params, scripts/coverage.py) --


def default_config(model_type: str) -> dict:
    """The default config of ``model_type`` as transformers writes it, every field included."""
    from transformers import AutoConfig

    return json.loads(AutoConfig.for_model(model_type).to_json_string(use_diff=False))


def merge_config(base: dict, fixes: dict) -> dict:
    """``base`` with ``fixes`` laid over it; nested mappings are merged, other values replaced."""
    out = dict(base)
    for k, v in fixes.items():
        out[k] = merge_config(out.get(k) or {}, v) if isinstance(v, dict) else v
    return out


def reference_default_config(reference) -> dict:
    """A ``reference:`` block's default config: its model type's default config with ``default_fixes``."""
    return merge_config(default_config(reference["model_type"]), reference.get("default_fixes") or {})


def reference_minimal_config(reference) -> dict | None:
    """A ``reference:`` block's minimal config with ``default_fixes``; None for ``minimal: null``."""
    if reference.get("minimal") is None:
        return None
    return merge_config({"model_type": reference["model_type"], **reference["minimal"]}, reference.get("default_fixes") or {})


# -- the measured strategies: world_size CPU processes joined by gloo ---------------------------


def traced(est, fid: str):
    """The value of formula ``fid`` in an estimate's trace: a model-scope formula, or a layer-scope one whose
    layers form one layer class (a single trace entry either way)."""
    (got,) = [t.value for t in est.trace if t.id == fid]
    return got


def require_gloo(*modules: str):
    """At the top of a test module: skip the module unless each of ``modules`` imports and
    torch.distributed has the gloo backend, which the measured strategies' processes join by. Returns
    torch.distributed."""
    import pytest

    for name in modules:
        pytest.importorskip(name)
    dist = pytest.importorskip("torch.distributed")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)
    return dist


# -- the two checks every validation matrix makes (tests/measured/test_validation_matrix*.py) --


def matrix_checks(vm):
    """``test_cell_within_ten_percent`` and ``test_median_within_five_percent`` for a validation matrix
    ``vm`` (a :class:`Matrix of benchmarks/validation_matrices.py`); each cell is measured once and shared by both."""
    import pytest

    from validation_matrices import CELL_LIMIT, MEDIAN_LIMIT, median_abs_error

    cells = list(vm.cells())
    results: dict = {}

    def result(cell):
        if cell not in results:
            results[cell] = vm.run_cell(cell)
        return results[cell]

    cell_limit = getattr(vm, "cell_limit", CELL_LIMIT)  # a matrix may hold its cells closer than the default
    median_limit = getattr(vm, "median_limit", MEDIAN_LIMIT)

    @pytest.mark.parametrize("cell", cells, ids=[vm.cell_id(c) for c in cells])
    def test_cell_within_ten_percent(cell):
        r = result(cell)
        assert abs(r["error"]) <= cell_limit, r

    def test_median_within_five_percent():
        assert median_abs_error([result(c) for c in cells]) <= median_limit

    return test_cell_within_ten_percent, test_median_within_five_percent


def where(recipe, name: str) -> tuple:
    """(kind, key, line) of where a recipe's setting or extra came from."""
    o = recipe.origins[name]
    return (o.kind, o.key, o.line)


def script_module(relative: str, name: str):
    """The project's script at ``relative`` (to the repository root, e.g. ``benchmarks/gpu_runs.py``) imported as
    module ``name``, once per process: it is registered in ``sys.modules`` before it runs, so that its dataclasses
    and the worker processes it starts find it by that name."""
    import importlib.util
    import sys

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / relative)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


#: The families whose cells of a family-by-family conformance matrix stay in the default run; the matrix's other
#: cells are marked ``slow`` (.ci/run's last tier runs every cell). One family for each way the families build
#: their layers, so the default run still crosses each path of the model builder.
FAST_FAMILIES = frozenset({
    "llama",        # dense, grouped-query attention, SwiGLU
    "qwen2",        # biases on q, k and v
    "gemma2",       # soft-capping, alternating sliding window, four norms a layer
    "gemma3_text",  # q / k norms, local and global rotary bases
    "phi3",         # fused qkv and gate_up projections
    "gpt2",         # Conv1D projections, learned positions, tied head
    "gpt_bigcode",  # multi-query attention, LayerNorm with biases
    "falcon",       # parallel attention and MLP
    "mixtral",      # mixture of experts
    "qwen3_moe",    # experts beside dense layers (mlp_only_layers)
    "deepseek_v3",  # multi-head latent attention, shared and routed experts
    "gpt_oss",      # attention sinks, fused experts with biases
    "mamba",        # state-space layers
    "jamba",        # attention, state-space and expert layers in one stack
})


def slow_unless(params, keep) -> list:
    """``params`` (values or ``pytest.param`` sets) with every set for which ``keep(values)`` is false marked
    ``slow``: the default run takes a sample of a long matrix, .ci/run's slow tier the rest."""
    import pytest

    out = []
    for p in params:
        values = tuple(p.values) if hasattr(p, "values") and hasattr(p, "marks") else (p,)
        if keep(values):
            out.append(p)
        elif hasattr(p, "marks"):
            out.append(pytest.param(*p.values, marks=[*p.marks, pytest.mark.slow], id=p.id))
        else:
            out.append(pytest.param(p, marks=pytest.mark.slow))
    return out


def every_nth(n: int):
    """A ``keep`` for :func:`slow_unless`: the first set and every n-th after it, in the order given."""
    count = {"i": -1}

    def keep(_values) -> bool:
        count["i"] += 1
        return count["i"] % n == 0

    return keep


def sample_families(families, n: int = 4) -> list:
    """A per-family matrix split by :func:`slow_unless`: the default run takes the representative families
    (:data:`FAST_FAMILIES`) and every ``n``-th family in the order given (the first included); .ci/run's slow
    tier takes the others."""
    nth = every_nth(n)
    return slow_unless(families, lambda v: nth(v) or v[0] in FAST_FAMILIES)
