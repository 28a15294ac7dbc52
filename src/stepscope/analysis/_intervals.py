"""Interval algebra in DuckDB SQL: merge time intervals into islands, sweep overlapping sets.

Busy time is the length of a *union* of intervals (two kernels on two streams that overlap
count once). The builders return SQL text to embed in a ``WITH`` clause; they run as window
functions (sort + running max), so a million intervals cost one sort, never a Python loop.
When only the union's length is wanted (in total or clipped to windows), the disjoint pieces of
:func:`covered_pieces_sql` give it with one window function and no grouping.
"""

from __future__ import annotations

__all__ = ["covered_pieces_sql", "merged_intervals_sql", "overlap_masks_sql"]


def merged_intervals_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding ``keys..., start_us, end_us``: the union of ``source``'s intervals per key.

    :param source: a relation with columns ``keys``, ``start_us`` and ``end_us``.
    :param keys: the partition columns (e.g. ``("rank", "device")``); may be empty.
    Touching intervals (one ends where the next starts) merge into one island.
    """
    key_list = ", ".join(keys)
    partition = f"PARTITION BY {key_list}" if keys else ""
    select_keys = f"{key_list}, " if keys else ""
    return f"""
        SELECT {select_keys}island, min(start_us) AS start_us, max(end_us) AS end_us
        FROM (
            SELECT *, sum(CASE WHEN prev_end IS NULL OR start_us > prev_end THEN 1 ELSE 0 END)
                      OVER ({partition} ORDER BY start_us, end_us ROWS UNBOUNDED PRECEDING)
                      AS island
            FROM (
                SELECT {select_keys}start_us, end_us,
                       max(end_us) OVER ({partition} ORDER BY start_us, end_us
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                           AS prev_end
                FROM ({source})
            )
        )
        GROUP BY {select_keys}island
    """


def covered_pieces_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding ``keys..., start_us, end_us``: disjoint pieces covering ``source``'s union.

    In start order, each interval contributes the part of it that ends after every earlier
    interval ended: from the later of its start and that running maximum end, to its own end.
    The pieces cover exactly the union (per key), so any length measured on the union (its
    total, its share of a time bucket) is the same summed over the pieces; unlike
    :func:`merged_intervals_sql` adjacent pieces are not joined into one island. The first
    start and the last end are the islands' too: an empty interval after every earlier end
    stays, as an empty piece.

    :param source: a relation with columns ``keys``, ``start_us`` and ``end_us``.
    :param keys: the partition columns (e.g. ``("rank", "device")``); may be empty.
    """
    key_list = ", ".join(keys)
    partition = f"PARTITION BY {key_list}" if keys else ""
    select_keys = f"{key_list}, " if keys else ""
    return f"""
        SELECT {select_keys}greatest(start_us, coalesce(prev_end, start_us)) AS start_us, end_us
        FROM (
            SELECT {select_keys}start_us, end_us,
                   max(end_us) OVER ({partition} ORDER BY start_us, end_us
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                       AS prev_end
            FROM ({source})
        )
        WHERE prev_end IS NULL OR end_us > prev_end
    """


def overlap_masks_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding ``keys..., mask, dur_us``: how long each combination of sets was busy.

    :param source: a relation with ``keys``, ``bit`` (a power of two naming the set an interval
        belongs to), ``start_us`` and ``end_us``.
    Each set is merged first, so within a set overlaps count once; then a sweep over all
    island edges keeps the running sum of the bits, which is exactly the set of sets busy in
    each elementary segment (HTA's kernel-type overlap method). The islands are computed once
    and each yields its two edges (``unnest``), rather than being scanned once per edge.
    """
    key_list = ", ".join(keys)
    merged = merged_intervals_sql(source, (*keys, "bit"))
    partition = f"PARTITION BY {key_list}" if keys else ""
    select_keys = f"{key_list}, " if keys else ""
    return f"""
        WITH islands AS ({merged})
        SELECT {select_keys}mask, sum(next_t - t) AS dur_us
        FROM (
            SELECT {select_keys}t,
                   sum(delta) OVER ({partition} ORDER BY t, delta ROWS UNBOUNDED PRECEDING)
                       AS mask,
                   lead(t) OVER ({partition} ORDER BY t, delta) AS next_t
            FROM (
                SELECT {select_keys}unnest([start_us, end_us]) AS t, unnest([bit, -bit]) AS delta
                FROM islands
            )
        )
        WHERE mask > 0 AND next_t IS NOT NULL
        GROUP BY {select_keys}mask
    """
