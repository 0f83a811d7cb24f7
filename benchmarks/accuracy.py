"""Regenerate docs/accuracy.md: the hf, torchtune and litgpt profiles' estimates against `vramwise measure`.

    python benchmarks/accuracy.py            # every cell of the validation matrices and three 8B steps (about 15 minutes on 2 cores)
    python benchmarks/accuracy.py --part stacks   # only the torchtune, litgpt and strategies sections (the hf part of the page is kept)
    python benchmarks/accuracy.py --cuda     # also measure the GPU rows when torch sees a CUDA device

It writes accuracy/bands.yaml and the table of docs/error-bands.md from the same rows
(scripts/build_accuracy_bands.py, which can also measure them on its own).

The cells are those of benchmarks/validation_matrices.py, which tests/measured asserts. CPU rows come from the
storage tracker (full and LoRA under fake tensors, QLoRA with real
bitsandbytes storage). GPU rows run `measure --device cuda` on the GPU_MATRIX below and compare
max_memory_allocated with the tensor peak, max_memory_reserved with the reserved figure and
NVML's process memory with the device figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

from validation_matrices import HF, MATRICES, METHODS, OPTIMIZER

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: where the sections of the training-stack profiles start in docs/accuracy.md
STACK_MARKER = "<!-- training-stack profiles: python benchmarks/accuracy.py --part stacks -->"

#: (section title, validation matrix (a key of MATRICES), what the section says about its cells)
STACKS = (
    ("The `torchtune` profile (CPU)", "torchtune",
     "torchtune 0.6.1's own model builders (llama-, qwen2-, mistral-, gemma-, gemma2- and phi3-shaped, 256 wide, real "
     "vocabularies), its LoRA / QLoRA (torchao NF4) modules, chunked cross-entropy, activation offloading and "
     "optimizer_in_bwd, measured by `vramwise measure --stack torchtune` (fake tensors; torchao's NF4 runs "
     "under FakeTensorMode) against `--profile torchtune`; asserted by tests/measured/test_validation_matrix_torchtune.py."),
    ("The `litgpt` profile (CPU)", "litgpt",
     "LitGPT 0.5.9's own GPT model, its LoRA (bf16-true precision, fused qkv) and chunked cross-entropy, "
     "measured by `vramwise measure --stack litgpt` against `--profile litgpt`; asserted by "
     "tests/measured/test_validation_matrix_litgpt.py."),
    ("Multi-GPU strategies of the `hf` profile (CPU processes)", "strategies",
     "DDP and FSDP2 (fully_shard on each decoder layer and the root) in 2 and 4 processes joined by gloo on the "
     "CPU, each rank's storage tracked (`vramwise measure --strategy`), against `--profile hf --strategy` "
     "(formulas/strategies): the busiest rank's peak against the per-rank tensor peak; llama (untied, 2 layers) "
     "and qwen2 (tied, 4 layers) x full / LoRA, batch 2 x 64 per rank, plus four cells with checkpointing and "
     "six of 8 tokens, where the model states and the gathered units outweigh the activations, and four of "
     "FSDP's shard_grad_op (reshard_after_forward=False) on 2 ranks; "
     "asserted by tests/measured/test_validation_matrix_strategies.py. ZeRO and device_map are not measured here "
     "(tests/unit/profiles/test_strategies.py checks ZeRO against DeepSpeed's own estimators)."),
)

#: A short GPU matrix: a 0.5B Qwen2.5-shaped model, three methods, two shapes.
GPU_MODEL = {
    "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True,
}
GPU_MATRIX = [(m, b, s) for m in ("full", "lora", "qlora") for b, s in ((1, 512), (4, 1024))]


def _pct(x: float) -> str:
    return f"{100 * x:+.2f} %"


def cpu_rows():
    rows = []
    for cell in HF.cells():
        t = time.perf_counter()
        r = HF.run_cell(cell)
        r["seconds"] = time.perf_counter() - t
        rows.append((cell, r))
        print(f"{r['cell']:<45} {_pct(r['error'])}", file=sys.stderr, flush=True)
    return rows


def stack_rows(name: str):
    matrix = MATRICES[name]
    rows = []
    for cell in matrix.cells():
        r = matrix.run_cell(cell)
        rows.append((cell, r))
        print(f"{r['cell']:<45} {_pct(r['error'])}", file=sys.stderr, flush=True)
    return rows


def render_stacks(stacks) -> str:
    mib = 2**20
    out = [STACK_MARKER, ""]
    for (title, _, about), rows in stacks:
        errs = [abs(r["error"]) for _, r in rows]
        out += [
            f"## {title}",
            "",
            about,
            "",
            f"**Summary.** {len(rows)} cells; median |error| {100 * statistics.median(errs):.3f} %, largest "
            f"{100 * max(errs):.2f} %.",
            "",
            "| cell | measured MiB | estimate MiB | error | measured phase | estimated phase |",
            "|---|---:|---:|---:|---|---|",
        ]
        for _, r in rows:
            out.append(f"| {r['cell']} | {r['measured'] / mib:.1f} | {r['estimate'] / mib:.1f} | {_pct(r['error'])} "
                       f"| {r['measured_phase']} | {r['estimate_phase']} |")
        out.append("")
    return "\n".join(out)


def layer_rows():
    from vramwise import estimate, measure

    rows = []
    for name in HF.families:
        for method in METHODS:
            for att in HF.attention:
                kw = dict(method=method, batch_size=2, seq_len=512, gradient_checkpointing="none", attention=att,
                          optimizer=OPTIMIZER)
                cfgs = {n: HF.small_vocab(name, n) for n in (2, 4)}
                meas = {n: measure(cfgs[n], fake=method != "qlora", **kw).peak for n in (2, 4)}
                est = {n: estimate(cfgs[n], profile="hf", **kw).figures["tensor_peak"] for n in (2, 4)}
                gm, ge = meas[4] - meas[2], est[4] - est[2]
                rows.append((name, method, att, gm, ge, ge / gm - 1))
    return rows


#: Full-size models, measured under fake tensors (nothing allocated): (config path, method, checkpointing, batch, seq).
LARGE = [
    (os.path.join(ROOT, "examples", "llama-3.1-8b.json"), "lora", "true", 1, 2048),
    (os.path.join(ROOT, "examples", "llama-3.1-8b.json"), "full", "true", 1, 2048),
    (os.path.join(ROOT, "examples", "llama-3.1-8b.json"), "lora", "none", 1, 1024),
]


def large_rows():
    from vramwise import estimate, measure

    rows = []
    for path, method, gc, b, s in LARGE:
        kw = dict(method=method, batch_size=b, seq_len=s, gradient_checkpointing=gc, attention="sdpa",
                  optimizer=OPTIMIZER)
        m = measure(path, fake=True, **kw)
        e = estimate(path, profile="hf", **kw)
        rows.append((os.path.basename(path), method, gc, b, s, m, e))
        print(f"{os.path.basename(path)} {method} {gc}: {_pct(e.figures['tensor_peak'] / m.peak - 1)}", file=sys.stderr, flush=True)
    return rows


def gpu_rows():
    import torch

    from vramwise import estimate, measure

    name = torch.cuda.get_device_name(0)
    rows = []
    for method, b, s in GPU_MATRIX:
        kw = dict(method=method, batch_size=b, seq_len=s, gradient_checkpointing="true", attention="sdpa",
                  optimizer="adamw_torch")
        m = measure(GPU_MODEL, device="cuda", **kw)
        e = estimate(GPU_MODEL, profile="hf", **kw)
        rows.append((name, method, b, s, m, e))
        torch.cuda.empty_cache()
    return rows


def render(cpu, layers, large, gpu) -> str:
    mib = 2**20
    errs = [abs(r["error"]) for _, r in cpu]
    out = [
        "# Accuracy of the `hf` profile",
        "",
        "Regenerated by `python benchmarks/accuracy.py`; the same cells are asserted by",
        "`tests/measured/test_validation_matrix.py` (every cell within 2 %, the median within 0.5 %).",
        "Every estimate carries the band of its profile, method and strategy pooled from the cells of",
        "this page: [Error bands](error-bands.md).",
        "",
        "**What is compared.** The estimate's `tensor_peak` figure (`vramwise estimate --profile hf`) against",
        "the highest live tensor bytes `vramwise measure` records over two optimizer steps on CPU",
        "(storages rounded up to 512 bytes, as the CUDA caching allocator rounds). Full fine-tuning and",
        "LoRA run under fake tensors (equal to real tensors to the byte, see tests/measured/test_measure.py); QLoRA",
        "runs real bitsandbytes 4-bit storage. Optimizer: torch AdamW, foreach implementation (`adamw_torch`).",
        "",
        "**Configs.** 256 wide, 2 layers, real vocabularies: llama (128,256, untied), qwen3 (151,936, tied,",
        "q/k norms), gemma3_text (262,144, tied, sliding + full layer), qwen3_moe (8 experts, top-2, PEFT",
        "adapters on the fused experts), deepseek_v3 (MLA; a dense and an MoE layer with a shared expert),",
        "gemma2 (256,000, attention and final-logit soft-caps; its sdpa cells measure eager, which transformers",
        "runs for it), each x full / LoRA / QLoRA (gemma2: full / LoRA); and for the attention and logits paths",
        "of their own, x full / LoRA: gpt_oss (201,088, attention sinks; sdpa cells measure eager, as for",
        "gemma2), cohere (256,000, logit scaling) and phi3 (32,064, fused qkv_proj / gate_up_proj; under LoRA",
        "PEFT's default names miss qkv_proj, so the first layer's attention saves nothing).",
        "Shapes: batch 1 x 128 and batch 2 x 256 tokens. With checkpointing at vocabulary 1000, 4 layers,",
        "batch 2 x 512, where the recomputed layer makes the backward's peak: llama and qwen3 (sdpa and eager)",
        "and gemma3_text (sdpa) x full / LoRA, llama x QLoRA (the `*_recompute` cells); without checkpointing",
        "at the same shape, where the layers' saved tensors make the peak: gpt_oss (eager; the `gpt_oss_layers`",
        "cells) and gemma3_text (sdpa, its sliding layers' window of 64 exceeded, so each keeps its mask) x",
        "full / LoRA.",
        "",
        f"**Summary.** {len(cpu)} cells; median |error| {100 * statistics.median(errs):.3f} %, largest",
        f"{100 * max(errs):.2f} %.",
        "",
        "With real vocabularies the logits and the embeddings dominate such small models, so the",
        "second table isolates the per-layer terms: the growth of the peak from 2 to 4 layers at",
        "vocabulary 1000, batch 2 x 512, without checkpointing.",
        "",
        "## Cells (CPU)",
        "",
        "| config | method | checkpointing | attention | batch x seq | measured MiB | estimate MiB | error | measured phase | estimated phase |",
        "|---|---|---|---|---|---:|---:|---:|---|---|",
    ]
    for (name, method, gc, att, b, s), r in cpu:
        out.append(
            f"| {name} | {method} | {gc} | {att} | {b} x {s} | {r['measured'] / mib:.1f} | {r['estimate'] / mib:.1f} "
            f"| {_pct(r['error'])} | {r['measured_phase']} | {r['estimate_phase']} |"
        )
    out += [
        "",
        "Where the measured and estimated phases differ, the two phases' peaks are within a fraction",
        "of a percent of each other (for example full fine-tuning with tied embeddings, where the",
        "optimizer step and the backward nearly tie).",
        "",
        "## Per-layer terms: peak growth from 2 to 4 layers (CPU)",
        "",
        "| config | method | attention | measured MiB | estimate MiB | error |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name, method, att, gm, ge, err in layers:
        out.append(f"| {name} | {method} | {att} | {gm / mib:.2f} | {ge / mib:.2f} | {_pct(err)} |")
    gib = 2**30
    out += [
        "",
        "## Full-size models under fake tensors (CPU)",
        "",
        "The same step simulated with FakeTensorMode (shapes and lifetimes real, nothing allocated),",
        "sdpa, AdamW; the phase peaks are listed as forward / backward / optimizer.",
        "",
        "| config | method | checkpointing | batch x seq | measured GiB | estimate GiB | error | measured phases GiB | estimated phases GiB |",
        "|---|---|---|---|---:|---:|---:|---|---|",
    ]
    for name, method, gc, b, s, m, e in large:
        mp = " / ".join(f"{m.phases[k].peak / gib:.2f}" for k in ("forward", "backward", "optimizer"))
        ep = " / ".join(f"{e.phases[k] / gib:.2f}" for k in ("forward", "backward", "optimizer"))
        out.append(
            f"| {name} | {method} | {gc} | {b} x {s} | {m.peak / gib:.2f} | {e.figures['tensor_peak'] / gib:.2f} "
            f"| {_pct(e.figures['tensor_peak'] / m.peak - 1)} | {mp} | {ep} |"
        )
    out += ["", "## GPU", ""]
    if gpu:
        out += [
            "Qwen2.5-0.5B-shaped model, gradient checkpointing, sdpa, AdamW. allocated = max_memory_allocated",
            "vs tensor_peak; reserved = max_memory_reserved vs the reserved figure; process = NVML vs device.",
            "",
            "| GPU | method | batch x seq | allocated MiB | tensor_peak MiB | reserved MiB | est. reserved MiB | process MiB | est. device MiB |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, method, b, s, m, e in gpu:
            proc = f"{m.process_bytes / mib:.0f}" if m.process_bytes else "n/a"
            out.append(
                f"| {name} | {method} | {b} x {s} | {m.peak / mib:.0f} | {e.figures['tensor_peak'] / mib:.0f} "
                f"| {m.reserved_peak / mib:.0f} | {e.figures['reserved'] / mib:.0f} | {proc} | {e.figures['device'] / mib:.0f} |"
            )
    else:
        out += [
            "No GPU rows yet: no NVIDIA GPU was available when this page was generated. The reserved",
            "(the allocator's reserve: fitted on fake steps through a model of torch's caching allocator for the",
            "hf and torchtune profiles' LoRA and QLoRA, +15 % over the tensor peak elsewhere) and device (+0.5 GiB CUDA",
            "context; NCCL's 1.6 GB on each rank of a data-parallel strategy) figures are not measured on a GPU",
            "(formulas/shared/overhead.yaml, formulas/*/reserve.yaml, formulas/shared/constants.yaml) until",
            "`python benchmarks/accuracy.py --cuda` runs on one; published",
            "runs that give an allocated and a reserved or nvidia-smi figure are compared with them in",
            "[Published GPU runs](gpu-runs.md#what-nvidia-smi-adds).",
        ]
    out += [
        "",
        "## Known limits",
        "",
        "- The CPU tracker sees tensors only: no CUDA context, cuBLAS workspaces, allocator caching, or",
        "  kernel-specific buffers (flash-attention's backward accumulators, bitsandbytes' CUDA buffers).",
        "- On CPU, sdpa with unequal query and value head widths (MLA) runs its math path; the profile",
        "  charges that path on every device, which overstates MLA on GPUs whose fused kernels handle it.",
        "- Chunked and fused losses (`--loss chunked|fused`) are modelled from Liger's kernel and not",
        "  measured here (measure runs transformers' standard loss).",
        "- QLoRA adapters' shared-input rule assumes the attention and MLP inputs are targeted (the default);",
        "  fewer targets overstate its linear-input term.",
        "- Under checkpointing the recomputed layer is charged at its highest point (formulas/hf/activations.yaml",
        "  layer_recompute_peak_bytes): measured at vocabulary 1000, 4 layers, batch 2 x 512 it is within 1 % for",
        "  llama, qwen3 (sdpa and eager), gemma3_text and QLoRA, and with attention-only adapters within 1.3 %;",
        "  deepseek_v3 (MLA, sdpa's math path) is 2.2 % low for full fine-tuning (its latent projections' inputs",
        "  and the layer's own input beside the scores' backward are not counted) and 1.3 % low for LoRA.",
        "- sdpa with a sliding-window mask: each sliding layer whose window the sequence reaches keeps the",
        "  additive mask (batch x 1 x seq x seq, the queries' dtype), counted (layer_sdpa_window_mask). With a",
        "  mask transformers also repeats the keys and values to every head (no enable_gqa), which is not",
        "  counted: a grouped-query mistral at vocabulary 1000, 4 layers, window 64, batch 2 x 512 measures",
        "  -2.6 % (full) / -1.8 % (LoRA) without checkpointing, against -0.2 % / +0.9 % with no window.",
        "- LoRA without checkpointing, where no adapter feeds the attention (PEFT's default names on phi3's",
        "  fused qkv_proj, MLA's latent projections, Qwen-1's c_attn): the first layer's attention and the norms",
        "  before it save nothing (first_layer_attention_idle), counted. Whatever the targets, the first",
        "  layer's input norm saves nothing (first_layer_input_frozen), and where the attention carries no",
        "  adapter at all neither do the norms after it (first_layer_residual_idle), both counted.",
        "- gpt-oss at a small vocabulary (1000, 4 layers, batch 2 x 512): within 1.1 % without checkpointing;",
        "  LoRA with checkpointing -5.9 % (the recomputed layer's experts' backward is not modelled for its",
        "  clamped SwiGLU); its real-vocabulary cells are within 0.05 %.",
        "",
    ]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda", action="store_true", help="also measure the GPU rows (needs a CUDA device)")
    ap.add_argument("--part", choices=("all", "stacks"), default="all",
                    help="all: the whole page; stacks: only the torchtune, litgpt and strategies sections, the rest kept")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "accuracy.md"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    if args.part == "all":
        cpu = cpu_rows()
        layers = layer_rows()
        large = large_rows()
        gpu = gpu_rows() if args.cuda else []
        head = render(cpu, layers, large, gpu)
    else:
        with open(args.out, encoding="utf-8") as f:
            head = f.read().split(STACK_MARKER)[0].rstrip("\n") + "\n"
    stacks = [(st, stack_rows(st[1])) for st in STACKS]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(head + "\n" + render_stacks(stacks))
    print(f"wrote {args.out}", file=sys.stderr)
    # the error bands every estimate carries, from the same rows (the hf matrix's kept with --part stacks)
    rows = {MATRICES[st[1]]: got for st, got in stacks}
    if args.part == "all":
        rows[HF] = cpu
    try:
        print(f"wrote {_bands_script().write(rows)}", file=sys.stderr)
    except SystemExit as e:  # a band pooled with a matrix this page does not run: the script measures them together
        print(f"accuracy/bands.yaml not written: {e}; python scripts/build_accuracy_bands.py", file=sys.stderr)


def _bands_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_accuracy_bands",
                                                  os.path.join(ROOT, "scripts", "build_accuracy_bands.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main()
