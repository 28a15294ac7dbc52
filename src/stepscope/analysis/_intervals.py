"""Interval algebra in DuckDB SQL: merge time intervals into islands, sweep overlapping sets.

Busy time is the length of a *union* of intervals (two kernels on two streams that overlap
count once). The builders return SQL text to embed in a ``WITH`` clause; they run as window
functions (sort + running max), so a million intervals cost one sort, never a Python loop.
When only the union's length is wanted (in total or clipped to windows), the disjoint pieces of
:func:`covered_pieces_sql` give it with one window function and no grouping.
"""

from __future__ import annotations

__all__ = ["covered_pieces_sql", "merged_intervals_sql", "overlap_masks_sql"]

#: Bits of the running count of one set in :func:`overlap_masks_sql` (a million open intervals).
_COUNT_BITS = 20
_COUNT_MASK = (1 << _COUNT_BITS) - 1


def merged_intervals_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding ``keys..., start_us, end_us``: the union of ``source``'s intervals per key.

    :param source: a relation with columns ``keys``, ``start_us`` and ``end_us``.
    :param keys: the partition columns (e.g. ``("rank", "device")``); may be empty.
    Touching intervals (one ends where the next starts) merge into one island.
    """
    partition, select_keys = _partition(keys)
    return f"""
        SELECT {select_keys}island, min(start_us) AS start_us, max(end_us) AS end_us
        FROM (
            SELECT *, sum(CASE WHEN prev_end IS NULL OR start_us > prev_end THEN 1 ELSE 0 END)
                      OVER ({partition} ORDER BY start_us, end_us ROWS UNBOUNDED PRECEDING)
                      AS island
            FROM ({_with_previous_end_sql(source, keys)})
        )
        GROUP BY {select_keys}island
    """


def _partition(keys: tuple[str, ...]) -> tuple[str, str]:
    """The ``PARTITION BY`` clause of ``keys`` and their select-list prefix (both empty for none)."""
    key_list = ", ".join(keys)
    return (f"PARTITION BY {key_list}", f"{key_list}, ") if keys else ("", "")


def _with_previous_end_sql(source: str, keys: tuple[str, ...]) -> str:
    """``keys..., start_us, end_us, prev_end``: each interval with the latest end of the ones
    before it in start order (per key; NULL for the first)."""
    partition, select_keys = _partition(keys)
    return f"""
        SELECT {select_keys}start_us, end_us,
               max(end_us) OVER ({partition} ORDER BY start_us, end_us
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM ({source})
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
    _, select_keys = _partition(keys)
    return f"""
        SELECT {select_keys}greatest(start_us, coalesce(prev_end, start_us)) AS start_us, end_us
        FROM ({_with_previous_end_sql(source, keys)})
        WHERE prev_end IS NULL OR end_us > prev_end
    """


def overlap_masks_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding ``keys..., mask, dur_us``: how long each combination of sets was busy.

    :param source: a relation with ``keys``, ``bit`` (1, 2 or 4: the set an interval belongs
        to), ``start_us`` and ``end_us``.
    One sweep over the intervals' edges, in time order (starts before ends at the same time),
    keeps a running count of the open intervals of each set, the three counts packed in one
    integer (20 bits each). Between two consecutive edges the sets with a count above zero are
    exactly the sets busy there, so overlaps within a set count once (as if each set were
    merged into islands first) and the mask is HTA's kernel-type overlap. Segments of zero
    length are left out.
    """
    partition, select_keys = _partition(keys)
    window = f"{partition} ORDER BY t, delta DESC"
    return f"""
        SELECT {select_keys}mask, sum(next_t - t) AS dur_us
        FROM (
            SELECT {select_keys}t, next_t,
                   CAST((open & {_COUNT_MASK}) > 0 AS INTEGER)
                   + 2 * CAST(((open >> {_COUNT_BITS}) & {_COUNT_MASK}) > 0 AS INTEGER)
                   + 4 * CAST((open >> {2 * _COUNT_BITS}) > 0 AS INTEGER) AS mask
            FROM (
                SELECT {select_keys}t,
                       sum(delta) OVER ({window} ROWS UNBOUNDED PRECEDING) AS open,
                       lead(t) OVER ({window}) AS next_t
                FROM (
                    SELECT {select_keys}unnest([start_us, end_us]) AS t,
                           unnest([weight, -weight]) AS delta
                    FROM (
                        SELECT {select_keys}start_us, end_us,
                               CASE bit WHEN 1 THEN CAST(1 AS BIGINT)
                                        WHEN 2 THEN CAST({1 << _COUNT_BITS} AS BIGINT)
                                        ELSE CAST({1 << (2 * _COUNT_BITS)} AS BIGINT) END
                                   AS weight
                        FROM ({source})
                    )
                )
            )
            WHERE next_t > t
        )
        WHERE mask > 0
        GROUP BY {select_keys}mask
    """
