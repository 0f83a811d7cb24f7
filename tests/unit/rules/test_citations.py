"""Citations in the data files resolve inside the repository.

Every ``source:`` value in formulas/**/*.yaml and families/**/*.yaml (the stack overlays too) that names a file under
this repository's ``docs/`` (a path that starts there, not ``peft/docs/...`` of an upstream project) must name an existing file, and every ``#anchor`` it adds must be defined in that
markdown file. Anchors are explicit HTML anchors, ``<a id="name"></a>``, the scheme
docs/unsloth-profile.md uses. No data file may cite the document the profile was once written
against (``seed``) any more, and every formula id of the unsloth and size-only profiles is named in
docs/unsloth-profile.md, so a reader can go from the files to the page and back.

Every formula cites its own source: no source of a formula file points by position ("the formulas
above"); each formula's source names something a reader can look up (a file, a paper, an upstream
class or function, or the formulas it combines); a derivation written "sum of a, b and c" (or
difference, product, quotient, maximum, minimum) names only what the expression reads; a cited
``formulas/FOLDER/FILE.yaml NAME`` exists and defines NAME; a cited file of this repository
(``tests/...``, ``engine/...``) exists.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import yaml

import vramwise

ROOT = Path(__file__).resolve().parents[3]
DATA_FILES = sorted(
    [p for p in (ROOT / "formulas").rglob("*.yaml")] + [p for p in (ROOT / "families").rglob("*.yaml")]
)
PROFILE_DOC = ROOT / "docs" / "unsloth-profile.md"

_DOC_REF = re.compile(r"(?<![\w/.-])(docs/[A-Za-z0-9_./-]+?\.md)(?:#([A-Za-z0-9_-]+))?(?![A-Za-z0-9_./#-])")
_ANCHOR = re.compile(r"""<a\s+id\s*=\s*["']([^"']+)["']\s*>\s*</a>""")
_SEED = re.compile(r"\bseed\b", re.IGNORECASE)
#: model names that contain the word and cite nothing (ByteDance Seed-OSS, HyperCLOVA X SEED)
_MODEL_NAMES = re.compile(r"\bseed[-_ ]oss\b|HyperCLOVA X SEED", re.IGNORECASE)


@functools.cache
def _yaml(path: Path):
    """A data file's contents, parsed once per run with libyaml's loader where PyYAML has it (the same
    safe constructor as yaml.safe_load); the tests only read what it returns."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def anchors(markdown: Path) -> set[str]:
    """The explicit anchors (<a id="..."></a>) a markdown file defines."""
    return set(_ANCHOR.findall(markdown.read_text(encoding="utf-8")))


def _sources(node, where: str = ""):
    """(json-path, text) of every ``source`` value, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{where}.{key}" if where else str(key)
            if key == "source" and isinstance(value, str):
                yield path, value
            else:
                yield from _sources(value, path)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _sources(item, f"{where}[{i}]")


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def test_data_files_are_found():
    assert len(DATA_FILES) > 10
    assert PROFILE_DOC.is_file()


def test_anchor_ids_are_unique():
    ids = _ANCHOR.findall(PROFILE_DOC.read_text(encoding="utf-8"))
    assert ids, "docs/unsloth-profile.md defines no <a id> anchors"
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("path", DATA_FILES, ids=_rel)
def test_doc_citations_resolve(path: Path):
    data = _yaml(path)
    problems = []
    cache: dict[Path, set[str]] = {}
    for where, text in _sources(data):
        if not re.search(r"(?<![\w/.-])docs/", text):  # an upstream project's peft/docs/... is not ours
            continue
        refs = _DOC_REF.findall(text)
        if not refs:
            problems.append(f"{where}: {text!r} mentions docs/ but names no markdown file")
        for doc, anchor in refs:
            target = ROOT / doc
            if not target.is_file():
                problems.append(f"{where}: {doc} does not exist")
                continue
            if anchor:
                known = cache.setdefault(target, anchors(target))
                if anchor not in known:
                    problems.append(f"{where}: #{anchor} is not an anchor of {doc}")
    assert not problems, f"{_rel(path)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", DATA_FILES, ids=_rel)
def test_no_seed_citations(path: Path):
    hits = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if _SEED.search(_MODEL_NAMES.sub("", line))]
    assert not hits, f"{_rel(path)} still cites the seed:\n  " + "\n  ".join(hits)


def test_profile_doc_cites_no_seed():
    assert not _SEED.search(PROFILE_DOC.read_text(encoding="utf-8"))


@pytest.mark.parametrize("profile", ["unsloth", "size_only"])
def test_every_formula_id_is_named_in_the_doc(profile: str):
    doc = PROFILE_DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", doc))
    missing = []
    for path in sorted((ROOT / "formulas" / profile).glob("*.yaml")):
        data = _yaml(path) or {}
        for formula in data.get("formulas", []) or []:
            if formula["id"] not in named:
                missing.append(f"{_rel(path)}: {formula['id']}")
    assert not missing, "formula ids not named in docs/unsloth-profile.md:\n  " + "\n  ".join(missing)


FORMULA_FILES = sorted((ROOT / "formulas").rglob("*.yaml"))
#: a source that points at other entries by their position instead of naming them
_POSITIONAL = re.compile(r"\b(above|below|preceding|previous|following)\b|\bthe (?:\w+ ){0,2}formulas\b", re.IGNORECASE)
#: what a formula's source can name for a reader to look up
_LOOKUP = re.compile(
    r"[\w.-]+\.(?:py|cpp|h|cu|yaml|md|json)\b"  # a file (modeling_llama.py, formulas/hf/phases.yaml)
    r"|\barXiv:\d"  # a paper
    r"|\b[A-Za-z_]\w*\.[A-Za-z_]\w*"  # a dotted name (torch.utils.checkpoint, Trainer.training_step)
    r"|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"  # a function or formula name (quantize_4bit, tensor_peak_bytes)
    r"|\b[A-Z][a-z0-9]+[A-Z]\w*"  # a class name (DistributedDataParallel)
)
_DERIVATION = re.compile(r"^(?:the )?(?:sum|difference|product|quotient|maximum|minimum) of ", re.IGNORECASE)
_NAME = re.compile(r"(?<![\w./])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w./(])")
_FORMULA_CITE = re.compile(r"(formulas/[a-z0-9_]+/[a-z0-9_]+\.yaml)(?: ([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b)?")
_REPO_PATH = re.compile(r"(?<![\w/.-])((?:tests|engine|benchmarks)/[A-Za-z0-9_./-]*[A-Za-z0-9_])")


def _compiled_formulas() -> list:
    """Every formula of every bundled profile and strategy, once each (by file and line)."""
    reg = vramwise.Registry()
    profiles = [reg.profile(p) for p in reg.profile_names()]
    profiles += [reg.profile(p, s) for s in reg.strategy_names() for p in reg.strategy_info(s)["profiles"]]
    seen: dict[str, object] = {}
    for prof in profiles:
        for f in prof.formulas:
            seen.setdefault(f.expr.where, f)
    return list(seen.values())


FORMULAS = _compiled_formulas()


@functools.cache
def _defined(path: Path) -> frozenset[str]:
    data = _yaml(path) or {}
    return frozenset({f["id"] for f in data.get("formulas") or ()} | set(data.get("constants") or ())
                     | set(data.get("tables") or ()))


def test_compiled_formulas_are_found():
    assert len(FORMULAS) > 300
    assert len({f.expr.file for f in FORMULAS}) > 30


@pytest.mark.parametrize("path", FORMULA_FILES, ids=_rel)
def test_no_source_points_by_position(path: Path):
    data = _yaml(path)
    bad = [f"{where}: {text!r}" for where, text in _sources(data) if _POSITIONAL.search(text)]
    assert not bad, f"{_rel(path)}: sources that point by position instead of naming what they cite:\n  " + "\n  ".join(bad)


def test_positional_sources_are_caught():
    # the wordings the formula files used before every formula cited its own source
    for text in ("the formulas above", "the four formulas above", "the phases above", "the layer formulas",
                 "the placement above", "the GPUs below (a GPU between holds no more)"):
        assert _POSITIONAL.search(text), text
    for text in ("maximum of forward_peak_bytes, backward_peak_bytes and optimizer_peak_bytes",
                 "torch.utils.checkpoint (non-reentrant recompute of one layer at a time)"):
        assert not _POSITIONAL.search(text), text


def test_every_formula_source_names_something_to_look_up():
    bad = [f"{f.expr.where}: {f.id}: {f.source!r}" for f in FORMULAS if not _LOOKUP.search(f.source)]
    assert not bad, "formula sources that name no file, paper, code or formula:\n  " + "\n  ".join(bad)


def test_vague_sources_are_caught():
    for text in ("settings", "the targeted modules", "the strategy's name", "the model's shapes"):
        assert not _LOOKUP.search(text), text
    for text in ("peft tuners/lora/layer.py update_layer", "torch.nn.parallel.DistributedDataParallel",
                 "Rajbhandari et al., ZeRO (arXiv:1910.02054), section 3.1", "sum of reserved_bytes and gib"):
        assert _LOOKUP.search(text), text


def _derivation_names(source: str) -> list[str] | None:
    """The names a derivation source says it combines (None: not a derivation)."""
    if not _DERIVATION.match(source):
        return None
    head = re.split(r"[(;:]", source, maxsplit=1)[0]
    return _NAME.findall(_FORMULA_CITE.sub("", head))


def test_derivations_name_what_the_expression_reads():
    bad = []
    derivations = 0
    for f in FORMULAS:
        names = _derivation_names(f.source)
        if names is None:
            continue
        derivations += 1
        unread = [n for n in names if n not in f.expr.names]
        if not names or unread:
            bad.append(f"{f.expr.where}: {f.id}: {f.source!r} names {unread or 'no formula'} (`{f.expr.text}`)")
    assert derivations > 40
    assert not bad, "derivations that do not name the formulas they combine:\n  " + "\n  ".join(bad)


def test_a_derivation_naming_the_wrong_formulas_is_caught():
    assert _derivation_names("sum of weights_bytes and lora_bytes (transformers Trainer)") == ["weights_bytes", "lora_bytes"]
    assert _derivation_names("maximum of a_bytes, formulas/hf/phases.yaml b_bytes; c_bytes") == ["a_bytes"]
    assert _derivation_names("torch autograd (sum of saved tensors)") is None


@pytest.mark.parametrize("path", DATA_FILES, ids=_rel)
def test_formula_file_citations_resolve(path: Path):
    data = _yaml(path)
    problems = []
    for where, text in _sources(data):
        for cited, name in _FORMULA_CITE.findall(text):
            target = ROOT / cited
            if not target.is_file():
                problems.append(f"{where}: {cited} does not exist")
            elif name and name not in _defined(target):
                problems.append(f"{where}: {cited} does not define {name}")
        for cited in _REPO_PATH.findall(text):
            if not (ROOT / cited).exists():
                problems.append(f"{where}: {cited} does not exist")
    assert not problems, f"{_rel(path)}:\n  " + "\n  ".join(problems)
