"""The torchtune format against torchtune itself: each fixture loaded with torchtune's own config
loader (OmegaConf, as `tune run` does), its model built by torchtune's builder on the meta device and
its loss and optimizer instantiated, then compared field by field with what vramwise read.

- LoRA rank, alpha and dropout: the built LoRALinear modules' own attributes;
- target_modules: the modules torchtune wrapped in LoRALinear, named as the Hugging Face checkpoint
  names them by torchtune's own converter (models/convert_weights.py _FROM_HF);
- method: LoRALinear modules with NF4 base weights (torchao NF4Tensor) are QLoRA, none full;
- the trainable parameters vramwise estimates: the adapters' parameters of the built model;
- loss and its chunks: the instantiated loss's class and num_output_chunks;
- batch size, sequence length, accumulation, checkpointing, offloading, compile, optimizer_in_bwd:
  read from the cfg object with the recipes' own cfg.get defaults;
- the model: every builder the format maps to a catalog model has that model's parameter count and
  RoPE length (max_position_embeddings), built on the meta device;
- each default's citation: the cited line of the installed torchtune holds the default.
"""

import functools
import importlib
import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from helpers import require_installed

# torch and torchtune are imported by the tests (torchtune imports torchao: seconds of every collection)
require_installed("torch", "torchtune")
omegaconf = pytest.importorskip("omegaconf")
yaml = pytest.importorskip("yaml")

import vramwise  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "recipes" / "torchtune"
FORMAT = REPO / "frameworks" / "torchtune.yaml"
TORCHTUNE_VERSION = "0.6.1"
SEQ = 256  # a sequence length for the estimates of recipes whose max_seq_len is null

_INSTALLED = importlib.metadata.version("torchtune")  # (its distribution's version, read without importing it)
pytestmark = pytest.mark.skipif(
    _INSTALLED.split("+")[0] != TORCHTUNE_VERSION,
    reason=f"the format's defaults are torchtune {TORCHTUNE_VERSION}'s; torchtune {_INSTALLED} is installed",
)


def _hf_names() -> dict:
    """torchtune module name -> the checkpoint's name, from torchtune's own converter."""
    from torchtune.models.convert_weights import _FROM_HF

    out = {}
    for hf, tt in _FROM_HF.items():
        if tt is None or not hf.endswith(".weight"):
            continue
        out[tt[: -len(".weight")].rsplit(".", 1)[-1]] = hf[: -len(".weight")].rsplit(".", 1)[-1]
    return out


#: torchao's NF4 conversion costs about 45 ms a projection even on the meta device (10 s for Llama 3.1
#: 8B's 224): a QLoRA builder is built at 2 layers of a small width, its LoRA and quantization arguments
#: as the recipe and the builder give them
SMALL = dict(num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=256, intermediate_dim=512, vocab_size=1024)


def _shrunk(component_builder, *args, **kwargs):
    return component_builder(*args, **{**kwargs, **SMALL})


def _built(cfg, monkeypatch, small: bool):
    """The model of ``cfg`` as torchtune's recipes build it (config.instantiate(cfg.model)), on the meta
    device; ``small``: its model builder calls a shrunk component builder (lora_llama3_1 at 2 layers)."""
    import torch
    from torchtune import config
    from torchtune.config._utils import _get_component_from_path

    if small:
        builder = _get_component_from_path(cfg.model._component_)
        module = sys.modules[getattr(builder, "func", builder).__module__]
        for name, obj in list(vars(module).items()):
            if name.startswith("lora_") and getattr(obj, "__module__", "").endswith("._component_builders"):
                monkeypatch.setattr(module, name, functools.partial(_shrunk, obj))
    with torch.device("meta"):
        return config.instantiate(cfg.model)


def _lora_modules(model) -> dict:
    from torchtune.modules.peft import LoRALinear

    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def _optimizer_name(cfg) -> str:
    """The optimizer torchtune's recipe builds (config.instantiate(cfg.optimizer, params)), named as
    vramwise names optimizers, from the instance's class and its defaults."""
    import torch
    from torchtune import config

    params = [torch.nn.Parameter(torch.zeros(4, 4))]
    opt = config.instantiate(cfg.optimizer, params)
    kind = f"{type(opt).__module__.split('.')[0]}.{type(opt).__name__}"
    if kind == "torch.AdamW":
        return "adamw_torch_fused" if opt.defaults.get("fused") else "adamw_torch"
    return {"bitsandbytes.PagedAdamW8bit": "paged_adamw_8bit", "bitsandbytes.PagedAdamW": "paged_adamw_32bit",
            "bitsandbytes.AdamW8bit": "adamw_bnb_8bit", "torch.SGD": "sgd"}[kind]


FILES = sorted(p.name for p in FIXTURES.glob("*.yaml"))


@pytest.mark.parametrize("name", FILES)
def test_fixture_matches_torchtune(name, monkeypatch):
    from torchtune import config

    path = FIXTURES / name
    cfg = omegaconf.OmegaConf.load(path)
    recipe = vramwise.read_recipe(str(path), overrides=None if cfg.tokenizer.max_seq_len else {"seq_len": SEQ})
    s = recipe.settings
    small = ".qlora_" in cfg.model._component_ or bool(cfg.model.get("quantize_base", False))
    model = _built(cfg, monkeypatch, small)
    lora = _lora_modules(model)
    if lora:
        from torchao.dtypes.nf4tensor import NF4Tensor

        nf4 = {isinstance(m.weight, NF4Tensor) for m in lora.values()}
        assert len(nf4) == 1
        assert s["method"] == ("qlora" if nf4.pop() else "lora")
        assert {m.rank for m in lora.values()} == {s["lora_rank"]}
        assert {m.alpha for m in lora.values()} == {recipe.extras["lora_alpha"]}
        # nn.Dropout(p) when dropout > 0, else nn.Identity (modules/peft/lora.py LoRALinear.__init__)
        assert {getattr(m.dropout, "p", 0.0) for m in lora.values()} == {s["lora_dropout"]}
        names = _hf_names()
        assert {names[n.rsplit(".", 1)[-1]] for n in lora} == set(s["target_modules"])
        adapters = sum(p.numel() for m in lora.values() for p in (m.lora_a.weight, m.lora_b.weight))
        if not small:
            assert vramwise.estimate(recipe).params_trainable == adapters
    else:
        assert s["method"] == "full"
    loss = config.instantiate(cfg.loss)
    assert s["loss"] == ("chunked" if type(loss).__name__ == "CEWithChunkedOutputLoss" else "standard")
    if s["loss"] == "chunked":
        assert s["loss_chunks"] == loss.num_output_chunks
    assert s["optimizer"] == _optimizer_name(cfg)
    assert s["batch_size"] == cfg.batch_size
    assert s["seq_len"] == (cfg.tokenizer.max_seq_len or SEQ)
    assert recipe.extras["gradient_accumulation_steps"] == cfg.gradient_accumulation_steps
    # the recipes' own reads (recipes/*_finetune_*.py): cfg.get(key, False)
    assert s["gradient_checkpointing"] == ("true" if cfg.get("enable_activation_checkpointing", False) else "none")
    assert s["activation_offloading"] == cfg.get("enable_activation_offloading", False)
    assert s["compile"] == cfg.get("compile", False)
    if not lora:  # only the full fine-tuning recipes read optimizer_in_bwd
        assert s["optimizer_in_bwd"] == cfg.get("optimizer_in_bwd", False)
    distributed = any(k in cfg for k in ("fsdp_cpu_offload", "fsdp_reshard_after_forward", "custom_sharded_layers"))
    # the config's header comment says how it is launched: "#   tune run [--nproc_per_node N] RECIPE --config ..."
    # (read where no launch line is given); a *_distributed recipe runs under FSDP on N processes
    header = re.search(r"(?m)^#\s+tune run (?:--nnodes \d+ )?(?:--nproc_per_node (\d+) )?(\S+)", path.read_text())
    if header is not None and header.group(2).endswith("_distributed"):
        distributed = True
        if header.group(1) is not None:
            assert s["world_size"] == int(header.group(1))
    assert (s["strategy"] != "none") == distributed
    assert s["offload"] == ("parameters" if cfg.get("fsdp_cpu_offload", False) else "none")
    assert [w for w in recipe.warnings if "unknown torchtune key" in w] == []


def _format() -> dict:
    return yaml.safe_load(FORMAT.read_text(encoding="utf-8"))


def _builder_map() -> list:
    rule = next(r for r in _format()["model"] if r.get("key") == "model._component_")
    return sorted(rule["map"].items())


def _builder(name: str):
    """The plain builder ``name`` (llama3_1_8b, qwen2_0_5b...) from its torchtune.models package: the
    longest package name it starts with (qwen2_5_3b is qwen2_5's, qwen2_0_5b qwen2's)."""
    import pkgutil

    import torchtune.models as models

    packages = sorted((m.name for m in pkgutil.iter_modules(models.__path__) if m.ispkg), key=len, reverse=True)
    pkg = next(p for p in packages if name.startswith(p + "_"))
    return getattr(importlib.import_module(f"torchtune.models.{pkg}"), name)


@pytest.mark.parametrize("builder, model_id", _builder_map())
def test_builder_map_has_the_builders_architecture(builder, model_id):
    import torch

    fn = _builder(builder)
    with torch.device("meta"):
        net = fn()
    spec = vramwise.load_model(model_id)
    assert spec.params_total == sum(p.numel() for p in net.parameters())
    assert spec.facts.get("max_position_embeddings") == net.max_seq_len


#: (the citation as the format writes it, file of the installed torchtune, 1-based line, text the line
#: holds) for each default and behaviour the format cites
CITED = [
    ("_model_builders.py:85-87", "torchtune/models/llama3_1/_model_builders.py", 86, "apply_lora_to_mlp: bool = False"),
    ("_model_builders.py:85-87", "torchtune/models/llama3_1/_model_builders.py", 87, "apply_lora_to_output: bool = False"),
    ("_model_builders.py:88", "torchtune/models/llama3_1/_model_builders.py", 88, "lora_rank: int = 8"),
    ("_model_builders.py:89", "torchtune/models/llama3_1/_model_builders.py", 89, "lora_alpha: float = 16"),
    ("_model_builders.py:90", "torchtune/models/llama3_1/_model_builders.py", 90, "lora_dropout: float = 0.0"),
    ("_model_builders.py:92", "torchtune/models/llama3_1/_model_builders.py", 92, "quantize_base: bool = False"),
    ("_model_builders.py:251", "torchtune/models/llama3_1/_model_builders.py", 251,
     "qlora_llama3_1_8b = partial(lora_llama3_1_8b, quantize_base=True)"),
    ("llama3_3/_model_builders.py:17", "torchtune/models/llama3_3/_model_builders.py", 17, "llama3_3_70b = llama3_1_70b"),
    ("ce_chunked_output_loss.py:30", "torchtune/modules/loss/ce_chunked_output_loss.py", 30, "num_output_chunks: int = 8"),
    ("lora_finetune_single_device.py:161-162", "recipes/lora_finetune_single_device.py", 162,
     '"enable_activation_checkpointing", False'),
    ("lora_finetune_single_device.py:164-165", "recipes/lora_finetune_single_device.py", 165,
     '"enable_activation_offloading", False'),
    ("lora_finetune_single_device.py:157", "recipes/lora_finetune_single_device.py", 157,
     "cfg.gradient_accumulation_steps"),
    ("lora_finetune_single_device.py:312", "recipes/lora_finetune_single_device.py", 312, "batch_size=cfg.batch_size"),
    ("full_finetune_single_device.py:160", "recipes/full_finetune_single_device.py", 161,
     '"enable_activation_checkpointing", False'),
    ("full_finetune_single_device.py:163", "recipes/full_finetune_single_device.py", 164,
     '"enable_activation_offloading", False'),
    ("full_finetune_single_device.py:143", "recipes/full_finetune_single_device.py", 143, "cfg.optimizer_in_bwd"),
    ("lora_finetune_distributed.py:170", "recipes/lora_finetune_distributed.py", 171,
     '"enable_activation_checkpointing", False'),
    ("lora_finetune_distributed.py:173", "recipes/lora_finetune_distributed.py", 174,
     '"enable_activation_offloading", False'),
    ("lora_finetune_distributed.py:272", "recipes/lora_finetune_distributed.py", 272, 'cfg.get("compile", False)'),
    ("lora_finetune_distributed.py:278", "recipes/lora_finetune_distributed.py", 278,
     'cfg.get("custom_sharded_layers", None)'),
    ("lora_finetune_distributed.py:279", "recipes/lora_finetune_distributed.py", 279,
     'cfg.get("fsdp_cpu_offload", False)'),
    ("lora_finetune_distributed.py:280", "recipes/lora_finetune_distributed.py", 280,
     'cfg.get("fsdp_reshard_after_forward", True)'),
    ("full_finetune_distributed.py:181", "recipes/full_finetune_distributed.py", 181,
     'cfg.get("optimizer_in_bwd", False)'),
    ("full_finetune_distributed.py:292", "recipes/full_finetune_distributed.py", 292, 'cfg.get("compile", False)'),
    ("full_finetune_distributed.py:199", "recipes/full_finetune_distributed.py", 200,
     '"enable_activation_checkpointing", False'),
    ("full_finetune_distributed.py:202", "recipes/full_finetune_distributed.py", 203,
     '"enable_activation_offloading", False'),
    ("full_finetune_distributed.py:138", "recipes/full_finetune_distributed.py", 138,
     'cfg.get("fsdp_cpu_offload", False)'),
    ("full_finetune_distributed.py:297", "recipes/full_finetune_distributed.py", 297,
     'cfg.get("custom_sharded_layers", None)'),
    ("full_finetune_distributed.py:299", "recipes/full_finetune_distributed.py", 299,
     'cfg.get("fsdp_reshard_after_forward", True)'),
    ("full_finetune_distributed.py:301", "recipes/full_finetune_distributed.py", 301, 'cfg.get("ac_mode", None)'),
    ("full_finetune_distributed.py:302", "recipes/full_finetune_distributed.py", 302, 'cfg.get("ac_option", None)'),
    ("full_finetune_distributed.py:152", "recipes/full_finetune_distributed.py", 152,
     'cfg.get("tensor_parallel_dim", 1)'),
    ("_distributed.py:551-552", "torchtune/training/_distributed.py", 552,
     'fsdp_kwargs["offload_policy"] = CPUOffloadPolicy()'),
    ("_distributed.py:550", "torchtune/training/_distributed.py", 550, '"reshard_after_forward": reshard_after_forward'),
    ("attention_utils.py:133-160", "torchtune/modules/attention_utils.py", 133, "def packed_block_causal_mask("),
    ("_collate.py:160", "torchtune/data/_collate.py", 160, "def padded_collate_sft("),
    ("_packed.py:178-181", "torchtune/datasets/_packed.py", 180,
     "leftover_seq_len = self.max_seq_len - sum(current_pack[\"seq_lens\"][:-1])"),
]


@pytest.mark.parametrize("citation, file, line, text", CITED)
def test_cited_lines(citation, file, line, text):
    root = Path(importlib.util.find_spec("torchtune").origin).resolve().parents[1]  # site-packages: torchtune/, its recipes/
    lines = (root / file).read_text(encoding="utf-8").splitlines()
    assert text in lines[line - 1], lines[line - 1]
    assert citation in FORMAT.read_text(encoding="utf-8"), citation
