"""The caching allocator's reserve, modelled, against published GPU runs that give it.

For each run of the corpus (benchmarks/gpu_runs/) below, the training step is run on the CPU under fake tensors
(``vramwise measure --fake``: real shapes and lifetimes, nothing allocated), its storages' births and deaths
replayed through vramwise's model of torch's CUDA caching allocator (vramwise.profiles.caching_allocator), and the
modelled reserve put beside what the source published:

- a torch reserved peak (PEFT's method comparison): the modelled reserved peak against it;
- a torch allocated peak and an nvidia-smi reading of the same run (fms-acceleration's benchmark): the
  modelled reserve above the tensor peak, plus the CUDA context's margin (formulas/shared/constants.yaml
  cuda_context_gib), against the published gap between the two readings.

The flat share (allocator_reserve_ratio) and the estimate's own reserve for the run's settings (the hf profile's
fitted share of the activations, formulas/hf/reserve.yaml) are shown beside each. The step runs the
installed transformers (whose loss pads the labels; fms-acceleration's 4.48.1 copied the shifted logits) and
measure's loop, which holds no model output (PEFT's loop does): the tensor peaks differ from the runs' by that
much, and the comparison is of the reserve above them. QLoRA is left out: a 4-bit layer cannot be built on
fake tensors.

    python benchmarks/allocator_pairs.py [--json]

Each fake step takes 10 to 60 seconds on two cores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_runs  # noqa: E402

GIB = 2**30
#: (label, id of the run whose reading is above the tensors, id of its tensor peak or None)
PAIRS = (
    ("PEFT Llama 3.2 3B LoRA r32, batch 4 x 768", "peft-metamathqa-lora-llama-3.2-3b-rank32-2026-07-15-1x-l40s", None),
    ("fms-acceleration Mistral 7B LoRA, batch 4 x 4096",
     "fms-accel-mistral-7b-v0.1-lora-plain-1x-a100-80gb-bs4-nvidia-smi",
     "fms-accel-mistral-7b-v0.1-lora-plain-1x-a100-80gb-bs4-torch-peak-alloc"),
    ("fms-acceleration Mistral 7B LoRA, batch 8 x 4096",
     "fms-accel-mistral-7b-v0.1-lora-plain-1x-a100-80gb-bs8-nvidia-smi",
     "fms-accel-mistral-7b-v0.1-lora-plain-1x-a100-80gb-bs8-torch-peak-alloc"),
)
MEASURED_SETTINGS = ("method", "batch_size", "seq_len", "lora_rank", "target_modules", "lora_dropout",
                     "gradient_checkpointing", "optimizer")


def _model_source(model: str) -> str:
    """The shared config file where there is one (transformers builds it as published), else the catalog's."""
    path = gpu_runs.shared_config(model)
    if path is not None:
        return str(path)
    found = gpu_runs.find_config(model, None)
    if found is None:
        raise SystemExit(f"no config offline for {model}")
    return found


def constant(name: str) -> float:
    """A constant of formulas/shared/constants.yaml, the file the estimates read it from."""
    import yaml

    return yaml.safe_load((ROOT / "formulas" / "shared" / "constants.yaml").read_text())["constants"][name]["value"]


def pair(label: str, above_id: str, peak_id: str | None, runs: dict) -> dict:
    import vramwise
    from vramwise.measuring.steps import measure

    above = runs[above_id]
    _, settings = gpu_runs.run_settings(above)
    kwargs = {k: settings[k] for k in MEASURED_SETTINGS if k in settings}
    if kwargs.get("gradient_checkpointing") not in (None, "none", "true"):
        kwargs["gradient_checkpointing"] = "true"
    m = measure(_model_source(above["model"]), fake=True, steps=2, attention="sdpa", **kwargs)
    ratio = constant("allocator_reserve_ratio")
    context = constant("cuda_context_gib") * GIB
    est = vramwise.estimate(_model_source(above["model"]), profile="hf", **settings)
    out = {"label": label, "run": above_id, "statistic": above["statistic"], "settings": kwargs,
           "tensor_peak": m.peak, "modelled_reserved": m.modelled_reserved_peak,
           "modelled_reserve": m.modelled_reserved_peak - m.peak, "flat_reserve": round(ratio * m.peak),
           # the estimate's own reserve for the run's settings (formulas/hf/reserve.yaml), above its tensor peak
           "estimate_tensor_peak": est.figures["tensor_peak"],
           "estimate_reserve": est.figures["reserved"] - est.figures["tensor_peak"]}
    published = gpu_runs.published_bytes(above)
    if peak_id is None:  # a reserved peak: compared as it is
        out.update(published_reserved=published, estimate_reserved=est.figures["reserved"])
    else:  # nvidia-smi above an allocated peak: compare the gaps, the context's margin added to the model's
        out.update(published_peak=gpu_runs.published_bytes(runs[peak_id]),
                   published_gap=published - gpu_runs.published_bytes(runs[peak_id]),
                   modelled_gap=out["modelled_reserve"] + round(context), flat_gap=out["flat_reserve"] + round(context),
                   estimate_gap=out["estimate_reserve"] + round(context))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="the pairs as JSON")
    args = ap.parse_args(argv)
    runs = {r["id"]: r for r in gpu_runs.load_runs()}
    rows = [pair(label, a, p, runs) for label, a, p in PAIRS]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    g = lambda n: f"{n / GIB:6.2f}"  # noqa: E731
    print("GiB; modelled: the fake step's trace through vramwise.profiles.caching_allocator; flat: the estimates' share")
    for r in rows:
        print(f"\n{r['label']} ({r['run']})")
        print(f"  tensor peak of the fake step {g(r['tensor_peak'])}; reserve above it: modelled "
              f"{g(r['modelled_reserve'])} ({r['modelled_reserve'] / r['tensor_peak']:+.1%}), "
              f"flat {g(r['flat_reserve'])}; the estimate's reserve above its own tensor peak "
              f"({g(r['estimate_tensor_peak'])}): {g(r['estimate_reserve'])}")
        if "published_reserved" in r:
            print(f"  reserved: published {g(r['published_reserved'])}, modelled {g(r['modelled_reserved'])} "
                  f"({r['modelled_reserved'] / r['published_reserved'] - 1:+.1%}), flat "
                  f"{g(r['tensor_peak'] + r['flat_reserve'])} "
                  f"({(r['tensor_peak'] + r['flat_reserve']) / r['published_reserved'] - 1:+.1%}), the estimate "
                  f"{g(r['estimate_reserved'])} ({r['estimate_reserved'] / r['published_reserved'] - 1:+.1%})")
        else:
            print(f"  nvidia-smi above the allocated peak: published {g(r['published_gap'])}, modelled "
                  f"{g(r['modelled_gap'])}, flat {g(r['flat_gap'])}, the estimate {g(r['estimate_gap'])} (each with "
                  f"the context's margin)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
