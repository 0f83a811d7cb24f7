"""How the command line writes figures: GiB, counts, bars, wrapped lines and the one-line headers.

Numbers arrive in bytes from the library; this module only formats them (GiB = 2**30 bytes).
"""

from __future__ import annotations

import json
import math
import textwrap
from typing import Sequence

from vramwise.errors import VramwiseError
from vramwise.estimation.registry import Registry
from vramwise.profiles.settings import SETTINGS
from vramwise.surfaces.views import count, count_bytes  # noqa: F401 - the CLI's names for them

GIB = 1024**3
#: the width lines are wrapped at
WRAP = 100
_SETTING = {s.name: s for s in SETTINGS}


def gib(n: float) -> str:
    return f"{n / GIB:,.2f}"


def print_json(data, out) -> None:
    json.dump(data, out, indent=2)
    out.write("\n")


def one_line(text) -> str:
    return " ".join(str(text).split()) or "(no message)"


def write_wrapped(out, text: str, indent: str = "", width: int = WRAP) -> None:
    out.write(textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent + "    ",
                            break_long_words=True, break_on_hyphens=False) + "\n")


# -- bars -----------------------------------------------------------------------------------

_EIGHTHS = " ▏▎▍▌▋▊▉"
_BAR_CELLS = 10  # a full bar (100 %) is ten cells wide


def unicode_ok(out) -> bool:
    enc = getattr(out, "encoding", None) or "utf-8"
    try:
        "█▏—".encode(enc)
    except (LookupError, UnicodeEncodeError):
        return False
    return True


def bar(fraction: float, out, cells: int = _BAR_CELLS) -> str:
    """A proportional bar of ``fraction`` (0 to 1) in unicode blocks (``#`` where the output cannot show them)."""
    fraction = min(max(fraction, 0.0), 1.0)
    if not unicode_ok(out):
        return "#" * round(fraction * cells)
    eighths = math.floor(fraction * cells * 8 + 1e-9)
    if fraction > 0 and eighths == 0:
        eighths = 1  # something, however small, shows
    full, rest = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[rest] if rest else "")


def dash(out) -> str:
    return "—" if unicode_ok(out) else "-"


def fits_word(ok: bool | None) -> str:
    return "yes" if ok else ("no" if ok is not None else "-")


# -- values ---------------------------------------------------------------------------------

def short(v) -> str:
    if v is None:
        return "unset"
    if isinstance(v, float):
        return f"{v:.6g}" if not v.is_integer() else f"{int(v)}"
    if isinstance(v, tuple):
        return "(" + ", ".join(short(x) for x in v) + ")"
    return repr(v) if isinstance(v, str) else str(v)


def value_text(v, unit: str) -> str:
    text = short(v)
    if unit == "bytes" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:,.0f} bytes ({v / GIB:,.2f} GiB)" if v >= 2**20 else f"{text} bytes"
    return f"{text} {unit}".rstrip()


def ranges(indices: Sequence[int]) -> str:
    """``0-4, 6, 8-9`` for [0, 1, 2, 3, 4, 6, 8, 9]."""
    spans: list[list[int]] = []
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


# -- what the header says -------------------------------------------------------------------

def applies(name: str, method: str) -> bool:
    return method in _SETTING[name].applies_to


def gpus_word(n: int) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{n} GPU" if n == 1 else f"{n:,} GPUs"


def serving_settings_line(s) -> str:
    """A serving estimate's settings (vLLM's names), in a few words; unset ones take vLLM's defaults."""
    parts = [f"vLLM {s.vllm_version}", f"tensor_parallel_size {s.tensor_parallel_size}"]
    if s.pipeline_parallel_size > 1:
        parts.append(f"pipeline_parallel_size {s.pipeline_parallel_size}")
    for name in ("max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "block_size"):
        if getattr(s, name) is not None:
            parts.append(f"{name} {getattr(s, name)}")
    if s.kv_cache_dtype != "auto":
        parts.append(f"kv_cache_dtype {s.kv_cache_dtype}")
    if s.enforce_eager:
        parts.append("enforce_eager")
    return ", ".join(parts)


def settings_line(s, serving: bool = False, stored: str | None = None, own: tuple = ()) -> str:
    """The settings that matter for the method (``SETTINGS[...].applies_to``), in a few words (a serving
    profile's: vLLM's settings); ``stored``: the format of a checkpoint loaded as stored ("GGUF Q4_K_M"),
    whose weights an inference estimate takes as they are; ``own``: the inference settings a profile of its
    own runtime reads (llama.cpp's n_ctx, cache types, ...), shown instead of batch and sequence."""
    if serving:
        return serving_settings_line(s)
    m = s.method
    if own and m == "inference":
        shown = [f"{name} {_word(getattr(s, name))}" for name in own
                 if name not in _COMPANION or getattr(s, _COMPANION[name]) is not None]
        return ", ".join([m, f"{stored} weights as stored" if stored else "weights as stored", *shown])
    parts = [m, f"batch {s.batch_size}", f"seq {s.seq_len}"]
    if applies("lora_rank", m):
        parts.append(f"rank {s.lora_rank}")
    if applies("target_modules", m) and s.target_modules:
        parts.append("targets " + ",".join(s.target_modules))
    if applies("gradient_checkpointing", m):
        parts.append(f"checkpointing {s.gradient_checkpointing}")
    if applies("optimizer", m):
        parts.append(s.optimizer)
    if applies("attention", m):
        parts.append(s.attention)
    if applies("loss", m) and s.loss != "standard":
        parts.append(f"loss {s.loss}")
    if applies("lora_dropout", m) and s.lora_dropout:
        parts.append(f"dropout {s.lora_dropout:g}")
    if m == "lora" and s.load_in_4bit:
        parts.append("4-bit base weights")
    if m == "inference":
        parts.append(f"{stored} weights as stored" if stored else "4-bit weights" if s.load_in_4bit else "16-bit weights")
    if applies("strategy", m) and s.strategy != "none":
        parts.append(f"{s.strategy} on {gpus_word(s.world_size)}" + (f", offload {s.offload}" if s.offload != "none" else ""))
    return ", ".join(parts)


#: A companion's settings (a draft model's, a projector's) -> the setting that loads it: shown only when it is given.
_COMPANION = {"model_draft": "model_draft", "n_gpu_layers_draft": "model_draft", "cache_type_k_draft": "model_draft",
              "cache_type_v_draft": "model_draft", "mmproj": "mmproj", "mmproj_offload": "mmproj"}


def _word(value) -> str:
    return "all" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def own_settings(est) -> tuple:
    """The inference-only settings the estimate's profile reads, when it is not a serving profile (llama.cpp's)."""
    prof = est.profile_data
    if prof.serving is not None:
        return ()
    return tuple(x.name for x in _SETTING.values()
                 if x.name in prof.settings_read and x.applies_to == ("inference",) and x.name not in ("gpu", "gpu_memory"))


def family_line(est) -> str:
    kind = f" ({est.model_type})" if est.model_type else ""
    stored = est.model.checkpoint_format if est.model.inventory.checkpoint_as_stored else None
    return (f"family {est.family}{kind}, profile {est.profile}; "
            f"{settings_line(est.settings, stored=stored, own=own_settings(est))}")


def summary(profile: str) -> str | None:
    """The profile's one-line summary (None when it has none or is unknown)."""
    try:
        return Registry.default().profile(profile).summary or None
    except VramwiseError:
        return None
