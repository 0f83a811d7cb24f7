"""The caching allocator's reserve above the tensor peak, fitted on fake training steps.

Each cell below is a training step of one stack, transformers + PEFT (``hf``) or torchtune, run on the CPU
under fake tensors (``vramwise measure --fake``: the real shapes and lifetimes, nothing allocated; two steps,
the second measured), its storages' births and deaths replayed through vramwise's model of torch's CUDA
caching allocator (vramwise.profiles.caching_allocator, its rules read from c10/cuda/CUDACachingAllocator.cpp).
What the model reserves above the tensor peak is set beside the estimate of the same step by the stack's
profile: its tensor peak and its activations at the peak (saved activations, logits and loss buffers, a
recomputed layer, the temporaries of the moment: ``activations_at_peak_bytes``, formulas/shared/total.yaml).

Why the activations: the weights, the adapters and the optimizer state are allocated once and stay; the
activations are born and freed in every step, at sizes that differ from one moment to the next, and the
blocks they leave cached are what the allocator holds above the tensors. With gradient checkpointing the
activations at the peak are mostly a recomputed layer and the logits' buffers, allocated and freed layer
after layer among the layers' kept inputs: more of them is left in blocks the next request does not fit.

The fit, for each stack: for LoRA, the median of reserve / activations over its ``fit`` cells, with and
without checkpointing, rounded to two decimals. For hf these are the constants
``allocator_reserve_checkpointed_ratio`` and ``allocator_reserve_saved_ratio`` (formulas/shared/constants.yaml,
charged by formulas/hf/reserve.yaml), for torchtune ``torchtune_reserve_checkpointed_ratio`` and
``torchtune_reserve_saved_ratio`` (formulas/torchtune/reserve.yaml); each profile charges them for LoRA and
QLoRA. The ``held_out`` cells are not used by the fit; each is scored as the reserved peak the estimate gives
with its stack's fitted ratios against the model's. Full fine-tuning is reported but not fitted: its
gradients and optimizer-step temporaries, the size of the parameters, land in blocks the activations left,
and their reserve does not follow the activations (both profiles keep the flat share
``allocator_reserve_ratio`` for it).

    python benchmarks/allocator_fit.py            # runs every cell (about 15 minutes on two cores)
    python benchmarks/allocator_fit.py --write    # and writes benchmarks/allocator_fit.yaml
    python benchmarks/allocator_fit.py --cells 3  # the first three cells only (never written)
    python benchmarks/allocator_fit.py --show     # the written file's cells and fit, nothing run

Every cell: AdamW (``adamw_torch``), LoRA rank 16 on the stack's default targets, SDPA attention (hf).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_runs  # noqa: E402

OUT = ROOT / "benchmarks" / "allocator_fit.yaml"
GIB = 2**30
COMMON = {"optimizer": "adamw_torch", "lora_rank": 16}
#: settings of one stack's cells beside COMMON
STACK_SETTINGS = {"hf": {"attention": "sdpa"}, "torchtune": {}}

#: (model, method, batch_size, seq_len, gradient_checkpointing): the transformers + PEFT cells its ratios are
#: fitted on
FIT = (
    ("meta-llama/Llama-3.2-1B-Instruct", "lora", 1, 512, "none"),
    ("meta-llama/Llama-3.2-1B-Instruct", "lora", 4, 2048, "true"),
    ("meta-llama/Llama-3.2-1B-Instruct", "full", 2, 1024, "none"),
    ("meta-llama/Llama-3.2-3B", "lora", 4, 768, "none"),
    ("meta-llama/Llama-3.2-3B", "lora", 1, 4096, "true"),
    ("meta-llama/Llama-3.2-3B", "full", 1, 2048, "true"),
    ("Qwen/Qwen2.5-3B", "lora", 2, 2048, "none"),
    ("mistralai/Mistral-7B-v0.1", "lora", 4, 4096, "true"),
    ("mistralai/Mistral-7B-v0.1", "lora", 1, 1024, "none"),
    ("Qwen/Qwen2.5-7B", "lora", 2, 2048, "true"),
    ("Qwen/Qwen3-0.6B", "full", 8, 1024, "none"),
    ("meta-llama/Llama-3.1-8B", "lora", 1, 8192, "true"),
    ("mistralai/Mistral-7B-v0.1", "full", 1, 2048, "true"),
    ("mistralai/Mistral-7B-v0.1", "lora", 8, 4096, "true"),
)
#: transformers + PEFT cells the fit does not see, scored with its ratios
HELD_OUT = (
    ("Qwen/Qwen3-1.7B", "lora", 2, 1024, "none"),
    ("Qwen/Qwen3-4B", "lora", 1, 2048, "true"),
    ("meta-llama/Llama-2-7b-hf", "lora", 2, 512, "none"),
    ("meta-llama/Llama-2-7b-hf", "lora", 2, 2048, "true"),
    ("microsoft/Phi-3.5-mini-instruct", "lora", 1, 4096, "true"),
    ("Qwen/Qwen2-1.5B-Instruct", "full", 4, 512, "none"),
    ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "full", 2, 2048, "true"),
    ("Qwen/Qwen3-8B", "lora", 4, 1024, "true"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "lora", 2, 2048, "none"),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", "full", 16, 1024, "none"),
    ("meta-llama/Llama-3.2-1B-Instruct", "lora", 8, 1024, "true"),
    ("Qwen/Qwen2.5-14B", "lora", 1, 2048, "true"),
)


#: torchtune's cells (its families: llama, mistral, qwen2, gemma, gemma2, phi3)
TORCHTUNE_FIT = (
    ("meta-llama/Llama-3.2-1B-Instruct", "lora", 2, 2048, "true"),
    ("meta-llama/Llama-3.2-1B-Instruct", "lora", 2, 2048, "none"),
    ("meta-llama/Llama-3.2-3B", "lora", 4, 768, "none"),
    ("meta-llama/Llama-3.2-3B", "lora", 1, 4096, "true"),
    ("Qwen/Qwen2.5-3B", "lora", 2, 2048, "none"),
    ("mistralai/Mistral-7B-v0.1", "lora", 4, 4096, "true"),
    ("Qwen/Qwen2.5-7B", "lora", 2, 2048, "true"),
    ("meta-llama/Llama-3.1-8B", "lora", 1, 8192, "true"),
    ("meta-llama/Llama-3.1-8B", "lora", 2, 1024, "none"),
    ("meta-llama/Llama-3.2-1B-Instruct", "full", 2, 1024, "none"),
)
TORCHTUNE_HELD_OUT = (
    ("Qwen/Qwen2-1.5B-Instruct", "lora", 4, 1024, "true"),
    ("meta-llama/Llama-2-7b-hf", "lora", 2, 2048, "true"),
    ("microsoft/Phi-3.5-mini-instruct", "lora", 1, 4096, "true"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "lora", 2, 1024, "none"),
    ("Qwen/Qwen2.5-14B", "lora", 1, 2048, "true"),
    ("Qwen/Qwen2-7B-Instruct", "lora", 1, 2048, "none"),
    ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "full", 2, 2048, "true"),
)
#: each stack's (fit cells, held-out cells)
CELLS = {"hf": (FIT, HELD_OUT), "torchtune": (TORCHTUNE_FIT, TORCHTUNE_HELD_OUT)}


def settings_of(cell: tuple, stack: str = "hf") -> dict:
    _, method, batch, seq, ckpt = cell
    return {"method": method, "batch_size": batch, "seq_len": seq, "gradient_checkpointing": ckpt, **COMMON,
            **STACK_SETTINGS[stack]}


def run_cell(cell: tuple, split: str, stack: str = "hf") -> dict:
    """One fake step of ``stack`` through the allocator model, beside the estimate of the same settings by the
    profile of the same name."""
    import vramwise
    from vramwise.measuring.steps import measure

    path = gpu_runs.shared_config(cell[0])
    if path is None:
        raise SystemExit(f"{cell[0]}: no shared config (../shared/configs)")
    settings = settings_of(cell, stack)
    m = measure(str(path), fake=True, steps=2, stack=stack, **settings)
    est = vramwise.estimate(str(path), profile=stack, **settings)
    return {"stack": stack, "model": cell[0], "split": split,
            **{k: settings[k] for k in ("method", "batch_size", "seq_len", "gradient_checkpointing")},
            "fake_tensor_peak": m.peak, "fake_peak_phase": m.peak_phase,
            "modelled_reserved_peak": m.modelled_reserved_peak,
            "estimate_tensor_peak": est.figures["tensor_peak"], "estimate_peak_phase": est.peak_phase,
            "estimate_activations_at_peak": est.activations}


def reserve(cell: dict) -> int:
    """What the modelled allocator holds above the fake step's tensor peak."""
    return cell["modelled_reserved_peak"] - cell["fake_tensor_peak"]


def fit(cells: list[dict]) -> dict:
    """Each stack's ratios: median reserve / activations at the peak of its fit LoRA cells, by checkpointing."""
    out: dict = {}
    for stack in sorted({c["stack"] for c in cells}):
        for name, ckpt in (("checkpointed", True), ("saved", False)):
            ratios = [reserve(c) / c["estimate_activations_at_peak"] for c in cells
                      if c["stack"] == stack and c["split"] == "fit" and c["method"] != "full"
                      and (c["gradient_checkpointing"] != "none") == ckpt]
            out.setdefault(stack, {})[name] = {
                "cells": len(ratios), "median": statistics.median(ratios) if ratios else None,
                "least": min(ratios, default=None), "most": max(ratios, default=None),
                "ratio": round(statistics.median(ratios), 2) if ratios else None}
    return out


def predicted_reserved(cell: dict, ratios: dict, flat: float) -> int:
    """The reserved peak the profile's rule gives the cell (formulas/hf/reserve.yaml, formulas/torchtune/reserve.yaml)."""
    if cell["method"] == "full":
        return round(cell["estimate_tensor_peak"] * (1 + flat))
    ratio = ratios[cell["stack"]]["checkpointed" if cell["gradient_checkpointing"] != "none" else "saved"]["ratio"]
    return round(cell["estimate_tensor_peak"] + ratio * cell["estimate_activations_at_peak"])


def scores(cells: list[dict], ratios: dict, flat: float) -> dict:
    """Median / most |error| of the reserved peak, the rule's and the flat share's, by stack, split and method
    kind."""
    out = {}
    for stack in sorted({c["stack"] for c in cells}):
        for split in ("fit", "held_out"):
            for kind in ("lora", "full"):
                rows = [c for c in cells if c["stack"] == stack and c["split"] == split
                        and (c["method"] == "full") == (kind == "full")]
                if not rows:
                    continue
                rule = [predicted_reserved(c, ratios, flat) / c["modelled_reserved_peak"] - 1 for c in rows]
                flat_ = [c["estimate_tensor_peak"] * (1 + flat) / c["modelled_reserved_peak"] - 1 for c in rows]
                out[f"{stack} {split} {kind}"] = {
                    "cells": len(rows),
                    "rule_median_abs_error": round(statistics.median(abs(e) for e in rule), 4),
                    "rule_most_abs_error": round(max(abs(e) for e in rule), 4),
                    "flat_median_abs_error": round(statistics.median(abs(e) for e in flat_), 4),
                    "flat_most_abs_error": round(max(abs(e) for e in flat_), 4)}
    return out


def render(cells: list[dict], ratios: dict, table: dict) -> str:
    g = lambda n: f"{n / GIB:6.2f}"  # noqa: E731
    lines = ["GiB; reserve: the modelled allocator above the fake step's tensor peak; act: the estimate's "
             "activations at the peak", ""]
    for c in cells:
        act = c["estimate_activations_at_peak"]
        lines.append(f"{c['stack']:9} {c['split']:8} {c['model'][:34]:34} {c['method']:4} b{c['batch_size']:<2} s{c['seq_len']:<5} "
                     f"ckpt {c['gradient_checkpointing']:4}  peak {g(c['fake_tensor_peak'])} "
                     f"(estimate {c['estimate_tensor_peak'] / c['fake_tensor_peak'] - 1:+.2%})  "
                     f"reserve {g(reserve(c))}  act {g(act)}  "
                     + (f"reserve/act {reserve(c) / act:.3f}" if act else "no activations at the peak"))
    lines.append("")
    for stack, by_mode in ratios.items():
        for name, r in by_mode.items():
            if not r["cells"]:
                lines.append(f"{stack} LoRA, {name}: no fit cells run")
                continue
            lines.append(f"{stack} LoRA, {name}: {r['cells']} fit cells, reserve / activations median "
                         f"{r['median']:.4f} [{r['least']:.3f}, {r['most']:.3f}] -> ratio {r['ratio']}")
    lines.append("")
    lines.append("reserved peak against the model's: |error| median / most, the rule (flat share for full) and "
                 "the flat share")
    for key, s in table.items():
        lines.append(f"  {key:23} {s['cells']:2} cells: rule {s['rule_median_abs_error']:.2%} / "
                     f"{s['rule_most_abs_error']:.2%}; flat {s['flat_median_abs_error']:.2%} / "
                     f"{s['flat_most_abs_error']:.2%}")
    return "\n".join(lines)


def constant(name: str) -> float:
    """A constant of formulas/shared/constants.yaml."""
    import yaml

    return yaml.safe_load((ROOT / "formulas" / "shared" / "constants.yaml").read_text())["constants"][name]["value"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write the cells and the fit to {OUT.relative_to(ROOT)}")
    ap.add_argument("--cells", type=int, default=None, help="run the first N cells only (nothing is written)")
    ap.add_argument("--show", action="store_true", help=f"show {OUT.relative_to(ROOT)} as written, running nothing")
    args = ap.parse_args(argv)
    if args.show:
        import yaml

        data = yaml.safe_load(OUT.read_text(encoding="utf-8"))
        print(render(data["cells"], data["fit"], data["scores"]))
        return 0
    todo = [(c, split, stack) for stack, (fit_cells, held) in CELLS.items()
            for split, group in (("fit", fit_cells), ("held_out", held)) for c in group]
    if args.cells is not None:
        todo = todo[:args.cells]
    cells = [run_cell(c, split, stack) for c, split, stack in todo]
    ratios = fit(cells)
    flat = constant("allocator_reserve_ratio")
    complete = all(r["ratio"] is not None for by_mode in ratios.values() for r in by_mode.values())
    table = scores(cells, ratios, flat) if complete else {}
    print(render(cells, ratios, table))
    if args.write and args.cells is None:
        import yaml

        header = ("# Written by `python benchmarks/allocator_fit.py --write`: fake training steps replayed through\n"
                  "# vramwise.profiles.caching_allocator beside the estimate of the same settings, and each stack's ratios\n"
                  "# fitted on them (hf: formulas/shared/constants.yaml allocator_reserve_checkpointed_ratio,\n"
                  "# allocator_reserve_saved_ratio; torchtune: formulas/torchtune/reserve.yaml). Do not edit by\n"
                  "# hand; docs/gpu-runs.md explains the fit.\n")
        OUT.write_text(header + yaml.safe_dump({"cells": cells, "fit": ratios, "scores": table}, sort_keys=False),
                       encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
