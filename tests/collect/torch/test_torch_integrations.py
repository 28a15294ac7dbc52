"""Lightning and Hugging Face callbacks (skipped when the framework is not installed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tests.collect.torch.torchjob import read_events, steps

from stepscope.collect.session import get_active_session
from stepscope.config import FrameworkProfile, ProfilerConfig


def _config() -> ProfilerConfig:
    return ProfilerConfig(framework_profile_params=FrameworkProfile(start_step=10_000, num_steps=1))


# Lightning 2.6 still builds torch's deprecated LeafSpec, which warns under torch 2.13
_LIGHTNING_WARNING = "ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"


def _fit_with_lightning(
    tmp_path: Path, *, fail_at_batch: int = -1, job_dir: Path | None = None, then: bool = False
) -> None:
    """Fit one epoch of three batches (validating after it) with the stepscope callback; the
    training step raises at ``fail_at_batch``. With ``then``, the same trainer validates, tests
    and predicts afterwards. ``job_dir`` None leaves the callback to pick the folder."""
    pl = pytest.importorskip("lightning.pytorch")
    from stepscope.collect.integrations.lightning import StepscopeCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            if batch_idx == fail_at_batch:
                raise RuntimeError("the training step failed")
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
            self.layer(batch[0])

        def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
            self.layer(batch[0])

        def predict_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(12, 4), torch.randn(12, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[StepscopeCallback(config=_config(), job_dir=job_dir)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    module = Module()
    trainer.fit(module, loader, loader)
    if then:
        trainer.validate(module, loader)
        trainer.test(module, loader)
        trainer.predict(module, loader)


@pytest.mark.filterwarnings(_LIGHTNING_WARNING)
def test_lightning_batches_are_steps(tmp_path: Path) -> None:
    _fit_with_lightning(tmp_path, job_dir=tmp_path / "job")
    assert get_active_session() is None
    events = read_events(tmp_path / "job")
    assert [e["args"]["step_num"] for e in steps(events, "TRAIN")] == ["0", "1", "2"]
    assert [e["args"]["step_num"] for e in steps(events, "EVAL")] == ["0", "1", "2"]


@pytest.mark.filterwarnings(_LIGHTNING_WARNING)
def test_lightning_stops_its_session_when_training_raises(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the training step failed"):
        _fit_with_lightning(tmp_path, fail_at_batch=1, job_dir=tmp_path / "job")
    assert get_active_session() is None  # the user's exception came through; the session ended
    # the step that raised is kept, up to the failure
    train_steps = steps(read_events(tmp_path / "job"), "TRAIN")
    assert [e["args"]["step_num"] for e in train_steps] == ["0", "1"]


@pytest.mark.filterwarnings(_LIGHTNING_WARNING)
def test_lightning_fit_then_validate_test_and_predict_are_one_job_whose_steps_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Each stage used to start a session of its own: the steps of validate() and test() were
    # numbered from 0 again, under a warning to give profile() a new folder, and without a
    # job_dir the stages after fit() went into a second job folder.
    monkeypatch.chdir(tmp_path)
    _fit_with_lightning(tmp_path, then=True)
    assert get_active_session() is None
    (job_dir,) = (tmp_path / "stepscope-jobs").iterdir()
    events = read_events(job_dir)
    assert [e["args"]["step_num"] for e in steps(events, "TRAIN")] == ["0", "1", "2"]
    # fit validates once (three batches), then validate() and test() three batches each
    assert [e["args"]["step_num"] for e in steps(events, "EVAL")] == [str(n) for n in range(9)]
    assert [e["args"]["step_num"] for e in steps(events, "PREDICT")] == ["0", "1", "2"]
    assert "already holds a run" not in caplog.text


def _huggingface_trainer(tmp_path: Path, *, eval_batches: int = 3) -> Any:
    """A Trainer of a tiny model on 12 synthetic samples (three TRAIN steps of four) with the
    stepscope callback writing to ``tmp_path/job``; evaluation has ``eval_batches`` batches."""
    transformers = pytest.importorskip("transformers")
    from stepscope.collect.integrations.huggingface import StepscopeCallback

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            out = self.layer(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):
        def __init__(self, size: int) -> None:
            self.size = size

        def __len__(self) -> int:
            return self.size

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"x": torch.full((4,), float(i)), "labels": torch.tensor([float(i)])}

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_train_epochs=1,
        report_to=[],
        use_cpu=True,
    )
    return transformers.Trainer(
        model=Model(),
        args=args,
        train_dataset=Data(12),
        eval_dataset=Data(4 * eval_batches),
        callbacks=[StepscopeCallback(config=_config(), job_dir=tmp_path / "job")],
    )


def test_huggingface_trainer_steps_are_steps(tmp_path: Path) -> None:
    _huggingface_trainer(tmp_path).train()
    assert get_active_session() is None
    events = read_events(tmp_path / "job")
    assert [e["args"]["step_num"] for e in steps(events, "TRAIN")] == ["0", "1", "2"]


def test_huggingface_evaluate_and_predict_after_train_go_on_in_the_job(tmp_path: Path) -> None:
    # The session stopped when training ended: evaluate() and predict() afterwards were not
    # profiled at all, and predict() batches were marked EVAL.
    trainer = _huggingface_trainer(tmp_path, eval_batches=4)
    trainer.train()
    trainer.evaluate()
    trainer.predict(trainer.eval_dataset)
    assert get_active_session() is None
    events = read_events(tmp_path / "job")
    assert [e["args"]["step_num"] for e in steps(events, "TRAIN")] == ["0", "1", "2"]
    # The Trainer announces neither before its first batch is done: each profiles from then on.
    assert [e["args"]["step_num"] for e in steps(events, "EVAL")] == ["0", "1", "2"]
    assert [e["args"]["step_num"] for e in steps(events, "PREDICT")] == ["0", "1", "2"]
    assert all(e["end_us"] > e["start_us"] for e in steps(events, "PREDICT"))


def test_huggingface_evaluation_during_training_is_eval(tmp_path: Path) -> None:
    trainer = _huggingface_trainer(tmp_path)
    trainer.args.eval_strategy = "epoch"
    trainer.train()
    events = read_events(tmp_path / "job")
    assert [e["args"]["step_num"] for e in steps(events, "EVAL")] == ["0", "1", "2"]
    assert not steps(events, "PREDICT")
