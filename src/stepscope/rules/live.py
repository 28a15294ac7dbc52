"""The live rule engine: a process beside the training job that scans new data as it arrives.

:func:`start_rule_engine` starts it (``spawn``, so nothing of the training process is inherited).
Every ``scan_interval_us`` it refreshes the job's columnar store, scans only the data added
since the previous scan (:class:`~stepscope.rules.engine.RuleSession`), and rewrites each rule's
``status.json`` and report JSON. When ``training_job_end.ts`` appears, or the handle's
:meth:`RuleEngineHandle.finish` is called, it makes the final pass and exits; so it does once
the process that started it is gone (the other end of its pipe closes) and the job no longer
runs (a command may outlive its killed launcher: see :mod:`stepscope.store.job_status`).

After each scan that changed a verdict, and at most every ``report_interval_s``, it rewrites the
HTML report through the hook named by ``report_hook`` (an import path resolved in the engine
process at run time, so this package does not import the report package, which builds on it),
and once more after its final pass (unless ``finish(report=False)`` asked for that pass: a caller
that records the job's end first, as ``stepscope run`` does, writes the last report itself).
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from stepscope.rules.base import Rule
from stepscope.rules.configs import build_rules
from stepscope.rules.engine import RuleSession, open_input, still_running
from stepscope.rules.parameters import SCAN_INTERVAL
from stepscope.rules.status import write_results

__all__ = ["DEFAULT_REPORT_HOOK", "RuleEngineHandle", "start_rule_engine"]

logger = logging.getLogger(__name__)

#: The function the engine calls with the job folder to rewrite the HTML report.
DEFAULT_REPORT_HOOK = "stepscope.report:write_report"

_END_MARKER = "training_job_end.ts"
#: What :meth:`RuleEngineHandle.finish` sends the engine.
_FINISH, _FINISH_WITHOUT_REPORT = b"finish", b"finish without report"


class RuleEngineHandle:
    """The running engine process: ``finish()`` for the final pass, ``stop()`` to abandon it."""

    def __init__(self, process: BaseProcess, finish: Connection) -> None:
        self._process = process
        self._finish = finish

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def is_alive(self) -> bool:
        return self._process.is_alive()

    @property
    def exitcode(self) -> int | None:
        """The engine's exit code (``-N`` when signal N ended it); ``None`` while it runs."""
        return self._process.exitcode

    def finish(self, timeout_s: float = 120.0, *, report: bool = True) -> bool:
        """Ask for the final pass and wait for it; True when the engine finished in time.

        :param report: rewrite the HTML report after the final pass (when the engine writes
            one); False when the caller writes it.
        """
        try:
            # a pipe, not an event: telling an engine that was killed (a SIGTERM to the whole
            # process group) must not wait for it, as setting a shared event would
            self._finish.send_bytes(_FINISH if report else _FINISH_WITHOUT_REPORT)
        except OSError:
            pass  # the engine is gone
        self._process.join(timeout_s)
        if self._process.is_alive():
            logger.warning(
                "the rule engine did not finish its final pass within %.0f s; stopping it "
                "(run `stepscope rules <job>` to compute the verdicts afterwards)",
                timeout_s,
            )
            self.stop()
            return False
        if self._process.exitcode != 0:
            logger.warning(
                "the rule engine failed or was stopped (exit code %s): run `stepscope rules "
                "<job>` to compute the verdicts afterwards",
                self._process.exitcode,
            )
        return self._process.exitcode == 0

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the engine without a final pass."""
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout_s)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(timeout_s)


def start_rule_engine(
    job_dir: str | os.PathLike[str],
    rules: Sequence[Any] | None = None,
    *,
    scan_interval_us: int | None = None,
    report_hook: str | None = DEFAULT_REPORT_HOOK,
    report_interval_s: float = 30.0,
) -> RuleEngineHandle:
    """Start the live rule engine for the job being written at ``job_dir``.

    :param job_dir: the job folder (``rule-output/`` is written inside it).
    :param rules: as for :func:`~stepscope.rules.run_rules`; validated here, before the process
        starts, so a bad parameter fails at once.
    :param scan_interval_us: time between scans, at least 1 s (1000000); default the rules'
        shortest ``scan_interval_us`` (60 s unless customised).
    :param report_hook: ``"module:function"`` called with the job folder to rewrite the HTML
        report; None for no report.
    :param report_interval_s: the report is rewritten at most this often.
    :returns: the engine's handle. Keep it while the job runs: the engine makes its final pass
        and exits once no process holds it (the launcher ended, or dropped the handle) and the
        job no longer runs.
    """
    built = build_rules(rules)
    if scan_interval_us is not None:  # a scan every few microseconds would spin a core
        scan_interval_us = SCAN_INTERVAL.coerce(
            "start_rule_engine.scan_interval_us", scan_interval_us
        )
    context = multiprocessing.get_context("spawn")
    finish_received, finish = context.Pipe(duplex=False)
    process = context.Process(
        target=_run,
        args=(
            str(job_dir),
            built,
            scan_interval_us,
            report_hook,
            report_interval_s,
            finish_received,
        ),
        name="stepscope-rules",
        daemon=True,
    )
    handle = RuleEngineHandle(process, finish)
    try:
        with _sigint_held(), _main_script_not_rerun(built):
            process.start()
    except KeyboardInterrupt:
        handle.stop()  # a Ctrl-C as it started: the caller stops, and so does the engine
        raise
    finally:
        finish_received.close()  # the engine has its own end
    return handle


@contextmanager
def _main_script_not_rerun(rules: Sequence[Rule]) -> Iterator[None]:
    """Start the engine without running the user's script again, unless a rule comes from it.

    ``spawn`` runs the parent's main script in the child, as ``__mp_main__``, so that what it
    defines can be unpickled there. A script that calls ``launch()`` at its top level, without
    ``if __name__ == "__main__":``, would then launch its job a second time from the engine
    (a stray job folder, left ``Running``) and the engine would fail. Only a rule class the
    script defines needs the script; otherwise the engine starts as from an interactive
    session, which has no main script to run.
    """
    main = sys.modules.get("__main__")
    if main is None or any(type(rule).__module__ == "__main__" for rule in rules):
        yield
        return
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold SIGINT back while the engine starts, and raise it here once it has.

    A terminal's Ctrl-C reaches the whole process group, but the caller decides when the engine
    ends (``finish()`` for the final pass, ``stop()`` to abandon it): the engine inherits SIGINT
    blocked, so no KeyboardInterrupt stops it before :func:`_run` ignores the signal and
    unblocks it (as CPython starts its resource tracker). Ignored here instead, a Ctrl-C that
    came meanwhile was lost, and the command started next ran to its end. Now it stays pending
    (or is noted, when another thread of this process took it) and is raised at the end.
    Only the main thread can handle signals: from another, nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a pending one comes here
    if noted:
        signal.raise_signal(signal.SIGINT)


def _run(
    job_dir: str,
    rules: list[Rule],
    scan_interval_us: int | None,
    report_hook: str | None,
    report_interval_s: float,
    finish: Connection,
) -> None:
    """The engine process: scan until the job ends or it is told to finish (anything on
    ``finish``), then the final pass. Its launcher gone (killed: the pipe closed), it scans on
    while the job runs without it (its command outlived it)."""
    # started with SIGINT blocked (see _sigint_held): from now on it is ignored instead
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    logging.basicConfig(level=logging.INFO, format="stepscope rules: %(message)s")
    root = Path(job_dir)
    output = root / "rule-output"
    session: RuleSession | None = None
    interval_s = 60.0
    last_report = 0.0
    launcher_gone = without_report = False
    while True:
        ended = _job_ended(root)
        if not launcher_gone and finish.poll():
            try:
                without_report = finish.recv_bytes() == _FINISH_WITHOUT_REPORT
                ended = True
            except EOFError:
                launcher_gone = True
        if launcher_gone and not ended:
            ended = session is not None and not still_running(session.job)
        try:
            if session is None:
                session = RuleSession(open_input(root), rules)
                interval_s = (scan_interval_us or session.scan_interval_us) / 1e6
                write_results(output, session.results())
            changed = session.advance(final=ended)
            if changed or ended:
                write_results(output, session.results())
                due = time.monotonic() - last_report >= report_interval_s
                if report_hook and ((ended and not without_report) or (not ended and due)):
                    _write_report(report_hook, root)
                    last_report = time.monotonic()
        except OSError as exc:  # a full disk, an unwritable rule-output: the error says it all
            if ended:
                logger.warning("the rules' final pass failed: %s", exc)
                raise SystemExit(1) from None
            logger.warning("rule engine scan failed (%s); retrying at the next interval", exc)
        except Exception:
            logger.exception("rule engine scan failed; retrying at the next interval")
            if ended:
                raise
        if ended:
            return
        if launcher_gone:
            time.sleep(interval_s)
        else:
            finish.poll(interval_s)


def _job_ended(root: Path) -> bool:
    return (root / "profiler-output" / _END_MARKER).exists() or (root / _END_MARKER).exists()


def _write_report(hook: str, root: Path) -> None:
    module, _, function = hook.partition(":")
    try:
        getattr(importlib.import_module(module), function)(root)
    except OSError as exc:  # a full disk, an unwritable folder: the message says it all
        logger.warning("the profiling report could not be updated: %s", exc)
    except Exception:
        logger.exception("the profiling report could not be updated")
