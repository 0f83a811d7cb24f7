"""What llama.cpp itself allocates for a draft model beside a model, as JSON: the reference for
tests/unit/profiles/test_llama_cpp_draft_reference.py.

What: llama-server's speculative decoding loads the draft as a second model with a context of its own
(common/speculative.cpp:2446-2550 at 0c1e5709): common_base_params_to_speculative copies the model's settings
(n_seq_max, kv_unified, flash_attn, n_batch, n_ubatch) and takes the draft's n_gpu_layers and cache types
(result.n_outputs_max = n_parallel); common_speculative_init_result then sets cparams.n_ctx =
llama_n_ctx(ctx_tgt), the model's context as llama.cpp padded it, and n_rs_seq 0. This script does the same through
llama.cpp's C API: for each case it creates the model's context, then the draft's context with those parameters,
and records the draft context's buffers (llama_get_memory_breakdown: the draft's weights and its KV cache; the
compute buffer too, which the profile does not count for a draft), its output buffer and its n_ctx / n_ctx_seq.

How: the files are scripts/llama_cpp_reference.py's (written and quantized the same way, with the same seeds), and
each one's tensor table is checked equal to tests/fixtures/llama_cpp_reference.json's, so the test writes their
headers from that fixture. Everything on the CPU (n_gpu_layers 0), in llama-cpp-python 0.3.36's environment:

    /work/llamacpp-venv/bin/python scripts/llama_cpp_draft_reference.py --llama-src <sdist>/vendor/llama.cpp \\
        > tests/fixtures/llama_cpp_draft_reference.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import llama_cpp  # noqa: E402

import llama_cpp_reference as ref  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "tests" / "fixtures" / "llama_cpp_reference.json"
#: the model and the drafts (the reference fixture's file keys)
MODEL = "llama-gqa-F16"
DRAFTS = ["qwen2-tied-Q4_K_M", "gemma2-swa-Q8_0", "llama-gqa-Q4_0"]
#: the model's settings and the draft's cache types
CASES = [
    dict(n_ctx=0),
    dict(n_ctx=5000, n_parallel=2),
    dict(n_ctx=3000, n_parallel=3, kv_unified=True),
    dict(n_ctx=4096, cache_type_k_draft="q8_0", cache_type_v_draft="q8_0", flash_attn="on"),
    dict(n_ctx=2048, n_parallel=4, cache_type_k_draft="f32", cache_type_v_draft="f16", flash_attn="off"),
]


def _files(work: Path) -> dict:
    """The reference script's files, by key, written and quantized as it writes them."""
    wanted = {MODEL, *DRAFTS}
    paths = {}
    for seed, (arch, spec) in enumerate([*ref.ARCHS.items(), ref.ODD]):
        master = work / f"{spec['name']}-F32.gguf"
        for quant in ref.FILES[spec["name"]]:
            key = f"{spec['name']}-{quant}"
            if key not in wanted:
                continue
            if not master.exists():
                ref.write_f32(arch, spec, master, seed)
            path = work / f"{key}.gguf"
            if quant != "F32":
                ref.quantize(master, path, ref.QUANTS[quant])
            paths[key] = (path, arch, quant, spec)
    return paths


def _context(model, s: dict, n_ctx: int, type_k: str, type_v: str, n_outputs_max: int = 0):
    c = llama_cpp.llama_context_default_params()
    c.n_ctx, c.n_batch, c.n_ubatch, c.n_seq_max = n_ctx, s["n_batch"], s["n_ubatch"], s["n_parallel"]
    c.kv_unified, c.swa_full = s["kv_unified"], False
    c.type_k, c.type_v = ref.CACHE_TYPES[type_k], ref.CACHE_TYPES[type_v]
    c.flash_attn_type = ref.FLASH[s["flash_attn"]]
    c.n_threads = c.n_threads_batch = 2
    c.n_rs_seq = 0
    c.n_outputs_max = n_outputs_max
    return llama_cpp.llama_init_from_model(model, c)


def _load(path: Path):
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    mparams.use_extra_bufts = False
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path.name}:\n{''.join(ref.LOG)}")
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-src", type=Path, required=True, help="the sdist's vendor/llama.cpp (headers for the shim)")
    args = ap.parse_args()
    llama_cpp.llama_log_set(ref._log, None)
    llama_cpp.llama_backend_init()
    recorded = json.loads(FIXTURE.read_text())["files"]
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shim = ref.build_shim(args.llama_src, work)
        files = _files(work)
        for key, (path, arch, quant, spec) in files.items():  # the headers the test writes are these files'
            if ref.describe(path, arch, quant, spec)["tensors"] != recorded[key]["tensors"]:
                raise RuntimeError(f"{key}: the tensor table differs from {FIXTURE.name}'s")
        model = _load(files[MODEL][0])
        for draft_key in DRAFTS:
            draft = _load(files[draft_key][0])
            for case in CASES:
                s = {**ref.DEFAULTS, **{k: v for k, v in case.items() if not k.endswith("_draft")}}
                type_k = case.get("cache_type_k_draft", "f16")
                type_v = case.get("cache_type_v_draft", "f16")
                ctx = _context(model, s, s["n_ctx"], s["cache_type_k"], s["cache_type_v"])
                if not ctx:
                    raise RuntimeError(f"the model's context for {case} was refused:\n{''.join(ref.LOG)}")
                n_ctx_tgt = llama_cpp.llama_n_ctx(ctx)
                ref.LOG.clear()
                dctx = _context(draft, s, n_ctx_tgt, type_k, type_v, n_outputs_max=s["n_parallel"])
                if not dctx:
                    raise RuntimeError(f"the draft's context for {case} was refused:\n{''.join(ref.LOG)}")
                names = ctypes.create_string_buffer(64 * 16)
                out = (ctypes.c_ulonglong * (3 * 16))()
                n = shim.vw_memory_breakdown(dctx, names, 64, out, 16)
                buffers = {}
                for i in range(n):
                    name = names.raw[i * 64:(i + 1) * 64].split(b"\0", 1)[0].decode()
                    buffers[name] = {"model": out[3 * i], "context": out[3 * i + 1], "compute": out[3 * i + 2]}
                cases.append({"model": MODEL, "draft": draft_key, "settings": case, "model_n_ctx": n_ctx_tgt,
                              "draft_n_ctx": llama_cpp.llama_n_ctx(dctx),
                              "draft_n_ctx_seq": llama_cpp.llama_n_ctx_seq(dctx),
                              "draft_buffers": buffers, "draft_output_buffer": shim.vw_output_buffer(dctx)})
                print(f"{draft_key} {case}: draft n_ctx {cases[-1]['draft_n_ctx']}", file=sys.stderr)
                llama_cpp.llama_free(dctx)
                llama_cpp.llama_free(ctx)
            llama_cpp.llama_model_free(draft)
        llama_cpp.llama_model_free(model)
    doc = {
        "llama_cpp_commit": ref.LLAMA_CPP_COMMIT,
        "llama_cpp_python_version": llama_cpp.__version__,
        "source": "scripts/llama_cpp_draft_reference.py: the model's context, then the draft's with the parameters "
                  "common/speculative.cpp gives it (n_ctx = llama_n_ctx(model's context), the model's n_seq_max, "
                  "kv_unified, flash_attn, n_batch, n_ubatch; the draft's cache types; n_outputs_max = n_parallel; "
                  "n_rs_seq 0); the draft context's buffers from llama_get_memory_breakdown, its output buffer's size "
                  "from llama_context::buf_output",
        "files_from": "tests/fixtures/llama_cpp_reference.json (the same files: tensor tables checked equal)",
        "model_params": {"n_gpu_layers": 0, "use_extra_bufts": False},
        "cases": cases,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
