#!/usr/bin/env python
"""Coverage of transformers' causal-LM model types: vramwise's parameter counts against transformers'.

For every model type in transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` the model is built on
the meta device (tests/helpers.py ``reference_params``) from two configs, and vramwise's parameter
count per kind (``spec.params_by_group``) and in total is compared with it:

- the **default** config: transformers' own default config of the type, with the ``default_fixes``
  of the family whose ``reference:`` block names that model type (tests/helpers.py
  ``reference_default_config``, what tests/conformance/test_exact_params.py builds);
- a **small** config: that block's ``minimal`` config where it gives one
  (``reference_minimal_config``), else the default config shrunk to 2 layers (every sub-config with
  a layer count too; lists with one entry per layer are cut to their first 2; every other field kept).

Usage::

    python scripts/coverage.py            # writes docs/coverage.md, prints the summary line
    python scripts/coverage.py --json     # prints the rows as JSON instead
    python scripts/coverage.py --check    # exit status 1 when docs/coverage.md is stale

The output is deterministic (no timings, no dates) so that tests/conformance/test_coverage_doc.py can compare it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "coverage.md"
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

#: CPU seconds one model type (both configs) may take before it is reported as ``timeout``; CPU
#: time, not wall time, so that a loaded machine does not change the table (a worker that stops
#: without using CPU is given up after GUARD_FACTOR times as long in wall time)
TIMEOUT_S = 30
GUARD_FACTOR = 10
SMALL_LAYERS = 2
JOBS = 2

#: row statuses, in the order the table lists them
STATUSES = ("exact", "off", "vramwise error", "timeout", "not buildable", "out of scope")

#: config fields that hold the number of (decoder) layers, besides the class's attribute_map target
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers", "decoder_layers")

_VERSION_LINE = re.compile(r"^Generated with transformers `([^`]+)`", re.M)


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` in a model swallows it."""


# -- the classification rule -------------------------------------------------------------------


def out_of_scope_reason(model_type: str) -> str | None:
    """Why ``model_type`` is not a decoder-only model vramwise is meant to cover, or None.

    Out of scope: (1) the default config says ``is_encoder_decoder``; (2) the causal-LM class is the
    type's masked-LM class too (one head for both objectives); (3) the causal-LM class's constructor
    tests ``config.is_decoder`` (warns or asserts when it is unset): a bidirectional encoder that
    becomes a decoder only when switched (BertLMHeadModel, RobertaForCausalLM, ...). A class that
    *sets* ``config.is_decoder = True`` itself (TrOCR) is a decoder and stays in scope.
    """
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    cls_name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    try:
        cfg = AutoConfig.for_model(model_type)
    except Exception:
        cfg = None
    if cfg is not None and getattr(cfg, "is_encoder_decoder", False):
        return "encoder-decoder (is_encoder_decoder)"
    if MODEL_FOR_MASKED_LM_MAPPING_NAMES.get(model_type) == cls_name:
        return f"{cls_name} is also the masked-LM class"
    try:
        src = inspect.getsource(getattr(transformers, cls_name).__init__)
    except Exception:
        src = ""
    if re.search(r"(\bif\s+not|\bassert)\s+(self\.)?config\.is_decoder\b", src):
        return f"encoder used as a decoder ({cls_name} needs is_decoder=True)"
    return None


# -- configs ------------------------------------------------------------------------------------


def _decode_floats(obj):
    """Undo transformers' JSON tags for non-finite floats ({"__float__": "Infinity"})."""
    if isinstance(obj, dict):
        if set(obj) == {"__float__"} and obj["__float__"] in ("Infinity", "-Infinity", "NaN"):
            return float(obj["__float__"].replace("Infinity", "inf"))
        return {k: _decode_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode_floats(v) for v in obj]
    return obj


def _reference_block(registry, model_type: str):
    """The ``reference:`` block (and family name) that builds ``model_type``, or (None, None)."""
    for name in sorted(registry.families):
        ref = registry.families[name].reference
        if ref is not None and ref.get("model_type") == model_type:
            return name, ref
    return None, None


def shrink(cfg: dict, layers: int = SMALL_LAYERS) -> dict:
    """``cfg`` with ``layers`` layers, every other field kept.

    The layer count of the config and of every sub-config is lowered; lists with one entry per
    layer, and mappings keyed by layer index (``per_layer_config``), keep the entries of the layers
    kept. Those are the first ``layers``, unless a per-layer list of kinds (strings, booleans) would
    lose a kind: then the first layer of every kind is kept, padded with the earliest layers.
    """
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out = dict(cfg)
    keys = list(_LAYER_KEYS)
    cls = CONFIG_MAPPING.get(out.get("model_type")) if isinstance(out.get("model_type"), str) else None
    mapped = getattr(cls, "attribute_map", {}).get("num_hidden_layers") if cls is not None else None
    if mapped:
        keys.insert(0, mapped)
    n = next((out[k] for k in keys if type(out.get(k)) is int), None)
    if n is None and isinstance(out.get("layers_block_type"), list):  # the layer pattern is the count
        n = len(out["layers_block_type"])
    if n is not None and n > layers:
        keep = _kept_layers(out, n, layers)
        for k in keys:
            if type(out.get(k)) is int and out[k] == n:
                out[k] = len(keep)
        for k, v in out.items():
            if isinstance(v, list) and len(v) == n:
                out[k] = [v[i] for i in keep]
            elif _by_layer_index(v, n):
                new = {i: j for j, i in enumerate(keep)}
                out[k] = {_index_key(key, new[int(key)]): x for key, x in v.items() if int(key) in new}
    for k, v in out.items():
        if isinstance(v, dict) and isinstance(v.get("model_type"), str):
            out[k] = shrink(v, layers)
    return out


def _kept_layers(cfg: dict, n: int, layers: int) -> list[int]:
    first: dict = {}
    for v in cfg.values():
        if isinstance(v, list) and len(v) == n and all(isinstance(x, (str, bool)) for x in v):
            for i, x in enumerate(v):
                first.setdefault((id(v), x), i)
    needed = sorted(set(first.values()))
    if all(i < layers for i in needed) or len(needed) > 4 * layers:
        return list(range(layers))
    keep = set(needed)
    for i in range(n):
        if len(keep) >= layers:
            break
        keep.add(i)
    return sorted(keep)


def _by_layer_index(v, n: int) -> bool:
    """A non-empty mapping keyed by layer indices (ints, or strings of digits as JSON writes them)."""
    return (isinstance(v, dict) and bool(v) and "model_type" not in v
            and all((type(k) is int or (isinstance(k, str) and k.isdigit())) and int(k) < n for k in v))


def _index_key(old, new: int):
    return str(new).zfill(len(old)) if isinstance(old, str) else new


# -- one config ---------------------------------------------------------------------------------


def _one_line(e: BaseException, limit: int = 160) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x…", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compare(config: dict, registry) -> dict:
    """Outcome of one config: result, totals, and the kinds whose counts differ (ours, theirs)."""
    import vramwise
    from helpers import by_kind, reference_params

    try:
        ref = reference_params(config)
    except _Timeout:
        raise
    except Exception as e:
        # reference_params retries a ValueError as a vision-language model: report the first failure
        if "Unrecognized configuration class" in str(e) and isinstance(e.__context__, Exception):
            e = e.__context__
        return {"result": "not buildable", "error": _one_line(e)}
    theirs = by_kind(ref)
    ref_total = sum(ref.values())
    try:
        spec = vramwise.load_model(config, registry=registry)
        ours = {k: v for k, v in spec.params_by_group.items() if v}
        total = spec.params_total
    except _Timeout:
        raise
    except Exception as e:
        return {"result": "vramwise error", "error": _one_line(e), "params": ref_total}
    kinds = {k: [ours.get(k, 0), theirs.get(k, 0)] for k in sorted(set(ours) | set(theirs))
             if ours.get(k, 0) != theirs.get(k, 0)}
    out = {"result": "exact" if not kinds and total == ref_total else "off", "params": ref_total, "ours": total,
           "family": spec.family}
    if out["result"] == "off":
        out["pct"] = round(100.0 * (total - ref_total) / ref_total, 6) if ref_total else None
        out["kinds"] = kinds
    return out


def _family(registry, config: dict | None, model_type: str) -> tuple[str, bool]:
    text = ((config or {}).get("text_config") or {}).get("model_type")
    fam, _ = registry.family_for([model_type, text])
    return fam.name, bool(fam.fallback)


def classify(model_type: str, timeout: float = TIMEOUT_S) -> dict:
    """The coverage row of one model type (a CPU-time timer, in the calling process's main thread)."""
    import vramwise
    from helpers import default_config, reference_default_config, reference_minimal_config
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    row: dict = {"model_type": model_type, "class": MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]}
    use_alarm = timeout and hasattr(signal, "SIGPROF") and _main_thread()
    if use_alarm:
        previous = signal.signal(signal.SIGPROF, _on_alarm)
        signal.setitimer(signal.ITIMER_PROF, timeout)
    default = small = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            registry = vramwise.Registry.default()
            reason = out_of_scope_reason(model_type)
            if reason:
                row.update(status="out of scope", reason=reason)
                return _with_family(row, registry, None)
            try:
                fam_name, ref = _reference_block(registry, model_type)
            except Exception as e:
                row.update(status="vramwise error", reason=_one_line(e))
                return row
            row["reference"] = fam_name
            try:
                default_cfg = _decode_floats(reference_default_config(ref) if ref else default_config(model_type))
            except Exception as e:
                row.update(status="not buildable", reason=_one_line(e))
                return _with_family(row, registry, None)
            row["default"] = default = compare(default_cfg, registry)
            small_cfg = reference_minimal_config(ref) if ref else None
            row["small_source"] = "reference minimal" if small_cfg is not None else f"default, {SMALL_LAYERS} layers"
            small_cfg = _decode_floats(small_cfg) if small_cfg is not None else shrink(default_cfg)
            row["small"] = small = compare(small_cfg, registry)
            _with_family(row, registry, default_cfg)
    except _Timeout:
        row["status"] = "timeout"
        row["reason"] = f"over {timeout:g} s of CPU time"
        if default is None:
            row["default"] = {"result": "timeout"}
        elif small is None:
            row["small"] = {"result": "timeout"}
        return _with_family(row, vramwise.Registry.default(), None)
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, previous)
    row["status"] = _status(default, small)
    if row["status"] == "not buildable":
        row["reason"] = default["error"]
    return row


def _with_family(row: dict, registry, config: dict | None) -> dict:
    for part in (row.get("default"), row.get("small")):
        if part and part.get("family"):
            fam = registry.family(part["family"])
            row["family"], row["fallback"] = fam.name, bool(fam.fallback)
            return row
    try:
        row["family"], row["fallback"] = _family(registry, config, row["model_type"])
    except Exception as e:  # noqa: BLE001 - a broken family file is reported, not raised
        row["family"], row["fallback"] = f"({_one_line(e, 60)})", False
    return row


def _status(default: dict, small: dict) -> str:
    if default["result"] == "not buildable":
        return "not buildable"
    results = {default["result"], small["result"]}
    if "vramwise error" in results:
        return "vramwise error"
    if "off" in results:
        return "off"
    return "exact"  # both exact, or default exact and the small config not buildable by transformers


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _on_alarm(signum, frame):
    raise _Timeout()


# -- all model types ----------------------------------------------------------------------------


def _worker_init() -> None:
    try:
        import torch

        torch.set_num_threads(1)
    except Exception:
        pass
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except Exception:
        pass
    warnings.simplefilter("ignore")


def model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def collect(jobs: int = JOBS, timeout: float = TIMEOUT_S, types: list[str] | None = None) -> list[dict]:
    """The coverage rows of ``types`` (default: every causal-LM model type), sorted by type.

    With ``jobs`` > 1 the types run in a pool of forked processes (the parent imports torch,
    transformers and vramwise once, each worker is replaced after a few types to bound memory).
    """
    import vramwise

    types = model_types() if types is None else sorted(types)
    registry = vramwise.Registry.default()
    try:
        registry.families  # compile once, before forking
    except Exception:
        pass  # each row reports it
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        from transformers.utils import logging as hf_logging

        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            return [classify(t, timeout) for t in types]
        finally:
            hf_logging.set_verbosity(level)
    ctx = multiprocessing.get_context("fork")
    rows = {}
    pool = ctx.Pool(jobs, initializer=_worker_init, maxtasksperchild=20)
    try:
        pending = {t: pool.apply_async(classify, (t, timeout)) for t in types}
        for t, res in pending.items():
            try:
                rows[t] = res.get(timeout=timeout * GUARD_FACTOR)  # the worker's own timer comes first
            except multiprocessing.TimeoutError:
                rows[t] = {"model_type": t, "status": "timeout",
                           "reason": f"no result after {timeout * GUARD_FACTOR:g} s (worker hung)"}
            except Exception as e:  # a worker that died
                rows[t] = {"model_type": t, "status": "vramwise error", "reason": _one_line(e)}
        pool.close()
    finally:
        pool.terminate()
        pool.join()
    return [rows[t] for t in types]


# -- the document -------------------------------------------------------------------------------


def _human(n: int) -> str:
    sign = "+" if n > 0 else "-"
    n = abs(n)
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{sign}{n / size:.3g}{unit}"
    return f"{sign}{n}"


def _pct(p) -> str:
    if p is None:
        return "reference has 0 parameters"
    if p == 0:
        return "total equal"
    return f"{p:+.2f} %" if abs(p) >= 0.01 else f"{p:+.2g} %"


def _cell(part: dict | None) -> str:
    if part is None:
        return ""
    r = part["result"]
    if r == "exact":
        return "exact"
    if r == "off":
        kinds = ", ".join(f"{k} {_human(o - t)}" for k, (o, t) in part["kinds"].items())
        return f"off {_pct(part.get('pct'))}" + (f" ({kinds})" if kinds else "")
    if r in ("not buildable", "vramwise error"):
        return f"{r}: {part['error']}"
    return r


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary(rows: list[dict]) -> str:
    counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
    scope = len(rows) - counts["out of scope"]
    share = 100.0 * counts["exact"] / scope if scope else 0.0
    rest = ", ".join(f"{s} {counts[s]}" for s in STATUSES[1:-1])
    return (f"**Exact: {counts['exact']} of {scope} decoder-only types ({share:.1f} %)**; {rest}; "
            f"out of scope {counts['out of scope']} (of {len(rows)} causal-LM model types).")


def render(rows: list[dict], version: str | None = None) -> str:
    if version is None:
        import transformers

        version = transformers.__version__
    order = {s: i for i, s in enumerate(STATUSES)}
    rows = sorted(rows, key=lambda r: (order[r["status"]], r["model_type"]))
    lines = [
        "# Coverage of transformers' causal-LM model types",
        "",
        "Generated by `python scripts/coverage.py`; do not edit by hand (tests/conformance/test_coverage_doc.py",
        "fails when this file is stale). `python scripts/coverage.py --json` prints the same rows as JSON.",
        "",
        f"Generated with transformers `{version}`.",
        "",
        "Every model type in transformers' `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` is built on the meta device",
        "from two configs, and vramwise's parameter count per kind (`params_by_group`: embeddings,",
        "attention, mlp, norms, lm_head, ...) and in total is compared with what transformers builds:",
        "",
        "- **default**: transformers' default config of the type, with the `default_fixes` of the family",
        "  whose `reference:` block builds that type;",
        "- **small**: that block's `minimal` config where there is one, else the default config with",
        f"  {SMALL_LAYERS} layers, every other field kept. Lists with one entry per layer and mappings keyed",
        f"  by layer index keep the layers kept: the first {SMALL_LAYERS}, or, when a per-layer list of kinds",
        "  (`layer_types`, ...) would lose a kind, the first layer of each kind (so a few more layers).",
        "",
        "Status of a type (one status per row, the first that applies):",
        "",
        "- `out of scope`: not a decoder-only model, decided from the config and the class: the default",
        "  config is `is_encoder_decoder`; or the causal-LM class is also the type's masked-LM class; or",
        "  its constructor tests `config.is_decoder` (a bidirectional encoder used as a decoder, such as",
        "  `BertLMHeadModel`). A class that sets `is_decoder` itself (TrOCR) stays in scope.",
        "- `not buildable`: transformers fails on its own default config (the exception, in one line).",
        f"- `timeout`: the two configs together took more than {TIMEOUT_S} s of CPU time.",
        "- `vramwise error`: transformers builds the model but vramwise raises (default or small).",
        "- `off`: a count differs for either config: the total's relative difference, then each kind that",
        "  differs with vramwise minus transformers.",
        "- `exact`: every kind and the total equal for both configs (a small config transformers",
        "  cannot build is shown but does not count against it).",
        "",
        "The family column is the family vramwise resolved the type with; `(fallback)` marks the",
        "generic family used for model types no family serves.",
        "",
        summary(rows),
        "",
        "| model type | status | family | default config | small config |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        fam = r.get("family", "")
        if fam and r.get("fallback"):
            fam += " (fallback)"
        if r["status"] in ("out of scope",):
            default, small = r.get("reason", ""), ""
        elif "default" not in r:
            default, small = f"{r['status']}: {r.get('reason', '')}", ""
        else:
            default, small = _cell(r.get("default")), _cell(r.get("small"))
            if small and r.get("small_source") == "reference minimal":
                small += " (reference minimal)"
        lines.append(f"| `{r['model_type']}` | {r['status']} | {_esc(fam)} | {_esc(default)} | {_esc(small)} |")
    return "\n".join(lines) + "\n"


def doc_version(text: str) -> str | None:
    """The transformers version a coverage document was generated with."""
    m = _VERSION_LINE.search(text)
    return m.group(1) if m else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of writing the document")
    ap.add_argument("--check", action="store_true", help="compare with the document instead of writing it (exit 1 when stale)")
    ap.add_argument("--output", type=Path, default=DOC, help=f"document to write (default: {DOC.relative_to(REPO)})")
    ap.add_argument("--jobs", type=int, default=JOBS, help=f"worker processes (default {JOBS})")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds per model type (default {TIMEOUT_S})")
    ap.add_argument("types", nargs="*", help="only these model types (JSON output or a quick look; not for the document)")
    args = ap.parse_args(argv)
    _worker_init()
    rows = collect(args.jobs, args.timeout, args.types or None)
    if args.json:
        json.dump(rows, sys.stdout, indent=1, sort_keys=True, default=_json_default)
        sys.stdout.write("\n")
        return 0
    text = render(rows)
    if args.types:
        sys.stdout.write(text)
        return 0
    if args.check:
        old = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if old != text:
            print(f"{args.output} is stale: run python scripts/coverage.py", file=sys.stderr)
            return 1
        print(summary(rows))
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}: {summary(rows)}")
    return 0


def _json_default(o):
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return str(o)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
