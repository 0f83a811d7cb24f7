"""What runs where (hardware/runs_on.yaml) in fit's verdict and a serving estimate's warnings.

The cases come from the data's sources, quoted beside each: FlashAttention-3 in transformers 5.24.0
(transformers/modeling_flash_attention_utils.py) supports cuda only (FLASH_ATTENTION_COMPATIBILITY_MATRIX[3]
``supported_devices``) and its hub kernel kernels-community/vllm-flash-attn3 ships cuda builds only
(FLASH_ATTN_KERNEL_DEVICES), so it does not run on an Intel XPU; sdpa is PyTorch's own attention. The unchanged
verdicts are compared with fit's answer for a GPU given by its size alone (no platform, nothing refused), of the
same bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import vramwise
import vramwise.inputs.runs_on as runs_on_module
from vramwise.answers.fit import VERDICTS, fit
from vramwise.errors import FileFormatError, SettingsError
from vramwise.estimation.registry import Registry
from vramwise.inputs.gpu_catalog import gpu_spec
from vramwise.inputs.runs_on import build_runs_on, check, runs_on_table
from vramwise.profiles.settings import SETTINGS as ALL_SETTINGS

ROOT = Path(__file__).resolve().parents[3]
LLAMA = "meta-llama/Llama-3.1-8B"  # a catalog entry: no hub
SETTINGS = dict(profile="hf", method="lora", batch_size=1, seq_len=1024, seq_lens=())
INTEL = "Arc B580"  # hardware/gpus.yaml: vendor intel, whose platform is xpu in hardware/runs_on.yaml


def test_a_kernel_that_does_not_run_on_the_platform_gives_the_refusal_and_what_runs_instead():
    # FlashAttention-3 on Intel XPU: transformers 5.24.0 FLASH_ATTENTION_COMPATIBILITY_MATRIX[3] is cuda only
    f = fit(LLAMA, gpu=INTEL, attention="flash_attention_3", **SETTINGS)
    v = f.verdict
    assert v.label == "does not run" and v.label in VERDICTS and not f.fits and f.advice == ()
    line = v.line()
    assert line.startswith("does not run: FlashAttention-3") and "does not run on Intel XPU" in line
    assert "FLASH_ATTENTION_COMPATIBILITY_MATRIX[3]" in line  # the source
    assert "use attention=flash_attention_2 or attention=sdpa instead" in line  # what runs there
    assert "\n" not in line
    d = f.to_dict()
    assert d["verdict"]["label"] == "does not run" and d["runs_on"]["platform"] == "xpu"
    assert [r["thing"] for r in d["runs_on"]["refusals"]] == ["flash-attention-3"]
    assert [r["instead"] for r in d["runs_on"]["refusals"]] == [[{"attention": "flash_attention_2"}, {"attention": "sdpa"}]]
    assert all(not m.fits and "does not run on Intel XPU" in m.problem for m in f.methods)


@pytest.mark.parametrize("gpu, attention", [(INTEL, "sdpa"), (INTEL, "flash_attention_2"), ("H100", "flash_attention_3"),
                                            ("MI300X", "flash_attention_2")])
def test_settings_that_run_there_keep_the_usual_verdict(gpu, attention):
    # sdpa is PyTorch's; FlashAttention-2 runs on XPU through kernels-community/flash-attn2 (cuda, xpu builds) and on
    # ROCm (flash-attention README, AMD ROCm Support); FlashAttention-3 on CUDA (README: H100 / H800, CUDA >= 12.3)
    f = fit(LLAMA, gpu=gpu, attention=attention, **SETTINGS)
    by_size = fit(LLAMA, gpu=gpu_spec(gpu).memory_bytes, attention=attention, **SETTINGS)  # no platform
    assert f.verdict.label in ("fits", "tight", "does not fit") and f.verdict.runs_on is None
    assert (f.verdict.label, f.verdict.margin_bytes, f.fits) == (by_size.verdict.label, by_size.verdict.margin_bytes,
                                                                by_size.fits)
    assert f.runs_on.refusals == () and f.to_dict()["runs_on"]["refusals"] == []


def test_a_gpu_given_by_size_has_no_platform_and_nothing_is_refused():
    f = fit(LLAMA, gpu="12GB", attention="flash_attention_3", **SETTINGS)
    assert f.verdict.label != "does not run" and f.runs_on.platform is None and f.to_dict()["runs_on"] is None


@pytest.fixture
def table_with(monkeypatch):
    """Replace the bundled table by the bundled one with one claim changed (the file's own text, edited)."""
    def make(thing: str, platform: str, claim: dict):
        data = yaml.safe_load((ROOT / "hardware" / "runs_on.yaml").read_text(encoding="utf-8"))
        next(t for t in data["things"] if t["id"] == thing)["runs"][platform] = claim
        table = build_runs_on(yaml.safe_dump(data), "runs_on.yaml")
        monkeypatch.setattr(runs_on_module, "runs_on_table", lambda: table)
        return table
    return make


def test_unknown_gives_no_refusal_but_a_note(table_with):
    table_with("flash-attention-2", "xpu", {"runs": "unknown", "why": "no source read settles it",
                                            "source": "a test's own claim"})
    f = fit(LLAMA, gpu=INTEL, attention="flash_attention_2", **SETTINGS)
    by_size = fit(LLAMA, gpu=gpu_spec(INTEL).memory_bytes, attention="flash_attention_2", **SETTINGS)
    assert f.verdict.label == by_size.verdict.label and f.verdict.runs_on is None
    assert f.notes[-1] == ("whether FlashAttention-2 (attention flash_attention_2) runs on Intel XPU is not known: "
                           "no source read settles it")


def test_a_platform_the_data_leaves_out_is_unknown():
    table = runs_on_table()
    data = yaml.safe_load((ROOT / "hardware" / "runs_on.yaml").read_text(encoding="utf-8"))
    del next(t for t in data["things"] if t["id"] == "flash-attention-3")["runs"]["xpu"]
    edited = build_runs_on(yaml.safe_dump(data), "runs_on.yaml")
    settings = {"attention": "flash_attention_3"}
    assert not check("intel", "hf", settings, table).runs
    got = check("intel", "hf", settings, edited)
    assert got.runs and [u.thing for u in got.unknowns] == ["flash-attention-3"]


def test_a_serving_estimate_on_a_gpu_warns_and_a_serving_fit_refuses(table_with):
    # the vllm profile on XPU is "yes" in the data (vLLM 0.31.0's GPU installation page); made "no" here
    table_with("vllm", "xpu", {"runs": "no", "source": "a test's own claim", "instead": [{"profile": "llama.cpp"}]})
    e = vramwise.estimate(LLAMA, profile="vllm", method="inference", gpu=INTEL, registry=Registry())
    line = "vLLM does not run on Intel XPU (a test's own claim); on Intel XPU use profile=llama.cpp instead"
    assert line in e.warnings
    with pytest.raises(SettingsError, match=r"vLLM does not run on Intel XPU"):
        fit(LLAMA, gpu=INTEL, profile="vllm", method="inference", registry=Registry())


def test_every_when_and_instead_names_a_setting_or_a_profile():
    names = {s.name for s in ALL_SETTINGS} | {"profile"}
    profiles = set(Registry.default().profile_names())
    table = runs_on_table()
    for thing in table.things:
        for alternative in thing.when:
            for key, values in alternative:
                assert key in names, (thing.id, key)
                if key == "profile":
                    assert set(values) <= profiles, (thing.id, values)
        for claim in thing.runs.values():
            for change in claim.instead:
                for key, value in change:
                    assert key in names, (thing.id, key)
                    if key == "profile":
                        assert value in profiles


def test_every_catalog_vendor_has_a_platform():
    vendors = {e["vendor"] for e in yaml.safe_load((ROOT / "hardware" / "gpus.yaml").read_text(encoding="utf-8"))["gpus"]}
    assert vendors <= set(runs_on_table().by_vendor)


BAD_NO_INSTEAD = """schema_version: 1
platforms:
  - {id: cuda, name: NVIDIA CUDA, vendors: [nvidia]}
things:
  - id: x
    name: X
    when: [{profile: [hf]}]
    runs:
      cuda: {runs: "no", source: "somewhere, at 1.0"}
"""


@pytest.mark.parametrize("text, where, path", [
    (BAD_NO_INSTEAD, "runs_on.yaml:9:13", "$.things[0].runs.cuda: 'instead' is a required"),  # a "no" names what runs instead
    (BAD_NO_INSTEAD.replace('"no"', '"yes"').replace("name: X", "name: X\n    colour: red"), "runs_on.yaml:7:5",
     "$.things[0].colour"),  # no key the schema does not know: line 7 holds it
    (BAD_NO_INSTEAD.replace('"no"', '"yes"').replace("cuda: {", "rocm: {"), "runs_on.yaml:9:13",
     "$.things[0].runs.rocm: unknown platform 'rocm'"),  # a platform the file does not list
])
def test_the_schema_refuses_a_bad_entry_with_its_place(text, where, path):
    with pytest.raises(FileFormatError) as err:
        build_runs_on(text, "runs_on.yaml")
    message = str(err.value)
    assert where in message and path in message, message


def test_flash_attention_2_on_apple_is_refused_and_sdpa_named():
    # transformers 5.24.0: FLASH_ATTENTION_COMPATIBILITY_MATRIX[2] supports cuda, mlu, musa, npu, xpu (no mps), and
    # kernels-community/flash-attn2 ships cuda and xpu builds only
    got = check("apple", "hf", {"attention": "flash_attention_2"})
    assert [r.thing for r in got.refusals] == ["flash-attention-2"] and got.refusals[0].alternatives == ("attention=sdpa",)
    assert check("apple", "hf", {"attention": "sdpa"}).runs


def test_what_runs_instead_is_not_refused_there():
    # each `instead` of a `no`, applied to the settings that use the thing, is refused by nothing on that platform
    table = runs_on_table()
    vendor = {p.id: p.vendors[0] for p in table.platforms}
    for thing in table.things:
        for platform, claim in thing.runs.items():
            if claim.runs != "no":
                continue
            uses = {k: v[0] for k, v in thing.when[0]}
            assert not check(vendor[platform], uses.pop("profile", "hf"), uses, table).runs
            for change in claim.instead:
                settings = {**uses, **dict(change)}
                profile = settings.pop("profile", "hf")
                assert check(vendor[platform], profile, settings, table).runs, (thing.id, platform, change)


def test_compare_says_does_not_run_where_fit_does():
    # the same FlashAttention-3 on Intel XPU as above; sdpa on the same GPU keeps compare's usual verdicts
    from vramwise.answers.fit import compare

    methods = ("lora", "full")
    c = compare(LLAMA, methods=methods, profiles=("hf",), gpu=INTEL, batch_size=1, seq_len=1024,
                attention="flash_attention_3")
    assert c.verdicts == ("does not run", "does not run") and all(fits is False for *_, fits in c.cells)
    assert all("does not run on Intel XPU" in line for line in c.runs_on)
    assert [cell["verdict"] for cell in c.to_dict()["cells"]] == ["does not run", "does not run"]
    ok = compare(LLAMA, methods=methods, profiles=("hf",), gpu=INTEL, batch_size=1, seq_len=1024, attention="sdpa")
    by_size = compare(LLAMA, methods=methods, profiles=("hf",), gpu=gpu_spec(INTEL).memory_bytes, batch_size=1,
                      seq_len=1024, attention="sdpa")
    assert ok.verdicts == by_size.verdicts and "does not run" not in ok.verdicts and ok.runs_on == (None, None)
