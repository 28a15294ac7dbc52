"""Per-GPU series cut into blocks and judged one block at a time.

LowGPUUtilization and GPUMemoryIncrease read one metric per (node, GPU), skip each GPU's first
``patience`` samples, cut the rest into blocks of ``window`` samples and judge every block once;
only the judgement differs. This is the part they share: the sketches behind the box plots, the
blocks, and the intervals of the blocks judged bad.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stepscope.rules.distribution import IntervalList, QuantileSketch, SampleBlocks
from stepscope.rules.window import ScanWindow, gpu_series

__all__ = ["GpuBlocks", "GpuKey"]

#: (node, gpu), as :func:`~stepscope.rules.window.gpu_series` names a series
GpuKey = tuple[str, ...]


class GpuBlocks:
    """Every GPU's ``series`` in blocks, each full block handed to ``judge`` once.

    :param series: the :func:`~stepscope.rules.window.gpu_series` column (``"util_pct"``,
        ``"memory_pct"``).
    :param window: samples per block.
    :param patience: samples of each GPU skipped before the first block.
    :param judge: called with a GPU and a block (rows of time µs and value); True when the block
        is a violation, whose time span then joins :attr:`intervals`.
    """

    def __init__(
        self,
        series: str,
        *,
        window: int,
        patience: int,
        judge: Callable[[GpuKey, np.ndarray], bool],
    ) -> None:
        self.series = series
        self.blocks = SampleBlocks(window, patience)
        self.sketches: dict[GpuKey, QuantileSketch] = {}
        self.intervals = IntervalList(join_gap_us=0)
        self._judge = judge

    def scan(self, window: ScanWindow) -> None:
        for key, values, times in gpu_series(window, self.series):
            self.sketches.setdefault(key, QuantileSketch()).add(values)
            for block in self.blocks.feed(key, np.column_stack([times, values])):
                if self._judge(key, block):
                    self.intervals.add([block[0, 0]], [block[-1, 0]])
