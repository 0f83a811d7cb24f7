#!/usr/bin/env python3
"""Write docs/recipes.md from the recipe formats (frameworks/*.yaml): for each format, how each setting
is read (key, conditions, value map) and the framework's defaults with their sources; then the launchers
of launch lines (frameworks/launchers.yaml): their programs, the flags read and what each gives.

    python scripts/build_recipe_docs.py [--check]

``--check`` compares with the file on disk instead of writing it (exit 1 when it is out of date);
tests/unit/recipes/test_recipe_docs.py runs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "recipes.md"

INTRO = """\
# Training recipes

vramwise reads the configuration files people already train with and estimates the run they
describe. Nothing is translated by hand: the batch, sequence length, LoRA rank and targets,
checkpointing, optimizer, loss, DeepSpeed stage, FSDP and process count come from the files.

```bash
vramwise estimate --recipe examples/recipes/axolotl-qlora.yaml
vramwise fit --recipe train.yaml --recipe accelerate.yaml --gpu "RTX 4090"   # a recipe and a part that completes it
vramwise explain --recipe lora.yaml --set seq_len=4096 --batch-size 1        # overrides: --set or the setting's flag
```

```python
import vramwise

recipe = vramwise.read_recipe("train.yaml")            # or a mapping, or a list: [recipe, ds_config.json]
recipe.settings["batch_size"], recipe.origins["batch_size"].describe()   # 2, 'train.yaml:31 micro_batch_size'
vramwise.estimate(recipe).total
vramwise.fit(recipe, gpu="H100").advice                 # what to change, written in the recipe's own keys
```

## How a recipe is read

- **The format** is told from the content (each format weighs the keys it knows); when two
  formats tie, or the content is not enough, name it: `--framework torchtune` or
  `read_recipe(..., framework="torchtune@0.6.1")`.
- **The release** a recipe is read under: the one `--framework NAME@VERSION` (`framework="litgpt@0.5.9"`)
  names, which must be a release the format file lists (another is one error line listing them); else
  the newest release the recipe's own keys allow; else the newest release the format knows. Keys that
  tell a release are data, `framework.release_signals` in the format file: each holds conditions on the
  recipe's keys, the releases from which (`since`) and before which (`until`) they are read, and the
  source line. LitGPT's `train.max_time` exists only from 0.5.11 (`args.py:31`): a recipe with it is read
  under the newest release from 0.5.11 and its heading says so (`litgpt 0.5.13, as its keys tell:
  train.max_time (...): releases from 0.5.11`); named with `--framework litgpt@0.5.10`, it is read under
  0.5.10 with a warning that its keys say otherwise. Keys that allow no known release are warned, and the
  newest is read. A default or a rule that changed between
  releases is dated (`since:` / `until:` in the format file, each with the source line at its
  release); the recipe's heading and each default's origin name the release read
  (`litgpt 0.5.13 default (...)`). A key that changes memory but is not modelled can be dated the same
  way, and is then warned only under those releases. Each format's section below lists the releases it
  knows and what changed at each. The transformers format's releases are TRL's (`--framework trl@1.7.0`):
  the defaults that change are SFTConfig's, ModelConfig's and SFTTrainer's, and each release names the
  transformers release its TrainingArguments was read beside.
- **Parts**: a key that names another file (axolotl's and LLaMA-Factory's `deepspeed:`,
  TrainingArguments' `deepspeed`, accelerate's `deepspeed_config_file`) is read relative to the
  file that names it. Further parts can be given: `--recipe train.yaml --recipe accelerate.yaml`.
- **Each setting** takes the first value found: the flags given on the command line and `--set`
  (or `overrides=`); the launch line (`--launch`, below); the recipe's own keys (the main file first, then its parts); the frameworks'
  defaults (of the release read, with the framework's source file); vramwise's
  default. `Recipe.origins` says which for every setting; `explain --recipe` prints them all.
- **What the framework does to the recipe** is said beside the value: a rule that replaces a setting
  (LitGPT builds bitsandbytes' PagedAdamW whatever AdamW a `quantize: bnb.*` recipe names) gives its
  words in the origin (`Origin.rule`); a recipe word that a format maps to another vramwise name is
  shown with it, `adamw_8bit (recipe: adamw_bnb_8bit)` (`Origin.written`); a target keyword
  (`all-linear`, `lora_target_linear: true`) is shown with the modules the estimate adapts on the
  model.
- **Warnings, not failures**: a key vramwise does not know is named in a warning; a key that changes
  memory but is not modelled (Liger kernels other than the fused loss, sample packing, NEFTune...)
  is named with the reason. A key with a value of the wrong type, a file that is not a recipe or a
  referenced file that does not exist is an error naming the file, line and key.
- **The profile** follows the framework: `torchtune`, `litgpt`, `hf` for transformers / TRL /
  axolotl / LLaMA-Factory, `unsloth` where the recipe uses Unsloth. A multi-GPU strategy that the
  framework's profile does not model is estimated with the profile that does (a warning says so).
- The page of `vramwise serve` takes a recipe upload; files it names are not read there (upload
  them as further parts).

## Launch lines

The command the run is started with, pasted in quotes, gives the world size, the nodes and the
multi-GPU strategy, and names the recipe files:

```bash
vramwise estimate --launch "tune run --nproc_per_node 8 lora_finetune_distributed --config llama3_1/70B_lora"
vramwise estimate Qwen/Qwen3-8B --launch "deepspeed --num_gpus 8 train.py --deepspeed ds_config.json"
vramwise fit examples/llama-3.1-8b.json --gpu H100 --profile hf --launch "torchrun --nproc_per_node 4 train.py"
```

- **Figures**: processes per node times nodes is the world size (accelerate's `--num_processes`
  counts every machine's processes already); the processes per node are also the GPUs per node.
  `--nproc_per_node gpu` (or `auto`, or no count where the launcher starts one process per GPU)
  counts `CUDA_VISIBLE_DEVICES=0,1,...` when the line sets it; otherwise the count is not stated:
  the world size is left unset and a note says so. It is never guessed. `--nnodes 1:4` (an elastic
  range) and a DeepSpeed hostfile leave the nodes unstated the same way.
- **Strategy**: a word of the line that names one (`--use_fsdp`, `--zero_stage 3`,
  `--fsdp_sharding_strategy`, a torchtune recipe whose name ends in `_distributed`: FSDP); the
  `deepspeed` launcher's ZeRO stage is the DeepSpeed config's (`--deepspeed FILE`, read as a part
  of the recipe), and so is any launcher's when the line names a DeepSpeed config; an accelerate
  config named (`--config_file`) holds the strategy likewise. A launcher that only implies one
  (torchrun or accelerate on several processes: DDP; LitGPT on several devices: FSDP) gives way to a
  recipe's own key (an axolotl or LLaMA-Factory recipe's `deepspeed:` file).
  A world size is the ranks of a strategy: where neither the line, nor the recipe, nor a flag
  states one, the line's world size is not used, and a note says so.
- **Profile**: a launcher that runs one stack (`tune run`: torchtune's; `litgpt`: LitGPT's; `accelerate`,
  `deepspeed`, `axolotl`, `llamafactory-cli`: transformers + PEFT, the `hf` profile) gives the default
  profile of that framework's recipe format where no recipe is read and `--profile` is not given;
  `torchrun` runs a script of any stack and gives none. A recipe read decides its own profile.
- **Order**: the flags given (`--world-size`, `--strategy`, `--gpus-per-node`, `--set`) win over the
  line, and the line over the recipe's keys; `--recipe` wins over the files the line names (they are
  then not read). The settings table says `launch line --nproc_per_node 8` where a value came from.
- **Files**: the recipe files the line names (`--config`, `--config_file`, `--deepspeed`, a positional
  YAML) are read as the recipe when they exist, the main recipe first. tune-style `key=value`
  overrides are listed, not applied.
- **Shipped configs**: a torchtune config named rather than given as a file (`--config
  llama3_1/70B_lora`) is the config torchtune's release ships: vramwise carries the 156 configs of
  torchtune 0.6.1 (`frameworks/torchtune_configs/0.6.1/`, with torchtune's BSD-3 license, written by
  `scripts/build_torchtune_configs.py`) and reads the one named as the recipe; the settings table
  says `torchtune 0.6.1's shipped config llama3_1/70B_lora:19 model.lora_rank`. The release is the
  one the format is pinned to; `--framework torchtune@VERSION` names another (an error says which
  releases are shipped). An unknown name is one error line with the nearest names. A config's
  model outside the offline catalog (`llama3_1/70B_lora` builds Llama 3.1 70B) is replaced by the
  model argument (a local config.json). `--recipe` takes files only: a config is named on the
  launch line (a config's name given to `--recipe` is an error line that writes that launch line;
  `--recipe FILE` wins over the line's config).
- **The config's header**: torchtune's configs say how they are launched in their leading comment
  (`#   tune run --nproc_per_node 8 lora_finetune_distributed --config llama3_1/70B_lora`). Where
  no launch line is given, a recipe of a format with a `header_launch` rule (torchtune's) takes the
  first such line of its header as its launch line: its figures say `in the header comment of
  70B_lora.yaml:9`, and the recipe's own keys, a `--launch` given and the flags win over them.
- **Text**: backslash continuations, several lines, quotes, comments, environment prefixes
  (`CUDA_VISIBLE_DEVICES`, LLaMA-Factory's `NNODES` / `NPROC_PER_NODE`) and a module run by
  another launcher (`accelerate launch -m axolotl.cli.train config.yml`) are read. An unknown
  program, an unbalanced quote (its column), a count that is not a number or a line of more than
  10,000 characters is one error line.
- **Server**: the body's `launch` field is read the same way; no file it names is read (a note names
  each, unless an uploaded recipe part has its name), but a shipped config it names is (it is
  vramwise's data) where no recipe is uploaded.
- **Python**: `vramwise.recipes.read_launch(text)` returns a `LaunchLine` (the figures, the words each
  came from, the strategy, the files by role, the notes); `read_recipe(paths, launch=line)` reads a
  recipe under it.

The rest of this page is generated from the format files (`frameworks/*.yaml`, schema
`schemas/recipe-format-1.schema.json`) and the launchers (`frameworks/launchers.yaml`, schema
`schemas/launchers-1.schema.json`) by `scripts/build_recipe_docs.py`.
"""


def _value(v) -> str:
    from vramwise.recipes.formats import canon

    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return canon(v)


def _cond(c) -> str:
    from vramwise.recipes.formats import MISSING

    if c.equals is not MISSING:
        return f"`{c.key}` is {'absent' if c.equals is None else _value(c.equals)}"
    if c.within is not None:
        return f"`{c.key}` in {{{', '.join(c.within)}}}"
    if c.not_within is not None:
        return f"`{c.key}` not in {{{', '.join(c.not_within)}}}"
    if c.matches is not None:
        return f"`{c.key}` matches `{c.matches.pattern}`"
    if c.present is not None:
        return f"`{c.key}` {'present' if c.present else 'absent'}"
    return f"`{c.key}` {'set' if c.truthy else 'unset'}"


def _rule(r) -> str:
    if r.key is not None:
        text = f"`{r.key}`"
        if r.match is not None:
            text += f" (the part matching `{r.match.pattern}`)"
        if r.mapping:
            text += " (" + ", ".join(f"{k} → {_value(v)}" for k, v in r.mapping.items()) + ")"
        if r.divide_by:
            text += f" / `{r.divide_by}`"
    else:
        text = _value(r.value)
    if r.when:
        text += " when " + " and ".join(_cond(c) for c in r.when)
    if r.when_any:
        text += (" and " if r.when else " when ") + "one of " + ", ".join(_cond(c) for c in r.when_any)
    if r.description:
        text += f" ({' '.join(r.description.split())}; source: {' '.join((r.source or '').split())})"
    return text.replace("|", "\\|")


def _span(r) -> str:
    """The releases a dated rule applies to, as the table says them (empty for an undated rule)."""
    span = []
    if r.since:
        span.append("from " + ".".join(map(str, r.since)))
    if r.until:
        span.append("before " + ".".join(map(str, r.until)))
    return " (" + ", ".join(span) + ")" if span else ""


def _default(r) -> str:
    text = _rule(r) + _span(r)
    if r.source:
        text += f"; source: {r.source}"
    return text.replace("|", "\\|").replace("\n", " ")


def _table(title: str, groups: dict) -> list[str]:
    if not groups:
        return []
    out = [f"| {title} | read from (first that applies) | framework default |", "|---|---|---|"]
    for name, rules in groups.items():
        read = "<br>".join(_rule(r) + _span(r) for r in rules if not r.default) or "—"
        default = "<br>".join(_default(r) for r in rules if r.default) or "—"
        out.append(f"| `{name}` | {read} | {default} |")
    return out + [""]


def _releases(fmt) -> list[str]:
    """What the page says of the releases a format knows."""
    if not fmt.releases:
        return [f"Releases: {fmt.version} only (the pinned release; a recipe is read under it).", ""]
    out = [f"Releases (read under the newest, {fmt.newest.version}, unless `--framework {fmt.name}@VERSION` names "
           "another):", ""]
    for r in reversed(fmt.releases):
        note = f": {' '.join(r.note.split())}" if r.note else ""
        out.append(f"- {r.version} ({r.date}; {' '.join(r.source.split())}){note}")
    return out + [""]


def render() -> str:
    from vramwise.recipes.formats import Formats

    formats = Formats.load(ROOT / "frameworks", validate=True)
    lines = [INTRO]
    for fmt in sorted(formats, key=lambda f: (f.part, f.name)):
        lines.append(f"## {fmt.name}")
        lines.append("")
        lines.append(" ".join(fmt.description.split()))
        lines.append("")
        lines.append(f"Framework: {fmt.framework} {fmt.version} (keys defined in {fmt.source})"
                     + (f"; also named {', '.join(fmt.aliases)}" if fmt.aliases else "")
                     + ("; a part that completes a recipe" if fmt.part else "") + ".")
        lines.append("")
        lines += _releases(fmt)
        signals = ", ".join(f"`{k}`" + (f" matching `{rx.pattern}`" if rx else "") + f" ({w})" for k, w, rx in fmt.signals)
        lines.append(f"Recognised by: {signals}" + (f"; requires {', '.join(f'`{k}`' for k in fmt.requires)}"
                                                     if fmt.requires else "") + ".")
        lines.append("")
        lines += _table("setting", dict(fmt.settings))
        other = {}
        if fmt.model:
            other["model"] = fmt.model
        if fmt.profile:
            other["profile"] = fmt.profile
        other.update(fmt.extras)
        lines += _table("other value", other)
        if fmt.header_launch is not None:
            lines.append(f"Launch line: the first `{fmt.header_launch[0]}` line of a file's leading comment, where no "
                         f"launch line is given ({' '.join(fmt.header_launch[1].split())}).")
            lines.append("")
        if fmt.shipped_configs is not None:
            lines.append(f"Shipped configs: `frameworks/{fmt.shipped_configs[0]}/<release>/`, by the name a launch line "
                         f"gives ({' '.join(fmt.shipped_configs[1].split())}).")
            lines.append("")
        if fmt.references:
            lines.append("Files it names: " + "; ".join(f"`{k}` ({t}: {d})" for k, t, d in fmt.references) + ".")
            lines.append("")
        if fmt.unmodelled:
            lines.append("Keys that change memory but are not modelled (named in a warning):")
            lines.append("")
            for key, conds, why, since, until in fmt.unmodelled:
                when = (" when " + " and ".join(_cond(c) for c in conds)) if conds else ""
                when += "".join(f" ({word} {'.'.join(map(str, v))})" for word, v in
                                (("from release", since), ("before release", until)) if v is not None)
                lines.append(f"- `{key}`{when}: {' '.join(why.split())}")
            lines.append("")
        if fmt.write:
            lines.append("Advice writes: " + "; ".join(
                f"{name} as " + ", ".join(f"`{k}`" for keys in table.values() for k in keys)
                for name, table in fmt.write.items()) + ".")
            lines.append("")
        lines.append(f"Keys known not to change memory: {len(fmt.ignored)} (listed under `ignored` in "
                     f"frameworks/{Path(fmt.file).name}).")
        lines.append("")
    lines += _launchers()
    return "\n".join(lines).rstrip() + "\n"


def _gives(flag) -> str:
    if flag.gives == "strategy":
        if flag.mapping is not None:
            return "strategy: " + ", ".join(f"{k} → {v}" for k, v in flag.mapping.items())
        return "strategy " + ("from the DeepSpeed config" if flag.strategy == "deepspeed_config" else flag.strategy)
    if flag.gives == "file":
        role = {"config": "the recipe file", "accelerate": "an accelerate config file",
                "deepspeed": "a DeepSpeed config file"}[flag.role]
        return role + (" (or a config shipped with the framework, by name)" if flag.config_names else "")
    text = {"processes_per_node": "processes per node", "world_size": "processes in all (the world size)",
            "nodes": "nodes (N, or MIN:MAX: not stated)", "module": "the entry is a module (python -m)",
            "hostfile": "nodes from a hostfile (not stated)",
            "launcher": "the launcher the words after `--` go to"}[flag.gives]
    if flag.words:
        text += " (" + ", ".join(f"{k}: {'one per visible GPU' if v == 'visible' else 'not stated'}"
                                 for k, v in flag.words.items()) + ")"
    return text


def _flag_rows(flags, where: str = "") -> list[str]:
    seen, rows = set(), []
    for flag in flags.values():
        if flag.names in seen or flag.gives is None:
            continue
        seen.add(flag.names)
        rows.append(f"| {' / '.join(f'`{n}`' for n in flag.names)}{where} | {_gives(flag)} |")
    return rows


def _launchers() -> list[str]:
    from vramwise.recipes.launch import load_launchers

    launchers = load_launchers(ROOT / "frameworks" / "launchers.yaml", validate=True)
    lines = ["## launchers", "",
             "The launchers a launch line is read with (`frameworks/launchers.yaml`). A flag not listed is "
             "skipped (with the value after it); the table lists the flags that give something.", ""]
    for launcher in launchers.launchers:
        lines.append(f"### {launcher.name}")
        lines.append("")
        lines.append(f"{' '.join(launcher.description.split())}. Source: {' '.join(launcher.source.split())}.")
        lines.append("")
        lines.append("Started by: " + ", ".join(f"`{p}`" for p in launcher.program_texts()) + ".")
        entry = {"script": "a script (or a module, with -m)", "recipe": "a recipe's name or file",
                 "config": "the recipe file", "checkpoint": "the checkpoint folder"}[launcher.entry]
        lines.append(f"The first word after its flags is {entry}" +
                     ("; a YAML or JSON file after it is a recipe file" if launcher.positional_files else "") +
                     ("; `key=value` words after it are overrides (listed, not applied)" if launcher.overrides else "") +
                     ".")
        if launcher.format:
            lines.append(f"It runs the stack of the `{launcher.format}` format: without a recipe read or `--profile`, "
                         f"the estimate takes that format's default profile.")
        env = [f"`{n}` ({g.replace('_', ' ')})" for n, g in launcher.environment.items() if g]
        if env:
            lines.append("Environment: " + ", ".join(env) + ".")
        many = (f"; on more than one process, with nothing naming a strategy: {launcher.when_many[0]} "
                f"({' '.join(launcher.when_many[1].split())})") if launcher.when_many else ""
        if launcher.strategy_from:
            many += "; the strategy is the DeepSpeed config's"
        missing = "one per visible GPU" if launcher.missing_processes == "visible" else "not stated"
        lines.append(f"Without a count: {missing}; without nodes: {launcher.nodes_default} "
                     f"({' '.join(launcher.nodes_source.split())}){many}.")
        if launcher.passes_to:
            targets, default, source = launcher.passes_to
            named = ", ".join(f"{k} → {v if v is not None else 'no launcher (one process; not read)'}"
                              for k, v in targets.items())
            lines.append(f"The words after `--` (past its entry) are read with the flags of the launcher it runs under: "
                         f"{named}; {default} when none is named ({' '.join(source.split())}).")
        for regex, strategy, world_size, source in launcher.entry_rules:
            lines.append(f"A recipe matching `{regex.pattern}`: strategy {strategy}" +
                         (f" on {world_size} device" if world_size else "") + f" ({' '.join(source.split())}).")
        lines.append("")
        before = {f.names for f in launcher.flags.values()}
        rows = _flag_rows(launcher.flags) + _flag_rows(
            {n: f for n, f in launcher.after.items() if f.names not in before}, " (after it)")
        if rows:
            lines += ["| flag | gives |", "|---|---|", *rows, ""]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with docs/recipes.md instead of writing it")
    args = ap.parse_args()
    text = render()
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run python scripts/build_recipe_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
