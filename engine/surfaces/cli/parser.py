"""The command line's parser: every command and flag, and the types that read their values.

A bad argument raises :class:`CommandLineError` (the message and the command it belongs to) instead of
printing argparse's usage; :func:`vramwise.surfaces.cli.main.main` prints it in two lines and exits 2.
"""

from __future__ import annotations

import argparse
import math

from vramwise.errors import SettingsError
from vramwise.models.stack_manifest import runnable_names
from vramwise.profiles.settings import COMPARED_METHODS, DEFAULT_PROFILE, SETTINGS, STACKS, SWEEPABLE
from vramwise.inputs.sizes import parse_size, split_number
from vramwise.inputs.presets import PRESETS
from vramwise.measuring.strategies import STRATEGIES as MEASURED_STRATEGIES

#: sweepable settings the sweep parser reads as comma-separated lists
SWEEP_LISTS = SWEEPABLE


class CommandLineError(Exception):
    """A bad command-line argument, raised by the parsers instead of printing their usage."""

    def __init__(self, message: str, prog: str):
        super().__init__(message)
        self.prog = prog


class BadValue(Exception):
    """A bad argument value found after parsing (becomes a :class:`CommandLineError` of the running command)."""


class Parser(argparse.ArgumentParser):
    """argparse without the usage dump: an error raises :class:`CommandLineError` for ``main`` to print.
    A flag is never abbreviated: ``compare --method lora`` would otherwise be ``--methods lora`` and
    ``--gpu`` a prefix of more than one flag; an unknown flag is refused with the closest ones named."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def subparser(self, command: str) -> "Parser":
        """The parser of ``command``."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                return action.choices[command]
        return self

    def error(self, message: str):  # noqa: D401 - argparse's hook
        if message.startswith("unrecognized arguments:"):
            import difflib

            known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            unknown = [w.split("=", 1)[0] for w in message.split(":", 1)[1].split() if w.startswith("--")]
            # what the flag abbreviates (argparse's own abbreviation, off here), else the closest spellings
            close = [c for w in unknown
                     for c in ([o for o in known if o.startswith(w)][:3] or difflib.get_close_matches(w, known, n=2, cutoff=0.75))]
            if close:
                message += f" (did you mean {' or '.join(dict.fromkeys(close))}?)"
        raise CommandLineError(message, self.prog)


# -- argument types -------------------------------------------------------------------------

def bool_flag(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


_COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "bn": 10**9, "t": 10**12}
_PARAMS, _BYTES = "a parameter count", "a size in bytes"


def param_count(text: str) -> float:
    """A parameter count: ``8B``, ``7.5B``, ``70e9``, ``350M``, ``8000000000`` (K, M, B, T are decimal), in
    the number grammar of sizes."""
    parts = split_number(text)
    if parts is None or parts[1].lower() not in _COUNT_SUFFIXES:
        raise argparse.ArgumentTypeError(f"expected {_PARAMS} such as 8B, 7.5B, 350M or 70e9, got {text!r}")
    value = float(parts[0]) * _COUNT_SUFFIXES[parts[1].lower()]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite {_PARAMS}, got {text!r}")
    return int(value) if value.is_integer() else value


def byte_size(text: str) -> int:
    """A size in bytes by the one size parser, :func:`vramwise.inputs.sizes.parse_size`: ``16GB`` (10**9),
    ``15GiB`` (2**30), ``1.5e10``; KB/MB/TB and KiB/MiB/TiB too, and a bare number is bytes."""
    try:
        size = parse_size(text)
    except SettingsError:  # too large for a float
        raise argparse.ArgumentTypeError(f"expected a finite {_BYTES}, got {text!r}") from None
    if size is None:
        raise argparse.ArgumentTypeError(f"expected {_BYTES} such as 16GB, 15GiB or 1.6e10, got {text!r}")
    return size.bytes


def int_list(name: str, text: str, low: int = 1, high: int | None = None) -> list[int]:
    """Comma-separated whole numbers from ``low`` to ``high`` (the flag ``name`` in messages)."""
    values = []
    for part in str(text).split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        try:
            v = int(part)
        except ValueError:
            raise BadValue(f"{name} must be comma-separated whole numbers, got {text!r}") from None
        if v < low or (high is not None and v > high):
            raise BadValue(f"{name} must be whole numbers from {low:,}" + (f" to {high:,}" if high else "") + f", got {v}")
        values.append(v)
    if not values:
        raise BadValue(f"{name} needs at least one value, got {text!r}")
    return values


def name_list(text: str | None) -> list[str] | None:
    """Comma-separated names, blanks dropped (None stays None)."""
    if text is None:
        return None
    return [x.strip() for x in text.split(",") if x.strip()]


def headroom_share(text: str) -> float:
    """Headroom as the command line and the page's address write it: ``10%`` or ``0.1``."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share such as 0.1 or 10%, got {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= 0.9):
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 0.9 (or 0% to 90%), got {text!r}")
    return value


#: how each setting's flag reads its text, by ``Setting.cli_type`` (the page's address reads it the same way)
CLI_TYPES = {"int": int, "float": _finite, "bool": bool_flag, "str": str}


def _plot_path(text: str) -> str:
    if not text.lower().endswith((".png", ".svg")):
        raise argparse.ArgumentTypeError(f"the plot's file name must end in .png or .svg, got {text!r}")
    return text


# -- shared arguments -----------------------------------------------------------------------

def _preset_args(p: argparse.ArgumentParser) -> None:
    """A runtime preset's flags (estimate and fit): the preset, a Modelfile, the environment."""
    p.add_argument("--preset", choices=PRESETS, default=None,
                   help="a runtime that runs the llama.cpp profile with its own defaults (ollama: Ollama's num_ctx, "
                        "num_batch, num_gpu, ...); the settings' flags given win over it")
    p.add_argument("--modelfile", default=None, metavar="FILE",
                   help="an Ollama Modelfile: its PARAMETER lines (num_ctx, num_gpu, num_batch) as settings (--preset ollama)")
    p.add_argument("--ollama-env", action="store_true",
                   help="read OLLAMA_CONTEXT_LENGTH, OLLAMA_NUM_PARALLEL, OLLAMA_FLASH_ATTENTION and OLLAMA_KV_CACHE_TYPE "
                        "from the environment (--preset ollama)")


class _Given(argparse.Action):
    """Store the value and remember that the flag was given (a recipe's value gives way only to a given flag)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        given = set(getattr(namespace, "given_flags", ()))
        given.add(self.dest)
        namespace.given_flags = given


class _GivenOff(_Given):
    """A bool setting's negative flag in llama.cpp's spelling (--no-mmproj-offload): False, and given."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, False, option_string)


#: Settings whose negative flag llama.cpp spells as --no-NAME (common/arg.cpp:2601-2602 --no-mmproj-offload at 0c1e5709).
_NEGATIVE_FLAGS = ("mmproj_offload",)


def set_pair(text: str) -> tuple:
    """``--set KEY=VALUE``: a setting (or model, profile, an extra such as gradient_accumulation_steps) and its value."""
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. batch_size=2), got {text!r}")
    return key, value.strip()


def recipe_args(p: argparse.ArgumentParser, launch: bool = False) -> None:
    """--recipe, --framework and --set: the run described by a training recipe (and with ``launch``, --launch:
    the command it is launched with)."""
    p.add_argument("--recipe", action="append", default=None, metavar="FILE",
                   help="a training recipe (axolotl, LLaMA-Factory, torchtune, LitGPT, TrainingArguments/TRL, DeepSpeed, "
                        "accelerate, PEFT adapter_config.json); repeat it to add parts (an accelerate config beside the "
                        "training recipe). Its settings give way to the flags given and to --set")
    p.add_argument("--framework", default=None, metavar="NAME[@VERSION]",
                   help="the first recipe's format, when it cannot be told from its content, and with @VERSION the "
                        "framework release read (e.g. litgpt@0.5.9; default: the newest release the format knows)")
    p.add_argument("--set", dest="set_values", action="append", type=set_pair, default=None, metavar="KEY=VALUE",
                   help="override one setting of the recipe (a setting name, model, profile or gradient_accumulation_steps)")
    if launch:
        p.add_argument("--launch", default=None, metavar="LINE",
                       help="the command the run is launched with, in quotes (torchrun, tune run, accelerate launch, "
                            "deepspeed, llamafactory-cli train, axolotl train, litgpt finetune): its world size, nodes "
                            "and strategy, and the recipe files it names (read when they exist); --world-size, "
                            "--strategy and --recipe win over it")


def _training_args(p: argparse.ArgumentParser, *, skip: tuple = (), lists: tuple = (), json_flag: bool = True,
                   model_help: str | None = None) -> None:
    p.add_argument(
        "model", nargs="?", default=None,
        help=model_help or "config.json, model folder, or hub id (read from the local cache when offline); "
        "optional with --params or --weight-bytes, or with --recipe (where it replaces the recipe's model)",
    )
    recipe_args(p, launch=True)
    p.add_argument("--params", type=param_count, default=None,
                   help="no config: estimate from a parameter count alone (e.g. 8B, 7.5B, 70e9)")
    p.add_argument("--weight-bytes", type=byte_size, default=None,
                   help="no config: estimate from the weights' size (e.g. 16GB, 15GiB, or bytes)")
    for s in SETTINGS:  # one option per training setting, named, typed and defaulted by the settings table
        if s.name in skip:
            continue
        default = s.default if s.default is not None else "unset"
        if s.name in lists:  # a comma-separated list: each value a point of the sweep
            p.add_argument(s.flag, default=s.default, metavar="V[,V...]", action=_Given,
                           help=f"{s.help}; a comma-separated list sweeps it (default: {default})")
            continue
        kwargs = {"default": s.default, "type": CLI_TYPES[s.cli_type], "help": f"{s.help} (default: {default})",
                  "action": _Given}
        if s.choices:
            kwargs["metavar"] = "{" + ",".join(s.choices) + "}"
        elif s.cli_type == "bool":
            kwargs["metavar"] = "{true,false}"
        p.add_argument(s.flag, **kwargs)
        if s.name in _NEGATIVE_FLAGS:
            p.add_argument("--no-" + s.flag[2:], dest=s.name, default=s.default, action=_GivenOff,
                           help=f"{s.flag} false, as llama.cpp spells it")
    p.add_argument("--profile", default=DEFAULT_PROFILE, action=_Given,
                   help="memory profile: unsloth (Unsloth's calibrated model) or hf (plain transformers + PEFT, phase by phase) "
                        f"(default: {DEFAULT_PROFILE})")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub config's remote code to run (off by default)")
    p.add_argument("--hub", action="store_true",
                   help="read MODEL from the Hugging Face hub (or its cache) even when the model catalog has it")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")


# -- the parser -----------------------------------------------------------------------------

class _OldGpusFlag(argparse.Action):
    """``select --gpus``: physical ids are ``--gpu-ids`` now (``--gpus`` means GPU counts everywhere)."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise CommandLineError(
            "select takes physical GPU ids as --gpu-ids (e.g. --gpu-ids 0,2); --gpus means a number of GPUs "
            "in the other commands", parser.prog)


def _sub(sub, name: str, help_text: str, description: str, example: str):
    return sub.add_parser(name, help=help_text, description=description,
                          epilog="example:\n  " + example.replace("\n", "\n  "),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


class _Skipped:
    """The parser of a command that :func:`build_parser` was asked to leave out: its arguments are not built."""

    def add_argument(self, *args, **kwargs) -> None:
        return None


class _Only:
    """The commands' ``add_parser``, building only the command asked for (all of them when ``only`` is None)."""

    def __init__(self, sub, only: str | None):
        self._sub, self._only = sub, only

    def add_parser(self, name: str, **kwargs):
        if self._only is None or name == self._only:
            return self._sub.add_parser(name, **kwargs)
        return _Skipped()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``only``: with the parser of that command alone (the others cost time to build
    and are not needed to parse its arguments, nor for its --help; the top-level --help needs them all)."""
    from vramwise.version import VERSION as __version__

    parser = Parser(
        prog="vramwise",
        description="Estimate the GPU memory of fine-tuning a model (QLoRA, LoRA, full) from its config.",
    )
    parser.add_argument("--version", action="version", version=f"vramwise {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    sub = _Only(commands, only)
    p = _sub(sub, "estimate", "memory breakdown of a training run", "Memory breakdown of a training run, in GiB.",
             "vramwise estimate examples/llama-3.1-8b.json --method lora --batch-size 8 --gpus 1,2\n"
             "vramwise estimate --params 8B --method full")
    _training_args(p)
    p.add_argument("--gpus", default=None,
                   help="GPU counts for the per-GPU minimum (default: 1,2,4,8); with --strategy, the one number of "
                        "GPUs the strategy runs on (the same as --world-size)")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="FILE",
                   help="also draw the components as a stacked bar to FILE (.png or .svg; needs vramwise[plot])")
    _preset_args(p)
    p = _sub(sub, "explain", "every formula behind an estimate, with file:line, inputs and result",
             "Every number behind an estimate: the facts of the config, the constants and tables the formulas read, "
             "and each formula with its file:line, inputs and result (bytes with GiB beside them). Formulas that do "
             "not apply to the method are hidden unless --all.",
             "vramwise explain examples/llama-3.1-8b.json --method full --all")
    _training_args(p)
    p.add_argument("--all", action="store_true", help="also show the formulas that do not apply to the method")
    p = _sub(sub, "fit", "what fits on a GPU: methods, largest batch/sequence/rank, fewest GPUs, frontier",
             "What fits on a GPU given by name (RTX 4090, H100, a100-40gb), by size (24GiB, 80GB) or 'local' (the "
             "visible GPUs): which methods fit at the settings, the largest batch size at the sequence length, the "
             "largest sequence length at the batch size, the largest LoRA rank, the fewest GPUs, and a frontier of "
             "the largest batch at each sequence length.",
             "vramwise fit examples/llama-3.1-8b.json --gpu 'RTX 4090'\n"
             "vramwise fit examples/llama-3.1-8b.json --gpu 24GiB --method lora --headroom 10% --seq-lens 1024,4096,16384")
    _training_args(p, skip=("gpu",))
    p.add_argument("--gpu", required=True, help="a GPU name or alias (RTX 4090, H100, a100-40gb), a size (24GiB, 80GB) or local")
    p.add_argument("--gpus", type=int, default=None, help="how many GPUs of that kind (default: 1; local: the visible ones)")
    p.add_argument("--headroom", type=headroom_share, default=None,
                   help="share of each GPU's memory kept free, e.g. 10%% or 0.1 (default: the p90 shortfall of the "
                        "device band, the published GPU runs of the profile and method; 0 where none covers them)")
    p.add_argument("--seq-lens", default=None, metavar="S[,S...]",
                   help="sequence lengths of the frontier (default: 16 powers of two from 128 to 4,194,304)")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="FILE",
                   help="also draw the frontier to FILE (.png or .svg; needs vramwise[plot])")
    p.add_argument("--quant", default=None, metavar="NAME",
                   help="with --profile llama.cpp and a folder of GGUF files or hub:ORG/NAME: answer for the quantization "
                        "NAME (Q4_K_M, UD-Q4_K_XL, ...) only, rather than the table of them all and the pick")
    _preset_args(p)
    p = _sub(sub, "compare", "methods and profiles side by side: one column each, rows per component",
             "Estimates side by side at the same settings: one column per profile and method, a row per component, "
             "the total and, with --gpu, whether each fits.",
             "vramwise compare examples/llama-3.1-8b.json --methods qlora,lora,full --profiles unsloth,hf --gpu H100")
    _training_args(p, skip=("method", "gpu"))
    p.add_argument("--methods", default=",".join(COMPARED_METHODS),
                   help=f"comma-separated methods (default: {','.join(COMPARED_METHODS)})")
    p.add_argument("--profiles", default=None, help=f"comma-separated profiles (default: the --profile one, {DEFAULT_PROFILE})")
    p.add_argument("--gpu", default=None, help="also say whether each fits this GPU (a name, a size or local)")
    p.add_argument("--gpus", type=int, default=None, help="how many GPUs of that kind (default: 1)")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="FILE",
                   help="also draw stacked bars per column to FILE (.png or .svg; needs vramwise[plot])")
    p = _sub(sub, "sweep", "totals over a grid of settings, as a table, CSV or JSON",
             "Totals over every combination of the settings given as comma-separated lists (method, batch size, "
             "sequence length, LoRA rank, checkpointing, optimizer, attention, loss). Two lists print a 2-D table.",
             "vramwise sweep examples/llama-3.1-8b.json --batch-size 1,2,4,8 --seq-len 512,2048,8192\n"
             "vramwise sweep examples/llama-3.1-8b.json --method qlora,lora --lora-rank 8,64 --seq-len 1024,4096 --format csv")
    _training_args(p, lists=SWEEP_LISTS, json_flag=False)
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format (default: table)")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="FILE",
                   help="also draw a heatmap to FILE (.png or .svg; needs vramwise[plot])")
    p = sub.add_parser("families", help="list families, their model types and files, and the profiles")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = _sub(sub, "measure", "run real training steps of a randomly initialised model and report its memory",
             "Build the model from its config with random weights, run optimizer steps on synthetic tokens and "
             "report the peak memory of each phase (needs pip install 'vramwise[measure]'). The defaults are "
             "estimate's where measure can run them: qlora, batch 4, seq 2048, rank 16, adamw_8bit; checkpointing "
             "true and sdpa attention stand for Unsloth's checkpointing and flash attention; with --fake, lora and "
             "adamw_torch stand for qlora and adamw_8bit. The settings it ran are printed.",
             "vramwise measure examples/llama-3.1-8b.json --fake --method lora --batch-size 1 --seq-len 512")
    p.add_argument("model", nargs="?", default=None,
                   help="config.json, model folder, or hub id (optional with --recipe, where it replaces the recipe's model)")
    recipe_args(p)
    p.add_argument("--method", default=None, choices=runnable_names("method"),
                   help="fine-tuning method (default: qlora; lora with --fake)")
    p.add_argument("--batch-size", type=int, default=None, help="batch size (default: 4)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (default: 2048)")
    p.add_argument("--lora-rank", type=int, default=None, help="LoRA rank (default: 16)")
    p.add_argument("--target-modules", default=None, help="comma-separated LoRA targets or all-linear (default: the seven projections)")
    p.add_argument("--gradient-checkpointing", default=None, metavar="{none,true}",
                   help="transformers' checkpointing (default: true)")
    p.add_argument("--attention", default=None, help="attention implementation: sdpa or eager (default: sdpa)")
    p.add_argument("--optimizer", default=None,
                   help="adamw_torch (foreach), adamw_torch_fused, adamw_8bit or sgd (default: adamw_8bit; adamw_torch with --fake)")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps to run (default: 2; the last one is reported)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to run (default: cpu)")
    p.add_argument("--lora-dropout", type=float, action=_Given, default=0.0, help="LoRA dropout probability (default: 0)")
    p.add_argument("--fake", action="store_true",
                   help="simulate the step with fake tensors on CPU: nothing is allocated, so large models fit (full and lora)")
    p.add_argument("--stack", default="hf", action=_Given, choices=STACKS,
                   help="whose model, loss and optimizer step run: hf (transformers + PEFT), or torchtune / litgpt "
                        "(pip install 'vramwise[torchtune]' or '[litgpt]') (default: hf)")
    p.add_argument("--loss", default="standard", action=_Given, choices=runnable_names("loss"),
                   help="the stack's cross-entropy: standard or chunked (torchtune, litgpt) (default: standard)")
    p.add_argument("--loss-chunks", type=int, action=_Given, default=8, help="chunks of a chunked loss (torchtune) (default: 8)")
    p.add_argument("--activation-offloading", type=bool_flag, action=_Given, default=False, metavar="{true,false}",
                   help="torchtune's activation offloading (default: false)")
    p.add_argument("--optimizer-in-bwd", type=bool_flag, action=_Given, default=False, metavar="{true,false}",
                   help="torchtune's optimizer step inside the backward pass (default: false)")
    p.add_argument("--kbit-prepare", type=bool_flag, action=_Given, default=None, metavar="{true,false}",
                   help="qlora (stack hf): run peft's prepare_model_for_kbit_training (default: true)")
    p.add_argument("--compile", type=bool_flag, action=_Given, default=False, metavar="{true,false}",
                   help="stack hf, one process: torch.compile the model and its loss (inductor); on the CPU the "
                        "allocator's own reports are counted (default: false)")
    p.add_argument("--strategy", default=None, choices=MEASURED_STRATEGIES,
                   help="run the step in --world-size CPU processes (gloo): DistributedDataParallel, or FSDP2 "
                        "fully_shard on each decoder layer and the root (fsdp_shard_grad_op: without resharding "
                        "after the forward; stack torchtune: its shard_model), or DeepSpeed ZeRO-1/2/3 on its CPU "
                        "accelerator (zero1, zero2, zero3); adamw_torch by default, and "
                        "lora where qlora is not measured (stack hf beyond ddp)")
    p.add_argument("--world-size", type=int, default=None,
                   help="processes of --strategy, 2 to 8 (default: 2); one line per rank is printed")
    p.add_argument("--fsdp-head-units", type=bool_flag, action=_Given, default=False, metavar="{true,false}",
                   help="--stack torchtune --strategy fsdp: shard the token embeddings and the output projection as "
                        "units of their own (custom_sharded_layers: ['tok_embeddings', 'output']) (default: false)")
    p.add_argument("--offload", action=_Given, default="none", choices=("none", "optimizer", "parameters"),
                   help="--strategy zero1/zero2/zero3: DeepSpeed's offload_optimizer (optimizer), and offload_param "
                        "with it (parameters, zero3 only); what it keeps in host memory is not counted (default: none)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser("gpus", help="list the NVIDIA GPUs and their memory (or why none is visible); "
                                    "--catalog: the GPUs --gpu knows")
    p.add_argument("query", nargs="*", metavar="QUERY",
                   help="--catalog: keep the GPUs whose id, name, vendor or aliases contain every word (default: all)")
    p.add_argument("--catalog", action="store_true",
                   help="list the GPU catalog (hardware/gpus.yaml): memory as the driver reports it, its source, "
                        "aliases, and the names that match several GPUs")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = _sub(sub, "catalog", "list the bundled model catalog (estimates of these need no network)",
             "The offline model catalog: well-known checkpoints whose configs ship with vramwise, so `vramwise "
             "estimate ID` needs no network. QUERY keeps the entries whose id, aliases, family or model type "
             "contain every word of it (case-insensitive).",
             "vramwise catalog llama\nvramwise catalog qwen3 moe --json")
    p.add_argument("query", nargs="*", metavar="QUERY", help="words to search for (default: list everything)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = _sub(sub, "serve", "a local web page and JSON API (needs vramwise[serve])",
             "Serve the web page (choose a model, settings and a GPU; charts update as you type) and the JSON API "
             "(/api/estimate, /api/explain, /api/compare, /api/fit, /api/families, /api/gpus, /api/catalog). It "
             "listens on loopback unless --host says otherwise; it reads no files and fetches no models for a "
             "request: models come from the catalog or an uploaded config.json.",
             "vramwise serve\nvramwise serve --port 8080 --open")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p = _sub(sub, "select", "choose GPUs for a run: which, why, device_map and the variable that selects them",
             "Choose the GPUs of this machine for a run, among the devices of one backend (NVIDIA, AMD, Intel, "
             "Vulkan): which, why, the device_map and the variable that selects them (CUDA_VISIBLE_DEVICES, "
             "HIP_VISIBLE_DEVICES, ZE_AFFINITY_MASK or GGML_VK_VISIBLE_DEVICES).",
             "vramwise select examples/llama-3.1-8b.json --method lora --gpu-ids 0,2")
    _training_args(p)
    p.add_argument("--gpu-ids", default=None, help="explicit physical GPU ids, e.g. 0,2 (default: choose automatically)")
    p.add_argument("--backend", default=None, choices=("nvidia", "amd", "intel", "vulkan"),
                   help="choose among this backend's GPUs only (default: every backend's; --gpu-ids are NVIDIA's "
                        "where NVML finds GPUs, else the only backend's)")
    p.add_argument("--gpus", action=_OldGpusFlag, help=argparse.SUPPRESS)
    p = _sub(sub, "runs", "list the training runs the memory check recorded: predicted and measured peak, error",
             "The runs MemoryCheckCallback recorded (vramwise.integrations): per run the predicted and measured peak "
             "and the error in %, then a summary per profile and method (count, mean and largest absolute error). "
             "The database is VRAMWISE_RUNS_DB, else runs.sqlite3 in the vramwise cache folder.",
             "vramwise runs\nvramwise runs --json --db runs.sqlite3")
    p.add_argument("--db", default=None, metavar="PATH", help="the runs database (default: VRAMWISE_RUNS_DB or the cache folder's)")
    p.add_argument("--limit", type=int, default=None, help="only the newest N runs (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser(
        "check", help="validate family and formula files: schema, expressions, references, examples",
        description="Validate family files (with the bundled families; a file of the same name replaces the bundled "
        "one) and profiles (a profile folder, its profile.yaml or one of its formula files: the whole folder is "
        "checked). Prints file:line:col: message per problem; exit 0 when all are fine, 1 otherwise.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="a family .yaml, a profile folder, or a file of one")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing when every file is fine")
    return parser
