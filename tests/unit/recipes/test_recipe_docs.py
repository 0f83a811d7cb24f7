"""docs/recipes.md is generated from the format files: it must be the script's output for the files as
they are (run ``python scripts/build_recipe_docs.py`` after changing one)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_recipes_page_is_current():
    spec = importlib.util.spec_from_file_location("build_recipe_docs", ROOT / "scripts" / "build_recipe_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    assert page == module.render(), "docs/recipes.md is out of date: python scripts/build_recipe_docs.py"
    # every bundled format has its section
    for path in sorted((ROOT / "frameworks").glob("*.yaml")):
        assert f"\n## {path.stem}\n" in page
