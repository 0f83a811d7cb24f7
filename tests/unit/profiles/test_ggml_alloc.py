"""ggml's graph allocator, simulated (vramwise.profiles.ggml_alloc), on small graphs whose placements are derived by
hand from ggml/src/ggml-alloc.c at llama.cpp 0c1e5709: ggml_dyn_tallocr_alloc (:202-284, best fit among the free
blocks but the last, else the last), ggml_dyn_tallocr_free_bytes (:287-322, merging with a neighbour, else a new
block in address order), ggml_gallocr_allocate_node (:601-660, in place), ggml_gallocr_free_node (:662-684,
outputs kept) and ggml_gallocr_alloc_graph_impl (:690-786, leafs first, then the nodes). Alignment 32 bytes (the
CPU buffer's). A block is written [offset, end); "inf" is the open end of the buffer."""

from __future__ import annotations

from vramwise.profiles.ggml_alloc import (CPU_ALIGNMENT, INPLACE_OPS, Tensor, graph_extent, graph_offsets, graph_states,
                                          reserved_bytes)

F32 = "f32"


def leaf(nbytes, *, is_input=True, is_output=False, layout=None):
    return Tensor(nbytes, node=False, is_input=is_input, is_output=is_output, layout=layout)


def node(nbytes, *srcs, inplace=False, layout=None, view_of=None, is_output=False, external=False):
    return Tensor(nbytes, srcs=srcs, inplace=inplace, layout=layout, view_of=view_of, is_output=is_output,
                  external=external)


def test_a_chain_reuses_the_block_its_input_freed():
    # 0: input A of 100 bytes, rounded up to 128: placed [0, 128) with the leafs.
    # 1: B = op(A), 64 bytes: no free block but the open end [128, inf) -> [128, 192); extent 192. A's last
    #    consumer ran: A freed, [0, 128) joins the open end's start (0 + 128 == 128): [0, inf).
    # 2: C = op(B), 64 bytes, an output: the only block is the last -> [0, 64). B freed: [128, 192) becomes a
    #    block of its own after [64, inf) (kept in address order). Extent 192.
    g = (leaf(100), node(64, 0), node(64, 1, is_output=True))
    assert graph_offsets(g) == (0, 128, 0)
    assert graph_extent(g) == 192
    assert CPU_ALIGNMENT == 32


def test_an_op_that_may_run_in_place_takes_its_parents_place():
    # 0: input A, 128 bytes at [0, 128). 1: B = ADD(A), same layout, A's only consumer: B takes A's place (0) and
    # no new bytes. 2: C = MUL_MAT(B), 256 bytes: [128, 384). Extent 384.
    lay = (F32, (32,))
    g = (leaf(128, layout=lay), node(128, 0, inplace=True, layout=lay), node(256, 1, is_output=True))
    assert graph_offsets(g) == (0, 0, 128)
    assert graph_extent(g) == 384
    # the same op not in place: B at [128, 256), A freed ([0, 128) a block of its own, the open end at 256);
    # C's 256 bytes do not fit [0, 128): the open end, [256, 512). Extent 512.
    g2 = (leaf(128, layout=lay), node(128, 0, layout=lay), node(256, 1, is_output=True))
    assert graph_offsets(g2) == (0, 128, 256)
    assert graph_extent(g2) == 512
    assert {"ADD", "MUL", "RMS_NORM", "ROPE", "SOFT_MAX", "SCALE", "UNARY"} <= INPLACE_OPS
    assert not {"MUL_MAT", "GLU", "GET_ROWS", "CONT", "FLASH_ATTN_EXT"} & INPLACE_OPS


def test_no_place_is_taken_from_an_output_a_parent_with_other_consumers_or_another_layout():
    lay = (F32, (32,))
    # A is a graph output: B = ADD(A) cannot overwrite it -> B at [128, 256)
    assert graph_offsets((leaf(128, is_output=True, layout=lay), node(128, 0, inplace=True, layout=lay))) == (0, 128)
    # A has two consumers (B and C): B allocates [128, 256); C = op(A, B) goes to the open end [256, 384)
    g = (leaf(128, layout=lay), node(128, 0, inplace=True, layout=lay), node(128, 0, 1, layout=lay))
    assert graph_offsets(g) == (0, 128, 256)
    # another layout (a shape of 4 x 8 against 32): no reuse
    assert graph_offsets((leaf(128, layout=lay), node(128, 0, inplace=True, layout=(F32, (4, 8))))) == (0, 128)


def test_best_fit_takes_the_smallest_free_block_that_holds_the_tensor():
    # leafs (inputs): P 96 [0, 96), S1 32 [96, 128), Q 64 [128, 192), S2 32 [192, 224).
    # N1 = op(P, Q), 32, an output: the open end [224, 256). P freed: [0, 96) a new block; Q freed: [128, 192) a new
    #   block; free: [0, 96) [128, 192) [256, inf).
    # N2 = op(S1, S2), 64: of the blocks but the last, [0, 96) (96) and [128, 192) (64) hold it; the smaller wins
    #   -> 128, the block used up. S1 freed: [96, 128) extends [0, 96) to [0, 128); S2 freed: [192, 224), a block.
    # N3 = op(N2), 160, an output: no block but the last holds 160 -> [256, 416). Extent 416 (first fit would
    #   have put N2 at 0 and N3 at 64, in a merged [64, 224)).
    g = (leaf(96), leaf(32), leaf(64), leaf(32), node(32, 0, 2, is_output=True), node(64, 1, 3),
         node(160, 5, is_output=True))
    assert graph_offsets(g) == (0, 96, 128, 192, 224, 128, 256)
    assert graph_extent(g) == 416


def test_of_equal_blocks_the_later_is_taken():
    # leafs: A 32 [0, 32), B 32 [32, 64), C 32 [64, 96), D 32 [96, 128). N1 = op(A, C), 32, output: [128, 160).
    # A freed: [0, 32); C freed: [64, 96); free [0, 32) [64, 96) [160, inf). N2 = op(B, D), 32: both blocks hold
    # it with the same size; ggml keeps the last of equals (block->size <= best_fit_size) -> 64.
    g = (leaf(32), leaf(32), leaf(32), leaf(32), node(32, 0, 2, is_output=True), node(32, 1, 3, is_output=True))
    assert graph_offsets(g)[5] == 64


def test_a_view_keeps_the_tensor_it_looks_into_until_the_views_last_consumer():
    # 0: input I, 32: [0, 32).
    # 1: A = op(I), 128: [32, 160); I freed: [0, 32) a block (the open end starts at 160).
    # 2: V = view of A (reads A): no bytes; A has 1 consumer left and 1 view.
    # 3: D = op(A), 32: best fit [0, 32) -> 0. A has no consumer left but is viewed: kept.
    # 4: F = op(D), 128: the open end, [160, 288). D freed: [0, 32).
    # 5: E = op(V), 32: [0, 32) -> 0. V's last consumer: A freed, [32, 160). Extent 288.
    g = (leaf(32), node(128, 0), node(0, 1, view_of=1), node(32, 1), node(128, 3), node(32, 2, is_output=True))
    assert graph_offsets(g) == (0, 32, None, 0, 160, 0)
    assert graph_extent(g) == 288
    # without the view (and E): A is freed after D, [32, 160) joins the open end, and F goes to 32: extent 160
    assert graph_offsets((g[0], g[1], node(32, 1), node(128, 2))) == (0, 32, 0, 32)
    assert graph_extent((g[0], g[1], node(32, 1), node(128, 2))) == 160
    # a view no node reads keeps A to the end: A's views never drop to 0 (F at 160 again)
    assert graph_extent(g[:5]) == 288


def test_external_tensors_take_no_bytes_but_count_as_consumers():
    # a write into the KV cache (an external node) reads K: K is freed only after it. 0: input X 64 [0, 64).
    # 1: K = op(X), 64: [64, 128); X freed: [0, 64) a block of its own (the open end starts at 128).
    # 2: W = set_rows(K) into the cache: no bytes; K freed: [64, 128) extends [0, 64), which then meets the open
    #    end: [0, inf).
    # 3: Y, 128, read from nothing of the buffer -> 0. Extent 128 (K freed before W ran would not change it; a K
    #    kept past W would put Y at 128).
    g = (leaf(64), node(64, 0), node(0, 1, external=True), node(128, is_output=True))
    assert graph_offsets(g) == (0, 64, None, 0)
    assert graph_extent(g) == 128


def test_the_buffer_is_the_largest_of_the_graphs_reserved():
    small = (leaf(64), node(64, 0, is_output=True))  # 128
    large = (leaf(256), node(256, 0, is_output=True))  # 512
    assert reserved_bytes([small, large, small]) == 512
    assert reserved_bytes([]) == 0


def _layers(n):
    # an input X (64 bytes), then n layers Y_k = op(Y_k-1, X) (Y_0 = op(X)), 64 bytes each, then an output Z = op(Y_n-1)
    g = [leaf(64), node(64, 0)]
    for _ in range(1, n):
        g.append(node(64, len(g) - 1, 0))
    g.append(node(64, len(g) - 1, is_output=True))
    return tuple(g)


def test_the_allocator_state_before_each_layer_repeats_with_a_period():
    # five layers (rows 1 to 5), X read by all of them. Leafs: X [0, 64).
    # before Y_0: free [64, inf); extent 64. Y_0 -> [64, 128).
    # before Y_1: free [128, inf); extent 128; Y_0 live. Y_1 -> [128, 192); Y_0 freed: [64, 128) a block.
    # before Y_2: free [64, 128) [192, inf); extent 192; Y_1 at 128, one consumer to come.
    # Y_2 -> 64 (best fit); Y_1 freed: [128, 192) joins the open end: [128, inf).
    # before Y_3: free [128, inf); extent 192; Y_2 at 64. Y_3 -> 128; Y_2 freed: [64, 128) a block.
    # before Y_4: free [64, 128) [192, inf); extent 192; Y_3 at 128: the state before Y_2 again (X named by its
    # row, its consumers to come left out: 3 before Y_2, 1 before Y_4).
    extent, states = graph_states(_layers(5), (1, 2, 3, 4, 5))
    assert extent == 192
    assert states[2] == states[4] and states[1] != states[3]  # before Y_1 the extent was still 128
    big = (1 << 62) - 192
    assert states[2] == (((64, 64), (192, big)), 192, ((("prefix", 0), True, 0, None, 0), (1, True, 128, 1, 0)))
    # so two more layers repeat layers 2 and 3 and change nothing: the deeper graph's extent is the same
    assert graph_extent(_layers(7)) == graph_extent(_layers(5)) == 192
