"""LoRA adapters on a resolved model, under the two conventions a profile may follow.

- **unsloth** (:func:`unsloth_sums`): a linear module named in the targets gets one adapter of its
  whole shape; otherwise each listed part of a module (a fused projection's q/k/v, each routed
  expert's gate/up/down) whose target is named gets its own.
- **peft** (:func:`peft_sums`): PEFT's own rule: a target matches a linear module whose path ends in
  that name, and targets the family maps for a model type move onto the parameters they name.

Both give a :class:`LoraSums`, the sums the formula files read (:data:`LORA_NAMES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

__all__ = ["LoraSums", "NO_ADAPTERS", "LORA_NAMES", "unsloth_sums", "peft_sums"]

#: Formula names of the LoRA sums (see :meth:`LoraSums.formula_names`).
LORA_NAMES = ("lora_io", "lora_inputs", "lora_adapters", "lora_merged_params", "lora_quantizable_params",
              "lora_distinct_inputs", "lora_attention_feed_adapters", "lora_attention_adapters")

#: The ``input`` a family gives the attention's output projection: adapters there do not feed the attention.
ATTENTION_OUTPUT = "attention_output"


@dataclass(frozen=True)
class LoraSums:
    """What a set of LoRA targets puts on a model (see ModelSpec.lora_sums)."""

    io: int  # sum over adapters of in + out features
    inputs: int  # sum over adapters of in features
    adapters: int  # number of adapters
    matched: frozenset  # the targets that matched a module
    merged_params: int = 0  # weights of parameters carrying an adapter (PEFT merges them in the forward)
    quantizable_params: int = 0  # quantizable weights of the linear modules (or fused parts) carrying an adapter
    distinct_inputs: int = 0  # sum of in features over the distinct tensors the adapted modules read (see _Reads)
    attention_feed_adapters: int = 0  # adapters on the attention's modules but its output projection
    attention_adapters: int = 0  # adapters on the attention's modules, its output projection included

    def formula_names(self) -> dict:
        """The sums as formula inputs (see :data:`LORA_NAMES`)."""
        return dict(zip(LORA_NAMES, (self.io, self.inputs, self.adapters, self.merged_params, self.quantizable_params,
                                     self.distinct_inputs, self.attention_feed_adapters,
                                     self.attention_adapters)))


class _AttentionAdapters:
    """Adapters on the attention's modules: ``all`` of them, and those that ``feed`` the attention, every one
    but the output projection's (the module whose ``input`` is :data:`ATTENTION_OUTPUT`): q, k, v, a fused
    qkv, MLA's latent projections, whose outputs need a gradient, so the attention keeps its tensors for
    the backward."""

    def __init__(self):
        self.all = self.feed = 0

    def add(self, module, n: int) -> None:
        if module.group == "attention":
            self.all += n
            self.feed += n if module.input != ATTENTION_OUTPUT else 0


class _Reads:
    """The distinct tensors the adapted modules of one group of layers read: modules naming the same ``input``
    (q, k and v read the attention's input) count it once; a module without one reads its own."""

    def __init__(self):
        self.total = 0
        self._seen: set = set()

    def add(self, module, count: int, copies: int, width: int, part: str = "") -> None:
        key = module.input if module.input is not None else (module.path, part)
        if key not in self._seen:
            self._seen.add(key)
            self.total += count * copies * width


#: No adapters (full fine-tuning, inference, the size-only fallback).
NO_ADAPTERS = LoraSums(0, 0, 0, frozenset())


def unsloth_sums(groups: Iterable[tuple], targets: frozenset, explicit: frozenset = frozenset()) -> LoraSums:
    """The adapters ``targets`` put on the modules of ``groups`` ((copies, indices, modules) of a model):
    sum of in + out features, sum of in features, number of adapters, and the targets that matched.

    A linear module named in ``targets`` gets one adapter sized by its whole shape; otherwise
    every listed part (a fused projection's q/k/v, each routed expert's gate/up/down) whose
    target is named gets its own. Parts marked explicit-only count only for names in
    ``explicit`` (named by the user, not brought in by a keyword such as all-linear).
    """
    io = ins = n_adapters = quantizable = distinct = 0
    attention = _AttentionAdapters()
    matched: set[str] = set()
    for count, _, mods in groups:
        reads = _Reads()
        for m in mods:
            if m.kind == "linear" and m.name in targets:
                io += count * m.repeat * (m.in_features + m.out_features)
                ins += count * m.repeat * m.in_features
                n_adapters += count * m.repeat
                attention.add(m, count * m.repeat)
                quantizable += count * m.weight_params if m.quantizable else 0
                reads.add(m, count, m.repeat, m.in_features)
                matched.add(m.name)
                continue
            for target, fin, fout, n, explicit_only in m.lora_parts:
                if target in (explicit if explicit_only else targets):
                    io += count * n * (fin + fout)
                    ins += count * n * fin
                    n_adapters += count * n
                    attention.add(m, count * n)
                    quantizable += count * n * fin * fout if m.quantizable else 0
                    reads.add(m, count, n, fin, target)
                    matched.add(target)
        distinct += reads.total
    return LoraSums(io, ins, n_adapters, frozenset(matched), 0, quantizable, distinct, attention.feed,
                    attention.all)


def peft_sums(groups: Iterable[tuple], target_parameters: Mapping[str, str], targets: frozenset) -> LoraSums:
    """The adapters PEFT itself puts on the modules of ``groups`` for ``targets``.

    A target matches a linear module whose path ends in that name (PEFT's suffix rule), so
    a fused projection does not answer to the names of its parts. Targets that
    ``target_parameters`` (the family's PEFT rule for the model type) maps are moved to the
    parameters they name: an adapter of rank r x (targets fused there) on each matching parameter,
    r x E x (in + out) for an (E, out, in) expert tensor; those names then no longer match modules.
    """
    module_targets = {t for t in targets if t not in target_parameters}
    fused: dict[str, list[str]] = {}
    for t in sorted(targets):
        if t in target_parameters:
            fused.setdefault(target_parameters[t], []).append(t)
    io = ins = n_adapters = merged = quantizable = distinct = 0
    attention = _AttentionAdapters()
    matched: set[str] = set()
    for count, _, mods in groups:
        reads = _Reads()
        for m in mods:
            leaf = m.path.rsplit(".", 1)[-1]
            if m.kind == "linear" and leaf in module_targets:
                io += count * m.repeat * (m.in_features + m.out_features)
                ins += count * m.repeat * m.in_features
                n_adapters += count * m.repeat
                attention.add(m, count * m.repeat)
                quantizable += count * m.weight_params if m.quantizable else 0
                reads.add(m, count, m.repeat, m.in_features)
                matched.add(leaf)
                continue
            # a bare parameter is named by its path, a module's weight by path + ".weight"
            param = m.path if m.kind == "parameter" else m.path + ".weight"
            for suffix, names in fused.items():
                if m.kind != "norm" and (param == suffix or param.endswith("." + suffix)):
                    experts = m.shape[0] if len(m.shape) == 3 else 1
                    io += count * m.repeat * len(names) * experts * (m.shape[-1] + m.shape[-2])
                    merged += count * m.weight_params
                    attention.add(m, count * m.repeat * len(names))
                    matched.update(names)
        distinct += reads.total
    return LoraSums(io, ins, n_adapters, frozenset(matched), merged, quantizable, distinct, attention.feed,
                    attention.all)
