"""Clock offsets between ranks: how far each rank's clock is from rank 0's, measured once.

Right after the process group starts, every rank runs a few rounds of ``barrier`` then
``all_gather`` of its own timestamp taken as it enters the gather. Leaving a barrier is as close
to simultaneous as the ranks get, so the difference between a rank's entry time and rank 0's is
its offset; the round with the smallest gather round trip (the least skewed one) is kept. The
result is written to ``framework/ranks/<node_id>.json`` (``clock_offset_us``, rank 0 = 0) and
stored beside the data; raw timestamps are never rewritten.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from stepscope.collect.clock import now_us

__all__ = ["ROUNDS", "measure_clock_offset_us"]

#: Rounds of barrier + all_gather; the least skewed one wins.
ROUNDS = 5


def measure_clock_offset_us(
    all_gather: Callable[..., Any], barrier: Callable[..., Any], *, rounds: int = ROUNDS
) -> float:
    """This rank's clock minus rank 0's, in µs, on the session clock.

    :param all_gather: ``torch.distributed.all_gather`` (the original, so it is not recorded).
    :param barrier: ``torch.distributed.barrier`` (likewise).
    :param rounds: how many rounds to take the best of.
    """
    world_size = dist.get_world_size()
    if world_size <= 1:
        return 0.0
    device = torch.device("cpu")
    if "nccl" in str(dist.get_backend()).lower() and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    best_rtt_us = math.inf
    best_offset_us = 0.0
    for _ in range(rounds):
        barrier()
        entered_us = now_us()
        mine = torch.tensor([entered_us], dtype=torch.float64, device=device)
        gathered = [torch.zeros_like(mine) for _ in range(world_size)]
        all_gather(gathered, mine)
        rtt_us = now_us() - entered_us
        if rtt_us < best_rtt_us:
            best_rtt_us = rtt_us
            best_offset_us = entered_us - float(gathered[0].item())
    return 0.0 if dist.get_rank() == 0 else best_offset_us
