#!/usr/bin/env python
"""The tensors a quantized checkpoint's modules hold, built by the quantization libraries themselves.

Each config.json with a ``quantization_config`` is built as a model skeleton on the meta device (no
weights, no memory); the format's HfQuantizer is created from the config as ``from_pretrained`` creates
it (transformers/quantizers/auto.py) and its ``preprocess_model`` swaps the modules in place, through the
library's own integration (GPTQModel for GPTQ and AWQ, compressed-tensors, bitsandbytes, transformers'
FP8 and MXFP4 integrations). Every parameter and persistent buffer is then listed with its name, shape,
dtype and bytes (numel x element size; packed integer dtypes already hold several values).

Environment checks that need a GPU are skipped (validate_environment is not called) and the FP8/MXFP4
"dequantize on a CPU" fallback is switched off, so the stored layout is what is built. Tensors a
library creates only when it loads real weights are added from the library's own functions or
shapes (bitsandbytes' quant state, MXFP4's blocks and scales, a packed compressed-tensors zero point).

A module counts as quantized when the quantizer replaced it (its class differs from the plain model's)
or, for quantizers that change parameters in place (bitsandbytes, compressed-tensors), when it holds a
tensor of a low-precision dtype or a scale-like tensor. Formats with no CPU build (AWQ gemv/gemv_fast,
ModelOpt) are reported as not built, with the reason.

Requirements: torch (CPU), transformers 5.24.0, gptqmodel 7.7.0, optimum 2.3.0, autoawq 0.2.9,
compressed-tensors 0.20.1, bitsandbytes 0.50.2 (the versions tests/fixtures/quantized_reference.json
was made with), in an environment of their own.

Usage:
    python scripts/quant_reference.py CONFIG.json [CONFIG.json ...] [--modules] [--layer TEXT] [--json OUT.json]
    python scripts/quant_reference.py --fixture tests/fixtures/quantized_reference.json [--configs DIR]

The second form rebuilds every case of the fixture (its config inline, or a file name under --configs)
and writes the figures back into it with the library versions.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys
import tempfile
import warnings
from collections import OrderedDict, defaultdict

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig  # noqa: E402
from transformers.quantizers.auto import AutoHfQuantizer  # noqa: E402


def _load_config(path):
    raw = path if isinstance(path, dict) else json.load(open(path))
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    if raw.get("model_type") not in CONFIG_MAPPING and raw.get("architectures"):
        # remote-code model types (e.g. kimi_k2) whose architecture transformers has natively
        arch_to_type = {"DeepseekV3ForCausalLM": "deepseek_v3"}
        mt = arch_to_type.get(raw["architectures"][0])
        if mt:
            raw = dict(raw, model_type=mt)
            raw.pop("auto_map", None)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(raw, f)
        cfg = AutoConfig.from_pretrained(d, trust_remote_code=False)
    return raw, cfg


def _model_class(cfg):
    for arch in cfg.architectures or []:
        cls = getattr(transformers, arch, None)
        if cls is not None:
            return cls
    return transformers.AutoModelForCausalLM


def _qconfig_dict(cfg, raw):
    q = raw.get("quantization_config")
    if q is None:
        for k in ("text_config", "language_config", "llm_config"):
            if isinstance(raw.get(k), dict) and raw[k].get("quantization_config"):
                q = raw[k]["quantization_config"]
    return q


def build(path, dtype=torch.bfloat16):
    """Per-module tensors of the quantized skeleton of a config (a path or a dict), or the reason it is not built."""
    raw, cfg = _load_config(path)
    qdict = _qconfig_dict(cfg, raw)
    name = "<inline>" if isinstance(path, dict) else os.path.basename(path)
    out = {"config": name, "quant_method": (qdict or {}).get("quant_method")}
    if qdict is None:
        out["error"] = "no quantization_config"
        return out
    if not AutoHfQuantizer.supports_quant_method(qdict):
        out["error"] = f"transformers {transformers.__version__} has no quantizer for quant_method={qdict.get('quant_method')!r}"
        return out
    cls = _model_class(cfg)
    # plain skeleton, to know which module classes the quantizer replaced
    qcfg_obj = AutoHfQuantizer.merge_quantization_configs(copy.deepcopy(qdict), None)
    cfg.quantization_config = qcfg_obj
    hf_quantizer = AutoHfQuantizer.from_config(qcfg_obj, pre_quantized=True)
    qc = hf_quantizer.quantization_config
    if hasattr(qc, "dequantize"):
        qc.dequantize = False  # FP8/MXFP4 set this on a machine without a GPU; we want the stored layout
    if not hasattr(hf_quantizer, "use_fp8_kernel"):
        # compressed-tensors: validate_environment sets this; False = the compressed-tensors module
        # layout, which is the checkpoint's own (quantizer_compressed_tensors.py, validate_environment)
        hf_quantizer.use_fp8_kernel = False
    if dtype is not None:
        try:
            dtype = hf_quantizer.update_dtype(dtype)
        except Exception:
            pass
    with torch.device("meta"):
        plain = cls._from_config(copy.deepcopy(cfg), dtype=dtype)
    plain_classes = {n: type(m) for n, m in plain.named_modules()}
    del plain
    is_mxfp4 = qdict.get("quant_method") == "mxfp4"
    with torch.device("meta"), _no_hub_kernels(is_mxfp4):
        model = cls._from_config(cfg, dtype=dtype)
        # use_kernels=True only for MXFP4: on a CPU it otherwise dequantizes to bf16 (quantizer_mxfp4.py:179)
        hf_quantizer.preprocess_model(model=model, dtype=dtype, device_map=None, checkpoint_files=None,
                                      use_kernels=is_mxfp4)
    modules = _collect(model, plain_classes)
    _bnb_extras(hf_quantizer, model, modules)
    _mxfp4_extras(model, modules, dtype)
    _ct_zero_point(model, modules)
    return _finish(out, cls, dtype, modules, raw)


_QUANT_NAMES = ("scale", "zero", "g_idx", "absmax", "quant_map", "quant_state", "SCB", "weight_format",
                "weight_shape", "packed", "qweight", "blocks")


def _collect(model, plain_classes):
    """Parameters and persistent buffers (what a state_dict / checkpoint holds) per module."""
    modules = OrderedDict()
    seen = set()  # tied weights (lm_head = embed_tokens) are stored once
    for name, mod in model.named_modules():
        tensors = []
        nonpersistent = getattr(mod, "_non_persistent_buffers_set", set())
        items = list(mod.named_parameters(recurse=False)) + [
            (n, b) for n, b in mod.named_buffers(recurse=False) if n not in nonpersistent]
        for tname, t in items:
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            tensors.append((tname, tuple(t.shape), str(t.dtype).replace("torch.", ""), t.numel() * t.element_size()))
        if not tensors:
            continue
        replaced = plain_classes.get(name) is not type(mod)
        low_dtype = any(dt.startswith(("int", "uint", "float8", "float4")) for _, _, dt, _ in tensors)
        qnames = any(any(k in tn for k in _QUANT_NAMES) for tn, *_ in tensors)
        modules[name] = {"class": type(mod).__name__, "replaced": replaced,
                         "quantized": bool(replaced or low_dtype or qnames), "tensors": tensors}
    return modules


def _finish(out, cls, dtype, modules, raw):
    out["model_class"] = cls.__name__
    out["dtype"] = str(dtype).replace("torch.", "")
    out["modules"] = modules
    out["total_bytes"] = sum(b for m in modules.values() for *_, b in m["tensors"])
    out["quantized_bytes"] = sum(b for m in modules.values() if m["quantized"] for *_, b in m["tensors"])
    out["unquantized_bytes"] = out["total_bytes"] - out["quantized_bytes"]
    out["n_quantized_modules"] = sum(1 for m in modules.values() if m["quantized"])
    tc = raw.get("text_config") or raw
    if tc.get("num_nextn_predict_layers"):
        out.setdefault("notes", []).append(
            f"num_nextn_predict_layers={tc['num_nextn_predict_layers']}: the MTP layer(s) stored in the checkpoint "
            "are not built by transformers and are not counted")
    return out


@contextlib.contextmanager
def _no_hub_kernels(active):
    """MXFP4's replace_with_mxfp4_linear fetches a Hub kernel (integrations/mxfp4.py:521) used only in
    forward; there is no network here, so it is stubbed while the skeleton is built."""
    if not active:
        yield
        return
    import transformers.integrations.hub_kernels as hk
    orig = hk.get_kernel
    hk.get_kernel = lambda *a, **k: None
    try:
        yield
    finally:
        hk.get_kernel = orig


def _ct_zero_point(model, modules):
    """compressed-tensors pack-quantized, asymmetric: on the meta device compress() skips packing the zero
    point (compressors/pack_quantized/base.py:83-91); a real checkpoint stores it packed along the output
    dim, int32 [ceil(out*bits/32), groups] (base.py:103-106; vLLM compressed_tensors_wNa16.py:191-199)."""
    import math
    for name, mod in model.named_modules():
        m = modules.get(name)
        scheme = getattr(mod, "quantization_scheme", None)
        if m is None or scheme is None or scheme.weights is None:
            continue
        names = {t[0]: t for t in m["tensors"]}
        if "weight_packed" in names and "weight_zero_point" in names and names["weight_zero_point"][2] != "int32":
            out_f, groups = names["weight_zero_point"][1][:2]
            rows = math.ceil(out_f * scheme.weights.num_bits / 32)
            m["tensors"] = [t if t[0] != "weight_zero_point" else
                            ("weight_zero_point", (rows, groups), "int32", rows * groups * 4) for t in m["tensors"]]


def _mxfp4_extras(model, modules, dtype):
    """transformers keeps the MXFP4 scales outside the parameters (a triton precision_config made at load);
    the checkpoint stores, per projection P in (gate_up_proj, down_proj):
      P_blocks [E, rows, cols/32, 16] uint8 and P_scales [E, rows, cols/32] uint8 (E8M0 exponents),
    integrations/mxfp4.py:199 (`{name}_blocks`: blocks.reshape(*scales.shape, -1)), and the biases in
    the model dtype (vLLM model_executor/layers/quantization/mxfp4.py:274-288 allocates them bf16)."""
    try:
        from transformers.integrations.mxfp4 import Mxfp4GptOssExperts
    except Exception:
        return
    dt = str(dtype).replace("torch.", "")
    esize = torch.empty(0, dtype=dtype).element_size()
    for name, mod in model.named_modules():
        if not isinstance(mod, Mxfp4GptOssExperts):
            continue
        new = []
        for tname, shape, tdt, nbytes in modules[name]["tensors"]:
            if tname in ("gate_up_proj", "down_proj"):
                e, rows, half = shape
                nblk = (half * 2) // 32
                new.append((tname + "_blocks", (e, rows, nblk, 16), "uint8", e * rows * nblk * 16))
                new.append((tname + "_scales", (e, rows, nblk), "uint8", e * rows * nblk))
            elif tname.endswith("_bias"):
                n = 1
                for d in shape:
                    n *= d
                new.append((tname, shape, dt, n * esize))
            else:
                new.append((tname, shape, tdt, nbytes))
        modules[name]["tensors"] = new
        modules[name]["quantized"] = True


def _bnb_extras(hf_quantizer, model, modules):
    """bitsandbytes Params4bit/Int8Params hold the packed weight as the parameter; the per-block
    statistics are saved next to it (weight.absmax, weight.quant_map, weight.nested_absmax,
    weight.nested_quant_map, weight.quant_state.bitsandbytes__nf4; SCB / weight_format for 8-bit).
    On the meta device they do not exist yet, so they are added here from the quantizer's own
    formulas: bitsandbytes.functional.quantize_4bit (blocksize 64) and Linear8bitLt (SCB = out fp32)."""
    qm = getattr(hf_quantizer.quantization_config, "quant_method", None)
    qm = getattr(qm, "value", qm)
    if qm != "bitsandbytes":
        return
    import bitsandbytes as bnb
    qc = hf_quantizer.quantization_config
    for name, mod in model.named_modules():
        if isinstance(mod, bnb.nn.Linear4bit):
            w = mod.weight
            blocksize = getattr(w, "blocksize", None) or 64
            storage = getattr(qc, "bnb_4bit_quant_storage", None) or torch.uint8
            if isinstance(storage, str):
                storage = getattr(torch, storage)
            a = torch.empty(mod.out_features, mod.in_features, dtype=torch.bfloat16, device="meta")
            packed, st = bnb.functional.quantize_4bit(
                a, blocksize=blocksize, compress_statistics=qc.bnb_4bit_use_double_quant,
                quant_type=qc.bnb_4bit_quant_type, quant_storage=storage)
            ent = [t for t in modules[name]["tensors"] if t[0] != "weight"]
            ent.insert(0, ("weight", tuple(packed.shape), str(packed.dtype).replace("torch.", ""),
                           packed.numel() * packed.element_size()))

            def _t(nm, x):
                return (nm, tuple(x.shape), str(x.dtype).replace("torch.", ""), x.numel() * x.element_size())
            ent.append(_t("weight.absmax", st.absmax))
            ent.append(_t("weight.quant_map", st.code))
            qs = {"quant_type": st.quant_type, "blocksize": st.blocksize, "dtype": "bfloat16",
                  "shape": [mod.out_features, mod.in_features]}
            if st.nested:
                ent.append(_t("weight.nested_absmax", st.state2.absmax))
                ent.append(_t("weight.nested_quant_map", st.state2.code))
                qs.update({"nested_blocksize": st.state2.blocksize, "nested_dtype": "float32",
                           "nested_offset": 0.012345678901234567})
            # functional.py QuantState.as_dict(packed=True) + utils.pack_dict_to_tensor: JSON bytes as uint8;
            # its length varies by a few bytes with the printed value of nested_offset and the dtype name
            n = len(json.dumps(qs).encode())
            ent.append((f"weight.quant_state.bitsandbytes__{st.quant_type}", (n,), "uint8", n))
            modules[name]["tensors"] = ent
            modules[name]["quantized"] = True
        elif isinstance(mod, bnb.nn.Linear8bitLt):
            ent = modules[name]["tensors"]
            ent += [("SCB", (mod.out_features,), "float32", 4 * mod.out_features),
                    ("weight_format", (), "uint8", 1)]
            modules[name]["quantized"] = True


def _fmt(n):
    return f"{n:,}"


def _versions():
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("torch", "transformers", "gptqmodel", "optimum", "autoawq", "compressed-tensors", "bitsandbytes"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def update_fixture(path, configs_dir=None):
    """Rebuild every case of a fixture file and write its figures back: total_bytes (every parameter and
    persistent buffer), quantized_bytes (the modules the format changed), and, where the case names a
    prefix (a multimodal model's text tower), total_bytes and quantized_bytes of the modules under it."""
    with open(path) as f:
        fixture = json.load(f)
    fixture["provenance"]["libraries"] = _versions()
    for case in fixture["cases"].values():
        for key in ("total_bytes", "quantized_bytes", "prefix_total_bytes", "prefix_quantized_bytes", "not_built"):
            case.pop(key, None)
        if "config" in case:
            src = case["config"]
        else:
            if configs_dir is None:
                raise SystemExit(f"case {case['config_file']} needs --configs DIR")
            src = os.path.join(configs_dir, case["config_file"])
        try:
            r = build(src)
        except Exception as e:  # a format the libraries cannot build on a CPU: record why
            r = {"error": f"{type(e).__name__}: {e}"[:400]}
        if "error" in r:
            case["not_built"] = r["error"]
            continue
        case["total_bytes"] = r["total_bytes"]
        case["quantized_bytes"] = r["quantized_bytes"]
        prefix = case.get("prefix")
        if prefix:
            mods = [m for n, m in r["modules"].items() if n.startswith(prefix)]
            case["prefix_total_bytes"] = sum(b for m in mods for *_, b in m["tensors"])
            case["prefix_quantized_bytes"] = sum(b for m in mods if m["quantized"] for *_, b in m["tensors"])
    with open(path, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="*")
    ap.add_argument("--fixture", default=None, help="rebuild the cases of this fixture file and write their figures")
    ap.add_argument("--configs", dest="configs_dir", default=None, help="folder of the fixture's config files")
    ap.add_argument("--modules", action="store_true", help="print every module's tensors")
    ap.add_argument("--layer", default=None, help="print only modules whose name contains this")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.fixture:
        update_fixture(a.fixture, a.configs_dir)
        return
    results = []
    for p in a.configs:
        try:
            r = build(p)
        except Exception as e:  # report and go on
            r = {"config": os.path.basename(p), "error": f"{type(e).__name__}: {e}"[:400]}
        results.append(r)
        print(f"== {r['config']}  quant_method={r.get('quant_method')}")
        if "error" in r:
            print("   NOT BUILT:", r["error"])
            continue
        for n in r.get("notes", []):
            print("   note:", n)
        print(f"   class={r['model_class']} dtype={r['dtype']} quantized_modules={r['n_quantized_modules']}")
        print(f"   total_bytes={_fmt(r['total_bytes'])} quantized_module_bytes={_fmt(r['quantized_bytes'])} "
              f"unquantized_bytes={_fmt(r['unquantized_bytes'])}")
        if a.modules or a.layer:
            for n, m in r["modules"].items():
                if a.layer and a.layer not in n:
                    continue
                if not a.modules and not m["quantized"]:
                    continue
                print(f"   {n} [{m['class']}{' Q' if m['quantized'] else ''}]")
                for t in m["tensors"]:
                    print(f"      {t[0]:<42} {str(list(t[1])):<22} {t[2]:<14} {_fmt(t[3])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
