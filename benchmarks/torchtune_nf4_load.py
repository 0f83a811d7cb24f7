"""The caching allocator's reserve left by torchtune 0.1's QLoRA model setup, replayed through vramwise's
model of the allocator.

torchtune 0.1.x (April-May 2024) pinned torchao 0.1. Its single-device LoRA recipe builds the model on the
GPU in bf16 (recipes/lora_finetune_single_device.py ``_setup_model``: ``with utils.set_default_dtype(dtype),
self._device: config.instantiate(cfg_model)``), and three steps quantize every adapted projection to NF4 on
the GPU, one projection at a time:

1. the component builder makes one decoder layer: each adapted projection is an ``nn.Linear`` in bf16 that
   ``LoRALinear._create_weight_and_bias`` passes to ``to_nf4`` (torchtune modules/peft/lora.py);
2. ``TransformerDecoder`` deep-copies that layer once per layer (modules/transformer.py ``_get_clones``), and
   torchtune's clone of an NF4 tensor dequantizes it and quantizes it again
   (utils/_register_nf4_dispatch_ops.py ``clone``: ``to_nf4(t.get_original_weight())``);
3. ``model.load_state_dict`` copies each checkpoint weight in: torchtune's ``copy_`` moves it to the GPU in bf16
   and quantizes it (``inplace_copy``: ``to_nf4(src.to(dest.device))``).

torchao 0.1's quantization (dtypes/nf4tensor.py ``NF4Tensor.from_tensor``) finds each element's nearest NF4
value by broadcasting the whole weight against the 16 code values, ``(value.unsqueeze(-1) - nf4).abs()``
(``quantize_tensor_nearest``): two bf16 tensors of 16 x the weight's elements, 32 bytes each per element,
beside the scaled weight; the index of the minimum is int64, and packing two indices to a byte goes through
int64 halves. torchao 0.2 (pytorch/ao#196, "perform in chunks", 2024-05-01) runs that search over chunks of
``CHUNK_SIZE = 1024**2`` elements into a uint8 buffer instead.

Each call's allocations and frees below follow those lines in order (the order was checked against the
storages torchao 0.1's own ``from_tensor`` creates and frees on the CPU under
``vramwise.measuring.tracker.StorageTracker``). The setup's whole sequence is replayed through
``vramwise.measuring.allocator.CachingAllocatorModel``; what it reserves is what ``torch.cuda.memory_reserved``
reads after the setup. The torchtune QLoRA tutorial at that release (docs/source/tutorials/qlora_finetune.rst,
commit 0914d5c) publishes 9.13 GB of "Peak memory reserved, model init" for Llama-2-7B (7B_qlora_single_device:
every attention and MLP projection adapted, rank 8).

    python benchmarks/torchtune_nf4_load.py                       # Llama-2-7B's shape, torchao 0.1
    python benchmarks/torchtune_nf4_load.py --chunked             # the same setup with torchao 0.2's chunks
    python benchmarks/torchtune_nf4_load.py --config config.json  # another Llama-shaped config
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from vramwise.measuring.allocator import CachingAllocatorModel, round_size

#: torchao NF4: elements per quantization block and blocks per double-quantized scaler block
BLOCK = 64
SCALER_BLOCK = 256
#: torchao 0.2 nf4tensor.py CHUNK_SIZE
CHUNK = 1024 ** 2

#: Llama-2-7B (meta-llama/Llama-2-7b-hf config.json; torchtune's llama2_7b builder)
LLAMA_2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
              "num_key_value_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000,
              "max_position_embeddings": 4096}

#: the tutorial's published reserve after model init (GB = 10^9 bytes: torchtune 0.1 utils/memory.py divides by 1e9)
PUBLISHED_INIT_RESERVED = 9.13e9


class _Replay:
    """Allocations and frees sent to the allocator model by name-free handles; ``live`` and ``max_live`` count
    the requests themselves (each rounded up to 512 bytes), beside the model's blocks, which may be larger (a
    large block is not split when less than 1 MiB would be left)."""

    def __init__(self) -> None:
        self.model = CachingAllocatorModel()
        self.sizes: dict = {}
        self.live = self.max_live = 0

    def a(self, nbytes: float):
        h = self.model.malloc(int(nbytes))
        size = round_size(int(nbytes))
        self.sizes[h] = size
        self.live += size
        self.max_live = max(self.max_live, self.live)
        return h

    def f(self, *handles) -> None:
        for h in handles:
            self.model.free(h)
            self.live -= self.sizes.pop(h)


def _double_quantize_scalers(r: _Replay, n: int) -> list:
    """torchao 0.1 ``double_quantize_scalers`` on n elements: returns what the NF4 tensor keeps (its int8
    scalers, the quantization factors and the scalers' mean)."""
    t, v, i = r.a(2 * n), r.a(n / BLOCK * 2), r.a(n / BLOCK * 8)  # get_block_absmax: abs, max values, indices
    r.f(t, i)
    mean = r.a(2)
    s1 = r.a(n / BLOCK * 2)  # scalers_1 - mean
    r.f(v)
    nb = n / BLOCK
    t2, v2, i2 = r.a(nb * 2), r.a(nb / SCALER_BLOCK * 2), r.a(nb / SCALER_BLOCK * 8)
    r.f(t2, i2)
    two = r.a(nb * 2)  # 2 * scaler_absmax, expanded to every block
    qf = r.a(nb * 2)  # 256 / (...): kept, [:, 0] is a view of the whole buffer
    r.f(two, v2)
    q1 = r.a(nb * 2)  # scaler_blocks * quantization_factor
    q2 = r.a(nb * 2)  # .round()
    r.f(q1)
    q3 = r.a(nb * 2)  # .clamp(-128, 127)
    r.f(q2)
    qs = r.a(nb)  # .to(torch.int8)
    r.f(q3, s1)
    return [qs, qf, mean]


def _nearest_unchunked(r: _Replay, n: int):
    """torchao 0.1: ``quantize_tensor_nearest`` over the whole weight, then the packing; returns the packed data."""
    sub = r.a(32 * n)  # value.unsqueeze(-1) - nf4: (n, 16) bf16
    ab = r.a(32 * n)  # .abs()
    r.f(sub)
    mv, mi = r.a(2 * n), r.a(8 * n)  # .min(dim=-1): values (bf16), indices (int64)
    r.f(mv, ab)
    sh = r.a(4 * n)  # quantized_blocks[::2] << 4 (int64)
    orr = r.a(4 * n)  # | quantized_blocks[1::2]
    r.f(sh)
    qd = r.a(n / 2)  # .to(torch.uint8)
    r.f(orr, mi)
    return qd


def _nearest_chunked(r: _Replay, n: int):
    """torchao 0.2: the nearest-value search in chunks of CHUNK elements into a uint8 buffer, then the packing."""
    qb = r.a(n)  # torch.empty(numel, dtype=torch.uint8)
    for start in range(0, n, CHUNK):
        c = min(CHUNK, n - start)
        sub = r.a(32 * c)
        ab = r.a(32 * c)
        r.f(sub)
        mv, mi = r.a(2 * c), r.a(8 * c)
        r.f(mv, ab)
        u8 = r.a(c)  # .to(torch.uint8), then copied into the buffer's slice
        r.f(mi, u8)
    sh = r.a(n / 2)  # uint8 halves
    orr = r.a(n / 2)
    r.f(sh)
    r.f(qb)
    return orr  # .to(torch.uint8) of a uint8 tensor returns it


def from_tensor(r: _Replay, n: int, chunked: bool) -> list:
    """``NF4Tensor.from_tensor`` of a bf16 weight of n elements already on the device; returns the kept blocks."""
    keep = [r.a(32)]  # the 16 NF4 code values (bf16)
    keep += _double_quantize_scalers(r, n)
    t, v, i = r.a(2 * n), r.a(n / BLOCK * 2), r.a(n / BLOCK * 8)  # get_block_absmax again
    r.f(t, i)
    sb = r.a(2 * n)  # blocks / scales
    qd = (_nearest_chunked if chunked else _nearest_unchunked)(r, n)
    r.f(sb, v)
    return keep + [qd]


def get_original_weight(r: _Replay, n: int):
    """torchao 0.1 ``NF4Tensor.get_original_weight``: the bf16 weight dequantized (returned) and its temporaries."""
    fe8 = r.a(n / 2)  # quantized_data >> 4
    fe = r.a(4 * n)  # .to(torch.long)
    r.f(fe8)
    se8 = r.a(n / 2)  # quantized_data & 0b1111
    se = r.a(4 * n)
    r.f(se8)
    d1, d2 = r.a(n), r.a(n)  # nf4[first], nf4[second] (bf16, n/2 each)
    ds1 = r.a(n / BLOCK * 2)  # dequantize_scalers: int8 / factor
    ds = r.a(n / BLOCK * 2)  # + scaler_mean
    r.f(ds1)
    fl1 = r.a(n)  # repeated.flatten() materializes the expanded scalers
    s1 = r.a(n)  # dequantized_first * repeated
    r.f(fl1)
    fl2 = r.a(n)
    s2 = r.a(n)
    r.f(fl2)
    st = r.a(2 * n)  # torch.stack([...], dim=-1).reshape(shape)
    r.f(fe, se, d1, d2, ds, s1, s2)
    return st


@dataclass(frozen=True)
class Setup:
    """What the replay reads after the setup: the allocator model's ``allocated`` and ``reserved`` bytes and its
    allocated peak; ``requested`` and ``max_requested``: the live requests' own bytes and their peak."""

    allocated: int
    reserved: int
    max_allocated: int
    requested: int
    max_requested: int


def replay_setup(config: dict, *, rank: int = 8, chunked: bool = False) -> Setup:
    """torchtune 0.1's QLoRA setup (every attention and MLP projection adapted and quantized, the output head
    in bf16) of a Llama-shaped ``config``, replayed through the allocator model."""
    d, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    head_dim = d // heads
    layers = config["num_hidden_layers"]
    max_seq = config.get("max_position_embeddings", 4096)
    # (in, out) of q, k, v, output_proj, w1, w2, w3 in the order the builder makes them
    shapes = [(d, heads * head_dim), (d, kv * head_dim), (d, kv * head_dim), (heads * head_dim, d),
              (d, inter), (inter, d), (d, inter)]
    rope = max_seq * (head_dim // 2) * 2 * 4  # RotaryPositionalEmbeddings cache: (max_seq, dim/2, 2) float32
    r = _Replay()

    def lora(n_in: int, n_out: int) -> list:
        return [r.a(rank * n_in * 2), r.a(n_out * rank * 2)]

    # 1. the builder's one layer: each projection made in bf16, quantized, its bf16 weight dropped
    first = []
    for n_in, n_out in shapes:
        w = r.a(2 * n_in * n_out)
        first.append(from_tensor(r, n_in * n_out, chunked))
        r.f(w)
        first.append(lora(n_in, n_out))
    first.append([r.a(rope), r.a(2 * d), r.a(2 * d)])
    embedding, output = r.a(2 * vocab * d), r.a(2 * vocab * d)
    # 2. one deep copy per layer: NF4 weights dequantized and quantized again, the rest cloned
    copies = []
    for _ in range(layers):
        kept = []
        for n_in, n_out in shapes:
            n = n_in * n_out
            w = get_original_weight(r, n)
            kept.append(from_tensor(r, n, chunked))
            r.f(w)
            kept.append(lora(n_in, n_out))
        kept.append([r.a(rope), r.a(2 * d), r.a(2 * d)])
        copies.append(kept)
    for blocks in first:  # the builder's layer is dropped when the builder returns
        r.f(*blocks)
    final_norm = r.a(2 * d)
    # 3. load_state_dict: each checkpoint weight moved to the device in bf16 and quantized into the parameter
    for kept in copies:
        for k, (n_in, n_out) in enumerate(shapes):
            n = n_in * n_out
            src = r.a(2 * n)
            new = from_tensor(r, n, chunked)
            r.f(src)
            r.f(*kept[2 * k])
            kept[2 * k] = new
    m = r.model
    return Setup(m.allocated, m.reserved, m.max_allocated, r.live, r.max_live)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, help="a Llama-shaped config.json (default: Llama-2-7B's shape)")
    ap.add_argument("--rank", type=int, default=8, help="LoRA rank (default 8, the 7B_qlora_single_device config)")
    ap.add_argument("--chunked", action="store_true", help="torchao 0.2's chunked quantization instead of 0.1's")
    args = ap.parse_args(argv)
    config = json.loads(args.config.read_text()) if args.config else LLAMA_2_7B
    s = replay_setup(config, rank=args.rank, chunked=args.chunked)
    print(f"torchao {'0.2 (chunked)' if args.chunked else '0.1'}: after the setup "
          f"allocated {s.allocated / 1e9:.2f} GB, reserved {s.reserved / 1e9:.2f} GB; "
          f"allocated peak {s.max_allocated / 1e9:.2f} GB")
    if not args.config and not args.chunked and args.rank == 8:
        print(f"published (torchtune QLoRA tutorial, 0914d5c): reserved after model init "
              f"{PUBLISHED_INIT_RESERVED / 1e9:.2f} GB ({s.reserved / PUBLISHED_INIT_RESERVED - 1:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
