"""``vramwise measure``: run real training steps of a randomly initialised model and report its memory."""

from __future__ import annotations

from vramwise.profiles.settings import ADAPTER_METHODS
from vramwise.surfaces.cli.common import show_recipe, with_recipe
from vramwise.surfaces.cli.format import count, print_json, write_wrapped

#: What ``measure`` runs when a flag is not given: estimate's default where measure can run it, else the nearest
#: runnable setting (flash attention and Unsloth's checkpointing are not available to plain transformers on CPU).
_MEASURE_DEFAULTS = {"method": "qlora", "batch_size": 4, "seq_len": 2048, "lora_rank": 16,
                     "gradient_checkpointing": "true", "attention": "sdpa", "optimizer": "adamw_8bit"}


def _measure_settings(args) -> tuple[dict, list[str]]:
    """The settings measure runs, and what was changed from estimate's defaults to make them runnable."""
    chosen, changed = {}, []
    for name, default in _MEASURE_DEFAULTS.items():
        value = getattr(args, name)
        chosen[name] = default if value is None else value
    if args.gradient_checkpointing is None:
        changed.append("checkpointing true (Unsloth's is not runnable here)")
    if args.attention is None:
        changed.append("attention sdpa (flash_attention_2 is not runnable here)")
    if args.fake:
        if args.method is None:
            chosen["method"] = "lora"
            changed.append("method lora (QLoRA cannot be simulated with fake tensors)")
        if args.optimizer is None:
            chosen["optimizer"] = "adamw_torch"
            changed.append("optimizer adamw_torch (8-bit AdamW cannot be simulated with fake tensors)")
    if args.strategy is not None:
        if args.method is None and args.stack == "hf" and args.strategy != "ddp":
            chosen["method"] = "lora"
            changed.append(f"method lora (QLoRA is measured with --strategy ddp on the hf stack, not {args.strategy})")
        if args.optimizer is None:
            chosen["optimizer"] = "adamw_torch"
            changed.append(f"optimizer adamw_torch (torch's own AdamW under --strategy {args.strategy})")
    return chosen, changed


#: The settings a recipe gives measure, beside _MEASURE_DEFAULTS' (the flags of the same names win).
_RECIPE_FLAGS = ("target_modules", "lora_dropout", "loss", "loss_chunks", "activation_offloading", "optimizer_in_bwd",
                 "kbit_prepare", "strategy", "world_size", "offload", "fsdp_head_units")


def _apply_recipe(args) -> list[str]:
    """Fill the flags not given from the recipe (--recipe); what measure cannot run is changed and said."""
    from vramwise.surfaces.cli.common import recipe_of

    recipe = recipe_of(args)
    if recipe is None:
        if args.model is None:
            from vramwise.surfaces.cli.parser import BadValue

            raise BadValue("give a MODEL (config.json, folder or hub id), or --recipe FILE")
        return []
    if recipe.model is None:
        from vramwise.errors import SettingsError

        raise SettingsError(f"{recipe.path or 'the recipe'} names no model: give MODEL or --set model=ORG/NAME")
    from vramwise.models.stack_manifest import stack_manifest

    manifest = stack_manifest()
    given = getattr(args, "given_flags", set())
    changed = []
    args.model = recipe.model
    for name in (*_MEASURE_DEFAULTS, *_RECIPE_FLAGS):
        if name in given or (name in _MEASURE_DEFAULTS and getattr(args, name) is not None) or name not in recipe.settings:
            continue
        value = recipe.settings[name]
        if isinstance(value, tuple):
            value = ",".join(value)
        if name == "strategy" and value == "none":
            value = None
        if name == "world_size" and recipe.settings["strategy"] == "none":
            value = None
        runnable = manifest.substitute(name, value)  # a setting measure cannot run: formulas/stacks.yaml
        if runnable is not None:
            changed.append(f"{name.replace('_', ' ')} {runnable.runs} (the recipe's {value} is not runnable here)")
            value = runnable.runs
        setattr(args, name, value)
    if "stack" not in given:
        args.stack = manifest.stack_of_profile(recipe.profile)
    return changed


def run(args, out) -> int:
    import warnings

    from vramwise.measuring.steps import measure

    from_recipe = _apply_recipe(args)
    chosen, changed = _measure_settings(args)
    changed = from_recipe + changed
    with warnings.catch_warnings():  # deprecation notices of the libraries measured are not the user's concern
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        m = measure(
            args.model, target_modules=args.target_modules, steps=args.steps, device=args.device, fake=args.fake,
            lora_dropout=args.lora_dropout, stack=args.stack, loss=args.loss, loss_chunks=args.loss_chunks,
            activation_offloading=args.activation_offloading, optimizer_in_bwd=args.optimizer_in_bwd,
            kbit_prepare=args.kbit_prepare, strategy=args.strategy, world_size=args.world_size, offload=args.offload,
            compile=args.compile, fsdp_head_units=args.fsdp_head_units, **chosen,
        )
    if args.json:
        print_json(with_recipe(args, m.to_dict()), out)
        return 0
    show_recipe(args, out)
    unit, scale = ("GiB", 2**30) if m.peak >= 2**30 else ("MiB", 2**20)

    def size(n: int) -> str:
        return f"{n / scale:,.2f}"

    s = m.settings
    out.write(f"{args.model}: {m.method} on {m.device}, {count(m.params_total)} parameters, {count(m.params_trainable)} trainable\n")
    ran = [s["method"], f"batch {s['batch_size']}", f"seq {s['seq_len']}"]
    if s["method"] in ADAPTER_METHODS:
        ran.append(f"rank {s['lora_rank']}")
    ran += [f"checkpointing {s['gradient_checkpointing']}", s["optimizer"], s["attention"]]
    if s.get("compile"):
        ran.append("torch.compile (the allocator's reports counted)" if m.device == "cpu" else "torch.compile")
    if args.stack != "hf":
        ran.insert(0, f"stack {args.stack}")
        ran += [f"loss {s['loss']}" + (f" in {s['loss_chunks']} chunks" if s["loss"] == "chunked" else "")]
        ran += [n.replace("_", " ") for n in ("activation_offloading", "optimizer_in_bwd") if s[n]]
    if m.strategy is not None:
        ran.insert(0, f"{m.strategy} on {m.world_size} processes"
                   + (f", offload {s['offload']}" if s.get("offload", "none") != "none" else "")
                   + (", the embeddings and the output as units of their own" if s.get("fsdp_head_units") else ""))
    out.write(f"ran: {', '.join(ran)}, {args.steps} step(s)" + (" (fake tensors)" if args.fake else "") + "\n")
    if changed:
        write_wrapped(out, "estimate's defaults where runnable; changed: " + "; ".join(changed))
    out.write(f"peak: {size(m.peak)} {unit} of tensors, in the {m.peak_phase} phase"
              + (" (the highest rank's; phases below: the highest rank in each)" if m.per_rank else "") + "\n")
    for r in m.per_rank or ():
        per_phase = ", ".join(f"{name} {size(ph.peak)}" for name, ph in r.phases.items() if name != "load")
        out.write(f"rank {r.rank}: peak {size(r.peak)} {unit} in the {r.peak_phase} phase ({per_phase})\n")
    if m.reserved_peak is not None:
        out.write(f"reserved by the caching allocator: {size(m.reserved_peak)} {unit}\n")
    if m.modelled_reserved_peak is not None and m.peak:
        write_wrapped(out, f"reserved by torch's CUDA caching allocator for the same allocations, as vramwise models "
                      f"it (default configuration, one stream): {size(m.modelled_reserved_peak)} {unit}, "
                      f"{m.modelled_reserved_peak / m.peak - 1:+.1%} on the tensor peak")
    if m.process_bytes is not None:
        out.write(f"process memory (NVML, CUDA context included): {size(m.process_bytes)} {unit}\n")
    keys = ("parameters", "gradients", "optimizer_state", "activations_and_temporaries")
    if any("gradient_buckets" in ph.categories for ph in m.phases.values()):  # DDP's
        keys += ("gradient_buckets",)
    out.write(f"\n{'phase':<10} {'peak ' + unit:>9} {'end ' + unit:>9}  at its end ({unit}): "
              + " / ".join(k.replace("_", " ") for k in keys) + "\n")
    for name, ph in m.phases.items():
        c = ph.categories
        cats = " / ".join(size(c.get(k, 0)) for k in keys)
        out.write(f"{name:<10} {size(ph.peak):>9} {size(ph.end):>9}  {cats}\n")
    for n in m.notes:
        out.write(f"note: {n}\n")
    return 0
