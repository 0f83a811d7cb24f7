"""Command line: ``vramwise estimate|explain|families|measure|gpus|select|check``.

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
import json
import math
import os
import sys
from typing import Sequence

from . import _errors
from ._errors import SettingsError, VramwiseError
from ._estimate import COMPONENTS, Estimate, estimate, estimate_from_size
from ._registry import Registry
from ._settings import SETTINGS
from ._source import checkpoint_size, local_kind

#: exit code of an unexpected exception (sysexits' EX_SOFTWARE): a bug, never bad input
EXIT_INTERNAL = 70
EXIT_USAGE = 2
# a result that broke an invariant is a bug too (the class exists where the result checks do)
_INTERNAL = tuple(c for c in (getattr(_errors, "InternalError", None),) if isinstance(c, type))
_MAX_GPU_COUNT = 1 << 20


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


_CLI_TYPES = {"int": int, "float": _finite, "bool": _bool_flag, "str": str}


def _training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", nargs="?", default=None,
        help="config.json, model folder, or hub id (read from the local cache when offline); "
        "optional with --params or --weight-bytes",
    )
    p.add_argument("--params", type=_finite, default=None, help="no config: estimate from a parameter count alone (e.g. 8e9)")
    p.add_argument("--weight-bytes", type=_finite, default=None, help="no config: estimate from the weights' size in bytes")
    for s in SETTINGS:  # one option per training setting, named, typed and defaulted by the settings table
        default = s.default if s.default is not None else "unset"
        kwargs = {"default": s.default, "type": _CLI_TYPES[s.cli_type], "help": f"{s.help} (default: {default})"}
        if s.choices:
            kwargs["metavar"] = "{" + ",".join(s.choices) + "}"
        elif s.cli_type == "bool":
            kwargs["metavar"] = "{true,false}"
        p.add_argument(s.flag, **kwargs)
    p.add_argument("--profile", default="unsloth",
                   help="memory profile: unsloth (Unsloth's calibrated model) or hf (plain transformers + PEFT, phase by phase) (default: unsloth)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub config's remote code to run (off by default)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _settings_of(args) -> dict:
    return {s.name: getattr(args, s.name) for s in SETTINGS}


def _run_estimate(args) -> Estimate:
    model, params, weight_bytes = args.model, args.params, args.weight_bytes
    size_only = params is not None or weight_bytes is not None
    if model is None and not size_only:
        raise SettingsError("give a MODEL (config.json, folder or hub id), or --params / --weight-bytes")
    if model is not None and size_only:
        raise SettingsError("give either a MODEL or --params / --weight-bytes, not both")
    if model is not None and local_kind(model) == "dir" and local_kind(os.path.join(model, "config.json")) is None:
        size, _ = checkpoint_size(model)
        if size is not None:  # weight files without a config: the size-only fallback
            model, weight_bytes, size_only = None, size, True
    settings = _settings_of(args)
    if size_only:
        settings.pop("target_modules")
        return estimate_from_size(
            params=params, weight_bytes=int(weight_bytes) if weight_bytes is not None else None, **settings
        )
    return estimate(args.model, profile=args.profile, trust_remote_code=args.trust_remote_code, **settings)


def _print_table(est: Estimate, model: str, gpus: Sequence[int], out) -> None:
    s = est.settings
    out.write(f"{model}\n")
    out.write(
        f"family {est.family} ({est.model_type}), profile {est.profile}; {s.method}, batch {s.batch_size}, "
        f"seq {s.seq_len}, rank {s.lora_rank}, checkpointing {s.gradient_checkpointing}, {s.optimizer}, {s.attention}\n"
    )
    out.write(f"parameters: {_count(est.params_total)} total, {_count(est.params_trainable)} trainable\n\n")
    rows = [(c, getattr(est, c)) for c in COMPONENTS]
    width = max(len(c) for c, _ in rows + [("total", 0)])
    out.write(f"{'component':<{width}}  {'GiB':>9}  {'share':>7}\n")
    for name, value in rows:
        share = 100.0 * value / est.total if est.total else 0.0
        out.write(f"{name:<{width}}  {_gib(value):>9}  {share:>6.1f}%\n")
    out.write(f"{'total':<{width}}  {_gib(est.total):>9}  {100.0:>6.1f}%\n\n")
    if est.phases:
        out.write("phases (tensor bytes at each peak): " + ", ".join(
            f"{k} {_gib(v)} GiB" for k, v in est.phases.items()) + f"; the peak is in the {est.peak_phase} phase\n")
    for line in est.report_lines(_gib):
        out.write(line + "\n")
    out.write("minimum per GPU: " + ", ".join(f"{n} x {_gib(est.min_per_gpu(n))} GiB" for n in gpus) + "\n")
    for w in est.warnings:
        out.write(f"warning: {w}\n")


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _print_trace(est: Estimate, model: str, as_json: bool, out) -> None:
    if as_json:
        _print_json(
            {
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
            },
            out,
        )
        return
    out.write(f"{model}: family {est.family}, profile {est.profile}\n")
    titles = {"fact": "facts of the config", "attribute": "layer attributes", "constant": "constants",
              "table": "table entries", "inventory": "inventory totals"}
    current = None
    for p in est.provenance:
        if p.kind != current:
            current = p.kind
            out.write(f"\n[{titles[p.kind]}]\n")
        layers = f" (layers {_ranges(p.layer_indices)})" if p.layer_indices is not None else ""
        unit = f" {p.unit}" if p.unit else ""
        out.write(f"{p.name} = {_short(p.value)}{unit}{layers}  {p.how}  {p.location()}\n")
    current = None
    for t in est.trace:
        if t.component != current:
            current = t.component
            out.write(f"\n[{current}]\n")
        layers = f"  (layers {_ranges(t.layer_indices)})" if t.layer_indices is not None else ""
        out.write(f"{t.id}  {t.location()}{layers}\n")
        out.write(f"    {t.expression}\n")
        if t.inputs:
            shown = ", ".join(f"{k}={_short(v)}" for k, v in t.inputs.items())
            out.write(f"    with {shown}\n")
        out.write(f"    = {_short(t.value)} {t.unit}\n")
    for w in est.warnings:
        out.write(f"warning: {w}\n")


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
    if isinstance(v, float):
        return f"{v:.6g}" if not v.is_integer() else f"{int(v)}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_short(x) for x in v) + ")"
    return repr(v) if isinstance(v, str) else str(v)


def _families(as_json: bool, out) -> None:
    reg = Registry.default()
    rows = [
        {"family": f.name, "model_types": list(f.model_types), "file": f.file, "extends": f.parents[0] if f.parents else None,
         "fallback": f.fallback}
        for f in sorted(reg.families.values(), key=lambda f: f.name) if not f.abstract
    ]
    if as_json:
        _print_json({"families": rows, "profiles": reg.profile_names()}, out)
        return
    width = max(len(r["family"]) for r in rows)
    for r in rows:
        types = ", ".join(r["model_types"]) or (
            "(fallback for unknown model types)" if r["fallback"] else "(used by name, not by model type)")
        ext = f"  extends {r['extends']}" if r["extends"] else ""
        out.write(f"{r['family']:<{width}}  {types}  [{r['file']}]{ext}\n")
    out.write(f"\nprofiles: {', '.join(reg.profile_names())}\n")


def _measure(args, out) -> None:
    import warnings

    from ._measure import measure

    with warnings.catch_warnings():  # deprecation notices of the libraries measured are not the user's concern
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        m = measure(
            args.model, method=args.method, batch_size=args.batch_size, seq_len=args.seq_len, lora_rank=args.lora_rank,
            target_modules=args.target_modules, gradient_checkpointing=args.gradient_checkpointing,
            attention=args.attention, optimizer=args.optimizer, steps=args.steps, device=args.device, fake=args.fake,
            lora_dropout=args.lora_dropout,
        )
    if args.json:
        _print_json(m.to_dict(), out)
        return
    unit, scale = ("GiB", 2**30) if m.peak >= 2**30 else ("MiB", 2**20)

    def size(n: int) -> str:
        return f"{n / scale:,.2f}"

    out.write(f"{args.model}: {m.method} on {m.device}, {_count(m.params_total)} parameters, {_count(m.params_trainable)} trainable\n")
    out.write(f"peak: {size(m.peak)} {unit} of tensors, in the {m.peak_phase} phase\n")
    if m.reserved_peak is not None:
        out.write(f"reserved by the caching allocator: {size(m.reserved_peak)} {unit}\n")
    if m.process_bytes is not None:
        out.write(f"process memory (NVML, CUDA context included): {size(m.process_bytes)} {unit}\n")
    out.write(f"\n{'phase':<10} {'peak ' + unit:>9} {'end ' + unit:>9}  at its end ({unit}): parameters / gradients / optimizer state / activations and temporaries\n")
    for name, ph in m.phases.items():
        c = ph.categories
        cats = " / ".join(size(c.get(k, 0)) for k in ("parameters", "gradients", "optimizer_state", "activations_and_temporaries"))
        out.write(f"{name:<10} {size(ph.peak):>9} {size(ph.end):>9}  {cats}\n")
    for n in m.notes:
        out.write(f"note: {n}\n")


def _gpus(as_json: bool, out) -> None:
    from ._gpus import discover_gpus

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
    from ._gpus import select_gpus

    ids = None
    if args.gpus is not None:
        try:
            ids = [int(x) for x in args.gpus.split(",") if x.strip()]
        except ValueError:
            raise SettingsError(f"--gpus must be comma-separated GPU ids, got {args.gpus!r}") from None
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
    from ._check import check

    problems = check(args.files)
    for line in problems:
        out.write(line + "\n")
    if problems:
        return 1
    if not args.quiet:
        out.write(f"{len(args.files)} path(s) checked: no problems\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(
        prog="vramwise",
        description="Estimate the GPU memory of fine-tuning a model (QLoRA, LoRA, full) from its config.",
    )
    parser.add_argument("--version", action="version", version=f"vramwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("estimate", help="memory breakdown of a training run", description="Memory breakdown of a training run, in GiB.")
    _training_args(p)
    p.add_argument("--gpus", default="1,2,4,8", help="GPU counts for the per-GPU minimum (default: 1,2,4,8)")
    p = sub.add_parser("explain", help="every formula behind an estimate, with file:line, inputs and result")
    _training_args(p)
    p = sub.add_parser("families", help="list families, their model types and files")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser(
        "measure", help="run real training steps of a randomly initialised model and report its memory",
        description="Build the model from its config with random weights, run optimizer steps on synthetic "
        "tokens and report the peak memory of each phase (needs pip install 'vramwise[measure]').",
    )
    p.add_argument("model", help="config.json, model folder, or hub id")
    p.add_argument("--method", default="lora", choices=("qlora", "lora", "full"), help="fine-tuning method (default: lora)")
    p.add_argument("--batch-size", type=int, default=1, help="batch size (default: 1)")
    p.add_argument("--seq-len", type=int, default=128, help="sequence length (default: 128)")
    p.add_argument("--lora-rank", type=int, default=16, help="LoRA rank (default: 16)")
    p.add_argument("--target-modules", default=None, help="comma-separated LoRA targets or all-linear (default: the seven projections)")
    p.add_argument("--gradient-checkpointing", default="none", metavar="{none,true}", help="transformers' checkpointing (default: none)")
    p.add_argument("--attention", default="sdpa", help="attention implementation: sdpa or eager (default: sdpa)")
    p.add_argument("--optimizer", default="adamw_torch", help="adamw_torch (foreach), adamw_torch_fused, adamw_8bit or sgd (default: adamw_torch)")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps to run (default: 2; the last one is reported)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to run (default: cpu)")
    p.add_argument("--lora-dropout", type=float, default=0.0, help="LoRA dropout probability (default: 0)")
    p.add_argument("--fake", action="store_true",
                   help="simulate the step with fake tensors on CPU: nothing is allocated, so large models fit (full and lora)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser("gpus", help="list the NVIDIA GPUs and their memory (or why none is visible)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser("select", help="choose GPUs for a run: which, why, device_map and CUDA_VISIBLE_DEVICES")
    _training_args(p)
    p.add_argument("--gpus", default=None, help="explicit physical GPU ids, e.g. 0,2 (default: choose automatically)")
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


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = sys.stdout
    if args.command == "families":
        _families(args.json, out)
        return 0
    if args.command == "check":
        return _check(args, out)
    if args.command == "measure":
        _measure(args, out)
        return 0
    if args.command == "gpus":
        _gpus(args.json, out)
        return 0
    if args.command == "select":
        _select(args, out)
        return 0
    if args.command == "estimate":  # the GPU counts are arguments: checked before any work
        try:
            gpus = [int(x) for x in args.gpus.split(",") if x.strip()]
        except ValueError:
            gpus = []
        if not gpus or min(gpus) < 1 or max(gpus) > _MAX_GPU_COUNT:
            raise _UsageError(f"--gpus must be comma-separated integers from 1 to {_MAX_GPU_COUNT}, got {args.gpus!r}",
                              "vramwise estimate")
    est = _run_estimate(args)
    if args.command == "explain":
        _print_trace(est, args.model, args.json, out)
        return 0
    if args.json:
        data = est.to_dict()
        data["min_per_gpu"] = {str(n): est.min_per_gpu(n) for n in gpus}
        _print_json(data, out)
    else:
        _print_table(est, args.model, gpus, out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
