"""The commands about the bundled data: ``families`` (the family and profile files), ``catalog`` (the
model catalog) and ``check`` (validate family and formula files)."""

from __future__ import annotations

from vramwise.surfaces.cli.format import count, print_json
from vramwise.surfaces.views import families_view


def families(args, out) -> int:
    data = families_view()
    if args.json:
        print_json(data, out)
        return 0
    rows = data["families"]
    width = max(len(r["family"]) for r in rows)
    for r in rows:
        types = ", ".join(r["model_types"]) or (
            "(fallback for unknown model types)" if r["fallback"] else "(used by name, not by model type)")
        ext = f"  extends {r['extends']}" if r["extends"] else ""
        out.write(f"{r['family']:<{width}}  {types}  [{r['file']}]{ext}\n")
    out.write(f"\nprofiles: {', '.join(data['profiles'])}\n")
    for p in data["profiles"]:
        out.write(f"  {p}: {data['profile_summaries'][p]}\n")
    return 0


def catalog(args, out) -> int:
    from vramwise.inputs.catalog import list_models

    query = " ".join(args.query)
    models = list_models(query)
    if args.json:
        print_json({"query": query, "models": [m.to_dict() for m in models]}, out)
        return 0
    if not models:
        out.write(f"no model of the catalog matches {query!r}\n")
        return 0
    width = min(max(len(m.id) for m in models), 52)
    fam = max(len(m.family) for m in models)
    out.write(f"{'model':<{width}}  {'family':<{fam}}  {'parameters':>11}  source\n")
    for m in models:
        also = f" (also: {', '.join(m.aliases)})" if m.aliases else ""
        kind = "hub config" if m.kind == "hub config" else "family example"
        out.write(f"{m.id:<{width}}  {m.family:<{fam}}  {count(m.params):>11}  {kind}{also}\n")
    out.write(f"\n{len(models)} model(s); `vramwise estimate ID` reads these offline (--hub reads the hub instead)\n")
    return 0


def check(args, out) -> int:
    """Exit 0 when every file is fine, 1 when any has a problem (one line each)."""
    from vramwise.tooling.check import check as check_files

    problems = check_files(args.files)
    for line in problems:
        out.write(line + "\n")
    if problems:
        return 1
    if not args.quiet:
        out.write(f"{len(args.files)} path(s) checked: no problems\n")
    return 0
