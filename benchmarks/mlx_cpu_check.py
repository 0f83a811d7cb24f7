"""Step mlx-lm's own model as its trainer steps it, on MLX's CPU backend, and compare with the mlx profile.

    pip install "mlx[cpu]" "mlx-lm==0.31.3"     # Linux: MLX's CPU-only package
    python benchmarks/mlx_cpu_check.py

For each small llama shape it builds ``mlx_lm.models.llama.Model`` (random bf16 weights, or quantized with
``nn.quantize(model, 64, 4)``), adapts or unfreezes the last layers with mlx-lm's ``linear_to_lora_layers`` /
``unfreeze`` as ``mlx_lm/lora.py`` does, runs the compiled step of ``mlx_lm/tuner/trainer.py`` (``value_and_grad``
of ``default_loss`` and Adam's update, ``mx.compile`` over the model and optimizer state) three times on random
tokens, and prints the trainable parameters, the arrays resident before the third step and that step's
``mx.get_peak_memory()`` beside the profile's figures. The CPU backend takes the same unfused attention in
training as Metal does, but it is not Metal: this is a check of the counting, not a validation of the peak
(docs/profiles.md#mlx gives the figures it printed with MLX 0.32.4).
"""

from __future__ import annotations

from functools import partial

SHAPES = (  # (method, settings) on a 4-layer llama, hidden 256, 4 heads, MLP 1024, vocabulary 4096
    ("lora", {}),
    ("lora", {"seq": 512}),
    ("lora", {"seq": 512, "gc": True}),
    ("lora", {"lora_layers": 4, "batch": 4, "seq": 256}),
    ("full", {}),
    ("full", {"seq": 512}),
    ("qlora", {"seq": 256}),
    ("lora", {"keys": ["self_attn.q_proj", "self_attn.v_proj"], "seq": 256}),
    ("lora", {"seq": 64, "vocab": 32000}),
)


def measure(method, lora_layers=2, batch=2, seq=128, vocab=4096, rank=8, gc=False, keys=None):
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama
    from mlx_lm.tuner.trainer import default_loss, grad_checkpoint
    from mlx_lm.tuner.utils import linear_to_lora_layers

    args = llama.ModelArgs(model_type="llama", hidden_size=256, num_hidden_layers=4, intermediate_size=1024,
                           num_attention_heads=4, num_key_value_heads=4, rms_norm_eps=1e-5, vocab_size=vocab,
                           tie_word_embeddings=False)
    model = llama.Model(args)
    model.set_dtype(mx.bfloat16)
    if method == "qlora":
        nn.quantize(model, 64, 4)
    mx.eval(model.parameters())
    model.freeze()
    if method == "full":
        for layer in model.layers[-lora_layers:]:
            layer.unfreeze()
    else:
        config = {"rank": rank, "scale": 20.0, "dropout": 0.0, **({"keys": keys} if keys else {})}
        linear_to_lora_layers(model, lora_layers, config)
    trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    opt = optim.Adam(learning_rate=1e-5)
    if gc:
        grad_checkpoint(model.layers[0])
    loss_and_grad = nn.value_and_grad(model, default_loss)
    state = [model.state, opt.state, mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(tokens, lengths):
        (loss, _), grad = loss_and_grad(model, tokens, lengths)
        opt.update(model, grad)
        return loss

    tokens = mx.random.randint(0, vocab, (batch, seq + 1))
    lengths = mx.array([[0, seq + 1]] * batch)
    model.train()
    for _ in range(2):
        mx.eval(step(tokens, lengths), state)
    mx.clear_cache()
    mx.reset_peak_memory()
    resident = mx.get_active_memory()
    mx.eval(step(tokens, lengths), state)
    return trainable, resident, mx.get_peak_memory()


def _measured(shape):
    method, kw = shape
    return measure(method, **kw)


def main() -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import vramwise

    print(f"{'method':6} {'settings':56} {'trainable':>17} {'resident':>21} {'peak MB':>20} ratio")
    for method, kw in SHAPES:
        # each shape in a fresh process: MLX's peak in a process that stepped other shapes before differs
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            trainable, resident, peak = pool.submit(_measured, (method, kw)).result()
        config = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": kw.get("vocab", 4096),
                  "max_position_embeddings": 4096, "tie_word_embeddings": False}
        settings = {"method": method, "lora_layers": kw.get("lora_layers", 2), "batch_size": kw.get("batch", 2),
                    "seq_len": kw.get("seq", 128), "optimizer": "adam",
                    "gradient_checkpointing": "true" if kw.get("gc") else "none"}
        if method != "full":
            settings["lora_rank"] = 8
        if kw.get("keys"):
            settings["target_modules"] = [k.rsplit(".", 1)[-1] for k in kw["keys"]]
        e = vramwise.estimate(config, profile="mlx", **settings)
        held = e.weights + e.lora + e.figures["optimizer_state"]
        print(f"{method:6} {str(kw):56} {e.params_trainable:>8}/{trainable:<8} {held:>10,.0f}/{resident:<10,} "
              f"{e.total / 1e6:>9.2f}/{peak / 1e6:<9.2f} {e.total / peak:.3f}")


if __name__ == "__main__":
    main()
