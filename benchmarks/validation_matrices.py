"""The validation matrices: the cells `vramwise measure` runs on a CPU against `vramwise estimate`, and the
limits every cell and the median of the cells must meet.

They are the ground truth of the accuracy claims: tests/measured asserts them (every cell within
``CELL_LIMIT`` of the measured peak, the median within ``MEDIAN_LIMIT``) and benchmarks/accuracy.py writes
docs/accuracy.md from the same cells. Four matrices, each a :class:`Matrix`:

- ``HF``: transformers + PEFT + bitsandbytes against the hf profile (199 cells);
- ``TORCHTUNE``: torchtune's own model builders, loss and step against the torchtune profile (94 cells);
- ``LITGPT``: LitGPT's own model, LoRA and chunked loss against the litgpt profile (84 cells);
- ``STRATEGIES``: DDP and FSDP2 in gloo processes against the hf profile's per-rank strategies (30 cells).

A cell is a tuple whose first element names its config; :meth:`Matrix.settings` turns it into the
settings both ``measure`` and ``estimate`` take. The small configs keep their models' real vocabularies,
so the logits and embeddings have their true size while a step stays cheap on a CPU.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any, Iterator, Mapping

__all__ = ["CELL_LIMIT", "MEDIAN_LIMIT", "METHODS", "SHAPES", "OPTIMIZER", "STEPS", "Matrix", "HF", "TORCHTUNE",
           "LITGPT", "STRATEGIES", "MATRICES", "median_abs_error"]

CELL_LIMIT = 0.10  # |estimate / measured - 1| in every cell, unless a matrix holds its cells closer (cell_limit)
MEDIAN_LIMIT = 0.05  # ... and in the median over the cells (median_limit)
METHODS = ("full", "lora", "qlora")
SHAPES = ((1, 128), (2, 256))  # (batch, sequence)
OPTIMIZER = "adamw_torch"
STEPS = 2


def median_abs_error(rows) -> float:
    """The median |error| of :meth:`Matrix.run_cell` results."""
    return statistics.median(abs(r["error"]) for r in rows)


class Matrix:
    """A validation matrix: its configs, its cells, and how one cell is measured and estimated."""

    name = ""  #: the matrix's name (a key of MATRICES)
    profile = "hf"  #: the profile the estimates use
    stack = "hf"  #: the training stack ``measure`` runs
    configs: Mapping[str, dict] = {}

    def cells(self) -> Iterator[tuple]:
        """Every cell, in the order the reports list them."""
        raise NotImplementedError

    def cell_id(self, cell: tuple) -> str:
        raise NotImplementedError

    def settings(self, cell: tuple) -> dict:
        """The settings ``measure`` and ``estimate`` both take for the cell."""
        raise NotImplementedError

    def fake(self, cell: tuple) -> bool:
        """Whether the cell is measured under fake tensors (shapes and lifetimes real, nothing allocated)."""
        return True

    def measure_settings(self, cell: tuple) -> dict:
        """The settings ``measure`` runs for the cell: :meth:`settings`, unless the stack runs something else
        for them (an attention implementation the model refuses)."""
        return self.settings(cell)

    def run_cell(self, cell: tuple, fake: bool | None = None) -> dict:
        """Measure the cell (under fake tensors unless ``fake`` says otherwise) and estimate it."""
        from vramwise import estimate, measure

        cfg = self.configs[cell[0]]
        kw = self.settings(cell)
        m = measure(cfg, stack=self.stack, steps=STEPS, fake=self.fake(cell) if fake is None else fake,
                    **self.measure_settings(cell))
        e = estimate(cfg, profile=self.profile, step_device=host_step_device(), **kw)  # the step measure ran here
        est = e.figures["tensor_peak"]
        return {
            "cell": self.cell_id(cell), "measured": m.peak, "measured_phase": m.peak_phase, "estimate": est,
            "estimate_phase": e.peak_phase, "error": est / m.peak - 1,
            "measured_phases": {k: v.peak for k, v in m.phases.items()}, "estimated_phases": dict(e.phases),
        }

    def small_vocab(self, name: str, layers: int) -> dict:
        """Config ``name`` with vocabulary 1000 and ``layers`` layers: isolates the per-layer terms."""
        cfg = dict(self.configs[name], vocab_size=1000, num_hidden_layers=layers)
        if "layer_types" in cfg:
            cfg["layer_types"] = (["sliding_attention", "full_attention"] * layers)[:layers]
        return cfg


def host_step_device() -> str:
    """The step_device setting of a step measured on this CPU: cpu_onednn where torch's bf16 matrix products go
    through oneDNN (which copies an expanded batched operand), else cpu (formulas/settings.yaml step_device)."""
    import torch

    return "cpu_onednn" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "cpu"


class HfMatrix(Matrix):
    """transformers + PEFT against the hf profile: llama, qwen3, gemma3_text, qwen3_moe (MoE) and
    deepseek_v3 (MLA) at 256 wide, 2 layers and their real vocabularies x full / LoRA / QLoRA x
    checkpointing off / on x sdpa / eager x two shapes (batch 1 x 128, batch 2 x 256): 120 cells;
    and gemma2 (both soft-caps) x full / LoRA x the same checkpointing, attention and shapes: 16
    cells, its sdpa cells measuring eager, which transformers runs for Gemma 2 (it refuses sdpa,
    which cannot soft-cap); gpt_oss (attention sinks; its sdpa cells measure eager, which transformers
    runs for it), cohere (logit scaling) and phi3 (fused q/k/v and gate/up) x full / LoRA, x the
    same: 48 cells; llama, qwen3 (sdpa / eager) and gemma3_text (sdpa) at vocabulary 1000
    and 4 layers with checkpointing x full / LoRA at batch 2 x 512, and llama's QLoRA (sdpa): 11 cells
    whose peak is the recomputed layer's; and without checkpointing at vocabulary 1000, 4 layers,
    batch 2 x 512, x full / LoRA: gpt_oss (eager) and gemma3_text (sdpa, its sliding layers' window of 64
    exceeded, so each keeps its mask): 4 cells. Full and LoRA
    run under fake tensors (equal to real tensors to the byte), QLoRA with real bitsandbytes storage."""

    name = "hf"
    cell_limit = 0.02  # largest measured 0.98 % (full) and 0.54 % (LoRA), median 0.02 %
    median_limit = 0.005
    configs = {
        "llama": {  # Llama-3 vocabulary, untied head, grouped-query attention
            "model_type": "llama", "vocab_size": 128256, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        },
        "qwen3": {  # Qwen3 vocabulary, tied embeddings, q/k norms
            "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "tie_word_embeddings": True,
        },
        "gemma3_text": {  # Gemma-3 vocabulary, tied, a sliding and a full layer, four norms per layer
            "model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
            "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"],
        },
        "qwen3_moe": {  # mixture of experts: 8 routed experts, top-2, PEFT adapters on the fused experts
            "model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 256, "intermediate_size": 768,
            "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "tie_word_embeddings": False,
        },
        "deepseek_v3": {  # multi-head latent attention, a dense layer then an MoE layer with a shared expert
            "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 256, "intermediate_size": 512,
            "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
            "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
            "n_group": 1, "topk_group": 1, "tie_word_embeddings": False,
        },
        "gemma2": {  # Gemma-2 vocabulary, tied, a sliding and a full layer, attention and final-logit soft-caps
            "model_type": "gemma2", "vocab_size": 256000, "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"],
            "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
        },
        "gpt_oss": {  # attention sinks (eager only: transformers has no sdpa for them), biased experts, untied
            "model_type": "gpt_oss", "vocab_size": 201088, "hidden_size": 256, "intermediate_size": 256,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 64,
            "layer_types": ["sliding_attention", "full_attention"], "tie_word_embeddings": False,
        },
        "cohere": {  # logits scaled (logit_scale), one LayerNorm before parallel attention and MLP, tied
            "model_type": "cohere", "vocab_size": 256000, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "logit_scale": 0.0625,
            "tie_word_embeddings": True,
        },
        "phi3": {  # fused qkv_proj and gate_up_proj, Phi-3-mini's vocabulary, untied
            "model_type": "phi3", "vocab_size": 32064, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False,
        },
        # vocabulary 1000, 4 layers: the recomputed layer's tensors and its backward's transients outweigh the logits
        "llama_recompute": {
            "model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        },
        "qwen3_recompute": {
            "model_type": "qwen3", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "tie_word_embeddings": True,
        },
        "gemma3_text_recompute": {  # four float32 norms a layer, the last after the MLP
            "model_type": "gemma3_text", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
            "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"] * 2,
        },
        # gpt-oss at vocabulary 1000, 4 layers: the sinks' softmax and the clamped SwiGLU experts make the peak
        "gpt_oss_layers": {
            "model_type": "gpt_oss", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 256,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 64,
            "layer_types": ["sliding_attention", "full_attention"] * 2, "tie_word_embeddings": False,
        },
    }
    configs["llama_qlora_recompute"] = configs["llama_recompute"]  # its QLoRA cell (real 4-bit storage)
    #: the configs of the full product of methods, checkpointing, attention and shapes (and of the growth checks)
    families = ("llama", "qwen3", "gemma3_text", "qwen3_moe", "deepseek_v3", "gemma2")
    #: attention and logits paths of their own, each in the same product (full and LoRA): attention sinks,
    #: logit scaling, fused q/k/v and gate/up projections
    paths = ("gpt_oss", "cohere", "phi3")
    #: small-vocabulary configs measured with checkpointing only, at batch 2 x 512, where the backward's
    #: peak is the recomputed layer's (setting its recompute term to 0 fails these cells): config ->
    #: (methods, attention kernels)
    recompute = {"llama_recompute": (("full", "lora"), ("sdpa", "eager")),
                 "qwen3_recompute": (("full", "lora"), ("sdpa", "eager")),
                 "gemma3_text_recompute": (("full", "lora"), ("sdpa",)),
                 "llama_qlora_recompute": (("qlora",), ("sdpa",))}
    #: small-vocabulary configs measured without checkpointing at batch 2 x 512, where the layers' saved
    #: tensors make the peak: gpt-oss (attention sinks, clamped SwiGLU experts) and gemma3_text's sliding
    #: layers under sdpa, whose window (64) the sequence exceeds (each keeps its mask): config -> (methods,
    #: attention kernels)
    layers = {"gpt_oss_layers": (("full", "lora"), ("eager",)),
              "gemma3_text_recompute": (("full", "lora"), ("sdpa",))}
    checkpointing = ("none", "true")
    attention = ("sdpa", "eager")
    #: methods of a config's cells where not all of METHODS (QLoRA's real 4-bit storage of a
    #: 256,000-row vocabulary takes half a minute a cell; the growth check covers its QLoRA)
    #: phi3 under LoRA: PEFT's default targets miss its fused qkv_proj, so the first layer's attention keeps
    #: nothing for the backward (its input needs no gradient; formulas/hf/activations.yaml first_layer_attention_idle)
    methods = {"gemma2": ("full", "lora"), "gpt_oss": ("full", "lora"), "cohere": ("full", "lora"),
               "phi3": ("full", "lora")}
    #: (config, attention) -> what transformers runs instead: Gemma 2 refuses sdpa
    #: (Gemma2PreTrainedModel._supports_sdpa = False: sdpa cannot soft-cap) and selects eager
    #: when no implementation is asked; so does gpt-oss (attention sinks, _supports_sdpa = False); the
    #: estimate for sdpa must give eager's figure
    runs_instead = {("gemma2", "sdpa"): "eager", ("gpt_oss", "sdpa"): "eager"}

    def cells(self):
        """(config name, method, checkpointing, attention, batch, sequence)."""
        for name in self.families + self.paths:
            for method, gc, att, (b, s) in itertools.product(self.methods.get(name, METHODS), self.checkpointing,
                                                             self.attention, SHAPES):
                yield name, method, gc, att, b, s
        for name, (methods, kernels) in self.recompute.items():
            for method, att in itertools.product(methods, kernels):
                yield name, method, "true", att, 2, 512
        for name, (methods, kernels) in self.layers.items():
            for method, att in itertools.product(methods, kernels):
                yield name, method, "none", att, 2, 512

    def measured_attention(self, name: str, attention: str) -> str:
        """The attention implementation ``measure`` runs for config ``name`` asked for ``attention``."""
        return self.runs_instead.get((name, attention), attention)

    def cell_id(self, cell):
        name, method, gc, att, b, s = cell
        return f"{name}-{method}-gc_{gc}-{att}-b{b}s{s}"

    def settings(self, cell):
        _, method, gc, att, b, s = cell
        return dict(method=method, batch_size=b, seq_len=s, gradient_checkpointing=gc, attention=att,
                    optimizer=OPTIMIZER)

    def measure_settings(self, cell):
        return dict(self.settings(cell), attention=self.measured_attention(cell[0], cell[3]))

    def fake(self, cell):
        return cell[1] != "qlora"  # bitsandbytes' 4-bit storage is measured for real


class TorchtuneMatrix(Matrix):
    """torchtune's own model builders, LoRA / QLoRA (torchao NF4) modules, chunked loss, activation
    offloading and optimizer_in_bwd against the torchtune profile, all under fake tensors (torchao's NF4
    runs under FakeTensorMode). max_position_embeddings is given, so the rotary caches the builders make
    have a known size; the *_long configs give the builders' production max_seq_len (131,072, as
    torchtune's qwen2_5 and llama3_1 model builders), where the rotary caches outweigh a small layer."""

    name = "torchtune"
    cell_limit = 0.03  # largest measured 1.91 %, median 0.006 %
    median_limit = 0.005
    profile = stack = "torchtune"
    configs = {
        "llama": {  # Llama-3 vocabulary, untied head, grouped-query attention, no RoPE scaling (llama3's builders)
            "model_type": "llama", "vocab_size": 128256, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
            "max_position_embeddings": 2048,
        },
        "qwen2": {  # Qwen2.5 vocabulary, tied embeddings, q/k/v biases (torchtune's qwen2 builders)
            "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
            "max_position_embeddings": 2048,
        },
        "mistral": {  # Mistral v0.3 vocabulary, untied (torchtune's mistral builders)
            "model_type": "mistral", "vocab_size": 32768, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
            "max_position_embeddings": 2048,
        },
        "gemma": {  # Gemma vocabulary, tied, multi-query attention, head_dim 256 above hidden / heads (gemma's builders)
            "model_type": "gemma", "vocab_size": 256000, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 256,
            "max_position_embeddings": 8192,
        },
        "gemma2": {  # Gemma 2 vocabulary, tied, eager soft-capped attention, a window on the even layers, four norms
            "model_type": "gemma2", "vocab_size": 256000, "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "sliding_window": 64, "query_pre_attn_scalar": 64, "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0, "max_position_embeddings": 8192,
        },
        "phi3": {  # Phi-3-mini's vocabulary and layout (multi-head, fused qkv / gate_up split by torchtune's phi3 builders)
            "model_type": "phi3", "vocab_size": 32064, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False,
            "max_position_embeddings": 4096, "sliding_window": 2047,
        },
        "phi4": {  # Phi-4's vocabulary, grouped-query attention, 16,384 positions (phi3's builders)
            "model_type": "phi3", "vocab_size": 100352, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "tie_word_embeddings": False,
            "max_position_embeddings": 16384,
        },
        "qwen2_long": {  # Qwen2.5-7B's 131,072 positions, head_dim 128: the LoRA builder's per-layer caches dominate
            "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 512, "intermediate_size": 1024,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
            "max_position_embeddings": 131072,
        },
        "llama_long": {  # Llama 3.1's RoPE scaling and 131,072 positions (llama3_1's builders: one shared cache)
            "model_type": "llama", "vocab_size": 128256, "hidden_size": 512, "intermediate_size": 1024,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
            "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192},
        },
    }
    checkpointing = ("none", "true")
    losses = ("standard", "chunked")
    #: the configs added for the families beyond llama, qwen2 and mistral, and for the builders' real max_seq_len
    families = ("gemma", "gemma2", "phi3", "phi4")
    long = ("qwen2_long", "llama_long")

    def cells(self):
        """(config, method, checkpointing, loss, extra, batch, sequence); extra is "" or "in_bwd"
        (optimizer_in_bwd, full fine-tuning) or "offload" (activation offloading, with checkpointing).

        llama and qwen2: every method x checkpointing x loss x shape (48 cells); mistral (a smaller
        vocabulary, where the layers weigh more): every method and shape, chunked loss (6); optimizer_in_bwd
        (full, chunked loss as torchtune's full recipes default) with checkpointing off and on at the shape
        where the backward is the peak (4); activation offloading for every method at the larger shape (6);
        gemma, gemma2, phi3 and phi4: every method x checkpointing at the larger shape, chunked loss (24);
        qwen2_long and llama_long: every method, checkpointing, the larger shape, chunked loss (6).
        """
        for name, method, gc, loss, (b, s) in itertools.product(("llama", "qwen2"), METHODS, self.checkpointing,
                                                                self.losses, SHAPES):
            yield name, method, gc, loss, "", b, s
        for method, (b, s) in itertools.product(METHODS, SHAPES):
            yield "mistral", method, "none", "chunked", "", b, s
        for name, gc in itertools.product(("llama", "qwen2"), self.checkpointing):
            yield name, "full", gc, "chunked", "in_bwd", *SHAPES[0]
        for name, method in itertools.product(("llama", "qwen2"), METHODS):
            yield name, method, "true", "chunked", "offload", *SHAPES[1]
        for name, method, gc in itertools.product(self.families, METHODS, self.checkpointing):
            yield name, method, gc, "chunked", "", *SHAPES[1]
        for name, method in itertools.product(self.long, METHODS):
            yield name, method, "true", "chunked", "", *SHAPES[1]

    def cell_id(self, cell):
        name, method, gc, loss, extra, b, s = cell
        return f"{name}-{method}-gc_{gc}-{loss}{'-' + extra if extra else ''}-b{b}s{s}"

    def settings(self, cell):
        _, method, gc, loss, extra, b, s = cell
        return dict(method=method, batch_size=b, seq_len=s, gradient_checkpointing=gc, loss=loss, optimizer=OPTIMIZER,
                    optimizer_in_bwd=extra == "in_bwd", activation_offloading=extra == "offload")


class LitgptMatrix(Matrix):
    """LitGPT's own GPT model, LoRA (bf16-true precision, fused qkv), bitsandbytes NF4 and chunked
    cross-entropy against the litgpt profile: llama, qwen3 (tied in the checkpoint; LitGPT keeps a separate
    head), qwen2 (q/k/v biases, no grouped queries), phi3 (Phi-4's layout and vocabulary, multi-query),
    phi4_mini (a quarter of each head not rotated, tied), olmo2 (post-norms, q / k norms over the whole
    projections) and gemma (GemmaMLP, scaled embeddings, RMSNorm's unit offset, head_dim 128) x full / LoRA /
    QLoRA x standard / chunked loss x two shapes: 84 cells, all
    under fake tensors (bitsandbytes registers fake kernels for gemm_4bit and dequantize_4bit). LitGPT's
    single-device scripts have no gradient checkpointing: no such axis."""

    name = "litgpt"
    cell_limit = 0.01  # largest measured 0.39 %, median 0.22 %
    median_limit = 0.005
    profile = stack = "litgpt"
    configs = {
        "llama": {  # Llama-3 vocabulary, untied head, grouped-query attention
            "model_type": "llama", "vocab_size": 128256, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        },
        "qwen3": {  # Qwen3 vocabulary, tied in the checkpoint (LitGPT keeps a separate head), q/k norms
            "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "tie_word_embeddings": True,
        },
        "qwen2": {  # Qwen2.5 vocabulary, q/k/v biases, multi-head attention (no grouped queries)
            "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False,
        },
        "phi3": {  # Phi-4 layout (fused qkv_proj and gate_up_proj in the checkpoint) and vocabulary, no window
            "model_type": "phi3", "vocab_size": 100352, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "tie_word_embeddings": False,
            "sliding_window": None, "max_position_embeddings": 16384,
        },
        "phi4_mini": {  # Phi-4-mini's vocabulary and rotary share (96 of 128 dimensions), tied, its window (262,144)
            "model_type": "phi3", "vocab_size": 200064, "hidden_size": 256, "intermediate_size": 768,  # wider than
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,  # its 131,072 positions
            "tie_word_embeddings": True, "partial_rotary_factor": 0.75, "sliding_window": 262144,
            "max_position_embeddings": 131072,
        },
        "olmo2": {  # OLMo-2's vocabulary, norms after attention and the MLP, q / k norms over whole projections
            "model_type": "olmo2", "vocab_size": 100352, "hidden_size": 256, "intermediate_size": 768,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
            "max_position_embeddings": 4096,
        },
        "gemma": {  # Gemma-2b's layout: its vocabulary, one key/value head, heads x head_dim = hidden; GemmaMLP,
            "model_type": "gemma", "vocab_size": 256000, "hidden_size": 256, "intermediate_size": 768,  # scaled
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128,  # embeddings
            "max_position_embeddings": 8192,
        },
    }
    losses = ("standard", "chunked")

    def cells(self):
        """(config name, method, loss, batch, sequence)."""
        for name, method, loss, (b, s) in itertools.product(self.configs, METHODS, self.losses, SHAPES):
            yield name, method, loss, b, s

    def cell_id(self, cell):
        name, method, loss, b, s = cell
        return f"{name}-{method}-{loss}-b{b}s{s}"

    def settings(self, cell):
        _, method, loss, b, s = cell
        return dict(method=method, batch_size=b, seq_len=s, loss=loss, gradient_checkpointing="none",
                    optimizer=OPTIMIZER)


class StrategiesMatrix(Matrix):
    """DDP and FSDP2 (fully_shard on each decoder layer and the root) in world_size CPU processes joined by
    gloo, each rank's storage tracked: the busiest rank's peak against the strategy's per-rank tensor peak of
    the hf profile. llama (untied head, grouped-query attention, 2 layers) and qwen2 (tied embeddings, q/k/v
    biases, 4 layers) x full / LoRA x DDP / FSDP x 2 and 4 ranks without checkpointing, plus llama's four
    2-rank cells with checkpointing, at batch 2 x 64 per rank; six qwen2 cells of 8 tokens, where the model
    states and the gathered units outweigh the activations; and FSDP's shard_grad_op on 2 ranks (both
    configs x full / LoRA): 30 cells, real tensors."""

    name = "strategies"
    cell_limit = 0.08  # largest measured 7.01 % (FSDP full with checkpointing, high), median 0.53 %; each run alike
    median_limit = 0.01
    configs = {
        "llama": {"model_type": "llama", "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 384,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "tie_word_embeddings": False},
        "qwen2": {"model_type": "qwen2", "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 352,
                  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "tie_word_embeddings": True},
    }
    methods = ("full", "lora")
    strategies = ("ddp", "fsdp")
    world_sizes = (2, 4)
    batch, seq, rank = 2, 64, 8
    seven = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def cells(self):
        """(config name, method, strategy, world size, gradient checkpointing, batch, sequence)."""
        b, s = self.batch, self.seq
        for name, method, strategy, ws in itertools.product(self.configs, self.methods, self.strategies,
                                                            self.world_sizes):
            yield name, method, strategy, ws, "none", b, s
        for method, strategy in itertools.product(self.methods, self.strategies):
            yield "llama", method, strategy, 2, "true", b, s
        # 8 tokens: the model states and what the strategy gathers outweigh the activations
        for method, ws in itertools.product(self.methods, self.world_sizes):
            yield "qwen2", method, "fsdp", ws, "none", 1, 8
        for method in self.methods:
            yield "qwen2", method, "ddp", 2, "none", 1, 8
        # FSDP's shard_grad_op (no resharding after the forward) on 2 ranks
        for name, method in itertools.product(self.configs, self.methods):
            yield name, method, "fsdp_shard_grad_op", 2, "none", b, s

    def cell_id(self, cell):
        name, method, strategy, ws, gc, b, s = cell
        return (f"{name}-{method}-{strategy}-x{ws}" + ("-checkpointing" if gc == "true" else "")
                + (f"-b{b}s{s}" if (b, s) != (self.batch, self.seq) else ""))

    def settings(self, cell):
        _, method, strategy, ws, gc, b, s = cell
        kw: dict[str, Any] = dict(method=method, batch_size=b, seq_len=s, gradient_checkpointing=gc,
                                  optimizer=OPTIMIZER, strategy=strategy, world_size=ws)
        if method == "lora":
            kw.update(lora_rank=self.rank, target_modules=list(self.seven))
        return kw

    def fake(self, cell):
        return False  # each rank's real storage is tracked


HF = HfMatrix()
TORCHTUNE = TorchtuneMatrix()
LITGPT = LitgptMatrix()
STRATEGIES = StrategiesMatrix()
#: every matrix by name
MATRICES = {m.name: m for m in (HF, TORCHTUNE, LITGPT, STRATEGIES)}
