"""The multi-GPU strategies ``measure`` can run, and how many processes: stated once here, read by the
distributed runner and the command line's choices alike. Importing this module loads no torch
and reads no file."""

from __future__ import annotations

from vramwise.models.stack_manifest import LazyNames, stack_manifest


class _MeasuredStrategies(LazyNames):
    """Every strategy a stack of formulas/stacks.yaml is measured under (its ``strategies``), each once, in
    the order the stacks list them; read when first used."""

    __slots__ = ()

    def _names(self) -> tuple:
        out: list = []
        for stack in stack_manifest().stacks.values():
            out += [s for s in stack.strategies if s not in out]
        return tuple(out)


#: The strategies measure can run: those formulas/stacks.yaml lists for its stacks, names of
#: formulas/strategies/strategies.yaml (a test holds them to it), each with a wrapper in the distributed runner.
STRATEGIES = _MeasuredStrategies()
#: Process counts measure can start (each is a CPU process of this machine).
WORLD_SIZES = range(2, 9)
