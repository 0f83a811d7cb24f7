"""Quantized checkpoints: the bytes each module stores, by the formats of ``formulas/checkpoint_formats.yaml``.

A config's ``quantization_config`` selects a format (its ``quant_method``, then the format's
condition); the format reads its parameters from that config, names the modules it quantizes
(the decoder layers' linear layers, the fused experts, the output head) and those the checkpoint
leaves in 16 bit (its skip lists, matched as :mod:`vramwise.models.skiplists` matches them), and
gives the bytes of every tensor a quantized module stores as expressions of the module's shape.
:func:`checkpoint_storage` sums them over a resolved model; each distinct shape is evaluated once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from vramwise.errors import ConfigError, EvaluationError
from vramwise.rules.expr.language import Expression, compile_expression
from vramwise.models.model import module_groups
from vramwise.models.skiplists import read_skip_list, skipped_copies

__all__ = ["CheckpointStorage", "CheckpointFormat", "checkpoint_storage", "formats", "FORMATS_PATH"]

#: Display path of the bundled formats file.
FORMATS_PATH = "formulas/checkpoint_formats.yaml"
_SHAPE_NAMES = ("in_features", "out_features", "bias")
_TYPES = {"int": (int,), "number": (int, float), "bool": (bool,), "string": (str,), "list": (list,)}


@dataclass(frozen=True)
class CheckpointFormat:
    id: str
    quant_method: str
    when: Expression | None
    parameters: Mapping[str, Mapping[str, Any]]
    skip_keys: tuple
    default_skip: tuple
    modules: frozenset
    tensors: tuple  # ((name, Expression), ...)
    where: str  # file:line of the entry


@dataclass(frozen=True)
class CheckpointStorage:
    """What a quantized checkpoint stores: its format, the parameters of the modules it quantizes
    (weights and their biases) and the bytes those modules take, their output head's share apart."""

    format: str
    quantized_params: int
    quantized_bytes: int
    head_params: int  # parameters of the output head among quantized_params
    head_bytes: int


@lru_cache(maxsize=1)
def formats() -> tuple:
    """The bundled formats, compiled (``formats.cache_clear()`` forgets them)."""
    from vramwise.rules.datafiles import load_data_file, package_files, read_data_text

    item = package_files("vramwise.formulas").joinpath("checkpoint_formats.yaml")
    return compile_formats(load_data_file(read_data_text(item, FORMATS_PATH), FORMATS_PATH,
                                          "checkpoint-formats-1.schema.json", validate=False))


def compile_formats(df) -> tuple:
    """The formats of a loaded checkpoint-formats file, their expressions checked and compiled (an
    :class:`~vramwise.errors.ExpressionError` names the file, line and node)."""
    out = []
    for k, entry in enumerate(df.data["formats"]):
        params = dict(entry.get("parameters", {}))
        allowed = frozenset(_SHAPE_NAMES) | frozenset(params)
        when = entry.get("when")
        out.append(CheckpointFormat(
            id=entry["id"], quant_method=entry["quant_method"],
            when=None if when is None else compile_expression(when, allowed=frozenset(params), df=df,
                                                             parts=("formats", k, "when")),
            parameters=params, skip_keys=tuple(entry.get("skip_keys", ())),
            default_skip=tuple(entry.get("default_skip", ())), modules=frozenset(entry["modules"]),
            tensors=tuple((name, compile_expression(expr, allowed=allowed, df=df, parts=("formats", k, "tensors", name)))
                          for name, expr in entry["tensors"].items()),
            where=df.where(("formats", k)),
        ))
    return tuple(out)


def _read(config: Mapping, name: str, rule: Mapping) -> Any:
    value: Any = config
    for key in rule["path"]:
        if key == "*" and isinstance(value, Mapping):
            value = next(iter(value.values()), None)
        elif isinstance(key, int) and isinstance(value, list):
            value = value[key] if -len(value) <= key < len(value) else None
        elif isinstance(key, str) and isinstance(value, Mapping):
            value = value.get(key)
        else:
            value = None
        if value is None:
            break
    if value is None:
        return rule.get("default")
    kinds = _TYPES.get(rule.get("type", ""), None)
    bad_number = isinstance(value, (int, float)) and not isinstance(value, bool) and not -1 <= value <= 2**24
    if bad_number or (kinds is not None and (not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)))):
        where = ".".join(str(k) for k in rule["path"])
        kind = "a number from -1 to 16,777,216" if bad_number else rule.get("type", "a value")
        raise ConfigError(f"quantization_config.{where} should be {kind}, got {str(value)[:60]!r} "
                          f"(the value the {name} of the checkpoint format is read from)")
    return value


def select_format(config: Mapping) -> tuple[CheckpointFormat | None, dict]:
    """The format a quantization_config selects and the values it reads (None: no format has it)."""
    method = config.get("quant_method")
    for fmt in formats():
        if fmt.quant_method != method:
            continue
        values = {name: _read(config, name, rule) for name, rule in fmt.parameters.items()}
        if fmt.when is None or fmt.when.evaluate(values):
            return fmt, values
    return None, {}


def _skip_entries(fmt: CheckpointFormat, config: Mapping) -> list:
    entries: list = []
    found = False
    for key in fmt.skip_keys:
        v = config.get(key)
        if isinstance(v, list):
            found = True
            entries += [e for e in v if isinstance(e, str) and e]
        elif isinstance(v, str) and v:
            found = True
            entries.append(v)
    return entries if found else list(fmt.default_skip)


def _expert_projections(m) -> list:
    """The (out_features, in_features) of each projection one expert of a fused expert tensor stores:
    checkpoints keep an expert's gate_proj, up_proj and down_proj as separate linear modules, and some
    models hold the fused tensor as [E, in, out] (Llama 4, gpt-oss), so the shapes come from the module's
    per-expert LoRA targets when they cover the tensor, else from [E, out, in]."""
    experts, rows, cols = m.shape
    parts = [(out_f, in_f) for _, in_f, out_f, count, _ in m.lora_parts if count == experts]
    if parts and sum(o * i for o, i in parts) == rows * cols:
        return parts
    return [(rows, cols)]


def checkpoint_storage(config: Any, classes: tuple, model_mods: tuple, roots: tuple,
                       warnings: list, skip_lists: dict | None = None) -> CheckpointStorage | None:
    """The bytes a quantized checkpoint stores for the modules its format quantizes (None when the
    config has no quantization_config, or one no format describes: then a warning says so;
    ``skip_lists``: the skip lists read for this model so far, shared with its inventory)."""
    if not isinstance(config, Mapping) or not isinstance(config.get("quant_method"), str):
        return None
    fmt, values = select_format(config)
    if fmt is None:
        warnings.append(f"the checkpoint's quantization ({str(config.get('quant_method'))[:40]}) has no layout in "
                        f"{FORMATS_PATH}: a serving estimate counts its weights in 16 bit")
        return None
    skip = read_skip_list(_skip_entries(fmt, config), roots, skip_lists)
    memo: dict = {}
    params = total = head_params = head_bytes = 0
    for count, indices, mods, skipped in skipped_copies(module_groups(model_mods, classes), skip, roots):
        for m, skipped_m in zip(mods, skipped):
            if indices is None:
                role = "head" if m.kind == "linear" and m.group == "lm_head" else None
            elif m.kind == "linear" and m.group not in ("router", "lm_head") and m.quantizable:
                role = "layer_linear"
            elif m.kind == "parameter" and m.group == "experts" and len(m.shape) == 3 and m.quantizable:
                role = "experts"
            else:
                role = None
            if role is None or role not in fmt.modules:
                continue
            copies = count * m.repeat - skipped_m
            if copies <= 0:
                continue
            if role == "experts":
                copies *= m.shape[0]
                shapes = [(out_f, in_f, False) for out_f, in_f in _expert_projections(m)]
            else:
                shapes = [(m.shape[0], m.shape[-1], m.bias)]
            for out_f, in_f, bias in shapes:
                key = (out_f, in_f, bias)
                each = memo.get(key)
                if each is None:
                    env = {**values, "in_features": in_f, "out_features": out_f, "bias": bias}
                    try:
                        each = memo[key] = sum(int(t.evaluate(env)) for _, t in fmt.tensors)
                    except (EvaluationError, TypeError, ValueError, ArithmeticError) as e:
                        raise ConfigError(f"the checkpoint format {fmt.id} ({fmt.where}) cannot size module "
                                          f"{m.name} ({out_f} x {in_f}) from the quantization_config: {e}") from None
                    if each < 0:
                        raise ConfigError(f"the checkpoint format {fmt.id} ({fmt.where}) gives module {m.name} "
                                          f"({out_f} x {in_f}) {each:,} bytes from the quantization_config's values")
                n = copies * (out_f * in_f + (out_f if bias else 0))
                params += n
                total += copies * each
                if role == "head":
                    head_params += n
                    head_bytes += copies * each
    return CheckpointStorage(fmt.id, params, total, head_params, head_bytes)

