"""Rules live in data files, not in the engine's Python: the known ones cannot come back.

- vLLM's rules by release are dated values (``dated:``), not comparisons on a version code;
- the vocabularies of a profile's settings are declared in its profile.yaml (``settings``), not
  written as tuples in the settings table;
- derived settings (4-bit loading, PEFT's k-bit preparation) are ``derive:`` rules of
  formulas/settings.yaml, not assignments in normalise_static.
"""

from __future__ import annotations

import ast
import re
from importlib import resources
from pathlib import Path

import yaml

ENGINE = Path(str(resources.files("vramwise")))
FORMULAS = Path(str(resources.files("vramwise.formulas")))


def _python_files():
    return sorted(p for p in ENGINE.rglob("*.py") if "formulas" not in p.parts and "families" not in p.parts)


def _constants(node: ast.AST) -> list:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)]


def test_no_formula_compares_a_version_code():
    version_rule = re.compile(r"\b\w*version\w*\s*(<|>|<=|>=|==|!=)\s*\d|\bversion_code\b")
    found = [f"{p.relative_to(FORMULAS)}:{i}" for p in sorted(FORMULAS.rglob("*.yaml"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if version_rule.search(line)]
    assert found == []
    found = [f"{p.relative_to(ENGINE)}:{i}" for p in _python_files()
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "vllm_version_code" in line]
    assert found == []


def _declared_vocabularies() -> dict:
    out = {}
    for manifest in sorted(FORMULAS.glob("*/profile.yaml")):
        for name, entry in (yaml.safe_load(manifest.read_text(encoding="utf-8")).get("settings") or {}).items():
            values = entry.get("choices") or [entry["releases"]["first"], entry["releases"]["last"]]
            out[f"{manifest.parent.name}.{name}"] = set(values)
    return out


def test_no_python_module_writes_a_profile_vocabulary():
    vocabularies = _declared_vocabularies()
    assert {"vllm.kv_cache_dtype", "vllm.block_size", "vllm.vllm_version"} <= set(vocabularies)
    found = []
    for p in _python_files():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                continue
            items = {n.value for n in node.elts if isinstance(n, ast.Constant) and not isinstance(n.value, bool)}
            for name, values in vocabularies.items():
                if len(items & values) >= min(3, len(values)):  # a literal holding a declared vocabulary's values
                    found.append(f"{p.relative_to(ENGINE)}:{node.lineno}: {name}")
    assert found == []


def test_no_python_module_derives_a_setting_that_has_a_rule():
    rules = set(yaml.safe_load((FORMULAS / "settings.yaml").read_text(encoding="utf-8"))["derive"])
    assert {"load_in_4bit", "kbit_prepare"} <= rules
    found = []
    for p in _python_files():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is None:
                continue  # unsetting a setting (so that its rule applies) is not a rule
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Subscript) and set(_constants(sub.slice)) & rules:
                        found.append(f"{p.relative_to(ENGINE)}:{node.lineno}")
    assert found == []
    settings_py = (ENGINE / "profiles" / "settings.py").read_text(encoding="utf-8")
    assert 'startswith("fsdp")' not in settings_py
