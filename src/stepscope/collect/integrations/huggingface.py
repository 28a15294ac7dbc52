"""Hugging Face ``Trainer`` callback: the Trainer's optimizer steps are stepscope's steps.

::

    trainer = Trainer(model, args, callbacks=[StepscopeCallback()])

``on_step_begin``/``on_step_end`` bracket each TRAIN step (one optimizer step, all its
gradient-accumulation micro-batches included). The Trainer reports evaluation and prediction
batches only once they are done (``on_prediction_step``), so each EVAL or PREDICT step runs from
the end of the previous step to that call. Without ``stepscope run`` the callback starts a session
when training starts and stops it when training ends; an ``evaluate()`` or ``predict()`` outside
training has no event before its first batch is done, so its session starts there (that batch is
not profiled) and stops at ``on_evaluate``/``on_predict``, in the same job, steps numbered on.
"""

from __future__ import annotations

import sys
from typing import Any

from transformers import TrainerCallback

from stepscope.collect.clock import now_us
from stepscope.collect.integrations._steps import StepMarker
from stepscope.collect.session import get_active_session

__all__ = ["StepscopeCallback"]


class StepscopeCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]  # untyped without transformers
    """Marks the Trainer's steps.

    :param profile_kwargs: passed to :func:`stepscope.profile` if the callback starts a session.
    """

    def __init__(self, **profile_kwargs: Any) -> None:
        self._steps = StepMarker(**profile_kwargs)
        self._outside_training = False  # a session started by evaluate() or predict()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.start()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.stop()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.begin("TRAIN")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.end()

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if get_active_session() is None and not self._outside_training:
            self._outside_training = True
            self._steps.start()
            session = get_active_session()
            if session is not None:  # our steps only, the next one beginning here
                session.explicit_steps = True
                session.guard.wrap("integration.boundary", session.mark_boundary)(now_us())
            return
        self._steps.whole(_prediction_mode())

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._stop_outside_training()

    def on_predict(self, args: Any, state: Any, control: Any, metrics: Any, **kwargs: Any) -> None:
        self._stop_outside_training()

    def _stop_outside_training(self) -> None:
        if self._outside_training:
            self._outside_training = False
            self._steps.stop()


def _prediction_mode() -> str:
    """PREDICT within ``Trainer.predict``, else EVAL. The Trainer runs both through its
    ``evaluation_loop``, told apart only by the loop's ``description`` ("Prediction"), which no
    callback event carries: it is read from the loop's frame."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "evaluation_loop":
            return "PREDICT" if frame.f_locals.get("description") == "Prediction" else "EVAL"
        frame = frame.f_back  # type: ignore[assignment]
    return "EVAL"
