"""The GPU calibration script (benchmarks/gpu_calibration.py) run with ``--dry-run``: the whole logic on the CPU
with tiny shapes (the transformers stack only, in this process), its result's format, and the corpus runs its
converter makes, checked as tests/unit/project/test_gpu_runs.py checks the corpus. The search for the longest
sequence and the converter's choices are checked on figures written here by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramwise.errors import StackUnsupportedError
from vramwise.profiles.settings import SETTING_NAMES, SETTINGS
from vramwise.rules.datafiles import load_data_file, read_data_text

from helpers import script_module

REPO = Path(__file__).resolve().parents[3]
PARSE = {s.name: s.parse for s in SETTINGS}
URL = "https://example.org/vramwise/gpu_calibration_result.json"


def _script():
    return script_module("benchmarks/gpu_calibration.py", "vramwise_bench_gpu_calibration")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    gc = _script()
    lines: list[str] = []
    path = gc.calibrate(tmp_path_factory.mktemp("gpucal"), 120.0, True, echo=lines.append, stacks=("hf",))
    return gc, path, json.loads(path.read_text(encoding="utf-8")), lines


def test_dry_run_result_has_the_format(dry_run):
    gc, path, result, lines = dry_run
    assert path.name.startswith("gpu_calibration_dry-run_") and path.suffix == ".json"
    assert result["format"] == "vramwise-gpu-calibration-1"
    assert result["dry_run"] is True and result["complete"] is True
    assert result["environment"]["torch"] and result["environment"]["gpu"]["name"] == "dry-run (cpu)"
    for f in result["figures"]:
        assert {"phase", "name", "status", "value", "unit", "line"} <= set(f), f
        assert f["phase"] in gc.PHASES and f["status"] in gc.STATUSES, f
        assert (f["value"] is None) == (f["status"] != "measured"), f
    # every figure printed its line, in order, between the file's name and the closing line
    assert lines[1:-1] == [f["line"] for f in result["figures"]]
    assert lines[-1].startswith("done in ")


def test_dry_run_marks_what_needs_cuda(dry_run):
    _, _, result, _ = dry_run
    by_phase: dict[str, list] = {}
    for f in result["figures"]:
        by_phase.setdefault(f["phase"], []).append(f)
    assert set(by_phase) == {"context", "allocator", "workspaces", "training", "boundary"}
    for phase in ("context", "allocator", "workspaces"):
        assert by_phase[phase] and all(f["status"] == "dry-run" and "dry-run" in f["reason"] for f in by_phase[phase])
    # cuBLAS' workspaces: the forward thread's handle and autograd's device thread's (CublasHandlePool.cpp)
    assert {"cublas_workspace_bf16_matmul", "cublas_workspace_backward_thread"} <= {f["name"] for f in by_phase["workspaces"]}
    # the three patterns under the default allocator settings (one process of the two on a GPU)
    assert [f["name"] for f in by_phase["allocator"]] == ["many_small[default]", "few_large[default]",
                                                         "training_like[default]"]
    # each pattern also went through vramwise's model of the caching allocator (vramwise.profiles.caching_allocator):
    # blocks are 512-byte multiples, so the modelled allocated peak is at least the requested one, and the
    # segments hold every live block
    for f in by_phase["allocator"]:
        b = f["bytes"]
        assert b["modelled_max_reserved"] >= b["modelled_max_allocated"] >= b["requested_peak"] > 0, f


def test_dry_run_training_rows_pair_measured_and_estimated(dry_run):
    _, _, result, _ = dry_run
    rows = [f for f in result["figures"] if f["phase"] == "training" and f["status"] == "measured"]
    # hf: LoRA and full on the cut Llama 3.1 8B, LoRA on TinyLlama, at three shapes each (QLoRA needs CUDA)
    assert len(rows) == 9
    for f in rows:
        assert f["stack"] == "hf" and f["model"]["hub_id"] and f["model"]["overrides"]
        assert set(f["settings"]) == {"method", "batch_size", "seq_len", "lora_rank", "gradient_checkpointing",
                                      "optimizer", "attention"}
        assert f["measured"]["torch_max_allocated"] > 0
        assert f["measured"]["torch_max_reserved"] is None  # no caching allocator on the CPU
        assert set(f["estimated"]) == {"tensor_peak", "reserved", "device"}
        assert f["value"] == round(f["measured"]["torch_max_allocated"] / 2**20, 1)
    assert {(f["settings"]["batch_size"], f["settings"]["seq_len"]) for f in rows} == {(1, 16), (2, 32), (1, 64)}
    skipped = {f["name"]: f["reason"] for f in result["figures"] if f["status"] == "skipped"}
    assert "not in --stacks" in skipped["llama-3.1-8b-tiny.torchtune.lora"]
    assert "need CUDA" in skipped["hf.qlora"] or "does not import" in skipped["hf.qlora"]


def test_dry_run_boundary_brackets_its_limit(dry_run):
    _, _, result, _ = dry_run
    probes = [f for f in result["figures"] if f["phase"] == "boundary" and ".probe[" in f["name"]]
    (b,) = [f for f in result["figures"] if f["phase"] == "boundary" and f["name"].endswith(".largest_seq_len")]
    m = b["measured"]
    # each probe was recorded as it ended, before the answer, fitted or out of memory
    assert [[int(f["name"].rsplit("[s", 1)[1].rstrip("]")), f["status"] == "measured"] for f in probes] == m["probes"]
    assert b["unit"] == "tokens" and b["value"] == m["largest_seq_len"] >= 32
    assert m["first_oom_seq_len"] is None or m["first_oom_seq_len"] - m["largest_seq_len"] <= m["resolution"]
    # every probe that fitted is at most the answer, every one that did not above it
    assert all((seq <= b["value"]) == ok for seq, ok in m["probes"]), m["probes"]
    assert b["estimated"]["largest_seq_len"] is None or b["estimated"]["largest_seq_len"] > 0


def test_dry_run_converts_to_runs_the_corpus_accepts(dry_run, tmp_path):
    gc, path, _, _ = dry_run
    out = gc.write_corpus(path, URL, tmp_path / "measured_dry-run.yaml", allow_dry_run=True)
    loaded = load_data_file(read_data_text(out, out.name), out.name, "gpu-runs-1.schema.json").data
    runs = loaded["runs"]
    # 9 training rows give their torch_max_allocated (no reserved or NVML reading on the CPU); the boundary one run
    assert [r["statistic"] for r in runs].count("torch_max_allocated") == 9
    assert [r["statistic"] for r in runs].count("largest_seq_len") == 1
    ids = [r["id"] for r in runs]
    assert len(set(ids)) == len(ids)
    corpus_ids = set()
    for existing in sorted((REPO / "benchmarks" / "gpu_runs").glob("*.yaml")):
        data = load_data_file(read_data_text(existing, existing.name), existing.name, "gpu-runs-1.schema.json").data
        corpus_ids |= {r["id"] for r in data["runs"]}
    assert not corpus_ids & set(ids)
    for r in runs:  # the corpus test's checks: a hub id, an https source quoting a line, vramwise's settings
        assert r["source"]["url"] == URL and r["source"]["quote"].strip()
        assert r["model"].count("/") == 1
        assert "Dry run" in r["notes"]
        for key, value in r["settings"]["stated"].items():
            assert key in SETTING_NAMES
            PARSE[key](key, value)


def _result(figures, *, dry_run=False):
    return {"format": "vramwise-gpu-calibration-1", "dry_run": dry_run, "started": "2026-12-06T08:00:00+00:00",
            "environment": {"torch": "2.9.0", "gpu": {"name": "NVIDIA H100 80GB HBM3", "total_bytes": 85 * 2**30}},
            "figures": figures}


def _row(overrides):
    settings = {"method": "lora", "batch_size": 1, "seq_len": 512, "lora_rank": 16, "gradient_checkpointing": "none",
                "optimizer": "adamw_torch", "attention": "sdpa"}
    return {"phase": "training", "name": "x", "status": "measured", "value": 3072.0, "unit": "MiB",
            "line": "training: x",
            "model": {"label": "m", "hub_id": "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "overrides": overrides},
            "stack": "hf", "settings": settings,
            "measured": {"torch_max_allocated": 3 * 2**30, "torch_max_reserved": 3 * 2**30 + 2**29,
                         "nvml_process": None}}


def test_converter_keeps_unchanged_hub_models_in_mib():
    gc = _script()
    corpus = gc.to_corpus(_result([_row({}), _row({"num_hidden_layers": 4})]), URL)
    runs = corpus["runs"]
    # the cut model's row is left out; the other gives its two readings (NVML none): 3 GiB = 3 * 1024 MiB = 3072.0,
    # 3.5 GiB = 3584.0 MiB
    assert [(r["statistic"], r["value"], r["unit"]) for r in runs] == [("torch_max_allocated", 3072.0, "MiB"),
                                                                      ("torch_max_reserved", 3584.0, "MiB")]
    # 85 GiB of device memory, as the catalog would write it
    assert runs[0]["gpu"] == {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 85.0, "count": 1}
    assert runs[0]["source"] == {"url": URL, "date": "2026-12-06", "quote": "training: x"}


def test_converter_writes_an_out_of_memory_step_as_oom():
    gc = _script()
    row = {**_row({}), "status": "oom", "value": None, "reason": "OutOfMemoryError: CUDA out of memory"}
    del row["measured"]
    (run,) = gc.to_corpus(_result([row]), URL)["runs"]
    assert (run["statistic"], run["value"], run["unit"]) == ("oom", True, "bool")
    assert run["settings"]["stated"]["seq_len"] == 512 and run["id"].endswith("-oom")


def test_converter_refuses_a_dry_run_and_a_plain_address():
    gc = _script()
    with pytest.raises(ValueError, match="dry run"):
        gc.to_corpus(_result([_row({})], dry_run=True), URL)
    with pytest.raises(ValueError, match="https"):
        gc.to_corpus(_result([_row({})]), "http://example.org/x.json")
    with pytest.raises(ValueError, match="no measured figure"):
        gc.to_corpus(_result([_row({"num_hidden_layers": 4})]), URL)


def test_boundary_search_doubles_then_bisects():
    gc = _script()
    # fits up to 5,000 tokens: doubling from 1,024 fits 1,024, 2,048, 4,096 and not 8,192; bisection to 256:
    # (4096 + 8192) / 2 = 6144 no, (4096 + 6144) / 2 = 5120 no, (4096 + 5120) / 2 = 4608 yes,
    # (4608 + 5120) / 2 = 4864 yes; 5120 - 4864 = 256 stops it
    lo, hi, cut, probes = gc.boundary_search(lambda s: s <= 5000, 1024, 256, 2**20, float("inf"))
    assert (lo, hi, cut) == (4864, 5120, False)
    assert [s for s, _ in probes] == [1024, 2048, 4096, 8192, 6144, 5120, 4608, 4864]


def test_boundary_search_stops_at_its_deadline_and_its_cap():
    gc = _script()
    assert gc.boundary_search(lambda s: True, 1024, 256, 2**20, 0.0) == (0, None, True, [])
    # everything fits: doubling stops past the cap (1,024 -> 2,048 -> 4,096; 8,192 > 4,096), with no upper bound
    assert gc.boundary_search(lambda s: True, 1024, 256, 4096, float("inf"))[:3] == (4096, None, False)


def test_an_out_of_memory_error_is_told_through_measure_s_wording():
    gc = _script()

    class OutOfMemoryError(RuntimeError):
        pass

    try:
        try:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        except OutOfMemoryError as e:
            raise StackUnsupportedError("transformers cannot run a training step of this config") from e
    except StackUnsupportedError as wrapped:
        assert gc._is_oom(wrapped)
    assert not gc._is_oom(StackUnsupportedError("transformers cannot build a 'llama' config"))


def test_the_record_is_written_after_each_figure(tmp_path):
    gc = _script()
    rec = gc.Recorder(tmp_path / "r.json", dry_run=True, budget_s=1.0, echo=lambda line: None)
    rec.add(gc.fig("context", "cuda_context", 512.0))
    on_disk = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert on_disk["complete"] is False and on_disk["figures"][0]["line"] == "context: cuda_context = 512.0 MiB"
    rec.finish()
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["complete"] is True


def test_a_phase_process_that_fails_is_recorded_and_the_run_goes_on(tmp_path):
    """The GPU phases run in child processes; here (no CUDA) the context phase's child fails at torch.cuda.init():
    its failure is a figure of status error with the end of its standard error, and the parent carries on."""
    import time

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device here: the context phase's child succeeds")
    gc = _script()
    rec = gc.Recorder(tmp_path / "r.json", dry_run=False, budget_s=60.0, echo=lambda line: None)
    gc.run_child("context", rec, time.monotonic() + 60)
    last = rec.data["figures"][-1]
    assert (last["phase"], last["name"], last["status"]) == ("context", "context.process", "error")
    assert last["reason"].startswith("exited 1: ") and "Error" in last["reason"]
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["figures"][-1] == last
