"""FSDP2's collectives as the torchtune stack's distributed measurement runs them
(vramwise.measuring.distributed.private_copy_comms): gloo is handed copies, never FSDP's own buffers (whose
lifetime its worker thread would otherwise stretch), the copies stay outside the storage tracker's count,
and FSDP's buffers receive the collective's result. One gloo process (world size 1), so no other process."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


@pytest.fixture
def group(monkeypatch):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def _record(monkeypatch, name):
    """Wrap torch.distributed.<name>, keeping the tensors each call hands to the backend."""
    seen = []
    original = getattr(dist, name)

    def wrapper(*args, **kwargs):
        seen.extend(t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor))
        return original(*args, **kwargs)

    monkeypatch.setattr(dist, name, wrapper)
    return seen


def _tracked_peak(tracker, call, *tensors):
    for t in tensors:
        tracker.add(t)
    tracker.reset_peak()
    with tracker.mode():
        call()
    return tracker.peak


def test_the_all_gather_hands_gloo_copies_and_fills_fsdps_buffer(group, monkeypatch):
    from vramwise.measuring.distributed import private_copy_comms
    from vramwise.measuring.tracker import StorageTracker

    all_gather, _ = private_copy_comms()
    seen = _record(monkeypatch, "all_gather_single")
    # as foreach_all_gather lays it out: the rank's input is a slice of the flat output (world size 1: all of it)
    output = all_gather.allocate((1024,), dtype=torch.bfloat16, device=torch.device("cpu"))
    inp = output.narrow(0, 0, 1024)
    inp.copy_(torch.arange(1024, dtype=torch.bfloat16))
    expected = inp.clone()
    tracker = StorageTracker()
    peak = _tracked_peak(tracker, lambda: all_gather(output, inp, group), output)
    assert len(seen) == 2  # the backend's output and input
    assert all(t.untyped_storage().data_ptr() != output.untyped_storage().data_ptr() for t in seen)
    assert torch.equal(output, expected)
    assert peak == 1024 * 2  # 2 KiB of bf16: FSDP's buffer only, the copies are not counted


def test_the_reduce_scatter_hands_gloo_copies_and_fills_fsdps_buffer(group, monkeypatch):
    from vramwise.measuring.distributed import private_copy_comms
    from vramwise.measuring.tracker import StorageTracker

    _, reduce_scatter = private_copy_comms()
    seen = _record(monkeypatch, "reduce_scatter_single")
    inp = reduce_scatter.allocate((512,), dtype=torch.float32, device=torch.device("cpu"))
    inp.copy_(torch.linspace(-1, 1, 512))
    output = reduce_scatter.allocate((512,), dtype=torch.float32, device=torch.device("cpu"))
    tracker = StorageTracker()
    peak = _tracked_peak(tracker, lambda: reduce_scatter(output, inp, group, dist.ReduceOp.SUM), inp, output)
    assert len(seen) == 2
    mine = {inp.untyped_storage().data_ptr(), output.untyped_storage().data_ptr()}
    assert all(t.untyped_storage().data_ptr() not in mine for t in seen)
    assert torch.equal(output, inp)  # one rank: the sum is the input
    assert peak == 2 * 512 * 4  # the two float32 buffers FSDP allocated, 2 KiB each
