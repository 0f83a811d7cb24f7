"""The allocator-report tracker (what `measure --compile true` counts on the CPU) against known allocations and
against the dispatch-mode tracker on the same eager step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vramwise.measuring.tracker import AllocationTracker  # noqa: E402


def test_known_allocations_rounded_to_blocks():
    tracker = AllocationTracker()
    with tracker.mode():
        a = torch.empty(1000, dtype=torch.float32)  # 4,000 bytes -> 8 blocks of 512 = 4,096
        b = torch.empty(300, dtype=torch.bfloat16)  # 600 bytes -> 2 blocks = 1,024
        tracker.sweep()
        assert tracker.current == 4096 + 1024
        del a
        c = torch.empty(10, dtype=torch.float64)  # 80 bytes -> 1 block = 512
        tracker.sweep()
    assert tracker.current == 1024 + 512
    assert tracker.peak == 4096 + 1024
    del b, c


def test_reset_peak_starts_from_what_is_alive():
    tracker = AllocationTracker()
    with tracker.mode():
        a = torch.empty(2048, dtype=torch.float32)  # 8,192 bytes
        del a
        tracker.reset_peak()
        assert tracker.peak == tracker.current == 0
        b = torch.empty(256, dtype=torch.float32)  # 1,024 bytes
        tracker.sweep()
    assert tracker.peak == 1024
    del b


def test_an_eager_step_reads_as_the_dispatch_tracker_reads_it():
    """Two independent ways of counting the same eager training step (a storage's lifetime seen through the
    dispatcher, and the allocator's own reports) agree on the step's peak; the allocator also sees the few
    scalars and index tensors the dispatcher's outputs do not include."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from vramwise.measuring.runner import track_cpu
    from vramwise.profiles.settings import normalise_settings

    cfg = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")
    settings = normalise_settings(method="full", batch_size=2, seq_len=64, gradient_checkpointing="none",
                                  optimizer="adamw_torch", attention="sdpa")

    def run(tracker):  # a fresh model and optimizer each time: the optimizer's state is made inside the step
        torch.manual_seed(0)
        net = LlamaForCausalLM(cfg).to(torch.bfloat16).train()
        opt = torch.optim.AdamW(net.parameters(), foreach=True)
        ids = torch.randint(0, 1000, (2, 64))
        n = sum(p.numel() for p in net.parameters())
        return track_cpu(net, opt, ids, 2, settings, n, n, [], tracker=tracker)

    by_dispatch = run(None)
    by_allocator = run(AllocationTracker())
    assert by_allocator.peak == pytest.approx(by_dispatch.peak, rel=0.01)
    assert by_allocator.peak_phase == by_dispatch.peak_phase


@pytest.mark.parametrize("extra, why", [
    ({"fake": True}, "real tensors"),
    ({"stack": "torchtune", "fake": True}, "real tensors"),
    ({"stack": "torchtune", "method": "qlora"}, "compiled QLoRA step cannot be measured"),
    ({"strategy": "ddp"}, "one process"),
])
def test_measure_compiles_a_step_on_one_process_with_real_tensors(extra, why):
    # the hf and torchtune stacks compile (torchtune as its recipes do: compile_model and compile_loss); a compiled
    # step is read from the allocator's own reports, so it needs real tensors, one process, and plain tensors (not
    # torchao's NF4 weights)
    from vramwise import SettingsError, measure

    cfg = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
    with pytest.raises(SettingsError, match=why):
        measure(cfg, **{"method": "full", "compile": True, "optimizer": "adamw_torch", **extra})
