"""DeepSpeed ZeRO stages 1, 2 and 3 as measure runs them: one rank of :mod:`vramwise.measuring.distributed`.

Each rank hands the transformers model (built, adapted and checkpointed as for every strategy) to
``deepspeed.initialize`` on DeepSpeed's CPU accelerator, over the gloo process group the distributed
runner has already joined. The configuration is DeepSpeed's defaults plus what a bf16 run sets:

- ``bf16.enabled``: the module is cast to bf16, float32 master weights are kept in the optimizer partition;
- ``zero_optimization.stage`` 1, 2 or 3, nothing else of that section changed (reduce_bucket_size,
  allgather_bucket_size, stage3_prefetch_bucket_size, stage3_param_persistence_threshold,
  stage3_max_live_parameters keep their defaults);
- the optimizer ``AdamW`` with ``torch_adam``: torch's AdamW (single-tensor implementation) steps the flat
  float32 partition where a GPU run would use FusedAdam (a CUDA kernel) or DeepSpeedCPUAdam (a C++ op):
  neither is built here. Both update in place; torch's single-tensor step makes one partition-sized
  float32 temporary (``exp_avg_sq.sqrt() / bias_correction``) that they do not.
- offload (``settings.offload``): ``offload_optimizer`` (stages 1-3) and under stage 3 ``offload_param``,
  device cpu with ``pin_memory``.

On this machine an offloaded tensor is a CPU tensor like every other, so :class:`HostAwareTracker`
tells them apart: every buffer DeepSpeed pins (``get_accelerator().pin_memory``, which it calls on each
host buffer it allocates for offload) and the partitions the ZeRO optimizer keeps on its offload device
leave the count, and so does every tensor an operator makes from one of them (the optimizer's state
and its step's temporaries, norms of host gradients). A tensor written in place keeps its side (a
host partition copied into a GPU parameter stays on the GPU). What a GPU would copy between the two
memories (``.to(device)`` of a host tensor) is no copy on one device, so it is not counted.

DeepSpeed's shared-memory communication op (``deepspeed_shm_comm``, used by ``inference_all_reduce``
only) would be compiled when the communication backend starts; training never calls it, so it is not
built.
"""

from __future__ import annotations

import contextlib
import os

from vramwise.measuring.tracker import GRANULARITY, ResizeAwareTracker, _StorageRef, rounded

__all__ = ["ZERO_STAGES", "HostAwareTracker", "ds_config", "initialize", "offload_roots", "track_rank", "note"]

#: ZeRO strategy name -> stage.
ZERO_STAGES = {"zero1": 1, "zero2": 2, "zero3": 3}


def ds_config(strategy: str, offload: str, batch_size: int) -> dict:
    """The DeepSpeed configuration of one run (everything else at DeepSpeed's defaults)."""
    stage = ZERO_STAGES[strategy]
    zero: dict = {"stage": stage}
    if offload in ("optimizer", "parameters"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload == "parameters" and stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": batch_size, "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True}, "zero_optimization": zero,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True, "foreach": False}},
        "steps_per_print": 1 << 30, "wall_clock_breakdown": False,
    }


class HostAwareTracker(ResizeAwareTracker):
    """A storage tracker that leaves host (offloaded) storages out of the count: those marked with
    :meth:`to_host`, and every new storage an operator returns while one of its inputs is on the host."""

    def __init__(self, granularity: int = GRANULARITY):
        super().__init__(granularity)
        self._host: dict[int, _StorageRef] = {}  # storage key -> weak reference (host storages, uncounted)
        self.host_current = 0

    def _host_died(self, ref: _StorageRef) -> None:
        if self._host.get(ref.key) is ref:
            del self._host[ref.key]
            self.host_current -= ref.size

    def _key(self, tensor):
        if not isinstance(tensor, self._tensor_type) or tensor.device.type == "meta" or self._is_wrapper(tensor):
            return None
        try:
            return tensor.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError):
            return None

    def to_host(self, tensor) -> None:
        """Count ``tensor``'s storage as host memory from now on (off the device count)."""
        key = self._key(tensor)
        if key is None or key in self._host:
            return
        self.sweep()
        ref = self._live.pop(key, None)
        if ref is not None:
            self.current -= ref.size
        storage = tensor.untyped_storage()
        host = _StorageRef(storage, self._host_died)
        host.key, host.size = key, rounded(storage.nbytes(), self.granularity)
        self._host[key] = host
        self.host_current += host.size

    def add(self, tensor) -> None:
        if self._key(tensor) in self._host:
            return
        super().add(tensor)

    def after_call(self, args, kwargs, outputs) -> None:
        """An operator ran: its new outputs are host storages when one of its inputs is one."""
        inputs = [self._key(t) for t in self._tree_leaves((args, kwargs))]
        if any(k in self._host for k in inputs if k is not None):
            for t in self._tree_leaves(outputs):
                key = self._key(t)
                if key is not None and key not in inputs and key not in self._live:
                    self.to_host(t)
        self.after_op(outputs)

    def mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker.after_call(args, kwargs or {}, out)
                return out

        return _Mode()

    @contextlib.contextmanager
    def pinned_is_host(self):
        """While inside, every tensor DeepSpeed pins (each offload buffer it allocates) is host memory."""
        from deepspeed.accelerator import get_accelerator

        kind = type(get_accelerator())
        original = kind.pin_memory
        tracker = self

        def pin_memory(accelerator, tensor, *args, **kwargs):
            out = original(accelerator, tensor, *args, **kwargs)
            tracker.to_host(out)
            return out

        kind.pin_memory = pin_memory
        try:
            yield self
        finally:
            kind.pin_memory = original


def offload_roots(optimizer) -> list:
    """The tensors a ZeRO optimizer keeps on its offload device: the float32 partitions (with their
    gradients) and, under stage 3 with offload_param, every parameter's partition."""
    out: list = []
    if getattr(optimizer, "cpu_offload", False):  # stages 1 and 2
        for t in getattr(optimizer, "single_partition_of_fp32_groups", ()):
            out += [t, t.grad]
    if getattr(optimizer, "offload_optimizer", False):  # stage 3
        for t in getattr(optimizer, "fp32_partitioned_groups_flat", ()):
            out += [t, t.grad]
    if getattr(optimizer, "offload_param", False):
        out += list(getattr(optimizer, "param_groups_fp16_flat_cpu_memory", ()))
        for group in getattr(optimizer, "fp16_groups", ()):
            out += [getattr(p, "ds_tensor", None) for p in group]
    return [t for t in out if t is not None]


def initialize(net, strategy: str, settings, tracker):
    """``deepspeed.initialize`` of ``net`` for ``strategy`` (zero1/2/3) under ``tracker``; returns (engine,
    the ZeRO optimizer). The process group must already be joined (gloo)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("LOCAL_RANK", os.environ.get("RANK", "0"))
    import deepspeed
    import deepspeed.comm.torch as ds_torch_comm
    import torch.distributed as dist

    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() != "cpu":
        from vramwise.errors import MeasurementError

        raise MeasurementError(f"DeepSpeed chose the {get_accelerator().device_name()} accelerator; the ZeRO "
                               "measurement runs on its CPU accelerator (DS_ACCELERATOR=cpu)")
    ds_torch_comm.build_shm_op = lambda: None  # inference_all_reduce only: not compiled for training
    config = ds_config(strategy, settings.offload, settings.batch_size)
    trainable = [p for p in net.parameters() if p.requires_grad]
    host = getattr(tracker, "pinned_is_host", None)
    with (host() if host is not None else contextlib.nullcontext()), tracker.mode():
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, rank=dist.get_rank(),
                                   world_size=dist.get_world_size())
        engine, optimizer, _, _ = deepspeed.initialize(model=net, model_parameters=trainable, config=config)
    if hasattr(tracker, "to_host"):
        for t in offload_roots(optimizer):
            tracker.to_host(t)
    return engine, optimizer


def _categories(engine, optimizer, tracker) -> dict:
    """Bytes of the parameters (16-bit, and stage 3's partitions), gradients (16-bit and the float32
    partitions' gradients) and the float32 partitions with the optimizer's state, on the device only."""
    import torch

    seen: set = set()
    host = getattr(tracker, "_host", {})

    def total(tensors) -> int:
        out = 0
        for t in tensors:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            st = t.untyped_storage()
            if st._cdata in seen or st._cdata in host:
                continue
            seen.add(st._cdata)
            out += rounded(st.nbytes(), tracker.granularity)
        return out

    params = list(engine.module.parameters())
    fp32 = list(getattr(optimizer, "single_partition_of_fp32_groups", None)
                or getattr(optimizer, "fp32_partitioned_groups_flat", None) or ())
    inner = getattr(optimizer, "optimizer", optimizer)
    return {
        "parameters": total(params + [getattr(p, "ds_tensor", None) for p in params]
                            + list(getattr(optimizer, "bit16_groups_flat", ()))),
        "gradients": total([p.grad for p in params] + [t.grad for t in fp32]),
        "optimizer_state": total(fp32 + [v for s in inner.state.values() for v in s.values()]),
    }


def track_rank(net, settings, strategy: str, ids, steps: int, params_total: int, params_trainable: int):
    """One rank's measured step of ``net`` under ZeRO ``strategy``: wrap it with DeepSpeed under the tracker
    (its flat buffers and partitions count from the load phase on), then run the steps through the engine."""
    import gc

    import torch.distributed as dist

    from vramwise.measuring.runner import track_cpu

    offloads = settings.offload != "none"
    tracker = HostAwareTracker() if offloads else ResizeAwareTracker()
    for t in list(net.parameters()) + list(net.buffers()):
        tracker.add(t)
    with tracker.follow_resizes(), (tracker.pinned_is_host() if offloads else contextlib.nullcontext()):
        engine, optimizer = initialize(net, strategy, settings, tracker)
        del net
        dist.barrier()
        gc.collect()
        tracker.sweep()
        return track_cpu(engine, optimizer, ids, steps, settings, params_total, params_trainable, [note(strategy, settings.offload)],
                         tracker=tracker, engine=engine, count=lambda: _categories(engine, optimizer, tracker))


def note(strategy: str, offload: str = "none") -> str:
    """What a ZeRO measurement ran, in words."""
    stage = ZERO_STAGES[strategy]
    return (f"DeepSpeed ZeRO-{stage} (bf16, its default buckets"
            + (", stage 3 prefetch and persistence threshold" if stage == 3 else "")
            + ") on its CPU accelerator; torch's AdamW steps the float32 partition where a GPU runs FusedAdam"
            + (f"; offload {offload}: host storages (DeepSpeed's pinned buffers, the offloaded partitions and "
               "what is computed from them) are not counted" if offload != "none" else ""))
