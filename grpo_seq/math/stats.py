"""Intervals for held-out scores, and the paired comparison of two models on the same items (pure).

A learning claim compares the trained model with the model it started from on the same held-out
items, so the comparison is paired: an item both get right (or both wrong) says nothing about the
difference; only the items where they disagree do. These functions give

- :func:`mean_interval`: a score's 95% interval, Wilson's for a share of 0/1 scores, a normal
  approximation for scores in between;
- :func:`paired_difference`: ``after - before`` per item, its 95% interval (Newcombe's paired
  Wilson interval for 0/1 scores, else a normal approximation of the per-item differences) and,
  for 0/1 scores, the exact McNemar p-value;
- :func:`best_constant`: the best score a single fixed answer gets on the items (the majority
  baseline a collapsed policy would reach).

Every function takes plain Python numbers; ``z`` is the normal quantile (1.96: 95%).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

__all__ = ["Z95", "is_binary", "wilson_interval", "mean_interval", "mcnemar_exact_p", "newcombe_paired_interval",
           "paired_difference", "best_constant"]

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def is_binary(scores: Iterable[float]) -> bool:
    """Whether every score is 0 or 1 (an item is right or wrong)."""
    return all(s in (0.0, 1.0) for s in scores)


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a share ``k / n``:

        centre = (p + z^2 / 2n) / (1 + z^2 / n),
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2),   p = k / n.

    Unlike ``p +- z sqrt(p(1-p)/n)`` it stays inside [0, 1] and is not empty at ``k = 0``."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"wilson_interval: need 0 <= k <= n and n > 0, got k={k}, n={n}")
    p, d = k / n, 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z / d * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _normal_interval(values: Sequence[float], z: float) -> tuple[float, float]:
    """``mean +- z * s / sqrt(n)``, ``s`` the sample standard deviation (0 for one value)."""
    n = len(values)
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean - z * s / math.sqrt(n), mean + z * s / math.sqrt(n)


def mean_interval(scores: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """The interval of the mean score: Wilson's (:func:`wilson_interval`) when every score is 0 or
    1, else the normal approximation ``mean +- z s / sqrt(n)``."""
    if not scores:
        raise ValueError("mean_interval: no scores")
    if is_binary(scores):
        return wilson_interval(int(sum(scores)), len(scores), z)
    return _normal_interval(scores, z)


def mcnemar_exact_p(b: int, c: int) -> float:
    """The exact McNemar test's two-sided p-value for ``b`` items only the second model got right
    and ``c`` only the first: under "no difference" each of the ``b + c`` discordant items goes
    either way with probability 1/2, so

        p = min(1, 2 * sum_{k <= min(b, c)} C(b + c, k) / 2^(b + c)),   1 when b + c = 0."""
    m = b + c
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, k) for k in range(min(b, c) + 1)) / 2 ** m
    return min(1.0, 2 * tail)


def newcombe_paired_interval(both: int, only_before: int, only_after: int, neither: int,
                             z: float = Z95) -> tuple[float, float]:
    """Newcombe's interval (1998, method 10) for ``p_after - p_before`` on paired 0/1 scores.

    With ``n`` items, ``p1 = (both + only_after) / n`` (after), ``p2 = (both + only_before) / n``
    (before), Wilson intervals ``[l1, u1]`` and ``[l2, u2]`` for them, ``D = p1 - p2`` and the
    continuity-corrected correlation ``phi = C / sqrt((both+oa)(ob+neither)(both+ob)(oa+neither))``
    (``B = both * neither - only_after * only_before``; ``C = B - n/2`` if ``B > n/2``, ``0`` if
    ``0 <= B <= n/2``, ``B`` if ``B < 0``; ``phi = 0`` when a margin is empty):

        lower = D - sqrt((p1 - l1)^2 - 2 phi (p1 - l1)(u2 - p2) + (u2 - p2)^2)
        upper = D + sqrt((u1 - p1)^2 - 2 phi (u1 - p1)(p2 - l2) + (p2 - l2)^2)

    It keeps the Wilson intervals' good coverage at small counts and is never empty, even when the
    two models agree on every item."""
    n = both + only_before + only_after + neither
    a, b = both + only_after, both + only_before  # right after, right before
    p1, p2 = a / n, b / n
    l1, u1 = wilson_interval(a, n, z)
    l2, u2 = wilson_interval(b, n, z)
    margins = a * (n - a) * b * (n - b)
    B = both * neither - only_after * only_before
    C = B - n / 2 if B > n / 2 else (0.0 if B >= 0 else B)
    phi = C / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    lower = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    upper = d + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, lower), min(1.0, upper)


def paired_difference(before: Sequence[float], after: Sequence[float], z: float = Z95) -> dict:
    """``mean(after) - mean(before)`` over the same items, with its interval.

    0/1 scores: Newcombe's paired interval and the exact McNemar p-value, with the counts of items
    only ``after`` got right (``better``) and only ``before`` did (``worse``). Other scores: the
    normal approximation over the per-item differences. Returns ``{"value", "interval", "method"}``
    and, for 0/1 scores, ``"p_value", "better", "worse"``."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired_difference: need the same items, got {len(before)} and {len(after)} scores")
    n = len(before)
    if is_binary(before) and is_binary(after):
        pairs = list(zip(before, after))
        both = sum(1 for x, y in pairs if x and y)
        better = sum(1 for x, y in pairs if y and not x)
        worse = sum(1 for x, y in pairs if x and not y)
        return {"value": (better - worse) / n,
                "interval": list(newcombe_paired_interval(both, worse, better, n - both - better - worse, z)),
                "method": "Newcombe's paired Wilson interval; exact McNemar test",
                "p_value": mcnemar_exact_p(better, worse), "better": better, "worse": worse}
    diffs = [y - x for x, y in zip(before, after)]
    return {"value": sum(diffs) / n, "interval": list(_normal_interval(diffs, z)),
            "method": "normal approximation of the per-item differences"}


def best_constant(candidates: Iterable[str], score: Callable[[str], Sequence[float]]) -> tuple[str, list[float]] | None:
    """The candidate answer whose per-item scores (``score(candidate)``, one per item) have the
    highest mean, with those scores; the first such candidate on ties; None without candidates."""
    best: tuple[str, list[float]] | None = None
    for text in candidates:
        scores = list(score(text))
        if best is None or sum(scores) > sum(best[1]):
            best = (text, scores)
    return best
