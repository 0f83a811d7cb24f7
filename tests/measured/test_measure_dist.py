"""`measure(..., strategy=ddp|fsdp, world_size=2)`: data-parallel processes on CPU (gloo), checked
against sizes derived by hand from the model's shapes."""

from __future__ import annotations

import math

import pytest

# ranks in processes of their own, joined by gloo: .ci/run runs these modules in one process, alone, so
# that their ranks have the machine's cores (beside another worker's steps they took seven times as long)
pytestmark = pytest.mark.distributed

torch = pytest.importorskip("torch")
from helpers import require_gloo  # noqa: E402

require_gloo("transformers")

from vramwise import MeasurementError, SettingsError, StackUnsupportedError  # noqa: E402
from vramwise.measuring import distributed as _measure_dist  # noqa: E402
from vramwise.measuring.steps import measure  # noqa: E402

TINY = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "tie_word_embeddings": False}
SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK = 4
RUN = dict(batch_size=1, seq_len=32, steps=2, optimizer="adamw_torch", gradient_checkpointing="none")


def r512(n: int) -> int:
    return -(-n // 512) * 512


# The parameters of TINY, written out from the llama layout (not read from the model): (shape, bytes per element).
# 4 heads of 64/4 = 16 and 4 key/value heads (the default): q, k, v and o are all 64 x 64.
LAYER = [((64, 64), 2)] * 4 + [((128, 64), 2)] * 2 + [((64, 128), 2)] + [((64,), 2)] * 2
BASE = [((256, 64), 2)] + LAYER * 2 + [((64,), 2), ((256, 64), 2)]  # embeddings, 2 layers, final norm, lm_head
# PEFT's adapters are fp32: lora_A (r, in), lora_B (out, r), on each of the seven projections.
ADAPTERS = ([((RANK, 64), 4), ((64, RANK), 4)] * 4 + [((RANK, 64), 4), ((128, RANK), 4)] * 2
            + [((RANK, 128), 4), ((64, RANK), 4)]) * 2


def held_bytes(params, world_size: int = 1) -> int:
    """Bytes one rank holds: FSDP2 splits each parameter along dim 0 into world_size equal chunks (dim 0
    padded up to a multiple of world_size), so a rank keeps ceil(d0 / ws) rows; each storage is rounded to
    512 bytes by the tracker. With world_size 1 this is the whole parameter (DDP, a single process)."""
    return sum(r512(math.ceil(shape[0] / world_size) * math.prod(shape[1:]) * size) for shape, size in params)


def elements(params) -> int:
    return sum(math.prod(shape) for shape, _ in params)


@pytest.fixture(scope="module")
def full():
    return {s: measure(TINY, method="full", **RUN, **({} if s == "single" else {"strategy": s, "world_size": 2}))
            for s in ("single", "ddp", "fsdp")}


@pytest.fixture(scope="module")
def lora():
    return {s: measure(TINY, method="lora", lora_rank=RANK, target_modules=SEVEN, **RUN,
                       **({} if s == "single" else {"strategy": s, "world_size": 2}))
            for s in ("single", "ddp", "fsdp")}


def _rank_cats(m, phase):
    return [r.phases[phase].categories for r in m.per_rank]


def test_shapes_written_out_match_the_single_process_run(full, lora):
    # the hand-written shapes above are the model: the single process holds each parameter whole
    assert full["single"].params_total == elements(BASE)
    assert full["single"].phases["load"].categories["parameters"] == held_bytes(BASE)
    assert lora["single"].params_trainable == elements(ADAPTERS)
    assert lora["single"].phases["load"].categories["parameters"] == held_bytes(BASE + ADAPTERS)
    assert full["single"].per_rank is None and full["single"].strategy is None


@pytest.mark.parametrize("kind", ["full", "lora"])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_one_entry_per_rank_and_the_top_is_the_highest_rank(request, kind, strategy):
    m = request.getfixturevalue(kind)[strategy]
    assert m.strategy == strategy and m.world_size == 2
    assert [r.rank for r in m.per_rank] == [0, 1]
    assert m.peak == max(r.peak for r in m.per_rank)
    for name, ph in m.phases.items():
        assert ph.peak == max(r.phases[name].peak for r in m.per_rank)
    d = m.to_dict()
    assert d["strategy"] == strategy and len(d["per_rank"]) == 2
    assert set(d["per_rank"][0]["phases"]) == {"load", "forward", "backward", "optimizer"}


def test_ddp_full_keeps_whole_parameters_plus_one_gradient_bucket(full):
    single, ddp = full["single"], full["ddp"]
    P = held_bytes(BASE)
    # DDP's reducer copies every trainable parameter's gradient into flat buckets of the parameters' dtype
    # (bf16 here). Its first bucket holds up to 1 MiB and TINY has elements(BASE) * 2 = 230,016 bytes of
    # gradients, so there is one bucket, one storage: rounded once.
    bucket = r512(elements(BASE) * 2)
    for cats in _rank_cats(ddp, "backward"):
        assert cats["parameters"] == P                  # nothing sharded
        assert cats["gradients"] == P                   # .grad stays, beside the bucket
        assert cats["gradient_buckets"] == bucket
    for r in ddp.per_rank:
        # the wrapping adds the bucket and nothing else that lives on
        assert r.phases["load"].end == single.phases["load"].end + bucket
        # the same step on the same batch size, with the bucket alive throughout
        assert r.peak >= single.peak + bucket


def test_ddp_lora_buckets_only_the_adapters(lora):
    single, ddp = lora["single"], lora["ddp"]
    # only trainable parameters get buckets: the fp32 adapters, 8,704 elements * 4 = 34,816 bytes, one bucket
    bucket = r512(elements(ADAPTERS) * 4)
    for r in ddp.per_rank:
        assert r.phases["backward"].categories["parameters"] == held_bytes(BASE + ADAPTERS)
        assert r.phases["backward"].categories["gradient_buckets"] == bucket
        assert r.peak >= single.peak + bucket


def test_fsdp_full_holds_half_of_each_parameter(full):
    single, fsdp = full["single"], full["fsdp"]
    half = held_bytes(BASE, 2)
    # every dim 0 here (256, 128, 64) is even: each rank keeps exactly half of each tensor; only the
    # 64-element norms (128 bytes, 64 bytes once halved) round up to the same 512 either way
    assert half == (held_bytes(BASE) - 5 * 512) // 2 + 5 * 512
    for r in fsdp.per_rank:
        for phase in ("load", "backward", "optimizer"):  # all resharded at these ends
            assert r.phases[phase].categories["parameters"] == half
        # AdamW keeps exp_avg and exp_avg_sq like each local shard, plus a 4-byte step per tensor
        # (21 tensors: embeddings, lm_head, final norm, 9 per layer)
        assert r.phases["backward"].categories["optimizer_state"] == 2 * half + 21 * 512
        # the sharded gradients: at least half of the bf16 gradient bytes, at most one rounded shard each
        grads = r.phases["backward"].categories["gradients"]
        assert elements(BASE) * 2 // 2 <= grads <= half
        # parameters, gradients and AdamW state are halved; activations are not (same batch per rank)
        assert r.peak < single.peak


def test_fsdp_lora_shards_base_and_adapters(lora):
    fsdp = lora["fsdp"]
    for r in fsdp.per_rank:
        # the frozen bf16 base and the fp32 adapters are both split along dim 0
        assert r.phases["load"].categories["parameters"] == held_bytes(BASE + ADAPTERS, 2)
        # only the adapters have gradients: half of their fp32 bytes per rank, rounded per shard at most
        grads = r.phases["backward"].categories["gradients"]
        assert elements(ADAPTERS) * 4 // 2 <= grads <= held_bytes(ADAPTERS, 2)


def test_fsdp_shard_grad_op_keeps_the_units_gathered_after_the_forward():
    m = measure(TINY, method="full", **RUN, strategy="fsdp_shard_grad_op", world_size=2)
    assert m.strategy == "fsdp_shard_grad_op" and m.settings["world_size"] == 2
    for r in m.per_rank:
        # at the end of the forward every unit is still gathered: the model's parameters are the whole ones
        # (the category counts what each parameter is now; the halves are kept apart until the reshard)
        assert r.phases["forward"].categories["parameters"] == held_bytes(BASE)
        # the backward reshards them: only the halves remain
        assert r.phases["backward"].categories["parameters"] == held_bytes(BASE, 2)


@pytest.mark.parametrize("kwargs, message", [
    ({"strategy": "fsdp_hybrid"}, "unknown strategy 'fsdp_hybrid'"),
    ({"strategy": "ddp", "world_size": 1}, "from 2 to 8, got 1"),
    ({"strategy": "fsdp", "world_size": 9}, "from 2 to 8, got 9"),
    ({"strategy": "ddp", "world_size": "2"}, "got '2'"),
    ({"strategy": "ddp", "world_size": True}, "got True"),
    ({"world_size": 2}, "needs a strategy"),
    ({"strategy": "ddp", "device": "cuda"}, "use device cpu"),
    ({"strategy": "fsdp", "fake": True}, "drop fake"),
    ({"strategy": "fsdp", "method": "qlora"}, "qlora runs under ddp there"),
    ({"strategy": "ddp", "stack": "torchtune"}, r"not how stack torchtune trains on several GPUs \(it runs: fsdp, "),
    ({"strategy": "fsdp", "stack": "litgpt"}, "it runs on one device only"),
    ({"strategy": "fsdp", "optimizer": "adamw_8bit"}, "cannot step FSDP's sharded parameters"),
])
def test_bad_requests_fail_before_any_process_starts(monkeypatch, kwargs, message):
    def no_spawn(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(_measure_dist, "_rank_processes", no_spawn)
    kw = {"method": "lora", **kwargs}
    with pytest.raises(SettingsError, match=message):
        measure(TINY, **kw)


def test_cli_rejects_a_bad_world_size(tmp_path, capsys):
    from vramwise.surfaces.cli.main import main

    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama"}')
    assert main(["measure", str(cfg), "--strategy", "ddp", "--world-size", "12"]) == 2
    assert "from 2 to 8, got 12" in capsys.readouterr().err


def _recording_popen(monkeypatch) -> list:
    """The rank processes started from now on, recorded as they start (multiprocessing Process objects)."""
    started = []
    real = _measure_dist._rank_processes

    class Recording:
        def __init__(self, ctx):
            self.ctx = ctx

        def Process(self, *a, **k):  # noqa: N802 - multiprocessing's name
            started.append(self.ctx.Process(*a, **k))
            return started[-1]

    monkeypatch.setattr(_measure_dist, "_rank_processes", lambda: Recording(real()))
    return started


def test_an_error_in_a_child_comes_back_as_one_message(monkeypatch):
    from vramwise.profiles.settings import normalise_settings

    started = _recording_popen(monkeypatch)
    # measure refuses a config transformers cannot read before any process starts, in one short line
    with pytest.raises(StackUnsupportedError, match=r"^transformers cannot build a 'no_such_model' config") as e:
        measure({"model_type": "no_such_model"}, method="full", strategy="ddp", world_size=2, **RUN)
    assert started == [] and len(str(e.value)) < 500
    # past that check, the children's own error comes back as its class, naming the rank
    settings = normalise_settings(method="full", batch_size=1, seq_len=32)
    with pytest.raises(StackUnsupportedError, match=r"rank \d: transformers cannot build a 'no_such_model' config"):
        _measure_dist.measure_distributed({"model_type": "no_such_model"}, settings, 1, "ddp", 2)
    assert len(started) == 2 and all(p.exitcode is not None for p in started)  # none left running


def test_a_run_past_its_deadline_is_stopped(monkeypatch):
    from vramwise.profiles.settings import normalise_settings

    started = _recording_popen(monkeypatch)
    # a step that runs (sdpa, which the CPU has), given less time than two processes take to build a model: the
    # ranks start from an already-running fork server once another test has used it, so the deadline is short
    settings = normalise_settings(method="full", batch_size=1, seq_len=32, attention="sdpa")
    with pytest.raises(MeasurementError, match="did not finish within 0.01 s"):
        _measure_dist.measure_distributed(TINY, settings, 1, "ddp", 2, timeout=0.01)
    assert len(started) == 2 and all(p.exitcode is not None for p in started)


def test_the_strategies_measured_are_strategies_of_the_settings():
    from vramwise.profiles.settings import STRATEGIES

    # DDP and FSDP2 (full shard, and shard_grad_op's reshard_after_forward=False) run here, and ZeRO on
    # DeepSpeed's CPU accelerator; HSDP and device_map need several nodes or GPUs
    assert _measure_dist.STRATEGIES == ("ddp", "fsdp", "fsdp_shard_grad_op", "zero1", "zero2", "zero3")
    assert set(_measure_dist.STRATEGIES) <= set(STRATEGIES)
    # each has the runner's wrapper (ZeRO: DeepSpeed's engine), and the command line offers exactly these
    assert set(_measure_dist._WRAPPINGS) | set(_measure_dist.ZERO_STAGES) == set(_measure_dist.STRATEGIES)
    from vramwise.surfaces.cli.parser import build_parser

    measure = build_parser()._subparsers._group_actions[0].choices["measure"]
    strategy = next(a for a in measure._actions if a.dest == "strategy")
    assert tuple(strategy.choices) == _measure_dist.STRATEGIES
