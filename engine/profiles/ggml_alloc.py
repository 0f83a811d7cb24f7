"""ggml's graph allocator, simulated: the extent of the buffer ``ggml_gallocr`` reserves for a graph.

What llama.cpp reports as a backend's compute buffer is the largest offset ggml-alloc reaches while it places
the tensors of the graphs it reserves, one after another, in one buffer: inputs first, then every node in graph
order, each in the best-fitting free block, or in the place of a parent it may overwrite, freed once its last
consumer has run. This module replays that procedure on a graph given as data (:class:`Tensor` rows: bytes,
sources, the tensor a view looks into, the flags), with no knowledge of any model: the same code places the
tensors of every architecture's graph, as ggml-alloc does.

Source, ggml at llama.cpp 0c1e5709 (ggml/src/ggml-alloc.c):

- ``ggml_dyn_tallocr_alloc`` (:202-284): sizes rounded up to the buffer's alignment; the best fit among the free
  blocks but the last (the smallest block that holds the tensor, the later of equal ones), else the last block,
  the buffer's growing end; the buffer's size is the largest end so reached (``max_size``).
- ``ggml_dyn_tallocr_free_bytes`` (:287-322): a freed range merges with the block it ends or starts (and that
  block with its neighbour), else it becomes a block of its own, kept in address order.
- ``ggml_gallocr_allocate_node`` (:601-660): views and tensors allocated elsewhere (weights, the KV cache) take
  no space; a node whose op may run in place (``ggml_op_can_inplace``, :22-50) takes the place of its first
  parent that is the allocator's own, not a graph output, of the same layout, with this node its only consumer
  and no view of it, and gives back the parent's extra bytes (``ggml_gallocr_free_extra_space``).
- ``ggml_gallocr_free_node`` (:662-684): graph outputs are never freed.
- ``ggml_gallocr_alloc_graph_impl`` (:690-786): the leafs first, in order; then, counting consumers and views
  over the nodes, each input where it is first met; then the nodes in order: a node's parents, the node, and
  the parents (or the tensor a view parent looks into) whose last consumer this was freed.
- ``ggml_gallocr_reserve_n_impl`` (:818-933): each reserve starts from an empty allocator; the buffer grows to
  the largest reserve and never shrinks, so after several reserves it is the largest of them.

The CPU buffer's alignment is 32 bytes (ggml/src/ggml-impl.h:44 TENSOR_ALIGNMENT; ggml-backend.cpp:2475).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Tensor", "CPU_ALIGNMENT", "INPLACE_OPS", "graph_extent", "graph_offsets", "graph_states", "reserved_bytes"]

#: The ops whose node may take its parent's place (ggml-alloc.c:22-50 ggml_op_can_inplace), by ggml_op_name.
INPLACE_OPS = frozenset({
    "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL", "DIV", "SQR", "SQRT",
    "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM", "RMS_NORM_BACK", "CLAMP", "SOFT_MAX",
    "SOFT_MAX_BACK",
})

#: The CPU buffer type's alignment (ggml_backend_cpu_buffer_type_get_alignment: TENSOR_ALIGNMENT).
CPU_ALIGNMENT = 32


class Tensor(NamedTuple):
    """One tensor of a graph: a leaf (``node`` False) or a node, in the graph's order (a named tuple: a graph of
    thousands of tensors is built for every estimate).

    ``srcs`` and ``view_of`` are indices of earlier rows of the same graph; ``inplace`` whether the node's op
    is one ``ggml_op_can_inplace`` accepts; ``layout`` what ``ggml_are_same_layout`` compares (type, shape,
    strides: rows with equal layouts have equal keys); ``external`` a tensor allocated in another buffer (a
    weight, the KV cache)."""

    nbytes: int
    node: bool = True
    srcs: tuple = ()
    view_of: int | None = None
    inplace: bool = False
    layout: object = None
    is_input: bool = False
    is_output: bool = False
    external: bool = False


class _Blocks:
    """ggml_dyn_tallocr with one chunk (the CPU buffer's maximum size is unbounded): free blocks in address
    order, the last one the buffer's open end."""

    __slots__ = ("align", "free", "max_size")

    def __init__(self, align: int):
        self.align = align
        self.free: list[list[int]] = []  # [offset, size]; empty until the chunk is made by the first allocation
        self.max_size = 0

    def alloc(self, size: int) -> int:
        size = -(-size // self.align) * self.align
        free = self.free
        if not free:  # ggml_dyn_tallocr_new_chunk: one block from 0 to "infinity"
            free.append([0, 1 << 62])
        best, best_size = -1, None
        for i in range(len(free) - 1):
            s = free[i][1]
            if s >= size and (best_size is None or s <= best_size):
                best, best_size = i, s
        if best < 0:
            best = len(free) - 1
        block = free[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del free[best]
        if offset + size > self.max_size:
            self.max_size = offset + size
        return offset

    def release(self, offset: int, size: int) -> None:
        size = -(-size // self.align) * self.align
        free = self.free
        for i, block in enumerate(free):
            if block[0] + block[1] == offset:
                block[1] += size
                if i < len(free) - 1 and block[0] + block[1] == free[i + 1][0]:
                    block[1] += free[i + 1][1]
                    del free[i + 1]
                return
            if offset + size == block[0]:
                block[0] = offset
                block[1] += size
                if i > 0 and free[i - 1][0] + free[i - 1][1] == block[0]:
                    free[i - 1][1] += block[1]
                    del free[i]
                return
        k = 0
        while k < len(free) and free[k][0] < offset:
            k += 1
        free.insert(k, [offset, size])


def graph_extent(graph: tuple, align: int = CPU_ALIGNMENT) -> int:
    """The bytes ggml-alloc reserves for ``graph`` (a sequence of :class:`Tensor`, leafs and nodes in the
    graph's order) in a buffer of alignment ``align``."""
    return _simulate(graph, align)[1]


def graph_offsets(graph: tuple, align: int = CPU_ALIGNMENT) -> tuple:
    """Where ggml-alloc places each tensor of ``graph``: its offset in the buffer, None for a tensor it does
    not place (a view, an external tensor)."""
    return _simulate(graph, align)[0]


def graph_states(graph: tuple, marks: tuple, align: int = CPU_ALIGNMENT) -> tuple[int, tuple]:
    """The extent of ``graph`` and the allocator's state before each row of ``marks`` (ascending node rows, the
    first of each repeated section, the rows before ``marks[0]`` its prefix): the free blocks, the extent so
    far, and each tensor still allocated, viewed or awaited by a consumer, with its place, its consumers and
    views to come. A tensor of the prefix is named by its row and its consumers are left out (a prefix tensor
    read by every section is freed at the end only, however many sections there are); any other by its row's
    distance back from the mark. Two marks with equal states are where the allocator stands in the same place:
    what follows the one, if the same rows follow, it does the same after the other."""
    _, extent, states = _simulate(graph, align, marks)
    return extent, states


def _simulate(graph: tuple, align: int, marks: tuple = ()) -> tuple[tuple, int, tuple]:
    n = len(graph)
    children = [0] * n
    views = [0] * n
    own = [False] * n
    offset: list = [None] * n
    blocks = _Blocks(align)

    def allocate(i: int) -> None:
        t = graph[i]
        if t.external or own[i] or t.view_of is not None:
            return
        # ggml_gallocr_is_allocated is also true of a tensor freed before; a freed tensor is never met again
        own[i] = True
        if t.inplace:
            for p in t.srcs:
                pt = graph[p]
                if not own[p] or pt.is_output or pt.layout != t.layout or children[p] != 1 or views[p] != 0:
                    continue
                # a view parent is never the allocator's own (views are not allocated), so only a plain parent
                offset[i] = offset[p]
                own[p] = False  # its bytes are this node's now
                extra = _aligned(pt.nbytes, align) - _aligned(t.nbytes, align)
                if extra > 0:
                    blocks.release(offset[p] + _aligned(t.nbytes, align), extra)
                return
        offset[i] = blocks.alloc(t.nbytes)

    def free(i: int) -> None:
        if graph[i].is_output:
            return
        blocks.release(offset[i], graph[i].nbytes)
        own[i] = False

    for i, t in enumerate(graph):
        if not t.node:
            allocate(i)
    for i, t in enumerate(graph):
        if not t.node:
            continue
        if t.view_of is not None:
            views[t.view_of] += 1
        if t.is_input:
            allocate(i)
        for p in t.srcs:
            children[p] += 1
            if graph[p].is_input:
                allocate(p)
    states = []
    pending = list(reversed(marks))
    prefix = marks[0] if marks else 0
    for i, t in enumerate(graph):
        if not t.node:
            continue
        if pending and pending[-1] == i:
            pending.pop()
            live = tuple((("prefix", x) if x < prefix else i - x, own[x], offset[x] if own[x] else None,
                          None if x < prefix else children[x], views[x])
                         for x in range(i) if own[x] or children[x] or views[x])
            states.append((tuple(map(tuple, blocks.free)), blocks.max_size, live))
        for p in t.srcs:
            allocate(p)
        allocate(i)
        for p in t.srcs:
            children[p] -= 1
            if children[p] == 0 and views[p] == 0:
                v = graph[p].view_of
                if v is not None:
                    views[v] -= 1
                    if views[v] == 0 and children[v] == 0 and own[v]:
                        free(v)
                elif own[p]:
                    free(p)
    return tuple(offset), blocks.max_size, tuple(states)


def reserved_bytes(graphs, align: int = CPU_ALIGNMENT) -> int:
    """The buffer after reserving each of ``graphs`` in turn: the largest extent (ggml_gallocr_reserve_n grows
    the buffer when a graph needs more and keeps it otherwise)."""
    return max((graph_extent(g, align) for g in graphs), default=0)


def _aligned(size: int, align: int) -> int:
    return -(-size // align) * align
