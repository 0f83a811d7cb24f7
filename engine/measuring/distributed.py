"""Ground truth for data-parallel training: ``world_size`` CPU processes joined by torch.distributed (gloo).

``measure(..., strategy="ddp"|"fsdp"|"fsdp_shard_grad_op", world_size=N)`` lands here. The parent writes a job of plain
data (the config dict, the normalised settings as a dict, the step count) to a temporary folder and
starts ``world_size`` processes on it, each forked from a server process that has imported torch,
transformers and PEFT once (:func:`_rank_processes`). Each one builds the model exactly as the single-process
CPU path does (:mod:`vramwise.measuring.stacks.hf`: ``random_model``, ``apply_lora``,
``apply_checkpointing``), wraps it as a training stack would, and runs the same steps under the same
tracker (:mod:`vramwise.measuring.tracker`):

- ``ddp``: ``DistributedDataParallel`` with its default arguments. Its reducer keeps gradient buckets
  (flat copies of the trainable parameters' gradients, in their dtype) beside ``.grad``; they are
  allocated while the model is wrapped, under the tracker, so they count from the load phase on.
- ``fsdp``: FSDP2's ``fully_shard`` on every decoder layer, then on the root model, with its default
  resharding and no mixed precision. FSDP2 frees and re-allocates each layer's unsharded parameters
  by resizing their storage in place (``UntypedStorage.resize_``), which no operator reports; the
  tracker used here is told of every resize, so gathered layers count only while they are gathered.
  Its collectives hand gloo private copies (:func:`private_copy_comms`), so that FSDP's flat buffers
  die when FSDP drops them, as on a GPU, not when gloo's worker thread lets go of them.

Each process writes its figures (or its error) to a file of its own; the parent waits for all of
them under a deadline, stops the others as soon as one fails, and turns a failure into one
error: of the child's class when it raised one of vramwise's (a :class:`SettingsError`, a
:class:`StackUnsupportedError`, ...), else a :class:`MeasurementError`, which a run past its deadline
raises too.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import socket
import sys
import tempfile
import time
from typing import Any

import vramwise.errors as errors
from vramwise.errors import MeasurementError, SettingsError, StackUnsupportedError
from vramwise.models.stack_manifest import stack_manifest
from vramwise.measuring.build import build_optimizer, require
from vramwise.measuring.results import Measurement, PhaseFigures, RankFigures
from vramwise.measuring.runner import track_cpu
from vramwise.measuring.stacks.hf import apply_checkpointing, apply_lora, quantized, random_model
from vramwise.measuring.strategies import STRATEGIES, WORLD_SIZES
from vramwise.measuring.tracker import ResizeAwareTracker, rounded
from vramwise.measuring.zero import ZERO_STAGES
from vramwise.profiles.settings import TRAINING_METHODS

__all__ = ["STRATEGIES", "WORLD_SIZES", "check_distributed", "measure_distributed", "private_copy_comms"]


def _ddp(net):
    import torch

    return torch.nn.parallel.DistributedDataParallel(net)


def _fsdp_full_shard(net):
    return _fully_shard(net, reshard_after_forward=True)


def _fsdp_shard_grad_op(net):  # SHARD_GRAD_OP: the layers stay gathered from the forward to the backward
    return _fully_shard(net, reshard_after_forward=False)


#: How each strategy measure can run wraps the model (the names: vramwise.measuring.strategies).
_WRAPPINGS = {"ddp": _ddp, "fsdp": _fsdp_full_shard, "fsdp_shard_grad_op": _fsdp_shard_grad_op}
#: Seconds the whole distributed run may take before its processes are stopped.
DEFAULT_TIMEOUT = 900.0


def check_distributed(strategy: Any, world_size: Any, *, device: str, fake: bool, stack: str, method: str,
                      optimizer: str | None = None) -> int:
    """Validate a distributed request before any process starts; return the world size to run."""
    if strategy is None:
        if world_size is not None:
            raise SettingsError("world_size (--world-size) needs a strategy: ddp or fsdp (--strategy)")
        return 1
    if strategy not in STRATEGIES:
        raise SettingsError(f"unknown strategy {strategy!r} (--strategy: choose one of {', '.join(STRATEGIES)})")
    if world_size is None:
        world_size = 2
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size not in WORLD_SIZES:
        raise SettingsError(f"world_size (--world-size) must be an integer from {WORLD_SIZES[0]} to {WORLD_SIZES[-1]}, "
                            f"got {world_size!r}")
    if device != "cpu":
        raise SettingsError(f"strategy {strategy} runs {world_size} processes on the CPU (gloo): "
                            "use device cpu (--device cpu)")
    if fake:
        raise SettingsError(f"strategy {strategy} runs real tensors: drop fake (--fake)")
    # the strategies each stack trains with on several GPUs: formulas/stacks.yaml
    known = stack_manifest().stacks
    runs_on = known[stack].strategies if stack in known else ()
    if strategy not in runs_on:
        raise SettingsError(f"strategy {strategy} is not how stack {stack} trains on several GPUs"
                            + (f" (it runs: {', '.join(runs_on)})" if runs_on else " (it runs on one device only)"))
    if method == "qlora" and stack == "hf" and strategy != "ddp":
        raise SettingsError(f"strategy {strategy} measures full and lora fine-tuning with stack hf; qlora runs under "
                            "ddp there (bitsandbytes' 4-bit weights are not sharded here)")
    if method not in TRAINING_METHODS:
        raise SettingsError("measure runs training steps: choose qlora, lora or full")
    if strategy in ZERO_STAGES and optimizer not in ("adamw_torch", "adamw_torch_fused"):
        raise SettingsError(f"strategy {strategy} steps DeepSpeed's own AdamW over its float32 partition: "
                            "choose adamw_torch or adamw_torch_fused")
    if strategy.startswith("fsdp") and optimizer == "adamw_8bit":
        raise SettingsError("bitsandbytes' 8-bit AdamW cannot step FSDP's sharded parameters (its kernel has no "
                            "sharding rule): choose adamw_torch, adamw_torch_fused or sgd")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        raise MeasurementError(f"strategy {strategy} needs torch.distributed with the gloo backend, "
                               "which this torch lacks")
    return world_size


def check_offload(offload: Any, strategy: str) -> str:
    """The offload a distributed request measures: DeepSpeed's (zero1/2/3; parameters under zero3 only)."""
    if offload == "none":
        return offload
    if strategy not in ZERO_STAGES or offload not in ("optimizer", "parameters"):
        raise SettingsError(f"offload {offload!r} is measured under zero1, zero2 and zero3 (optimizer) and zero3 "
                            f"(parameters), not under strategy {strategy}")
    if offload == "parameters" and strategy != "zero3":
        raise SettingsError("offload parameters is DeepSpeed's offload_param, which ZeRO-3 alone has: "
                            "use --strategy zero3 or --offload optimizer")
    return offload


# --------------------------------------------------------------------------- parent side


def measure_distributed(cfg: dict, settings, steps: int, strategy: str, world_size: int,
                        timeout: float = DEFAULT_TIMEOUT, stack: str = "hf") -> Measurement:
    """Run the step in ``world_size`` processes and gather each rank's figures."""
    require("transformers")
    with tempfile.TemporaryDirectory(prefix="vramwise-dist-") as folder:
        job = {
            "cfg": dict(cfg), "settings": settings.to_dict(), "steps": steps, "strategy": strategy,
            "world_size": world_size, "port": _free_port(), "timeout": float(timeout), "stack": stack,
            "sys_path": [p for p in sys.path if isinstance(p, str)],
        }
        with open(os.path.join(folder, "job.pkl"), "wb") as f:
            pickle.dump(job, f)
        results = _run_ranks(folder, world_size, timeout)
    return _combine(results, settings, strategy, world_size)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: What the fork server imports once, before it forks a process per rank: torch, its distributed package and
#: PEFT (which brings transformers and bitsandbytes) are most of a rank's start-up (about 6 s of CPU each), so
#: one import serves every rank of every run of the calling process instead of one per rank. A module that is
#: not installed is skipped (multiprocessing's fork server ignores its ImportError).
PRELOAD = ("torch", "torch.distributed", "torch.distributed.fsdp", "transformers", "peft",
           "vramwise.measuring.distributed")


def _rank_processes():
    """The multiprocessing context the ranks start from: a fork server that has imported :data:`PRELOAD`.

    The server is one process per calling process, started on the first distributed run and kept until that
    process exits. It imports and runs nothing else, so it has no threads to fork (the calling process may:
    torch's thread pools, a test runner's), and each rank starts as a copy of it with nothing computed."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))  # read when the server starts; a no-op once it runs
    return ctx


def _rank_entry(folder: str, rank: int, env: dict, log_path: str) -> None:
    """A rank's first step in its forked process: its output to its log, the caller's environment as it is now
    (the server's is as it was when it started), then :func:`child_main`."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    child_main(folder, rank)


def _run_ranks(folder: str, world_size: int, timeout: float) -> list[dict]:
    env = dict(os.environ)
    threads = str(max(1, (os.cpu_count() or 1) // world_size))
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1")
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo on loopback whatever the host name resolves to
    ctx = _rank_processes()
    procs: list = []
    try:
        for rank in range(world_size):
            p = ctx.Process(target=_rank_entry, args=(folder, rank, env, os.path.join(folder, f"rank{rank}.log")),
                            name=f"vramwise-rank{rank}", daemon=True)
            p.start()
            procs.append(p)
        deadline = time.monotonic() + timeout
        results: dict[int, dict] = {}
        while len(results) < world_size:
            for rank, p in enumerate(procs):
                if rank in results:
                    continue
                if os.path.exists(os.path.join(folder, f"rank{rank}.pkl")):  # written whole (os.replace)
                    results[rank] = _read_result(folder, rank, None)
                elif p.exitcode is not None:
                    results[rank] = _read_result(folder, rank, p.exitcode)
                else:
                    continue
                if "error" in results[rank]:
                    _raise(results[rank], rank)
            if len(results) < world_size:
                if time.monotonic() > deadline:
                    waiting = [r for r in range(world_size) if r not in results]
                    raise MeasurementError(f"the distributed measurement did not finish within {timeout:g} s "
                                           f"(rank(s) {', '.join(map(str, waiting))} still running); stopped them")
                time.sleep(0.05)
        return [results[r] for r in range(world_size)]
    finally:
        _stop(procs)


def _stop(procs) -> None:
    """Terminate the ranks still running, then kill those that ignore it; reap every one."""
    alive = [p for p in procs if p.exitcode is None]
    for p in alive:
        p.terminate()
    end = time.monotonic() + 5
    for p in alive:
        p.join(max(0.0, end - time.monotonic()))
        if p.exitcode is None:
            p.kill()
    for p in procs:
        p.join()


def _read_result(folder: str, rank: int, returncode: int | None) -> dict:
    path = os.path.join(folder, f"rank{rank}.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    with open(os.path.join(folder, f"rank{rank}.log"), "rb") as f:
        tail = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()][-5:]
    return {"error": "MeasurementError",
            "message": f"the process exited with status {returncode} without a result" + (
                ": " + " | ".join(tail) if tail else "")}


def _raise(result: dict, rank: int):
    """Raise a child's error in this process: as the class of the tree it raised, else a MeasurementError."""
    kind = getattr(errors, result["error"]) if result["error"] in errors.__all__ else None
    if kind is None:  # not one of vramwise's errors: its class is named in the message
        raise MeasurementError(f"rank {rank}: {result['error']}: {result['message']}")
    raise (MeasurementError if kind is errors.VramwiseError else kind)(f"rank {rank}: {result['message']}")


def _phases(data: dict) -> dict:
    return {name: PhaseFigures(ph["peak"], ph["end"], ph["reserved_peak"], ph["categories"])
            for name, ph in data["phases"].items()}


def _combine(results: list[dict], settings, strategy: str, world_size: int) -> Measurement:
    """One Measurement: each rank's figures in ``per_rank``; ``peak`` the highest rank's, and for each
    phase the figures of the rank with the highest peak in it (the lowest such rank on ties)."""
    ranks = tuple(RankFigures(r, d["peak"], d["peak_phase"], _phases(d)) for r, d in enumerate(results))
    top = max(ranks, key=lambda rf: (rf.peak, -rf.rank))
    phases = {name: max((rf.phases[name] for rf in ranks), key=lambda ph: ph.peak) for name in top.phases}
    first = results[0]
    notes = list(first["notes"]) + [
        f"{strategy} on {world_size} CPU processes (gloo): peak and phases are the highest rank's; "
        "per_rank has each rank's"]
    if strategy in ZERO_STAGES:
        pass  # the rank's own note says what DeepSpeed ran
    elif strategy == "ddp":
        notes.append(f"DDP keeps gradient buckets beside .grad ({first['buckets']:,} bytes per rank), "
                     "counted from the load phase on")
    else:
        notes.append("FSDP2 shards each parameter's first dimension (padded to a multiple of the world size); "
                     + ("every unit stays gathered from its forward to its backward (reshard_after_forward=False)"
                        if strategy == "fsdp_shard_grad_op"
                        else "the root module's parameters stay gathered from the forward to the backward"))
    return Measurement("cpu", settings.method, settings.to_dict(), first["params_total"], first["params_trainable"],
                       top.peak, top.peak_phase, phases, None, None, tuple(notes),
                       strategy=strategy, world_size=world_size, per_rank=ranks)


# --------------------------------------------------------------------------- child side


def child_main(folder: str, rank: int) -> None:
    """Entry point of one rank: run the job, write the figures or the error, never raise."""
    out = os.path.join(folder, f"rank{rank}.pkl")
    try:
        with open(os.path.join(folder, "job.pkl"), "rb") as f:
            job = pickle.load(f)
        sys.path.extend(p for p in job["sys_path"] if p not in sys.path)
        result = _run_rank(job, rank)
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as a message
        result = {"error": type(e).__name__, "message": str(e) or repr(e)}
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(result, f)
    os.replace(tmp, out)  # the parent never reads a half-written file
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown (gloo threads); the result is on disk


def _run_rank(job: dict, rank: int) -> dict:
    import warnings
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from vramwise.profiles.settings import normalise_settings

    warnings.simplefilter("ignore")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    world_size, strategy = job["world_size"], job["strategy"]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]), RANK=str(rank),
                      WORLD_SIZE=str(world_size))
    settings = normalise_settings(**job["settings"])
    group = dict(backend="gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=job["timeout"]))
    if job.get("stack", "hf") != "hf":
        # On an error the process exits without tearing the group down: its peers may be blocked in a
        # collective waiting for it, and the parent stops them as soon as it reads the error.
        dist.init_process_group(**group)
        return _run_stack_rank(job, rank, settings)
    net = random_model(job["cfg"], settings.attention, torch.bfloat16)
    if settings.method == "qlora":  # before the group exists: transformers saves the model on rank 0 only in one
        net = quantized(net, settings.attention, torch.bfloat16)
    net = apply_lora(net, settings)
    apply_checkpointing(net, settings)
    net.train()
    dist.init_process_group(**group)
    params_total = sum(p.numel() for p in net.parameters())
    params_trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
    vocab = int(net.get_output_embeddings().weight.shape[0])
    if strategy in ZERO_STAGES:  # DeepSpeed's engine wraps the model and owns the backward pass and the step
        from vramwise.measuring.zero import track_rank

        ids = torch.randint(0, vocab, (settings.batch_size, settings.seq_len),
                            generator=torch.Generator().manual_seed(1 + rank))
        data = track_rank(net, settings, strategy, ids, job["steps"], params_total, params_trainable).to_dict()
        dist.barrier()
        dist.destroy_process_group()
        return {**data, "buckets": 0}
    tracker = ResizeAwareTracker()
    for t in list(net.parameters()) + list(net.buffers()):
        tracker.add(t)
    notes: list = []
    with tracker.follow_resizes():
        with tracker.mode():  # what the wrapping allocates and keeps (DDP's buckets, FSDP's shards) counts
            model = _WRAPPINGS[strategy](net)
        del net
        # the wrapping's start-up collectives (DDP broadcasts every parameter from rank 0) hand their
        # flat buffers to gloo's worker threads: once every rank is past them, collect what they dropped,
        # so the load phase is the steady state whatever those threads' timing was
        dist.barrier()
        gc.collect()
        tracker.sweep()
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = build_optimizer(trainable, settings, notes)
        gen = torch.Generator().manual_seed(1 + rank)  # each rank its own batch
        ids = torch.randint(0, vocab, (settings.batch_size, settings.seq_len), generator=gen)
        m = track_cpu(model, opt, ids, job["steps"], settings, params_total, params_trainable, notes,
                       tracker=tracker)
    buckets = _ddp_bucket_bytes(model, tracker.granularity) if strategy == "ddp" else 0
    dist.barrier()  # every rank has finished its steps before any leaves the group
    dist.destroy_process_group()
    data = m.to_dict()
    if buckets:  # name DDP's buckets apart from the activations and temporaries
        for ph in data["phases"].values():
            ph["categories"]["gradient_buckets"] = buckets
            ph["categories"]["activations_and_temporaries"] -= buckets
    data["buckets"] = buckets
    return data


def _run_stack_rank(job: dict, rank: int, settings) -> dict:
    """One rank of another stack's distributed recipe: the stack builds its model, the strategy shards it
    where the stack's recipe does (before the optimizer), and the same tracker follows the step."""
    import torch
    import torch.distributed as dist

    from vramwise.measuring.stacks.registry import stack_module

    runs = stack_module(job["stack"])
    tracker = ResizeAwareTracker()
    reshard = job["strategy"] != "fsdp_shard_grad_op"

    def wrap(model):
        for t in list(model.parameters()) + list(model.buffers()):
            tracker.add(t)
        with tracker.mode():  # the shards FSDP allocates count from the load phase on
            _fully_shard(model, reshard, head_units=bool(settings.fsdp_head_units))
        dist.barrier()
        gc.collect()
        tracker.sweep()
        return model

    with tracker.follow_resizes():  # the stack seeds its model and batch: every rank builds the same ones
        prepared = runs.prepare(job["cfg"], settings, dtype=torch.bfloat16, device="cpu", fake=False, wrap=wrap)
        with prepared.context():
            m = track_cpu(prepared.net, prepared.opt, prepared.ids, job["steps"], settings, prepared.params_total,
                          prepared.params_trainable, list(prepared.notes), loss_fn=prepared.loss_fn, tracker=tracker)
    dist.barrier()
    dist.destroy_process_group()
    data = m.to_dict()
    data["buckets"] = 0
    return data


def _fully_shard(net, reshard_after_forward: bool, head_units: bool = False):
    """FSDP2's ``fully_shard`` on every decoder layer, then on the root model, each unit's collectives on
    private copies (:func:`private_copy_comms`), so that the buffers FSDP allocates die when FSDP drops them.
    ``head_units``: the token embeddings and the output projection are units of their own as well
    (torchtune's custom_sharded_layers ['tok_embeddings', 'output'], the fsdp_head_units setting)."""
    layers = _decoder_layers(net)
    heads = _head_modules(net) if head_units else []
    _shard_layers(net, layers, reshard_after_forward, heads)
    all_gather, reduce_scatter = private_copy_comms()
    for unit in [*heads, *layers, net]:
        unit.set_custom_all_gather(all_gather)
        unit.set_custom_reduce_scatter(reduce_scatter)
    return net


def _head_modules(net) -> list:
    """The modules torchtune's shipped full configs shard on their own beside the layers
    (custom_sharded_layers: ['tok_embeddings', 'output'], matched by name as get_shard_conditions matches
    them): [embeddings, output], the output left out when it holds no weight of its own (tied)."""
    named = dict(net.named_modules())
    heads = [named[n] for n in ("tok_embeddings", "output") if n in named
             and any(True for _ in named[n].parameters(recurse=True))]
    if "tok_embeddings" not in named:
        raise StackUnsupportedError("fsdp_head_units: the model has no tok_embeddings module to shard on its own")
    return heads


def _shard_layers(net, layers: list, reshard_after_forward: bool, heads: list = ()):
    """``fully_shard`` on each of ``heads`` and ``layers``, then on the root (torchtune's training.shard_model
    does the same over its TransformerSelfAttentionLayer modules and the custom_sharded_layers), with the
    prefetching a GPU has."""
    from torch.distributed.fsdp import fully_shard

    for unit in [*heads, *layers]:
        fully_shard(unit, reshard_after_forward=reshard_after_forward)
    fully_shard(net, reshard_after_forward=reshard_after_forward)
    # On CUDA, FSDP2 issues the next layer's all-gather while the current layer runs (implicit
    # prefetching: the CPU thread runs ahead of the GPU), so two layers are gathered at once. The CPU
    # runs each collective to its end before going on, so the same prefetch is asked for explicitly:
    # the measured memory is then what a GPU holds.
    for i, layer in enumerate(layers):
        if i + 1 < len(layers):
            layer.set_modules_to_forward_prefetch([layers[i + 1]])
        if i > 0:
            layer.set_modules_to_backward_prefetch([layers[i - 1]])
    # head units: the embeddings' unit runs before the first layer, which it prefetches as the layers
    # prefetch each other. The output's unit is gathered in its own pre-forward, without an asked-for
    # prefetch, so its all-gather output is kept until the root's forward ends, as a GPU keeps it (torch
    # 2.13 _fsdp_param_group.py wait_for_unshard: only an unshard that was not asynchronous defers the
    # free). The backward's default prefetch follows the reverse of the forward order: the output's
    # pre-backward gathers the last layer, the first layer's the embeddings.
    if heads:
        heads[0].set_modules_to_forward_prefetch([layers[0]])
    return net


def private_copy_comms() -> tuple:
    """FSDP2's default all-gather and reduce-scatter, with gloo handed copies made outside the tracker's
    sight and the result copied back into FSDP's own buffer before FSDP reads it.

    gloo runs a collective in a worker thread that keeps the work, and with it the tensors handed to it,
    until it has finished and taken its queue's lock again (ProcessGroupGloo::runLoop resets
    workInProgress_ after execute), which may be after the caller has waited and dropped them: a unit's
    flat all-gather output then outlives FSDP's reference by a moment that lands before or after the next
    allocation as the threads happen to run (a whole unit apart between two runs of the same step). On a
    GPU, NCCL's watchdog keeps its copy of the work without the tensors (ProcessGroupNCCL::workEnqueue:
    "we enqueue work without outputs_"), so the caching allocator frees each buffer when FSDP drops it:
    at the end of wait_for_unshard for the all-gather output (torch 2.13
    distributed/fsdp/_fully_shard/_fsdp_param_group.py:489), when the next unit's post_backward pops its
    ReduceScatterState for the reduce-scatter input (:647-658). FSDP allocates the same buffers (the
    default ``allocate``); the copies are transport, which NCCL does not need."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter
    from torch.utils._python_dispatch import _disable_current_modes

    class PrivateCopyAllGather(DefaultAllGather):
        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            with _disable_current_modes():  # not device memory a GPU would hold
                out = torch.empty_like(output_tensor)
                dist.all_gather_single(out, input_tensor.clone(), group=group)
                output_tensor.copy_(out)
            return None  # finished: FSDP copies out as after a synchronous all-gather

    class PrivateCopyReduceScatter(DefaultReduceScatter):
        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            with _disable_current_modes():
                out = torch.empty_like(output_tensor)
                dist.reduce_scatter_single(out, input_tensor.clone(), op=op, group=group)
                output_tensor.copy_(out)
            return None

    return PrivateCopyAllGather(), PrivateCopyReduceScatter()


def _decoder_layers(net) -> list:
    """The decoder layers: modules of the classes transformers names in ``_no_split_modules``, else the
    children of the largest ModuleList."""
    import torch

    names: set = set()
    for m in net.modules():
        names.update(getattr(m, "_no_split_modules", None) or ())
    layers = [m for m in net.modules() if type(m).__name__ in names]
    if not layers:
        lists = [m for m in net.modules() if isinstance(m, torch.nn.ModuleList)]
        if lists:
            layers = list(max(lists, key=len))
    if not layers:
        raise StackUnsupportedError("fsdp: found no decoder layers to shard (no _no_split_modules class, no ModuleList)")
    return layers


def _ddp_bucket_bytes(ddp, granularity: int) -> int:
    """Bytes of DDP's gradient buckets as they stand now (each bucket one storage, rounded)."""
    buckets = ddp.reducer._get_zeros_like_grad_buckets()  # zero copies of the buckets: their sizes
    return sum(rounded(b.buffer().untyped_storage().nbytes(), granularity) for b in buckets)
