"""Dependency order of named entries (layer attributes, formulas): one depth-first sort."""

from __future__ import annotations

from typing import Callable, Iterable

__all__ = ["dependency_order"]


def dependency_order(names: Iterable[str], deps: Callable[[str], Iterable[str]],
                     cycle: Callable[[tuple], Exception]) -> list[str]:
    """``names`` ordered so that each comes after the names it depends on.

    Stable: entries keep their given order where dependencies allow; the dependencies of an
    entry are visited in sorted order. A cycle raises ``cycle(trail)``, the trail ending with
    the entry met twice.
    """
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, trail: tuple) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise cycle(trail + (name,))
        state[name] = 1
        for dep in sorted(deps(name)):
            visit(dep, trail + (name,))
        state[name] = 2
        order.append(name)

    for name in names:
        visit(name, ())
    return order
