"""``vramwise explain``: every number behind an estimate, with its file:line, inputs and result.

Which formulas are shown is the core's answer (:func:`vramwise.estimation.explain.live_formula_ids`);
this module only writes them.
"""

from __future__ import annotations

import re

from vramwise.estimation.estimate import Estimate
from vramwise.estimation.explain import live_formula_ids
from vramwise.answers.profile_note import other_profile
from vramwise.surfaces.cli.common import note_line, request_of, show_recipe, with_recipe
from vramwise.surfaces.cli.format import gib, own_settings, print_json, ranges, settings_line, short, value_text, write_wrapped
from vramwise.surfaces.views import explain_view

_PACKAGE_DIRS = {"formulas": "vramwise.formulas", "families": "vramwise.families", "hardware": "vramwise.hardware"}
_TITLES = {"fact": "facts of the config", "attribute": "layer attributes", "constant": "constants",
           "table": "table entries", "inventory": "inventory totals"}


def run(args, out) -> int:
    req = request_of(args)
    est = req.estimate()
    if args.json:
        print_json(with_recipe(args, explain_view(est), est), out)
    else:
        show_recipe(args, out, everything=True, estimate=est)
        print_trace(est, req.label, out, args.all, note_line(other_profile(est)))
    return 0


def installed(path: str) -> str | None:
    """The installed file of a repository-relative ``formulas/...`` or ``families/...`` path."""
    head, _, rest = path.partition("/")
    package = _PACKAGE_DIRS.get(head)
    if package is None or not rest:
        return None
    try:
        from vramwise.rules.datafiles import package_files
        target = package_files(package).joinpath(*rest.split("/"))
        return str(target) if target.is_file() else None
    except Exception:  # noqa: BLE001 - a path that cannot be resolved is shown as it is
        return None


def print_trace(est: Estimate, model: str, out, show_all: bool, note: str | None) -> None:
    out.write(f"{model}: family {est.family}, profile {est.profile}\n")
    text = est.profile_data.summary
    if text:
        write_wrapped(out, f"profile {est.profile}: {text}")
    stored = est.model.checkpoint_format if est.model.inventory.checkpoint_as_stored else None
    out.write(f"settings: {settings_line(est.settings, serving=est.serving is not None, stored=stored, own=own_settings(est))}\n")
    out.write(f"total: {est.total:,} bytes ({gib(est.total)} GiB)\n")
    for line in est.error_band.lines():
        write_wrapped(out, line)
    if note:
        write_wrapped(out, note)

    trace = list(est.trace)
    hidden_ids: list = []
    if not show_all:
        live = live_formula_ids(est)
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
        inst = installed(path)
        out.write(f"{path}" + (f"  ->  {inst}" if inst else "") + "\n")

    groups: dict = {}
    for p in provenance:
        groups.setdefault(p.kind, []).append(p)
    for kind, items in groups.items():
        out.write(f"\n[{_TITLES[kind]}]\n")
        for p in items:
            layers = f" (layers {ranges(p.layer_indices)})" if p.layer_indices is not None else ""
            write_wrapped(out, f"{p.name} = {value_text(p.value, p.unit)}{layers}  {p.how}  {p.location()}")
    sections: dict = {}
    for t in trace:  # each component's section once, in the order its first formula is evaluated
        sections.setdefault(t.component, []).append(t)
    for component, items in sections.items():
        out.write(f"\n[{component}]\n")
        for t in items:
            layers = f"  (layers {ranges(t.layer_indices)})" if t.layer_indices is not None else ""
            out.write(f"{t.id}  {t.location()}{layers}\n")
            write_wrapped(out, t.expression, indent="    ")
            if t.inputs:
                shown = ", ".join(f"{k}={short(v)}" for k, v in t.inputs.items())
                write_wrapped(out, f"with {shown}", indent="    ")
            out.write(f"    = {value_text(t.value, t.unit)}\n")
    if hidden_ids or hidden_inputs:
        out.write("\n")
        write_wrapped(out, f"hidden: {len(hidden_ids)} formula(s) that do not apply to {est.settings.method} at these "
                           f"settings (they feed no reported figure, or only figures that are 0 here)"
                           + (f": {', '.join(hidden_ids)}" if hidden_ids else "")
                           + (f"; {hidden_inputs} input(s) only they read" if hidden_inputs else "")
                           + "; --all shows everything")
    for w in est.warnings:
        write_wrapped(out, f"warning: {w}")
