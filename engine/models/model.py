"""The types of a resolved model: modules with exact shapes, layer classes, the inventory totals.

:class:`ModelSpec` is what every profile is evaluated on (built by
:func:`vramwise.models.resolve.resolve_model`). Layers with identical attributes form one
:class:`LayerClass` with its indices, so the cost of an estimate grows with the number of
distinct layer kinds, not with the number of layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from math import prod
from typing import Any, Iterable, Iterator, Mapping

from vramwise.models.facts import FactOrigin
from vramwise.models.family import Family
from vramwise.models.lora import LORA_NAMES, NO_ADAPTERS, LoraSums, peft_sums, unsloth_sums
from vramwise.models.plan import _hashable  # noqa: F401 - the layer plan's grouping key, importable from here too

__all__ = ["Module", "LayerClass", "ModelSpec", "Inventory", "LoraSums", "FactOrigin", "module_groups",
           "AGGREGATE_NAMES", "INVENTORY_NAMES", "stored_inventory", "LORA_NAMES", "NO_ADAPTERS", "INVENTORY_DOCS"]


@dataclass(frozen=True)
class Module:
    """One module with exact shapes. ``path`` holds ``{i}`` for layer modules."""

    name: str
    kind: str
    group: str
    path: str
    shape: tuple
    bias: bool
    quantizable: bool
    lora_parts: tuple  # ((target, in, out, count, explicit_only), ...); a linear also answers to its own name, whole
    repeat: int = 1  # identical copies, numbered by {j} in the path
    input: str | None = None  # the tensor it reads, named where modules of a layer share one (None: its own)

    @property
    def weight_params(self) -> int:
        return self.repeat * prod(self.shape)

    @property
    def bias_params(self) -> int:
        return self.repeat * self.shape[0] if self.bias else 0

    def paths(self, i: int | None = None) -> list[str]:
        """Concrete path of each copy (layer index ``i`` filled in for a layer module)."""
        path = self.path if i is None else self.path.replace("{i}", str(i))
        if self.repeat == 1 and "{j}" not in path:
            return [path]
        return [path.replace("{j}", str(j)) for j in range(self.repeat)]

    @property
    def params(self) -> int:
        return self.weight_params + self.bias_params

    @property
    def in_features(self) -> int:
        return self.shape[-1]

    @property
    def out_features(self) -> int:
        return self.shape[0]


@dataclass(frozen=True)
class LayerClass:
    """Layers that share every attribute, hence every module shape."""

    indices: tuple
    attributes: Mapping[str, Any]
    modules: tuple  # of Module

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def params(self) -> int:
        return sum(m.params for m in self.modules)


def module_groups(model_modules: tuple, layer_classes: tuple) -> Iterator[tuple[int, Any, tuple]]:
    """The model's modules as (copies, layer indices or None for model-level modules, modules)."""
    yield 1, None, model_modules
    for lc in layer_classes:
        yield lc.count, lc.indices, lc.modules


@dataclass(frozen=True)
class Inventory:
    """The totals of a resolved model that formula files may read, defined here once.

    Each field is a formula name; its metadata says what it counts.
    """

    params_total: int = field(metadata={"doc": "every parameter, tied weights counted once"})
    quantizable_params: int = field(metadata={"doc": "weights a 4-bit load quantizes (linear layers, experts)"})
    linear_quantizable_params: int = field(metadata={"doc": "quantizable weights of nn.Linear modules"})
    non_quantizable_params: int = field(metadata={"doc": "every other parameter (embeddings, norms, biases, ...)"})
    skipped_quantizable_params: int = field(metadata={"doc": "quantizable weights the checkpoint's skip list keeps in 16 bit (a short entry such as self_attn or layers.2 also matching inside a module path, as transformers before 5 and Unsloth Studio's estimator read it)"})
    skipped_quantizable_params_v5: int = field(metadata={"doc": "the same as transformers 5 reads the skip list: a short entry matches only at the start or the end of a module path"})
    checkpoint_bytes: int | None = field(metadata={"doc": "bytes of the weights stored beside the config (of a GGUF file: its tensors'), when known"})
    num_layers: int = field(metadata={"doc": "layers of the model"})
    layers_params: int = field(default=0, metadata={"doc": "parameters of the decoder layers (the rest is the root: embeddings, final norm, head)"})
    largest_layer_params: int = field(default=0, metadata={"doc": "parameters of the largest decoder layer (an FSDP / ZeRO-3 unit)"})
    largest_layer_quantizable_params: int = field(default=0, metadata={"doc": "quantizable weights of the largest decoder layer"})
    largest_layer_linear_quantizable_params: int = field(default=0, metadata={"doc": "quantizable nn.Linear weights of the largest decoder layer"})
    largest_module_params: int = field(default=0, metadata={"doc": "parameters of the largest single module (what ZeRO-3 gathers at once)"})
    embedding_params: int = field(default=0, metadata={"doc": "parameters of the token embeddings (module group embeddings)"})
    head_params: int = field(default=0, metadata={"doc": "parameters of the output head (module group lm_head; 0 when tied)"})
    norm_params: int = field(default=0, metadata={"doc": "parameters of the norms (module group norms)"})
    router_params: int = field(default=0, metadata={"doc": "parameters of the mixture-of-experts routers (module group router)"})
    checkpoint_quantized_params: int = field(default=0, metadata={"doc": "parameters (weights and biases) of the modules a quantized checkpoint stores quantized (formulas/checkpoint_formats.yaml)"})
    checkpoint_quantized_bytes: int = field(default=0, metadata={"doc": "bytes those modules take in the checkpoint: packed weights, scales, zero points, indices, biases"})
    checkpoint_quantized_head_params: int = field(default=0, metadata={"doc": "the output head's share of checkpoint_quantized_params"})
    checkpoint_quantized_head_bytes: int = field(default=0, metadata={"doc": "the output head's share of checkpoint_quantized_bytes"})
    checkpoint_as_stored: bool = field(default=False, metadata={"doc": "the checkpoint is loaded as it is stored (a GGUF file): checkpoint_bytes is the weights' own bytes, each tensor by its type"})
    stored_layer_bytes_from: tuple = field(default=(0,), metadata={"doc": "a checkpoint loaded as stored (a GGUF file): item i is the bytes of its repeating layers i to the last (blk.i.* onwards), the last item 0; index it by the first layer a runtime offloads"})
    stored_embedding_bytes: int = field(default=0, metadata={"doc": "a checkpoint loaded as stored: bytes of its input layer (token_embd.*)"})
    stored_output_bytes: int = field(default=0, metadata={"doc": "a checkpoint loaded as stored: bytes of its output layer (output.weight, output_norm.*: every tensor outside the repeating layers and the token embedding)"})
    stored_vocab_tokens: int = field(default=0, metadata={"doc": "a checkpoint loaded as stored: its tokenizer's tokens (a GGUF's tokenizer.ggml.tokens), llama.cpp's n_vocab"})
    stored_duplicated_output_bytes: int = field(default=0, metadata={"doc": "a checkpoint loaded as stored without output.weight: the token embedding's bytes, which llama.cpp loads a second time as the output layer (TENSOR_DUPLICATED)"})

    def names(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def stored_inventory(placement, n_layers: int) -> dict:
    """The inventory fields of a checkpoint loaded as stored, from its tensors' bytes by where a runtime places
    them (:class:`~vramwise.inputs.gguf.GGUFPlacement`): the repeating layers' bytes as suffix sums over
    ``n_layers`` layers (tensors of layers past the model's count join the output layer's)."""
    layers = list(placement.layer_bytes[:n_layers]) + [0] * max(0, n_layers - len(placement.layer_bytes))
    extra = sum(placement.layer_bytes[n_layers:])
    suffix = [0] * (n_layers + 1)
    for i in range(n_layers - 1, -1, -1):
        suffix[i] = suffix[i + 1] + layers[i]
    return {"stored_layer_bytes_from": tuple(suffix), "stored_embedding_bytes": placement.embedding_bytes,
            "stored_output_bytes": placement.output_bytes + extra,
            "stored_duplicated_output_bytes": placement.duplicated_output_bytes,
            "stored_vocab_tokens": placement.vocab_tokens}


#: Formula names of the inventory (the LoRA sums: :data:`vramwise.models.lora.LORA_NAMES`).
INVENTORY_NAMES = tuple(f.name for f in fields(Inventory))
AGGREGATE_NAMES = frozenset(INVENTORY_NAMES + LORA_NAMES)
INVENTORY_DOCS = {f.name: f.metadata["doc"] for f in fields(Inventory)}


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """A model resolved against its family: what every estimate is computed from."""

    family: str
    family_file: str
    model_type: str | None
    facts: Mapping[str, Any]
    num_layers: int
    layer_classes: tuple
    model_modules: tuple
    warnings: tuple = ()
    origin: str = ""  # where the config was read from ("mapping", a path, "catalog:<id>", ...)
    # where PEFT moves LoRA targets onto parameters for this model type (family data, resolved once)
    peft_target_parameters: Mapping[str, str] = field(default_factory=dict)
    compiled_family: Family | None = field(default=None, repr=False)  # the Family it was resolved with (``family`` is its name)
    fact_origins: Mapping[str, "FactOrigin"] = field(default_factory=dict, repr=False)  # where each fact came from
    inventory: Inventory | None = None
    params_by_group: Mapping[str, int] = field(default_factory=dict)
    checkpoint_format: str | None = None  # the quantized checkpoint's format (formulas/checkpoint_formats.yaml), or one loaded as stored ("GGUF Q4_K_M")

    @property
    def params_total(self) -> int:
        return self.inventory.params_total

    @property
    def source(self) -> str:
        """Where the config was read from (the former name of :attr:`origin`)."""
        return self.origin

    @property
    def rules(self) -> Family | None:
        """The compiled family (the former name of :attr:`compiled_family`)."""
        return self.compiled_family

    @property
    def aggregates(self) -> Mapping[str, Any]:
        """Inventory totals offered to formula files (see :class:`Inventory`)."""
        return self.inventory.names()

    def module_groups(self) -> Iterator[tuple[int, Any, tuple]]:
        """(copies, layer indices or None for model-level modules, modules) for every group of modules."""
        return module_groups(self.model_modules, self.layer_classes)

    def modules(self) -> Iterable[tuple[str, Module]]:
        """Every module copy with its concrete path (layer modules once per layer index)."""
        for _, indices, mods in self.module_groups():
            for i in (indices if indices is not None else (None,)):
                for m in mods:
                    for path in m.paths(i):
                        yield path, m

    def module_params(self) -> dict[str, int]:
        """Parameter count per module path (weights plus bias, one copy)."""
        return {path: m.params // m.repeat for path, m in self.modules()}

    def lora_sums(self, targets: frozenset, explicit: frozenset = frozenset()) -> LoraSums:
        """The adapters ``targets`` put on the model under the unsloth convention (see
        :func:`vramwise.models.lora.unsloth_sums`)."""
        return unsloth_sums(self.module_groups(), targets, explicit)

    def peft_lora_sums(self, targets: frozenset) -> LoraSums:
        """The adapters PEFT itself puts on the model for ``targets`` (see :func:`vramwise.models.lora.peft_sums`)."""
        return peft_sums(self.module_groups(), self.peft_target_parameters, targets)
