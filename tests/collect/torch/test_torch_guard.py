"""The guard: stepscope's failures never reach training, and profiling never changes its result."""

from __future__ import annotations

import copy
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.collect.torch.torchjob import TRAIN_SCRIPT, losses, read_events, run_script

from stepscope.collect.session import Session
from stepscope.collect.torch import instrument
from stepscope.collect.torch.guard import Guard
from stepscope.config import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    PythonProfilingConfig,
)


class _BrokenWriter:
    """A timeline writer that breaks its promise never to raise (a bug stepscope must survive)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls = 0

    def write_events(self, events: list[Any]) -> int:
        self.calls += 1
        raise RuntimeError("disk on fire")

    def close(self) -> None:
        pass


def _train(steps: int = 6) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(4 * steps, 8), torch.randn(4 * steps, 1))
    result = []
    for x, y in torch.utils.data.DataLoader(data, batch_size=4, shuffle=True):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        result.append(loss.item())
    model.eval()
    with torch.no_grad():
        model(torch.randn(2, 8))
    return result


def _train_profiled(session: Session, caplog: pytest.LogCaptureFixture) -> list[float]:
    """:func:`_train` with every hook of ``session`` on, sub-modules' included."""
    session.start()
    try:
        instrument(session, submodules=True)
        with caplog.at_level(logging.WARNING, logger="stepscope"):
            return _train()
    finally:
        session.stop()


def _everything_on() -> ProfilerConfig:
    return ProfilerConfig(framework_profile_params=FrameworkProfile(start_step=0, num_steps=1000))


def test_a_failing_hook_is_logged_once_disabled_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expected = _train()
    session = Session(_everything_on(), tmp_path / "out", writer_factory=_BrokenWriter)
    observed = _train_profiled(session, caplog)
    assert observed == expected
    assert session.guard.failures, "the broken writer should have made hooks fail"
    assert set(session.guard.failures.values()) == {1}, "a failed hook must not run again"
    failure_logs = [r for r in caplog.records if "is now disabled" in r.getMessage()]
    assert len(failure_logs) == len(session.guard.failures)
    assert all(r.exc_info is not None for r in failure_logs)
    # the writer is what broke: it is switched off, the step detection goes on
    assert "session.writer" in session.guard.failures
    assert "torch.optimizer_step" not in session.guard.failures
    assert session.step == 6  # six training steps and one eval forward: global steps 0-6


@pytest.mark.parametrize(
    ("broken", "hook_name"),
    [
        ("_sub_forward_ended", "torch.module_hooks"),
        ("_on_backward_called", "torch.backward"),
        ("_on_pass_ended", "torch.backward"),
    ],
)
def test_a_failing_hook_of_the_hot_path_is_logged_once_and_runs_no_more(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    broken: str,
    hook_name: str,
) -> None:
    # the sub-module hooks guard themselves (no wrapper per call), and the backward timer runs
    # inside torch.autograd.backward: a bug in either must still stop there
    from stepscope.collect.torch.steps import ModuleHooks

    expected = _train()
    calls = 0

    def bug(*args: Any) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("bug in a hook")

    monkeypatch.setattr(ModuleHooks, broken, bug)
    session = Session(_everything_on(), tmp_path / "out")
    observed = _train_profiled(session, caplog)
    assert observed == expected
    assert list(session.guard.failures) == [hook_name]
    assert calls == 1, "a failed hook must not run again"
    failure_logs = [r for r in caplog.records if "is now disabled" in r.getMessage()]
    assert len(failure_logs) == 1 and "bug in a hook" in caplog.text


def test_the_guard_returns_none_and_remembers_the_failure(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard()
    calls = []

    def hook(value: int) -> int:
        calls.append(value)
        if value == 2:
            raise ValueError("boom")
        return value * 10

    guarded = guard.wrap("test.hook", hook)
    with caplog.at_level(logging.WARNING, logger="stepscope"):
        assert [guarded(1), guarded(2), guarded(3)] == [10, None, None]
    assert calls == [1, 2]
    assert guard.failures == {"test.hook": 1} and guard.is_disabled("test.hook")
    assert len(caplog.records) == 1 and "ValueError: boom" in caplog.text


def test_call_each_skips_a_failed_function_from_then_on_and_calls_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # how the session tells its listeners of a step: one failing listener must not stop the
    # others, and runs no more once it failed
    guard = Guard()
    calls: list[tuple[str, int]] = []

    def good(step: int) -> None:
        calls.append(("good", step))

    def bad(step: int) -> None:
        calls.append(("bad", step))
        raise ValueError("boom")

    listeners = [("test.bad", bad), ("test.good", good)]
    with caplog.at_level(logging.WARNING, logger="stepscope"):
        guard.call_each(listeners, 1)
        guard.call_each(listeners, 2)
    assert calls == [("bad", 1), ("good", 1), ("good", 2)]
    assert guard.failures == {"test.bad": 1}
    assert len(caplog.records) == 1 and "ValueError: boom" in caplog.text


def test_keyboard_interrupt_is_not_swallowed() -> None:
    def hook() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Guard().wrap("test.interrupt", hook)()


def test_profiling_everything_leaves_the_loss_sequence_unchanged(tmp_path: Path) -> None:
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=1, num_steps=2),
            dataloader_profiling_config=DataloaderProfilingConfig(start_step=0, num_steps=100),
            python_profiling_config=PythonProfilingConfig(start_step=3, num_steps=2),
        )
    )
    args = ("--epochs", "2", "--steps", "5", "--eval-steps", "2", "--workers", "2")
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    _, plain = run_script(plain_dir, TRAIN_SCRIPT, None, *args)
    job_dir, profiled = run_script(tmp_path, TRAIN_SCRIPT, config, *args)
    assert len(losses(plain)) == 10
    assert losses(profiled) == losses(plain)
    assert read_events(job_dir), "the profiled run recorded nothing"
    assert "disabled" not in profiled.stderr, profiled.stderr


def test_a_writer_that_cannot_be_built_never_reaches_annotated_code(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import stepscope

    def broken_factory(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no writer today")

    session = Session(_everything_on(), tmp_path / "out", writer_factory=broken_factory)
    session.start()
    try:
        with caplog.at_level(logging.WARNING, logger="stepscope"):
            done = 0
            for _ in range(3000):  # enough to fill the queue: it is handed over mid-loop
                with stepscope.annotate("work"):
                    done += 1
    finally:
        session.stop()
    assert done == 3000
    assert session.guard.failures == {"session.writer": 1}
    assert sum("is now disabled" in r.getMessage() for r in caplog.records) == 1


#: loads a whole saved model where stepscope cannot be imported, and prints its output for ones
#: and how many forward hooks it carries
_LOAD_WITHOUT_STEPSCOPE = """
import sys
sys.modules["stepscope"] = None  # any reference to stepscope in the file fails to load
import torch
model = torch.load(sys.argv[1], weights_only=False)
hooks = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())
print(model(torch.ones(1, 8)).item(), hooks)
"""


def _hooks_of(model: torch.nn.Module) -> list[Any]:
    """Every forward hook on ``model`` and its sub-modules."""
    return [
        hook
        for module in model.modules()
        for hooks in (module._forward_pre_hooks, module._forward_hooks)
        for hook in hooks.values()
    ]


def _users_hook(module: torch.nn.Module, args: Any, output: Any) -> None:
    """A hook of the training script's own: copies keep it."""


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("submodules", [False, True], ids=["default", "sub-module events"])
def test_a_profiled_model_can_be_copied_saved_and_scripted(
    tmp_path: Path, submodules: bool
) -> None:
    """Training scripts copy their model (an EMA, the best model so far), save it whole and
    script it while they train: each works on a profiled model as on a bare one, the copy and
    the saved model carry none of our hooks (the saved model loads where stepscope is not
    installed), and the profiling goes on."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    probe = torch.ones(1, 8)

    def train_step() -> None:
        loss = torch.nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    script = torch.jit.script
    session = Session(_everything_on(), tmp_path / "job" / "profiler-output").start()
    try:
        instrument(session, submodules=submodules)
        train_step()
        with torch.no_grad():
            expected = model(probe).item()
        users_hook = model.register_forward_hook(_users_hook)
        copied = copy.deepcopy(model)
        users_hook.remove()  # it would not load without the tests, nor script
        torch.save(model, tmp_path / "model.pt")
        with torch.no_grad():
            scripted = torch.jit.script(model)(probe).item()
        train_step()
    finally:
        session.stop()
    assert session.guard.failures == {}
    assert torch.jit.script is script  # torch's own again once profiling stops
    with torch.no_grad():
        assert copied(probe).item() == expected
    assert _hooks_of(copied) == [_users_hook]
    assert scripted == expected
    loaded = subprocess.run(
        [sys.executable, "-c", _LOAD_WITHOUT_STEPSCOPE, str(tmp_path / "model.pt")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.returncode == 0, loaded.stderr
    output, hooks = loaded.stdout.split()
    assert float(output) == pytest.approx(expected, rel=1e-6)
    assert hooks == "0"
    # the model's hooks were back for the step after the scripting
    forwards = [e for e in read_events(tmp_path / "job") if e["phase"] == "Forward"]
    assert [e["args"]["step_num"] for e in forwards] == ["0", "0", "1"]


class _Refused(Exception):
    """The training code's own exception, raised from inside the functions stepscope wraps."""


def test_the_training_codes_exceptions_reach_it_unchanged_through_one_frame_of_ours(
    tmp_path: Path,
) -> None:
    # A wrapped function that raises (loss.backward(), autograd.grad, a model's forward, a
    # GradScaler step, a data-loader batch) hands the script its own exception:
    # same object, message and cause, with at most the wrapper's one frame in its traceback
    # (Python has no way to hide it).
    import traceback

    import stepscope

    class Refusing(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] == 3:
                raise _Refused("forward") from KeyError("cause")
            out: torch.Tensor = self.linear(x)
            if x.shape[0] == 5:
                out.register_hook(self.refuse_gradient)
            return out

        @staticmethod
        def refuse_gradient(grad: torch.Tensor) -> None:
            raise _Refused("backward") from KeyError("cause")

    class RefusingOptimizer(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            raise _Refused("optimizer step") from KeyError("cause")

    class Items(torch.utils.data.Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int) -> torch.Tensor:
            if index == 2:
                raise _Refused("data") from KeyError("cause")
            return torch.randn(4)

    model = Refusing()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def backward() -> None:
        model(torch.randn(5, 4)).sum().backward()

    def grad() -> None:
        out = model(torch.randn(5, 4)).sum()
        torch.autograd.grad(out, list(model.parameters()))

    def scaler_step() -> None:
        refusing = RefusingOptimizer(model.parameters(), lr=0.1)
        scaler.scale(model(torch.randn(2, 4)).sum()).backward()
        scaler.step(refusing)

    def load() -> None:
        for batch in torch.utils.data.DataLoader(Items(), batch_size=1):
            model(batch)

    calls = [
        ("backward", backward),
        ("backward", grad),
        ("forward", lambda: model(torch.randn(3, 4))),
        ("optimizer step", scaler_step),
        ("data", load),
    ]
    quiet = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=10_000, num_steps=1)
        )
    )
    with stepscope.profile(quiet, job_dir=tmp_path / "job"):
        for _ in range(2):  # steps, so that the backward and grad calls are timed passes
            optimizer.zero_grad()
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
        for message, call in calls:
            with pytest.raises(_Refused) as raised:
                call()
            assert str(raised.value) == message
            assert isinstance(raised.value.__cause__, KeyError)
            ours = [
                frame
                for frame in traceback.extract_tb(raised.value.__traceback__)
                if f"{Path('stepscope', 'collect')}" in frame.filename
            ]
            assert len(ours) <= 1, (message, ours)
