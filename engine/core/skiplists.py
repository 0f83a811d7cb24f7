"""Quantization skip lists: which quantizable weights a 4-bit load keeps in 16 bit.

A checkpoint's quantization config may list modules that bitsandbytes leaves unquantized
(``llm_int8_skip_modules`` and its kin), as full paths under the text tower's root or as short
names. A module's path template (``model.layers.{i}.mlp.gate_proj``) is matched against the list
once, by the shapes of its entries; layers and numbered copies are counted from the constraints
the match leaves, never by writing out every path.
"""

from __future__ import annotations

import re
from typing import Iterable

__all__ = ["skipped_quantizable"]


def _split_entries(entries: Iterable[str], roots: tuple) -> tuple[list, list]:
    """A skip list split into entries under a text-tower root (made relative to it) and short entries."""
    ordered = sorted(roots, key=len, reverse=True)
    rooted: list[str] = []
    short: list[str] = []
    for e in entries:
        if not isinstance(e, str) or not e:
            continue
        for r in ordered:
            if e == r:
                rooted.append("")
                break
            if e.startswith(r + "."):
                rooted.append(e[len(r) + 1:])
                break
        else:
            short.append(e)
    return rooted, short


_PLACEHOLDERS = ("{i}", "{j}")


def _canonical_number(seg: str) -> bool:
    """Whether ``seg`` is how a layer or copy index is written in a path (``3``, not ``03``)."""
    return seg.isascii() and seg.isdigit() and str(int(seg)) == seg


#: a whole path segment that is a canonical number (what _canonical_number accepts)
_NUMBER_SEGMENT = re.compile(r"(?:^|(?<=\.))(0|[1-9][0-9]*)(?=\.|\Z)")


def _shapes(entries) -> dict:
    """Entries grouped by shape (their segments with every index-like number written ``#``) -> the
    numbers of each entry, in order. A long list has few shapes: templates are matched per shape."""
    out: dict[tuple, list] = {}
    find, sub = _NUMBER_SEGMENT.findall, _NUMBER_SEGMENT.sub
    for e in entries:
        numbers = tuple(find(e))
        shape = tuple((sub("#", e) if numbers else e).split("."))
        out.setdefault(shape, []).append(numbers)
    return out


class _SkipIndex:
    """A skip list (entries under the text-tower root, made relative to it, and short entries) by shape."""

    def __init__(self, rooted: list, short: list):
        self.whole_tower = "" in rooted
        self.rooted = _shapes(r for r in rooted if r)
        self.short = _shapes(short)
        self.memo: dict = {}  # (shape, number positions of i and j, literal checks) -> constraints


def _match_shape(shape: tuple, numbers: list, segs: list, offset: int, memo: dict) -> tuple:
    """The (i, j) of each entry of ``shape`` that matches the template ``segs`` from ``offset`` on, as
    (the copies j matched on any layer, {layer i: its copies j}); j None stands for every copy. A
    template's {i}/{j} take canonical numbers and its literals match exactly; a whole group of entries
    is matched at once, and each distinct projection of the group is computed once."""
    slots = {"{i}": [], "{j}": []}  # positions among the entry's numbers that fix i or j
    literal = []  # (position among the numbers, text the template has there)
    n = 0
    for s, t in zip(shape, segs[offset:offset + len(shape)]):
        if t in slots:
            if s != "#":
                return (set(), {})
            slots[t].append(n)
        elif s == "#":
            literal.append((n, t))
        elif s != t:
            return (set(), {})
        if s == "#":
            n += 1
    key = (shape, tuple(slots["{i}"]), tuple(slots["{j}"]), tuple(literal))
    if key in memo:
        return memo[key]
    any_layer: set = set()
    by_layer: dict = {}
    for nums in numbers:
        if literal and any(nums[k] != t for k, t in literal):
            continue
        iv = {nums[k] for k in slots["{i}"]}
        jv = {nums[k] for k in slots["{j}"]}
        if len(iv) > 1 or len(jv) > 1:
            continue
        j = int(jv.pop()) if jv else None
        if iv:
            by_layer.setdefault(int(iv.pop()), set()).add(j)
        else:
            any_layer.add(j)
    memo[key] = result = (any_layer, by_layer)
    return result


def _skip_constraints(template: str, index: _SkipIndex, canon: str) -> list | None:
    """The (i, j) pairs (None: any) whose module path the skip list matches, from the path template,
    as parts of the form :func:`_match_shape` returns.

    Same rules as a concrete path: entries under the canonical root match the path relative to it
    when equal or a parent of it; short entries match when equal, a parent, or a suffix at a module
    boundary. None when a placeholder shares a segment with other text (then paths are expanded).
    """
    segs = template.split(".")
    if any(p in s and s != p for s in segs for p in _PLACEHOLDERS):
        return None
    out = []
    canon_segs = canon.split(".")
    if segs[:len(canon_segs)] == canon_segs and len(segs) > len(canon_segs):
        rel = segs[len(canon_segs):]
        if index.whole_tower:
            out.append(({None}, {}))
        for shape, numbers in index.rooted.items():
            if len(shape) <= len(rel):
                out.append(_match_shape(shape, numbers, rel, 0, index.memo))
    for shape, numbers in index.short.items():
        if len(shape) > len(segs):
            continue
        for offset in {0, len(segs) - len(shape)}:
            out.append(_match_shape(shape, numbers, segs, offset, index.memo))
    return out


def _copies_matched(parts: list, indices, count: int, repeat: int) -> int:
    """Module copies (layer x numbered copy) that the constraint parts select, over ``indices``."""
    any_layer = set().union(*(a for a, _ in parts))
    if None in any_layer:
        return count * repeat
    common = {j for j in any_layer if 0 <= j < repeat}
    by_layer: dict[int, set] = {}
    for _, per_layer in parts:
        if len(per_layer) <= count:  # the part names fewer layers than the group has: look each up
            for i, js in per_layer.items():
                if i in indices:
                    by_layer.setdefault(i, set()).update(js)
        else:
            for i in indices:
                js = per_layer.get(i)
                if js:
                    by_layer.setdefault(i, set()).update(js)
    total = (count - len(by_layer)) * len(common)
    for js in by_layer.values():
        total += repeat if None in js else len(common | {j for j in js if 0 <= j < repeat})
    return total


def skipped_quantizable(groups: Iterable[tuple], entries: Iterable[str], roots: tuple) -> int:
    """Quantizable weights a 4-bit load keeps in 16 bit because the skip list names their module
    (``groups``: (copies, layer indices or None, modules) of a model; ``roots``: the text tower's
    paths, the canonical one first).

    Each module's path template is matched against the list once; layers and numbered copies
    are counted from the constraints the match leaves, never by writing out every path.
    """
    rooted, short = _split_entries(entries, roots)
    canon = roots[0]
    index = _SkipIndex(rooted, short)
    total = 0
    for count, indices, mods in groups:
        for m in mods:
            if not m.quantizable:
                continue
            template = m.path.rsplit(".", 1)[0] if m.kind == "parameter" else m.path  # a bare parameter's module
            constraints = _skip_constraints(template, index, canon)
            if constraints is None:
                matches = _skip_matcher(rooted, short, canon)
                layers = indices if indices is not None else (None,)
                copies = sum(
                    1 for i in layers for p in m.paths(i)
                    if matches(p.rsplit(".", 1)[0] if m.kind == "parameter" else p)
                )
            else:
                copies = _copies_matched(constraints, indices if indices is not None else (0,), count, m.repeat)
            total += copies * (m.weight_params // m.repeat)
    return total


def _skip_matcher(rooted: list, short: list, canon: str):
    """A predicate over concrete module paths (used when a path template cannot be matched as a whole)."""

    def matches(path: str) -> bool:
        rel = path[len(canon) + 1:] if path.startswith(canon + ".") else None
        if rel is not None:
            for r in rooted:
                if r == "" or rel == r or rel.startswith(r + "."):
                    return True
        for e in short:
            if path == e or path.endswith("." + e) or path.startswith(e + "."):
                return True
        return False

    return matches

