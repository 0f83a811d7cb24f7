"""Running a prepared training step and recording the figures of each phase.

Whatever stack built the model, its step is the same three phases (forward with the loss,
backward, optimizer step with ``zero_grad``), run ``steps`` times; the figures kept are those
of the last step. On the CPU a :class:`~vramwise.measuring.tracker.StorageTracker` counts the
live storages; on CUDA the caching allocator's own counters are read, and NVML's figure for the
process beside them.
"""

from __future__ import annotations

from typing import Callable

from vramwise.measuring.results import Measurement, PhaseFigures
from vramwise.measuring.stacks.protocol import Prepared
from vramwise.measuring.tracker import GRANULARITY, AllocationTracker, StorageTracker, rounded

__all__ = ["run_prepared", "track_cpu", "measure_cuda", "categories"]


def run_prepared(prepared: Prepared, settings, steps: int, device: str) -> Measurement:
    """Run ``steps`` steps of what a stack prepared, inside its context, on ``device``."""
    with prepared.context():
        if device == "cpu":
            # a compiled step allocates below the dispatch modes: read the allocator's own reports
            tracker = AllocationTracker() if getattr(settings, "compile", False) else None
            return track_cpu(prepared.net, prepared.opt, prepared.ids, steps, settings, prepared.params_total,
                             prepared.params_trainable, list(prepared.notes), loss_fn=prepared.loss_fn,
                             tracker=tracker)
        return measure_cuda(prepared.net, prepared.opt, prepared.ids, steps, settings, prepared.params_total,
                            prepared.params_trainable, lambda: categories(prepared.net, prepared.opt),
                            list(prepared.notes), loss_fn=prepared.loss_fn)


def categories(net, opt) -> dict:
    """Bytes of the parameters, gradients and optimizer state (each storage once, 512-byte rounded)."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    seen: set = set()

    def total(tensors) -> int:
        out = 0
        for t in tensors:
            if t is None or not isinstance(t, torch.Tensor):
                continue
            if is_traceable_wrapper_subclass(t):  # count the inner tensors (torchao's NF4Tensor)
                out += total(getattr(t, name) for name in t.__tensor_flatten__()[0])
                continue
            st = t.untyped_storage()
            key = StorageWeakRef(st).cdata
            if key in seen:
                continue
            seen.add(key)
            out += rounded(st.nbytes(), GRANULARITY)
        return out

    return {
        "parameters": total(net.parameters()),
        "gradients": total(p.grad for p in net.parameters()),
        "optimizer_state": total(v for s in opt.state.values() for v in s.values()),
    }


def _with_rest(cats: dict, end: int) -> dict:
    """Add what the named categories do not explain: activations, loss buffers and temporaries."""
    return {**cats, "activations_and_temporaries": end - sum(cats.values())}


def track_cpu(net, opt, ids, steps, settings, params_total, params_trainable, notes, loss_fn=None,
              tracker=None, engine=None, count=None) -> Measurement:
    """``tracker``: one already counting (what was allocated while the model was wrapped), else a new one;
    ``engine``: one that owns the backward pass and the step (DeepSpeed's); ``count()``: the categories of
    the bytes alive, when :func:`categories` of ``net`` and ``opt`` is not what the tracker counts."""
    if tracker is None:
        tracker = StorageTracker()
        tracker.start_trace()
    for t in list(net.parameters()) + list(net.buffers()) + [ids]:
        tracker.add(t)
    tracker.reset_peak()
    count = count if count is not None else (lambda: categories(net, opt))
    phases = {"load": PhaseFigures(tracker.current, tracker.current, None, _with_rest(count(), tracker.current))}
    overall, overall_phase = tracker.current, "load"
    with tracker.mode():
        for last, name in _run_phases(net, opt, ids, steps, before=tracker.reset_peak, loss_fn=loss_fn,
                                      engine=engine):
            tracker.sweep()
            if tracker.peak > overall:
                overall, overall_phase = tracker.peak, name
            if last:
                phases[name] = PhaseFigures(tracker.peak, tracker.current, None, _with_rest(count(), tracker.current))
    modelled = None
    if getattr(tracker, "trace", None):  # a trace was kept (a tracker of its own, not a caller's)
        from vramwise.profiles.caching_allocator import CachingAllocatorModel

        modelled = CachingAllocatorModel().replay(tracker.trace).max_reserved
    return Measurement("cpu", settings.method, settings.to_dict(), params_total, params_trainable,
                       overall, overall_phase, phases, None, None, tuple(notes), modelled_reserved_peak=modelled)


def _run_phases(net, opt, ids, steps: int, before, loss_fn=None, engine=None):
    """Run ``steps`` training steps; call ``before()`` ahead of each phase and yield
    (whether this is the last step, phase name) after it. ``loss_fn()`` computes the loss
    (default: the transformers model's own, from labels). ``engine``: one whose ``backward(loss)``
    and ``step()`` replace ``loss.backward()`` and the optimizer's step and ``zero_grad`` (DeepSpeed's)."""
    for step in range(steps):
        before()
        loss = loss_fn() if loss_fn is not None else net(input_ids=ids, labels=ids).loss
        yield step == steps - 1, "forward"
        before()
        if engine is not None:
            engine.backward(loss)
        else:
            loss.backward()
        del loss
        yield step == steps - 1, "backward"
        before()
        if engine is not None:
            engine.step()
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        yield step == steps - 1, "optimizer"


def measure_cuda(net, opt, ids, steps, settings, params_total, params_trainable, count: Callable[[], dict],
                 notes, loss_fn=None) -> Measurement:
    """The step on CUDA, read from the caching allocator; ``count()`` gives the categories of the bytes alive."""
    import torch

    torch.cuda.synchronize()
    load = torch.cuda.memory_allocated()
    phases = {"load": PhaseFigures(load, load, torch.cuda.memory_reserved(), _with_rest(count(), load))}
    overall, overall_phase, reserved_overall = load, "load", torch.cuda.memory_reserved()
    for last, name in _run_phases(net, opt, ids, steps, before=torch.cuda.reset_peak_memory_stats, loss_fn=loss_fn):
        torch.cuda.synchronize()
        peak, end = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
        reserved = torch.cuda.max_memory_reserved()
        reserved_overall = max(reserved_overall, reserved)
        if peak > overall:
            overall, overall_phase = peak, name
        if last:
            phases[name] = PhaseFigures(peak, end, reserved, _with_rest(count(), end))
    return Measurement("cuda", settings.method, settings.to_dict(), params_total, params_trainable,
                       overall, overall_phase, phases, reserved_overall, _nvml_process_bytes(), tuple(notes))


def _nvml_process_bytes() -> int | None:
    """This process's device memory as NVML sees it (CUDA context included), when NVML answers."""
    import os

    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            total = 0
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if proc.pid == os.getpid() and proc.usedGpuMemory:
                        total += int(proc.usedGpuMemory)
            return total or None
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML is optional here
        return None
