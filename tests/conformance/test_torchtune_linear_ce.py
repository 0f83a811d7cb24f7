"""The torchtune profile's linear_chunked loss against LinearCrossEntropyLoss run on the CPU.

LinearCrossEntropyLoss is in torchtune's main branch after 0.6.1 only (no release has it), so it is not in
the torchtune installed here: its forward, mask_inputs and compute_cross_entropy are copied below from
pytorch/torchtune bd2a0fc7 torchtune/modules/loss/cross_entropy_loss.py:104-188 (the DTensor branches
left out), run on a bf16 output projection and bf16 hidden states, and the live tensor bytes counted by
the tracker `vramwise measure` uses (engine/measuring/tracker.py, unrounded here). The independent
figures are the peaks of the loss's forward and of its backward, above the weight, the hidden states'
source and the labels; they must equal the profile's loss terms, plus what the profile leaves out (the
int64 indices and masked targets, 8 bytes a token each, and the loss's scalars), less at most a row of
each chunk the profile counts at the largest chunk's size (loss_chunk_rows, one more than the last
chunks' when the chunks do not divide the tokens).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from vramwise import estimate  # noqa: E402
from vramwise.measuring.tracker import StorageTracker  # noqa: E402

V, H = 1000, 256
CONFIG = {"model_type": "llama", "vocab_size": V, "hidden_size": H, "intermediate_size": 768,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
          "max_position_embeddings": 4096}


def linear_cross_entropy(linear, outputs, targets, num_output_chunks, ignore_index=-100):
    # LinearCrossEntropyLoss.forward with mask_inputs and compute_cross_entropy inlined (bd2a0fc7 :107-186)
    total_valid_tokens = torch.where(targets != ignore_index)[0].numel()
    targets = targets.reshape(-1)
    outputs = outputs.reshape(-1, outputs.shape[-1])
    indices = torch.where(targets != ignore_index)[0]
    outputs = outputs.index_select(0, indices)
    targets = targets.index_select(0, indices)
    hidden_chunks = outputs.tensor_split(num_output_chunks, dim=0)
    target_chunks = targets.tensor_split(num_output_chunks, dim=0)
    total_loss = torch.tensor(0.0)
    for hidden_chunk, target_chunk in zip(hidden_chunks, target_chunks):
        logits = linear(hidden_chunk)
        loss = F.cross_entropy(logits.float(), target_chunk, reduction="sum", ignore_index=ignore_index)
        total_loss += loss
    return total_loss / total_valid_tokens


def measured(method, batch, seq, chunks):
    torch.manual_seed(0)
    tracker = StorageTracker(granularity=1)
    head = torch.nn.Linear(H, V, bias=False, dtype=torch.bfloat16)
    head.weight.requires_grad_(method == "full")
    source = torch.randn(batch, seq, H, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (batch, seq))
    for t in (head.weight, source, labels):
        tracker.add(t)
    start = tracker.current
    with tracker.mode():
        outputs = source * 1  # the model's output, not a leaf
        loss = linear_cross_entropy(head, outputs, labels, chunks)
        forward = tracker.peak - start
        del outputs  # recipes/lora_finetune_single_device.py:600 (del outputs)
        tracker.reset_peak()
        loss.backward()
        backward = tracker.peak - start
    return forward, backward


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("batch, seq, chunks", [(3, 500, 8), (3, 500, 64), (3, 500, 1), (2, 512, 8)])
def test_loss_peaks_match_the_run(method, batch, seq, chunks):
    e = estimate(CONFIG, profile="torchtune", method=method, batch_size=batch, seq_len=seq, loss="linear_chunked",
                 loss_chunks=chunks, optimizer="adamw_torch", gradient_checkpointing="none")
    v = {t.id: t.value for t in e.trace if t.layer_indices is None}
    tokens = batch * seq
    # the head's saved input (head_saved_bytes' bf16 term, the masked copy the chunks' projections save)
    head_input = tokens * H * 2 if method == "full" else 0
    forward = v["logits_saved_bytes"] + v["logits_forward_transient_bytes"] + head_input
    backward = max(v["logits_saved_bytes"] + v["logits_backward_bytes"], v["linear_loss_backward_bytes"]) + head_input
    # the int64 indices (saved by index_select) and masked targets (saved by nll_loss); a single chunk's
    # nll_loss holds the only reference to the targets and frees them when its backward has run
    left_out = 2 * tokens * 8
    left_out_backward = left_out if chunks > 1 else tokens * 8
    run_forward, run_backward = measured(method, batch, seq, chunks)
    # one row more than the scored chunk's: its bf16 logits and float32 copy (forward); its two float32
    # gradients or its log-probabilities, its bf16 logits' gradient and two input gradients (backward)
    row = V * (2 + 4) if tokens % chunks else 0
    scalars = 64
    assert -row <= run_forward - (forward + left_out) <= scalars
    assert -(2 * row + 2 * H * 2) <= run_backward - (backward + left_out_backward) <= scalars
