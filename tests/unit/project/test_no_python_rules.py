"""Rules stay in data: no module of engine/ lists the training stacks or holds measure's substitutions.

The stacks, the profiles each runs and what measure runs in place of a recipe's setting it cannot run
are formulas/stacks.yaml's (:mod:`vramwise.models.stack_manifest`); the facts a stack needs of a family
are in families/stacks/<stack>/. This scan of the package's source finds the Python shapes those rules
had (a tuple of stack names, a map of profiles to stacks, a map of a setting's unrunnable values to
runnable ones) so that they cannot come back; the detector is tried on those shapes first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import vramwise
from vramwise.models.stack_manifest import stack_manifest
from vramwise.profiles.settings import SETTINGS

ENGINE = Path(vramwise.__file__).resolve().parent
STACK_NAMES = set(stack_manifest().names)
CHOICES = {s.name: set(s.choices) for s in SETTINGS if s.choices}
#: the names the rules had in Python
OLD_NAMES = {"_RUNNABLE", "_STACK_OF_PROFILE", "STACK_MODULES_LIST"}


def _strings(nodes) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def python_rules(source: str, name: str = "<source>") -> list[str]:
    """``name:line: what`` for each stack list or substitution map written in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            stacks = set(_strings(node.elts)) & STACK_NAMES
            if len(stacks) >= 2:
                found.append(f"{where}: a list of stacks {sorted(stacks)} (formulas/stacks.yaml lists them)")
        elif isinstance(node, ast.Dict):
            keys, values = _strings(node.keys), _strings(node.values)
            if len(set(keys) & STACK_NAMES) >= 2 or len(set(values) & STACK_NAMES) >= 2:
                found.append(f"{where}: a map of stacks (formulas/stacks.yaml holds the stacks and their profiles)")
            for key, value in zip(node.keys, node.values):
                setting = key.value if isinstance(key, ast.Constant) else None
                if setting in CHOICES and isinstance(value, ast.Dict):
                    pairs = list(zip(_strings(value.keys), _strings(value.values)))
                    if any(a in CHOICES[setting] and b in CHOICES[setting] and a != b for a, b in pairs):
                        found.append(f"{where}: {setting}'s values swapped for others (formulas/stacks.yaml substitutions)")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in OLD_NAMES:
                    found.append(f"{where}: {t.id} is formulas/stacks.yaml's")
    return found


def test_the_detector_finds_the_shapes_the_rules_had():
    # settings.STACKS, measure's _RUNNABLE and _STACK_OF_PROFILE as they were written before the manifest
    old = '''
STACKS = ("hf", "torchtune", "litgpt")
_RUNNABLE = {"gradient_checkpointing": {"unsloth": "true"}, "loss": {"fused": "standard"},
             "attention": {"flash_attention_2": "sdpa", "flash_attention_3": "sdpa", "flex_attention": "sdpa"}}
_STACK_OF_PROFILE = {"torchtune": "torchtune", "litgpt": "litgpt"}
RENAMED = {"attention": {"flex_attention": "eager"}}
_STACK_STRATEGIES = {"hf": ("ddp", "fsdp"), "torchtune": ("fsdp",)}
'''
    found = python_rules(old)
    # line 2: the stack tuple; 3: the name _RUNNABLE and its three settings' swaps; 5: the name
    # _STACK_OF_PROFILE and its map onto stacks; 6: a swap under another name; 7: a map keyed by stacks
    assert sorted(int(f.split(":", 2)[1]) for f in found) == [2, 3, 3, 3, 3, 5, 5, 6, 7], found
    # what is not such a rule: one stack compared, a map of a kernel to why it cannot run
    assert python_rules('if stack == "hf" and profile in ("hf", "unsloth"):\n    pass\n'
                        'WHY = {"flash_attention_2": "the flash-attn package runs on CUDA GPUs only"}\n') == []


def test_no_engine_module_holds_a_stack_list_or_a_substitution():
    found = []
    for path in sorted(ENGINE.rglob("*.py")):
        found += python_rules(path.read_text(encoding="utf-8"), str(path.relative_to(ENGINE.parent)))
    assert found == []
