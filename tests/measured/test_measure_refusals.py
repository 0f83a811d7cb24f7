"""`measure` over every family's example config with each attention kernel: every cell is classified.

The cheapest measure that builds the model and runs a step: transformers' stack, full fine-tuning, SGD,
fake tensors, batch 1 x 8 tokens, one step, no checkpointing. Each cell either runs, or is refused with
the documented user error, whose expected class and words come from transformers itself (the class's
``_supports_*`` attributes, the config class's pad_token_id and vocab_size), not from vramwise:

- a kernel the causal LM class does not run: StackUnsupportedError naming the kernel and ``--attention eager``;
- flash_attention_2/3 and flex_attention on the CPU (no flash-attn; torch's flex attention has no CPU
  backward): SettingsError, "not runnable here";
- a pad_token_id outside the vocabulary the embedding is built with: StackUnsupportedError naming the id and
  ``pad_token_id to null``;
- a config transformers has no causal LM for, or cannot build: StackUnsupportedError;
- a step whose operators read tensor values (mixture-of-experts routing under fake tensors): StackUnsupportedError
  naming ``--fake``.

``KNOWN`` lists the example configs (test vectors of the estimate, several synthetic) on which
transformers' own step fails for another reason (values its model code does not run together, such as
more experts chosen than a group holds): measure refuses them naming transformers, the exception and
where it was raised, each listed with its exception type, so that a new one, or one that goes away, fails
this test; any exception left to vramwise (an internal error) fails it.
A config of more than ``CAP`` layers is measured with ``CAP`` (its class's layer count set lower, every other
value as written): a step under fake tensors costs per operator, so a full-size default config of 32 to 128
layers took 5 to 30 s a cell, and what decides a cell (the class's kernels, the pad id against the
vocabulary, an operator that reads values, values transformers' code cannot run together) is the same in
its first layers. Not capped: a config with a list of one entry per layer (the class would refuse the
shortened count), and ``FULL_DEPTH``, the examples whose layers are placed by the count (attention at
layers 9, 18 and 27 of 32, say): capped, transformers fails on them, so they are measured whole. Measured
on 2026-12-06, all 1,065 cells at both depths: the 615 capped cells classify alike at full depth and
capped but for those examples', and take 300 s capped against 1,213 s whole. A new example that
classifies otherwise capped fails here naming the cap: measure it whole and, if it then runs, add it to
``FULL_DEPTH``. The matrix is two modules (this one and test_measure_refusals_second_half.py) so that
.ci/run's two workers share it.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vramwise  # noqa: E402
from vramwise.errors import SettingsError, StackUnsupportedError, VramwiseError  # noqa: E402
from vramwise.profiles.settings import ATTENTION_KINDS  # noqa: E402
from vramwise.measuring.steps import measure  # noqa: E402

_REG = vramwise.Registry.default()
FAMILIES = sorted(name for name, fam in _REG.families.items() if fam.examples)

#: (family, example) -> {kernel: exception type name}: steps transformers (or a fake-tensor build) fails on for
#: a reason other than a refused input; most are synthetic configs whose absent fields transformers' config
#: classes default otherwise than the example assumes (key/value heads, expert groups).
KNOWN = {
    ("axk1", "moe-layer-freq"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("cwm", "window-pattern"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("dbrx", "ffn-config-sub-config"): {"eager": "AttributeError", "sdpa": "AttributeError"},
    ("deepseek_v3", "first-k-dense-and-mla"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("flint", "null-mlp-only-layers"): {"eager": "RuntimeError"},
    ("gemma4", "fully-kv-shared-count-shares-none"): {"eager": "ValueError", "sdpa": "ValueError"},
    ("gemma4", "global-heads-k-eq-v-and-kv-sharing"): {"eager": "TypeError", "sdpa": "TypeError"},
    ("git", "git-default"): {"eager": "ValueError"},
    ("git", "git-tied-video-frames"): {"eager": "ValueError"},
    ("glm4_moe", "bias-and-qk-norm"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("glm4_moe_lite", "mlp-layer-types-shorter-than-model"): {"eager": "IndexError", "sdpa": "IndexError"},
    ("glm_moe_dsa", "shared-indexer-pattern"): {"eager": "RuntimeError"},
    ("gptj", "tied-head-keeps-bias"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("jamba", "auto-dt-rank"): {"eager": "ValueError", "sdpa": "ValueError"},
    ("llama4", "moe-layers-membership"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("minimax_m2", "whole-projection-qk-norms"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("ministral", "unlisted-layers-follow-the-window"): {"eager": "TypeError", "sdpa": "TypeError"},
    ("nemotron_h", "legacy-pattern"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("qwen2", "sliding-from-max-window-layers"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("qwen2_moe", "decoder-sparse-step-2"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("seed_oss", "defaults-kv-8-head-dim-128"): {"eager": "RuntimeError", "sdpa": "RuntimeError"},
    ("xlstm", "xlstm-fused-biased-num-blocks-wins"): {"eager": "ValueError"},
}
NOT_ON_CPU = ("flash_attention_2", "flash_attention_3", "flex_attention")
#: The most layers a cell's config is measured with (see the module's docstring).
CAP = 8
#: (family, example) -> why it is measured with every layer: transformers places layers by the count.
FULL_DEPTH = {
    ("bamba", "bamba-default-dims-three-attention-layers"): "attention at layers 9, 18 and 27 (attn_layer_indices)",
    ("zamba2", "zamba2-default"): "its hybrid layer pattern is checked against the layer count",
    ("hrm_text", "hrm-text-default"): "128 layers in stacks of num_layers_per_stack = 16",
    ("xlstm", "xlstm-7b-default"): "num_blocks = 32 blocks, one per layer",
}


def _transformers_view(config: dict):
    """(the causal LM class, its text config) as transformers sees ``config``; (None, None) when it
    cannot build the config or has no causal LM for it."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    d = dict(config.get("text_config") if isinstance(config.get("text_config"), dict) else config)
    mt = d.pop("model_type", None)
    try:
        text = AutoConfig.for_model(mt, **d)
    except Exception:  # noqa: BLE001 - transformers cannot read it: measure must refuse it as a stack error
        return None, None
    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(text.model_type)
    return (getattr(transformers, name) if name else None), text


def measured_config(family: str, example: dict) -> tuple[dict, str]:
    """(the config a cell measures, "" or how it was shortened): ``example``'s config with its class's layer
    count set to :data:`CAP` where it has more (see the module's docstring)."""
    config = example["config"]
    if (family, example.get("name")) in FULL_DEPTH:
        return config, ""
    _, text = _transformers_view(config)
    layers = getattr(text, "num_hidden_layers", None)
    if not isinstance(layers, int) or layers <= CAP:
        return config, ""
    written = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    if any(isinstance(v, list) and len(v) == layers for v in written.values()):
        return config, ""  # one entry per layer: the class refuses a shortened count
    key = getattr(text, "attribute_map", {}).get("num_hidden_layers", "num_hidden_layers")
    shortened = dict(written, **{key: CAP})
    how = f" (measured with {CAP} of its {layers} layers: if it runs whole, add it to FULL_DEPTH)"
    return (dict(config, text_config=shortened) if written is not config else shortened), how


def _runs(cls) -> set:
    """The kernels transformers' ``cls`` runs, from its own attributes."""
    out = {"eager"}
    if cls._supports_sdpa:
        out.add("sdpa")
    if cls._supports_flash_attn:
        out |= {"flash_attention_2", "flash_attention_3"}
    if cls._supports_flex_attn:
        out.add("flex_attention")
    return out


def _outcome(config: dict, kernel: str) -> tuple:
    """(the class name of the vramwise error, its message), ("ran", ""), or ("other", the exception's type)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            measure(config, method="full", optimizer="sgd", gradient_checkpointing="none", batch_size=1, seq_len=8,
                    steps=1, fake=True, attention=kernel)
        except VramwiseError as e:
            return type(e).__name__, str(e)
        except Exception as e:  # noqa: BLE001 - classified below: only the KNOWN steps may fail so
            return "other", type(e).__name__
    return "ran", ""


#: Families whose cells one child process measures. Each `vramwise measure` is a process of its own; this
#: matrix builds 1,075 models under fake tensors, and one process running them all grows torch's native state
#: across hundreds of builds (a CI run of that process aborted inside torch after 540 cells, at a config
#: import that runs alone). A fresh process every CHUNK families keeps each process near a user's.
CHUNK = 10
#: Families whose fake step, refused, leaves the process's memory corrupt: a later build in the same process
#: crashed (inkling2_loop's forward deep-copies its cache, and torch's deep copy of a fake tensor fails part
#: way). Each of their cells is measured in a process of its own, as the command line measures it.
ALONE = ("inkling2_loop_text",)
#: What the fork server the children start from imports once (about 5 s of CPU that each child would otherwise
#: spend): the children are copies of it, with nothing built or measured yet.
PRELOAD = ["torch", "transformers", "vramwise.measuring.steps"]
_MEASURED: dict = {}  # family -> its cells' outcomes (example x kernel), or the child's failure


def _cells(family: str) -> list:
    return [(family, i, kernel) for i in range(len(_REG.family(family).examples)) for kernel in ATTENTION_KINDS]


def _child(out: str, log: str, cells: list) -> None:
    """A child's work: the outcomes of ``cells``, written to ``out`` as JSON; its output to ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    result = [list(_outcome(measured_config(family, _REG.family(family).examples[i])[0], kernel))
              for family, i, kernel in cells]
    with open(out, "w") as f:
        json.dump(result, f)


def _in_child(cells: list):
    """The outcomes of ``cells`` measured in a child process forked from a fork server (multiprocessing's
    forkserver: a process that has imported :data:`PRELOAD` and nothing else), or why the child failed."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the server starts (another test may have started it already)
    with tempfile.TemporaryDirectory() as tmp:
        out, log = Path(tmp) / "outcomes.json", Path(tmp) / "child.log"
        proc = ctx.Process(target=_child, args=(str(out), str(log), cells), daemon=True)
        proc.start()
        proc.join(1800)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
        if proc.exitcode != 0 or not out.exists():
            tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
            return f"the child measuring {sorted({c[0] for c in cells})} exited with status {proc.exitcode}:\n{tail}"
        return json.loads(out.read_text())


def _outcomes(family: str):
    if family not in _MEASURED:
        if family in ALONE:
            chunk = [family]
            groups = [[cell] for cell in _cells(family)]
        else:
            start = FAMILIES.index(family) // CHUNK * CHUNK
            chunk = [f for f in FAMILIES[start:start + CHUNK] if f not in ALONE]
            groups = [[cell for f in chunk for cell in _cells(f)]]
        got: dict = {}
        for cells in groups:
            outcomes = _in_child(cells)
            if isinstance(outcomes, str):
                _MEASURED.update(dict.fromkeys(chunk, outcomes))
                break
            got.update(zip(cells, outcomes))
        else:
            for f in chunk:
                _MEASURED[f] = [[got[(f, i, kernel)] for kernel in ATTENTION_KINDS]
                                for i in range(len(_REG.family(f).examples))]
    if isinstance(_MEASURED[family], str):
        pytest.fail(_MEASURED[family])
    return _MEASURED[family]


#: The matrix in two modules (this one and test_measure_refusals_second_half.py), split at a chunk's edge, so that
#: .ci/run's two workers (each module in one: --dist loadfile) measure a half each.
_HALF = (len(FAMILIES) // CHUNK + 1) // 2 * CHUNK
FIRST_HALF = [f for f in FAMILIES[:_HALF] if f not in ALONE]
SECOND_HALF = [f for f in FAMILIES[_HALF:] if f not in ALONE] + [f for f in FAMILIES if f in ALONE]


@pytest.mark.slow
@pytest.mark.parametrize("family", FIRST_HALF)
def test_every_example_and_kernel_is_classified(family):
    classify(family)


def classify(family: str) -> None:
    """Fail with every cell of ``family``'s examples x kernels that is neither run nor refused as documented."""
    problems = []
    for example, outcomes in zip(_REG.family(family).examples, _outcomes(family), strict=True):
        config, name = example["config"], example.get("name", "?")
        cls, text = _transformers_view(config)
        capped = measured_config(family, example)[1]
        pad, vocab = getattr(text, "pad_token_id", None), getattr(text, "vocab_size", None)
        for kernel, (got, message) in zip(ATTENTION_KINDS, outcomes, strict=True):
            where = f"{name} / {kernel}{capped}: "
            if cls is None:  # no model type transformers knows, or a config it refuses to read
                if got != StackUnsupportedError.__name__ or "transformers" not in message:
                    problems.append(where + f"expected a StackUnsupportedError naming transformers, got {got} {message[:200]}")
            elif kernel not in _runs(cls):
                if got != StackUnsupportedError.__name__ or f"--attention {kernel}" not in message \
                        or cls.__name__ not in message or "use --attention eager" not in message:
                    problems.append(where + f"{cls.__name__} does not run it: expected the attention refusal, got {got} {message[:200]}")
            elif kernel in NOT_ON_CPU:
                if got != SettingsError.__name__ or f"--attention {kernel} is not runnable here" not in message:
                    problems.append(where + f"expected 'not runnable here', got {got} {message[:200]}")
            elif isinstance(pad, int) and isinstance(vocab, int) and not -vocab <= pad < vocab and got != "ran":
                # out of the vocabulary: refused where the class's embedding takes it (the conformance test checks
                # which do), built where it does not
                if got != StackUnsupportedError.__name__ or f"pad_token_id {pad}" not in message \
                        or "set pad_token_id to null" not in message:
                    problems.append(where + f"expected the pad_token_id refusal, got {got} {message[:200]}")
            elif got == "ran":
                if KNOWN.get((family, name), {}).get(kernel):
                    problems.append(where + "ran: take it out of KNOWN")
            elif got == StackUnsupportedError.__name__ and message.startswith("--fake:"):
                pass  # operators that read tensor values, or devices, fake tensors do not have: refused naming --fake
            elif got == StackUnsupportedError.__name__ and KNOWN.get((family, name), {}).get(kernel) \
                    and message.startswith("transformers cannot run a training step of this config (" +
                                           KNOWN[(family, name)][kernel] + ": "):
                pass  # transformers' model code fails on these values: refused naming it, never an internal error
            else:
                problems.append(where + f"neither ran nor was refused as documented: {got} {message[:300]}")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_every_full_depth_entry_is_an_example_whose_layers_the_cap_would_shorten():
    examples = {(f, e.get("name")): e for f in FAMILIES for e in _REG.family(f).examples}
    for key in FULL_DEPTH:
        assert key in examples, f"FULL_DEPTH names {key}, which is no family's example"
        _, text = _transformers_view(examples[key]["config"])
        assert text.num_hidden_layers > CAP, key
