"""Test doubles of the advice's tests: the settings an estimate stand-in carries."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """The settings the advice reads of an estimate (a stand-in's; FSDP unless a test names another)."""

    method: str = "full"
    batch_size: int = 8
    gradient_checkpointing: str = "none"
    optimizer: str = "adamw_torch"
    loss: str = "cross_entropy"
    strategy: str = "fsdp"
    offload: str = "none"
    lora_rank: int = 16
    seq_len: int = 1024
    gpus_per_node: int = 8
