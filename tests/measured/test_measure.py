"""The memory tracker and `vramwise measure` on CPU, checked against hand-derived sizes."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from vramwise.measuring.steps import measure  # noqa: E402
from vramwise.measuring.tracker import StorageTracker  # noqa: E402
from vramwise.surfaces.cli.main import main  # noqa: E402

TINY = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}


def r512(n: int) -> int:
    return -(-n // 512) * 512


def test_tracker_counts_live_storages_and_peak():
    tr = StorageTracker()
    with tr.mode():
        a = torch.ones(1000, dtype=torch.float32)   # 4000 bytes -> 4096
        b = torch.ones(10, dtype=torch.bfloat16)    # 20 bytes -> 512
        c = a * 2                                    # another 4096
        assert tr.current == 4096 + 512 + 4096
        del a, c
        d = b + 1                                    # frees are seen before this op's output is added
        assert tr.current == 512 + 512
        v = d.view(2, 5)                             # a view shares the storage: nothing new
        assert tr.current == 1024
    assert tr.peak == 4096 + 512 + 4096
    del b, d, v


def _param_bytes() -> int:
    # bf16 parameters of TINY, each tensor rounded up to 512 bytes:
    # embed and lm_head 1000*64*2 = 128,000 each (exactly 250 x 512, no rounding)
    # per layer: q 64*64*2 = 8192, k and v 32*64*2 = 4096, o 8192, gate/up/down 128*64*2 = 16,384,
    #            two norms 128 -> 512 each
    # final norm 512
    layer = 8192 + 2 * 4096 + 8192 + 3 * 16384 + 2 * 512
    return 2 * 128_000 + 2 * layer + 512


def test_full_finetune_state_at_the_end_of_backward():
    m = measure(TINY, method="full", batch_size=1, seq_len=16, steps=2)
    P = _param_bytes()
    cats = m.phases["backward"].categories
    assert cats["parameters"] == P
    assert cats["gradients"] == P                    # one bf16 gradient per parameter
    # AdamW: exp_avg and exp_avg_sq like each parameter, plus a 4-byte step per tensor (512 rounded);
    # 2 embeddings/heads + 2 layers x 9 tensors + final norm = 21 tensors
    assert cats["optimizer_state"] == 2 * P + 21 * 512
    # what is alive then is that state plus the input ids (16 int64 = 128 -> 512) and rotary buffers
    assert m.phases["backward"].end >= 4 * P + 21 * 512
    assert m.peak == max(ph.peak for ph in m.phases.values())
    assert m.params_total == 2 * 1000 * 64 + 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64 + 2 * 64) + 64


def test_lora_trains_only_adapters():
    m = measure(TINY, method="lora", lora_rank=4, target_modules=["q_proj", "v_proj"], batch_size=1, seq_len=16)
    # q: 4 * (64 + 64), v: 4 * (64 + 32) per layer
    assert m.params_trainable == 2 * (4 * 128 + 4 * 96)
    # PEFT adapters are fp32: gradients 4 bytes each, rounded per tensor (4 adapter tensors per module)
    grads = m.phases["backward"].categories["gradients"]
    assert grads == 2 * (r512(4 * 64 * 4) + r512(64 * 4 * 4) + r512(4 * 64 * 4) + r512(32 * 4 * 4))


def test_measure_rejects_unsupported_settings():
    from vramwise import SettingsError

    with pytest.raises(SettingsError, match="gradient checkpointing is none or true"):
        measure(TINY, gradient_checkpointing="unsloth")
    with pytest.raises(SettingsError, match="adamw_torch, adamw_torch_fused, adamw_8bit, sgd"):
        measure(TINY, optimizer="lion")


def test_cli_measure_json(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY))
    assert main(["measure", str(p), "--method", "full", "--seq-len", "16", "--steps", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "cpu" and set(data["phases"]) == {"load", "forward", "backward", "optimizer"}
    assert data["peak"] == max(v["peak"] for v in data["phases"].values())
    # the categories account for every live byte at a phase's end
    for ph in data["phases"].values():
        assert sum(ph["categories"].values()) == ph["end"]


def test_cli_measure_table_in_mib_for_small_models(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY))
    assert main(["measure", str(p), "--fake", "--seq-len", "16", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    # estimate's defaults where runnable: with --fake, lora and adamw_torch stand for qlora and adamw_8bit
    m = measure(TINY, method="lora", batch_size=4, seq_len=16, gradient_checkpointing="true", optimizer="adamw_torch",
                steps=1, fake=True)
    assert f"peak: {m.peak / 2**20:,.2f} MiB of tensors, in the {m.peak_phase} phase" in out
    assert "activations and temporaries" in out
    assert "ran: lora, batch 4, seq 16, rank 16, checkpointing true, adamw_torch, sdpa, 1 step(s) (fake tensors)" in out
    assert "QLoRA cannot be simulated" in out and "flash_attention_2 is not runnable" in out


MOE = {"model_type": "qwen3_moe", "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256,
       "moe_intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}


@pytest.mark.parametrize("cfg", [TINY, MOE], ids=["llama", "qwen3_moe"])
@pytest.mark.parametrize("method,gc,attention", [("full", "none", "sdpa"), ("full", "true", "eager"),
                                                 ("lora", "none", "eager"), ("lora", "true", "sdpa")])
def test_fake_tensors_give_the_real_step_to_the_byte(cfg, method, gc, attention):
    kw = dict(method=method, batch_size=2, seq_len=32, gradient_checkpointing=gc, attention=attention)
    real, fake = measure(cfg, **kw), measure(cfg, fake=True, **kw)
    assert fake.peak == real.peak
    for name, ph in real.phases.items():
        assert (fake.phases[name].peak, fake.phases[name].end) == (ph.peak, ph.end), name
        assert fake.phases[name].categories == ph.categories, name


def test_a_fake_measure_leaves_nothing_in_torchs_process_wide_fake_tensor_cache(monkeypatch):
    # torch keeps one dispatch cache for every FakeTensorMode of the process, filled as operators run and never
    # evicted: a process measuring many models (the every-family matrix runs 1,075 measures) would carry every
    # earlier model's entries. A measure that ran, and one whose step failed after its operators ran, each
    # leave it empty, and the figures do not depend on what an earlier measure left there.
    from torch._subclasses.fake_tensor import FakeTensorMode

    import vramwise.measuring.steps as steps

    kw = dict(method="full", batch_size=1, seq_len=8, gradient_checkpointing="none", fake=True)
    first = measure(TINY, **kw)
    assert len(FakeTensorMode.cache) == 0
    ran = steps.run_prepared
    filled = []

    def fails_after_the_step(*args, **kwargs):
        ran(*args, **kwargs)
        filled.append(len(FakeTensorMode.cache))
        raise RuntimeError("a failure after the step's operators ran")

    monkeypatch.setattr(steps, "run_prepared", fails_after_the_step)
    with pytest.raises(RuntimeError, match="after the step"):
        measure(TINY, **kw)
    assert filled[0] > 0 and len(FakeTensorMode.cache) == 0  # the step did fill it; the measure emptied it
    monkeypatch.setattr(steps, "run_prepared", ran)
    assert measure(TINY, **kw).peak == first.peak


def test_fake_tensors_refuse_qlora():
    from vramwise import SettingsError

    with pytest.raises(SettingsError, match="real 4-bit storage"):
        measure(TINY, method="qlora", fake=True)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_optimizer_step_temporaries(method):
    """foreach AdamW: sqrt(exp_avg_sq) of every trainable tensor at once, one more copy of the
    trainable bytes (the gradients have exactly that size); the fused kernel works in place."""
    state = {}
    for opt in ("adamw_torch", "adamw_torch_fused"):
        m = measure(TINY, method=method, batch_size=1, seq_len=16, optimizer=opt)
        c = m.phases["backward"].categories
        state[opt] = (m.phases["optimizer"].peak - (c["parameters"] + c["gradients"] + c["optimizer_state"]),
                      c["gradients"])
    extra, grads = state["adamw_torch"]
    assert grads <= extra <= grads + 4 * 512  # plus a few scalar step tensors
    assert state["adamw_torch_fused"][0] <= 4 * 512


class _FullSweepTracker:
    """The plain bookkeeping: after every operator, every live storage is checked for death."""

    def __init__(self):
        from torch.multiprocessing.reductions import StorageWeakRef

        self._weak, self._live, self.current, self.peak = StorageWeakRef, {}, 0, 0

    def sweep(self):
        for k in [k for k, (ref, _) in self._live.items() if ref.expired()]:
            self.current -= self._live.pop(k)[1]

    def add(self, t):
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        st = t.untyped_storage()
        ref = self._weak(st)
        if ref.cdata not in self._live:
            self._live[ref.cdata] = (ref, r512(st.nbytes()))
            self.current += r512(st.nbytes())

    def after_op(self, outputs):
        self.sweep()
        for t in torch.utils._pytree.tree_leaves(outputs):
            self.add(t)
        self.peak = max(self.peak, self.current)

    def reset_peak(self):
        self.sweep()
        self.peak = self.current


class _ComparedTracker(StorageTracker):
    """Feeds StorageTracker and the full-sweep tracker the same events and checks, after each
    one, that both hold the same live total and peak to the byte."""

    def __init__(self):
        self.fast, self.plain, self.events = StorageTracker(), _FullSweepTracker(), 0

    current = property(lambda self: self.fast.current)
    peak = property(lambda self: self.fast.peak)

    def _both(self, name, *args):
        import gc

        # a garbage collection between the two calls would free storages for one tracker only
        enabled = gc.isenabled()
        gc.disable()
        try:
            getattr(self.fast, name)(*args)
            getattr(self.plain, name)(*args)
        finally:
            if enabled:
                gc.enable()
        self.events += 1
        assert (self.fast.current, self.fast.peak) == (self.plain.current, self.plain.peak), (name, self.events)

    def add(self, t):
        self._both("add", t)

    def sweep(self):
        self._both("sweep")

    def reset_peak(self):
        self._both("reset_peak")

    def after_op(self, outputs):
        self._both("after_op", outputs)


@pytest.mark.parametrize("fake", [False, True], ids=["real", "fake"])
@pytest.mark.parametrize("cfg,method,gc", [(TINY, "full", "none"), (TINY, "lora", "true"), (MOE, "lora", "none")],
                         ids=["llama-full", "llama-lora-checkpointed", "qwen3_moe-lora"])
def test_tracker_matches_a_full_sweep_after_every_operator(monkeypatch, cfg, method, gc, fake):
    """Deaths reported by weak-reference callbacks give the same live bytes, at every operator,
    as checking every live storage."""
    import vramwise.measuring.runner as runner

    made = []

    def tracker():
        made.append(_ComparedTracker())
        return made[-1]

    monkeypatch.setattr(runner, "StorageTracker", tracker)
    measure(cfg, method=method, batch_size=2, seq_len=16, gradient_checkpointing=gc, fake=fake)
    assert len(made) == 1 and made[0].events > 1000  # every operator of the two steps was compared


def test_tracker_sees_frees_between_operators_and_views():
    tr = StorageTracker()
    with tr.mode():
        a = torch.ones(1000)                         # 4096
        v = a[10:]                                   # a view: the storage lives on
        del a
        b = torch.ones(1)                            # +512; a's storage is still held by v
        assert tr.current == 4096 + 512
        del v
        c = b * 3                                    # a's storage died between operators
        assert tr.current == 512 + 512
        del b, c
    tr.sweep()
    assert tr.current == 0 and tr.peak == 4096 + 512


def test_every_stack_name_has_a_module_with_the_protocol():
    from vramwise import Registry
    from vramwise.profiles.settings import STACKS
    from vramwise.measuring.stacks.registry import STACK_MODULES

    assert set(STACK_MODULES) == set(STACKS)
    for name, module in STACK_MODULES.items():
        assert callable(module.check) and callable(module.prepare), name
        assert module.DEVICES and set(module.DEVICES) <= {"cpu", "cuda"}, name
        assert Registry.default().profile(module.PROFILE).name == module.PROFILE, name


def test_an_unknown_stack_names_the_choices():
    from vramwise import SettingsError

    with pytest.raises(SettingsError, match=r"unknown stack 'nemo' \(choose one of: hf, torchtune, litgpt\)"):
        measure(TINY, stack="nemo")


def test_the_families_a_stack_builds_are_its_profiles():
    from vramwise.measuring.build import served_family

    # formulas/litgpt/profile.yaml: families [llama, mistral, qwen2, qwen3, phi3, gemma, olmo2]; torchtune's:
    # [llama, mistral, qwen2, gemma, gemma2, phi3] (torchtune 0.6.1 has no Qwen3 builder)
    litgpt = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "olmo2")
    torchtune = ("llama", "mistral", "qwen2", "gemma", "gemma2", "phi3")
    assert served_family({"model_type": "qwen3"}, "litgpt") == ("qwen3", litgpt)
    assert served_family({"model_type": "qwen3"}, "torchtune") == (None, torchtune)
    assert served_family({"model_type": "gemma3_text"}, "litgpt") == (None, litgpt)
    assert served_family({}, "litgpt") == (None, litgpt)  # no model type: the generic family, served by none


def test_a_missing_dependency_names_its_extra():
    from vramwise import MissingDependencyError
    from vramwise.measuring.build import require

    with pytest.raises(MissingDependencyError, match=r"needs no_such_module_xyz, which is not installed: "
                                                     r"pip install 'vramwise\[litgpt\]'") as info:
        require("no_such_module_xyz", extra="litgpt")
    assert info.value.extra == "litgpt"
    assert require("torch") is torch


def test_a_config_transformers_cannot_build_is_a_stack_error():
    from vramwise import StackUnsupportedError

    with pytest.raises(StackUnsupportedError, match="transformers cannot build a 'no_such_model' config"):
        measure({"model_type": "no_such_model"}, method="full", seq_len=16, steps=1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_no_cuda_device_is_a_measurement_error():
    from vramwise import MeasurementError

    with pytest.raises(MeasurementError, match="torch sees no CUDA device here"):
        measure(TINY, method="full", device="cuda")
