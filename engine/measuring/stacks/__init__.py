"""The training stacks ``vramwise measure`` runs: one module each (``hf``, ``torchtune``, ``litgpt``),
all with the attributes of :class:`~vramwise.measuring.stacks.protocol.Stack`, listed by name in
:mod:`vramwise.measuring.stacks.registry`."""
