"""Where ggml's allocator places each tensor of llama.cpp's compute buffer, for one of the small GGUF files of
scripts/llama_cpp_reference.py under one set of context settings: the evidence behind docs/gguf.md's account of
the CPU compute buffer.

What: a table of every tensor the compute buffer holds while llama.cpp decodes one ubatch of n_ubatch tokens at a
full cache (n_kv = the cache's cells, every token an output: the shapes of the graph llama_context::graph_reserve
sizes the buffer with), each with its offset range in the buffer, in hidden states (n_embd x n_ubatch x 4 bytes),
its op and its name; then the buffer's extent beside the compute buffer llama_get_memory_breakdown reports.

How: the file is written and quantized as scripts/llama_cpp_reference.py does (its ARCHS, ODD and helpers), loaded
on the CPU, and a context created with an eval callback (llama_context_params.cb_eval, compiled here with the
memory-breakdown shim) that records each graph node's data pointer, bytes and sources. The cache is filled with
ubatches of plain tokens up to n_ctx - n_ubatch cells, then one ubatch is decoded with the callback on. The
allocator reuses the offsets it chose when the context reserved the graph (same shapes: ggml_gallocr_alloc_graph
does not allocate again), so the extent equals the reserved buffer; the script says so or stops.

    /work/llamacpp-venv/bin/python scripts/llama_cpp_placements.py --llama-src <sdist>/vendor/llama.cpp \\
        llama-gqa F16 n_ctx=4096 flash_attn=on

One sequence (n_parallel 1). Settings: n_ctx, n_batch, n_ubatch, cache_type_k, cache_type_v, flash_attn.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
from pathlib import Path

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_cpp_reference as ref  # noqa: E402

CALLBACK = r"""
#include <cstdio>
static FILE * vw_out = nullptr;
extern "C" void vw_trace_open(const char * path) { vw_out = std::fopen(path, "w"); }
extern "C" void vw_trace_close() { if (vw_out) std::fclose(vw_out); vw_out = nullptr; }
static void vw_row(const char * kind, const ggml_tensor * t) {
    std::fprintf(vw_out, "%s\t%s\t%s\t%llu\t%zu\t%d\t%d\n", kind, t->name[0] ? t->name : "-", ggml_op_desc(t),
                 (unsigned long long) (uintptr_t) t->data, ggml_nbytes(t), t->view_src != nullptr, t->flags);
}
// ask: observe every node while the trace is open; the rows are written before the node runs
extern "C" bool vw_trace(ggml_tensor * t, bool ask, void *) {
    if (!ask) return true;
    if (!vw_out) return false;
    vw_row("node", t);
    for (int j = 0; j < GGML_MAX_SRC; j++) if (t->src[j]) vw_row("src", t->src[j]);
    return false;
}
"""


def build(llama_src: Path, work: Path) -> ctypes.CDLL:
    lib = ref.build_shim(llama_src, work, ref.SHIM + CALLBACK, "trace")
    lib.vw_trace_open.argtypes = [ctypes.c_char_p]
    return lib


def compute_bytes(lib, ctx) -> int:
    names = ctypes.create_string_buffer(64 * 16)
    out = (ctypes.c_ulonglong * (3 * 16))()
    n = lib.vw_memory_breakdown(ctx, names, 64, out, 16)
    return sum(out[3 * i + 2] for i in range(n))


def decode(ctx, pos: int, n: int, all_outputs: bool) -> None:
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    batch.n_tokens = n
    for i in range(n):
        batch.token[i] = len(ref.VOCAB_SPECIAL) + i % 64
        batch.pos[i] = pos + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1 if all_outputs or i == n - 1 else 0
    rc = llama_cpp.llama_decode(ctx, batch)
    llama_cpp.llama_batch_free(batch)
    if rc != 0:
        raise RuntimeError(f"llama_decode returned {rc}")


def placements(trace: Path) -> dict[str, tuple[int, int, str]]:
    """The compute buffer's tensors (graph nodes that are not views, and the graph's inputs): name -> (address,
    bytes, op); tensors that share an address in place keep their own names."""
    held = {}
    for line in trace.read_text().splitlines():
        kind, name, op, data, nbytes, is_view, flags = line.split("\t")
        if is_view == "1" or int(data) == 0:
            continue
        if kind == "node" or int(flags) & 1:  # GGML_TENSOR_FLAG_INPUT
            held[f"{name}@{data}"] = (int(data), int(nbytes), "input" if kind == "src" else op)
    return held


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-src", type=Path, required=True, help="the sdist's vendor/llama.cpp (headers for the shim)")
    ap.add_argument("model", help="a model of scripts/llama_cpp_reference.py: " +
                    ", ".join(s["name"] for s in [*ref.ARCHS.values(), ref.ODD[1]]))
    ap.add_argument("quant", help="F32, F16, Q8_0, Q4_0 or Q4_K_M")
    ap.add_argument("settings", nargs="*",
                    help="name=value: n_ctx, n_batch, n_ubatch, cache_type_k, cache_type_v, flash_attn")
    args = ap.parse_args()
    specs = {s["name"]: (arch, s) for arch, s in [*ref.ARCHS.items(), ref.ODD]}
    arch, spec = specs[args.model]
    s = {**ref.DEFAULTS, "n_parallel": 1, **{k: v for k, v in (a.split("=", 1) for a in args.settings)}}
    n_ctx, n_ubatch = int(s["n_ctx"]), int(s["n_ubatch"])
    llama_cpp.llama_log_set(ref._log, None)
    llama_cpp.llama_backend_init()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lib = build(args.llama_src, work)
        _, model = ref.load_on_cpu(arch, spec, args.model, args.quant, work)
        c = llama_cpp.llama_context_default_params()
        c.n_ctx, c.n_batch, c.n_ubatch, c.n_seq_max = n_ctx, int(s["n_batch"]), n_ubatch, 1
        c.kv_unified, c.swa_full = False, False  # as scripts/llama_cpp_reference.py (llama.cpp's tools)
        c.type_k, c.type_v = ref.CACHE_TYPES[s["cache_type_k"]], ref.CACHE_TYPES[s["cache_type_v"]]
        c.flash_attn_type = ref.FLASH[s["flash_attn"]]
        c.n_threads = c.n_threads_batch = 2
        c.cb_eval = ctypes.cast(lib.vw_trace, type(c.cb_eval))
        ctx = llama_cpp.llama_init_from_model(model, c)
        if not ctx:
            raise RuntimeError("".join(ref.LOG).strip().splitlines()[-1])
        reserved = compute_bytes(lib, ctx)
        cells = llama_cpp.llama_n_ctx(ctx)
        pos = 0
        while pos < cells - n_ubatch:
            decode(ctx, pos, n_ubatch, False)
            pos += n_ubatch
        trace = work / "trace.tsv"
        lib.vw_trace_open(str(trace).encode())
        decode(ctx, pos, n_ubatch, True)
        lib.vw_trace_close()
        held = placements(trace)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
    hidden = spec["meta"]["embedding_length"] * n_ubatch * 4
    base = min(a for a, _, _ in held.values())
    extent = max(a + n for a, n, _ in held.values()) - base
    print(f"{args.model}-{args.quant} {s}: n_ctx {cells}, hidden state {hidden} bytes")
    print("from (hidden states)  to  bytes  op  tensor")
    for key, (addr, nbytes, op) in sorted(held.items(), key=lambda kv: (kv[1][0], kv[0])):
        print(f"{(addr - base) / hidden:9.3f} {(addr - base + nbytes) / hidden:9.3f} {nbytes:11d}  {op}  "
              f"{key.split('@')[0]}")
    print(f"extent {extent} bytes; llama_get_memory_breakdown compute {reserved} bytes")
    if extent != reserved:
        print("the decoded graph's extent is not the reserved buffer: the placements above are not the reserve's",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
