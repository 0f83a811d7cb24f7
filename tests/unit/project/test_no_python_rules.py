"""Rules stay in data: no module of engine/ lists the training stacks, holds measure's substitutions
or writes a settings vocabulary.

The stacks, the profiles each runs, the values of a setting measure runs and what it runs in place of a
recipe's setting it cannot run are formulas/stacks.yaml's (:mod:`vramwise.models.stack_manifest`); the
facts a stack needs of a family are in families/stacks/<stack>/. The settings' vocabularies (the methods and their groups, the closed
settings' values and spellings, the order in which the advice tries the modes that save memory,
compare's default methods, what measure needs of each attention kernel, the sweepable settings, the
integer limits) are formulas/settings.yaml's, and vLLM's are formulas/vllm/profile.yaml's. What each
multi-GPU strategy does (whether its GPUs each run a micro-batch) and the strategy changes fit's advice
proposes are formulas/strategies/strategies.yaml's. This scan of the package's source finds the Python
shapes those rules had (a tuple of stack names, a map of profiles to stacks, a map of a setting's
unrunnable values to runnable ones, a literal naming two values of one vocabulary, the limits' map, the
sweepable settings' tuple, a tuple naming two strategies) so that they cannot come back; the detector
is tried on those shapes first.
"""

from __future__ import annotations

import ast
from importlib import resources
from pathlib import Path

import yaml

import vramwise
from vramwise.models.stack_manifest import stack_manifest
from vramwise.profiles.settings import SETTINGS

ENGINE = Path(vramwise.__file__).resolve().parent
FORMULAS = Path(str(resources.files("vramwise.formulas")))
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


# The settings' vocabularies, read from the data files themselves (not through vramwise.profiles.settings).
_VOCABULARIES = yaml.safe_load((FORMULAS / "settings.yaml").read_text(encoding="utf-8"))["vocabularies"]
_VLLM = yaml.safe_load((FORMULAS / "vllm" / "profile.yaml").read_text(encoding="utf-8"))["settings"]
#: vocabulary -> {every spelling of one of its values: the value}: each vocabulary of a setting's values
#: (its names and aliases), and each of vLLM's vocabularies of names (block sizes are numbers, which any
#: code may write; releases are a range, not names)
SPELLINGS = {entry: {**{n: n for n in body["names"]}, **body.get("aliases", {})}
             for entry, body in _VOCABULARIES.items() if "setting" in body}
SPELLINGS.update({f"vllm {setting}": {c: c for c in body["choices"]} for setting, body in _VLLM.items()
                  if all(isinstance(c, str) for c in body.get("choices", [0]))})
#: the vocabularies whose names are settings: lists of settings are everywhere, so their own shapes are found
SWEEPABLE = set(_VOCABULARIES["sweepable"]["names"])
LIMITED = set(_VOCABULARIES["limits"]["limits"])
#: the names the vocabularies had in Python
OLD_VOCABULARY_NAMES = {"METHODS", "CHECKPOINTING_MODES", "LOSS_MODES", "ATTENTION_KINDS", "EXPERTS_LAYOUTS",
                        "SWEEPABLE", "LIMITS", "_GC_ALIASES", "_ADAPTERS", "_TRAINING", "_SERVING", "KERNEL_ORDER",
                        "_NOT_ON_CPU", "_FLASH_AVAILABLE", "_FLASH_PACKAGE", "KV_CACHE_DTYPES", "BLOCK_SIZES"}
_LITERALS = (ast.Tuple, ast.List, ast.Set, ast.Dict)


def _is_int(node) -> bool:
    """An integer written as a constant or as arithmetic of constants (2**20)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _is_int(node.left) and _is_int(node.right)
    return isinstance(node, ast.UnaryOp) and _is_int(node.operand)


def _writes_constants(node) -> bool:
    """A literal that writes one or more constants (not one built from the vocabularies' data)."""
    if not isinstance(node, _LITERALS):
        return False
    elts = [e for e in node.keys + node.values if e is not None] if isinstance(node, ast.Dict) else node.elts
    return any(isinstance(e, ast.Constant) for e in elts)


def vocabulary_rules(source: str, name: str = "<source>") -> list[str]:
    """``name:line: what`` for each literal in ``source`` that writes a settings vocabulary: a tuple, list or
    set (or a dict's keys or values) naming two or more values of one vocabulary (the spellings of one value
    count once: "false" and "none" are one checkpointing mode), a dict of two or more limited settings to
    integers, a literal of every sweepable setting, or a literal assigned to a name the vocabularies had."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, _LITERALS):
            groups = [node.keys, node.values] if isinstance(node, ast.Dict) else [node.elts]
            for elts in groups:
                words = set(_strings([e for e in elts if e is not None]))
                for vocabulary, spellings in SPELLINGS.items():
                    values = {spellings[w] for w in words if w in spellings}
                    if len(values) >= 2:
                        found.append(f"{where}: {vocabulary} {sorted(values)} (formulas/settings.yaml, "
                                     "formulas/vllm/profile.yaml hold the vocabularies)")
            if isinstance(node, ast.Dict):
                limited = [k for k, v in zip(node.keys, node.values)
                           if isinstance(k, ast.Constant) and k.value in LIMITED and _is_int(v)]
                if len(limited) >= 2 and all(_is_int(v) for v in node.values):
                    found.append(f"{where}: the settings' limits (formulas/settings.yaml vocabularies.limits)")
            elif SWEEPABLE <= set(_strings(node.elts)):
                found.append(f"{where}: the sweepable settings (formulas/settings.yaml vocabularies.sweepable)")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _writes_constants(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in OLD_VOCABULARY_NAMES:
                    found.append(f"{where}: {t.id} is formulas/settings.yaml's")
    return found


def test_the_detector_finds_the_shapes_the_vocabularies_had():
    # settings.py's and measure's refusals' vocabularies as they were written before formulas/settings.yaml held them
    old = '''
METHODS = ("qlora", "lora", "full", "inference")
SWEEPABLE = ("method", "batch_size", "seq_len", "lora_rank", "gradient_checkpointing", "optimizer", "attention", "loss")
_GC_ALIASES = {"none": "none", "false": "none", "off": "none", "true": "true", "on": "true", "unsloth": "unsloth"}
LIMITS = {"batch_size": 2**20, "seq_len": 2**25, "lora_rank": 2**16}
_NOT_ON_CPU = {"flash_attention_2": "CUDA only", "flex_attention": "no CPU backward"}
if settings.method not in ("lora", "qlora"):
    pass
CACHE = ("auto", "fp8")
LAYOUT = ["fused", "per_expert"]
GRAD = {"true", "unsloth"}
'''
    found = vocabulary_rules(old)
    # line 2: the methods and the name METHODS; 3: every sweepable setting (and the name); 4: the
    # spellings' keys and their modes (values), and the name; 5: the limits and the name; 6: two
    # kernels as keys, and the name; 7: the adapter methods; 9: two of vLLM's KV-cache dtypes;
    # 10: both experts layouts; 11: two checkpointing modes
    assert sorted(int(f.split(":", 2)[1]) for f in found) == [2, 2, 3, 3, 4, 4, 4, 5, 5, 6, 6, 7, 9, 10, 11], found
    # what is not a vocabulary: one value compared; the spellings of one value (a flag's true words);
    # lists of settings that are not every sweepable one; a map of settings to texts; block sizes; a
    # vocabulary's name given a value built from the data
    assert vocabulary_rules('if method == "qlora" and attention in ("sdpa",):\n    pass\n'
                            'TRUE = ("true", "1", "yes", "on")\nFALSY = (None, "none", "false", "0")\n'
                            'KEYS = ("batch_size", "seq_len", "lora_rank")\n'
                            'SHOWN = {"batch_size": str(b), "seq_len": str(s)}\nSIZES = (8, 16, 32)\n'
                            '_GC_ALIASES = {**{m: m for m in MODES}, **ALIASES}\n') == []


def test_no_engine_module_writes_a_settings_vocabulary():
    found = []
    for path in sorted(ENGINE.rglob("*.py")):
        found += vocabulary_rules(path.read_text(encoding="utf-8"), "vramwise/" + path.relative_to(ENGINE).as_posix())
    assert found == []


# The strategy setting's values, read from the strategies manifest itself: one GPU ("none") and its strategies.
_STRATEGY_MANIFEST = yaml.safe_load((FORMULAS / "strategies" / "strategies.yaml").read_text(encoding="utf-8"))
STRATEGY_VALUES = {"none"} | set(_STRATEGY_MANIFEST["strategies"])
_SEQUENCES = (ast.Tuple, ast.List, ast.Set)


def _strings_within(node) -> list[str]:
    """The strings of a tuple, list or set and of those nested in it (pairs of a strategy and an offload)."""
    out = []
    for e in node.elts:
        if isinstance(e, _SEQUENCES):
            out += _strings_within(e)
        elif isinstance(e, ast.Constant) and isinstance(e.value, str):
            out.append(e.value)
    return out


def strategy_rules(source: str, name: str = "<source>") -> list[str]:
    """``name:line: what`` for each tuple, list or set in ``source`` (with those nested in it, found once at
    the outermost) that names two or more values of the strategy setting: strategies of the manifest, or one
    of them and "none" (one GPU)."""
    tree = ast.parse(source)
    nested = {id(e) for node in ast.walk(tree) if isinstance(node, _SEQUENCES) for e in node.elts
              if isinstance(e, _SEQUENCES)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, _SEQUENCES) and id(node) not in nested:
            named = set(_strings_within(node)) & STRATEGY_VALUES
            if len(named) >= 2:
                found.append(f"{name}:{node.lineno}: strategies {sorted(named)} (formulas/strategies/strategies.yaml "
                             "says what each strategy does and which the advice proposes)")
    return found


def test_the_detector_finds_the_shapes_the_strategy_rules_had():
    # advice.py's sharding changes and one-replica strategies, and its test of the current strategy, as they
    # were written before strategies.yaml held them; measure's strategies as a literal
    old = '''
_SHARDING = (("fsdp", "none"), ("zero3", "none"), ("zero3", "optimizer"), ("zero3", "parameters"))
_ONE_REPLICA = ("none", "device_map")
if training and s.strategy not in ("fsdp", "zero3"):
    pass
STRATEGIES = ["ddp", "fsdp", "fsdp_shard_grad_op", "zero1", "zero2", "zero3"]
PARALLEL = {"ddp", "fsdp_hybrid"}
'''
    found = sorted(strategy_rules(old), key=lambda f: int(f.split(":", 2)[1]))
    # line 2: the pairs (fsdp, zero3 and "none", found once, at the outer tuple); 3: one replica; 4: the two
    # sharding strategies; 6: measure's list; 7: a set of two
    assert [int(f.split(":", 2)[1]) for f in found] == [2, 3, 4, 6, 7], found
    assert "['fsdp', 'none', 'zero3']" in found[0] and "['device_map', 'none']" in found[1]
    # what is not such a rule: one strategy compared; a strategy beside an offload that is not one;
    # "none" beside other settings' values; a strategy's name in a message
    assert strategy_rules('if strategy == "device_map" or strategy in ("fsdp",):\n    pass\n'
                          'PAIR = ("fsdp", "optimizer")\nMODES = ("none", "true", "unsloth")\n'
                          'WHY = ("world_size needs a strategy: ddp or fsdp",)\n') == []


def test_no_engine_module_names_two_strategies():
    found = []
    for path in sorted(ENGINE.rglob("*.py")):
        found += strategy_rules(path.read_text(encoding="utf-8"), "vramwise/" + path.relative_to(ENGINE).as_posix())
    assert found == []
