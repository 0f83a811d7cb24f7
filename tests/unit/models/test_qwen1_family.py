"""Qwen-1 (model type ``qwen``) parameter counts, derived by hand from modeling_qwen.py.

transformers cannot build Qwen-1 (it exists only as remote code, QWenLMHeadModel), so the
meta-device comparison of tests/conformance/test_exact_params.py is impossible for it. Instead each module
count of the published Qwen-1.8B / 7B / 14B configs (../shared/configs_extra) is written here as
arithmetic from the shapes of the remote modelling code:

- ``transformer.wte``: nn.Embedding(vocab_size, hidden_size)
- per block ``transformer.h.{i}``:
  - ``ln_1``, ``ln_2``: RMSNorm(hidden_size), weight only
  - ``attn.c_attn``: nn.Linear(hidden_size, 3 * projection_size), with bias
    (projection_size = kv_channels * num_attention_heads)
  - ``attn.c_proj``: nn.Linear(hidden_size, projection_size, bias=not no_bias)
  - ``mlp.w1``, ``mlp.w2``: nn.Linear(hidden_size, intermediate_size // 2, bias=not no_bias)
  - ``mlp.c_proj``: nn.Linear(intermediate_size // 2, hidden_size, bias=not no_bias)
- ``transformer.ln_f``: RMSNorm(hidden_size)
- ``lm_head``: nn.Linear(hidden_size, vocab_size, bias=False), untied
"""

from __future__ import annotations

import json

import pytest

import vramwise
from helpers import SHARED, SHARED_MISSING

_CONFIGS = SHARED / "configs_extra"


def _hand(vocab: int, hidden: int, layers: int, heads: int, kv_channels: int, intermediate: int) -> dict[str, int]:
    """Parameter count per module path, from the shapes above (no_bias true, as every published config)."""
    proj = kv_channels * heads
    ff = intermediate // 2
    out = {"transformer.wte": vocab * hidden}
    for i in range(layers):
        h = f"transformer.h.{i}."
        out[h + "ln_1"] = hidden
        out[h + "attn.c_attn"] = 3 * proj * hidden + 3 * proj
        out[h + "attn.c_proj"] = proj * hidden
        out[h + "ln_2"] = hidden
        out[h + "mlp.w1"] = ff * hidden
        out[h + "mlp.w2"] = ff * hidden
        out[h + "mlp.c_proj"] = hidden * ff
    out["transformer.ln_f"] = hidden
    out["lm_head"] = vocab * hidden
    return out


# file, dims (vocab, hidden, layers, heads, kv_channels, intermediate_size), total
CASES = [
    # 151936*2048*2 + 24*(3*2048*2048 + 3*2048 + 2048*2048 + 3*2048*5504 + 2*2048) + 2048
    ("Qwen__Qwen-1_8B.json", (151936, 2048, 24, 16, 128, 11008), 1836828672),
    # 151936*4096*2 + 32*(3*4096*4096 + 3*4096 + 4096*4096 + 3*4096*11008 + 2*4096) + 4096: published 7.7B
    ("Qwen__Qwen-7B.json", (151936, 4096, 32, 32, 128, 22016), 7721324544),
    # 152064*5120*2 + 40*(3*5120*5120 + 3*5120 + 5120*5120 + 3*5120*13696 + 2*5120) + 5120: published 14.2B
    ("Qwen__Qwen-14B.json", (152064, 5120, 40, 40, 128, 27392), 14167290880),
]


@pytest.mark.parametrize("name,dims,total", CASES, ids=[c[0] for c in CASES])
def test_qwen1_published_configs(name, dims, total):
    path = _CONFIGS / name
    if not path.is_file():
        pytest.skip(f"{path} is absent ({SHARED_MISSING})")
    cfg = json.loads(path.read_text())
    spec = vramwise.load_model(cfg)
    assert spec.family == "qwen"
    hand = _hand(*dims)
    assert sum(hand.values()) == total
    ours = spec.module_params()
    assert set(ours) == set(hand), (sorted(set(ours) ^ set(hand))[:5])
    assert {p: n for p, n in ours.items() if n != hand[p]} == {}
    assert spec.params_total == total


def test_qwen1_mlp_width_is_half_the_config_intermediate_size():
    spec = vramwise.load_model({"model_type": "qwen", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 1,
                                "num_attention_heads": 4, "intermediate_size": 256})
    assert spec.module_params()["transformer.h.0.mlp.w1"] == 128 * 64
    assert spec.module_params()["transformer.h.0.mlp.c_proj"] == 64 * 128
