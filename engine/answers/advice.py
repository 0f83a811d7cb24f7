"""What to change so that a run fits: ``Fit.advice``.

Each piece of advice is a change of the settings, estimated again (:func:`~vramwise.estimate`) and
judged by the one placement rule (:class:`vramwise.answers.placement.Placer`: on several GPUs without
a strategy, what the best strategy the profile models places on each, the strategy named in the
entry); nothing here derives memory. The changes come in kinds, listed in :data:`KINDS` from the one that changes the training
least to the one that changes it most:

1. ``accumulation``: a smaller micro-batch and more gradient accumulation steps, exactly the same
   effective batch (micro-batch x accumulation steps x data-parallel GPUs): batch 8 -> 4 x 2, 2 x 4,
   1 x 8, the micro-batches that divide the effective batch per GPU; the largest batch that fits, when
   it does not divide it, is stepped down to the largest one that does (batch 8 x 3 steps: 6 x 4);
2. ``checkpointing``: gradient checkpointing (``true``; ``unsloth`` where the profile gives it a
   smaller figure than ``true``);
3. ``optimizer``: an 8-bit optimizer, or a paged one (``adamw_8bit``, ``paged_adamw_8bit``: those the
   profile's optimizer tables list);
4. ``loss``: a chunked or fused cross-entropy (where the profile reads ``loss``);
5. ``lora_targets``: LoRA on the attention modules only (the model's modules of group ``attention``
   among the current targets);
6. ``lora_rank``: a lower LoRA rank (powers of two below the current one);
7. ``qlora``: the base model in 4 bit (LoRA only);
8. ``seq_len``: the longest sequence that fits (the search ``fit`` already made);
9. ``offload``: the current strategy moves the optimizer, then the parameters too, to host memory;
10. ``strategy``: a sharding strategy on the same GPUs, in the order of the strategies manifest's
    ``advice.shards_in_order`` (fsdp, zero3, then zero3 with offload; on one GPU only the offloading ones);
11. ``gpus``: the fewest GPUs of the kind in a count machines come in (:func:`machine_counts`: 1, 2,
    4, then whole machines of ``gpus_per_node`` GPUs, 8 by default: 8, 16, 24...) at or above ``fit``'s
    ``min_gpus``.

Only changes that can run are advice: a change whose estimate carries a warning the formula files mark
``blocks: true`` (the stack refuses or fails the run: an 8-bit optimizer under FSDP2, a kernel the model
class does not run...) is not ranked; :func:`consider` lists it under ``blocked`` with that warning.

The checkpointing modes and the losses are tried in the order formulas/settings.yaml gives them
(``saves_memory_in_order``: settings.CHECKPOINTING_SAVINGS, LOSS_SAVINGS), those after the current one.

A kind is offered only where it applies to the method (no LoRA advice for full fine-tuning) and where
the profile models it: the profile reads the setting, lists the value in its tables where it has
tables for that setting, and the need goes down (a lower per-GPU figure, or the same and a lower
total; a stronger variant of a kind is kept only when it needs less than the milder one before it).

For each kind one entry: its mildest variant that fits, or, when none fits alone, its strongest one
(``fits`` false). When no single change of the settings on the same GPUs fits (a shorter sequence,
a strategy or more GPUs aside), the cheapest kinds are combined greedily (their
strongest variants, cheapest first) until the run fits; the combination is then made minimal (a
kind is dropped when the rest still fits) and each kind in it relaxed to its mildest variant that
still fits. When even every combinable change together does not fit, the longest sequence and the
fewest GPUs on top of them are searched. Combinations use at most :data:`MAX_COMBINATION_ESTIMATES`
estimates, the whole advice at most :data:`MAX_ESTIMATES`.

Entries are ranked: those that fit first, then by ``cost`` (the sum of the kinds' positions in
:data:`KINDS`), then by the per-GPU figure. The same in words, with an example: docs/fit-advice.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from vramwise.answers.placement import GpuSet, Placer
from vramwise.answers.search import fewest_above, largest_below
from vramwise.errors import VramwiseError
from vramwise.profiles.settings import (ADAPTER_METHODS, CHECKPOINTING_MODES, CHECKPOINTING_SAVINGS,
                                        DATA_PARALLEL_STRATEGIES, LOSS_MODES, LOSS_SAVINGS, SHARDS_IN_ORDER,
                                        TRAINING_METHODS)

__all__ = ["Advice", "Considered", "advise", "consider", "machine_counts", "KINDS", "MAX_ESTIMATES",
           "MAX_COMBINATION_ESTIMATES"]

#: The kinds of change, from the one that changes the training least to the one that changes it most.
KINDS = ("accumulation", "checkpointing", "optimizer", "loss", "lora_targets", "lora_rank", "qlora", "seq_len",
         "offload", "strategy", "gpus")
_COST = {k: i + 1 for i, k in enumerate(KINDS)}
#: The most estimates the combinations may make.
MAX_COMBINATION_ESTIMATES = 30
#: The most estimates the whole advice may make (single changes and combinations).
MAX_ESTIMATES = 64
#: Kinds searched over a range rather than combined greedily.
_SEARCHED = ("seq_len", "gpus")
#: Kinds whose fitting alone does not stop the search for combinations of the others: a much shorter
#: sequence, or other GPUs, change more than several cheaper changes together.
_UNCOMBINED = ("seq_len", "strategy", "gpus")

_OPTIMIZERS = ("adamw_8bit", "paged_adamw_8bit")
_OFFLOADS = ("optimizer", "parameters")


@dataclass(frozen=True)
class Advice:
    """One change of the settings (or of several) and what the run needs after it.

    ``changes`` maps setting names to their new values; ``gradient_accumulation_steps`` (not a
    setting: the steps that keep the effective batch) and ``gpus`` (the number of GPUs) appear where
    the change is one of them. ``per_gpu`` is what the changed run places on each of ``gpus`` GPUs
    (:meth:`~vramwise.answers.placement.Placer.place`), ``fits`` the placement rule on them;
    ``strategy`` the best strategy where it places a run without one on several GPUs (None otherwise).
    ``recipe_changes``: the changes in a recipe's own keys, when the fit was for a recipe (None
    otherwise)."""

    changes: Mapping[str, Any]
    kinds: tuple  # the kinds of change (KINDS), cheapest first
    description: str
    total: int
    per_gpu: int
    gpus: int
    fits: bool
    cost: int  # sum of the kinds' positions in KINDS: how much the training changes
    recipe_changes: Mapping[str, Any] | None = None
    rank: int = 0  # 1-based position in Fit.advice
    strategy: str | None = None  # the best strategy that places the changed run on its GPUs, where none is set

    def to_dict(self) -> dict:
        return {"rank": self.rank, "kinds": list(self.kinds), "description": self.description,
                "changes": _plain(self.changes), "total": self.total, "per_gpu": self.per_gpu, "gpus": self.gpus,
                "strategy": self.strategy, "fits": self.fits, "cost": self.cost,
                "recipe_changes": None if self.recipe_changes is None else _plain(self.recipe_changes)}


@dataclass(frozen=True)
class Considered:
    """The advice (ranked :class:`Advice`) and the changes left out because the stack cannot run them:
    ``blocked``, ((description, why), ...) with why the blocking warnings of the change's estimate."""

    advice: tuple = ()
    blocked: tuple = ()


def machine_counts(per_node: int, most: int) -> tuple:
    """The GPU counts machines come in, up to ``most``: the powers of two below ``per_node`` (GPUs per
    machine), then whole machines (per_node, 2 x per_node, ...)."""
    out, k = [], 1
    while k < per_node and k <= most:
        out.append(k)
        k *= 2
    out.extend(range(per_node, most + 1, per_node))
    return tuple(out)


def _plain(m: Mapping) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in m.items()}


@dataclass
class _Kind:
    """One kind of change: its variants from mildest to strongest, each (changes, words)."""

    kind: str
    variants: list
    chosen: int | None = None  # the variant of the single-change entry


class _Budget:
    """Counts the estimates the advice makes and refuses those over the bound."""

    def __init__(self, estimate_at: Callable[[Mapping[str, Any]], Any], limit: int):
        self._estimate_at = estimate_at
        self.limit = limit
        self.used = 0
        self._seen: dict = {}

    def estimate(self, changes: Mapping[str, Any]):
        """The estimate at ``changes`` (None: invalid, or the budget is spent). Repeats are free."""
        key = tuple(sorted((k, v if not isinstance(v, list) else tuple(v)) for k, v in changes.items()))
        if key in self._seen:
            return self._seen[key]
        if self.used >= self.limit:
            return None
        self.used += 1
        try:
            got = self._estimate_at(dict(changes))
        except VramwiseError:
            got = None
        self._seen[key] = got
        return got


def advise(here: Any, estimate_at: Callable[[Mapping[str, Any]], Any], **kw: Any) -> tuple:
    """The ranked advice of :func:`consider` (the changes it blocks left out)."""
    return consider(here, estimate_at, **kw).advice


def consider(here: Any, estimate_at: Callable[[Mapping[str, Any]], Any], *, gpus: int, usable: int, share: float,
             profile: Any, registry: Any, max_batch_size: int | None, max_seq_len: int | None,
             max_lora_rank: int | None, min_gpus: int | None, max_gpus: int, accumulation: int = 1,
             recipe: Any = None, limit: int = MAX_ESTIMATES,
             combination_limit: int = MAX_COMBINATION_ESTIMATES, placer: Placer | None = None) -> Considered:
    """The advice for a run that does not fit (empty when ``here`` fits on ``gpus`` GPUs of ``usable``
    bytes): ``estimate_at(changes)`` estimates the run with ``changes`` to its settings; ``profile``
    is the (single-GPU) profile, the ``max_*``/``min_gpus`` figures are those ``fit`` found;
    ``max_gpus`` the most GPUs considered; ``accumulation`` the current gradient accumulation steps;
    ``recipe`` writes each change in its own keys (``recipe.write``); ``placer``: the answer's
    (:class:`~vramwise.answers.placement.Placer`; default: a new one). The changes whose estimate carries a
    blocking warning are in ``blocked``, not in ``advice``."""
    placer = placer if placer is not None else Placer(registry)
    if placer.fits(here, GpuSet.alike(usable, gpus), share):
        return Considered()
    budget = _Budget(estimate_at, limit)
    s = here.settings
    ctx = _Context(here, budget, gpus, usable, share, profile, registry, accumulation, max_gpus, placer)
    kinds = _kinds(ctx, s, max_batch_size, max_lora_rank)
    entries = []
    helpful = []
    for k in kinds:  # single changes; a kind that does not lower the need is dropped
        entry = ctx.entry([k], [k.chosen])
        if entry is not None and _smaller((entry.per_gpu, entry.total), (ctx.base_per_gpu, here.total)):
            entries.append(entry)
            helpful.append(k)
    kinds = helpful
    if max_seq_len is not None and max_seq_len < s.seq_len:
        seq = _Kind("seq_len", [({"seq_len": max_seq_len}, _seq_words(max_seq_len, s.seq_len))], 0)
        entry = ctx.entry([seq], [0])
        if entry is not None:
            entries.append(entry)
    if min_gpus is not None and min_gpus > gpus:
        entry = ctx.more_gpus(min_gpus)
        if entry is not None:
            entries.append(entry)
    if not any(e.fits and not set(e.kinds) & set(_UNCOMBINED) for e in entries):
        budget.limit = min(limit, budget.used + combination_limit)
        seen = {_key(e) for e in entries}  # a combination made minimal may be a single change listed already
        entries.extend(e for e in _combinations(ctx, [k for k in kinds if k.kind not in _SEARCHED], s)
                       if _key(e) not in seen)
    entries.sort(key=lambda e: (not e.fits, e.cost, e.per_gpu))
    out = []
    for i, e in enumerate(entries, 1):
        rc = None
        if recipe is not None:
            wanted = {k: v for k, v in e.changes.items() if k != "gpus"}
            try:
                rc = dict(recipe.write(wanted))
            except VramwiseError:
                rc = None
        out.append(replace(e, rank=i, recipe_changes=rc))
    return Considered(tuple(out), tuple(ctx.blocked.items()))


class _Context:
    """What judging a change needs: the base estimate, the budget and the GPUs."""

    def __init__(self, here, budget, gpus, usable, share, profile, registry, accumulation, max_gpus, placer):
        self.here, self.budget, self.gpus, self.usable, self.share = here, budget, gpus, usable, share
        self.profile, self.registry, self.accumulation, self.max_gpus = profile, registry, accumulation, max_gpus
        self.placer = placer
        base = placer.place(here, gpus).per_gpu
        #: what each GPU holds now (a run no strategy takes on these GPUs: any change that runs is smaller)
        self.base_per_gpu = base if base is not None else float("inf")
        s = here.settings
        #: the effective batch: micro-batch x accumulation steps x the GPUs that each run a micro-batch
        self.effective = s.batch_size * accumulation * _replicas(s.strategy, gpus)
        self.counts = machine_counts(s.gpus_per_node, max_gpus)
        self.blocked: dict = {}  # description -> why (the blocking warnings), in the order found

    def block(self, words: str, est) -> bool:
        """Whether ``est`` carries a blocking warning; if so, the change ``words`` is listed as blocked."""
        if not est.blocking:
            return False
        self.blocked.setdefault(words, "; ".join(est.blocking))
        return True

    def keep_batch(self, changes: dict, k: int) -> dict | None:
        """``changes`` with the gradient accumulation steps that keep the effective batch on ``k`` GPUs, when
        they change the micro-batch (None: no whole number of steps keeps it)."""
        if "batch_size" not in changes:
            return changes
        per_step = changes["batch_size"] * _replicas(changes.get("strategy", self.here.settings.strategy), k)
        if self.effective % per_step:
            return None
        return {**changes, "gradient_accumulation_steps": self.effective // per_step}

    def more_gpus(self, fewest: int) -> Advice | None:
        """The entry for more GPUs: the first count machines come in, at or above ``fewest``, that fits
        (the next ones tried where a count does not)."""
        first = None
        for k in [c for c in self.counts if c >= fewest][:4]:
            entry = self.entry([], [], k_gpus=k)
            if entry is not None and entry.fits:
                return entry
            first = first or entry
        return first

    def judge(self, changes: Mapping[str, Any], k_gpus: int | None = None):
        """(estimate, per_gpu, fits, placement) of the run with ``changes`` on ``k_gpus`` GPUs (None: invalid,
        over the budget, or no strategy runs it there)."""
        k = k_gpus or self.gpus
        if self.keep_batch(changes, k) is None:
            return None
        changes = {n: v for n, v in changes.items() if n != "gradient_accumulation_steps"}
        strategy = changes.get("strategy", self.here.settings.strategy)
        if strategy != "none" and k != self.gpus:
            changes["world_size"] = k
        est = self.here if not changes else self.budget.estimate(changes)
        if est is None:
            return None
        try:
            placed = self.placer.place(est, k)
        except VramwiseError:
            return None
        if placed.per_gpu is None:
            return None
        return est, placed.per_gpu, placed.fits(GpuSet.alike(self.usable, k), self.share), placed

    def entry(self, kinds: list, picks: list, k_gpus: int | None = None) -> Advice | None:
        changes, words = {}, []
        for kind, i in zip(kinds, picks):
            changes.update(kind.variants[i][0])
        changes = self.keep_batch(changes, k_gpus or self.gpus)
        if changes is None:
            return None
        for kind, i in zip(kinds, picks):
            w = kind.variants[i][1]
            words.append(_batch_words(changes["batch_size"], changes["gradient_accumulation_steps"], self.effective)
                         if kind.kind == "accumulation" else w)
        names = [k.kind for k in kinds]
        if k_gpus is not None:
            strategy = changes.get("strategy", self.here.settings.strategy)
            changes["gpus"] = k_gpus
            if strategy != "none":
                changes["world_size"] = k_gpus
            words.append(f"{k_gpus} GPUs instead of {self.gpus}")
            names.append("gpus")
        got = self.judge({n: v for n, v in changes.items() if n != "gpus"}, k_gpus)
        if got is None:
            return None
        est, per, ok, placed = got
        if self.block("; ".join(words), est):
            return None
        return Advice(changes=changes, kinds=tuple(names), description="; ".join(words), total=est.total, per_gpu=per,
                      gpus=k_gpus or self.gpus, fits=ok, cost=sum(_COST[n] for n in names),
                      strategy=placed.strategy if placed.best else None)


def _key(entry: Advice) -> tuple:
    """The changes of an entry, comparable: two entries of the same changes are one piece of advice."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in entry.changes.items()))


def _smaller(need: tuple, than: tuple) -> bool:
    """Whether (per-GPU bytes, total) ``need`` is less than ``than``: a lower per-GPU figure, or the
    same one and a lower total (which the rule without a strategy also weighs on several GPUs)."""
    return need[0] < than[0] or (need[0] == than[0] and need[1] < than[1])


def _modelled(profile, name: str, value: Any) -> bool:
    """The profile reads the setting and, where it has tables keyed by the setting, one of them lists
    the value (an unlisted value would only take a table's default)."""
    if name not in profile.settings_read:
        return False
    tables = [t for t in profile.tables if t.key == name]
    return not tables or any(value in t.entries for t in tables)


def _discrete(ctx: _Context, kind: str, variants: list) -> _Kind | None:
    """A kind of few variants: each estimated; kept when valid and smaller than the variant kept
    before it (or than the run itself). The chosen one: the mildest that fits, else the strongest."""
    kept, last, chosen = [], (ctx.base_per_gpu, ctx.here.total), None
    for changes, words in variants:
        got = ctx.judge(changes)
        if got is None:
            continue
        est, per, ok, _ = got
        if ctx.block(words, est) or not _smaller((per, est.total), last):
            continue
        kept.append((changes, words))
        last = (per, est.total)
        if ok and chosen is None:
            chosen = len(kept) - 1
    if not kept:
        return None
    return _Kind(kind, kept, len(kept) - 1 if chosen is None else chosen)


def _stronger(order: tuple, current: str, names: tuple) -> tuple:
    """The values of ``order`` (those of the vocabulary ``names`` that save memory, mildest first) after
    ``current``: all of them when ``current`` is a value that saves none, none after the strongest or for a
    value the vocabulary lacks."""
    if current in order:
        return order[order.index(current) + 1:]
    return order if current in names else ()


def _kinds(ctx: _Context, s, max_batch: int | None, max_rank: int | None) -> list:
    """The kinds of change that apply, each with its variants and the single-change pick."""
    prof, method = ctx.profile, s.method
    out = []
    training = method in TRAINING_METHODS
    if training and s.batch_size > 1:
        per_gpu = ctx.accumulation * s.batch_size  # the effective batch of each GPU's process
        divisors = [d for d in range(s.batch_size - 1, 0, -1) if per_gpu % d == 0]
        variants = [({"batch_size": d, "gradient_accumulation_steps": per_gpu // d},
                     _batch_words(d, per_gpu // d, ctx.effective)) for d in divisors]
        # the largest batch that fits, stepped down to the largest that divides the effective batch
        fitting = [i for i, d in enumerate(divisors) if max_batch is not None and d <= max_batch]
        out.append(_Kind("accumulation", variants, fitting[0] if fitting else len(variants) - 1))
    if training and "gradient_checkpointing" in prof.settings_read:
        modes = _stronger(CHECKPOINTING_SAVINGS, s.gradient_checkpointing, CHECKPOINTING_MODES)
        k = _discrete(ctx, "checkpointing", [({"gradient_checkpointing": m}, f"gradient checkpointing {m}")
                                             for m in modes if _modelled(prof, "gradient_checkpointing", m)])
        out.append(k)
    if training:
        opts = [o for o in _OPTIMIZERS if o != s.optimizer and _modelled(prof, "optimizer", o)]
        out.append(_discrete(ctx, "optimizer", [({"optimizer": o}, f"optimizer {o} instead of {s.optimizer}")
                                                for o in opts]))
    if training:
        losses = [x for x in _stronger(LOSS_SAVINGS, s.loss, LOSS_MODES) if _modelled(prof, "loss", x)]
        out.append(_discrete(ctx, "loss", [({"loss": x}, f"{x} cross-entropy loss instead of {s.loss}")
                                           for x in losses]))
    if method in ADAPTER_METHODS:
        attention = _attention_targets(ctx.here)
        if attention and len(attention) < len(ctx.here.lora_targets):
            out.append(_discrete(ctx, "lora_targets", [({"target_modules": attention},
                                                        f"LoRA on the attention modules only ({', '.join(attention)})")]))
        if "lora_rank" in prof.settings_read and s.lora_rank > 1:
            floor = 4 if s.lora_rank > 4 else 1
            ranks = []
            r = 1 << (s.lora_rank - 1).bit_length() - 1  # the largest power of two below the rank
            while r >= floor:
                ranks.append(r)
                r //= 2
            if ranks:
                variants = [({"lora_rank": r}, f"LoRA rank {r} instead of {s.lora_rank}") for r in ranks]
                fitting = [i for i, r in enumerate(ranks) if max_rank is not None and r <= max_rank]
                out.append(_Kind("lora_rank", variants, fitting[0] if fitting else len(variants) - 1))
    if method == "lora" and "qlora" in prof.methods:
        out.append(_discrete(ctx, "qlora", [({"method": "qlora", "load_in_4bit": True},
                                             "QLoRA: the base model in 4 bit")]))
    if training and s.strategy != "none":
        offloads = ctx.registry.strategy_info(s.strategy)["offload"]
        later = _OFFLOADS[_OFFLOADS.index(s.offload) + 1:] if s.offload in _OFFLOADS else _OFFLOADS
        out.append(_discrete(ctx, "offload", [({"offload": o}, f"{s.strategy} offloads the {o} to host memory")
                                              for o in later if o in offloads]))
    if training and s.strategy not in {strategy for strategy, _ in SHARDS_IN_ORDER}:
        variants = []
        for strategy, offload in SHARDS_IN_ORDER:
            if ctx.gpus == 1 and offload == "none":
                continue  # sharding over one GPU shards nothing: only the offload can help
            info = ctx.registry.strategy_info(strategy)
            if prof.name not in info["profiles"] or offload not in info["offload"] or \
                    ctx.gpus < info.get("min_world_size", 1):
                continue
            words = f"strategy {strategy} on {ctx.gpus} GPU{'s' if ctx.gpus > 1 else ''}" + \
                (f", offloading the {offload} to host memory" if offload != "none" else "")
            variants.append(({"strategy": strategy, "world_size": ctx.gpus, "offload": offload}, words))
        out.append(_discrete(ctx, "strategy", variants))
    return [k for k in out if k is not None]


def _attention_targets(here) -> tuple:
    """The current LoRA targets that name a module of group ``attention`` (or a LoRA part of one)."""
    spec = here.model
    names = set()
    for lc in spec.layer_classes:
        for m in lc.modules:
            if m.group == "attention":
                names.add(m.name)
                names.update(part[0] for part in m.lora_parts)
    return tuple(t for t in here.lora_targets if t in names)


def _replicas(strategy: str, k: int) -> int:
    """The GPUs that each run a micro-batch: all ``k`` under a data-parallel strategy (the strategies manifest's
    ``data_parallel``), else one (one GPU, or one process driving one replica over the GPUs: device_map)."""
    return k if strategy in DATA_PARALLEL_STRATEGIES else 1


def _batch_words(batch: int, steps: int, effective: int) -> str:
    return (f"batch {batch} with {steps} gradient accumulation step{'s' if steps != 1 else ''} "
            f"(the same effective batch of {effective})")


def _seq_words(new: int, old: int, longest: bool = True) -> str:
    return f"sequences of at most {new:,} tokens instead of {old:,}" + (" (the longest that fits)" if longest else "")


def _combinations(ctx: _Context, kinds: list, s) -> list:
    """Greedy combinations of the cheapest kinds (their strongest variants) until the run fits, made
    minimal and relaxed; when none fits, the longest sequence and the fewest GPUs on top of them all."""
    if not kinds:
        return []
    out = []
    chosen: list = []  # (kind, variant index)
    found = False
    for k in kinds:
        chosen.append((k, len(k.variants) - 1))
        if len(chosen) == 1:
            continue  # a single change was judged already
        got = ctx.judge(_merge(chosen))
        if got is None:
            return out
        if got[2] and not got[0].blocking:
            found = True
            break
    if found:
        best = _minimal(ctx, chosen)
        if best:
            entry = ctx.entry([k for k, _ in best], [i for _, i in best])
            if entry is not None and entry.fits:
                out.append(entry)
        return out
    everything = chosen
    if s.seq_len > 1:  # the longest sequence with every change
        fits_at = lambda q: _runs_and_fits(ctx.judge({**_merge(everything), "seq_len": q}))
        longest = largest_below(fits_at, s.seq_len - 1)
        if longest is not None:
            seq = _Kind("seq_len", [({"seq_len": longest}, _seq_words(longest, s.seq_len, False))], 0)
            entry = ctx.entry([k for k, _ in everything] + [seq], [i for _, i in everything] + [0])
            if entry is not None and entry.fits:
                out.append(entry)
    # the GPU counts machines come in on which the effective batch can be kept (a micro-batch per GPU needs
    # at most as many GPUs as the effective batch, and one that divides it): bisected by position
    counts = [c for c in ctx.counts if ctx.keep_batch(_merge(everything), c) is not None]
    fits_on = lambda i: _runs_and_fits(ctx.judge(_merge(everything), counts[i - 1]))
    at = fewest_above(fits_on, sum(1 for c in counts if c <= ctx.gpus), len(counts))
    fewest = None if at is None else counts[at - 1]
    if fewest is not None:
        best = _minimal(ctx, everything, fewest)
        if not best:  # the GPUs alone are enough: the single entry for more GPUs says so
            return out
        entry = ctx.entry([k for k, _ in best], [i for _, i in best], k_gpus=fewest)
        if entry is not None and entry.fits:
            out.append(entry)
    return out


def _runs_and_fits(got) -> bool:
    """A judged change fits and carries no blocking warning."""
    return got is not None and got[2] and not got[0].blocking


def _merge(chosen: list) -> dict:
    changes = {}
    for k, i in chosen:
        changes.update(k.variants[i][0])
    return changes


def _minimal(ctx: _Context, chosen: list, k_gpus: int | None = None) -> list:
    """``chosen`` (which fits) without the kinds it does not need, most expensive first, then each
    kind relaxed to its mildest variant that still fits (bisected over its variants). On ``k_gpus``
    GPUs every kind may go (an empty list: the GPUs alone are enough)."""
    def ok(c: list) -> bool:
        return _runs_and_fits(ctx.judge(_merge(c), k_gpus))

    keep = list(chosen)
    for item in sorted(chosen, key=lambda ki: -_COST[ki[0].kind]):
        if len(keep) == 1 and k_gpus is None:
            break  # on the same GPUs one kind alone was judged already
        trial = [x for x in keep if x is not item]
        if ok(trial):
            keep = trial
    for pos, (k, strongest) in enumerate(keep):
        lo, hi = -1, strongest  # hi fits; find the mildest index that does
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial = keep[:pos] + [(k, mid)] + keep[pos + 1:]
            if ok(trial):
                hi = mid
            else:
                lo = mid
        keep[pos] = (k, hi)
    return keep
