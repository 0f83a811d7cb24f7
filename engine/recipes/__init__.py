"""Training recipes as input: axolotl, LLaMA-Factory, torchtune, LitGPT, transformers / TRL, PEFT,
bitsandbytes, DeepSpeed and accelerate files read into vramwise settings, each with its origin.

The formats are data (``frameworks/*.yaml``, schema ``recipe-format-1``); :func:`read_recipe` applies them.
"""

from vramwise.recipes.formats import Format, Formats
from vramwise.recipes.reader import RecipeText, bundled_formats, read_recipe

__all__ = ["read_recipe", "RecipeText", "bundled_formats", "Format", "Formats"]
