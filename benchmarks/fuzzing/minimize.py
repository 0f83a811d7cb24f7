"""A greedy minimiser for the campaign runner: drop keys, list elements, argv tokens, runs; halve sizes,
as long as the case still gives the same finding (hypothesis shrinks the suite's cases itself)."""

from __future__ import annotations

import copy
import time

from . import generators as G


class _Budget(Exception):
    pass


class Minimiser:
    def __init__(self, sandbox, target: str, label: str, *, seconds: float = 60.0, attempts: int = 300):
        self.sandbox, self.target, self.label = sandbox, target, label
        self.deadline = time.monotonic() + seconds
        self.attempts = attempts
        self.tries = 0

    def same(self, case: dict) -> bool:
        if self.tries >= self.attempts or time.monotonic() > self.deadline:
            raise _Budget
        self.tries += 1
        o = self.sandbox.run(self.target, case)
        return o.status == "finding" and o.label == self.label

    # ---- generic -----------------------------------------------------------------------------
    def shrink_json(self, value, rebuild):
        """Smaller versions of ``value`` (``rebuild(v)`` makes the whole case around it)."""
        if isinstance(value, dict):
            for k in list(value):
                cand = {kk: vv for kk, vv in value.items() if kk != k}
                if self.same(rebuild(cand)):
                    value = cand
            for k in list(value):
                value[k] = self.shrink_json(value[k], lambda v, k=k: rebuild({**value, k: v}))
        elif isinstance(value, list):
            while len(value) > 1 and self.same(rebuild(value[: len(value) // 2])):
                value = value[: len(value) // 2]
            if len(value) <= 8:
                for i in reversed(range(len(value))):
                    cand = value[:i] + value[i + 1:]
                    if self.same(rebuild(cand)):
                        value = cand
        elif isinstance(value, str) and len(value) > 16:
            while len(value) > 16 and self.same(rebuild(value[: len(value) // 2])):
                value = value[: len(value) // 2]
        return value

    def shrink_runs(self, case: dict, key: str = "runs", holder=None) -> dict:
        holder = holder or (lambda c: c)
        runs = holder(case)[key]
        if len(runs) > 1:
            for run in runs:
                cand = copy.deepcopy(case)
                holder(cand)[key] = [run]
                if self.same(cand):
                    return cand
        return case

    # ---- per target --------------------------------------------------------------------------
    def run(self, case: dict) -> dict:
        case = copy.deepcopy(case)
        try:
            case = getattr(self, f"_{self.target}")(case)
        except _Budget:
            pass
        return case

    def _configs(self, case):
        case = self.shrink_runs(case)
        case["config"] = self.shrink_json(case["config"], lambda v: {**case, "config": v})
        return case

    def _settings(self, case):
        for key in ("params", "weight_bytes", "profile"):
            if key in case:
                cand = {k: v for k, v in case.items() if k != key}
                if self.same(cand):
                    case = cand
        case["settings"] = self.shrink_json(case["settings"], lambda v: {**case, "settings": v})
        if "config" in case:
            case["config"] = self.shrink_json(case["config"], lambda v: {**case, "config": v})
        return case

    def _cli(self, case):
        argv = case["argv"]
        for i in reversed(range(len(argv))):
            cand = {**case, "argv": argv[:i] + argv[i + 1:]}
            if self.same(cand):
                argv = cand["argv"]
                case = cand
        for name in list(case["files"]):
            if not any(t.startswith("@" + name) for t in case["argv"]):
                case = {**case, "files": {k: v for k, v in case["files"].items() if k != name}}
        for name, spec in list(case["files"].items()):
            while spec.get("n", 0) > 1:
                cand_spec = {**spec, "n": spec["n"] // 2}
                cand = {**case, "files": {**case["files"], name: cand_spec}}
                if not self.same(cand):
                    break
                spec, case = cand_spec, cand
            if "config" in spec:
                spec["config"] = self.shrink_json(
                    spec["config"], lambda v: {**case, "files": {**case["files"], name: {**spec, "config": v}}})
        return case

    def _data_files(self, case):
        probe = case["probe"]
        if len(probe["runs"]) > 1:
            for run in probe["runs"]:
                cand = {**case, "probe": {**probe, "runs": [run]}}
                if self.same(cand):
                    case, probe = cand, cand["probe"]
                    break
        recipe = case["recipe"]
        how = recipe.get("how") or {}
        n_key = "n" if recipe["kind"] == "alias_bomb" else None
        if recipe["kind"] == "expression" and how.get("kind") in G.SIZED:
            while how["n"] > 1:
                h = {**how, "n": how["n"] // 2}
                r = {**recipe, "how": h, "expression": G.sized_expression(h["kind"], h["n"])}
                cand = {**case, "recipe": r, "text": G.materialise_data_file(r)}
                if not self.same(cand):
                    break
                case, recipe, how = cand, r, h
        elif n_key:
            while recipe["n"] > 1:
                r = {**recipe, "n": recipe["n"] - 1}
                cand = {**case, "recipe": r, "text": G.materialise_data_file(r)}
                if not self.same(cand):
                    break
                case, recipe = cand, r
        if probe.get("config") is not None:
            probe = case["probe"]
            probe["config"] = self.shrink_json(
                probe["config"], lambda v: {**case, "probe": {**probe, "config": v}})
        return case
