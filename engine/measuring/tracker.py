"""Counting the device memory of a step on the CPU: the live tensor storages and their peak.

The CUDA caching allocator rounds every block up to 512 bytes; the trackers here round each
storage the same way, so their figures are what ``torch.cuda.max_memory_allocated`` would read.
torch is imported when a tracker is made, never at import.
"""

from __future__ import annotations

import contextlib
import weakref

__all__ = ["GRANULARITY", "rounded", "StorageTracker", "ResizeAwareTracker", "AllocationTracker"]

#: Bytes every storage is rounded up to (the CUDA caching allocator's smallest block).
GRANULARITY = 512


def rounded(nbytes: int, granularity: int = GRANULARITY) -> int:
    """``nbytes`` rounded up to a multiple of ``granularity``."""
    return -(-nbytes // granularity) * granularity


class _StorageRef(weakref.ref):
    """A weak reference to a storage's Python object that remembers the storage's key and size."""

    __slots__ = ("key", "size")


class StorageTracker:
    """Live bytes of tensor storages and their peak, fed by a TorchDispatchMode.

    Storages that exist before tracking starts are added with :meth:`add`; every tensor an
    operator returns is added as it is created; a storage leaves the count when its last
    reference dies. Sizes are rounded up to ``granularity`` bytes.

    Deaths are reported, not searched for. Once a storage has a Python object, torch keeps that
    object alive exactly as long as the storage (PyObject preservation), so a weak reference to
    it calls back when the storage dies, whether an operator, the autograd engine or a Python
    ``del`` between operators dropped the last reference. The callback only banks the freed
    bytes; :meth:`sweep` (run before each operator's outputs are counted) takes them off
    ``current``. ``current`` thus changes at the same moments and by the same amounts as if
    every live storage were checked for death at each sweep, while an operator costs time in
    proportion to the storages it returns and frees, not to all live ones.
    """

    def __init__(self, granularity: int = GRANULARITY):
        import torch
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass
        from torch.utils._pytree import tree_leaves

        self._tensor_type, self._tree_leaves = torch.Tensor, tree_leaves
        self._is_wrapper = is_traceable_wrapper_subclass
        self.granularity = granularity
        self._live: dict[int, _StorageRef] = {}  # storage pointer -> weak reference to its Python object
        self._freed = 0  # bytes of the storages that died since the last sweep
        self.current = 0
        self.peak = 0
        # once start_trace() has run: the storages' births and deaths in order, ("alloc", key, bytes) and
        # ("free", key), the trace vramwise.profiles.caching_allocator replays
        self.trace: list | None = None

    def start_trace(self) -> None:
        """Keep, from now on, the order in which storages are born and die (:attr:`trace`)."""
        self.trace = []

    def _died(self, ref: _StorageRef) -> None:
        # Python calls this while the dying storage still holds its address, so no new storage
        # can have taken the key yet; the identity check is only a guard.
        if self._live.get(ref.key) is ref:
            del self._live[ref.key]
            self._freed += ref.size
            if self.trace is not None:
                self.trace.append(("free", ref.key))

    def sweep(self) -> None:
        """Take the storages that died since the last sweep off the live total."""
        self.current -= self._freed
        self._freed = 0

    def add(self, tensor) -> None:
        if not isinstance(tensor, self._tensor_type) or tensor.device.type == "meta":
            return
        if self._is_wrapper(tensor):  # a tensor subclass over inner tensors (torchao's NF4Tensor): count those
            for name in tensor.__tensor_flatten__()[0]:
                self.add(getattr(tensor, name))
            return
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensor subclasses without a plain storage
            return
        key = storage._cdata
        if key in self._live:
            return
        size = rounded(storage.nbytes(), self.granularity)
        ref = _StorageRef(storage, self._died)
        ref.key, ref.size = key, size
        self._live[key] = ref
        self.current += size
        if self.trace is not None:
            self.trace.append(("alloc", key, storage.nbytes()))

    def after_op(self, outputs) -> None:
        self.sweep()
        for t in self._tree_leaves(outputs):
            self.add(t)
        if self.current > self.peak:
            self.peak = self.current

    def reset_peak(self) -> None:
        self.sweep()
        self.peak = self.current

    def mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker.after_op(out)
                return out

        return _Mode()


class ResizeAwareTracker(StorageTracker):
    """A StorageTracker that also follows storages resized in place (FSDP2 frees gathered parameters
    with ``storage.resize_(0)`` and re-allocates them with ``resize_(n)``; no operator reports it)."""

    def resized(self, storage) -> None:
        self.sweep()
        ref = self._live.get(storage._cdata)
        if ref is None:
            return
        size = rounded(storage.nbytes(), self.granularity)
        self.current += size - ref.size
        ref.size = size
        if self.current > self.peak:
            self.peak = self.current

    @contextlib.contextmanager
    def follow_resizes(self):
        import torch

        original = torch.UntypedStorage.resize_
        tracker = self

        def resize_(storage, size):
            out = original(storage, size)
            tracker.resized(storage)
            return out

        torch.UntypedStorage.resize_ = resize_
        try:
            yield self
        finally:
            torch.UntypedStorage.resize_ = original


class AllocationTracker:
    """Live bytes and their peak read from the CPU allocator's own events (torch.profiler's memory
    records), for code the dispatch-mode tracker cannot see into.

    A graph compiled by torch.compile (inductor) allocates its buffers straight from the allocator
    (``empty_strided_cpu`` in the generated code), below any TorchDispatchMode, and frees or reuses
    them inside one call. The allocator reports every allocation and free to the profiler, with its
    size; replaying those reports, each block rounded up to ``granularity`` bytes as the CUDA caching
    allocator rounds it, gives the live total at every allocation. Tensors that exist before tracking
    starts are added with :meth:`add`. The same methods as :class:`StorageTracker`; figures are
    brought up to date when a recording session is closed (:meth:`sweep`, :meth:`reset_peak`).
    """

    def __init__(self, granularity: int = GRANULARITY):
        import torch

        self._tensor_type = torch.Tensor
        self.granularity = granularity
        self._seen: set = set()
        self._session = None
        self.current = 0
        self.peak = 0

    def add(self, tensor) -> None:
        if not isinstance(tensor, self._tensor_type) or tensor.device.type == "meta":
            return
        storage = tensor.untyped_storage()
        if storage.data_ptr() in self._seen:
            return
        self._seen.add(storage.data_ptr())
        self.current += rounded(storage.nbytes(), self.granularity)
        self.peak = max(self.peak, self.current)

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._session = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._session.__enter__()

    def _stop(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        session.__exit__(None, None, None)
        events = [e for e in session.profiler.kineto_results.events() if e.name() == "[memory]"]
        events.sort(key=lambda e: e.start_ns())
        for event in events:
            nbytes = event.nbytes()
            size = rounded(abs(nbytes), self.granularity)
            self.current += size if nbytes > 0 else -size
            if self.current > self.peak:
                self.peak = self.current

    def sweep(self) -> None:
        """Replay what the allocator reported since the last sweep, and go on recording."""
        if self._session is not None:
            self._stop()
            self._start()

    def reset_peak(self) -> None:
        self.sweep()
        self.peak = self.current

    @contextlib.contextmanager
    def mode(self):
        self._start()
        try:
            yield self
        finally:
            self._stop()
