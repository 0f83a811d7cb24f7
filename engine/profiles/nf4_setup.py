"""The caching allocator's reserve left by torchtune 0.1's QLoRA setup (torchao 0.1's NF4 quantization on the
GPU), replayed through vramwise's model of the allocator (:mod:`vramwise.profiles.caching_allocator`).

torchtune 0.1.x (April-May 2024) pinned torchao 0.1 (pyproject.toml at pytorch/torchtune fef3ed10, 0217d44c:
``"torchao==0.1"``). Its single-device LoRA recipe builds the model on the GPU in bf16
(recipes/lora_finetune_single_device.py ``_setup_model``: ``with utils.set_default_dtype(dtype), self._device:
config.instantiate(cfg_model)``), and three steps quantize every adapted projection to NF4 on the GPU, one
projection at a time:

1. the component builder makes one decoder layer: each adapted projection is an ``nn.Linear`` in bf16 that
   ``LoRALinear._create_weight_and_bias`` passes to ``to_nf4`` (torchtune modules/peft/lora.py lines 93-94);
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
``vramwise.measuring.tracker.StorageTracker``). :func:`setup_reserved_bytes` is what ``torch.cuda.memory_reserved``
reads after the setup; the torchtune profile reads it as ``torchao_nf4_setup_reserved`` (formulas/torchtune/reserve.yaml)
when ``nf4_quantize`` is ``whole``. The layer is built as torchtune's Llama-style builders build it: q, k, v and the
output projection, then the MLP's w1, w2, w3, each adapted and quantized, the rotary cache and two norms in each
layer; the embedding and the output head in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from vramwise.profiles.caching_allocator import CachingAllocatorModel, round_size

__all__ = ["BLOCK", "SCALER_BLOCK", "CHUNK", "Setup", "replay_setup", "setup_reserved_bytes", "from_tensor",
           "get_original_weight"]

#: torchao NF4: elements per quantization block and blocks per double-quantized scaler block
BLOCK = 64
SCALER_BLOCK = 256
#: torchao 0.2 nf4tensor.py CHUNK_SIZE
CHUNK = 1024 ** 2


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
    full, last = divmod(n, CHUNK)
    # every chunk frees all it takes, so a full chunk after the first meets the same cached blocks and takes
    # the same ones: two full chunks leave the allocator as any number of them do
    for c in [CHUNK] * min(full, 2) + ([last] if last else []):
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


def replay_setup(*, hidden: int, q_dim: int, kv_dim: int, mlp_width: int, layers: int, vocab: int,
                 rope_bytes: int, rank: int, chunked: bool = False, embedding_bytes: int | None = None,
                 head_bytes: int | None = None) -> Setup:
    """torchtune 0.1's QLoRA setup of a Llama-shaped model (every attention and MLP projection adapted and
    quantized, the output head in bf16), replayed through the allocator model. ``rope_bytes``: one layer's
    rotary buffers; the embedding and the head default to ``vocab x hidden`` bf16 each."""
    d = hidden
    embedding_bytes = 2 * vocab * d if embedding_bytes is None else embedding_bytes
    head_bytes = 2 * vocab * d if head_bytes is None else head_bytes
    # (in, out) of q, k, v, output_proj, w1, w2, w3 in the order the builder makes them
    shapes = [(d, q_dim), (d, kv_dim), (d, kv_dim), (q_dim, d), (d, mlp_width), (mlp_width, d), (d, mlp_width)]
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
    first.append([r.a(rope_bytes), r.a(2 * d), r.a(2 * d)])
    r.a(embedding_bytes)  # the embedding and the output head, kept by the model
    if head_bytes:  # none when tied
        r.a(head_bytes)
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
        kept.append([r.a(rope_bytes), r.a(2 * d), r.a(2 * d)])
        copies.append(kept)
    for blocks in first:  # the builder's layer is dropped when the builder returns
        r.f(*blocks)
    r.a(2 * d)  # the final norm
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


@lru_cache(maxsize=64)
def _reserved(args: tuple) -> int:
    hidden, q_dim, kv_dim, mlp_width, layers, vocab, rope_bytes, rank, chunked, embedding_bytes, head_bytes = args
    return replay_setup(hidden=hidden, q_dim=q_dim, kv_dim=kv_dim, mlp_width=mlp_width, layers=layers, vocab=vocab,
                        rope_bytes=rope_bytes, rank=rank, chunked=chunked, embedding_bytes=embedding_bytes,
                        head_bytes=head_bytes).reserved


#: The most layers the replay runs (about 4 ms a layer of Llama-2-7B's shape): a deeper model's reserve is
#: extended in a straight line from the replays of MAX_LAYERS / 2 and MAX_LAYERS layers (each further layer's copy
#: and load repeat the same sequence of requests), so an estimate's time stays bounded.
MAX_LAYERS = 512


def setup_reserved_bytes(hidden, q_dim, kv_dim, mlp_width, layers, vocab, rope_bytes, rank, chunked,
                         embedding_bytes, head_bytes) -> int:
    """What ``torch.cuda.memory_reserved`` reads after torchtune 0.1's QLoRA setup (see :func:`replay_setup`),
    for the expression language (positional numbers; ``chunked`` true for torchao 0.2 on). The replays are
    memoised by their arguments (``setup_reserved_bytes.cache_clear()`` resets them): an estimate's search
    over sequence lengths replays a model's setup once."""
    dims = tuple(max(0, int(v)) for v in (hidden, q_dim, kv_dim, mlp_width))
    rest = tuple(max(0, int(v)) for v in (vocab, rope_bytes, rank)) + (
        bool(chunked), max(0, int(embedding_bytes)), max(0, int(head_bytes)))
    layers = max(0, int(layers))
    if layers <= MAX_LAYERS:
        return _reserved(dims + (layers,) + rest)
    half = MAX_LAYERS // 2
    full, part = _reserved(dims + (MAX_LAYERS,) + rest), _reserved(dims + (half,) + rest)
    return full + (layers - MAX_LAYERS) * (full - part) // half


setup_reserved_bytes.cache_clear = _reserved.cache_clear  # type: ignore[attr-defined]
