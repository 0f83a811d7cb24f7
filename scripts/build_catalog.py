#!/usr/bin/env python3
"""Generate catalog/models.json, vramwise's offline model catalog, from config files.

    python scripts/build_catalog.py [--shared ../shared] [--sources catalog/sources] [--out catalog/models.json] [--check]

Sources, in this order:

1. every config listed in ``SHARED/configs/INDEX.tsv`` and ``SHARED/configs_extra/INDEX.tsv``
   (their ``hub_id`` column is the entry's id; the source columns say where the file came from);
2. every config listed in the project's own ``catalog/sources/INDEX.tsv`` (columns ``file``, ``hub_id``,
   ``model_type``, ``kind``, ``source``, ``cross_checks``, ``notes``): a verbatim copy of the hub's config.json
   found in a public repository, or a config reconstructed from the model's published dimensions, each with the
   place it was found and at least one independent cross-check (a second copy, GGUF metadata, the parameter
   count against the published size); a row without a source or a cross-check stops the script;
3. the families' flagship sizes: each concrete family's examples whose name carries a size
   (``8b``, ``560m``, ``8x7b``, ``1b-7b``, ...) and at most one word after it (``-v0.1``). An example whose family, parameter count and
   estimates equal a config of step 1 becomes an alias of that entry; otherwise it is an entry of
   its own, named by the example (its dimensions are hand-written in the family file).

Each entry keeps only the config fields a family reads: ``model_type`` (and the text
sub-config's), and the value at every alias path of every family's facts (not only its own
family's, so an entry stays complete when a model type moves to another family). The script
then checks, for every entry, that the kept fields resolve to the same family, facts and
parameter count as the full config, and give the same estimate (every figure) over a grid of
methods, settings and profiles; a difference stops it. ``--check`` compares with the file on
disk instead of writing it (exit 1 when it is out of date).
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_MISSING = object()
#: an example name that names a model size (8b, 560m, 1.5b, 8x7b, 1_6b, a3b) followed by at most one more word
#: (a version or variant: v0.1, a3b); "pythia-160m-tied-no-bias" is a test case, not a checkpoint
_SIZE = re.compile(r"(^|[-_.])(\d+x)?\d+([._]\d+)?[bm]([-_.][a-z0-9.]+)?$", re.I)
#: settings the check runs for every entry (each with every profile that models its method)
_GRID = [
    {"method": "qlora"},
    {"method": "lora", "batch_size": 2, "seq_len": 4096, "lora_rank": 64, "target_modules": "all-linear"},
    {"method": "full", "batch_size": 1, "seq_len": 1024, "gradient_checkpointing": "true", "optimizer": "adamw_torch"},
    {"method": "inference", "batch_size": 8, "seq_len": 8192},
    {"method": "lora", "attention": "eager", "gradient_checkpointing": "none", "batch_size": 1, "seq_len": 512},
]


def _lookup(mapping, path):
    cur = mapping
    for key in path:
        if isinstance(cur, dict) and key in cur:
            cur = cur[key]
        else:
            return _MISSING
    return cur


def _put(mapping, path, value):
    cur = mapping
    for key in path[:-1]:
        nxt = cur.get(key)
        if not isinstance(nxt, dict):
            nxt = cur[key] = {}
        cur = nxt
    if path[-1] not in cur:
        cur[path[-1]] = copy.deepcopy(value)


def alias_paths(reg) -> list[tuple[bool, tuple]]:
    """Every (from_root, path) some fact of some family reads, in a stable order."""
    paths = set()
    for fam in reg.families.values():
        for rule in fam.facts:
            for alias in rule.aliases:
                paths.add((alias.from_root, tuple(alias.path)))
    from vramwise.models.checkpoint_formats import formats

    for fmt in formats():  # what a quantized checkpoint's format reads from its quantization_config
        for rule in fmt.parameters.values():
            path = list(rule["path"])
            path = path[:path.index("*")] if "*" in path else [k for k in path if isinstance(k, str)]
            paths.add((True, ("quantization_config", *path)))
        for key in fmt.skip_keys:
            paths.add((True, ("quantization_config", key)))
    return sorted(paths, key=lambda p: (p[1], p[0]))


def prune(root: dict, paths) -> dict:
    """The fields of ``root`` the families read, at the same places."""
    from vramwise.inputs.config import text_view

    text = text_view(root)
    has_text = text is not root
    out: dict = {}
    if "model_type" in root:
        out["model_type"] = root["model_type"]
    if has_text:
        out["text_config"] = {}
        if "model_type" in text:
            out["text_config"]["model_type"] = text["model_type"]
    for from_root, path in paths:
        value = _lookup(root if from_root else text, path)
        if value is _MISSING:
            continue
        _put(out if (from_root or not has_text) else out["text_config"], path, value)
    return out


def _estimates(reg, spec) -> list:
    import vramwise

    out = []
    for settings in _GRID:
        for pname in reg.profile_names():
            if pname == "size_only":
                continue
            if settings["method"] not in reg.profile(pname).methods:
                continue
            try:
                d = vramwise.estimate(spec, profile=pname, registry=reg, **settings).to_dict()
            except vramwise.VramwiseError as e:
                d = {"error": type(e).__name__, "message": str(e)}
            out.append((pname, json.dumps(settings, sort_keys=True), d))
    return out


def _totals(estimates) -> list:
    return [(p, s, d.get("total")) for p, s, d in estimates]


def _fingerprint(reg, config: dict, origin: str):
    spec = reg.resolve(config, origin=origin)
    return spec, {"family": spec.family, "facts": repr(sorted(spec.facts.items())), "params": spec.params_total,
                  "warnings": list(spec.warnings)}


def _flagship_examples(reg):
    for fam in sorted(reg.families.values(), key=lambda f: f.name):
        if fam.abstract or fam.fallback or fam.name == "size_only":
            continue
        for ex in fam.examples or ():
            name, config = ex.get("name"), ex.get("config")
            if isinstance(name, str) and isinstance(config, dict) and _SIZE.search(name):
                yield fam, name, config


#: the columns of catalog/sources/INDEX.tsv
SOURCE_COLUMNS = ("file", "hub_id", "model_type", "kind", "source", "cross_checks", "notes")


def read_sources(folder: Path) -> list[tuple[dict, dict]]:
    """The rows of ``folder/INDEX.tsv`` with their configs; a malformed row stops the script naming its line."""
    index = folder / "INDEX.tsv"
    if not index.is_file():
        return []
    out = []
    with index.open(encoding="utf-8") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        if tuple(reader.fieldnames or ()) != SOURCE_COLUMNS:
            raise SystemExit(f"{index}:1: the columns must be {', '.join(SOURCE_COLUMNS)}")
        for row in reader:
            where = f"{index}:{reader.line_num}"
            for col in SOURCE_COLUMNS[:-1]:
                if not (row.get(col) or "").strip():
                    raise SystemExit(f"{where}: column {col!r} is empty")
            path = folder / row["file"]
            if not path.is_file():
                raise SystemExit(f"{where}: {row['file']} not found")
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{e.lineno}:{e.colno}: {e.msg}") from None
            if config.get("model_type") != row["model_type"]:
                raise SystemExit(f"{where}: model_type {row['model_type']!r} but {row['file']} says "
                                 f"{config.get('model_type')!r}")
            out.append((row, config))
    return out


def build(shared: Path, sources: Path | None = None, *, verify: bool = True) -> dict:
    """The catalog from the configs (``verify`` False: without estimating each full config to check that the
    kept fields give its estimate; the entries are the same, as that check only stops the script)."""
    from vramwise import Registry

    reg = Registry()
    paths = alias_paths(reg)
    entries: list[dict] = []
    seen: dict[str, int] = {}
    problems: list[str] = []

    def add(entry_id, root, source, kind):
        if entry_id in seen:
            return
        pruned = prune(root, paths)
        try:
            spec_full, fp_full = _fingerprint(reg, root, source)
            spec_kept, fp_kept = _fingerprint(reg, pruned, source)
        except Exception as e:  # noqa: BLE001 - a config vramwise cannot read is left out, and said so
            problems.append(f"skipped {entry_id}: {type(e).__name__}: {e}")
            return
        if fp_full != fp_kept:
            raise SystemExit(f"{entry_id}: the kept fields do not reproduce the full config's estimate")
        kept = _estimates(reg, spec_kept) if verify else None  # else estimated when an example is compared with it
        if verify and _estimates(reg, spec_full) != kept:
            raise SystemExit(f"{entry_id}: the kept fields do not reproduce the full config's estimate")
        seen[entry_id] = len(entries)
        entries.append({"id": entry_id, "aliases": [], "family": spec_full.family, "model_type": spec_full.model_type,
                        "params": spec_full.params_total, "source": source, "kind": kind, "config": pruned,
                        "_spec": spec_kept, "_estimates": kept})

    def estimates_of(entry):
        if entry["_estimates"] is None:
            entry["_estimates"] = _estimates(reg, entry["_spec"])
        return entry["_estimates"]

    for folder in ("configs", "configs_extra"):
        index = shared / folder / "INDEX.tsv"
        if not index.is_file():
            raise SystemExit(f"{index}: not found (give the shared corpus with --shared)")
        with index.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                path = shared / folder / row["file"]
                if not path.is_file() or not row.get("hub_id"):
                    continue
                where = row.get("source_repo") or row.get("kind") or "a public copy"
                add(row["hub_id"], json.loads(path.read_text(encoding="utf-8")),
                    f"config.json of {row['hub_id']} (a copy published in {where})",
                    "hub config")
    for row, config in read_sources(REPO / "catalog" / "sources" if sources is None else sources):
        if row["hub_id"] in seen:
            raise SystemExit(f"catalog/sources: {row['hub_id']} is already in the shared corpus")
        before = len(problems)
        add(row["hub_id"], config, f"config.json of {row['hub_id']} ({row['kind']}: {row['source']})", "hub config")
        if len(problems) > before:  # a config of the project's own sources must resolve
            raise SystemExit(f"catalog/sources/{row['file']}: {problems[-1]}")
    for fam, name, config in _flagship_examples(reg):
        source = f"families/{fam.name}.yaml, example {name!r} (dimensions written by hand)"
        try:
            spec, fp = _fingerprint(reg, config, source)
        except Exception as e:  # noqa: BLE001
            problems.append(f"skipped example {name}: {type(e).__name__}: {e}")
            continue
        same_size = [e for e in entries if e["family"] == spec.family and e["params"] == spec.params_total]
        ests = _totals(_estimates(reg, spec)) if same_size else None
        twin = next((e for e in same_size if _totals(estimates_of(e)) == ests), None)
        if twin is not None:
            if name not in twin["aliases"] and name != twin["id"]:
                twin["aliases"].append(name)
            continue
        add(name, config, source, "family example")
    for e in entries:
        e.pop("_estimates")
        e.pop("_spec")
    entries.sort(key=lambda e: e["id"].lower())
    for p in problems:
        print(p, file=sys.stderr)
    return {
        "schema_version": 1,
        "generated_by": "scripts/build_catalog.py",
        "description": "Well-known checkpoints: the config fields vramwise's families read, the parameter count "
                       "vramwise computes (text model) and where each config came from.",
        "models": entries,
    }


def dump(data: dict) -> str:
    """One model a line, so that a change reads as a one-line diff."""
    head = {k: v for k, v in data.items() if k != "models"}
    lines = [json.dumps(m, separators=(",", ":"), ensure_ascii=False) for m in data["models"]]
    text = json.dumps(head, indent=1, ensure_ascii=False)[:-2] + ',\n "models": [\n'
    return text + ",\n".join(lines) + "\n ]\n}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared", help="the shared corpus (default: ../shared)")
    ap.add_argument("--sources", type=Path, default=REPO / "catalog" / "sources",
                    help="the project's own config sources (default: catalog/sources)")
    ap.add_argument("--out", type=Path, default=REPO / "catalog" / "models.json")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file on disk differs")
    args = ap.parse_args(argv)
    text = dump(build(args.shared, args.sources))
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{args.out} is out of date: run scripts/build_catalog.py")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    n = text.count('"id":')
    print(f"wrote {args.out}: {n} models, {len(text.encode()):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
