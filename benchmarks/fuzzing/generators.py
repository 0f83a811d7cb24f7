"""Case generators, one per target, over any ``r`` with ``random()``, ``randint(a, b)`` and ``choice(seq)``.

Every choice list is ordered simplest first: hypothesis shrinks its draws toward the first entry.
"""

from __future__ import annotations

import copy
import json
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

import vramwise

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
# the bundled folders as installed (an editable install maps them to the repository's, a wheel ships copies)
FAMILIES_DIR = Path(str(resources.files("vramwise.families")))
FORMULAS_DIR = Path(str(resources.files("vramwise.formulas")))
EXAMPLE = REPO / "examples" / "llama-3.1-8b.json"

NAN, INF = float("nan"), float("inf")
HUGE_INT = 10**400
TARGETS = ("configs", "settings", "cli", "data_files")


# ---------------------------------------------------------------------------------------------
# base material: the real configs, fact names from the families
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def base_configs() -> tuple:
    """(name, config) of the bundled example and every config of ../shared/configs and configs_extra."""
    out = [("examples/llama-3.1-8b.json", json.loads(EXAMPLE.read_text()))]
    for folder in ("configs", "configs_extra"):
        d = SHARED / folder
        if d.is_dir():
            for p in sorted(d.glob("*.json")):
                try:
                    cfg = json.loads(p.read_text())
                except (OSError, ValueError):
                    continue
                if isinstance(cfg, dict):
                    out.append((f"{folder}/{p.name}", cfg))
    return tuple(out)


def _aliases(facts) -> list[str]:
    out = []
    for fact in (facts or {}).values():
        if not isinstance(fact, dict):
            continue
        for a in fact.get("aliases") or []:
            path = a.get("path") if isinstance(a, dict) else a
            if isinstance(path, str):
                out.append(path.lstrip("/"))
    return out


@lru_cache(maxsize=None)
def field_names() -> tuple:
    """Config field paths (dotted) that some family reads, plus the fields of the real configs."""
    names = set()
    for p in sorted(FAMILIES_DIR.glob("*.yaml")):
        try:
            data = yaml.load(p.read_text(), Loader=yaml.CSafeLoader)
        except Exception:  # noqa: BLE001 - a file someone is editing right now
            continue
        if isinstance(data, dict):
            names.update(_aliases(data.get("facts")))
    for _, cfg in base_configs():
        names.update(k for k, v in cfg.items() if not isinstance(v, dict))
    return tuple(sorted(names))


def chance(r, p: float) -> bool:
    """True with probability ``p``; False where hypothesis shrinks ``r.random()`` to 0 (the simpler case)."""
    return r.random() > 1 - p


# ---------------------------------------------------------------------------------------------
# hostile values
# ---------------------------------------------------------------------------------------------
SPECIAL_NUMBERS = (0, -1, 1, 2, 0.5, -0.5, 1.5, 1e308, -1e308, HUGE_INT, -HUGE_INT, NAN, INF, -INF,
                   2**31, 2**63, 2**64, 10**12, 1e12, 1e-300, 10**18)
BAD_LISTS = ([], [1, "a"], [None, None], [NAN], [-1, -1], [0], ["x"], [[1]], [{"a": 1}], [True, False],
             [HUGE_INT], [INF, 1])
ODD_STRINGS = ("", " ", "x", "llama", "NaN", "inf", "-1", "1e400", "None", "{key}", "\x00", "é", "\u2603",
               "a" * 1000, "../../etc/passwd")


def _num_like(r, current):
    if isinstance(current, bool) or not isinstance(current, (int, float)):
        return r.choice(SPECIAL_NUMBERS)
    return r.choice((0, -current, current * 1000, current + 0.5, float(current), current * 10**6,
                     -1, 1e308, HUGE_INT, NAN, INF, -INF, current * 10**300))


def hostile_value(r, current):
    """A value to put where ``current`` was: another type, an extreme, a nesting, a bad list."""
    kind = r.choice(("none", "zero", "negative", "number", "bool", "str", "float", "list", "dict", "nest",
                     "bad_list", "long_list", "odd_string"))
    if kind == "none":
        return None
    if kind == "zero":
        return 0
    if kind == "negative":
        return -abs(current) if isinstance(current, (int, float)) and not isinstance(current, bool) and current else -1
    if kind == "number":
        return _num_like(r, current)
    if kind == "bool":
        return r.choice((True, False))
    if kind == "str":
        return str(current)
    if kind == "float":
        try:
            return float(current) + r.choice((0.0, 0.5, 1e-9))
        except (TypeError, ValueError, OverflowError):
            return 0.5
    if kind == "list":
        return [current] if chance(r, 0.5) else [current, current]
    if kind == "dict":
        return {"value": current}
    if kind == "nest":
        return {"x": current} if chance(r, 0.5) else [[current]]
    if kind == "bad_list":
        return list(r.choice(BAD_LISTS))
    if kind == "long_list":
        n = r.choice((1000, 100000))
        # a scalar element: repeating a container would build a structure that no config file of
        # the bound (10 MB) can hold (100,000 references to one 100,000-element list is 10**10 values)
        elem = r.choice((1, current if not isinstance(current, (list, dict)) else 2, None, "x", -1))
        return [elem] * n
    return r.choice(ODD_STRINGS)


def plausible_value(r, name: str):
    """A value a real config might hold for ``name`` (for fields a config lacks)."""
    return r.choice((1, 2, 8, 64, 4096, 0, -1, [1, 2], None, True, "full_attention", 100000, 2**40))


# ---------------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------------
#: (profile, settings) pairs each config case is estimated with.
RUNS = (
    ("unsloth", {}),
    ("hf", {"method": "lora", "attention": "sdpa"}),
    ("unsloth", {"method": "full", "attention": "eager", "seq_len": 32768, "gradient_checkpointing": "none"}),
    ("hf", {"method": "full", "attention": "eager", "seq_len": 16384, "optimizer": "adamw_torch"}),
    ("unsloth", {"method": "inference"}),
    ("hf", {"method": "qlora", "loss": "chunked", "gradient_checkpointing": "true"}),
    ("unsloth", {"method": "lora", "target_modules": "all-linear", "lora_rank": 64}),
    ("unsloth", {"method": "inference", "load_in_4bit": True, "seq_len": 131072, "batch_size": 16}),
)

MODEL_TYPES = ("llama", None, "unknown_model", ["llama"], ["llama", "qwen3"], 7, NAN, -INF, "", {"a": 1},
               "gemma3n", "deepseek_v3", "qwen3_moe", "gemma3", "LLAMA", True, "llama " * 1000)


def _paths(cfg, prefix=(), depth=0):
    out = []
    if isinstance(cfg, dict) and depth < 3:
        for k, v in cfg.items():
            out.append(prefix + (k,))
            out.extend(_paths(v, prefix + (k,), depth + 1))
    return out


def _get(cfg, path):
    for k in path:
        cfg = cfg[k]
    return cfg


def _set(cfg, path, value):
    node = cfg
    for k in path[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[path[-1]] = value


def _delete(cfg, path):
    node = cfg
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]


QUANT_MUTATIONS = (
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True},
    {"quant_method": "bitsandbytes", "llm_int8_skip_modules": ["lm_head", "model.layers.0.mlp"]},
    {"quant_method": "bitsandbytes", "llm_int8_skip_modules": [f"model.layers.{i}.mlp" for i in range(100000)]},
    {"quant_method": "bitsandbytes", "llm_int8_skip_modules": ["x" * 100000]},
    {"quant_method": "bitsandbytes", "llm_int8_skip_modules": [None, 1, "", ".", "model..layers", "*", NAN]},
    {"quant_method": "bitsandbytes", "llm_int8_skip_modules": "lm_head"},
    {"quant_method": "bitsandbytes", "modules_to_not_convert": {"a": 1}},
    {"quant_method": "fp8"},
    {"quant_method": 5},
    {"quant_method": None, "bnb_4bit_use_double_quant": "yes"},
    {"quant_method": ["gptq"]},
    {"bnb_4bit_use_double_quant": NAN},
)


def mutate_config(r, cfg: dict) -> dict:
    """One mutation of ``cfg`` (in place; returned)."""
    op = r.choice(("set", "delete", "add", "nest", "model_type", "text_config", "quant", "set", "set"))
    paths = _paths(cfg)
    if op in ("set", "delete", "nest") and paths:
        path = r.choice(paths)
        if op == "delete":
            _delete(cfg, path)
        elif op == "nest":
            v = _get(cfg, path)
            _set(cfg, path, {path[-1]: v} if chance(r, 0.5) else [v])
        else:
            _set(cfg, path, hostile_value(r, _get(cfg, path)))
    elif op == "add" or (op in ("set", "delete", "nest") and not paths):
        name = r.choice(field_names() or ("hidden_size",))
        value = plausible_value(r, name) if chance(r, 0.5) else hostile_value(r, 1)
        _set(cfg, tuple(name.split(".")), value)
    elif op == "model_type":
        target = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) and chance(r, 0.3) else cfg
        target["model_type"] = copy.deepcopy(r.choice(MODEL_TYPES))
    elif op == "text_config":
        choice = r.choice(("inner", "odd", "wrap"))
        tc = cfg.get("text_config")
        if choice == "inner" and isinstance(tc, dict) and tc:
            path = r.choice(_paths(tc))
            _set(tc, path, hostile_value(r, _get(tc, path)))
        elif choice == "wrap" or (choice == "inner"):
            cfg = {"model_type": r.choice(("gemma3", "llava", "unknown_vlm", None)), "text_config": cfg}
        else:
            cfg["text_config"] = copy.deepcopy(r.choice(([], "llama", None, {}, {"model_type": NAN}, [cfg.get("hidden_size")], 5)))
    else:
        q = copy.deepcopy(r.choice(QUANT_MUTATIONS))
        if chance(r, 0.3) and isinstance(cfg.get("quantization_config"), dict):
            cfg["quantization_config"].update(q)
        else:
            cfg["quantization_config"] = q
    return cfg


def gen_configs(r) -> dict:
    """A real config with 1-4 mutations, estimated under one or two (profile, settings) runs."""
    name, cfg = r.choice(base_configs())
    cfg = copy.deepcopy(cfg)
    for _ in range(r.randint(1, 4)):
        cfg = mutate_config(r, cfg)
    picks = [r.randint(0, len(RUNS) - 1)]
    if chance(r, 0.5):
        picks.append(r.randint(0, len(RUNS) - 1))
    runs = [[RUNS[i][0], copy.deepcopy(RUNS[i][1])] for i in dict.fromkeys(picks)]
    return {"base": name, "config": cfg, "runs": runs}


# ---------------------------------------------------------------------------------------------
# settings
# ---------------------------------------------------------------------------------------------
INT_VALUES = (4, 1, 2048, 32768, 0, -1, 10**6, 10**9, HUGE_INT, INF, NAN, 2.0, 2.5, 1e400, "4", True, False,
              None, 2**63, 10**18, [4], -HUGE_INT, 1e20)
STR_VALUES = ("", " ", "bogus", "\x00", "x" * 100000, None, 1, 0, True, NAN, ["a"], {"a": 1}, b"bytes")
TARGET_VALUES = (None, "q_proj", "all-linear", "all_linear", ",", ["q_proj", 1], [], [""], ("q_proj",),
                 "q_proj,,v_proj", {"a": 1}, 5, [f"m{i}" for i in range(10000)], ["q_proj"] * 3, "Q_PROJ",
                 [None], "lm_head", "embed_tokens", "gate", "experts")
DROPOUT_VALUES = (0.0, 0.1, 0.999, 1, 1.0, -0.1, NAN, INF, "0.1", True, HUGE_INT, None, 1e-300, -0.0)
PROFILE_VALUES = ("unsloth", "hf", "size_only", "HF", "bogus", "../formulas/hf", ["hf"], None, 1, "", "hf/",
                  " unsloth", "__init__", "__pycache__", "profile.yaml", NAN)


def setting_value(r, s):
    """A value for setting ``s`` of :data:`vramwise.SETTINGS`: valid, a variant, or hostile."""
    if s.name == "target_modules":
        return copy.deepcopy(r.choice(TARGET_VALUES))
    if s.name == "lora_dropout":
        return r.choice(DROPOUT_VALUES)
    if s.cli_type == "int":
        return r.choice(INT_VALUES)
    if s.cli_type == "bool":
        return r.choice((None, True, False, "true", 1, 0, "false", NAN))
    known = tuple(s.choices) + {
        "optimizer": ("adamw_8bit", "adamw_torch", "ADAMW-TORCH", "sgd", "paged_adamw_32bit", "adafactor", "lion"),
        "attention": ("flash_attention_2", "sdpa", "eager", "flex_attention", "EAGER", "paged_attention", "bogus"),
        "gradient_checkpointing": (True, False, "false", "off", "1", "yes"),
    }.get(s.name, ())
    if chance(r, 0.6) and known:
        v = r.choice(known)
        if isinstance(v, str) and chance(r, 0.2):
            v = r.choice((v.upper(), f"  {v} ", v.replace("_", "-")))
        return v
    return copy.deepcopy(r.choice(STR_VALUES))


SIZE_VALUES = (8e9, 1, 0.4, 0.5, 1.5, NAN, INF, -INF, 1e400, HUGE_INT, -1, 0, "8e9", True, None, 1e308, 2**63,
               1e30, 10**12, 7, -0.0, [8e9], 1e-300)

SETTINGS_MODELS = (
    "examples/llama-3.1-8b.json",
)


VALID = {
    "method": ("qlora", "lora", "full", "inference"),
    "batch_size": (1, 2, 4, 8, 64),
    "seq_len": (1, 512, 2048, 8192, 32768, 131072),
    "lora_rank": (1, 8, 16, 64, 256),
    "target_modules": (None, "q_proj", "all-linear", ("q_proj", "v_proj"), ["gate_proj", "down_proj"]),
    "gradient_checkpointing": ("unsloth", "none", "true", True, False),
    "optimizer": ("adamw_8bit", "adamw_torch", "adamw_torch_fused", "sgd", "paged_adamw_32bit"),
    "attention": ("flash_attention_2", "sdpa", "eager", "flex_attention"),
    "load_in_4bit": (None, True, False),
    "loss": ("standard", "chunked", "fused"),
    "lora_dropout": (0.0, 0.05, 0.1),
    "strategy": ("none", "ddp", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "zero1", "zero2", "zero3", "device_map"),
    "world_size": (1, 2, 3, 8, 64, 1024, 65536),
    "offload": ("none", "optimizer", "parameters"),
    "gpus_per_node": (1, 4, 8, 1024),
}


def gen_settings(r) -> dict:
    """Random values for the settings of ``vramwise.SETTINGS``: each unset, valid or (for up to two) hostile."""
    settings = {}
    names = [s.name for s in vramwise.SETTINGS]
    hostile = {r.choice(names) for _ in range(r.randint(0, 2))}
    for s in vramwise.SETTINGS:
        if s.name in hostile:
            settings[s.name] = setting_value(r, s)
        elif chance(r, 0.5) and s.name in VALID:
            settings[s.name] = copy.deepcopy(r.choice(VALID[s.name]))
    if chance(r, 0.05):
        settings["bogus_setting"] = 1
    if chance(r, 0.75):
        cfgs = base_configs()
        name, cfg = cfgs[0] if chance(r, 0.5) else r.choice(cfgs)
        case = {"kind": "estimate", "base": name, "config": copy.deepcopy(cfg), "settings": settings}
        if chance(r, 0.6):
            case["profile"] = r.choice(PROFILE_VALUES)
        elif settings.get("strategy") not in (None, "none") and chance(r, 0.8):
            case["profile"] = "hf"  # the profile the strategies are modelled on
        return case
    settings.pop("target_modules", None) if chance(r, 0.5) else None
    case = {"kind": "from_size", "settings": settings}
    which = r.choice(("params", "weight_bytes", "both"))
    if which in ("params", "both"):
        case["params"] = r.choice(SIZE_VALUES)
    if which in ("weight_bytes", "both"):
        case["weight_bytes"] = r.choice(SIZE_VALUES)
    if chance(r, 0.05):
        case["settings"]["profile"] = r.choice(PROFILE_VALUES)
    return case


# ---------------------------------------------------------------------------------------------
# cli
# ---------------------------------------------------------------------------------------------
FILE_KINDS = ("config", "config_mut", "non_utf8", "utf16", "utf8_bom", "huge_int", "deep_list", "deep_dict", "empty",
              "folder", "folder_config_dir", "folder_weights", "folder_index_deep", "folder_index_bad", "not_object",
              "big", "binary", "symlink_loop", "unreadable", "folder_with_config")

FLAGS = (
    ("--json", None),
    ("--method", ("qlora", "lora", "full", "inference", "bogus", "", "QLoRA")),
    ("--batch-size", ("4", "0", "-1", "abc", "1e3", "9" * 400, "", "2.5", "nan", "99999999999999999999")),
    ("--seq-len", ("2048", "0", "-5", "x", "1" + "0" * 30, "131072", "1e9")),
    ("--lora-rank", ("16", "0", "-1", "many", "1" + "0" * 400)),
    ("--target-modules", ("q_proj", "all-linear", ",", "", "x" * 300, "q_proj,,v_proj")),
    ("--gradient-checkpointing", ("none", "true", "unsloth", "maybe", "", "1")),
    ("--optimizer", ("adamw_8bit", "adamw-torch", "sgd", "adafactor", "", " ")),
    ("--attention", ("sdpa", "eager", "flash_attention_2", "bogus", "")),
    ("--load-in-4bit", ("true", "false", "maybe", "")),
    ("--profile", ("hf", "unsloth", "size_only", "bogus", "../formulas/hf", "", "__pycache__")),
    ("--lora-dropout", ("0.1", "nan", "inf", "-1", "1", "x", "1e400")),
    ("--loss", ("standard", "chunked", "fused", "bogus")),
    ("--params", ("8e9", "nan", "inf", "-inf", "1e400", "0.4", "-1", "abc", "0", "1e308")),
    ("--weight-bytes", ("16e9", "nan", "inf", "1e400", "0.4", "-1", "x", "1e308")),
    ("--gpus", ("1,2", "0", "", "a", "-1", "99999999999999999999", "1,,2", "1,1", "0,2")),
    ("--strategy", ("fsdp", "ddp", "zero3", "device_map", "fsdp_hybrid", "none", "zero4", "", "FSDP")),
    ("--world-size", ("8", "1", "0", "-2", "65536", "65537", "x", "1e3")),
    ("--offload", ("none", "optimizer", "parameters", "disk", "")),
    ("--gpus-per-node", ("8", "0", "3", "1024", "1025")),
    ("--trust-remote-code", None),
    ("--bogus", None),
    ("-x", None),
    ("--method=lora", None),
    ("--steps", ("2", "abc", "-1")),
    ("--device", ("cpu", "tpu")),
    ("--version", None),
    ("--help", None),
)
COMMANDS = ("estimate", "explain", "select", "families", "gpus", "check", "measure", "", "bogus", "--version")
MODELS = ("@f0", "@f0", "@f1", "/nonexistent/config.json", "a" * 300 + "/config.json", "org/model-name", "",
          "-", "@f0/config.json", "meta-llama/Llama-3.1-8B", "./", "/")
#: argparse fragments that make ``measure`` fail before any model is built
MEASURE_STOPPERS = (["--device", "tpu"], ["--steps", "abc"], ["--method", "bogus"], ["--batch-size", "x"],
                    ["--bogus-flag"])


def gen_file(r) -> dict:
    kind = r.choice(FILE_KINDS)
    spec = {"kind": kind}
    if kind in ("deep_list", "deep_dict", "folder_index_deep"):
        spec["n"] = r.choice((100000, 1000, 10000))
    elif kind == "huge_int":
        spec["n"] = r.choice((5000, 400, 100000))
    elif kind == "big":
        spec["n"] = r.choice((1, 5, 9))  # MB
    elif kind == "config_mut":
        spec["config"] = gen_configs(r)["config"]
    elif kind == "folder_index_bad":
        spec["total_size"] = r.choice(("abc", -5, NAN, HUGE_INT, [1], None, 0, 1e400, True, 2**70))
    elif kind == "not_object":
        spec["text"] = r.choice(("[1, 2]", '"x"', "3", "null", "NaN", "{", "{}", "{\"model_type\": \"llama\"}"))
    return spec


def gen_cli(r) -> dict:
    """argv for ``vramwise.cli.main`` from fragments, with bad files written to a temporary folder."""
    cmd = r.choice(COMMANDS)
    argv = [cmd] if cmd else []
    files = {"f0": gen_file(r)}
    if chance(r, 0.3):
        files["f1"] = gen_file(r)
    if cmd in ("estimate", "explain", "select", "measure") and chance(r, 0.9):
        argv.append(r.choice(MODELS))
    for _ in range(r.randint(0, 4)):
        flag, values = r.choice(FLAGS)
        argv.append(flag)
        if values is not None and chance(r, 0.93):  # otherwise the value is missing
            argv.append(r.choice(values))
    if "measure" in argv:
        argv += list(r.choice(MEASURE_STOPPERS))
    return {"argv": argv, "files": files}


# ---------------------------------------------------------------------------------------------
# data files
# ---------------------------------------------------------------------------------------------
EXPR_KEYS = {"expr", "derive", "when", "then", "else", "repeat"}
TEMPLATE_KEYS = {"unknown_warning", "message"}


def data_files() -> tuple:
    """Relative paths of the bundled family and formula files."""
    fams = [f"families/{p.name}" for p in sorted(FAMILIES_DIR.glob("*.yaml"))]
    forms = [f"formulas/{p.parent.name}/{p.name}" for p in sorted(FORMULAS_DIR.glob("*/*.yaml"))]
    return tuple(fams + forms)


def bundled_text(rel: str) -> str:
    folder, _, name = rel.partition("/")
    return ((FAMILIES_DIR if folder == "families" else FORMULAS_DIR) / name).read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def _spans(rel: str) -> dict:
    """Character spans of the scalars of a bundled file: expressions, templates, numbers, any value."""
    text = bundled_text(rel)
    out = {"expr": [], "template": [], "number": [], "value": []}
    try:
        root = yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return out

    def walk(node, key, in_shape):
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                walk(v, k.value if isinstance(k, yaml.ScalarNode) else None, False)
                if isinstance(k, yaml.ScalarNode) and k.value == "shape" and isinstance(v, yaml.SequenceNode):
                    for item in v.value:
                        walk(item, "shape", True)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item, key, False)
        elif isinstance(node, yaml.ScalarNode):
            span = (node.start_mark.index, node.end_mark.index)
            if node.style in (">", "|") and text[span[1] - 1:span[1]] == "\n":
                span = (span[0], span[1] - 1)
            out["value"].append(span)
            if key in EXPR_KEYS or in_shape:
                out["expr"].append(span)
            if key in TEMPLATE_KEYS:
                out["template"].append(span)
            if node.tag.endswith((":int", ":float")):
                out["number"].append(span)

    walk(root, None, False)
    return {k: tuple(v) for k, v in out.items()}


SIZED = ("long_sum", "unary", "parens", "nested_calls")


def sized_expression(kind: str, n: int) -> str:
    """The expressions whose size is a parameter (the minimiser shrinks ``n``)."""
    if kind == "long_sum":
        return " + ".join(["1"] * n)
    if kind == "unary":
        return "-" * n + "1"
    if kind == "parens":
        return "(" * n + "1" + ")" * n
    return "max(" * n + "1" + ", 2)" * n


def hostile_expression(r, original: str, n: int | None = None) -> tuple[str, dict]:
    """An expression to put in place of ``original`` (and the recipe, with its size ``n``)."""
    kind = r.choice(("long_sum", "unary", "parens", "power", "repeat_str", "attr", "big_literal", "float_special",
                     "token_soup", "nested_calls"))
    n = n if n is not None else r.choice((100000, 1000, 10000))
    if kind in SIZED:
        e = sized_expression(kind, n)
    elif kind == "power":
        e = r.choice(("4000000**4000000", "2**4000000", "10**10**10", "(2**62)**(2**62)", "9**9**9", "2**-4000000",
                      "(-8)**0.5", "0**-1", "4000000**4000000 // 1"))
    elif kind == "repeat_str":
        e = r.choice(('"a" * 10**9', '"ab" * 4000000', '"a" * 99999 * 99999', '"a" + "b" * 100000',
                      '"%s" % "x"', '"{}" % 1', 'lower("x") * 10**6'))
    elif kind == "attr":
        e = r.choice(("hidden_size.__class__", "(1).__class__.__mro__", "__import__('os')", "lower.__globals__",
                      "min.__self__", "hidden_size.real", "[].__class__", "().__class__", "{}.keys()",
                      "(lambda: 1)()", "[x for x in (1,)]", "hidden_size[0:1]", "a := 1", "hidden_size ^ 2"))
    elif kind == "big_literal":
        e = "9" * r.choice((5000, 400, 100000))
    elif kind == "float_special":
        e = r.choice(("1e400", "1e308 * 10", "-1e400 + 1e400", "1 / 0", "1 % 0", "1e308 ** 2", "0.0 / 0.0",
                      "-1", "-1e30", "0.5", "True", "None", "'str'", "1e-400"))
    else:
        e = original
        tokens = (" ", "(", ")", "+", "-", "*", "**", "/", "//", "%", ".", "[", "]", ",", ":", "'", '"', "0", "1e400",
                  "nan", "inf", "__class__", "lambda", "if", "else", "and", "not", "in", "is", "==", "<", "max(",
                  "min(", "len(", "at(", "layers_sum(", "ceil(", "int(", "i", "None", "-1", "10**9")
        for _ in range(r.randint(1, 5)):
            pos = r.randint(0, len(e))
            op = r.choice(("insert", "delete", "replace"))
            tok = r.choice(tokens)
            if op == "insert" or not e:
                e = e[:pos] + tok + e[pos:]
            elif op == "delete":
                e = e[:pos] + e[pos + 1 + r.randint(0, 5):]
            else:
                e = e[:pos] + tok + e[pos + 1:]
        return e, {"kind": kind}
    return e, {"kind": kind, "n": n}


YAML_VALUES = (".nan", ".inf", "-.inf", "1e400", "~", "[1, 2]", "{a: 1}", "true", "-5", "9" * 5000, "'a string'",
               "&a [*a]", "&b {k: *b}", "-1e308", "0", "''", "!!binary aGVsbG8=", "!!python/object:os.system {}")
TEMPLATES = ("{key.__class__}", "{key.__class__.__mro__[1].__subclasses__}", "{key:>2000000000}", "{0}", "{}",
             "{key!r:>100000000}", "{default.__class__.__init__.__globals__}", "{unknown}", "{{", "}", "{key[0]}",
             "{checkpoint_quant_method.__class__}", "{checkpoint_quant_method:>2000000000}", "{key!s:.^999999999}",
             "{0.__class__}", "%s %d", "{key}", "plain text")


def billion_laughs(levels: int, width: int = 9) -> str:
    parts = ["&l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        parts.append(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "[" + ", ".join(parts) + "]"


def _splice(text: str, span: tuple, new: str) -> str:
    return text[:span[0]] + new + text[span[1]:]


def materialise_data_file(recipe: dict) -> str:
    """The text of ``recipe['path']`` (bundled) with the recipe's replacement spliced in."""
    text = bundled_text(recipe["path"])
    span = tuple(recipe["span"]) if recipe.get("span") is not None else None
    kind = recipe["kind"]
    if kind == "expression":
        new = json.dumps(recipe["expression"])
    elif kind in ("yaml_value", "template"):
        new = recipe["value"]
    elif kind == "alias_bomb":
        new = billion_laughs(recipe["n"])
    else:  # raw text prefix (e.g. an anchor table before the document)
        return recipe["value"] + text
    return _splice(text, span, new) if span else text


def _probe(r, rel: str) -> dict:
    """A config and runs that exercise the file ``rel``."""
    if rel.startswith("formulas/size_only") or rel == "families/size_only.yaml":
        return {"kind": "from_size", "params": r.choice((8e9, 1e6)), "runs": [["size_only", {}]]}
    cfg = None
    if rel.startswith("families/"):
        try:
            data = yaml.load(bundled_text(rel), Loader=yaml.CSafeLoader)
        except yaml.YAMLError:
            data = None
        examples = [ex.get("config") for ex in (data or {}).get("examples") or [] if isinstance(ex, dict)]
        examples = [c for c in examples if isinstance(c, dict)]
        if examples:
            cfg = copy.deepcopy(r.choice(examples))
    if cfg is None:
        cfg = copy.deepcopy(r.choice(base_configs()[:1] + tuple(c for c in base_configs() if c[1].get("model_type") in (
            "qwen3_moe", "deepseek_v3", "gemma3", "gemma3n"))[:4])[1])
    if chance(r, 0.3):
        cfg["quantization_config"] = {"quant_method": "bitsandbytes", "llm_int8_skip_modules": ["lm_head", "model.layers.0.mlp"]}
    elif chance(r, 0.2):
        cfg["quantization_config"] = {"quant_method": "fp8"}
    profile = rel.split("/")[1] if rel.startswith("formulas/") else None
    runs = [list(x) for x in RUNS if profile is None or x[0] == profile] or [[profile, {}]]  # a profile RUNS lacks: its defaults
    chosen = [r.choice(runs)]
    if chance(r, 0.3):
        chosen.append([profile or r.choice(("unsloth", "hf")), {"optimizer": "adafactor"}])
    return {"kind": "estimate", "config": cfg, "runs": chosen}


def gen_data_files(r) -> dict:
    """A bundled family or formula file with one hostile change, loaded through ``Registry(dirs)``."""
    files = data_files()
    rel = r.choice(files)
    spans = _spans(rel)
    what = r.choice(("expression", "yaml_value", "template", "alias_bomb", "alias_self", "number"))
    recipe = {"path": rel}
    if what == "template" and not spans["template"]:
        what = "expression"
        rel = r.choice(("formulas/unsloth/optimizer.yaml", "formulas/hf/optimizer.yaml", "families/decoder.yaml"))
        recipe["path"], spans = rel, _spans(rel)
        what = "template"
    if what == "expression" and spans["expr"]:
        span = r.choice(spans["expr"])
        original = bundled_text(rel)[span[0]:span[1]]
        expr, how = hostile_expression(r, original.strip().lstrip(">-|").strip())
        recipe.update(kind="expression", span=list(span), expression=expr, how=how)
    elif what == "template" and spans["template"]:
        recipe.update(kind="template", span=list(r.choice(spans["template"])), value=json.dumps(r.choice(TEMPLATES)))
    elif what == "alias_bomb" and spans["value"]:
        recipe.update(kind="alias_bomb", span=list(r.choice(spans["value"])), n=r.choice((9, 3, 6, 12)))
    elif what == "alias_self" and spans["value"]:
        recipe.update(kind="yaml_value", span=list(r.choice(spans["value"])), value=r.choice(("&a [*a]", "&b {k: *b}")))
    elif what == "number" and spans["number"]:
        recipe.update(kind="yaml_value", span=list(r.choice(spans["number"])), value=r.choice(YAML_VALUES))
    elif spans["value"]:
        recipe.update(kind="yaml_value", span=list(r.choice(spans["value"])), value=r.choice(YAML_VALUES))
    else:
        recipe.update(kind="prefix", value="x: &x [*x]\n")
    probe = _probe(r, recipe["path"])
    if recipe["kind"] == "template":  # make the template fire
        probe.setdefault("config", {}).setdefault("quantization_config", {"quant_method": "fp8"}) \
            if probe["kind"] == "estimate" else None
        if probe["kind"] == "estimate":
            probe["config"]["quantization_config"] = {"quant_method": "fp8"}
            prof = recipe["path"].split("/")[1] if recipe["path"].startswith("formulas/") else "unsloth"
            probe["runs"] = [[prof, {"optimizer": "adafactor"}]]
    return {"path": recipe["path"], "text": materialise_data_file(recipe), "recipe": recipe, "probe": probe}


GENERATORS = {"configs": gen_configs, "settings": gen_settings, "cli": gen_cli, "data_files": gen_data_files}
