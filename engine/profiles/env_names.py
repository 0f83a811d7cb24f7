"""Names a profile adds to a formula's environment: the model's type and the layer values a graph reads.

Shared by the profile loader (vramwise.profiles.profile) and the graph templates (vramwise.profiles.graphs), so that
neither imports the other's module at load time: only a profile with a graph section loads the allocator's
simulation."""

from __future__ import annotations

__all__ = ["MODEL_TYPE", "LAYER_VALUES"]

#: The name of the resolved model's type in a profile's model-level names (what selects a graph template).
MODEL_TYPE = "model_type"
#: The model-level name of the layer inputs a graph reads, layer by layer: ((name, (value of layer 0, ...)), ...).
LAYER_VALUES = "layer_values"
