"""The graphs llama.cpp reserves for its compute buffer, tensor by tensor, against the llama.cpp profile's graph
templates (formulas/llama.cpp/compute.yaml ``graph``): the check behind docs/gguf.md#compute-buffer.

What: for one of the small GGUF files of scripts/llama_cpp_reference.py under one set of context settings, the
prompt-processing and generation graphs llama.cpp reserves (llama_graph_reserve, src/llama-ext.h, with the shapes
sched_reserve uses: n_tokens = min(n_ctx, n_ubatch), n_seqs = n_parallel, every token an output; then one token a
sequence), every leaf and node with its op, type, shape, bytes, sources, the tensor it views and its flags; and
the CPU compute buffer llama_get_memory_breakdown reports. Then, in the project's environment, each dumped graph
placed by vramwise.profiles.ggml_alloc (its extent against llama.cpp's buffer: the allocator alone), and the
profile's template graph for the same file and settings placed the same way: the tensors either places, in order,
with their bytes and offsets, compared one by one.

How: two steps, the first in llama-cpp-python's environment (scripts/llama_cpp_reference.py says how it is built),
the second in the project's:

    /work/llamacpp-venv/bin/python scripts/llama_cpp_graphs.py dump --llama-src <sdist>/vendor/llama.cpp \\
        OUT_DIR gemma2-swa F16 cache_type_k=q8_0 cache_type_v=q8_0 flash_attn=on
    python scripts/llama_cpp_graphs.py compare OUT_DIR

The dump writes OUT_DIR/model.gguf and OUT_DIR/graphs.json. Settings: n_ctx, n_parallel, kv_unified, n_batch,
n_ubatch, cache_type_k, cache_type_v, flash_attn.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

DUMP = r"""
#include "llama-ext.h"
#include "ggml.h"
#include "../ggml/src/ggml-impl.h"
#include <cstdio>
static void vw_row(FILE * f, const char * kind, const ggml_tensor * t) {
    std::fprintf(f, "%s\t%p\t%s\t%s\t%s\t%lld\t%lld\t%lld\t%lld\t%zu\t%p\t%d\t%d", kind, (const void *) t,
                 t->name[0] ? t->name : "-", ggml_op_name(t->op), ggml_type_name(t->type), (long long) t->ne[0],
                 (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3], ggml_nbytes(t),
                 (const void *) t->view_src, t->flags, (t->data != nullptr || t->buffer != nullptr) ? 1 : 0);
    for (int j = 0; j < GGML_MAX_SRC; j++) std::fprintf(f, "\t%p", (const void *) t->src[j]);
    std::fprintf(f, "\t%zu\t%zu\t%zu\t%zu\n", t->nb[0], t->nb[1], t->nb[2], t->nb[3]);
}
extern "C" void vw_dump_graph(llama_context * ctx, unsigned n_tokens, unsigned n_seqs, unsigned n_outputs,
                              const char * path) {
    ggml_cgraph * gf = llama_graph_reserve(ctx, n_tokens, n_seqs, n_outputs);
    FILE * f = std::fopen(path, "w");
    for (int i = 0; i < gf->n_leafs; i++) vw_row(f, "leaf", gf->leafs[i]);
    for (int i = 0; i < gf->n_nodes; i++) vw_row(f, "node", gf->nodes[i]);
    std::fclose(f);
}
"""

#: Files beside the reference fixture's, dumped the same way: a llama file with experts (convert_hf_to_gguf.py writes
#: Mixtral as llama; the profile reads it as the mixtral family), checked by test_llama_cpp_compute_graph.py
EXTRA = [("llama", dict(
    name="llama-moe", vocab=8192, tied=False,
    meta={"block_count": 2, "context_length": 4096, "embedding_length": 256, "feed_forward_length": 384,
          "attention.head_count": 4, "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-5,
          "rope.freq_base": 10000.0, "expert_count": 4, "expert_used_count": 2},
    layer={"attn_norm.weight": [256], "attn_q.weight": [256, 256], "attn_k.weight": [256, 128],
           "attn_v.weight": [256, 128], "attn_output.weight": [256, 256], "ffn_norm.weight": [256],
           "ffn_gate_inp.weight": [256, 4], "ffn_gate_exps.weight": [256, 384, 4], "ffn_up_exps.weight": [256, 384, 4],
           "ffn_down_exps.weight": [384, 256, 4]}))]

SETTINGS = dict(n_ctx=4096, n_parallel=1, kv_unified=False, cache_type_k="f16", cache_type_v="f16", flash_attn="auto",
                n_batch=2048, n_ubatch=512)


def _rows(path: Path) -> list[dict]:
    """The dumped tensors, leafs then nodes, their sources and views as row numbers."""
    lines = [line.rstrip("\n").split("\t") for line in path.read_text().splitlines()]
    index = {line[1]: k for k, line in enumerate(lines)}
    rows = []
    for line in lines:
        kind, _, name, op, typ = line[:5]
        rows.append(dict(kind=kind, name=name, op=op, type=typ, ne=[int(x) for x in line[5:9]], nbytes=int(line[9]),
                         view_of=index.get(line[10]), flags=int(line[11]), external=line[12] == "1",
                         srcs=[index[s] for s in line[13:23] if s != "(nil)"], nb=[int(x) for x in line[23:27]]))
    return rows


def dump(args) -> int:
    import ctypes

    import llama_cpp

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import llama_cpp_reference as ref

    specs = {s["name"]: (arch, s) for arch, s in [*ref.ARCHS.items(), ref.ODD, *EXTRA]}
    arch, spec = specs[args.model]
    s = {**SETTINGS, **{k: v for k, v in (a.split("=", 1) for a in args.settings)}}
    for k in ("n_ctx", "n_batch", "n_ubatch", "n_parallel"):
        s[k] = int(s[k])
    s["kv_unified"] = str(s["kv_unified"]).lower() in ("true", "1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    llama_cpp.llama_log_set(ref._log, None)
    llama_cpp.llama_backend_init()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lib = ref.build_shim(args.llama_src, work, ref.SHIM + DUMP, "graphs")
        lib.vw_dump_graph.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_char_p]
        path, model = ref.load_on_cpu(arch, spec, args.model, args.quant, work)
        c = llama_cpp.llama_context_default_params()
        c.n_ctx, c.n_batch, c.n_ubatch, c.n_seq_max = s["n_ctx"], s["n_batch"], s["n_ubatch"], s["n_parallel"]
        c.kv_unified, c.swa_full = s["kv_unified"], False  # as scripts/llama_cpp_reference.py
        c.type_k, c.type_v = ref.CACHE_TYPES[s["cache_type_k"]], ref.CACHE_TYPES[s["cache_type_v"]]
        c.flash_attn_type = ref.FLASH[s["flash_attn"]]
        c.n_threads = c.n_threads_batch = 2
        ctx = llama_cpp.llama_init_from_model(model, c)
        if not ctx:
            raise RuntimeError("".join(ref.LOG).strip().splitlines()[-1])
        names = ctypes.create_string_buffer(64 * 16)
        mb = (ctypes.c_ulonglong * (3 * 16))()
        n = lib.vw_memory_breakdown(ctx, names, 64, mb, 16)
        compute = sum(mb[3 * i + 2] for i in range(n))
        n_ctx = llama_cpp.llama_n_ctx(ctx)
        n_tokens = min(n_ctx, s["n_ubatch"])
        graphs = {}
        # src/llama-context.cpp:615-727 sched_reserve: the prompt-processing graph, then one token a sequence
        for which, shape in (("pp", (n_tokens, s["n_parallel"], min(n_tokens, s["n_batch"]))),
                             ("tg", (s["n_parallel"],) * 3)):
            tsv = work / f"{which}.tsv"
            lib.vw_dump_graph(ctx, *shape, str(tsv).encode())
            graphs[which] = _rows(tsv)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
        (out / "model.gguf").write_bytes(path.read_bytes())
    (out / "graphs.json").write_text(json.dumps({"model": args.model, "quant": args.quant, "settings": s,
                                                 "n_ctx": n_ctx, "compute": compute, "graphs": graphs}))
    print(f"{args.model}-{args.quant} {s}: llama.cpp's CPU compute buffer {compute} bytes; graphs in {out}")
    return 0


def compare(args) -> int:
    import vramwise
    from vramwise.profiles import graphs as templates
    from vramwise.profiles.ggml_alloc import INPLACE_OPS, Tensor, graph_offsets

    out = Path(args.out)
    recorded = json.loads((out / "graphs.json").read_text())
    settings = dict(recorded["settings"])
    dumped = {}
    for which, rows in recorded["graphs"].items():
        dumped[which] = tuple(
            Tensor(r["nbytes"], r["kind"] == "node", tuple(r["srcs"]), r["view_of"], r["op"] in INPLACE_OPS,
                   (r["type"], tuple(r["ne"]), tuple(r["nb"])), bool(r["flags"] & 1), bool(r["flags"] & 2),
                   r["external"])
            for r in rows)
    built = []
    build = templates._build

    def keep(*a):
        built.append(build(*a))
        return built[-1]

    templates._build = keep
    try:
        e = vramwise.estimate(str(out / "model.gguf"), profile="llama.cpp", n_gpu_layers=0, **settings)
    finally:
        templates._build = build
    entry = next(f for f in e.trace if f.id == "cb_graph_bytes")
    if not built:
        print(f"no graph template serves {recorded['model']} (cb_graph_bytes {entry.value})")
        return 1
    ok = True
    for (which, graph), (rows, _, _) in zip(dumped.items(), built):
        mine = [(t.nbytes, o) for t, o in zip(rows, graph_offsets(rows)) if o is not None]
        theirs = [(t.nbytes, o) for t, o in zip(graph, graph_offsets(graph)) if o is not None]
        same = mine == theirs
        ok &= same
        print(f"{which}: llama.cpp's graph {len(graph)} tensors, {len(theirs)} placed; the template's {len(rows)}, "
              f"{len(mine)} placed: {'the same bytes at the same offsets' if same else 'DIFFERENT'}")
        if not same:
            k = next((k for k, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            print(f"  first difference at placed tensor {k}: template {mine[k:k + 1]}, llama.cpp {theirs[k:k + 1]}")
    extent = max(max(o + t.nbytes for t, o in zip(g, graph_offsets(g)) if o is not None) for g in dumped.values())
    print(f"llama.cpp's buffer {recorded['compute']}; its graphs placed here {extent}; the profile's "
          f"host_compute_buffer {e.figures['host_compute_buffer']}")
    ok &= extent == recorded["compute"] == e.figures["host_compute_buffer"]
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    d = sub.add_parser("dump", help="in llama-cpp-python's environment: the reserved graphs and the buffer")
    d.add_argument("--llama-src", type=Path, required=True, help="the sdist's vendor/llama.cpp (headers for the shim)")
    d.add_argument("out", help="the folder to write model.gguf and graphs.json to")
    d.add_argument("model", help="a model of scripts/llama_cpp_reference.py (llama-gqa, qwen2-tied, gemma2-swa, ...) "
                                 "or of EXTRA (llama-moe)")
    d.add_argument("quant", help="F32, F16, Q8_0, Q4_0 or Q4_K_M")
    d.add_argument("settings", nargs="*", help="name=value: " + ", ".join(SETTINGS))
    c = sub.add_parser("compare", help="in the project's environment: the dumped graphs against the templates")
    c.add_argument("out", help="the folder dump wrote")
    args = ap.parse_args()
    return dump(args) if args.step == "dump" else compare(args)


if __name__ == "__main__":
    raise SystemExit(main())
