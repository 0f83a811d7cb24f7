"""Training recipes as input: axolotl, LLaMA-Factory, torchtune, LitGPT, transformers / TRL, PEFT,
bitsandbytes, DeepSpeed and accelerate files read into vramwise settings, each with its origin.

The formats are data (``frameworks/*.yaml``, schema ``recipe-format-1``); :func:`read_recipe` applies them.
Launch lines (``torchrun --nproc_per_node 8 ...``) are read by :func:`read_launch` with the launchers of
``frameworks/launchers.yaml`` (schema ``launchers-1``).
"""

from vramwise.recipes.formats import Format, Formats
from vramwise.recipes.launch import LaunchLine, read_launch
from vramwise.recipes.reader import RecipeText, bundled_formats, read_recipe

__all__ = ["read_recipe", "RecipeText", "bundled_formats", "Format", "Formats", "read_launch", "LaunchLine"]
