"""Citations in the data files resolve inside the repository.

Every ``source:`` value in formulas/**/*.yaml and families/*.yaml that names a file under
``docs/`` must name an existing file, and every ``#anchor`` it adds must be defined in that
markdown file. Anchors are explicit HTML anchors, ``<a id="name"></a>``, the scheme
docs/unsloth-profile.md uses. No data file may cite the document the profile was once written
against (``seed``) any more, and every formula id of the unsloth and size-only profiles is named in
docs/unsloth-profile.md, so a reader can go from the files to the page and back.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA_FILES = sorted(
    [p for p in (ROOT / "formulas").rglob("*.yaml")] + [p for p in (ROOT / "families").glob("*.yaml")]
)
PROFILE_DOC = ROOT / "docs" / "unsloth-profile.md"

_DOC_REF = re.compile(r"(docs/[A-Za-z0-9_./-]+?\.md)(?:#([A-Za-z0-9_-]+))?(?![A-Za-z0-9_./#-])")
_ANCHOR = re.compile(r"""<a\s+id\s*=\s*["']([^"']+)["']\s*>\s*</a>""")
_SEED = re.compile(r"\bseed\b", re.IGNORECASE)
#: model names that contain the word and cite nothing (ByteDance Seed-OSS, HyperCLOVA X SEED)
_MODEL_NAMES = re.compile(r"\bseed[-_ ]oss\b|HyperCLOVA X SEED", re.IGNORECASE)


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
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    problems = []
    cache: dict[Path, set[str]] = {}
    for where, text in _sources(data):
        if "docs/" not in text:
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
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for formula in data.get("formulas", []) or []:
            if formula["id"] not in named:
                missing.append(f"{_rel(path)}: {formula['id']}")
    assert not missing, "formula ids not named in docs/unsloth-profile.md:\n  " + "\n  ".join(missing)
