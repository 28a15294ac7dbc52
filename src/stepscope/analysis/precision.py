"""Kernel precision (fp64, fp32, tf32, fp16, bf16, fp8, int8, integer): how much GPU time each took.

No trace field states a kernel's precision, so it is inferred. For every kernel the first of
these sources that answers decides (the ``source`` column of :func:`kernel_precision_by_name`):

1. ``name``: :data:`NAME_RULES`, tokens that library and compiler kernel names carry
   (cuBLAS/cuDNN/CUTLASS prefixes such as ``h1688``, ``s1688``, ``sgemm``, ``tf32``; ATen
   template arguments such as ``<float>``, ``<c10::Half>``; NCCL suffixes such as ``_Sum_bf16``).
   Checked in order, first match wins: narrower types come first because a mixed-precision kernel
   name lists its narrow input type beside its fp32 accumulator (``..._f16f16_f16f32_f32``).
   Not for the NCCL kernels that only move bytes (:data:`NCCL_BYTE_KERNELS`): NCCL builds
   send/recv, all-gather and broadcast for ``int8_t`` whatever the tensor's type.
2. ``counters``: CUPTI instruction counters (``cuda_profiler_range`` events recorded with
   ``profiler_metrics``) for a kernel of the same name on the same rank: when executed half
   (``op_h*``), single (``op_f*``) or double (``op_d*``) precision instructions make at least
   90 % of those counted, that class gives fp16, fp32 or fp64. The counters are measured, but
   on their own they mislead, which is why a name token wins over them: compilers zero
   registers with ``HFMA2`` (``max_pool_forward_nchw<float>`` counts only ``hfma``, an fp32
   element-wise add twice as many ``hfma`` as ``fadd``), and tensor-core instructions are not
   counted at all (a TF32 ``hmma`` convolution counts only its fp32 epilogue).
3. ``nccl_dtype``: the ``dtype`` arg NCCL kernels carry (``"Float"``, ``"BFloat16"``), read with
   :data:`DTYPE_RULES`.
4. ``launch_op``: the ``Input type`` arg of the ``cpu_op`` that launched the kernel (joined on
   ``external_id``; needs ``record_shapes=True``), read with :data:`DTYPE_RULES`. This catches
   Triton (``triton_poi_fused_*``), cub and indexing kernels, whose names carry no type.
5. otherwise ``unknown``.

``integer`` groups kernels on 16/32/64-bit integers and booleans (index arithmetic, masks).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import events_connection, rank_clause

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DTYPE_RULES",
    "NAME_RULES",
    "NCCL_BYTE_KERNELS",
    "PRECISIONS",
    "kernel_precision",
    "kernel_precision_by_name",
    "precision_from_name",
]

#: Every label the analysis gives, narrowest floating type last.
PRECISIONS: tuple[str, ...] = (
    "fp64",
    "fp32",
    "tf32",
    "bf16",
    "fp16",
    "fp8",
    "int8",
    "integer",
    "unknown",
)

#: Ordered (precision, case-insensitive regex) rules over kernel names; the first match wins.
NAME_RULES: tuple[tuple[str, str], ...] = (
    ("fp8", r"e4m3|e5m2|fp8|float8"),
    ("int8", r"i8816|i8832|imma|int8|_s8s8|_i8i8|signed char"),
    ("bf16", r"bf16|bfloat16"),
    # Before fp16: Ampere TF32 tensor-core kernels are named "..._hmma_tf32_...".
    ("tf32", r"tf32"),
    ("fp16", r"h884|h1688|h16816|hmma|fp16|f16|c10::half|<half|__half|hcudnn|hgemm"),
    # Volta/Turing tensor-op kernels: "s884"/"s1688" there mean fp16 inputs, fp32 output.
    ("fp16", r"(volta|turing|sm70|sm75|_70_|_75_)\w*_s(884|1688)"),
    ("tf32", r"s1688|s16816|tensorop_s"),
    # An ATen lambda's argument is the element type; "double" elsewhere may be a scalar param.
    ("fp32", r"lambda\(float\)"),
    ("fp64", r"double|dgemm|fp64|f64|d884|dmma|dcudnn"),
    ("fp32", r"float|fp32|f32|sgemm|scudnn|gemmsn|gemmk1|ssyrk|strsm"),
    ("integer", r"<long|<int|<bool|<unsigned char|int64|int32|int16|uint8"),
)

#: Regex of the NCCL kernels whose name's type is NCCL's byte type (``..._Sum_int8_t``), not
#: the data's: send/recv, all-gather and broadcast copy bytes, so NCCL compiles them only for
#: ``int8_t``. Their precision comes from the ``dtype`` arg or the launching op instead.
NCCL_BYTE_KERNELS = r"^nccl\w*(SendRecv|AllGather|Broadcast)"

#: Ordered (precision, case-insensitive regex) rules over type names: NCCL's ``dtype`` arg and
#: a launching op's ``Input type`` list (``["c10::Half", "float", "Scalar"]``).
DTYPE_RULES: tuple[tuple[str, str], ...] = (
    ("fp8", r"float8|fp8"),
    ("bf16", r"bfloat16"),
    ("fp16", r"c10::half|\bhalf\b|float16"),
    ("fp64", r"double|float64"),
    ("fp32", r"\bfloat\b|float32"),
    ("int8", r"signed char|\bchar\b|int8"),
    ("integer", r"\blong\b|\bint\b|\bbool\b|unsigned char|int64|int32|int16|uint8"),
)

_COUNTER = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
_COUNTER_CLASSES = {"h": "fp16", "f": "fp32", "d": "fp64"}
#: Counters decide only when one class has this share of the counted instructions: compilers
#: zero registers with HFMA2, so fp32 kernels also count half-precision instructions.
_DOMINANT = 0.9


def precision_from_name(name: str) -> str | None:
    """The precision :data:`NAME_RULES` give a kernel name, or None when no rule matches or the
    kernel is one of :data:`NCCL_BYTE_KERNELS`."""
    if re.search(NCCL_BYTE_KERNELS, name):
        return None
    for precision, pattern in NAME_RULES:
        if re.search(pattern, name, re.IGNORECASE):
            return precision
    return None


def _rules_sql(rules: tuple[tuple[str, str], ...], column: str) -> str:
    cases = " ".join(
        f"WHEN regexp_matches({column}, '{pattern}', 'i') THEN '{precision}'"
        for precision, pattern in rules
    )
    return f"CASE {cases} ELSE NULL END"


def _counter_sum_sql(letter: str) -> str:
    parts = [
        f"coalesce(TRY_CAST(json_extract(nullif(args, ''), '$.\"{_COUNTER.format(letter + op)}\"') AS DOUBLE), 0)"
        for op in ("add", "mul", "fma")
    ]
    return " + ".join(parts)


def _classified_sql(rank: int | None) -> str:
    """Per kernel event: rank, name, dur_us, precision, source.

    Each source is asked only for the kernels the sources before it left open: name rules run
    once per distinct name, and the JSON ``args`` of kernels and launching ops are parsed only
    for kernels still unknown (``CASE`` evaluates its branch on the selected rows alone).
    """
    ranks = rank_clause(rank)
    h, f, d = (_counter_sum_sql(letter) for letter in _COUNTER_CLASSES)
    return f"""
    WITH kernels AS (
        SELECT rank, name, dur_us, external_id, args FROM events
        WHERE ph = 'X'{ranks} AND category = 'kernel'
        UNION ALL
        SELECT rank, name, dur_us, external_id, args FROM events
        WHERE ph = 'X'{ranks} AND category = 'cuda_profiler_range' AND name <> '__missing__'
          AND rank NOT IN (SELECT DISTINCT rank FROM events WHERE category = 'kernel')
    ),
    named AS (
        SELECT name,
               CASE WHEN NOT regexp_matches(name, '{NCCL_BYTE_KERNELS}')
                    THEN {_rules_sql(NAME_RULES, "name")} END AS by_name
        FROM (SELECT DISTINCT name FROM kernels)
    ),
    counters AS (
        SELECT rank, name, sum({h}) AS h, sum({f}) AS f, sum({d}) AS d FROM events
        WHERE category = 'cuda_profiler_range'{ranks}
        GROUP BY rank, name
    ),
    counted AS (
        SELECT rank, name,
               CASE WHEN h + f + d <= 0 THEN NULL
                    WHEN d >= {_DOMINANT} * (h + f + d) THEN 'fp64'
                    WHEN f >= {_DOMINANT} * (h + f + d) THEN 'fp32'
                    WHEN h >= {_DOMINANT} * (h + f + d) THEN 'fp16'
                    ELSE NULL END AS precision
        FROM counters
    ),
    early AS MATERIALIZED (
        SELECT k.rank, k.name, k.dur_us, k.external_id, n.by_name, c.precision AS by_counters,
               CASE WHEN n.by_name IS NULL AND c.precision IS NULL THEN
                   {_rules_sql(DTYPE_RULES, "json_extract_string(nullif(k.args, ''), '$.dtype')")}
               END AS by_dtype
        FROM kernels k
        JOIN named n ON n.name = k.name
        LEFT JOIN counted c ON c.rank = k.rank AND c.name = k.name
    ),
    open_launches AS MATERIALIZED (
        SELECT e.rank, e.external_id, e.args FROM events e
        SEMI JOIN (
            SELECT DISTINCT rank, external_id FROM early
            WHERE by_name IS NULL AND by_counters IS NULL AND by_dtype IS NULL
              AND external_id >= 0
        ) u ON u.rank = e.rank AND u.external_id = e.external_id
        WHERE e.category = 'cpu_op' AND e.external_id >= 0{rank_clause(rank, column="e.rank")}
    ),
    launch_ops AS (
        SELECT rank, external_id, any_value(input_types) AS input_types
        FROM (
            SELECT rank, external_id,
                   json_extract_string(nullif(args, ''), '$."Input type"') AS input_types
            FROM open_launches
        )
        WHERE input_types IS NOT NULL
        GROUP BY rank, external_id
    ),
    candidates AS (
        SELECT k.rank, k.name, k.dur_us, k.by_name, k.by_counters, k.by_dtype,
               {_rules_sql(DTYPE_RULES, "o.input_types")} AS by_launch_op
        FROM early k
        LEFT JOIN launch_ops o ON o.rank = k.rank AND o.external_id = k.external_id
                               AND k.external_id >= 0
    )
    SELECT rank, name, dur_us,
           coalesce(by_name, by_counters, by_dtype, by_launch_op, 'unknown') AS precision,
           CASE WHEN by_name IS NOT NULL THEN 'name'
                WHEN by_counters IS NOT NULL THEN 'counters'
                WHEN by_dtype IS NOT NULL THEN 'nccl_dtype'
                WHEN by_launch_op IS NOT NULL THEN 'launch_op'
                ELSE 'none' END AS source
    FROM candidates
    """


def kernel_precision(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """GPU kernel time per precision (see the module docstring for how it is inferred).

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all ranks together.
    :returns: columns ``precision, count, total_us, pct`` (pct of all kernel time), largest
        first; no rows when the trace has no kernels.
    """
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""
        SELECT precision, count(*) AS count, sum(dur_us) AS total_us,
               100.0 * sum(dur_us) / nullif(sum(sum(dur_us)) OVER (), 0) AS pct
        FROM ({_classified_sql(rank)})
        GROUP BY precision ORDER BY total_us DESC, precision
        """
    ).df()
    return frame


def kernel_precision_by_name(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """Each distinct kernel name with its precision and the source that decided it.

    :returns: columns ``name, precision, source, count, total_us``, longest total first.
    """
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""
        SELECT name, precision, source, count(*) AS count, sum(dur_us) AS total_us
        FROM ({_classified_sql(rank)})
        GROUP BY name, precision, source ORDER BY total_us DESC, name
        """
    ).df()
    return frame
