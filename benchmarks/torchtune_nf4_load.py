"""The caching allocator's reserve left by torchtune 0.1's QLoRA model setup, replayed through vramwise's
model of the allocator.

The replay itself is vramwise's (engine/profiles/nf4_setup.py, whose docstring cites each step; the torchtune
profile reads it with ``nf4_quantize: whole``); this script runs it on a Llama-shaped config and prints the
reserve beside the one the torchtune QLoRA tutorial at that release (docs/source/tutorials/qlora_finetune.rst,
commit 0914d5c) publishes for Llama-2-7B after model init, 9.13 GB (7B_qlora_single_device: every attention and
MLP projection adapted, rank 8).

    python benchmarks/torchtune_nf4_load.py                       # Llama-2-7B's shape, torchao 0.1
    python benchmarks/torchtune_nf4_load.py --chunked             # the same setup with torchao 0.2's chunks
    python benchmarks/torchtune_nf4_load.py --config config.json  # another Llama-shaped config
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vramwise.profiles.nf4_setup import CHUNK, Setup, replay_setup as _replay

#: Llama-2-7B (meta-llama/Llama-2-7b-hf config.json; torchtune's llama2_7b builder)
LLAMA_2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
              "num_key_value_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000,
              "max_position_embeddings": 4096}

#: the tutorial's published reserve after model init (GB = 10^9 bytes: torchtune 0.1 utils/memory.py divides by 1e9)
PUBLISHED_INIT_RESERVED = 9.13e9


def replay_setup(config: dict, *, rank: int = 8, chunked: bool = False) -> Setup:
    """torchtune 0.1's QLoRA setup (every attention and MLP projection adapted and quantized, the output head
    in bf16) of a Llama-shaped ``config``, replayed through the allocator model (one rotary cache per layer,
    float32 (max_seq, head_dim / 2, 2), as torchtune 0.1's llama2 builder puts one in each layer)."""
    d, heads = config["hidden_size"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    head_dim = d // heads
    rope = config.get("max_position_embeddings", 4096) * (head_dim // 2) * 2 * 4
    return _replay(hidden=d, q_dim=heads * head_dim, kv_dim=kv * head_dim, mlp_width=config["intermediate_size"],
                   layers=config["num_hidden_layers"], vocab=config["vocab_size"], rope_bytes=rope, rank=rank,
                   chunked=chunked)


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
