"""Planning prefill for prompts that share prefixes: which prefix levels to run once and which rows
each prompt then continues from (the local client's shared-prefix prefill)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

__all__ = ["plan_levels"]

# At most this many levels of shared prefixes, each counted as this many extra prompt tokens (one more
# forward pass and a copy of the KV cache rows).
MAX_LEVELS = 4
LEVEL_COST_TOKENS = 16


def plan_levels(prompts: Sequence[tuple[int, ...]]) -> list[tuple[int, list[int]]]:
    """How to run the prefixes that distinct ``prompts`` share: a list of levels ``(cut, rows)``.

    Level ``l`` runs tokens ``[cut_{l-1}, cut_l)`` once per distinct prefix of length ``cut_l``
    (``rows[i]``: the row of prompt ``i``, rows numbered in order of first appearance); every prompt then
    runs its own tokens from the last cut on. Cuts are the same positions for every prompt, so a level
    needs no padding, and they stop short of the shortest prompt, so every prompt keeps a last position
    of its own. The cuts minimise the tokens run, each level counted ``LEVEL_COST_TOKENS`` extra (its
    forward pass and KV-cache copy); no level at all when sharing saves nothing.
    """
    n = len(prompts)
    if n < 2:
        return []
    order = sorted(range(n), key=prompts.__getitem__)
    # Lexicographic neighbours: prompts i and j share a prefix of length c iff every neighbour pair
    # between them does.
    lcps = [common_len(prompts[a], prompts[b]) for a, b in itertools.pairwise(order)]
    shortest, longest = min(len(p) for p in prompts), max(len(p) for p in prompts)
    # The number of distinct prefixes of length c only grows just past a neighbour LCP, so the best cut
    # positions are those LCPs.
    candidates = sorted({min(c, shortest - 1) for c in lcps} - {0})
    if not candidates:
        return []
    sorted_lcps = sorted(lcps)
    distinct = [1 + bisect.bisect_left(sorted_lcps, c) for c in candidates]
    inf = float("inf")
    # cost[k][j]: tokens run by k levels, the last cut at candidates[j]; back[k][j]: the cut before it.
    cost = [[inf] * len(candidates) for _ in range(MAX_LEVELS + 1)]
    back = [[-1] * len(candidates) for _ in range(MAX_LEVELS + 1)]
    for j, c in enumerate(candidates):
        cost[1][j] = distinct[j] * c + LEVEL_COST_TOKENS
    for k in range(2, MAX_LEVELS + 1):
        for j, c in enumerate(candidates):
            for i in range(j):
                value = cost[k - 1][i] + distinct[j] * (c - candidates[i]) + LEVEL_COST_TOKENS
                if value < cost[k][j]:
                    cost[k][j], back[k][j] = value, i
    best, best_k, best_j = float(n * longest), 0, -1  # no levels: every prompt runs whole
    for k in range(1, MAX_LEVELS + 1):
        for j, c in enumerate(candidates):
            value = cost[k][j] + n * (longest - c)
            if value < best:
                best, best_k, best_j = value, k, j
    cuts: list[int] = []
    while best_k > 0:
        cuts.append(candidates[best_j])
        best_j, best_k = back[best_k][best_j], best_k - 1
    levels = []
    for cut in reversed(cuts):
        rows = [0] * n
        row = 0
        for position, i in enumerate(order):
            if position and lcps[position - 1] < cut:
                row += 1
            rows[i] = row
        # Renumber rows by first appearance in `prompts` order, so that level batches follow it.
        renumber = {r: k for k, r in enumerate(dict.fromkeys(rows))}
        levels.append((cut, [renumber[r] for r in rows]))
    return levels


def common_len(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
