"""Command line: ``vramwise estimate|explain|fit|compare|sweep|families|measure|gpus|select|check``.

Numbers are computed by the library in bytes; this module only formats them
(GiB = 2**30 bytes). Exit codes:

- 0: a real answer was printed (``check``: every file is fine);
- 1: ``check`` found problems in the files it was given;
- 2: bad input (argument, file, config, setting): one line ``vramwise: error: ...``, and
  for a bad argument a second line naming ``--help``;
- 70: an internal error (a bug): one line naming the exception; ``VRAMWISE_DEBUG=1``
  re-raises it with its traceback;
- 130: interrupted.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import textwrap
from typing import Any, Sequence

from vramwise.core import errors as _errors
from vramwise.core.errors import SettingsError, VramwiseError
from vramwise.core.estimate import COMPONENTS, Estimate, estimate, size_only_model
from vramwise.core.registry import Registry
from vramwise.core.settings import SETTINGS, STACKS
from vramwise.inputs.config import checkpoint_size, local_kind

#: exit code of an unexpected exception (sysexits' EX_SOFTWARE): a bug, never bad input
EXIT_INTERNAL = 70
EXIT_USAGE = 2
# a result that broke an invariant is a bug too (the class exists where the result checks do)
_INTERNAL = tuple(c for c in (getattr(_errors, "InternalError", None),) if isinstance(c, type))
_MAX_GPU_COUNT = 1 << 20
_SETTING = {s.name: s for s in SETTINGS}
#: settings a sweep may vary (vramwise.answers.fit.SWEEPABLE, repeated so that the parser does not import _fit)
_SWEEPABLE = ("method", "batch_size", "seq_len", "lora_rank", "gradient_checkpointing", "optimizer", "attention", "loss")
#: the profile compared with in the one-line note of estimate/explain, and the ratio that triggers it
_OTHER_PROFILE = {"unsloth": "hf", "hf": "unsloth"}
_NOTE_RATIO = 1.5
_WRAP = 100


class _UsageError(Exception):
    """A bad command-line argument, raised by the parsers instead of printing their usage."""

    def __init__(self, message: str, prog: str):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse without the usage dump: an error raises :class:`_UsageError` for ``main`` to print."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        raise _UsageError(message, self.prog)


_GIB = 1024**3


def _gib(n: float) -> str:
    return f"{n / _GIB:,.2f}"


def _print_json(data, out) -> None:
    json.dump(data, out, indent=2)
    out.write("\n")


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return str(n)


# -- bars -----------------------------------------------------------------------------------

_EIGHTHS = " ▏▎▍▌▋▊▉"
_BAR_CELLS = 10  # a full bar (100 %) is ten cells wide


def _unicode_ok(out) -> bool:
    enc = getattr(out, "encoding", None) or "utf-8"
    try:
        "█▏—".encode(enc)
    except (LookupError, UnicodeEncodeError):
        return False
    return True


def _bar(fraction: float, out, cells: int = _BAR_CELLS) -> str:
    """A proportional bar of ``fraction`` (0 to 1) in unicode blocks (``#`` where the output cannot show them)."""
    fraction = min(max(fraction, 0.0), 1.0)
    if not _unicode_ok(out):
        return "#" * round(fraction * cells)
    eighths = math.floor(fraction * cells * 8 + 1e-9)
    if fraction > 0 and eighths == 0:
        eighths = 1  # something, however small, shows
    full, rest = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[rest] if rest else "")


def _dash(out) -> str:
    return "—" if _unicode_ok(out) else "-"


# -- argument types -------------------------------------------------------------------------

def _bool_flag(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "bn": 10**9, "t": 10**12}
_BYTE_SUFFIXES = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
                  "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _scaled(text: str, suffixes: dict, what: str, examples: str) -> float:
    m = _NUMBER.match(text)
    if m is None or m.group(2).lower() not in suffixes:
        raise argparse.ArgumentTypeError(f"expected {what} such as {examples}, got {text!r}")
    value = float(m.group(1)) * suffixes[m.group(2).lower()]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite {what}, got {text!r}")
    return int(value) if value.is_integer() else value


def _param_count(text: str) -> float:
    """A parameter count: ``8B``, ``7.5B``, ``70e9``, ``350M``, ``8000000000`` (K, M, B, T are decimal)."""
    return _scaled(text, _COUNT_SUFFIXES, "a parameter count", "8B, 7.5B, 350M or 70e9")


def _byte_size(text: str) -> float:
    """A size in bytes: ``16GB`` (10**9), ``15GiB`` (2**30), ``1.5e10``; KB/MB/TB and KiB/MiB/TiB too."""
    return _scaled(text, _BYTE_SUFFIXES, "a size in bytes", "16GB, 15GiB or 1.6e10")


def _int_list(name: str, text: str, low: int = 1, high: int | None = None) -> list[int]:
    values = []
    for part in str(text).split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        try:
            v = int(part)
        except ValueError:
            raise _Bad(f"{name} must be comma-separated whole numbers, got {text!r}") from None
        if v < low or (high is not None and v > high):
            raise _Bad(f"{name} must be whole numbers from {low:,}" + (f" to {high:,}" if high else "") + f", got {v}")
        values.append(v)
    if not values:
        raise _Bad(f"{name} needs at least one value, got {text!r}")
    return values


class _Bad(Exception):
    """A bad argument value found after parsing (becomes a _UsageError of the running command)."""


def _share(text: str) -> float:
    """Headroom: ``10%`` or ``0.1``."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share such as 0.1 or 10%, got {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= 0.9):
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 0.9 (or 0% to 90%), got {text!r}")
    return value


_CLI_TYPES = {"int": int, "float": _finite, "bool": _bool_flag, "str": str}


def _plot_path(text: str) -> str:
    if not text.lower().endswith((".png", ".svg")):
        raise argparse.ArgumentTypeError(f"the plot's file name must end in .png or .svg, got {text!r}")
    return text


# -- shared arguments -----------------------------------------------------------------------

def _training_args(p: argparse.ArgumentParser, *, skip: tuple = (), lists: tuple = (), json_flag: bool = True,
                   model_help: str | None = None) -> None:
    p.add_argument(
        "model", nargs="?", default=None,
        help=model_help or "config.json, model folder, or hub id (read from the local cache when offline); "
        "optional with --params or --weight-bytes",
    )
    p.add_argument("--params", type=_param_count, default=None,
                   help="no config: estimate from a parameter count alone (e.g. 8B, 7.5B, 70e9)")
    p.add_argument("--weight-bytes", type=_byte_size, default=None,
                   help="no config: estimate from the weights' size (e.g. 16GB, 15GiB, or bytes)")
    for s in SETTINGS:  # one option per training setting, named, typed and defaulted by the settings table
        if s.name in skip:
            continue
        default = s.default if s.default is not None else "unset"
        if s.name in lists:  # a comma-separated list: each value a point of the sweep
            p.add_argument(s.flag, default=s.default, metavar="V[,V...]",
                           help=f"{s.help}; a comma-separated list sweeps it (default: {default})")
            continue
        kwargs = {"default": s.default, "type": _CLI_TYPES[s.cli_type], "help": f"{s.help} (default: {default})"}
        if s.choices:
            kwargs["metavar"] = "{" + ",".join(s.choices) + "}"
        elif s.cli_type == "bool":
            kwargs["metavar"] = "{true,false}"
        p.add_argument(s.flag, **kwargs)
    p.add_argument("--profile", default="unsloth",
                   help="memory profile: unsloth (Unsloth's calibrated model) or hf (plain transformers + PEFT, phase by phase) (default: unsloth)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub config's remote code to run (off by default)")
    p.add_argument("--hub", action="store_true",
                   help="read MODEL from the Hugging Face hub (or its cache) even when the model catalog has it")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _settings_of(args, skip: tuple = ()) -> dict:
    return {s.name: getattr(args, s.name) for s in SETTINGS if s.name not in skip}


def _model_of(args) -> tuple[Any, str, str, bool]:
    """(model source or ModelSpec, profile, label for the output, size_only) from MODEL / --params / --weight-bytes."""
    model, params, weight_bytes = args.model, args.params, args.weight_bytes
    size_only = params is not None or weight_bytes is not None
    if model is None and not size_only:
        raise SettingsError("give a MODEL (config.json, folder or hub id), or --params / --weight-bytes")
    if model is not None and size_only:
        raise SettingsError("give either a MODEL or --params / --weight-bytes, not both")
    label = model
    if model is not None and local_kind(model) == "dir" and local_kind(os.path.join(model, "config.json")) is None:
        size, _ = checkpoint_size(model)
        if size is not None:  # weight files without a config: the size-only fallback
            label = f"{model} ({_count_bytes(size)} of weights, no config)"
            model, weight_bytes, size_only = None, size, True
    if getattr(args, "hub", False) and model is not None and not size_only:
        from vramwise.inputs.catalog import HUB_PREFIX

        if local_kind(model) is not None:
            raise SettingsError(f"--hub reads a hub id, but {model} is a local path")
        model = model if model.startswith(HUB_PREFIX) else HUB_PREFIX + model
    if size_only:
        if model is None and label is None:
            label = (f"a model of {_count(int(params))} parameters (no config)" if params is not None
                     else f"a model of {_count_bytes(int(weight_bytes))} of weights (no config)")
        spec = size_only_model(params=params, weight_bytes=int(weight_bytes) if weight_bytes is not None else None)
        return spec, "size_only", label, True
    return model, args.profile, label, False


def _count_bytes(n: int) -> str:
    return f"{n / _GIB:,.2f} GiB" if n >= 2**30 else f"{n:,} bytes"


def _run_estimate(args) -> Estimate:
    model, profile, _, size_only = _model_of(args)
    settings = _settings_of(args)
    if size_only:
        settings.pop("target_modules")
    return estimate(model, profile=profile, trust_remote_code=args.trust_remote_code, **settings)


def _label(args) -> str:
    """What the output calls the model: its path or hub id, or the size it was given as (never None)."""
    if args.model is not None:
        return args.model
    if args.params is not None:
        return f"a model of {_count(int(args.params))} parameters (no config)"
    return f"a model of {_count_bytes(int(args.weight_bytes))} of weights (no config)"


# -- what the header says -------------------------------------------------------------------

def _applies(name: str, method: str) -> bool:
    return method in _SETTING[name].applies_to


def _settings_line(s) -> str:
    """The settings that matter for the method (``SETTINGS[...].applies_to``), in a few words."""
    m = s.method
    parts = [m, f"batch {s.batch_size}", f"seq {s.seq_len}"]
    if _applies("lora_rank", m):
        parts.append(f"rank {s.lora_rank}")
    if _applies("target_modules", m) and s.target_modules:
        parts.append("targets " + ",".join(s.target_modules))
    if _applies("gradient_checkpointing", m):
        parts.append(f"checkpointing {s.gradient_checkpointing}")
    if _applies("optimizer", m):
        parts.append(s.optimizer)
    if _applies("attention", m):
        parts.append(s.attention)
    if _applies("loss", m) and s.loss != "standard":
        parts.append(f"loss {s.loss}")
    if _applies("lora_dropout", m) and s.lora_dropout:
        parts.append(f"dropout {s.lora_dropout:g}")
    if m == "lora" and s.load_in_4bit:
        parts.append("4-bit base weights")
    if m == "inference":
        parts.append("4-bit weights" if s.load_in_4bit else "16-bit weights")
    if _applies("strategy", m) and s.strategy != "none":
        parts.append(f"{s.strategy} on {s.world_size} GPUs" + (f", offload {s.offload}" if s.offload != "none" else ""))
    return ", ".join(parts)


def _family_line(est: Estimate) -> str:
    kind = f" ({est.model_type})" if est.model_type else ""
    return f"family {est.family}{kind}, profile {est.profile}; {_settings_line(est.settings)}"


def _summary(profile: str) -> str | None:
    try:
        return Registry.default().profile(profile).summary or None
    except VramwiseError:
        return None


def _other_profile_note(est: Estimate, model: Any, trust_remote_code: bool) -> str | None:
    """One line when the other profile, at the same settings, differs by more than 1.5x (only where it models the method)."""
    other = _OTHER_PROFILE.get(est.profile)
    if other is None or model is None:
        return None
    reg = Registry.default()
    try:
        prof = reg.profile(other)
    except VramwiseError:
        return None
    if est.settings.method not in prof.methods:
        return None
    try:
        alt = estimate(est.model, profile=other, **est.settings.to_dict())
    except VramwiseError:
        return None
    ratio = alt.total / est.total if est.total else 0.0
    if not ratio or (1 / _NOTE_RATIO) <= ratio <= _NOTE_RATIO:
        return None
    bigger = f"{ratio:.1f}x" if ratio > 1 else f"1/{1 / ratio:.1f} of"
    return (f"note: profile {other} ({prof.summary}) gives {_gib(alt.total)} GiB at the same settings, {bigger} this "
            f"figure; the two profiles model different training stacks (--profile {other})")


def _write_wrapped(out, text: str, indent: str = "", width: int = _WRAP) -> None:
    out.write(textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent + "    ",
                            break_long_words=True, break_on_hyphens=False) + "\n")


# -- estimate -------------------------------------------------------------------------------

_ABSENT_REASONS = {
    ("gradients", "forward"): "freed by zero_grad after the previous step; they are written again during the backward",
    ("gradients", "backward"): "the peak comes before the parameter gradients are written (they exist from the end "
                               "of the backward to zero_grad)",
    ("activations", "optimizer"): "the saved activations were freed by the backward before the optimizer step",
    ("lora", None): "no adapters for this method",
    ("optimizer", None): "this optimizer keeps no state",
}


def _peak_line(est: Estimate) -> str | None:
    """Under a profile with phases: what the components table holds (what is alive at the peak phase)."""
    phase = est.peak_phase
    if not phase:
        return None
    comps = est.components()
    alive = [c for c in COMPONENTS if comps[c] and c != "overhead"]
    absent = [c for c in COMPONENTS if not comps[c] and c != "overhead"]
    line = f"the table is what is alive at the peak, in the {phase} phase: {', '.join(alive) or 'nothing'}"
    if comps.get("overhead"):
        line += " (and the allocator's reserve and CUDA context as overhead)"
    notes = []
    for c in absent:
        why = _ABSENT_REASONS.get((c, phase)) or _ABSENT_REASONS.get((c, None))
        notes.append(f"{c} 0" + (f": {why}" if why else ""))
    return line + ("; " + "; ".join(notes) if notes else "")


def _inference_view(est: Estimate) -> dict | None:
    """The single inference answer: weights + KV cache + overhead (the ``kv_cache_total`` figure), split per GPU."""
    if est.settings.method != "inference":
        return None
    figures = est.figures
    total, cache = figures.get("kv_cache_total"), figures.get("kv_cache")
    if not total or cache is None:
        return None
    overhead = total - est.weights - cache
    return {"weights": est.weights, "kv_cache": cache, "overhead": overhead, "total": total, "rule_total": est.total}


def _inference_per_gpu(view: dict, n: int) -> int:
    """Weights and KV cache split over ``n`` GPUs, the overhead on each (computed here from the figures)."""
    return math.ceil((view["weights"] + view["kv_cache"]) / n) + view["overhead"]


def _component_rows(rows: list, total: int, out) -> None:
    width = max(len(c) for c, _ in rows + [("component", 0)])
    out.write(f"{'component':<{width}}  {'GiB':>9}  {'share':>7}\n")
    for name, value in rows:
        share = value / total if total else 0.0
        out.write(f"{name:<{width}}  {_gib(value):>9}  {100 * share:>6.1f}%  {_bar(share, out)}".rstrip() + "\n")
    out.write(f"{'total':<{width}}  {_gib(total):>9}  {100.0:>6.1f}%\n\n")


def _print_table(est: Estimate, model: str, gpus: Sequence[int], out, note: str | None = None) -> None:
    out.write(f"{model}\n")
    out.write(_family_line(est) + "\n")
    summary = _summary(est.profile)
    if summary:
        _write_wrapped(out, f"profile {est.profile}: {summary}")
    out.write(f"parameters: {_count(est.params_total)} total, {_count(est.params_trainable)} trainable\n\n")
    view = _inference_view(est)
    if view is not None:
        _component_rows([("weights", view["weights"]), ("KV cache", view["kv_cache"]), ("overhead", view["overhead"])],
                        view["total"], out)
        out.write(f"KV cache for batch {est.settings.batch_size} x {est.settings.seq_len} tokens: "
                  f"{_gib(view['kv_cache'])} GiB; the total is weights + KV cache + overhead\n")
        out.write(f"reference: the unsloth inference rule (weights plus a fixed headroom, no KV cache) gives "
                  f"{_gib(view['rule_total'])} GiB\n")
        out.write(f"minimum per GPU (weights and KV cache split over the GPUs, {_gib(view['overhead'])} GiB of "
                  "overhead on each): " + ", ".join(f"{n} x {_gib(_inference_per_gpu(view, n))} GiB" for n in gpus) + "\n")
    else:
        _component_rows([(c, getattr(est, c)) for c in COMPONENTS], est.total, out)
        if est.phases:
            out.write("phases (tensor bytes at each peak): " + ", ".join(
                f"{k} {_gib(v)} GiB" for k, v in est.phases.items()) + f"; the peak is in the {est.peak_phase} phase\n")
            peak = _peak_line(est)
            if peak:
                _write_wrapped(out, peak)
        for line in est.report_lines(_gib):
            out.write(line.rstrip("\n") + "\n")
        if est.strategy is not None:
            _strategy_lines(est, out)
        else:
            out.write("minimum per GPU: " + ", ".join(f"{n} x {_gib(est.min_per_gpu(n))} GiB" for n in gpus) + "\n")
    if note:
        _write_wrapped(out, note)
    for w in est.warnings:
        _write_wrapped(out, f"warning: {w}")


def _strategy_lines(est: Estimate, out) -> None:
    """What a multi-GPU strategy puts on each GPU and in host memory (the table above is the busiest rank)."""
    s = est.settings
    info = Registry.default().strategy_info(est.strategy)
    _write_wrapped(out, f"strategy {est.strategy} on {est.world_size} GPU{'s' if est.world_size > 1 else ''}: "
                        f"{info['summary']}; the table is one rank (GPU), batch {s.batch_size} x {s.seq_len} per rank")
    for r in est.per_rank:
        out.write(f"per rank: {r.count} x {_gib(r.total)} GiB ({r.role})\n")
    f = est.figures
    parts = [f"model states {_gib(f['model_states'])} GiB"]
    if f.get("in_flight"):
        parts.append(f"gathered at the peak {_gib(f['in_flight'])} GiB")
    if f.get("buffers"):
        parts.append(f"communication buffers {_gib(f['buffers'])} GiB")
    out.write("on each GPU: " + ", ".join(parts) + "\n")
    host = est.host_bytes
    notes = ([f"offload {s.offload}"] if s.offload != "none" else []) + ([info["host_note"]] if info.get("host_note") else [])
    _write_wrapped(out, f"host memory per machine ({min(est.world_size, s.gpus_per_node)} GPUs): {_gib(host)} GiB"
                   + (f" ({'; '.join(notes)})" if notes else ""))


def _estimate_json(est: Estimate, gpus: Sequence[int]) -> dict:
    data = est.to_dict()
    view = _inference_view(est)
    if view is not None:  # min_per_gpu holds the KV cache; the profile's own per-GPU rule beside it
        data["min_per_gpu"] = {str(n): _inference_per_gpu(view, n) for n in gpus}
        data["min_per_gpu_rule"] = {str(n): est.min_per_gpu(n) for n in gpus}
        data["inference_total"] = view["total"]
    elif est.strategy is not None:  # the strategy places the model: each of its GPUs needs the rank figure
        data["min_per_gpu"] = {str(est.world_size): est.total}
    else:
        data["min_per_gpu"] = {str(n): est.min_per_gpu(n) for n in gpus}
    return data


# -- explain --------------------------------------------------------------------------------

def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


_PACKAGE_DIRS = {"formulas": "vramwise.formulas", "families": "vramwise.families", "hardware": "vramwise.hardware"}


def _installed(path: str) -> str | None:
    """The installed file of a repository-relative ``formulas/...`` or ``families/...`` path."""
    head, _, rest = path.partition("/")
    package = _PACKAGE_DIRS.get(head)
    if package is None or not rest:
        return None
    try:
        from importlib import resources

        target = resources.files(package).joinpath(*rest.split("/"))
        return str(target) if target.is_file() else None
    except Exception:  # noqa: BLE001 - a path that cannot be resolved is shown as it is
        return None


def _used_names(node, env: dict) -> set | None:
    """Names an expression tree reads, following only the branch of each ``a if c else b`` that ``env``
    selects (both when the condition cannot be evaluated)."""
    import ast

    from vramwise.core.expr.language import FUNCTIONS

    names: set = set()

    def go(n) -> None:
        if isinstance(n, ast.IfExp):
            go(n.test)
            try:
                code = compile(ast.fix_missing_locations(ast.Expression(body=n.test)), "<test>", "eval")
                taken = eval(code, {"__builtins__": {}, **FUNCTIONS}, env)  # noqa: S307 - a checked tree
            except Exception:  # noqa: BLE001 - unknown: both branches may be used
                go(n.body)
                go(n.orelse)
                return
            go(n.body if taken else n.orelse)
            return
        if isinstance(n, ast.Name):
            names.add(n.id)
        for child in ast.iter_child_nodes(n):
            go(child)

    go(node)
    return names


def _live_formulas(est: Estimate) -> set:
    """The formulas that contribute to a reported figure of this estimate: every component, the total and the
    per-GPU minimum, the phases, and each figure that is not 0 for this method; walked back through the inputs
    each formula reads on its taken branches."""
    prof = est._stage.profile
    by_id = {}
    for t in est.trace:
        by_id.setdefault(t.id, []).append(t)
    formula = {f.id: f for f in prof.formulas}
    roots = set(prof.components.values()) | {prof.total, prof.min_per_gpu, prof.trainable_params}
    roots |= set(prof.phases.values())
    figures = est.figures
    roots |= {fid for name, fid in prof.figures.items() if figures.get(name)}
    live: set = set()
    todo = [r for r in roots if r in formula]
    while todo:
        fid = todo.pop()
        if fid in live:
            continue
        live.add(fid)
        f = formula[fid]
        used: set = set()
        for t in by_id.get(fid, ()):
            env = {k: (v if not isinstance(v, tuple) else v) for k, v in t.inputs.items()}
            got = _used_names(f.expr.node.value, env) if f.expr.node is not None else set()
            used |= got if got is not None else set(f.expr.names)
        todo.extend(n for n in used if n in formula and n not in live)
    return live


def _value_text(v, unit: str) -> str:
    text = _short(v)
    if unit == "bytes" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:,.0f} bytes ({v / _GIB:,.2f} GiB)" if v >= 2**20 else f"{text} bytes"
    return f"{text} {unit}".rstrip()


def _print_trace(est: Estimate, model: str, as_json: bool, out, show_all: bool = False, note: str | None = None) -> None:
    if as_json:
        _print_json(_explain_json(est), out)
        return
    _print_trace_text(est, model, out, show_all, note)


def _explain_json(est: Estimate) -> dict:
    """What ``explain --json`` prints: the estimate, every input's provenance and every formula."""
    return {
        "estimate": est.to_dict(),
        "provenance": [
            {
                "kind": p.kind, "name": p.name, "value": _jsonable(p.value), "unit": p.unit,
                "location": p.location(), "how": p.how,
                **({"layers": list(p.layer_indices)} if p.layer_indices is not None else {}),
            }
            for p in est.provenance
        ],
        "trace": [
            {
                "id": t.id, "component": t.component, "location": t.location(), "expression": t.expression,
                "inputs": {k: _jsonable(v) for k, v in t.inputs.items()}, "value": _jsonable(t.value),
                "unit": t.unit, "source": t.source,
                **({"layers": list(t.layer_indices)} if t.layer_indices is not None else {}),
            }
            for t in est.trace
        ],
    }


def _print_trace_text(est: Estimate, model: str, out, show_all: bool, note: str | None) -> None:
    out.write(f"{model}: family {est.family}, profile {est.profile}\n")
    summary = _summary(est.profile)
    if summary:
        _write_wrapped(out, f"profile {est.profile}: {summary}")
    out.write(f"settings: {_settings_line(est.settings)}\n")
    out.write(f"total: {est.total:,} bytes ({_gib(est.total)} GiB)\n")
    if note:
        _write_wrapped(out, note)

    trace = list(est.trace)
    hidden_ids: list = []
    if not show_all:
        live = _live_formulas(est)
        hidden_ids = sorted({t.id for t in trace if t.id not in live})
        trace = [t for t in trace if t.id in live]
    read = set()
    for t in trace:
        read |= set(t.inputs)
    provenance = [p for p in est.provenance
                  if show_all or p.kind in ("fact", "inventory") or p.name in read]
    hidden_inputs = len(est.provenance) - len(provenance)

    files = []
    for loc in [p.location() for p in provenance] + [t.location() for t in trace]:
        path = loc.rsplit(":", 1)[0] if re.search(r":\d+$", loc) else loc
        if path not in files:
            files.append(path)
    out.write("\n[files] (repository path, then the installed file)\n")
    for path in files:
        inst = _installed(path)
        out.write(f"{path}" + (f"  ->  {inst}" if inst else "") + "\n")

    titles = {"fact": "facts of the config", "attribute": "layer attributes", "constant": "constants",
              "table": "table entries", "inventory": "inventory totals"}
    groups: dict = {}
    for p in provenance:
        groups.setdefault(p.kind, []).append(p)
    for kind, items in groups.items():
        out.write(f"\n[{titles[kind]}]\n")
        for p in items:
            layers = f" (layers {_ranges(p.layer_indices)})" if p.layer_indices is not None else ""
            _write_wrapped(out, f"{p.name} = {_value_text(p.value, p.unit)}{layers}  {p.how}  {p.location()}")
    sections: dict = {}
    for t in trace:  # each component's section once, in the order its first formula is evaluated
        sections.setdefault(t.component, []).append(t)
    for component, items in sections.items():
        out.write(f"\n[{component}]\n")
        for t in items:
            layers = f"  (layers {_ranges(t.layer_indices)})" if t.layer_indices is not None else ""
            out.write(f"{t.id}  {t.location()}{layers}\n")
            _write_wrapped(out, t.expression, indent="    ")
            if t.inputs:
                shown = ", ".join(f"{k}={_short(v)}" for k, v in t.inputs.items())
                _write_wrapped(out, f"with {shown}", indent="    ")
            out.write(f"    = {_value_text(t.value, t.unit)}\n")
    if hidden_ids or hidden_inputs:
        out.write("\n")
        _write_wrapped(out, f"hidden: {len(hidden_ids)} formula(s) that do not apply to {est.settings.method} at these "
                            f"settings (they feed no reported figure, or only figures that are 0 here)"
                            + (f": {', '.join(hidden_ids)}" if hidden_ids else "")
                            + (f"; {hidden_inputs} input(s) only they read" if hidden_inputs else "")
                            + "; --all shows everything")
    for w in est.warnings:
        _write_wrapped(out, f"warning: {w}")


def _ranges(indices: Sequence[int]) -> str:
    """``0-4, 6, 8-9`` for [0, 1, 2, 3, 4, 6, 8, 9]."""
    spans: list[list[int]] = []
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def _short(v) -> str:
    if v is None:
        return "unset"
    if isinstance(v, float):
        return f"{v:.6g}" if not v.is_integer() else f"{int(v)}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_short(x) for x in v) + ")"
    return repr(v) if isinstance(v, str) else str(v)


# -- fit, compare, sweep --------------------------------------------------------------------

def _plot(kind: str, obj, path: str | None, err) -> None:
    """Write ``obj`` with ``vramwise.answers.plots.plot_<kind>`` (imported only when --plot is given)."""
    if not path:
        return
    try:
        from vramwise.answers import plots as plotting
    except ModuleNotFoundError as e:
        if e.name not in (f"{__package__}._plot",):
            raise
        raise SettingsError("--plot: this installation of vramwise has no plotting module") from None
    getattr(plotting, f"plot_{kind}")(obj, path)
    err.write(f"wrote {path}\n")


def _gpu_words(fit_result, query: str | None = None) -> list[str]:
    """Where the GPU's memory figure comes from, and the usable memory, in a few lines."""
    g = fit_result.gpu
    lines = [f"GPU: {g.name}, {_gib(g.memory_bytes)} GiB ({g.memory_bytes:,} bytes) each"
             + (f", {fit_result.gpus} of them" if fit_result.gpus > 1 else "")]
    reading = None
    note = None
    if not g.source.startswith(("NVML", "given in bytes")):
        try:
            from vramwise.gpus.catalog import gpu_spec

            spec = gpu_spec(query or g.name)
            if spec.memory_bytes == g.memory_bytes:
                if spec.matched_by == "ambiguous" and spec.note:
                    note = f"note: {spec.note} (name another: {', '.join(spec.alternatives)})"
                reading = {"nvidia-smi": "the total nvidia-smi reports", "rocm-smi": "the total rocm-smi reports",
                           "hip-runtime": "the total HIP reports", "spec-sheet": "the vendor's figure"}.get(
                    spec.memory_reading, spec.memory_reading)
                if spec.matched_by == "size":
                    reading = None
        except VramwiseError:
            pass
    lines.append(f"memory figure: {reading}; source: {g.source}" if reading else f"memory figure: {g.source}")
    if note:
        lines.append(note)
    est = fit_result.estimate
    over = f"; the estimates already count the profile's overhead ({_gib(est.overhead)} GiB)" if est is not None else ""
    lines.append(f"usable per GPU: {_gib(fit_result.usable_bytes)} GiB = the memory less "
                 f"{fit_result.headroom * 100:g}% headroom{over}")
    return lines


def _fits_word(ok: bool | None) -> str:
    return "yes" if ok else ("no" if ok is not None else "-")


def _print_fit(f, label: str, out, query: str | None = None) -> None:
    est = f.estimate
    out.write(f"{label}\n")
    if est is not None:
        out.write(_family_line(est) + "\n")
    summary = _summary(f.profile)
    if summary:
        _write_wrapped(out, f"profile {f.profile}: {summary}")
    for line in _gpu_words(f, query):
        _write_wrapped(out, line)
    n, usable = f.gpus, f.usable_bytes
    on = f"{n} GPU" + ("s" if n > 1 else "")
    out.write("\n")
    if est is not None:
        need = est.min_per_gpu(n)
        verdict = "fits" if f.fits else "does not fit"
        spare = (f", {_gib(usable - need)} GiB to spare per GPU" if f.fits
                 else f", {_gib(need - usable)} GiB short per GPU" if need > usable else ", the total is not covered")
        if est.strategy is not None:
            out.write(f"at these settings: strategy {est.strategy} on {on}, {_gib(need)} GiB on each: {verdict}{spare}\n\n")
        else:
            out.write(f"at these settings: {_gib(est.total)} GiB in all, {_gib(need)} GiB per GPU on {on}: {verdict}{spare}\n\n")
    width = max(len(m.method) for m in f.methods) if f.methods else 6
    out.write(f"{'method':<{width}}  {'total GiB':>9}  {'per GPU':>9}  fits  of usable\n")
    dash = _dash(out)
    for m in f.methods:
        if m.total is None:
            out.write(f"{m.method:<{width}}  {dash:>9}  {dash:>9}  no    {m.problem}\n")
            continue
        out.write(f"{m.method:<{width}}  {_gib(m.total):>9}  {_gib(m.per_gpu):>9}  {_fits_word(m.fits):<4}  "
                  f"{_bar(m.per_gpu / usable, out)}{'+' if m.per_gpu > usable else ''}".rstrip() + "\n")
    if any(m.method == "inference" and m.total is not None for m in f.methods):
        out.write("(inference: the profile's rule; `estimate --method inference` adds the KV cache)\n")
    out.write("\n")
    s = est.settings if est is not None else None
    if s is not None:
        out.write(f"largest batch size at seq {s.seq_len:,}: "
                  + (f"{f.max_batch_size:,}" if f.max_batch_size else "none (batch 1 does not fit)") + "\n")
        out.write(f"largest sequence length at batch {s.batch_size:,}: "
                  + (f"{f.max_seq_len:,}" if f.max_seq_len else "none (1 token does not fit)") + "\n")
        if s.method in ("lora", "qlora"):
            out.write("largest LoRA rank: " + (f"{f.max_lora_rank:,}" if f.max_lora_rank else "none (rank 1 does not fit)") + "\n")
        else:
            out.write(f"largest LoRA rank: {dash} ({s.method} trains no adapters)\n")
        _write_wrapped(out, _min_gpus_line(f))
    out.write("\n")
    _print_frontier(f, out)
    if est is not None:
        for w in est.warnings:
            _write_wrapped(out, f"warning: {w}")


def _min_gpus_line(f) -> str:
    est, k, usable, share = f.estimate, f.min_gpus, f.usable_bytes, f.further_gpu_share
    name = f.gpu.name
    if k is None:
        return f"fewest GPUs: none up to 1,024 x {name} holds it"
    need = est.min_per_gpu(k)
    if est.strategy is not None:
        return (f"fewest GPUs: {k} x {name}: strategy {est.strategy} on {k} GPUs needs {_gib(need)} GiB on each "
                f"(<= {_gib(usable)} GiB usable)")
    if k == 1:
        return (f"fewest GPUs: 1 x {name}: the total {_gib(est.total)} GiB fits the usable {_gib(usable)} GiB "
                f"of one GPU")
    covered = usable * (1 + share * (k - 1))
    return (f"fewest GPUs: {k} x {name}, by the selection rule: each GPU holds the per-GPU minimum for {k} "
            f"({_gib(need)} GiB <= {_gib(usable)} GiB usable) and the first GPU in full plus {share * 100:g}% of each "
            f"further one ({_gib(covered)} GiB) covers the total {_gib(est.total)} GiB")


def _print_frontier(f, out) -> None:
    if not f.frontier:
        return
    out.write(f"frontier: the largest batch at each sequence length, on {f.gpus} x {f.gpu.name}\n")
    out.write(f"{'seq_len':>10}  {'max batch':>10}\n")
    for s, b in f.frontier:
        if b is None:
            rest = [x for x, y in f.frontier if x > s]
            if all(y is None for x, y in f.frontier if x > s) and rest:
                out.write(f"{s:>10,}  {'none fits':>10}  (nor at any longer sequence of the grid)\n")
                return
            out.write(f"{s:>10,}  {'none fits':>10}\n")
            continue
        out.write(f"{s:>10,}  {b:>10,}\n")


def _print_compare(c, label: str, settings: dict, out) -> None:
    cells = c.cells
    profiles = list(dict.fromkeys(p for p, *_ in cells))
    one_profile = len(profiles) == 1
    heads = [m if one_profile else f"{p}/{m}" for p, m, *_ in cells]
    out.write(f"{label}\n")
    for p in profiles:
        summary = _summary(p)
        _write_wrapped(out, f"profile {p}" + (f": {summary}" if summary else ""))
    shown = dict(settings)
    methods = [m for _, m, *_ in cells]
    parts = [f"batch {shown['batch_size']}", f"seq {shown['seq_len']}"]
    if any(_applies("lora_rank", m) for m in methods):
        parts.append(f"rank {shown['lora_rank']} (adapters)")
    if any(_applies("gradient_checkpointing", m) for m in methods):
        parts.append(f"checkpointing {shown['gradient_checkpointing']}")
    if any(_applies("optimizer", m) for m in methods):
        parts.append(str(shown["optimizer"]))
    parts.append(str(shown["attention"]))
    out.write("settings: " + ", ".join(parts) + "\n\n")
    width = max(9, *(len(h) for h in heads))
    name_w = 12
    if c.gpu is not None:
        fits_label = f"fits {c.gpu.name}" if len(c.gpu.name) <= 24 else "fits the GPU"
        name_w = max(name_w, len(fits_label))
    dash = _dash(out)
    out.write(f"{'GiB':<{name_w}}" + "".join(f"  {h:>{width}}" for h in heads) + "\n")
    for comp in COMPONENTS + ("total",):
        row = []
        for _, _, est, _, _ in cells:
            row.append(_gib(getattr(est, comp)) if est is not None else dash)
        out.write(f"{comp:<{name_w}}" + "".join(f"  {v:>{width}}" for v in row) + "\n")
    if c.gpu is not None:
        out.write(f"{fits_label:<{name_w}}" + "".join(
            f"  {(_fits_word(fits) if est is not None else dash):>{width}}" for _, _, est, _, fits in cells) + "\n")
    totals = [(h, est.total) for h, (_, _, est, _, _) in zip(heads, cells) if est is not None]
    if totals:
        top = max(t for _, t in totals)
        hw = max(len(h) for h, _ in totals)
        out.write("\n")
        for h, t in totals:
            out.write(f"{h:<{hw}}  {_gib(t):>9} GiB  {_bar(t / top, out, 20)}".rstrip() + "\n")
    for p, m, est, problem, _ in cells:
        if est is None:
            _write_wrapped(out, f"{p}/{m}: {problem}")
    if c.gpu is not None:
        _write_wrapped(out, f"GPU: {c.gpu.name}, {_gib(c.gpu.memory_bytes)} GiB each"
                            + (f", {c.gpu.count} of them" if c.gpu.count > 1 else "") + f" (source: {c.gpu.source})")
    if any(m == "inference" and est is not None for _, m, est, _, _ in cells):
        out.write("inference: the profile's rule; `estimate --method inference` adds the KV cache\n")
    seen = set()
    for _, _, est, _, _ in cells:
        for w in (est.warnings if est is not None else ()):
            if w not in seen:
                seen.add(w)
                _write_wrapped(out, f"warning: {w}")


def _sweep_settings(args) -> dict:
    """The settings of a sweep: lists for the sweepable settings given with commas (typed by the table)."""
    settings = _settings_of(args)
    for name in _SWEEPABLE:
        raw = settings[name]
        if not isinstance(raw, str) or name not in _SWEEP_LISTS:
            continue
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values:
            raise _Bad(f"{_SETTING[name].flag} needs at least one value, got {raw!r}")
        if _SETTING[name].cli_type == "int":
            values = _int_list(_SETTING[name].flag, raw)
        values = list(dict.fromkeys(values))
        settings[name] = values if len(values) > 1 else values[0]
    return settings


#: sweepable settings the sweep parser reads as comma-separated lists
_SWEEP_LISTS = _SWEEPABLE


def _print_sweep(sw, label: str, profile: str, fixed: dict, fmt: str, out) -> None:
    from vramwise.core.estimate import COMPONENTS as comps

    names = [a for a, _ in sw.axes]
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(names + list(comps) + ["total"])
        for vals, e in sw.rows:
            w.writerow(list(vals) + [getattr(e, c) for c in comps] + [e.total])
        return
    out.write(f"{label}\n")
    first = sw.rows[0][1] if sw.rows else None
    if first is not None:
        kind = f" ({first.model_type})" if first.model_type else ""
        out.write(f"family {first.family}{kind}, profile {first.profile}\n")
    summary = _summary(profile)
    if summary:
        _write_wrapped(out, f"profile {profile}: {summary}")
    if first is not None:
        fixed_words = [w for w in _settings_line(first.settings).split(", ")]
        axis_words = {"method": None, "batch_size": "batch", "seq_len": "seq", "lora_rank": "rank",
                      "gradient_checkpointing": "checkpointing", "loss": "loss"}
        keep = []
        for w in fixed_words:
            head = w.split(" ")[0]
            varied = any((axis_words.get(a) == head) for a in names) or (
                "method" in names and w == first.settings.method) or (
                "optimizer" in names and w == first.settings.optimizer) or (
                "attention" in names and w == first.settings.attention)
            if not varied:
                keep.append(w)
        out.write("fixed: " + (", ".join(keep) or "nothing") + "; varied: " + (", ".join(names) or "nothing") + "\n")
    out.write("\n")
    if len(names) == 2:
        (a, av), (b, bv) = sw.axes
        totals = {vals: e.total for vals, e in sw.rows}
        col_w = max(9, *(len(str(v)) for v in bv))
        head = f"{a} \\ {b}"
        row_w = max(len(head), *(len(str(v)) for v in av))
        out.write(f"total GiB: {a} (rows) x {b} (columns)\n")
        out.write(f"{head:<{row_w}}" + "".join(f"  {str(v):>{col_w}}" for v in bv) + "\n")
        for x in av:
            out.write(f"{str(x):<{row_w}}" + "".join(f"  {_gib(totals[(x, y)]):>{col_w}}" for y in bv) + "\n")
        return
    widths = [max(len(n), *(len(str(v)) for v in vals)) for n, vals in sw.axes]
    top = max((e.total for _, e in sw.rows), default=1)
    out.write("".join(f"{n:<{w}}  " for n, w in zip(names, widths)) + f"{'total GiB':>9}\n")
    for vals, e in sw.rows:
        out.write("".join(f"{str(v):<{w}}  " for v, w in zip(vals, widths))
                  + f"{_gib(e.total):>9}  {_bar(e.total / top, out)}".rstrip() + "\n")


# -- other commands -------------------------------------------------------------------------

def _families_json() -> dict:
    """What ``families --json`` prints."""
    reg = Registry.default()
    rows = [
        {"family": f.name, "model_types": list(f.model_types), "file": f.file, "extends": f.parents[0] if f.parents else None,
         "fallback": f.fallback}
        for f in sorted(reg.families.values(), key=lambda f: f.name) if not f.abstract
    ]
    return {"families": rows, "profiles": reg.profile_names(),
            "profile_summaries": {p: reg.profile(p).summary for p in reg.profile_names()}}


def _families(as_json: bool, out) -> None:
    data = _families_json()
    if as_json:
        _print_json(data, out)
        return
    reg = Registry.default()
    rows = data["families"]
    width = max(len(r["family"]) for r in rows)
    for r in rows:
        types = ", ".join(r["model_types"]) or (
            "(fallback for unknown model types)" if r["fallback"] else "(used by name, not by model type)")
        ext = f"  extends {r['extends']}" if r["extends"] else ""
        out.write(f"{r['family']:<{width}}  {types}  [{r['file']}]{ext}\n")
    out.write(f"\nprofiles: {', '.join(reg.profile_names())}\n")
    for p in reg.profile_names():
        out.write(f"  {p}: {reg.profile(p).summary}\n")


#: What ``measure`` runs when a flag is not given: estimate's default where measure can run it, else the nearest
#: runnable setting (flash attention and Unsloth's checkpointing are not available to plain transformers on CPU).
_MEASURE_DEFAULTS = {"method": "qlora", "batch_size": 4, "seq_len": 2048, "lora_rank": 16,
                     "gradient_checkpointing": "true", "attention": "sdpa", "optimizer": "adamw_8bit"}


def _measure_settings(args) -> tuple[dict, list[str]]:
    """The settings measure runs, and what was changed from estimate's defaults to make them runnable."""
    chosen, changed = {}, []
    for name, default in _MEASURE_DEFAULTS.items():
        value = getattr(args, name)
        chosen[name] = default if value is None else value
    if args.gradient_checkpointing is None:
        changed.append("checkpointing true (Unsloth's is not runnable here)")
    if args.attention is None:
        changed.append("attention sdpa (flash_attention_2 is not runnable here)")
    if args.fake:
        if args.method is None:
            chosen["method"] = "lora"
            changed.append("method lora (QLoRA cannot be simulated with fake tensors)")
        if args.optimizer is None:
            chosen["optimizer"] = "adamw_torch"
            changed.append("optimizer adamw_torch (8-bit AdamW cannot be simulated with fake tensors)")
    if args.strategy is not None:
        if args.method is None:
            chosen["method"] = "lora"
            changed.append(f"method lora (QLoRA is not measured with --strategy {args.strategy})")
        if args.optimizer is None:
            chosen["optimizer"] = "adamw_torch"
            changed.append(f"optimizer adamw_torch (torch's own AdamW under --strategy {args.strategy})")
    return chosen, changed


def _measure(args, out) -> None:
    import warnings

    from vramwise.measuring.steps import measure

    chosen, changed = _measure_settings(args)
    with warnings.catch_warnings():  # deprecation notices of the libraries measured are not the user's concern
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        m = measure(
            args.model, target_modules=args.target_modules, steps=args.steps, device=args.device, fake=args.fake,
            lora_dropout=args.lora_dropout, stack=args.stack, loss=args.loss, loss_chunks=args.loss_chunks,
            activation_offloading=args.activation_offloading, optimizer_in_bwd=args.optimizer_in_bwd,
            strategy=args.strategy, world_size=args.world_size, **chosen,
        )
    if args.json:
        _print_json(m.to_dict(), out)
        return
    unit, scale = ("GiB", 2**30) if m.peak >= 2**30 else ("MiB", 2**20)

    def size(n: int) -> str:
        return f"{n / scale:,.2f}"

    s = m.settings
    out.write(f"{args.model}: {m.method} on {m.device}, {_count(m.params_total)} parameters, {_count(m.params_trainable)} trainable\n")
    ran = [s["method"], f"batch {s['batch_size']}", f"seq {s['seq_len']}"]
    if s["method"] in ("lora", "qlora"):
        ran.append(f"rank {s['lora_rank']}")
    ran += [f"checkpointing {s['gradient_checkpointing']}", s["optimizer"], s["attention"]]
    if args.stack != "hf":
        ran.insert(0, f"stack {args.stack}")
        ran += [f"loss {s['loss']}" + (f" in {s['loss_chunks']} chunks" if s["loss"] == "chunked" else "")]
        ran += [n.replace("_", " ") for n in ("activation_offloading", "optimizer_in_bwd") if s[n]]
    if m.strategy is not None:
        ran.insert(0, f"{m.strategy} on {m.world_size} processes")
    out.write(f"ran: {', '.join(ran)}, {args.steps} step(s)" + (" (fake tensors)" if args.fake else "") + "\n")
    if changed:
        _write_wrapped(out, "estimate's defaults where runnable; changed: " + "; ".join(changed))
    out.write(f"peak: {size(m.peak)} {unit} of tensors, in the {m.peak_phase} phase"
              + (" (the highest rank's; phases below: the highest rank in each)" if m.per_rank else "") + "\n")
    for r in m.per_rank or ():
        per_phase = ", ".join(f"{name} {size(ph.peak)}" for name, ph in r.phases.items() if name != "load")
        out.write(f"rank {r.rank}: peak {size(r.peak)} {unit} in the {r.peak_phase} phase ({per_phase})\n")
    if m.reserved_peak is not None:
        out.write(f"reserved by the caching allocator: {size(m.reserved_peak)} {unit}\n")
    if m.process_bytes is not None:
        out.write(f"process memory (NVML, CUDA context included): {size(m.process_bytes)} {unit}\n")
    keys = ("parameters", "gradients", "optimizer_state", "activations_and_temporaries")
    if any("gradient_buckets" in ph.categories for ph in m.phases.values()):  # DDP's
        keys += ("gradient_buckets",)
    out.write(f"\n{'phase':<10} {'peak ' + unit:>9} {'end ' + unit:>9}  at its end ({unit}): "
              + " / ".join(k.replace("_", " ") for k in keys) + "\n")
    for name, ph in m.phases.items():
        c = ph.categories
        cats = " / ".join(size(c.get(k, 0)) for k in keys)
        out.write(f"{name:<10} {size(ph.peak):>9} {size(ph.end):>9}  {cats}\n")
    for n in m.notes:
        out.write(f"note: {n}\n")


def _catalog_cmd(query: str, as_json: bool, out) -> None:
    from vramwise.inputs.catalog import list_models

    models = list_models(query)
    if as_json:
        _print_json({"query": query, "models": [m.to_dict() for m in models]}, out)
        return
    if not models:
        out.write(f"no model of the catalog matches {query!r}\n")
        return
    width = min(max(len(m.id) for m in models), 52)
    fam = max(len(m.family) for m in models)
    out.write(f"{'model':<{width}}  {'family':<{fam}}  {'parameters':>11}  source\n")
    for m in models:
        also = f" (also: {', '.join(m.aliases)})" if m.aliases else ""
        kind = "hub config" if m.kind == "hub config" else "family example"
        out.write(f"{m.id:<{width}}  {m.family:<{fam}}  {_count(m.params):>11}  {kind}{also}\n")
    out.write(f"\n{len(models)} model(s); `vramwise estimate ID` reads these offline (--hub reads the hub instead)\n")


def _gpus(as_json: bool, out) -> None:
    from vramwise.gpus.discovery import discover_gpus

    disc = discover_gpus()
    if as_json:
        _print_json(disc.to_dict(), out)
        return
    if not disc.gpus:
        out.write(f"{disc.reason}\n")
        return
    out.write(f"{'id':>3}  {'name':<28} {'total GiB':>10} {'used GiB':>9} {'free GiB':>9}  visible\n")
    for g in disc.gpus:
        seen = "yes" if g.index in disc.visible else ("(by UUID/MIG)" if disc.uses_uuids else "no")
        out.write(f"{g.index:>3}  {g.name[:28]:<28} {_gib(g.total):>10} {_gib(g.used):>9} {_gib(g.free):>9}  {seen}\n")
    if disc.cuda_visible_devices is not None:
        out.write(f"CUDA_VISIBLE_DEVICES={disc.cuda_visible_devices}\n")
    if disc.reason:
        out.write(f"{disc.reason}\n")


def _select(args, out) -> None:
    from vramwise.answers.selection import select_gpus

    ids = None
    if args.gpu_ids is not None:
        try:
            ids = [int(x) for x in args.gpu_ids.split(",") if x.strip()]
        except ValueError:
            raise SettingsError(f"--gpu-ids must be comma-separated GPU ids, got {args.gpu_ids!r}") from None
    est, note = None, None
    if args.model is None and args.params is None and args.weight_bytes is None:
        note = "no MODEL given"  # the documented fallback of select_gpus(None): every visible GPU
    else:  # a model that cannot be estimated is bad input, not a reason to take every GPU
        est = _run_estimate(args)
    sel = select_gpus(est, gpu_ids=ids)
    if args.json:
        data = sel.to_dict()
        data["estimate_problem"] = note
        _print_json(data, out)
        return
    if est is not None:
        out.write(f"estimate: {_gib(est.total)} GiB total ({est.family}, {est.settings.method})\n")
    elif note:
        out.write(f"no estimate: {note}\n")
    out.write(f"mode: {sel.mode}\n")
    out.write(f"GPUs: {', '.join(str(i) for i in sel.gpu_ids) or '(none)'}\n")
    out.write(f"why: {sel.reason}\n")
    if sel.usable_bytes is not None:
        out.write(f"usable: {_gib(sel.usable_bytes)} GiB")
        if sel.min_per_gpu_bytes is not None:
            out.write(f", needed per GPU: {_gib(sel.min_per_gpu_bytes)} GiB")
        out.write("\n")
    for g in sel.gpus:
        out.write(f"  GPU {g.index} {g.name}: {_gib(g.free)} GiB free of {_gib(g.total)}\n")
    out.write(f"device_map: {sel.device_map}\n")
    if sel.cuda_visible_devices is not None:
        out.write(f"CUDA_VISIBLE_DEVICES={sel.cuda_visible_devices}\n")


def _check(args, out) -> int:
    from vramwise.core.check import check

    problems = check(args.files)
    for line in problems:
        out.write(line + "\n")
    if problems:
        return 1
    if not args.quiet:
        out.write(f"{len(args.files)} path(s) checked: no problems\n")
    return 0


# -- the parser -----------------------------------------------------------------------------

class _OldGpusFlag(argparse.Action):
    """``select --gpus``: physical ids are ``--gpu-ids`` now (``--gpus`` means GPU counts everywhere)."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise _UsageError(
            "select takes physical GPU ids as --gpu-ids (e.g. --gpu-ids 0,2); --gpus means a number of GPUs "
            "in the other commands", parser.prog)


def _sub(sub, name: str, help_text: str, description: str, example: str):
    return sub.add_parser(name, help=help_text, description=description,
                          epilog="example:\n  " + example.replace("\n", "\n  "),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    from vramwise import __version__

    parser = _Parser(
        prog="vramwise",
        description="Estimate the GPU memory of fine-tuning a model (QLoRA, LoRA, full) from its config.",
    )
    parser.add_argument("--version", action="version", version=f"vramwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = _sub(sub, "estimate", "memory breakdown of a training run", "Memory breakdown of a training run, in GiB.",
             "vramwise estimate examples/llama-3.1-8b.json --method lora --batch-size 8 --gpus 1,2\n"
             "vramwise estimate --params 8B --method full")
    _training_args(p)
    p.add_argument("--gpus", default="1,2,4,8", help="GPU counts for the per-GPU minimum (default: 1,2,4,8)")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="FILE",
                   help="also draw the components as a stacked bar to FILE (.png or .svg; needs vramwise[plot])")
    p = _sub(sub, "explain", "every formula behind an estimate, with file:line, inputs and result",
             "Every number behind an estimate: the facts of the config, the constants and tables the formulas read, "
             "and each formula with its file:line, inputs and result (bytes with GiB beside them). Formulas that do "
             "not apply to the method are hidden unless --all.",
             "vramwise explain examples/llama-3.1-8b.json --method full --all")
    _training_args(p)
    p.add_argument("--all", action="store_true", help="also show the formulas that do not apply to the method")
    p = _sub(sub, "fit", "what fits on a GPU: methods, largest batch/sequence/rank, fewest GPUs, frontier",
             "What fits on a GPU given by name (RTX 4090, H100, a100-40gb), by size (24GiB, 80GB) or 'local' (the "
             "visible GPUs): which methods fit at the settings, the largest batch size at the sequence length, the "
             "largest sequence length at the batch size, the largest LoRA rank, the fewest GPUs, and a frontier of "
             "the largest batch at each sequence length.",
             "vramwise fit examples/llama-3.1-8b.json --gpu 'RTX 4090'\n"
             "vramwise fit examples/llama-3.1-8b.json --gpu 24GiB --method lora --headroom 10% --seq-lens 1024,4096,16384")
    _training_args(p)
    p.add_argument("--gpu", required=True, help="a GPU name or alias (RTX 4090, H100, a100-40gb), a size (24GiB, 80GB) or local")
    p.add_argument("--gpus", type=int, default=None, help="how many GPUs of that kind (default: 1; local: the visible ones)")
    p.add_argument("--headroom", type=_share, default=0.0,
                   help="share of each GPU's memory kept free, e.g. 10%% or 0.1 (default: 0)")
    p.add_argument("--seq-lens", default=None, metavar="S[,S...]",
                   help="sequence lengths of the frontier (default: 16 powers of two from 128 to 4,194,304)")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="FILE",
                   help="also draw the frontier to FILE (.png or .svg; needs vramwise[plot])")
    p = _sub(sub, "compare", "methods and profiles side by side: one column each, rows per component",
             "Estimates side by side at the same settings: one column per profile and method, a row per component, "
             "the total and, with --gpu, whether each fits.",
             "vramwise compare examples/llama-3.1-8b.json --methods qlora,lora,full --profiles unsloth,hf --gpu H100")
    _training_args(p, skip=("method",))
    p.add_argument("--methods", default="qlora,lora,full", help="comma-separated methods (default: qlora,lora,full)")
    p.add_argument("--profiles", default=None, help="comma-separated profiles (default: the --profile one, unsloth)")
    p.add_argument("--gpu", default=None, help="also say whether each fits this GPU (a name, a size or local)")
    p.add_argument("--gpus", type=int, default=None, help="how many GPUs of that kind (default: 1)")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="FILE",
                   help="also draw stacked bars per column to FILE (.png or .svg; needs vramwise[plot])")
    p = _sub(sub, "sweep", "totals over a grid of settings, as a table, CSV or JSON",
             "Totals over every combination of the settings given as comma-separated lists (method, batch size, "
             "sequence length, LoRA rank, checkpointing, optimizer, attention, loss). Two lists print a 2-D table.",
             "vramwise sweep examples/llama-3.1-8b.json --batch-size 1,2,4,8 --seq-len 512,2048,8192\n"
             "vramwise sweep examples/llama-3.1-8b.json --method qlora,lora --lora-rank 8,64 --seq-len 1024,4096 --format csv")
    _training_args(p, lists=_SWEEP_LISTS, json_flag=False)
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format (default: table)")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="FILE",
                   help="also draw a heatmap to FILE (.png or .svg; needs vramwise[plot])")
    p = sub.add_parser("families", help="list families, their model types and files, and the profiles")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = _sub(sub, "measure", "run real training steps of a randomly initialised model and report its memory",
             "Build the model from its config with random weights, run optimizer steps on synthetic tokens and "
             "report the peak memory of each phase (needs pip install 'vramwise[measure]'). The defaults are "
             "estimate's where measure can run them: qlora, batch 4, seq 2048, rank 16, adamw_8bit; checkpointing "
             "true and sdpa attention stand for Unsloth's checkpointing and flash attention; with --fake, lora and "
             "adamw_torch stand for qlora and adamw_8bit. The settings it ran are printed.",
             "vramwise measure examples/llama-3.1-8b.json --fake --method lora --batch-size 1 --seq-len 512")
    p.add_argument("model", help="config.json, model folder, or hub id")
    p.add_argument("--method", default=None, choices=("qlora", "lora", "full"),
                   help="fine-tuning method (default: qlora; lora with --fake)")
    p.add_argument("--batch-size", type=int, default=None, help="batch size (default: 4)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (default: 2048)")
    p.add_argument("--lora-rank", type=int, default=None, help="LoRA rank (default: 16)")
    p.add_argument("--target-modules", default=None, help="comma-separated LoRA targets or all-linear (default: the seven projections)")
    p.add_argument("--gradient-checkpointing", default=None, metavar="{none,true}",
                   help="transformers' checkpointing (default: true)")
    p.add_argument("--attention", default=None, help="attention implementation: sdpa or eager (default: sdpa)")
    p.add_argument("--optimizer", default=None,
                   help="adamw_torch (foreach), adamw_torch_fused, adamw_8bit or sgd (default: adamw_8bit; adamw_torch with --fake)")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps to run (default: 2; the last one is reported)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to run (default: cpu)")
    p.add_argument("--lora-dropout", type=float, default=0.0, help="LoRA dropout probability (default: 0)")
    p.add_argument("--fake", action="store_true",
                   help="simulate the step with fake tensors on CPU: nothing is allocated, so large models fit (full and lora)")
    p.add_argument("--stack", default="hf", choices=STACKS,
                   help="whose model, loss and optimizer step run: hf (transformers + PEFT), or torchtune / litgpt "
                        "(pip install 'vramwise[torchtune]' or '[litgpt]') (default: hf)")
    p.add_argument("--loss", default="standard", choices=("standard", "chunked"),
                   help="the stack's cross-entropy: standard or chunked (torchtune, litgpt) (default: standard)")
    p.add_argument("--loss-chunks", type=int, default=8, help="chunks of a chunked loss (torchtune) (default: 8)")
    p.add_argument("--activation-offloading", type=_bool_flag, default=False, metavar="{true,false}",
                   help="torchtune's activation offloading (default: false)")
    p.add_argument("--optimizer-in-bwd", type=_bool_flag, default=False, metavar="{true,false}",
                   help="torchtune's optimizer step inside the backward pass (default: false)")
    p.add_argument("--strategy", default=None, choices=("ddp", "fsdp", "fsdp_shard_grad_op"),
                   help="run the step in --world-size CPU processes (gloo): DistributedDataParallel, or FSDP2 "
                        "fully_shard on each decoder layer and the root (fsdp_shard_grad_op: without resharding "
                        "after the forward); lora and adamw_torch by default (full too)")
    p.add_argument("--world-size", type=int, default=None,
                   help="processes of --strategy, 2 to 8 (default: 2); one line per rank is printed")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser("gpus", help="list the NVIDIA GPUs and their memory (or why none is visible)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = _sub(sub, "catalog", "list the bundled model catalog (estimates of these need no network)",
             "The offline model catalog: well-known checkpoints whose configs ship with vramwise, so `vramwise "
             "estimate ID` needs no network. QUERY keeps the entries whose id, aliases, family or model type "
             "contain every word of it (case-insensitive).",
             "vramwise catalog llama\nvramwise catalog qwen3 moe --json")
    p.add_argument("query", nargs="*", metavar="QUERY", help="words to search for (default: list everything)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = _sub(sub, "serve", "a local web page and JSON API (needs vramwise[serve])",
             "Serve the web page (choose a model, settings and a GPU; charts update as you type) and the JSON API "
             "(/api/estimate, /api/explain, /api/compare, /api/fit, /api/families, /api/gpus, /api/catalog). It "
             "listens on loopback unless --host says otherwise; it reads no files and fetches no models for a "
             "request: models come from the catalog or an uploaded config.json.",
             "vramwise serve\nvramwise serve --port 8080 --open")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p = _sub(sub, "select", "choose GPUs for a run: which, why, device_map and CUDA_VISIBLE_DEVICES",
             "Choose the GPUs of this machine for a run: which, why, the device_map and CUDA_VISIBLE_DEVICES.",
             "vramwise select examples/llama-3.1-8b.json --method lora --gpu-ids 0,2")
    _training_args(p)
    p.add_argument("--gpu-ids", default=None, help="explicit physical GPU ids, e.g. 0,2 (default: choose automatically)")
    p.add_argument("--gpus", action=_OldGpusFlag, help=argparse.SUPPRESS)
    p = sub.add_parser(
        "check", help="validate family and formula files: schema, expressions, references, examples",
        description="Validate family files (with the bundled families; a file of the same name replaces the bundled "
        "one) and profiles (a profile folder, its profile.yaml or one of its formula files: the whole folder is "
        "checked). Prints file:line:col: message per problem; exit 0 when all are fine, 1 otherwise.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="a family .yaml, a profile folder, or a file of one")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing when every file is fine")
    return parser


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) or "(no message)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module's docstring). Never raises."""
    try:
        return _main(argv)
    except _UsageError as e:
        sys.stderr.write(f"vramwise: error: {_one_line(e)}\n")
        sys.stderr.write(f"run '{e.prog} --help' for usage\n")
        return EXIT_USAGE
    except SystemExit as e:  # --help and --version print and exit 0
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
    except _INTERNAL as e:
        sys.stderr.write(f"vramwise: internal error: {type(e).__name__}: {_one_line(e)[:2000]}\n")
        return EXIT_INTERNAL
    except VramwiseError as e:
        problems = getattr(e, "problems", None)
        msg = "\n".join(problems) if problems else _one_line(e)
        sys.stderr.write(f"vramwise: error: {msg}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # output piped into head and closed early
        try:  # Python's advice: point stdout at devnull so the final flush does not fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except Exception:  # noqa: BLE001 - a captured stdout has no descriptor: nothing to quiet
            pass
        return 0
    except Exception as e:  # noqa: BLE001 - the boundary: a bug is reported in one line, never hidden
        if os.environ.get("VRAMWISE_DEBUG"):
            raise
        sys.stderr.write(
            f"vramwise: internal error: {type(e).__name__}: {_one_line(e)[:500]} "
            f"(a bug; please report it; VRAMWISE_DEBUG=1 shows the traceback)\n"
        )
        return EXIT_INTERNAL


def _list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [x.strip() for x in text.split(",") if x.strip()]


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = sys.stdout
    cmd = args.command
    try:
        return _dispatch(cmd, args, out)
    except _Bad as e:
        raise _UsageError(str(e), f"vramwise {cmd}") from None


def _dispatch(cmd: str, args, out) -> int:
    if cmd == "families":
        _families(args.json, out)
        return 0
    if cmd == "check":
        return _check(args, out)
    if cmd == "measure":
        _measure(args, out)
        return 0
    if cmd == "gpus":
        _gpus(args.json, out)
        return 0
    if cmd == "catalog":
        _catalog_cmd(" ".join(args.query), args.json, out)
        return 0
    if cmd == "serve":
        from vramwise.surfaces.serve import serve

        if not 0 <= args.port <= 65535:
            raise _Bad(f"--port must be from 0 to 65,535, got {args.port}")
        return serve(host=args.host, port=args.port, open_browser=args.open, err=sys.stderr)
    if cmd == "select":
        _select(args, out)
        return 0
    if cmd == "fit":
        return _fit_cmd(args, out)
    if cmd == "compare":
        return _compare_cmd(args, out)
    if cmd == "sweep":
        return _sweep_cmd(args, out)
    if cmd == "estimate":  # the GPU counts are arguments: checked before any work
        gpus = _int_list("--gpus", args.gpus, 1, _MAX_GPU_COUNT)
    est = _run_estimate(args)
    label = _label(args)
    if cmd == "explain":
        note = None if args.json else _other_profile_note(est, args.model, args.trust_remote_code)
        _print_trace(est, label, args.json, out, show_all=args.all, note=note)
        return 0
    if args.json:
        _print_json(_estimate_json(est, gpus), out)
    else:
        note = _other_profile_note(est, args.model, args.trust_remote_code)
        _print_table(est, label, gpus, out, note=note)
    _plot("estimate", est, args.plot, sys.stderr)
    return 0


def _fit_cmd(args, out) -> int:
    from vramwise.answers.fit import fit

    seq_lens = _int_list("--seq-lens", args.seq_lens, 1) if args.seq_lens is not None else None
    if args.gpus is not None and not 1 <= args.gpus <= 1024:
        raise _Bad(f"--gpus must be a number of GPUs from 1 to 1,024, got {args.gpus}")
    model, profile, label, size_only = _model_of(args)
    settings = _settings_of(args)
    if size_only:
        settings["target_modules"] = None
    f = fit(model, gpu=args.gpu, gpus=args.gpus, headroom=args.headroom, seq_lens=seq_lens, profile=profile,
            trust_remote_code=args.trust_remote_code, **settings)
    if args.json:
        _print_json(f.to_dict(), out)
    else:
        _print_fit(f, label, out, args.gpu)
    _plot("fit", f, args.plot, sys.stderr)
    return 0


def _compare_cmd(args, out) -> int:
    from vramwise.answers.fit import compare

    methods = _list(args.methods)
    if not methods:
        raise _Bad(f"--methods needs at least one method, got {args.methods!r}")
    if args.gpus is not None and args.gpu is None:
        raise _Bad("--gpus needs --gpu (the kind of GPU to count)")
    if args.gpus is not None and not 1 <= args.gpus <= 1024:
        raise _Bad(f"--gpus must be a number of GPUs from 1 to 1,024, got {args.gpus}")
    model, profile, label, size_only = _model_of(args)
    profiles = _list(args.profiles) if args.profiles is not None else [profile]
    if not profiles:
        raise _Bad(f"--profiles needs at least one profile, got {args.profiles!r}")
    if size_only:
        profiles = ["size_only"]
    settings = _settings_of(args, skip=("method",))
    if size_only:
        settings["target_modules"] = None
    c = compare(model, methods=list(dict.fromkeys(methods)), profiles=list(dict.fromkeys(profiles)), gpu=args.gpu,
                gpus=args.gpus, trust_remote_code=args.trust_remote_code, **settings)
    if args.json:
        _print_json(c.to_dict(), out)
    else:
        _print_compare(c, label, {**settings}, out)
    _plot("compare", c, args.plot, sys.stderr)
    return 0


def _sweep_cmd(args, out) -> int:
    from vramwise.answers.fit import sweep

    fmt = "json" if args.json else args.format
    model, profile, label, size_only = _model_of(args)
    settings = _sweep_settings(args)
    if size_only:
        settings["target_modules"] = None
    sw = sweep(model, profile=profile, trust_remote_code=args.trust_remote_code, **settings)
    if fmt == "json":
        _print_json(sw.to_dict(), out)
    else:
        _print_sweep(sw, label, profile, settings, fmt, out)
    _plot("sweep", sw, args.plot, sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
