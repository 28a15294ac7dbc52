"""PyTorch Lightning callback: Lightning's own batches are stepscope's steps.

::

    trainer = Trainer(callbacks=[StepscopeCallback()])

Training batches are TRAIN steps, validation and test batches EVAL, predict batches PREDICT.
Without ``stepscope run`` the callback starts a session when fitting starts (see
:func:`stepscope.profile` for where it writes) and stops it at the end; a later ``validate``,
``test`` or ``predict`` of the same callback goes on in that job, its steps numbered on.
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:  # the older package name
    from pytorch_lightning import Callback  # type: ignore[assignment, no-redef, unused-ignore]

from stepscope.collect.integrations._steps import StepMarker

__all__ = ["StepscopeCallback"]


class StepscopeCallback(Callback):  # type: ignore[misc, unused-ignore]  # untyped without lightning
    """Marks every Lightning batch as a step.

    :param profile_kwargs: passed to :func:`stepscope.profile` if the callback starts a session.
    """

    def __init__(self, **profile_kwargs: Any) -> None:
        super().__init__()
        self._steps = StepMarker(**profile_kwargs)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._steps.start()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._steps.stop()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._steps.stop()  # Lightning skips teardown when the run raises

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._steps.begin("TRAIN")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._steps.end()

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._steps.begin("EVAL")

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._steps.end()

    def on_test_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._steps.begin("EVAL")

    def on_test_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._steps.end()

    def on_predict_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._steps.begin("PREDICT")

    def on_predict_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._steps.end()
