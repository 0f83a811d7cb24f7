"""The llama.cpp profile against published llama.cpp load logs (benchmarks/llama_cpp_logs.yaml).

Each logged run's model is written again as a GGUF header with gguf's own writer: the hparams the log prints
(layers, heads, KV heads, head sizes, sliding window, training context, vocabulary) and a tensor table of the
architecture's shapes, the data region left sparse (the file is truncated to its full length, nothing written), so
a 32B model's header costs a few kilobytes. The profile is evaluated on it at the run's settings and its KV cache
compared with the figure llama.cpp printed, within the line's rounding (half of 0.01 MiB): the total, and K and V
apart. The output buffer (n_vocab x n_seq_max x 4 bytes) is compared the same way. The weights per device are
compared only where the log lets one reconstruct them; every run here says why it does not.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'vramwise[gguf]', in the test extra) writes "
                                          "the GGUF files these tests read")
np = pytest.importorskip("numpy")

import vramwise  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = yaml.safe_load((REPO / "benchmarks" / "llama_cpp_logs.yaml").read_text(encoding="utf-8"))
RUNS = DATA["entries"]
MIB = 1024 * 1024
HALF_CENT = 0.005 + 1e-9  # a figure printed with %.2f MiB is within half of 0.01 MiB of the bytes
T = gguf.GGMLQuantizationType

# The tensors llama.cpp's converter writes per layer, by architecture (gguf-py MODEL_TENSORS), beyond the attention
# and norm tensors every one of these has; the shapes are (rows, row length) in numpy order, from the hparams.
EXTRA_LAYER_TENSORS = {
    "llama": ["ffn"],
    "qwen2": ["ffn", "qkv_bias"],
    "qwen3": ["ffn", "qk_norm"],
    "qwen3moe": ["experts", "qk_norm"],
    "gemma2": ["ffn", "post_norms"],
    "gemma3": ["ffn", "post_norms", "qk_norm"],
}


def layer_tensors(m: dict) -> dict:
    """The tensors of one layer: name -> (numpy shape, ggml type)."""
    E, H, HK, DK, DV = m["n_embd"], m["n_head"], m["n_head_kv"], m["n_embd_head_k"], m["n_embd_head_v"]
    out = {
        "attn_norm.weight": ((E,), T.F32),
        "attn_q.weight": ((H * DK, E), T.F16),
        "attn_k.weight": ((HK * DK, E), T.F16),
        "attn_v.weight": ((HK * DV, E), T.F16),
        "attn_output.weight": ((E, H * DV), T.F16),
        "ffn_norm.weight": ((E,), T.F32),
    }
    groups = {
        "ffn": {"ffn_gate.weight": ((m["n_ff"], E), T.F16), "ffn_up.weight": ((m["n_ff"], E), T.F16),
                "ffn_down.weight": ((E, m["n_ff"]), T.F16)},
        "qkv_bias": {"attn_q.bias": ((H * DK,), T.F32), "attn_k.bias": ((HK * DK,), T.F32),
                     "attn_v.bias": ((HK * DV,), T.F32)},
        "qk_norm": {"attn_q_norm.weight": ((DK,), T.F32), "attn_k_norm.weight": ((DK,), T.F32)},
        "post_norms": {"post_attention_norm.weight": ((E,), T.F32), "post_ffw_norm.weight": ((E,), T.F32)},
        "experts": {"ffn_gate_inp.weight": ((m.get("n_expert", 0), E), T.F32),
                    "ffn_gate_exps.weight": ((m.get("n_expert", 0), m.get("n_ff_exp", 0), E), T.F16),
                    "ffn_up_exps.weight": ((m.get("n_expert", 0), m.get("n_ff_exp", 0), E), T.F16),
                    "ffn_down_exps.weight": ((m.get("n_expert", 0), E, m.get("n_ff_exp", 0)), T.F16)},
    }
    for group in EXTRA_LAYER_TENSORS[m["architecture"]]:
        out.update(groups[group])
    return out


def nbytes(shape: tuple, kind) -> int:
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return int(np.prod(shape)) // block * size


def write_header(path: Path, m: dict) -> None:
    """A GGUF file of the run's model: its metadata and tensor table written, its data region sparse."""
    arch = m["architecture"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(m["name"])
    w.add_block_count(m["n_layer"])
    w.add_embedding_length(m["n_embd"])
    w.add_feed_forward_length(m["n_ff"])
    w.add_head_count(m["n_head"])
    w.add_head_count_kv(m["n_head_kv"])
    w.add_key_length(m["n_embd_head_k"])
    w.add_value_length(m["n_embd_head_v"])
    w.add_context_length(m["n_ctx_train"])
    w.add_layer_norm_rms_eps(1e-6)
    if m.get("n_swa"):
        w.add_sliding_window(m["n_swa"])
    if m.get("n_expert"):
        w.add_expert_count(m["n_expert"])
        w.add_expert_used_count(m["n_expert_used"])
        w.add_expert_feed_forward_length(m["n_ff_exp"])
    w.add_array("tokenizer.ggml.tokens", [""] * m["n_vocab"])
    tensors = {"token_embd.weight": ((m["n_vocab"], m["n_embd"]), T.F16)}
    for i in range(m["n_layer"]):
        tensors.update({f"blk.{i}.{name}": spec for name, spec in layer_tensors(m).items()})
    tensors["output_norm.weight"] = ((m["n_embd"],), T.F32)
    if not m["tied"]:
        tensors["output.weight"] = ((m["n_vocab"], m["n_embd"]), T.F16)
    data = 0
    for name, (shape, kind) in tensors.items():
        w.add_tensor_info(name, shape, np.float32, nbytes(shape, kind), raw_dtype=kind)
        data += gguf.GGUFWriter.ggml_pad(nbytes(shape, kind), w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    start = gguf.GGUFWriter.ggml_pad(path.stat().st_size, w.data_alignment)
    with open(path, "r+b") as f:
        f.truncate(start + data)  # sparse: the weights are never written, vramwise reads only the header


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama_cpp_logs")

    @functools.lru_cache(maxsize=None)
    def written(name: str) -> Path:
        (m,) = {r["model"]["name"]: r["model"] for r in RUNS if r["model"]["name"] == name}.values()
        path = folder / f"{len(list(folder.iterdir()))}.gguf"
        write_header(path, m)
        return path

    return written


def profile_settings(run: dict, **override) -> dict:
    s = run["settings"]
    ngl = s.get("n_gpu_layers")
    out = {k: s[k] for k in ("n_ctx", "n_batch", "n_ubatch", "flash_attn", "cache_type_k", "cache_type_v",
                             "n_parallel") if k in s}
    out["kv_unified"] = s.get("kv_unified", False)
    out["n_gpu_layers"] = None if ngl is None or ngl < 0 else ngl  # -1: every layer
    out.update(override)
    return out


def estimate(header, run: dict, **override):
    return vramwise.estimate(str(header(run["model"]["name"])), profile="llama.cpp", **profile_settings(run, **override))


def ids(run: dict) -> str:
    return run["id"]


def test_every_run_names_its_source_build_settings_and_lines():
    assert len(RUNS) >= 3
    for run in RUNS:
        assert run["source"].startswith("https://"), run["id"]
        assert run["llama_cpp_build"] and run["quoted"].strip(), run["id"]
        assert {"n_ctx", "n_ubatch", "flash_attn", "cache_type_k", "cache_type_v"} <= set(run["settings"]), run["id"]
        assert run["model"]["architecture"] in EXTRA_LAYER_TENSORS, run["id"]
        # every observed figure is a line of the quoted log
        for key in ("kv_mib", "k_mib", "v_mib", "output_buffer_mib"):
            assert f"{run['observed'][key]:.2f}" in run["quoted"], (run["id"], key)
        quoted = " ".join(run["quoted"].split())
        for device, mib in run["observed"]["compute_mib"].items():
            assert f"{device} compute buffer size = {mib:.2f} MiB" in quoted, (run["id"], device)
        # the per-device KV buffers add up to the total the log prints
        assert sum(run["observed"]["kv_buffers_mib"].values()) == pytest.approx(run["observed"]["kv_mib"], abs=0.011)


def test_the_header_written_again_has_the_runs_hparams(header):
    # read back with vramwise's header reader (the tokenizer's array by its length): the log's hparams
    from vramwise.inputs.gguf import read_gguf

    for run in RUNS:
        m = run["model"]
        g = read_gguf(header(m["name"]))
        arch = m["architecture"]
        assert g.architecture == arch
        assert g.metadata[f"{arch}.block_count"] == m["n_layer"]
        assert g.metadata[f"{arch}.attention.head_count_kv"] == m["n_head_kv"]
        assert g.metadata[f"{arch}.attention.key_length"] == m["n_embd_head_k"]
        assert g.metadata.get(f"{arch}.attention.sliding_window", 0) == m["n_swa"]
        assert g.array_lengths["tokenizer.ggml.tokens"] == m["n_vocab"]
        assert (g.tensor("output.weight") is None) == m["tied"]


@pytest.mark.parametrize("run", [r for r in RUNS if "differs" not in r], ids=ids)
def test_kv_cache_as_the_log_prints_it(header, run):
    e = estimate(header, run)
    f, obs = e.figures, run["observed"]
    if "kv_cells" in obs:
        assert f["kv_cells"] == obs["kv_cells"]
    assert abs(f["kv_cache"] / MIB - obs["kv_mib"]) <= HALF_CENT
    # K and V apart: the cache with both tensors of K's type is twice K (and likewise V), the rows being n_embd_k_gqa
    # and n_embd_v_gqa wide (equal in every model here)
    s = run["settings"]
    k = estimate(header, run, cache_type_v=s["cache_type_k"]).figures["kv_cache"] / 2
    v = estimate(header, run, cache_type_k=s["cache_type_v"], flash_attn="on").figures["kv_cache"] / 2
    assert abs(k / MIB - obs["k_mib"]) <= HALF_CENT
    assert abs(v / MIB - obs["v_mib"]) <= HALF_CENT
    # every layer is offloaded in these runs: the whole cache is the GPUs'
    assert f["gpu_kv_cache"] == f["kv_cache"] and f["host_kv_cache"] == 0


@pytest.mark.parametrize("run", RUNS, ids=ids)
def test_output_buffer_as_the_log_prints_it(header, run):
    f = estimate(header, run).figures
    assert abs(f["output_buffer"] / MIB - run["observed"]["output_buffer_mib"]) <= HALF_CENT


@pytest.mark.parametrize("run", RUNS, ids=ids)
def test_weights_per_device_where_the_log_allows(header, run):
    if "skip" in run["weights"]:
        pytest.skip(run["weights"]["skip"])
    raise AssertionError(f"{run['id']}: a weights comparison is recorded but not implemented")
