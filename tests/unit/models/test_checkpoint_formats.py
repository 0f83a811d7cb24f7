"""Quantized checkpoints: the bytes each format stores, exact per module (formulas/checkpoint_formats.yaml).

Every format is checked two ways on small synthetic models:
- against the tensors each quantized module stores, written out below from the libraries' own layer
  code (shapes and dtypes cited per format; docs/serving.md#quantized-checkpoints) and summed by hand
  over the model's modules;
- against the same model built by the quantization library itself on the meta device
  (tests/fixtures/quantized_reference.json, made by scripts/quant_reference.py; the fixture names the
  library versions and the command). AWQ gemv/gemv_fast and ModelOpt have no CPU build there, so only
  the hand layout checks them.
Where a library's in-memory layout differs from the checkpoint on purpose (transformers keeps some
small tensors in float32, bitsandbytes' quant-state text varies), the difference is derived by hand.

Real configs (the shared corpus ../shared/configs, skipped when absent) are checked against the fixture's totals.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import vramwise
from helpers import CONFIGS, SHARED_MISSING, shared_present

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "quantized_reference.json"
REF = json.loads(FIXTURE.read_text())["cases"]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _model(config):
    return vramwise.load_model(copy.deepcopy(config))


# The synthetic llama of the fixture: H=512, 8 heads of 64, 2 KV heads, I=1376 (not a multiple of 128:
# GPTQModel and compressed-tensors round the groups up), 2 layers, vocab 1000, untied. (out, in) of the
# linear layers of one layer: q [512, 512], k and v [2*64, 512], o [512, 512], gate and up [I, 512],
# down [512, I]. The "div" variant has I=1536, a multiple of every group size (AutoAWQ requires it).
def llama_linears(inter: int) -> list:
    return [(512, 512), (128, 512), (128, 512), (512, 512), (inter, 512), (inter, 512), (512, inter)]


LLAMA = llama_linears(1376)
DIV = llama_linears(1536)
LAYERS = 2
# Quantized parameters: 2 x (2*512*512 + 2*128*512 + 3*1376*512) = 2 x 2,768,896 = 5,537,792 (I=1376);
# 2 x (655,360 + 3*1536*512) = 6,029,312 (I=1536).
PARAMS = {1376: 5_537_792, 1536: 6_029_312}


# ---- per-module layouts, from the libraries' layer code (bytes of every tensor a module stores) ----

def gptq(bits, group):
    # GPTQModel nn_modules/qlinear/__init__.py _register_gptq_buffers: qweight int32 [cdiv(in*b, 32), out],
    # qzeros int32 [groups, cdiv(out*b, 32)], scales fp16 [groups, out], g_idx int32 [in]; groups = cdiv(in, g)
    # (one group at g = -1).
    def f(o, i):
        g = cdiv(i, group) if group > 0 else 1
        return 4 * cdiv(i * bits, 32) * o + 4 * g * cdiv(o * bits, 32) + 2 * g * o + 4 * i
    return f


def awq_gemm(o, i, group=128):
    # AutoAWQ modules/linear/gemm.py: qweight int32 [in, out/8], qzeros int32 [in/g, out/8], scales fp16 [in/g, out]
    g = cdiv(i, group)
    return 4 * i * (o // 8) + 4 * g * (o // 8) + 2 * g * o


def _zeros_width(i, group):
    # AutoAWQ gemv.py calculate_zeros_width: groups padded to a multiple of 8 (x2 at g=64, x4 at g=32)
    m = 1 if group >= 128 else (2 if group == 64 else 4)
    return cdiv(cdiv(i // group, 8), m) * m


def awq_gemv(o, i, group=128):
    # gemv.py: qweight int32 [out, in/8], qzeros int32 [out, zw], scales fp16 [out, 8*zw]
    zw = _zeros_width(i, group)
    return 4 * o * (i // 8) + 4 * o * zw + 2 * o * 8 * zw


def awq_gemv_fast(o, i, group=128):
    # gemv_fast.py: qweight int16 [out/4, in], scales and qzeros fp16 [8*zw, out]
    zw = _zeros_width(i, group)
    return 2 * (o // 4) * i + 2 * (2 * 8 * zw * o)


def bnb8(o, i):
    # bitsandbytes Linear8bitLt._save_to_state_dict: weight int8 [out, in], SCB fp32 [out], weight_format uint8 []
    return o * i + 4 * o + 1


def bnb4(double_quant):
    # bitsandbytes quantize_4bit: weight uint8 [(n+1)//2], absmax fp32 [cdiv(n, 64)] (uint8 under double
    # quant, plus nested_absmax fp32 [cdiv(nb, 256)] and nested_quant_map fp32 [256]), quant_map fp32 [16];
    # the quant state's JSON text, which the data file bounds by 200 bytes (its length varies by module).
    def f(o, i):
        n, nb = o * i, cdiv(o * i, 64)
        absmax = nb + 4 * cdiv(nb, 256) + 1024 if double_quant else 4 * nb
        return (n + 1) // 2 + absmax + 64 + 200
    return f


def fp8_block(o, i):
    # transformers FP8Linear: weight fp8 [out, in], weight_scale_inv fp32 [cdiv(out, 128), cdiv(in, 128)]
    return o * i + 4 * cdiv(o, 128) * cdiv(i, 128)


def fp8_tensor_static(o, i):
    # per tensor: weight fp8, one fp32 weight scale and one fp32 input (activation) scale
    return o * i + 4 + 4


def ct_pack(symmetric):
    # compressed-tensors pack-quantized, 4 bits, group 128: weight_packed int32 [out, cdiv(in*4, 32)],
    # weight_scale bf16 [out, groups], weight_shape int64 [2]; asymmetric adds weight_zero_point int32
    # [cdiv(out*4, 32), groups]
    def f(o, i):
        g = cdiv(i, 128)
        return 4 * o * cdiv(i * 4, 32) + 2 * o * g + 16 + (0 if symmetric else 4 * cdiv(o * 4, 32) * g)
    return f


def ct_8bit_channel(o, i):
    # naive/int/float-quantized, channel strategy: weight 1 byte [out, in], weight_scale bf16 [out, 1]
    return o * i + 2 * o


def ct_8bit_tensor_static(o, i):
    # tensor strategy with a static input: weight_scale bf16 [1], input_scale bf16 [1]
    return o * i + 2 + 2


def ct_8bit_block(o, i):
    # block [128, 128]: weight_scale bf16 [cdiv(out, 128), cdiv(in, 128)]
    return o * i + 2 * cdiv(o, 128) * cdiv(i, 128)


def nvfp4(o, i):
    # compressed-tensors NVFP4 / ModelOpt NVFP4: FP4 two a byte [out, in/2], fp8 scale per 16 [out, in/16],
    # two fp32 global scalars (weight_global_scale and input_global_scale; ModelOpt: weight_scale_2, input_scale)
    return o * i // 2 + o * i // 16 + 4 + 4


def ct_mxfp4(o, i):
    # compressed-tensors MXFP4: weight_packed uint8 [out, in/2], weight_scale uint8 (E8M0) [out, in/32]
    return o * i // 2 + o * i // 32


def modelopt_fp8(o, i):
    # ModelOpt FP8: weight fp8 [out, in], fp32 weight_scale [] and input_scale []
    return o * i + 4 + 4


def bnb_state_lengths(double_quant, linears):
    """The quant-state JSON bytes the reference writes per module: bitsandbytes' QuantState.as_dict
    (packed) as json.dumps text; the shape's digits and the nested offset's printed value vary."""
    out = []
    for o, i in linears:
        text = f'{{"quant_type": "{"nf4" if double_quant else "fp4"}", "blocksize": 64, "dtype": "bfloat16", "shape": [{o}, {i}]'
        if double_quant:
            text += ', "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.012345678901234567'
        out.append(len(text + "}"))
    return out


# case -> (format id, per-module layout, linears, hand total, reference minus hand)
# Hand totals: 2 layers x the sum over the 7 linears. Worked through for gptq 4-bit g128 (I=1376):
#   q, o [512, 512]:   qweight 4*64*512=131,072 + qzeros 4*4*64=1,024 + scales 2*4*512=4,096 + g_idx 2,048 = 138,240
#   k, v [128, 512]:   32,768 + 4*4*16=256 + 2*4*128=1,024 + 2,048 = 36,096
#   gate, up [1376, 512]: 4*64*1376=352,256 + 4*4*172=2,752 + 2*4*1376=11,008 + 2,048 = 368,064
#   down [512, 1376]:  4*172*512=352,256 + 4*11*64=2,816 + 2*11*512=11,264 + 4*1376=5,504 = 371,840
#   2 x (2*138,240 + 2*36,096 + 2*368,064 + 371,840) = 2 x 1,456,640 = 2,913,280
# and for fp8 block (I=1376): q, o 262,144 + 4*4*4 = 262,208; k, v 65,536 + 4*1*4 = 65,552;
#   gate, up 704,512 + 4*11*4 = 704,688; down 704,512 + 4*4*11 = 704,688;
#   2 x (2*262,208 + 2*65,552 + 3*704,688) = 2 x 2,769,584 = 5,539,168.
_BNB4_FP4_GAP = sum(200 - n for n in bnb_state_lengths(False, LLAMA)) * LAYERS  # 4 x 120 + 3 x 119, x 2 = 1,674
_BNB4_DQ_GAP = sum(200 - n for n in bnb_state_lengths(True, LLAMA)) * LAYERS  # 4 x 29 + 3 x 28, x 2 = 400
SYNTHETIC = {
    "llama-gptq4_g128": ("gptq", gptq(4, 128), LLAMA, 2_913_280, 0),
    "llama-gptq4_gm1": ("gptq", gptq(4, -1), LLAMA, 2_827_200, 0),
    "llama-gptq8_g128": ("gptq", gptq(8, 128), LLAMA, 5_703_936, 0),
    "llama-gptq3_g128": ("gptq", gptq(3, 128), LLAMA, 2_215_616, 0),
    "llama-gptq2_g64": ("gptq", gptq(2, 64), LLAMA, 1_615_872, 0),
    "div-gptq4_g128": ("gptq", gptq(4, 128), DIV, 3_169_280, 0),
    "llama-awq_gemm": ("awq", awq_gemm, LLAMA, 2_877_696, 0),
    "div-awq_gemm": ("awq", awq_gemm, DIV, 3_132_416, 0),
    "div-awq_gemv": ("awq_gemv", awq_gemv, DIV, 3_229_696, None),
    "div-awq_gemv_fast": ("awq_gemv_fast", awq_gemv_fast, DIV, 3_358_720, None),
    "llama-bnb8": ("bnb_8bit", bnb8, LLAMA, 5_574_158, 0),
    # the reference writes the quant state's exact JSON (80 or 81 bytes here); the data file counts 200
    "llama-bnb4_fp4": ("bnb_4bit", bnb4(False), LLAMA, 3_118_704, -_BNB4_FP4_GAP),
    "llama-bnb4_nf4_dq": ("bnb_4bit", bnb4(True), LLAMA, 2_874_808, -_BNB4_DQ_GAP),
    "llama-fp8_block": ("fp8", fp8_block, LLAMA, 5_539_168, 0),
    "llama-fp8_tensor_static": ("fp8", fp8_tensor_static, LLAMA, 5_537_904, 0),
    "llama-ct_w4a16_g128": ("compressed_tensors_pack", ct_pack(True), LLAMA, 2_856_160, 0),
    "llama-ct_w4a16_asym": ("compressed_tensors_pack", ct_pack(False), LLAMA, 2_877_920, 0),
    "llama-ct_w8a8_int": ("compressed_tensors_8bit", ct_8bit_channel, LLAMA, 5_555_968, 0),
    "llama-ct_fp8_channel": ("compressed_tensors_8bit", ct_8bit_channel, LLAMA, 5_555_968, 0),
    "llama-ct_fp8_tensor_static": ("compressed_tensors_8bit", ct_8bit_tensor_static, LLAMA, 5_537_848, 0),
    "llama-ct_fp8_block": ("compressed_tensors_8bit", ct_8bit_block, LLAMA, 5_538_480, 0),
    "llama-ct_nvfp4": ("compressed_tensors_nvfp4", nvfp4, LLAMA, 3_115_120, 0),
    "div-ct_mxfp4": ("compressed_tensors_mxfp4", ct_mxfp4, DIV, 3_203_072, 0),
    "div-modelopt_nvfp4": ("modelopt_nvfp4", nvfp4, DIV, 3_391_600, None),
    "div-modelopt_fp8": ("modelopt_fp8", modelopt_fp8, DIV, 6_029_424, None),
}


def test_every_format_has_a_case():
    from vramwise.models.checkpoint_formats import formats

    covered = {fmt for fmt, *_ in SYNTHETIC.values()} | {"mxfp4"}  # mxfp4: the gpt-oss case below
    assert {f.id for f in formats()} <= covered


@pytest.mark.parametrize("case", sorted(SYNTHETIC))
def test_synthetic_llama(case):
    fmt, layout, linears, hand, gap = SYNTHETIC[case]
    assert LAYERS * sum(layout(o, i) for o, i in linears) == hand  # the literal agrees with the layout
    config = REF[case]["config"]
    m = _model(config)
    inv = m.inventory
    assert m.checkpoint_format == fmt
    assert inv.checkpoint_quantized_bytes == hand
    assert inv.checkpoint_quantized_params == PARAMS[config["intermediate_size"]]
    assert inv.checkpoint_quantized_head_bytes == 0 and inv.checkpoint_quantized_head_params == 0
    ref = REF[case]
    if gap is None:  # no CPU build of this format
        assert "not_built" in ref and "total_bytes" not in ref
        return
    # the library's build: the quantized modules, and the whole model (the rest stays 2 bytes a parameter)
    assert ref["quantized_bytes"] - hand == gap
    total = inv.checkpoint_quantized_bytes + 2 * (inv.params_total - inv.checkpoint_quantized_params)
    assert ref["total_bytes"] - total == gap


def test_gpt_oss_mxfp4_experts():
    # gpt-oss (H=256, I=256, 4 experts, 2 layers): only the experts are MXFP4 (FP4 two a byte, one E8M0
    # exponent per 32 inputs; transformers integrations/mxfp4.py *_blocks [E, out, in/32, 16], *_scales
    # [E, out, in/32]). gate_up [2I=512, H=256]: 65,536 + 512*8 = 4,096; down [H=256, I=256]: 32,768 +
    # 256*8 = 2,048. 4 experts x 104,448 x 2 layers = 835,584 over 2 x 4 x (512*256 + 256*256) = 1,572,864
    # parameters.
    m = _model(REF["gpt_oss-mxfp4"]["config"])
    inv = m.inventory
    assert m.checkpoint_format == "mxfp4"
    assert inv.checkpoint_quantized_bytes == 835_584
    assert inv.checkpoint_quantized_params == 1_572_864
    ref = REF["gpt_oss-mxfp4"]
    # the reference counts the experts' bf16 biases with them (gate_up_proj_bias [4, 512], down_proj_bias
    # [4, 256]: 2 x (4,096 + 2,048) = 12,288 B); vramwise counts them with the 16-bit rest
    assert ref["quantized_bytes"] - inv.checkpoint_quantized_bytes == 12_288
    assert ref["total_bytes"] == inv.checkpoint_quantized_bytes + 2 * (inv.params_total - inv.checkpoint_quantized_params)


def test_qwen3_moe_fp8_block_experts():
    # Qwen3-MoE (H=512, 4 experts of 256, 2 layers), FP8 block 128, the router skipped. Per layer:
    # q, o 262,208 and k, v 65,552 (as the llama); each expert's gate and up [256, 512]: 131,072 + 4*2*4
    # = 131,104, down [512, 256]: 131,072 + 4*4*2 = 131,104; 2 x (2*262,208 + 2*65,552 + 4*3*131,104)
    # = 2 x 2,228,768 = 4,457,536.
    m = _model(REF["qwen3_moe-fp8_block"]["config"])
    inv = m.inventory
    assert inv.checkpoint_quantized_bytes == 4_457_536
    ref = REF["qwen3_moe-fp8_block"]
    assert ref["quantized_bytes"] == 4_457_536
    assert ref["total_bytes"] == inv.checkpoint_quantized_bytes + 2 * (inv.params_total - inv.checkpoint_quantized_params)


def test_llama4_experts_stored_in_out():
    # Llama 4 holds its fused experts as [E, in, out] (gate_up_proj [E, H, 2I]); the checkpoint stores
    # each expert's gate_proj [I, H], up_proj [I, H] and down_proj [H, I], and a per-channel scale per
    # output row. H=512, I=384, 4 experts + a shared expert of 384, 2 layers, attention and router ignored,
    # compressed-tensors FP8 channel (weight + bf16 scale [out, 1]): per expert 2*(384*512 + 2*384)
    # + (512*384 + 2*512) = 592,384; 2 x 5 x 592,384 = 5,923,840.
    m = _model(REF["llama4_text-ct_fp8_channel"]["config"])
    inv = m.inventory
    assert inv.checkpoint_quantized_bytes == 5_923_840
    ref = REF["llama4_text-ct_fp8_channel"]
    # transformers creates the routed experts' Linear modules in float32, so their scales come out fp32:
    # 2 more bytes per output row, 2 layers x 4 experts x (384 + 384 + 512) x 2 = 20,480
    assert ref["quantized_bytes"] - inv.checkpoint_quantized_bytes == 20_480
    total = inv.checkpoint_quantized_bytes + 2 * (inv.params_total - inv.checkpoint_quantized_params)
    assert ref["total_bytes"] - total == 20_480


# ---- real configs ----

needs_configs = pytest.mark.skipif(not shared_present(), reason=SHARED_MISSING)


def _real(name):
    m = vramwise.load_model(json.loads((CONFIGS / f"{name}.json").read_text()))
    inv = m.inventory
    return m, inv, inv.checkpoint_quantized_bytes + 2 * (inv.params_total - inv.checkpoint_quantized_params)


@needs_configs
@pytest.mark.parametrize("name,total,layers,experts,bias_bytes", [
    # gpt-oss-20b: 24 layers of 32 experts, H=I=2880; biases 2*(2*2880 + 2880) per expert
    ("openai__gpt-oss-20b", 13_761_264_768, 24, 32, 2 * (5760 + 2880)),
    ("openai__gpt-oss-120b", 65_248_815_744, 36, 128, 2 * (5760 + 2880)),
])
def test_gpt_oss(name, total, layers, experts, bias_bytes):
    m, inv, vw_total = _real(name)
    assert m.checkpoint_format == "mxfp4"
    assert REF[name]["total_bytes"] == total == vw_total
    # MXFP4 per expert: gate_up [5760, 2880] and down [2880, 2880] at 0.5 + 1/32 bytes a weight
    per_expert = (5760 * 2880 + 2880 * 2880) * 17 // 32
    assert inv.checkpoint_quantized_bytes == layers * experts * per_expert
    assert REF[name]["quantized_bytes"] - inv.checkpoint_quantized_bytes == layers * experts * bias_bytes


@needs_configs
@pytest.mark.parametrize("name", ["Qwen__Qwen3-30B-A3B-FP8", "Qwen__Qwen3-32B-FP8"])
def test_qwen3_fp8(name):
    m, inv, vw_total = _real(name)
    assert m.checkpoint_format == "fp8"
    assert inv.checkpoint_quantized_bytes == REF[name]["quantized_bytes"]
    assert vw_total == REF[name]["total_bytes"]


@needs_configs
@pytest.mark.parametrize("name,moe_layers,experts", [
    ("deepseek-ai__DeepSeek-V3", 61 - 3, 256),  # first_k_dense_replace 3
    ("moonshotai__Kimi-K2-Instruct", 61 - 1, 384),  # first_k_dense_replace 1
])
def test_deepseek_v3_fp8(name, moe_layers, experts):
    m, inv, vw_total = _real(name)
    assert m.checkpoint_format == "fp8"
    assert inv.checkpoint_quantized_bytes == REF[name]["quantized_bytes"]
    # transformers keeps the router's gate.weight [E, 7168] in float32 (2 bytes a weight more than the
    # bf16 the checkpoint stores) and stores the fp32 e_score_correction_bias [E], a buffer vramwise does
    # not count as a parameter
    assert REF[name]["total_bytes"] - vw_total == moe_layers * (experts * 7168 * 2 + experts * 4)


@needs_configs
def test_llama4_scout_fp8_dynamic():
    name = "RedHatAI__Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"
    m, inv, vw_total = _real(name)
    assert m.checkpoint_format == "compressed_tensors_8bit"
    ref = REF[name]  # prefix_*: the text tower (vramwise sizes the text tower only)
    # fp32 scales of the per-expert Linear modules in transformers: 48 layers x 16 experts x
    # (8192 + 8192 + 5120 rows) x 2 bytes = 33,030,144
    gap = 48 * 16 * (8192 + 8192 + 5120) * 2
    assert ref["prefix_quantized_bytes"] - inv.checkpoint_quantized_bytes == gap
    assert ref["prefix_total_bytes"] - vw_total == gap


@needs_configs
def test_gemma4_modelopt_nvfp4():
    # no CPU build: by hand. 60 layers' gate, up [21504, 5376] and down [5376, 21504] are NVFP4 (attention,
    # head and vision ignored): 21504*5376/2 = 57,802,752 + /16 = 7,225,344 + 8 = 65,028,104 each;
    # 60 x 3 x 65,028,104 = 11,705,058,720
    m, inv, _ = _real("nvidia__Gemma-4-31B-IT-NVFP4")
    assert m.checkpoint_format == "modelopt_nvfp4"
    assert inv.checkpoint_quantized_bytes == 11_705_058_720
    assert inv.checkpoint_quantized_params == 60 * 3 * 21504 * 5376


# ---- skip lists, unknown methods, wrong types ----

def _ct_channel(ignore, config=None):
    c = copy.deepcopy(config or REF["llama-ct_fp8_channel"]["config"])
    c["quantization_config"]["ignore"] = ignore
    return _model(c).inventory


# compressed-tensors targets every Linear, the head [1000, 512] too: 512,000 + 2*1000 = 514,000 B
HEAD = 514_000


@pytest.mark.parametrize("ignore,skipped_layers", [
    ([], []),
    (["lm_head"], []),
    (["model.layers.*.self_attn", "lm_head"], [(512, 512), (128, 512), (128, 512), (512, 512)]),
    (["re:.*self_attn\\..*", "lm_head"], [(512, 512), (128, 512), (128, 512), (512, 512)]),
    (["re:.*mlp\\.down_proj", "lm_head"], [(512, 1376)]),
    (["down_proj", "lm_head"], [(512, 1376)]),
    (["model.layers.0.mlp.down_proj", "lm_head"], "layer0-down"),
])
def test_skip_lists(ignore, skipped_layers):
    inv = _ct_channel(ignore)
    head = 0 if "lm_head" in ignore else HEAD
    full = 5_555_968  # the llama-ct_fp8_channel case
    if skipped_layers == "layer0-down":
        skipped_bytes, skipped_params = ct_8bit_channel(512, 1376), 512 * 1376
    else:
        skipped_bytes = LAYERS * sum(ct_8bit_channel(o, i) for o, i in skipped_layers)
        skipped_params = LAYERS * sum(o * i for o, i in skipped_layers)
    assert inv.checkpoint_quantized_bytes == full + head - skipped_bytes
    assert inv.checkpoint_quantized_params == PARAMS[1376] + (1000 * 512 if head else 0) - skipped_params
    assert inv.checkpoint_quantized_head_bytes == head


def test_rooted_head_entry_in_a_multimodal_config():
    # Llama 4 with a vision tower: the text tower sits under language_model, and the checkpoint names its
    # head language_model.lm_head. Text tower as in test_llama4_experts_stored_in_out but attention quantized
    # too: per layer q, o 262,144 + 1,024; k, v 65,536 + 256; 5 experts x 592,384; head 514,000.
    text = {"model_type": "llama4_text", "hidden_size": 512, "intermediate_size": 384, "intermediate_size_mlp": 1024,
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
            "num_local_experts": 4, "vocab_size": 1000, "tie_word_embeddings": False}
    config = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "text_config": text,
              "vision_config": {"model_type": "llama4_vision_model"},
              "quantization_config": copy.deepcopy(REF["llama-ct_fp8_channel"]["config"]["quantization_config"])}
    layers = 2 * (2 * 263_168 + 2 * 65_792 + 5 * 592_384)
    assert _ct_channel([], config).checkpoint_quantized_bytes == layers + HEAD
    inv = _ct_channel(["language_model.lm_head"], config)
    assert inv.checkpoint_quantized_bytes == layers and inv.checkpoint_quantized_head_bytes == 0


def test_fp8_modules_to_not_convert():
    # FP8 with its own list: the listed module stays 16 bit (down_proj 704,512 + 4*4*11 = 704,688 per layer)
    c = copy.deepcopy(REF["llama-fp8_block"]["config"])
    c["quantization_config"]["modules_to_not_convert"] = ["lm_head", "down_proj"]
    inv = _model(c).inventory
    assert inv.checkpoint_quantized_bytes == 5_539_168 - 2 * 704_688
    assert inv.checkpoint_quantized_params == PARAMS[1376] - 2 * 512 * 1376


def test_unknown_quant_method_warns_and_stores_nothing():
    c = copy.deepcopy(REF["llama-fp8_block"]["config"])
    c["quantization_config"] = {"quant_method": "made_up_method"}
    m = _model(c)
    assert m.checkpoint_format is None
    assert m.inventory.checkpoint_quantized_bytes == 0 and m.inventory.checkpoint_quantized_params == 0
    assert any("made_up_method" in w and "checkpoint_formats.yaml" in w for w in m.warnings)


@pytest.mark.parametrize("case,key,value,path", [
    ("llama-fp8_block", "weight_block_size", ["a", 128], "quantization_config.weight_block_size.0"),
    ("llama-gptq4_g128", "bits", "4", "quantization_config.bits"),
    ("llama-gptq4_g128", "group_size", True, "quantization_config.group_size"),
])
def test_wrong_value_type_is_a_config_error(case, key, value, path):
    c = copy.deepcopy(REF[case]["config"])
    c["quantization_config"][key] = value
    with pytest.raises(vramwise.ConfigError, match=path.replace(".", r"\.")):
        _model(c)


def test_fixture_provenance():
    prov = json.loads(FIXTURE.read_text())["provenance"]
    assert prov["tool"] == "scripts/quant_reference.py"
    assert (Path(__file__).resolve().parents[3] / prov["tool"]).is_file()
    assert prov["libraries"]["transformers"] and prov["libraries"]["compressed-tensors"]
