"""Which formulas an estimate's reported figures come from.

An estimate evaluates every formula of its profile, but for one method and model many of them
contribute nothing: ``a if full_finetune else b`` reads ``a`` or ``b``, never both. The trace a
reader is shown keeps the formulas that do contribute, found here by walking back from the
reported figures through the names each formula reads on the branches its conditions take.
"""

from __future__ import annotations

from vramwise.estimation.estimate import Estimate

__all__ = ["live_formula_ids"]


def live_formula_ids(est: Estimate) -> set[str]:
    """The formulas that contribute to a reported figure of ``est``: every component, the total, the
    trainable parameters and the per-GPU minimum, the phases and each figure that is not 0; then, from
    those, every formula an already live formula reads over the inputs it was evaluated with, following
    only the branch each ``a if c else b`` takes (both when ``c`` cannot be decided)."""
    prof = est._stage.profile
    formula = {f.id: f for f in prof.formulas}
    entries: dict[str, list] = {}
    for t in est.trace:  # a layer-scope formula has one entry per layer class
        entries.setdefault(t.id, []).append(t)
    roots = set(prof.components.values()) | {prof.total, prof.min_per_gpu, prof.trainable_params}
    roots |= set(prof.phases.values())
    figures = est.figures
    roots |= {fid for name, fid in prof.figures.items() if figures.get(name)}
    live: set[str] = set()
    todo = [r for r in roots if r in formula]
    while todo:
        fid = todo.pop()
        if fid in live:
            continue
        live.add(fid)
        expr = formula[fid].expr
        read: set[str] = set()
        for t in entries.get(fid, ()):
            read |= expr.names_read(t.inputs)
        todo.extend(n for n in read if n in formula and n not in live)
    return live
