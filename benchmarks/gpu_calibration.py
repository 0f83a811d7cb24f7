"""Measure on one GPU what a CPU cannot see, beside vramwise's estimates of the same settings.

On the device machine (one NVIDIA H100 or H200, no network; the project's venv carries torch, transformers,
PEFT and bitsandbytes), from the repository root, in under 8 minutes::

    . .venv/bin/activate && python benchmarks/gpu_calibration.py --budget-s 420 --out "$OUT"

then, back here, fold the figures of the published JSON into the corpus (benchmarks/gpu_runs/)::

    python benchmarks/gpu_calibration.py --to-corpus RESULT.json --source-url https://.../RESULT.json

``--dry-run`` runs the same logic on the CPU with tiny shapes (seconds, no CUDA) and writes a file of the
same format: the CUDA-only figures are entries of status ``dry-run`` with no value.

What it measures, one phase after the other, each within its share of ``--budget-s``:

1. ``context``: the device memory the CUDA context takes (NVML's used memory after ``torch.cuda.init()`` and a
   first kernel, minus before, less what the caching allocator holds), in a fresh process;
2. ``allocator``: the caching allocator's reserve at the peak of three patterns of tensors (many small ones
   freed in a checkerboard, a few large ones, a training-like step), as ``max_memory_allocated`` and
   ``max_memory_reserved`` beside the bytes requested, in one fresh process per ``PYTORCH_CUDA_ALLOC_CONF``
   (unset, then ``expandable_segments:True``);
3. ``workspaces``: what the first bf16 matmul leaves allocated besides its output (cuBLAS' workspace) and what
   NVML sees grow outside the allocator (cuBLAS' handle and kernels); the bytes the attention kernels of
   ``scaled_dot_product_attention`` (flash, memory-efficient, cuDNN, math) take beyond their inputs and
   outputs in the forward and the backward, at sequence lengths 1,024, 4,096 and 16,384;
4. ``training``: real steps (``vramwise.measure`` on CUDA: torch's allocated and reserved peaks and NVML's
   figure for the process) of transformers + PEFT at three shapes, the last a long context: LoRA on
   TinyLlama/TinyLlama-1.1B-Chat-v1.0 unchanged first (the catalog's config: these rows can join the corpus),
   then LoRA and full on examples/llama-3.1-8b.json cut to 4 decoder layers (every width, the vocabulary and
   the rotary settings kept: the kernels are the 8B model's; 1.9B parameters), then QLoRA of both when
   bitsandbytes imports; torchtune's and LitGPT's LoRA steps when they import (``vramwise measure`` runs those
   two stacks on the CPU only: on a GPU their rows are skipped with its reason; Unsloth: vramwise measures no
   Unsloth step). Each row carries ``vramwise.estimate(..., profile=<the stack's>)``'s figures for the same
   settings (LoRA rank 16, the profile's default targets, AdamW (foreach), sdpa attention);
5. ``boundary``: the longest sequence a LoRA step of TinyLlama-1.1B-Chat (batch 1, checkpointing) fits,
   by doubling from 16,384 tokens and then bisecting to 4,096, stopped when the next probe would overrun the
   phase's time; an out-of-memory error is the upper bound. Beside it the longest that vramwise's device
   figure fits in the GPU's memory (the same search over estimates).

Each figure prints one line and is added at once to ``<out>/gpu_calibration_<gpu>_<date>.json`` (rewritten
whole after each figure, so a run cut short keeps what it measured); ``complete`` is true once every phase has
ended. The GPU phases run in child processes (a fresh CUDA context each, killed when their time is up); the
parent never initialises CUDA.

The result (format ``vramwise-gpu-calibration-1``)::

    {"format": ..., "dry_run": bool, "started": ISO time, "budget_s": s, "complete": bool,
     "environment": {"python", "torch", "cuda", "transformers", "peft", "bitsandbytes", "vramwise",
                     "gpu": {"name", "total_bytes"}},
     "figures": [{"phase", "name", "status": measured | dry-run | skipped | oom | error,
                  "value", "unit", "line", ...}]}

A ``training`` figure also has ``model`` (``{"label", "hub_id", "overrides"}``), ``stack``, ``settings``,
``measured`` (bytes: ``torch_max_allocated``, ``torch_max_reserved``, ``nvml_process``) and ``estimated``
(vramwise's ``figures``: ``tensor_peak``, ``reserved``, ``device``); a ``boundary`` figure ``measured``
(``largest_seq_len``, ``first_oom_seq_len``) and ``estimated`` (``largest_seq_len``).

``--to-corpus`` writes the corpus format (schemas/gpu-runs-1.schema.json) from a result: one run per reading
(``torch_max_allocated``, ``torch_max_reserved``, ``nvidia_smi`` in MiB; ``oom`` for a step out of memory;
``largest_seq_len`` in tokens) of each figure whose model is a hub model left unchanged (the scorer finds a
model by its hub id: the cut Llama rows stay in the JSON only). ``--source-url`` is where the result is
published (the committed JSON, pinned to its commit); each run quotes the line this script printed for it.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
FORMAT = "vramwise-gpu-calibration-1"
MIB = 2**20
STATUSES = ("measured", "dry-run", "skipped", "oom", "error")
PHASES = ("context", "allocator", "workspaces", "training", "boundary")
#: each phase's share of the budget (what one leaves unused goes to the next ones)
SHARES = {"context": 0.04, "allocator": 0.10, "workspaces": 0.08, "training": 0.53, "boundary": 0.25}
STACKS = ("hf", "torchtune", "litgpt", "unsloth")
ALLOC_CONFS = (None, "expandable_segments:True")
CUT_MODEL = "examples/llama-3.1-8b.json"
CORPUS_MODEL = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
#: the cut: four decoder layers of Llama 3.1 8B, every width kept
GPU_CUT = {"num_hidden_layers": 4}
#: dry-run: one narrow layer and a small vocabulary, one step a row (seconds on one CPU core)
TINY = {"num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256}
GPU_SHAPES = ((1, 512, "none"), (4, 2048, "none"), (1, 16384, "true"))  # batch, seq_len, gradient checkpointing
TINY_SHAPES = ((1, 16, "none"), (2, 32, "none"), (1, 64, "true"))


# ----------------------------------------------------------------------------------------------- the record


class Recorder:
    """The result file, rewritten whole (through a temporary file) after each figure."""

    def __init__(self, path: Path, *, dry_run: bool, budget_s: float, echo: Callable[[str], None] = print):
        self.path = path
        self.echo = echo
        self.data: dict[str, Any] = {
            "format": FORMAT, "dry_run": dry_run,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "budget_s": budget_s, "complete": False, "environment": {}, "figures": [],
        }
        self.write()

    def environment(self, env: dict) -> None:
        self.data["environment"].update(env)
        self.write()

    def add(self, figure: dict) -> None:
        figure.setdefault("line", _line(figure))
        self.data["figures"].append(figure)
        self.echo(figure["line"])
        self.write()

    def finish(self) -> None:
        self.data["complete"] = True
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


def _line(f: dict) -> str:
    """The one line printed for a figure (quoted by the corpus runs made from it)."""
    head = f"{f['phase']}: {f['name']}"
    if f["status"] == "measured" and f.get("value") is not None:
        text = f"{head} = {_num(f['value'])} {f['unit']}"
        if f.get("estimated_value") is not None:
            text += f" (estimated {_num(f['estimated_value'])} {f['unit']})"
    else:
        text = f"{head}: {f['status']}" + (f" ({f['reason']})" if f.get("reason") else "")
    return text


def _num(v: float) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"


def fig(phase: str, name: str, value=None, unit: str = "MiB", status: str = "measured", **extra) -> dict:
    return {"phase": phase, "name": name, "status": status, "value": value, "unit": unit, **extra}


def _mib(n: int | None) -> float | None:
    return None if n is None else round(n / MIB, 1)


# ----------------------------------------------------------------------------------------------- the phases


def _environment(dry_run: bool) -> dict:
    import torch

    import vramwise

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "vramwise": vramwise.version.VERSION}
    for name in ("transformers", "peft", "bitsandbytes", "torchtune", "litgpt"):
        env[name] = _version_of(name)
    if not dry_run:
        p = torch.cuda.get_device_properties(0)
        env["gpu"] = {"name": p.name, "total_bytes": int(p.total_memory)}
    else:
        env["gpu"] = {"name": "dry-run (cpu)", "total_bytes": None}
    return env


def _version_of(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _nvml_used() -> tuple[int | None, int | None]:
    """(device memory used, this process's), as NVML reads them; None where NVML does not answer."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            used = int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
            mine = None
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                if proc.pid == os.getpid() and proc.usedGpuMemory:
                    mine = int(proc.usedGpuMemory)
            return used, mine
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML is optional
        return None, None


def phase_context(emit, dry_run: bool, deadline: float, **_) -> None:
    if dry_run:
        emit(fig("context", "cuda_context", status="dry-run", reason="dry-run: no CUDA on the CPU"))
        return
    import torch

    before, _mine = _nvml_used()
    torch.cuda.init()
    x = torch.ones(1, device="cuda")
    (x + 1).sum().item()
    torch.cuda.synchronize()
    after, mine = _nvml_used()
    free, total = torch.cuda.mem_get_info()
    held = torch.cuda.memory_reserved()
    if before is not None and after is not None:
        emit(fig("context", "cuda_context", _mib(after - before - held),
                 detail="NVML used after torch.cuda.init() and a first kernel, minus before, less the allocator's "
                        "reserve",
                 bytes={"nvml_before": before, "nvml_after": after, "allocator_reserved": held}))
    else:
        emit(fig("context", "cuda_context", status="skipped", reason="NVML (pynvml) does not answer"))
    emit(fig("context", "device_used_after_first_kernel", _mib(total - free),
             detail="torch.cuda.mem_get_info: total minus free (every process on the device)"))
    if mine is not None:
        emit(fig("context", "nvml_process_after_first_kernel", _mib(mine)))


class Live:
    """Tensors of an allocation pattern and the bytes they request (their peak is what the allocator is asked),
    fed as well to vramwise's model of the caching allocator, whose figures go beside the GPU's."""

    def __init__(self, device: str):
        from vramwise.profiles.caching_allocator import CachingAllocatorModel

        self.device, self.now, self.peak, self.items = device, 0, 0, {}
        self.model, self.handles = CachingAllocatorModel(), {}

    def new(self, key, nbytes: int):
        import torch

        t = torch.empty(max(1, nbytes // 2), dtype=torch.bfloat16, device=self.device)
        self.items[key] = t
        self.handles[key] = self.model.malloc(t.nbytes)
        self.now += t.nbytes
        self.peak = max(self.peak, self.now)
        return t

    def free(self, key) -> None:
        t = self.items.pop(key)
        self.model.free(self.handles.pop(key))
        self.now -= t.nbytes


def pattern_many_small(live: Live, scale: float) -> None:
    """20,000 tensors of 1 KiB to 1 MiB (seeded sizes), every other one freed, then as many 1.5 times larger."""
    import random

    rng = random.Random(0)
    n = max(16, int(20000 * scale))
    sizes = [rng.choice((1, 4, 16, 64, 256, 1024)) * 1024 for _ in range(n)]
    for i, s in enumerate(sizes):
        live.new(("a", i), s)
    for i in range(0, n, 2):
        live.free(("a", i))
    for i in range(0, n, 2):
        live.new(("b", i), int(sizes[i] * 1.5))


def pattern_few_large(live: Live, scale: float) -> None:
    """Four tensors of 1 GiB and one of 1.5 GiB; the second freed and one of 0.75 GiB taken in its place."""
    g = int(2**30 * scale)
    for i in range(4):
        live.new(i, g)
    live.new(4, g * 3 // 2)
    live.free(1)
    live.new(5, g * 3 // 4)


def pattern_training(live: Live, scale: float) -> None:
    """Two steps of a 16-layer model: 64 MiB of weights a layer, activations of 5 sizes a layer kept for the
    backward, which frees them in reverse while gradients of the weights appear, then a temporary of the
    optimizer per layer."""
    w = int(64 * MIB * scale)
    acts = [int(s * MIB * scale) for s in (8, 24, 24, 8, 48)]
    layers = 16
    for i in range(layers):
        live.new(("w", i), w)
    for step in range(2):
        for i in range(layers):
            for j, a in enumerate(acts):
                live.new(("act", i, j), a)
        for i in reversed(range(layers)):
            live.new(("tmp", i), acts[-1] * 2)
            for j in range(len(acts)):
                live.free(("act", i, j))
            live.free(("tmp", i))
            if ("g", i) not in live.items:
                live.new(("g", i), w)
        for i in range(layers):
            live.new(("opt", i), w)
            live.free(("opt", i))


PATTERNS = {"many_small": pattern_many_small, "few_large": pattern_few_large, "training_like": pattern_training}


def phase_allocator(emit, dry_run: bool, deadline: float, alloc_conf: str | None = None, **_) -> None:
    conf = alloc_conf or "default"
    device = "cpu" if dry_run else "cuda"
    if not dry_run:
        import torch
    for name, pattern in PATTERNS.items():
        if time.monotonic() > deadline:
            emit(fig("allocator", f"{name}[{conf}]", status="skipped", reason="out of time"))
            continue
        live = Live(device)
        if not dry_run:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            pattern(live, 1e-3 if dry_run else 1.0)
        except Exception as e:  # noqa: BLE001 - recorded, the next pattern runs
            if _is_oom(e):
                emit(fig("allocator", f"{name}[{conf}]", status="oom", reason=_short(e)))
                continue
            raise
        requested = live.peak
        # vramwise.profiles.caching_allocator models the default configuration only (no expandable segments)
        modelled = ({"modelled_max_allocated": live.model.max_allocated, "modelled_max_reserved": live.model.max_reserved}
                    if alloc_conf is None else {})
        if dry_run:
            emit(fig("allocator", f"{name}[{conf}]", status="dry-run", reason="dry-run: no caching allocator",
                     bytes={"requested_peak": requested, **modelled}))
            continue
        torch.cuda.synchronize()
        allocated, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
        del live
        emit(fig("allocator", f"{name}[{conf}].max_memory_allocated", _mib(allocated), alloc_conf=alloc_conf,
                 bytes={"requested_peak": requested, "max_allocated": allocated, "max_reserved": reserved,
                        **modelled}))
        emit(fig("allocator", f"{name}[{conf}].max_memory_reserved", _mib(reserved), alloc_conf=alloc_conf,
                 ratio_reserved_to_allocated=round(reserved / allocated, 4) if allocated else None))


def phase_workspaces(emit, dry_run: bool, deadline: float, **_) -> None:
    import torch
    import torch.nn.functional as F

    device = "cpu" if dry_run else "cuda"
    n = 64 if dry_run else 4096
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    if dry_run:
        (a @ b).sum().item()
        emit(fig("workspaces", "cublas_workspace_bf16_matmul", status="dry-run", reason="dry-run: no cuBLAS"))
    else:
        torch.cuda.synchronize()
        alloc0, res0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        nvml0, _ = _nvml_used()
        c = a @ b
        torch.cuda.synchronize()
        alloc1, res1 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        nvml1, _ = _nvml_used()
        emit(fig("workspaces", "cublas_workspace_bf16_matmul", _mib(alloc1 - alloc0 - c.nbytes),
                 detail=f"allocated after the first {n}x{n} bf16 matmul, less its output"))
        emit(fig("workspaces", "cublas_first_matmul_reserved_growth", _mib(res1 - res0)))
        if nvml0 is not None and nvml1 is not None:
            emit(fig("workspaces", "cublas_first_matmul_outside_allocator", _mib((nvml1 - nvml0) - (res1 - res0)),
                     detail="NVML growth less the allocator's: cuBLAS' handle and the kernels loaded"))
        del c
    # the backward runs on autograd's device thread, whose cuBLAS handle takes a workspace of its own
    # (formulas/shared/constants.yaml cuda_context_gib: CublasHandlePool.cpp, a workspace per handle and stream)
    x = torch.randn(n, n, dtype=torch.bfloat16, device=device, requires_grad=True)
    y = (x @ b).sum()
    if dry_run:
        y.backward()
        emit(fig("workspaces", "cublas_workspace_backward_thread", status="dry-run", reason="dry-run: no cuBLAS"))
    else:
        torch.cuda.synchronize()
        alloc0 = torch.cuda.memory_allocated()
        y.backward()
        torch.cuda.synchronize()
        alloc1 = torch.cuda.memory_allocated()
        emit(fig("workspaces", "cublas_workspace_backward_thread", _mib(alloc1 - alloc0 - x.grad.nbytes),
                 detail=f"allocated across the first backward of a {n}x{n} bf16 matmul, less the input's gradient"))
    del x, y
    del a, b
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [("math", SDPBackend.MATH)] if dry_run else [
        ("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
        ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    shapes = [(1, 4, 32, 16)] if dry_run else [(1, 32, 1024, 128), (1, 32, 4096, 128), (1, 32, 16384, 128)]
    for label, backend in backends:
        for bsz, heads, seq, dim in shapes:
            name = f"sdpa_{label}[b{bsz},h{heads},s{seq},d{dim}]"
            if label == "math" and seq > 4096:
                emit(fig("workspaces", name, status="skipped",
                         reason="the math kernel's scores are s^2: above 4,096 skipped"))
                continue
            if time.monotonic() > deadline:
                emit(fig("workspaces", name, status="skipped", reason="out of time"))
                continue
            try:
                _sdpa_figures(emit, name, backend, (bsz, heads, seq, dim), device, dry_run, F, sdpa_kernel, torch)
            except Exception as e:  # noqa: BLE001 - a kernel this GPU or build lacks is recorded, the rest run
                emit(fig("workspaces", name, status="oom" if _is_oom(e) else "skipped", reason=_short(e)))
            finally:
                if not dry_run:
                    gc.collect()
                    torch.cuda.empty_cache()


def _sdpa_figures(emit, name, backend, shape, device, dry_run, F, sdpa_kernel, torch) -> None:
    q, k, v = (torch.randn(*shape, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(3))
    if dry_run:
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        emit(fig("workspaces", name, status="dry-run", reason="dry-run: no CUDA kernels"))
        return
    grad = torch.randn(*shape, dtype=torch.bfloat16, device=device)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.cuda.synchronize()
        fwd_peak = torch.cuda.max_memory_allocated() - base - out.nbytes
        saved = torch.cuda.memory_allocated() - base - out.nbytes
        torch.cuda.reset_peak_memory_stats()
        before_bwd = torch.cuda.memory_allocated()
        out.backward(grad)
        torch.cuda.synchronize()
        grads = sum(t.grad.nbytes for t in (q, k, v))
        bwd_peak = torch.cuda.max_memory_allocated() - before_bwd - grads
    emit(fig("workspaces", f"{name}.forward_beyond_output", _mib(fwd_peak)))
    emit(fig("workspaces", f"{name}.saved_for_backward", _mib(saved),
             detail="beside the output: logsumexp and the like"))
    emit(fig("workspaces", f"{name}.backward_beyond_grads", _mib(bwd_peak)))


def _is_oom(e: BaseException) -> bool:
    """An out-of-memory error, or one raised from it (measure words a stack's failure as its own error)."""
    seen = 0
    while e is not None and seen < 8:
        if type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower():
            return True
        e, seen = (e.__cause__ or e.__context__), seen + 1
    return False


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"


# ------------------------------------------------------------------------------------------ training steps


def model_spec(which: str, dry_run: bool) -> dict:
    """A model of the training rows: its label, its config dict, its hub id and what was changed in it."""
    from vramwise.inputs.config import read_config

    if which == "cut":
        cfg, _ = read_config(str(ROOT / CUT_MODEL))
        overrides = dict(TINY if dry_run else GPU_CUT)
        label, hub = "llama-3.1-8b-4-layers" if not dry_run else "llama-3.1-8b-tiny", "meta-llama/Llama-3.1-8B"
    else:
        cfg, _ = read_config(f"catalog:{CORPUS_MODEL}")
        overrides = dict(TINY) if dry_run else {}
        label, hub = "tinyllama-1.1b-chat" + ("-tiny" if dry_run else ""), CORPUS_MODEL
    return {"label": label, "hub_id": hub, "overrides": overrides, "config": {**cfg, **overrides}}


def _stack_rows(dry_run: bool) -> list[tuple[str, str, str]]:
    """(model, stack, method) in the order they run (the most telling first: a run cut short keeps those)."""
    has_bnb = importlib.util.find_spec("bitsandbytes") is not None and not dry_run
    rows = [("corpus", "hf", "lora"), ("cut", "hf", "lora"), ("cut", "hf", "full")]
    rows += [("corpus", "hf", "qlora"), ("cut", "hf", "qlora")] if has_bnb else []
    rows += [("cut", "torchtune", "lora"), ("cut", "litgpt", "lora"), ("cut", "unsloth", "lora")]
    return rows


def _settings(method: str, batch: int, seq: int, ckpt: str) -> dict:
    return {"method": method, "batch_size": batch, "seq_len": seq, "lora_rank": 16, "gradient_checkpointing": ckpt,
            "optimizer": "adamw_torch", "attention": "sdpa"}


def phase_training(emit, dry_run: bool, deadline: float, stacks: tuple = STACKS, **_) -> None:
    import vramwise

    shapes = TINY_SHAPES if dry_run else GPU_SHAPES
    models = {w: model_spec(w, dry_run) for w in ("cut", "corpus")}
    if importlib.util.find_spec("bitsandbytes") is None:
        emit(fig("training", "hf.qlora", status="skipped", reason="bitsandbytes does not import"))
    elif dry_run:
        emit(fig("training", "hf.qlora", status="skipped", reason="dry-run: QLoRA's 4-bit kernels need CUDA"))
    for which, stack, method in _stack_rows(dry_run):
        model = models[which]
        base = f"{model['label']}.{stack}.{method}"
        if stack not in stacks:
            emit(fig("training", base, status="skipped", reason="not in --stacks"))
            continue
        if stack == "unsloth" or importlib.util.find_spec(stack if stack != "hf" else "transformers") is None:
            why = ("vramwise measures no Unsloth step" if stack == "unsloth" and importlib.util.find_spec("unsloth")
                   else f"{stack} does not import")
            emit(fig("training", base, status="skipped", reason=why))
            continue
        for batch, seq, ckpt in shapes:
            if stack == "litgpt":  # LitGPT checkpoints only under its FSDP strategy: its long row runs without
                ckpt = "none"
            settings = _settings(method, batch, seq, ckpt)
            name = f"{base}[b{batch},s{seq},ckpt={ckpt}]"
            if time.monotonic() > deadline:
                emit(fig("training", name, status="skipped", reason="out of time"))
                continue
            emit(training_row(vramwise, model, stack, settings, name, dry_run))


def _public_model(model: dict) -> dict:
    return {k: model[k] for k in ("label", "hub_id", "overrides")}


def training_row(vramwise, model: dict, stack: str, settings: dict, name: str, dry_run: bool) -> dict:
    """One training row: the measured step and vramwise's estimate of the same settings."""
    row = {"model": _public_model(model), "stack": stack, "settings": settings}
    try:
        est = vramwise.estimate(model["config"], profile=stack, **settings)
        estimated = dict(est.figures)
    except vramwise.VramwiseError as e:
        estimated = {"error": str(e)}
    row["estimated"] = estimated
    try:
        m = vramwise.measure(model["config"], stack=stack, steps=1 if dry_run else 2,
                             device="cpu" if dry_run else "cuda", **settings)
    except Exception as e:  # noqa: BLE001 - an OOM is a figure; any other failure is recorded and the next row runs
        status = "oom" if _is_oom(e) else "skipped" if isinstance(e, vramwise.SettingsError) else "error"
        return fig("training", name, status=status, reason=_short(e), **row)
    finally:
        _release(dry_run)
    row["measured"] = {"torch_max_allocated": m.peak, "torch_max_reserved": m.reserved_peak,
                       "nvml_process": m.process_bytes, "peak_phase": m.peak_phase}
    extra = {} if estimated.get("tensor_peak") is None else {"estimated_value": _mib(estimated["tensor_peak"])}
    return fig("training", name, _mib(m.peak), **extra, **row,
               detail="value: torch's max_memory_allocated over the step (on the CPU: the storage tracker's peak)")


def _release(dry_run: bool) -> None:
    gc.collect()
    if not dry_run:
        import torch

        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------- long-context boundary


def phase_boundary(emit, dry_run: bool, deadline: float, **_) -> None:
    import vramwise

    model = model_spec("corpus", dry_run)
    settings = {k: v for k, v in _settings("lora", 1, 0, "true").items() if k != "seq_len"}
    steps = 1 if dry_run else 2
    name = f"{model['label']}.hf.lora[b1,ckpt=true].largest_seq_len"
    if dry_run:
        # no device to fill: a limit of bytes stands for one (the tracker's peak at 48 tokens), so that the
        # doubling and the bisection run as on a GPU
        limit = vramwise.measure(model["config"], **settings, seq_len=48, steps=1).peak
        start, step, cap = 32, 16, 128
    else:
        import torch

        limit = int(torch.cuda.get_device_properties(0).total_memory)
        start, step, cap = 16384, 4096, 2**21

    def fits(seq: int) -> bool:
        try:
            m = vramwise.measure(model["config"], **settings, seq_len=seq, steps=steps,
                                 device="cpu" if dry_run else "cuda")
            return not dry_run or m.peak <= limit
        except Exception as e:  # noqa: BLE001 - only an out-of-memory error is an answer
            if _is_oom(e):
                return False
            raise
        finally:
            _release(dry_run)

    def told(seq: int, ok: bool) -> None:  # each probe as it ends: a run killed mid-search keeps them
        emit(fig("boundary", f"{name}.probe[s{seq}]", seq if ok else None, unit="tokens",
                 status="measured" if ok else "oom", reason=None if ok else "out of memory"))

    lo, hi, cut_short, probes = boundary_search(fits, start, step, cap, deadline, told)
    est_lo = _estimated_boundary(vramwise, model["config"], settings, limit, start, step, cap, dry_run)
    emit(fig("boundary", name, lo, unit="tokens", status="measured" if lo else "oom",
             estimated_value=est_lo, model=_public_model(model), stack="hf", settings=settings,
             measured={"largest_seq_len": lo, "first_oom_seq_len": hi, "probes": probes,
                       "stopped_by_time": cut_short, "resolution": step, "limit_bytes": limit},
             estimated={"largest_seq_len": est_lo, "figure": "tensor_peak" if dry_run else "device"}))


def boundary_search(fits: Callable[[int], bool], start: int, step: int, cap: int, deadline: float,
                    told: Callable[[int, bool], None] = lambda seq, ok: None):
    """(largest that fits, smallest that did not or None, stopped by time, probes): doubling from ``start``
    until a probe fails or ``cap`` is passed, then bisection to ``step``; a probe that would end past
    ``deadline`` is not started (its time foreseen as 1.5 times the last one's, scaled by the ratio of their
    lengths to the power 1.5: between the linear layers' time and attention's quadratic one). ``told(seq,
    fitted)`` hears each probe as it ends."""
    lo, hi, probes, last = 0, None, [], (0.0, 1)

    def in_time(seq: int) -> bool:
        took, at = last
        return time.monotonic() + 1.5 * took * (seq / at) ** 1.5 < deadline

    seq = start
    while seq <= cap:
        if not in_time(seq):
            return lo, hi, True, probes
        t0 = time.monotonic()
        ok = fits(seq)
        last = (time.monotonic() - t0, seq)
        probes.append([seq, ok])
        told(seq, ok)
        if not ok:
            hi = seq
            break
        lo, seq = seq, seq * 2
    while hi is not None and hi - lo > step:
        mid = (lo + hi) // 2 // step * step or step
        if mid <= lo:
            break
        if not in_time(mid):
            return lo, hi, True, probes
        t0 = time.monotonic()
        ok = fits(mid)
        last = (time.monotonic() - t0, mid)
        probes.append([mid, ok])
        told(mid, ok)
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo, hi, False, probes


def _estimated_boundary(vramwise, cfg, settings, limit, start, step, cap, dry_run) -> int | None:
    figure = "tensor_peak" if dry_run else "device"

    def fits(seq):
        return vramwise.estimate(cfg, profile="hf", **settings, seq_len=seq).figures[figure] <= limit

    try:
        lo, _hi, _cut, _p = boundary_search(fits, start, step, cap, float("inf"))
    except vramwise.VramwiseError:
        return None
    return lo or None


# ------------------------------------------------------------------------------------------- orchestration

WORKERS = {"context": phase_context, "allocator": phase_allocator, "workspaces": phase_workspaces,
           "training": phase_training, "boundary": phase_boundary}
TAG = "@@figure "


def run_child(phase: str, recorder: Recorder, deadline: float, alloc_conf: str | None = None,
              stacks: tuple = STACKS) -> None:
    """Run one phase in a fresh process (its own CUDA context), recording each figure it prints as it comes;
    killed 10 s after its deadline (the figures it gave stay)."""
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if alloc_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", phase,
           "--deadline-in", f"{deadline - time.monotonic():.1f}", "--stacks", ",".join(stacks)]
    cmd += ["--alloc-conf", alloc_conf] if alloc_conf else []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    err: list[str] = []
    drain = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    drain.start()
    timer = threading.Timer(max(1.0, deadline - time.monotonic() + 10), proc.kill)
    timer.start()
    try:
        for raw in proc.stdout:
            if raw.startswith(TAG):
                item = json.loads(raw[len(TAG):])
                if item.get("environment"):
                    recorder.environment(item["environment"])
                else:
                    recorder.add(item)
        rc = proc.wait()
    finally:
        timer.cancel()
    drain.join(timeout=5)
    if rc != 0:
        said = [x.strip() for x in err if x.strip()]  # its last line: the exception, for a traceback
        what = "killed when its time was up" if rc < 0 else f"exited {rc}: {said[-1][:300] if said else 'nothing said'}"
        recorder.add(fig(phase, f"{phase}{'[' + alloc_conf + ']' if alloc_conf else ''}.process", status="error",
                         reason=what))


def worker_main(phase: str, deadline_in: float, alloc_conf: str | None, stacks: tuple = STACKS) -> int:
    deadline = time.monotonic() + deadline_in

    def emit(item: dict) -> None:
        print(TAG + json.dumps(item), flush=True)

    WORKERS[phase](emit, dry_run=False, deadline=deadline, alloc_conf=alloc_conf, stacks=stacks)
    if phase == "context":  # after the context is measured: asking torch for the GPU's properties makes one
        emit({"environment": _environment(False)})
    return 0


def calibrate(out: Path, budget_s: float, dry_run: bool, echo: Callable[[str], None] = print,
              stacks: tuple = STACKS) -> Path:
    """Run every phase within ``budget_s``; the result's path."""
    t0 = time.monotonic()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if dry_run:
        name = f"gpu_calibration_dry-run_{stamp}.json"
    else:
        name = f"gpu_calibration_{_gpu_slug()}_{stamp}.json"
    recorder = Recorder(out / name, dry_run=dry_run, budget_s=budget_s, echo=echo)
    echo(f"writing {recorder.path}")
    if dry_run:
        recorder.environment(_environment(True))
    used = 0.0
    for i, phase in enumerate(PHASES):
        spent = time.monotonic() - t0
        # the phase's share of what is left, in proportion to the shares of the phases still to run
        left_shares = sum(SHARES[p] for p in PHASES[i:])
        deadline = time.monotonic() + max(1.0, (budget_s - spent) * SHARES[phase] / left_shares)
        if dry_run:
            WORKERS[phase](recorder.add, dry_run=True, deadline=deadline, stacks=stacks)
        elif phase == "allocator":
            for n, conf in enumerate(ALLOC_CONFS):
                part = time.monotonic() + (deadline - time.monotonic()) / (len(ALLOC_CONFS) - n)
                run_child(phase, recorder, part, conf)
        else:
            run_child(phase, recorder, deadline, stacks=stacks)
        used = time.monotonic() - t0
    recorder.data["elapsed_s"] = round(used, 1)
    recorder.finish()
    echo(f"done in {used:.0f} s: {len(recorder.data['figures'])} figures in {recorder.path}")
    return recorder.path


def _gpu_slug() -> str:
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20).stdout.splitlines()[0]
    except Exception:  # noqa: BLE001 - a name for the file only
        name = "gpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


# ------------------------------------------------------------------------------------------- the converter

#: corpus statistic of each measured reading of a training row
READINGS = (("torch_max_allocated", "torch_max_allocated"), ("torch_max_reserved", "torch_max_reserved"),
            ("nvml_process", "nvidia_smi"))
FRAMEWORK = {"hf": "hf", "torchtune": "torchtune", "litgpt": "litgpt"}
READ_AS = {"torch_max_allocated": "torch.cuda.max_memory_allocated over the steps, the model's load included.",
           "torch_max_reserved": "torch.cuda.max_memory_reserved over the steps.",
           "nvidia_smi": "NVML's memory of the process after the last step: the allocator's cache and the CUDA "
                         "context included (the cache is emptied before each row)."}


def to_corpus(result: dict, source_url: str, *, allow_dry_run: bool = False) -> dict:
    """The corpus file (schemas/gpu-runs-1.schema.json) of a result: one run per reading of each measured
    figure of an unchanged hub model (with ``allow_dry_run``, a dry run's figures too, marked so: a check of the
    format, never a corpus file)."""
    if result.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} result (format {result.get('format')!r})")
    if result.get("dry_run") and not allow_dry_run:
        raise ValueError("a dry run's figures are not GPU figures: nothing to add to the corpus")
    if not source_url.startswith("https://"):
        raise ValueError(f"--source-url must be an https:// address, got {source_url!r}")
    env = result.get("environment") or {}
    gpu = env.get("gpu") or {}
    versions = {k: str(env[k]) for k in ("torch", "transformers", "peft", "bitsandbytes", "torchtune", "litgpt",
                                         "vramwise") if env.get(k)}
    date = result.get("started", "")[:10]
    slug = re.sub(r"[^a-z0-9]+", "-", str(gpu.get("name", "gpu")).lower()).strip("-")
    runs = []
    for f in result.get("figures", []):
        model = f.get("model")
        if f.get("status") not in ("measured", "oom") or not model or not model.get("hub_id"):
            continue
        if model.get("overrides") and not allow_dry_run:
            continue
        s = f["settings"]
        stated = dict(s)
        base = (f"vramwise-gpu-calibration-{slug}-{date}-{model['label']}-{f.get('stack', 'hf')}-{s['method']}"
                f"-b{s['batch_size']}" + (f"-s{s['seq_len']}" if f["phase"] == "training" else "")
                + f"-ckpt-{s['gradient_checkpointing']}")
        note = (f"Measured by benchmarks/gpu_calibration.py on {gpu.get('name')} (random weights, synthetic tokens, "
                f"{'2 steps' if f['phase'] == 'training' else 'one step a probe'}).")
        if result.get("dry_run"):
            note += " Dry run on the CPU with a model cut to tiny shapes: a check of the format, not a GPU figure."
        common = {"source": {"url": source_url, "date": date, "quote": f["line"]},
                  "framework": FRAMEWORK.get(f.get("stack", "hf"), "other"), "versions": versions,
                  "model": model["hub_id"],
                  **({"gpu": _corpus_gpu(gpu)} if gpu.get("total_bytes") else {}),
                  "settings": {"stated": stated}}
        if f["phase"] == "training" and f["status"] == "oom":
            runs.append({"id": f"{base}-oom", **common, "statistic": "oom", "value": True, "unit": "bool",
                         "notes": note + " The step ran out of memory."})
        elif f["phase"] == "training":
            for key, statistic in READINGS:
                value = f["measured"].get(key)
                if value:
                    read = READ_AS[statistic]
                    runs.append({"id": f"{base}-{statistic.replace('_', '-')}", **common, "statistic": statistic,
                                 "value": round(value / MIB, 1), "unit": "MiB", "notes": f"{note} {read}"})
        elif f["phase"] == "boundary" and f.get("value"):
            runs.append({"id": f"{base}-largest-seq-len", **common, "statistic": "largest_seq_len",
                         "value": int(f["value"]), "unit": "tokens",
                         "notes": note + f" Doubling then bisection to {f['measured']['resolution']} tokens."})
    if not runs:
        raise ValueError("no measured figure of an unchanged hub model in this result")
    return {"schema_version": 1,
            "description": "GPU memory measured by vramwise's benchmarks/gpu_calibration.py (vramwise measure on "
                           "CUDA: random weights, synthetic tokens), one run per reading; the source is the published "
                           "result.",
            "runs": runs}


def _corpus_gpu(gpu: dict) -> dict:
    return {"name": gpu["name"], "memory_gib": round(gpu["total_bytes"] / 2**30, 1), "count": 1}


def write_corpus(result_path: Path, source_url: str, corpus_out: Path | None, *, allow_dry_run: bool = False) -> Path:
    import yaml

    result = json.loads(result_path.read_text(encoding="utf-8"))
    corpus = json.loads(json.dumps(to_corpus(result, source_url, allow_dry_run=allow_dry_run)))  # no shared
    # mappings: YAML would write them as anchors and aliases, which data files refuse
    if corpus_out is None:
        gpu = re.sub(r"[^a-z0-9]+", "-", str(result["environment"]["gpu"]["name"]).lower()).strip("-")
        corpus_out = ROOT / "benchmarks" / "gpu_runs" / f"measured_{gpu}_{result['started'][:10]}.yaml"
    corpus_out.write_text(yaml.safe_dump(corpus, sort_keys=False, width=120, allow_unicode=True), encoding="utf-8")
    return corpus_out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="folder of the result JSON (needed unless --to-corpus)")
    p.add_argument("--budget-s", type=float, default=420.0, help="seconds for the whole run (default 420)")
    p.add_argument("--dry-run", action="store_true", help="the same logic on the CPU with tiny shapes, no CUDA")
    p.add_argument("--stacks", default=",".join(STACKS),
                   help=f"the training stacks to step, comma-separated (default {','.join(STACKS)})")
    p.add_argument("--to-corpus", type=Path, metavar="RESULT.json", help="convert a result to the corpus format")
    p.add_argument("--source-url", help="with --to-corpus: the https address where the result is published")
    p.add_argument("--corpus-out", type=Path, help="with --to-corpus: the YAML to write "
                                                    "(default benchmarks/gpu_runs/measured_<gpu>_<date>.yaml)")
    p.add_argument("--allow-dry-run", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker", choices=PHASES, help=argparse.SUPPRESS)
    p.add_argument("--deadline-in", type=float, default=60.0, help=argparse.SUPPRESS)
    p.add_argument("--alloc-conf", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    stacks = tuple(x.strip() for x in a.stacks.split(",") if x.strip())
    unknown = sorted(set(stacks) - set(STACKS))
    if unknown or not stacks:
        p.error(f"--stacks: choose among {', '.join(STACKS)} (got {a.stacks!r})")
    if a.worker:
        return worker_main(a.worker, a.deadline_in, a.alloc_conf, stacks)
    if a.to_corpus:
        if not a.source_url:
            p.error("--to-corpus needs --source-url (where the result is published)")
        try:
            path = write_corpus(a.to_corpus, a.source_url, a.corpus_out, allow_dry_run=a.allow_dry_run)
        except (ValueError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {path}")
        return 0
    if a.out is None:
        p.error("--out FOLDER is needed: where the result JSON is written")
    if a.budget_s <= 0:
        p.error("--budget-s must be positive")
    if not a.dry_run:
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # asks NVML: no CUDA context in this process
        import torch

        if not torch.cuda.is_available():
            print("error: torch sees no CUDA device here: run on the GPU machine, or --dry-run", file=sys.stderr)
            return 2
    calibrate(a.out, a.budget_s, a.dry_run, stacks=stacks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
