"""OverallFrameworkMetrics: where the training loop's time goes; never triggers.

Sums event durations per category over the whole job into SageMaker's report groups: step time
per mode versus the rest of the loop ("others"), forward versus backward, CPU versus GPU
operators (with the top operators of each), general framework operations (data loading,
annotations) and collectives (Horovod, smdataparallel, torch.distributed, NCCL). Operator totals are
kept per name; past 5,000 names only the 2,000 largest are kept (a Kineto trace has thousands of
kernel names), which can only under-count the smallest ones. A trace's ``gpu_user_annotation``
ranges are left out: they project an annotation (counted as ``user_annotation``) onto the GPU,
spanning its kernels, so as GPU operators they would count those kernels twice. So is its
``Trace`` span, the profiling window itself ("PyTorch Profiler (0)"), which is no operation.
SageMaker swapped the CPU and GPU labels of its ratio; here ``ratio`` is
``{"CPU": cpu_us, "GPU": gpu_us}``. A pass's time is that of its whole spans (``Forward``,
``Backward(post-forward)``), which hold the spans of its sub-modules: those
(``*-SubModuleInternal``) count only in a job that recorded no whole pass.

The collectives (``horovod``, SageMaker's name) are the time of each collective in one dimension,
which ``collective_time`` names: ``"GPU kernel time"`` of the NCCL kernels when the job has any,
else ``"CPU time"`` of the calls (Horovod's activities, stepscope's ``torch.distributed`` events, a
trace's ``nccl:*`` ranges). A trace holds both for the same collective, the CPU call only
launching the kernel, so a pie of both would add up unlike times.
"""

from __future__ import annotations

import re
from typing import Any

from stepscope.rules.base import Rule, Verdict
from stepscope.rules.window import ScanWindow

__all__ = ["OverallFrameworkMetrics"]

_NAME_LIMIT, _NAME_KEEP = 5000, 2000
#: The collective of an NCCL or RCCL kernel: ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``,
#: ``ncclDevKernel_Broadcast_RING_LL(...)``.
_NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")

_TOTALS_SQL = """
SELECT
    CASE
        WHEN {steps} THEN 'step'
        WHEN category IN ('Forward', 'Forward-SubModuleInternal') THEN 'forward'
        WHEN category IN ('Backward(post-forward)', 'Backward-SubModuleInternal') THEN 'backward'
        WHEN source IN ('horovod', 'smdataparallel', 'collective') OR category = 'Collective'
             OR name LIKE 'nccl%' THEN 'collective'
        WHEN lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset')
             OR lower(category) LIKE '%gpu%' THEN 'gpu'
        WHEN lower(category) LIKE '%cpu%' OR lower(category) = 'operator' THEN 'cpu'
        ELSE 'general'
    END AS grp,
    CASE WHEN category LIKE 'Step:ModeKeys.%' THEN replace(category, 'Step:ModeKeys.', '')
         WHEN name LIKE 'ProfilerStep#%' THEN 'TRAIN' ELSE category END AS category,
    CASE WHEN name LIKE 'ProfilerStep#%' OR category LIKE 'Step:ModeKeys.%' THEN category ELSE name END AS name,
    node, rank, source,
    sum(dur_us) AS total_us, count(*) AS n, min(start_us) AS first_us, max(start_us + dur_us) AS last_us
FROM {events}
WHERE ph = 'X' AND NOT {repeated_steps} AND category NOT IN ('gpu_user_annotation', 'Trace')
GROUP BY ALL
"""


class OverallFrameworkMetrics(Rule):
    description = (
        "Summarises where the training loop spends its time: steps per mode and the time "
        "between steps, forward versus backward pass, CPU versus GPU operators and their top "
        "operators, data loading and other framework operations, and collective communication. "
        "It never triggers."
    )

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        self.groups: dict[str, float] = {}
        self.categories: dict[tuple[str, str], float] = {}
        self.names: dict[tuple[str, str], list[float]] = {}
        self.step_spans: dict[tuple[str, int], list[float]] = {}
        #: (``"gpu"`` or ``"cpu"``, collective) -> µs
        self.collectives: dict[tuple[str, str], float] = {}
        self.events = 0

    def scan(self, window: ScanWindow) -> None:
        rows = window.query(_TOTALS_SQL)
        if len(rows["grp"]) == 0:
            return
        for grp, category, name, node, rank, source, total, n, first, last in zip(
            rows["grp"].tolist(),
            rows["category"].tolist(),
            rows["name"].tolist(),
            rows["node"].tolist(),
            rows["rank"].tolist(),
            rows["source"].tolist(),
            rows["total_us"].tolist(),
            rows["n"].tolist(),
            rows["first_us"].tolist(),
            rows["last_us"].tolist(),
            strict=True,
        ):
            self.events += int(n)
            self.groups[grp] = self.groups.get(grp, 0.0) + total
            self.categories[(grp, category)] = self.categories.get((grp, category), 0.0) + total
            entry = self.names.setdefault((grp, name), [0.0, 0])
            entry[0] += total
            entry[1] += n
            if grp == "collective":
                key = _collective(source, category, name)
                self.collectives[key] = self.collectives.get(key, 0.0) + total
            if grp == "step":
                span = self.step_spans.setdefault((node, int(rank)), [first, last, 0.0])
                span[0], span[1] = min(span[0], first), max(span[1], last)
                span[2] += total
        if len(self.names) > _NAME_LIMIT:
            keep = sorted(self.names.items(), key=lambda item: -item[1][0])[:_NAME_KEEP]
            self.names = dict(keep)

    def evaluate(self) -> Verdict:
        if not self.events:
            return Verdict(applicable=False, message="No framework events.")
        phase = {
            cat: round(us / 1e6, 6)
            for (grp, cat), us in sorted(self.categories.items())
            if grp == "step"
        }
        between = sum(
            max(0.0, last - first - busy) for first, last, busy in self.step_spans.values()
        )
        if phase:
            phase["others"] = round(between / 1e6, 6)
        forward_backward = {
            "forward": round(self._pass_us("forward", "Forward") / 1e6, 6),
            "backward": round(self._pass_us("backward", "Backward(post-forward)") / 1e6, 6),
        }
        ratio = {
            "CPU": round(self.groups.get("cpu", 0.0) / 1e6, 6),
            "GPU": round(self.groups.get("gpu", 0.0) / 1e6, 6),
        }
        general = {
            cat: round(us / 1e6, 6)
            for (grp, cat), us in sorted(self.categories.items())
            if grp == "general"
        }
        on_gpu = any(where == "gpu" for where, _ in self.collectives)
        collective = {
            name: round(us / 1e6, 6)
            for (where, name), us in sorted(self.collectives.items())
            if (where == "gpu") == on_gpu
        }
        details: dict[str, Any] = {
            "unit": "s",
            "phase": phase,
            "forward_backward": forward_backward if any(forward_backward.values()) else {},
            "ratio": ratio if any(ratio.values()) else {},
            "general": general,
            "horovod": collective,
            "collective_time": "GPU kernel time" if on_gpu else "CPU time",
            "CPU": self._top("cpu"),
            "GPU": self._top("gpu"),
        }
        total_steps = sum(v for k, v in phase.items() if k != "others")
        message = f"{self.events} framework events"
        if phase:
            ranks = len(self.step_spans)
            summed = f" summed over {ranks} ranks" if ranks > 1 else ""
            message += (
                f"; {_duration(total_steps)} in steps{summed}, "
                f"{_duration(phase['others'])} between steps"
            )
        return Verdict(datapoints=self.events, details=details, message=message + ".")

    def _pass_us(self, grp: str, whole: str) -> float:
        """The time of a pass: its whole spans, else (none recorded) its sub-modules' spans;
        both would count the sub-modules twice."""
        return self.categories.get((grp, whole), 0.0) or self.groups.get(grp, 0.0)

    def _top(self, grp: str, limit: int = 15) -> list[dict[str, Any]]:
        rows = sorted(
            ((name, total, n) for (g, name), (total, n) in self.names.items() if g == grp),
            key=lambda row: -row[1],
        )
        whole = sum(total for _, total, _ in rows) or 1.0
        top = [
            {
                "name": name,
                "total_s": round(total / 1e6, 6),
                "count": int(n),
                "pct": round(100 * total / whole, 2),
            }
            for name, total, n in rows[:limit]
        ]
        rest = rows[limit:]
        if rest:
            others = sum(total for _, total, _ in rest)
            top.append(
                {
                    "name": "others",
                    "total_s": round(others / 1e6, 6),
                    "count": int(sum(n for _, _, n in rest)),
                    "pct": round(100 * others / whole, 2),
                }
            )
        return top


def _collective(source: str, category: str, name: str) -> tuple[str, str]:
    """Where a collective event's time was spent (``"gpu"``: a kernel; ``"cpu"``: a call) and
    which collective it was."""
    if source == "horovod":  # a Horovod timeline's category is the tensor, its name the activity
        return "cpu", name
    if category == "kernel":
        match = _NCCL_KERNEL.search(name)
        return "gpu", match.group(1) if match else name
    if category == "Collective":  # stepscope's torch.distributed events: the op is the name
        return "cpu", name
    if name.startswith("nccl:"):  # a trace's record_function range of the call
        return "cpu", name.removeprefix("nccl:")
    return "cpu", category  # another timeline's event (SMDataParallel): by its category


def _duration(seconds: float) -> str:
    """Seconds as a reader takes them in: a profiler trace's few steps last milliseconds."""
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"
