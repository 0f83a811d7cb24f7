"""The regression oracle: the engine reproduces every recorded figure to the byte.

``tests/oracle/estimates.json.gz`` was written by ``tests/oracle/generate.py`` before the
engine was rewritten as a compiler; each case is recomputed here and must equal its record
(components, total, phases, figures, per-GPU minima, parameter counts, LoRA targets, warnings).
This proves that the rewrite kept its outputs, not that they are right.
"""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from helpers import SHARED_MISSING
from oracle.generate import HF, OUT, SHARED, SIZE_ONLY, UNSLOTH, cases, compute, config_paths

RECORDED = json.loads(gzip.open(OUT, "rt", encoding="utf-8").read())
CASES = dict(cases())


def test_every_recorded_case_is_still_generated():
    if not (SHARED / "configs").is_dir():
        pytest.skip(SHARED_MISSING)
    assert sorted(CASES) == sorted(RECORDED)


@pytest.mark.parametrize("prefix", sorted({cid.split("|")[0] for cid in CASES}))
def test_outputs_unchanged(prefix):
    ids = [cid for cid in CASES if cid.split("|")[0] == prefix]
    mismatches = []
    for cid in ids:
        got = json.loads(json.dumps(compute(CASES[cid])))
        if got != RECORDED[cid]:
            diff = {k: (RECORDED[cid].get(k), got.get(k)) for k in set(got) | set(RECORDED[cid]) if got.get(k) != RECORDED[cid].get(k)}
            mismatches.append(f"{cid}: {diff}")
    assert not mismatches, "\n".join(mismatches[:10])


#: SHA-256 of the unsloth profile's records as this file held them at commit d12faed, before the reference
#: estimator's arithmetic moved to the studio profile: of json.dumps({case id: record} for the ``|unsloth|`` and
#: ``|unsloth-strategy|`` cases of ``git show d12faed:tests/oracle/estimates.json.gz``, sort_keys=True,
#: separators=(",", ":")), 1,200 records
UNSLOTH_BEFORE_STUDIO = "505adfb17b8550d7e1606cdc97529b80b912ed35b5e9be7ef1c733d092939b52"

#: studio cases whose figures have changed since the split, each to follow the reference estimator where it read
#: a config otherwise: on the layers where attention_k_eq_v makes the keys the values, the activations charge
#: the key/value width once (docs/unsloth-profile.md#activations); the two configs' cases with a memory-efficient
#: kernel and a training method (eager's quadratic term and inference are as they were)
STUDIO_CHANGED_SINCE_SPLIT = frozenset(
    f"configs/{config}|{label}|{k}"
    for config in ("google__gemma-4-26B-A4B.json", "nvidia__Gemma-4-31B-IT-NVFP4.json")
    for label, ks in (("studio", (0, 1, 3, 4, 5, 7, 8, 9)), ("studio-strategy", (0, 1)))
    for k in ks
)

#: UNSLOTH_BEFORE_STUDIO's records less the 20 named back from STUDIO_CHANGED_SINCE_SPLIT (1,180 records), from
#: the same d12faed file
UNSLOTH_BEFORE_STUDIO_UNCHANGED = "ca5dd767e94de4f7d333967f7997d4d45ad76e3d8f8564286b06f7715f51596a"


def _as_unsloth_was(cid: str, rec: dict) -> tuple[str, dict]:
    """A studio case named as the unsloth case it was split from: ``studio|k`` is ``unsloth|k``, and
    ``studio-strategy|k`` is ``unsloth-strategy|k + 5`` (the DDP cases were the 6th and 7th of
    OTHER_STRATEGIES); its profile named unsloth."""
    name, label, k = cid.split("|")
    old = f"{name}|unsloth|{k}" if label == "studio" else f"{name}|unsloth-strategy|{int(k) + 5}"
    return old, {**rec, "profile": "unsloth"}


def test_studio_records_are_the_unsloth_records_before_the_split():
    """Every figure of every studio case is the figure the unsloth profile gave for the same case before
    studio was split from it (same settings, every config, DDP where unsloth had it), whatever unsloth
    gives since: the recorded studio cases, named back, are byte for byte the unsloth records of then
    (their digest above), but for the cases changed since to follow the reference estimator
    (STUDIO_CHANGED_SINCE_SPLIT); test_outputs_unchanged holds the engine to the studio records."""
    studio = {cid: rec for cid, rec in RECORDED.items() if cid.count("|") == 2
              and cid.split("|")[1] in ("studio", "studio-strategy")}
    assert len(studio) == 1200
    assert STUDIO_CHANGED_SINCE_SPLIT <= studio.keys() and len(STUDIO_CHANGED_SINCE_SPLIT) == 20
    back = dict(_as_unsloth_was(cid, rec) for cid, rec in studio.items() if cid not in STUDIO_CHANGED_SINCE_SPLIT)
    assert len(back) == len(studio) - len(STUDIO_CHANGED_SINCE_SPLIT)
    assert sum(rec.get("profile") == "studio" for rec in studio.values()) == len(studio)
    text = json.dumps(back, sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(text.encode()).hexdigest() == UNSLOTH_BEFORE_STUDIO_UNCHANGED


def test_compiled_programs_equal_formula_by_formula():
    """Every dynamic stage the oracle builds runs as compiled code (no fallback) and gives, value
    for value and type for type, what evaluating its formulas one by one gives."""
    import vramwise

    reg = vramwise.Registry()
    for _, path in config_paths():
        cfg = json.loads(path.read_text())
        for profile, grid in (("unsloth", UNSLOTH), ("hf", HF)):
            for s in grid:
                vramwise.estimate(cfg, profile=profile, registry=reg, **s)
    if not (SHARED / "configs").is_dir():
        # without the shared corpus the oracle has one config (the bundled example), too few stages to
        # test the compiler on: the families' own example configs stand in for the corpus
        for name in reg.family_names():
            for example in reg.family_file(name).data.get("examples") or ():
                for profile, grid in (("unsloth", UNSLOTH), ("hf", HF)):
                    for s in grid[:3]:
                        try:
                            vramwise.estimate(example["config"], profile=profile, registry=reg, **s)
                        except vramwise.VramwiseError:  # an example outside a profile's families or methods
                            pass
    for s in SIZE_ONLY:
        vramwise.estimate_from_size(registry=reg, **s)
    stages = list(reg.stages._data.values())
    # the corpus, or the families' examples, fill the registry's stage cache (1,024); the bundled example alone gives 34
    assert len(stages) > 100
    for stage in stages:
        prog = stage.program
        for batch, seq in ((1, 1), (3, 4097), (8, 32768)):
            model_values, layer_values = prog.function(batch, seq, stage.static, stage.counts)
            env, layer_envs = stage.full_env(batch, seq, None)
            for fid, v in zip(prog.model_ids, model_values):
                assert (type(v), v) == (type(env[fid]), env[fid]), fid
            for fid, values in zip(prog.layer_ids, layer_values):
                assert [(type(v), v) for v in values] == [(type(le[fid]), le[fid]) for le in layer_envs], fid
