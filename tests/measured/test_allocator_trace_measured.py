"""The storage tracker's trace of births and deaths, replayed through the model of torch's CUDA caching
allocator (vramwise.profiles.caching_allocator): the model's allocated peak must equal the tracker's own count (both
round every storage up to 512 bytes, and they count the same storages by two separate routes), and the
modelled reserve must hold at least that."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from vramwise.profiles import caching_allocator as allocator  # noqa: E402
from vramwise.measuring.steps import measure  # noqa: E402
from vramwise.measuring.tracker import StorageTracker  # noqa: E402
from vramwise.surfaces.cli.main import main  # noqa: E402

TINY = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}


def test_the_trace_lists_births_and_deaths_in_order():
    tr = StorageTracker()
    tr.start_trace()
    with tr.mode():
        a = torch.ones(1000, dtype=torch.float32)  # 4,000 bytes
        b = a * 2
        del a
        c = b + 1
    kinds = [e[0] for e in tr.trace]
    assert kinds == ["alloc", "alloc", "free", "alloc"]
    assert [e[2] for e in tr.trace if e[0] == "alloc"] == [4000, 4000, 4000]
    m = allocator.CachingAllocatorModel().replay(tr.trace)
    # three 4,096-byte blocks, two alive at once, all from one 2 MiB small-pool segment
    assert (m.max_allocated, m.max_reserved, m.allocated) == (8192, 2 * 1024 * 1024, 8192)
    del b, c


def test_a_step_replayed_through_the_model_counts_the_trackers_peak(monkeypatch):
    models = []
    replay = allocator.CachingAllocatorModel.replay

    def keep(self, events):
        models.append(replay(self, events))
        return models[-1]

    monkeypatch.setattr(allocator.CachingAllocatorModel, "replay", keep)
    m = measure(TINY, method="lora", batch_size=2, seq_len=32, optimizer="adamw_torch", steps=2,
                gradient_checkpointing="true", attention="sdpa")
    (model,) = models
    assert model.max_allocated == m.peak
    assert m.modelled_reserved_peak == model.max_reserved >= m.peak
    assert m.to_dict()["modelled_reserved_peak"] == m.modelled_reserved_peak


def test_measure_prints_the_modelled_reserve(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    assert main(["measure", str(cfg), "--method", "lora", "--batch-size", "2", "--seq-len", "32",
                 "--optimizer", "adamw_torch", "--steps", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["modelled_reserved_peak"] >= out["peak"]
    assert main(["measure", str(cfg), "--method", "lora", "--batch-size", "2", "--seq-len", "32",
                 "--optimizer", "adamw_torch", "--steps", "1"]) == 0
    assert "reserved by torch's CUDA caching allocator for the same allocations" in capsys.readouterr().out
