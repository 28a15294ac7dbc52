"""Hugging Face ``Trainer`` callback: the Trainer's optimizer steps are stepscope's steps.

::

    trainer = Trainer(model, args, callbacks=[StepscopeCallback()])

``on_step_begin``/``on_step_end`` bracket each TRAIN step (one optimizer step, all its
gradient-accumulation micro-batches included). The Trainer reports evaluation batches only once
they are done (``on_prediction_step``), so each EVAL step runs from the end of the previous step
to that call. Without ``stepscope run`` the callback starts a session when training starts and
stops it when training ends.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from stepscope.collect.integrations._steps import StepMarker

__all__ = ["StepscopeCallback"]


class StepscopeCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]  # untyped without transformers
    """Marks the Trainer's steps.

    :param profile_kwargs: passed to :func:`stepscope.profile` if the callback starts a session.
    """

    def __init__(self, **profile_kwargs: Any) -> None:
        self._steps = StepMarker(**profile_kwargs)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.start()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.stop()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.begin("TRAIN")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.end()

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._steps.whole("EVAL")
