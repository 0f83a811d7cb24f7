"""Quantization skip lists: which quantizable weights a 4-bit load keeps in 16 bit.

A checkpoint's quantization config may list modules that bitsandbytes leaves unquantized
(``llm_int8_skip_modules`` and its kin), as full paths under the text tower's root or as short
names. A module's path template (``model.layers.{i}.mlp.gate_proj``) is matched against the list
once, by the shapes of its entries; layers and numbered copies are counted from the constraints
the match leaves, never by writing out every path.

A short entry matches a path it ends, a path it begins, and, for the 4-bit load of a training
estimate (``inner``), a run of the path's segments inside it that ends at the layer's index or
deeper (``layers.2`` is layer 2, ``self_attn`` every layer's attention block): the matching of
transformers before 5 and of Unsloth Studio's estimator (the ``studio`` profile's
``skipped_quantizable_params``). Transformers 5 matches a short entry only at the start or the end of
a path (``skipped_quantizable_params_v5``, which the ``unsloth`` and ``hf`` profiles read).
"""

from __future__ import annotations

import re
from typing import Iterable

__all__ = ["SkipList", "read_skip_list", "skipped_quantizable", "skipped_copies"]


def _split_entries(entries: Iterable[str], roots: tuple) -> tuple[list, list]:
    """A skip list split into entries under a text-tower root (made relative to it) and short entries.

    An entry is under the longest root that equals it or one of its dotted prefixes: each entry's prefixes
    at its dots are looked up in the set of roots, longest first (a long list is split in one pass, with a
    few dictionary lookups per entry instead of a string comparison per root)."""
    root_set = set(roots)
    rooted: list[str] = []
    short: list[str] = []
    for e in entries:
        if not isinstance(e, str) or not e:
            continue
        if e in root_set:
            rooted.append("")
            continue
        cut = e.rfind(".")
        while cut >= 0 and e[:cut] not in root_set:
            cut = e.rfind(".", 0, cut)
        if cut >= 0:
            rooted.append(e[cut + 1:])
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
        self.memo: dict = {}  # (id of a shape's numbers, number positions of i and j, literal checks) -> constraints


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
    # the rooted and the short entries may share a shape: the key names the group by its list, which the
    # index (and so the memo) outlives
    key = (id(numbers), tuple(slots["{i}"]), tuple(slots["{j}"]), tuple(literal))
    if key in memo:
        return memo[key]
    if n == 1:  # one index in the shape (a list of layers): its distinct numbers, read once per shape
        memo[key] = result = _match_single(numbers, bool(slots["{i}"]), literal, memo)
        return result
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


_ANY_COPY = frozenset({None})


def _match_single(numbers: list, is_i: bool, literal: list, memo: dict) -> tuple:
    """:func:`_match_shape` for a shape with one number: that number is a literal the template's text must
    equal, else the template's {i} (``is_i``), else its {j}. The shape's distinct numbers are converted once
    and shared by every template (a list of 100,000 layers is read once, not once per module); the result's
    per-layer sets are one shared frozen set, as every result of the memo is only read."""
    distinct = memo.get(id(numbers))
    if distinct is None:
        distinct = memo[id(numbers)] = {text: int(text) for (text,) in numbers}
    if literal:
        return ({None}, {}) if literal[0][1] in distinct else (set(), {})
    if is_i:
        return (set(), dict.fromkeys(distinct.values(), _ANY_COPY))
    return (set(distinct.values()), {})


def _layer_segment(template: str) -> int | None:
    """Position of the first segment of a path template that holds the layer index ``{i}`` (None: a
    module outside the layers)."""
    for n, seg in enumerate(template.split(".")):
        if "{i}" in seg:
            return n
    return None


def _short_offsets(path_len: int, entry_len: int, layer_at: int | None, inner: bool) -> set:
    """Where a short entry of ``entry_len`` segments may lie in a path of ``path_len`` segments: at its
    start, at its end and, with ``inner``, any run ending at the layer's index (``layer_at``) or deeper."""
    last = path_len - entry_len
    offsets = {0, last}
    if inner and layer_at is not None:
        offsets.update(range(max(1, layer_at - entry_len + 1), last))
    return offsets


def _skip_constraints(template: str, index: _SkipIndex, canon: str, inner: bool = False) -> list | None:
    """The (i, j) pairs (None: any) whose module path the skip list matches, from the path template,
    as parts of the form :func:`_match_shape` returns.

    Same rules as a concrete path: entries under the canonical root match the path relative to it
    when equal or a parent of it; short entries match when equal, a parent, or a suffix at a module
    boundary, and with ``inner`` a run of segments inside the path that ends at the layer's index or
    deeper. None when a placeholder shares a segment with other text (then paths are expanded).
    """
    segs = template.split(".")
    if any(p in s and s != p for s in segs for p in _PLACEHOLDERS):
        return None
    out = []
    canon_segs = canon.split(".")
    outside = segs[:len(canon_segs)] != canon_segs  # a module beside the layers' root (the output head)
    if outside or len(segs) > len(canon_segs):
        rel = segs if outside else segs[len(canon_segs):]
        if index.whole_tower:
            out.append(({None}, {}))
        for shape, numbers in index.rooted.items():
            if len(shape) <= len(rel):
                out.append(_match_shape(shape, numbers, rel, 0, index.memo))
    layer_at = segs.index("{i}") if "{i}" in segs else None
    for shape, numbers in index.short.items():
        if len(shape) > len(segs):
            continue
        for offset in _short_offsets(len(segs), len(shape), layer_at, inner):
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


class SkipList:
    """A skip list read once for a text tower's ``roots`` (the canonical one first): its entries, split into
    pattern entries (``*``, ``re:``), entries under a root and short entries, and indexed by shape. Matching
    it several times (with and without ``inner``) reads the list once and shares the matches' memo."""

    def __init__(self, entries: Iterable[str], roots: tuple):
        self.roots = roots
        self.entries = [e for e in entries if isinstance(e, str) and e]
        self.found = [e for e in self.entries if "*" in e or e.startswith("re:")]
        self.rooted, self.short = _split_entries([e for e in self.entries if e not in self.found], roots)
        self.index = _SkipIndex(self.rooted, self.short)


def read_skip_list(entries: Iterable[str], roots: tuple, read: dict | None = None) -> SkipList:
    """``entries`` read as a :class:`SkipList` for ``roots``, once per distinct list in ``read`` (a dict the
    caller keeps for one model: the inventory and the checkpoint's format read the same
    ``llm_int8_skip_modules``, which may hold 100,000 entries)."""
    if read is None:
        return SkipList(entries, roots)
    kept = tuple(e for e in entries if isinstance(e, str) and e)
    key = (kept, roots)
    found = read.get(key)
    if found is None:
        found = read[key] = SkipList(kept, roots)
    return found


def skipped_copies(groups: Iterable[tuple], entries: Iterable[str] | SkipList, roots: tuple, *,
                   patterns: bool = True, inner: bool = False) -> Iterable[tuple]:
    """For each (copies, layer indices or None, modules) of ``groups``, the same with a list of how many
    copies (layers x numbered copies) of each linear layer and parameter the skip list names (0 for the
    other modules).

    Each module's path template is matched against the list once; layers and numbered copies are
    counted from the constraints the match leaves, never by writing out every path. Entries with a
    ``*`` (a glob over path segments) or ``re:`` (a regular expression, compressed-tensors' form) are
    matched against each concrete path, as a prefix ending at a module boundary (``patterns`` False:
    such entries match nothing). ``inner``: a short entry also matches inside a path (see the module's
    docstring). ``entries`` may be a :class:`SkipList` read for the same ``roots``.
    """
    parsed = entries if isinstance(entries, SkipList) and entries.roots == roots else SkipList(entries, roots)
    entries, rooted, short, index = parsed.entries, parsed.rooted, parsed.short, parsed.index
    patterns = parsed.found if patterns else []
    canon = roots[0]
    pattern_match = _pattern_matcher(patterns, roots) if patterns else None
    for count, indices, mods in groups:
        out = []
        for m in mods:
            if not entries or m.kind not in ("linear", "parameter"):
                out.append(0)
                continue
            template = m.path.rsplit(".", 1)[0] if m.kind == "parameter" else m.path  # a bare parameter's module
            constraints = None if pattern_match else _skip_constraints(template, index, canon, inner)
            if constraints is None:
                matches = _skip_matcher(rooted, short, canon, _layer_segment(template) if inner else None)
                layers = indices if indices is not None else (None,)
                copies = sum(
                    1 for i in layers for p in m.paths(i)
                    if matches(q := (p.rsplit(".", 1)[0] if m.kind == "parameter" else p))
                    or (pattern_match is not None and pattern_match(q))
                )
            else:
                copies = _copies_matched(constraints, indices if indices is not None else (0,), count, m.repeat)
            out.append(copies)
        yield count, indices, mods, out


def skipped_quantizable(groups: Iterable[tuple], entries: Iterable[str] | SkipList, roots: tuple, *,
                        inner: bool = True) -> int:
    """Quantizable weights a 4-bit load keeps in 16 bit because the skip list names their module
    (``groups``: (copies, layer indices or None, modules) of a model; ``roots``: the text tower's
    paths, the canonical one first). Glob and ``re:`` entries belong to a checkpoint's own format
    (gpt-oss's MXFP4 list); a bitsandbytes load does not read them. ``inner``: short entries also match
    inside a path, as transformers before 5 and Unsloth Studio's estimator match them (False: only at a
    path's start or end, as transformers 5 matches them)."""
    return sum(copies * (m.weight_params // m.repeat)
               for _, _, mods, skipped in skipped_copies(groups, entries, roots, patterns=False, inner=inner)
               for m, copies in zip(mods, skipped) if m.quantizable)


def _pattern_matcher(patterns: list, roots: tuple):
    """A predicate over concrete module paths for glob (``*``: any one segment's text) and ``re:``
    entries, tried on the path under each of the text tower's roots."""
    compiled = []
    for p in patterns:
        text = p[3:] if p.startswith("re:") else ".*".join(re.escape(part) for part in p.split("*"))
        try:
            compiled.append(re.compile(f"(?:{text})(?:\\.|$)"))
        except re.error:
            continue
    canon = roots[0]

    def matches(path: str) -> bool:
        rel = path[len(canon) + 1:] if path.startswith(canon + ".") else None
        names = [path] + ([f"{r}.{rel}" for r in roots[1:]] if rel is not None else [])
        return any(c.match(n) for c in compiled for n in names)

    return matches


def _skip_matcher(rooted: list, short: list, canon: str, layer_at: int | None = None):
    """A predicate over concrete module paths (used when a path template cannot be matched as a whole);
    ``layer_at``: the position of the layer-index segment in the paths, where a short entry may also
    match a run of segments inside a path that ends there or deeper (None: only at its ends)."""
    inner = [e.split(".") for e in short] if layer_at is not None else []

    def matches(path: str) -> bool:
        rel = path[len(canon) + 1:] if path.startswith(canon + ".") else path  # beside the root: the head
        if rel:
            for r in rooted:
                if r == "" or rel == r or rel.startswith(r + "."):
                    return True
        for e in short:
            if path == e or path.endswith("." + e) or path.startswith(e + "."):
                return True
        if inner:
            segs = path.split(".")
            for e in inner:
                n = len(e)
                if any(segs[o:o + n] == e for o in range(max(1, layer_at - n + 1), len(segs) - n)):
                    return True
        return False

    return matches

