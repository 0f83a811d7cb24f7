"""The regression corpus: one file per minimal failing input, under ``tests/fuzz_corpus/<target>/``.

configs, settings, cli: ``<hash>.json`` = ``{"target", "expected", "found", "case"}`` (the case in the
tagged JSON of :mod:`.codec`). data_files: ``<hash>.yaml`` = the whole mutated file, after ``# `` header
lines holding the same fields (``case`` without its text) and a ``# ---`` line.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from .codec import decode, encode, short_hash
from .oracle import MEMORY_LIMIT_MB, TIME_LIMIT_S, Outcome

ROOT = Path(__file__).resolve().parents[2] / "tests" / "fuzz_corpus"
EXPECTED = (f"a sane estimate or an error of the documented tree (vramwise.VramwiseError; the CLI: exit 0 or 2), "
            f"within {TIME_LIMIT_S:g} s of CPU and {MEMORY_LIMIT_MB} MB")


#: The largest corpus file kept (the repository carries them).
MAX_CORPUS_BYTES = 4 << 20


def save(target: str, case: dict, outcome: Outcome, root: Path = ROOT) -> Path:
    folder = root / target
    folder.mkdir(parents=True, exist_ok=True)
    found = {"label": outcome.label, "detail": outcome.detail[:500], "date": datetime.date.today().isoformat()}
    if target == "data_files":
        meta = {k: v for k, v in case.items() if k != "text"}
        path = folder / f"{short_hash(case)}.yaml"
        header = [
            f"# vramwise fuzz corpus ({target}): this file replaces {case['path']} in a copy of the bundled folders",
            "# target: " + json.dumps(target),
            "# expected: " + json.dumps(EXPECTED),
            "# found: " + json.dumps(found),
            "# case: " + json.dumps(encode(meta), allow_nan=False),
            "# ---",
        ]
        path.write_text("\n".join(header) + "\n" + case["text"], encoding="utf-8", errors="surrogatepass")
        return path
    path = folder / f"{short_hash(case)}.json"
    data = {"target": target, "expected": EXPECTED, "found": found, "case": encode(case)}
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    if len(text) > MAX_CORPUS_BYTES:
        raise ValueError(f"a corpus case of {len(text):,} characters is too large to keep (minimise it first)")
    path.write_text(text, encoding="utf-8")
    return path


def load(path: Path) -> tuple[str, dict, dict]:
    """(target, case, found) of a corpus file."""
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        return data["target"], decode(data["case"]), data.get("found", {})
    text = path.read_text(encoding="utf-8", errors="surrogatepass")
    head, _, body = text.partition("# ---\n")
    fields = {}
    for line in head.splitlines():
        if line.startswith("# ") and ": " in line and not line.startswith("# vramwise"):
            k, _, v = line[2:].partition(": ")
            fields[k] = json.loads(v)
    case = decode(fields["case"])
    case["text"] = body
    return fields["target"], case, fields.get("found", {})


def files(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if p.suffix in (".json", ".yaml"))
