"""Who this process is in a distributed job: its rank from the environment, and its rank file.

``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``GROUP_RANK`` as torchrun sets them, the node from
``STEPSCOPE_NODE``; each instrumented rank writes ``framework/ranks/<node_id>.json`` (rank, node,
pid, host, start, the process group's backend and its clock offset to rank 0), which
``stepscope run`` merges into ``job.json``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from stepscope._atomic import write_atomic

__all__ = ["rank_from_env", "remove_rank_file", "write_rank_file"]

logger = logging.getLogger(__name__)


def rank_from_env(env: dict[str, str] | None = None) -> dict[str, Any]:
    """Node and rank of this process from ``STEPSCOPE_NODE`` and torchrun's variables.

    ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` as torchrun sets them; without ``STEPSCOPE_NODE``
    the node is ``algo-<GROUP_RANK + 1>`` (torchrun's node index).
    """
    env = dict(os.environ) if env is None else env

    def number(name: str, default: int) -> int:
        try:
            return int(env.get(name, default))
        except ValueError:
            return default

    node = env.get("STEPSCOPE_NODE") or f"algo-{number('GROUP_RANK', 0) + 1}"
    return {
        "node": node,
        "rank": number("RANK", 0),
        "local_rank": number("LOCAL_RANK", 0),
        "world_size": number("WORLD_SIZE", 1),
    }


def write_rank_file(target: Path, info: dict[str, Any]) -> bool:
    """Write ``info`` plus this host's name and this process's identity to ``target``
    atomically (a reader on this host tells from them that a killed rank is gone, see
    :func:`stepscope.store.job_status.process_identity`); a failure costs a warning.

    :returns: whether the file was written.
    """
    from stepscope.store.job_status import process_identity

    identity = process_identity()
    host = identity.pop("host")
    info = {**info, **identity, "hostname": host}
    try:
        write_atomic(target, json.dumps(info))
    except OSError as exc:
        logger.warning("stepscope: cannot write %s (%s)", target, exc)
        return False
    return True


def remove_rank_file(target: Path, pid: int) -> None:
    """Remove the rank file ``target`` if it is process ``pid``'s (a process that took another
    rank); another process's (that rank's own, written meanwhile) stays."""
    try:
        if json.loads(target.read_text()).get("pid") == pid:
            target.unlink()
    except (OSError, ValueError, AttributeError) as exc:
        logger.debug("stepscope: %s left as it is (%s)", target, exc)
