"""Regression oracle of the estimate: every figure, for every shared config x a settings grid.

    python tests/oracle/generate.py          # rewrites tests/oracle/estimates.json.gz

The file records what the engine computed when it was generated: every component,
total, phase, figure and per-GPU minimum, the parameter counts, matched LoRA targets
and warnings, for the unsloth, studio and hf profiles (training and inference), the multi-GPU
strategies of the hf profile (per rank, with each rank group and the host memory) and of the
torchtune, litgpt, unsloth and studio profiles, and the size-only fallback.
``tests/conformance/test_oracle.py`` recomputes each case and requires equality to the byte. It
proves that a rewrite of the engine keeps its outputs; it says nothing about whether
those outputs are right (the correctness tests do that).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SHARED = REPO.parent / "shared"
OUT = HERE / "estimates.json.gz"
GPU_COUNTS = (1, 2, 3, 4, 8)

# (profile, settings) pairs: every method, checkpointing mode, kernel kind, optimizer class,
# target set and loss mode is crossed with at least one other axis; sizes include odd values.
UNSLOTH = [
    dict(method="qlora"),
    dict(method="qlora", batch_size=1, seq_len=512, lora_rank=8, gradient_checkpointing="none"),
    dict(method="qlora", batch_size=3, seq_len=4097, lora_rank=64, gradient_checkpointing="true", attention="eager"),
    dict(method="qlora", target_modules="all-linear", optimizer="paged_adamw_32bit", attention="sdpa"),
    dict(method="qlora", target_modules="q_proj,v_proj", optimizer="unknown_opt"),
    dict(method="lora", batch_size=2, seq_len=8192, gradient_checkpointing="unsloth", optimizer="adamw_torch"),
    dict(method="lora", batch_size=8, seq_len=1024, gradient_checkpointing="none", attention="eager"),
    dict(method="lora", target_modules="gate_proj,up_proj,down_proj", lora_rank=32, gradient_checkpointing="true"),
    dict(method="full", optimizer="adamw_torch", gradient_checkpointing="true"),
    dict(method="full", batch_size=1, seq_len=16384, gradient_checkpointing="unsloth", optimizer="sgd"),
    dict(method="full", batch_size=2, seq_len=2048, gradient_checkpointing="none", attention="eager", optimizer="adamw_8bit"),
    dict(method="inference", batch_size=1, seq_len=4096),
    dict(method="inference", load_in_4bit=True, batch_size=8, seq_len=32768),
]
# studio: the grid unsloth had when the reference estimator's arithmetic moved to a profile of its own
# (its cases were recorded as unsloth's were then, tests/conformance/test_oracle.py); a list of its own, so
# that a change of unsloth's grid leaves studio's cases as they are
STUDIO = [
    dict(method="qlora"),
    dict(method="qlora", batch_size=1, seq_len=512, lora_rank=8, gradient_checkpointing="none"),
    dict(method="qlora", batch_size=3, seq_len=4097, lora_rank=64, gradient_checkpointing="true", attention="eager"),
    dict(method="qlora", target_modules="all-linear", optimizer="paged_adamw_32bit", attention="sdpa"),
    dict(method="qlora", target_modules="q_proj,v_proj", optimizer="unknown_opt"),
    dict(method="lora", batch_size=2, seq_len=8192, gradient_checkpointing="unsloth", optimizer="adamw_torch"),
    dict(method="lora", batch_size=8, seq_len=1024, gradient_checkpointing="none", attention="eager"),
    dict(method="lora", target_modules="gate_proj,up_proj,down_proj", lora_rank=32, gradient_checkpointing="true"),
    dict(method="full", optimizer="adamw_torch", gradient_checkpointing="true"),
    dict(method="full", batch_size=1, seq_len=16384, gradient_checkpointing="unsloth", optimizer="sgd"),
    dict(method="full", batch_size=2, seq_len=2048, gradient_checkpointing="none", attention="eager", optimizer="adamw_8bit"),
    dict(method="inference", batch_size=1, seq_len=4096),
    dict(method="inference", load_in_4bit=True, batch_size=8, seq_len=32768),
]
HF = [
    dict(method="lora", optimizer="adamw_torch", attention="sdpa"),
    dict(method="lora", batch_size=2, seq_len=4096, gradient_checkpointing="true", attention="sdpa", optimizer="adamw_torch_fused"),
    dict(method="lora", batch_size=1, seq_len=1024, gradient_checkpointing="none", attention="eager", lora_dropout=0.1),
    dict(method="lora", target_modules="all-linear", loss="chunked", attention="sdpa"),
    dict(method="lora", target_modules="q_proj,k_proj,v_proj,o_proj", loss="fused", gradient_checkpointing="unsloth"),
    dict(method="qlora", optimizer="adamw_8bit", attention="sdpa", gradient_checkpointing="true"),
    dict(method="qlora", batch_size=4, seq_len=512, gradient_checkpointing="none", attention="eager", optimizer="paged_adamw_8bit"),
    dict(method="full", optimizer="adamw_torch", gradient_checkpointing="true", attention="sdpa"),
    dict(method="full", batch_size=2, seq_len=333, gradient_checkpointing="none", attention="eager", optimizer="sgd"),
    dict(method="full", optimizer="adamw_torch_fused", loss="chunked", attention="flash_attention_2"),
    # torch.compile: modelled (full fine-tuning, sdpa, no checkpointing), and the eager run with a warning
    dict(method="full", compile=True, batch_size=2, seq_len=2048, gradient_checkpointing="none", attention="sdpa",
         optimizer="adamw_torch"),
    dict(method="full", compile=True, batch_size=1, seq_len=4096, gradient_checkpointing="true", attention="sdpa"),
    # LoRA under torch.compile: adapters on every linear layer, and PEFT's default targets
    dict(method="lora", compile=True, batch_size=2, seq_len=2048, gradient_checkpointing="none", attention="sdpa",
         target_modules="all-linear", optimizer="adamw_torch"),
    dict(method="lora", compile=True, batch_size=1, seq_len=1024, gradient_checkpointing="none", attention="sdpa"),
]
# multi-GPU strategies on the hf profile: every strategy, each offload mode, odd world sizes
HF_STRATEGIES = [
    dict(method="full", strategy="ddp", world_size=8, optimizer="adamw_torch", attention="sdpa"),
    dict(method="full", strategy="fsdp", world_size=8, gradient_checkpointing="true"),
    dict(method="lora", strategy="fsdp_shard_grad_op", world_size=3, batch_size=2, seq_len=1000),
    dict(method="qlora", strategy="fsdp_hybrid", world_size=16, gpus_per_node=4, offload="parameters"),
    dict(method="full", strategy="zero1", world_size=8, gradient_checkpointing="none", batch_size=1, seq_len=512),
    dict(method="full", strategy="zero2", world_size=24, gpus_per_node=8, offload="optimizer"),
    dict(method="lora", strategy="zero3", world_size=32, offload="parameters", gradient_checkpointing="true"),
    dict(method="full", strategy="device_map", world_size=5, optimizer="adamw_torch_fused"),
]
# the strategies of the other profiles: torchtune's FSDP, LitGPT's FSDP, Unsloth under DDP
OTHER_STRATEGIES = [
    ("torchtune", dict(method="lora", strategy="fsdp", world_size=8, gradient_checkpointing="true",
                       optimizer="adamw_torch", attention="sdpa")),
    ("torchtune", dict(method="qlora", strategy="fsdp_shard_grad_op", world_size=2, batch_size=2, seq_len=1000,
                       offload="parameters")),
    ("torchtune", dict(method="full", strategy="fsdp", world_size=4, optimizer_in_bwd=True, loss="chunked",
                       optimizer="adamw_torch")),
    ("litgpt", dict(method="full", strategy="fsdp", world_size=8, optimizer="adamw_torch")),
    ("litgpt", dict(method="lora", strategy="fsdp", world_size=3, batch_size=2, seq_len=777)),
    ("unsloth", dict(method="qlora", strategy="ddp", world_size=4)),
    ("unsloth", dict(method="full", strategy="ddp", world_size=2, optimizer="adamw_torch")),
]
# studio under DDP: the two cases unsloth had (OTHER_STRATEGIES[5:7]) when studio was split from it
STUDIO_STRATEGIES = [
    dict(method="qlora", strategy="ddp", world_size=4),
    dict(method="full", strategy="ddp", world_size=2, optimizer="adamw_torch"),
]
SIZE_ONLY = [
    dict(params=8e9, method="qlora"),
    dict(params=7.6e9, method="lora", batch_size=2, seq_len=8192),
    dict(params=70e9, method="full", gradient_checkpointing="true"),
    dict(params=1.5e9, method="inference"),
    dict(params=3e9, method="inference", load_in_4bit=True),
    dict(weight_bytes=16_060_522_496, method="qlora", batch_size=1),
    dict(weight_bytes=2_471_645_608, method="full", optimizer="adamw_torch"),
]


def config_paths() -> list[tuple[str, Path]]:
    out = [("examples/llama-3.1-8b.json", REPO / "examples" / "llama-3.1-8b.json")]
    for folder in ("configs", "configs_extra"):
        for p in sorted((SHARED / folder).glob("*.json")):
            out.append((f"{folder}/{p.name}", p))
    return out


def record(est, gpu_counts=GPU_COUNTS) -> dict:
    d = est.to_dict()
    d.pop("settings")
    d.pop("error_band")  # accuracy/bands.yaml's data, not a figure: it changes when the matrices are measured again
    d["min_per_gpu"] = {str(n): est.min_per_gpu(n) for n in gpu_counts}
    return d


def cases():
    """Yield (case id, a function computing the record, or raising)."""
    import vramwise

    for name, path in config_paths():
        cfg = json.loads(path.read_text(encoding="utf-8"))
        for label, profile, grid in (("unsloth", "unsloth", UNSLOTH), ("hf", "hf", HF), ("hf-strategy", "hf", HF_STRATEGIES),
                                     ("studio", "studio", STUDIO), ("studio-strategy", "studio", STUDIO_STRATEGIES)):
            for k, s in enumerate(grid):
                yield f"{name}|{label}|{k}", (lambda cfg=cfg, profile=profile, s=s: vramwise.estimate(cfg, profile=profile, **s))
        for k, (profile, s) in enumerate(OTHER_STRATEGIES):
            yield f"{name}|{profile}-strategy|{k}", (
                lambda cfg=cfg, profile=profile, s=s: vramwise.estimate(cfg, profile=profile, **s))
    for k, s in enumerate(SIZE_ONLY):
        yield f"size_only|{k}", (lambda s=s: vramwise.estimate_from_size(**s))


def compute(fn) -> dict:
    import vramwise

    try:
        return record(fn())
    except vramwise.VramwiseError as e:
        return {"error": type(e).__name__}


def main() -> None:
    data = {cid: compute(fn) for cid, fn in cases()}
    with gzip.open(OUT, "wt", encoding="utf-8") as fh:
        json.dump(data, fh, sort_keys=True, separators=(",", ":"))
    errors = sum(1 for v in data.values() if "error" in v)
    print(f"{len(data)} cases ({errors} errors) -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
