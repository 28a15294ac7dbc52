"""Clock offsets between ranks: how far each rank's clock is from rank 0's, measured once.

Right after the process group starts, every rank runs a few rounds of ``barrier`` then
``all_gather`` of its own timestamp taken as it enters the gather. Leaving a barrier is as close
to simultaneous as the ranks get, so the difference between a rank's entry time and rank 0's is
its offset; the round with the smallest gather round trip (the least skewed one) is kept. The
result is written to ``framework/ranks/<node_id>.json`` (``clock_offset_us``, rank 0 = 0) and
stored beside the data; raw timestamps are never rewritten.

Those collectives must be matched by the same ones on every rank. A rank that does not run
stepscope (a node started under plain ``torchrun``, a session that is off or could not start) would
match them with its own training collectives: a hang, or wrong tensors in its training. So the
ranks first agree through the group's store, which needs no collective
(:func:`why_ranks_do_not_measure`): each counts itself in, the last one to arrive decides ``go``,
a rank that waits longer than :data:`AGREEMENT_TIMEOUT_S` decides ``skip``, and the first decision
set (``compare_set``) is the one every rank follows: all measure, or none does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from stepscope.collect.clock import now_us

__all__ = ["AGREEMENT_TIMEOUT_S", "ROUNDS", "measure_clock_offset_us", "why_ranks_do_not_measure"]

#: Rounds of barrier + all_gather; the least skewed one wins.
ROUNDS = 5

#: How long a rank waits for the others to be ready to measure (s), once per group start.
AGREEMENT_TIMEOUT_S = 20.0

_POLL_S = 0.05
_GO = "go"
_SKIP = "skip"


def why_ranks_do_not_measure(key: str, *, timeout_s: float = AGREEMENT_TIMEOUT_S) -> str | None:
    """Agree with the other ranks, through the default group's store, whether all measure.

    :param key: the store key of this group start, the same on every rank and never reused
        (keys found already used make every rank skip, never measure).
    :param timeout_s: how long to wait for every rank (default :data:`AGREEMENT_TIMEOUT_S`).
    :returns: ``None`` when every rank measures, else why none does (every rank gets the same
        decision, possibly for different reasons).
    """
    world_size = dist.get_world_size()
    if world_size <= 1:
        return None
    decision = f"{key}/decision"
    try:
        store = c10d._get_default_store()
        arrived = store.add(f"{key}/arrived", 1)
        if arrived > world_size:
            return f"the store key {key!r} was used already"
        if arrived == world_size:
            decided = store.compare_set(decision, "", _GO)
        else:
            deadline = time.monotonic() + timeout_s
            while not store.check([decision]) and time.monotonic() < deadline:
                time.sleep(_POLL_S)
            decided = store.compare_set(decision, "", _SKIP)
    except (RuntimeError, ValueError) as exc:  # DistStoreError is a RuntimeError
        return f"the process group's store cannot be used ({exc})"
    if decided == _GO.encode():
        return None
    return f"not every one of the {world_size} ranks was profiled and ready within {timeout_s:g} s"


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
