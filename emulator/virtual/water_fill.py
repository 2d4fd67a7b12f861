"""Max-min fair shares of a capacity among flows with caps (water-filling), plain and weighted: the
fluid link's sharing rule (link.py), pure, on lists of floats."""

from __future__ import annotations

_INF = float("inf")


def max_min(caps: list[float], total: float, left: float) -> list[float]:
    """Each flow's share of `left`: the smallest caps are met first, the rest split what is left
    equally. `total` is sum(caps), which the caller has added up already. Two shortcuts skip the
    sort: every cap fits (pipelined transfers on a wide link), or none binds (an equal split)."""
    if left == _INF or total <= left:  # (inf - inf would be NaN below)
        return [cap if cap < left else left for cap in caps]
    n = len(caps)
    share = left / n
    if min(caps) >= share:
        return [share] * n
    rates = caps[:]
    order = sorted(range(n), key=caps.__getitem__)
    for i, k in enumerate(order):
        share = left / (n - i)
        if caps[k] > share:
            for rest in order[i:]:
                rates[rest] = share
            break
        left -= caps[k]
    return rates


def weighted_max_min(caps: list[float], weights: list[float], left: float) -> list[float]:
    """Water-filling by weight: each round fixes the flows whose cap is below their weight's part of
    what is left; the rest split it by weight."""
    n = len(caps)
    rates = [0.0] * n
    is_fixed = [False] * n
    weight_sum = 0.0
    for weight in weights:
        weight_sum += weight
    while weight_sum > 0:
        unit, moved = left / weight_sum, False
        for i in range(n):
            if not is_fixed[i] and caps[i] <= weights[i] * unit:
                rates[i], is_fixed[i], moved = caps[i], True, True
                left -= caps[i]
                weight_sum -= weights[i]
        if not moved:
            for i in range(n):
                if not is_fixed[i]:
                    rates[i] = weights[i] * unit
            break
    return rates
