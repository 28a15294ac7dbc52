"""Steps, forward and backward of a real training script profiled with no code change."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from tests.collect.torch.torchjob import (
    TRAIN_SCRIPT,
    in_phase,
    losses,
    read_events,
    run_script,
    steps,
)

from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig
from stepscope.store import open_job

#: framework profiling on, every option off but the detailed one, far beyond the job's steps
QUIET = ProfilerConfig(
    framework_profile_params=FrameworkProfile(
        detailed_profiling_config=DetailedProfilingConfig(start_step=10_000, num_steps=1)
    )
)


def test_train_and_eval_steps_are_counted_exactly_with_their_modes(tmp_path: Path) -> None:
    job_dir, result = run_script(
        tmp_path, TRAIN_SCRIPT, QUIET, "--epochs", "2", "--steps", "5", "--eval-steps", "3"
    )
    events = read_events(job_dir)
    train, evaluation = steps(events, "TRAIN"), steps(events, "EVAL")
    assert [e["args"]["step_num"] for e in train] == [str(n) for n in range(10)]
    assert [e["args"]["step_num"] for e in evaluation] == [str(n) for n in range(6)]
    assert len(losses(result)) == 10
    # steps of one process never overlap, and come in the order the script ran them
    ordered = sorted(train + evaluation, key=lambda e: e["start_us"])
    modes = [e["phase"].rsplit(".", 1)[1] for e in ordered]
    assert modes == ["TRAIN"] * 5 + ["EVAL"] * 3 + ["TRAIN"] * 5 + ["EVAL"] * 3
    for before, after in zip(ordered, ordered[1:], strict=False):
        assert before["end_us"] <= after["start_us"]
    assert all(e["args"]["pid"] == train[0]["args"]["pid"] for e in ordered)


def test_every_step_holds_its_forward_and_every_training_step_its_backward(tmp_path: Path) -> None:
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, QUIET, "--steps", "4", "--eval-steps", "2")
    events = read_events(job_dir)
    forwards = in_phase(events, "Forward")
    backwards = in_phase(events, "Backward(post-forward)")
    assert {e["name"] for e in forwards} == {"Sequential"}
    assert len(forwards) == 6 and len(backwards) == 4
    for step in steps(events, "TRAIN"):
        inside = [
            e
            for e in forwards + backwards
            if step["start_us"] <= e["start_us"] and e["end_us"] <= step["end_us"]
        ]
        assert sorted(e["phase"] for e in inside) == ["Backward(post-forward)", "Forward"]
        forward = next(e for e in inside if e["phase"] == "Forward")
        backward = next(e for e in inside if e["phase"] != "Forward")
        assert forward["end_us"] <= backward["start_us"]
        assert (
            forward["args"]["step_num"] == backward["args"]["step_num"] == step["args"]["step_num"]
        )
    for step in steps(events, "EVAL"):
        inside = [e for e in forwards if step["start_us"] <= e["start_us"] <= step["end_us"]]
        assert len(inside) == 1


def test_a_script_without_an_optimizer_still_gets_one_step_per_iteration(tmp_path: Path) -> None:
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, QUIET, "--steps", "5", "--no-optimizer")
    train = steps(read_events(job_dir), "TRAIN")
    assert [e["args"]["step_num"] for e in train] == ["0", "1", "2", "3", "4"]


def test_submodules_are_timed_in_the_detailed_range_only(tmp_path: Path) -> None:
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=2, num_steps=2)
        )
    )
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, config, "--steps", "5")
    events = read_events(job_dir)
    forward_subs = in_phase(events, "Forward-SubModuleInternal")
    backward_subs = in_phase(events, "Backward-SubModuleInternal")
    assert sorted({e["args"]["step_num"] for e in forward_subs}) == ["2", "3"]
    # Sequential(Linear, ReLU, Linear): the three sub-modules by their qualified names
    assert sorted(e["name"] for e in forward_subs if e["args"]["step_num"] == "2") == [
        "0",
        "1",
        "2",
    ]
    assert sorted(e["name"] for e in backward_subs if e["args"]["step_num"] == "2") == [
        "0",
        "1",
        "2",
    ]
    # the gradient runs back from the last layer: each layer's backward lies inside the model's
    # and ends where the layer before it starts (the gradient reaching its input)
    model_backward = next(
        e for e in events if e["phase"] == "Backward(post-forward)" and e["args"]["step_num"] == "2"
    )
    by_layer = {e["name"]: e for e in backward_subs if e["args"]["step_num"] == "2"}
    for layer in ("0", "1", "2"):
        sub = by_layer[layer]
        assert model_backward["start_us"] <= sub["start_us"] <= sub["end_us"]
        assert sub["end_us"] <= model_backward["end_us"]
    assert by_layer["2"]["end_us"] <= by_layer["1"]["start_us"] + 1
    assert by_layer["1"]["end_us"] <= by_layer["0"]["start_us"] + 1
    model_forward = next(
        e for e in events if e["phase"] == "Forward" and e["args"]["step_num"] == "2"
    )
    for sub in (e for e in forward_subs if e["args"]["step_num"] == "2"):
        assert (
            model_forward["start_us"] <= sub["start_us"] <= sub["end_us"] <= model_forward["end_us"]
        )


def test_a_script_that_never_imports_torch_writes_nothing(tmp_path: Path) -> None:
    job_dir, result = run_script(
        tmp_path, "import sys\nprint('ok', 'torch' in sys.modules)\n", QUIET
    )
    assert result.stdout.strip() == "ok False"
    assert not (job_dir / "profiler-output" / "framework").exists()


def test_a_session_never_stopped_is_stopped_cleanly_at_exit(tmp_path: Path) -> None:
    # A profile() entered and never left (or left behind by an exception in a framework that
    # has no hook for it) is stopped before the interpreter tears its modules down: its events
    # are written (they were lost) and nothing is printed at exit.
    script = f"""
        import torch, stepscope
        from stepscope.config import ProfilerConfig
        config = ProfilerConfig.from_dict({QUIET.to_dict()!r})
        profiling = stepscope.profile(config, job_dir="job")
        profiling.__enter__()
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.ones(4, 2)).sum().backward()
            optimizer.step()
    """
    job_dir, result = run_script(tmp_path, script, None)
    assert result.stderr == ""
    assert [e["args"]["step_num"] for e in steps(read_events(job_dir), "TRAIN")] == ["0", "1", "2"]
    assert open_job(job_dir).metadata["status"] == "Completed"


def test_a_forward_that_raises_does_not_derail_step_detection(tmp_path: Path) -> None:
    import torch

    import stepscope

    class Flaky(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] == 3:
                raise ValueError("bad batch")
            return self.layer(x)

    model = Flaky().eval()
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"), torch.no_grad():
        for size in (2, 3, 2, 2):
            try:
                model(torch.randn(size, 4))
            except ValueError:
                pass
    evaluation = steps(read_events(tmp_path / "job"), "EVAL")
    assert [e["args"]["step_num"] for e in evaluation] == ["0", "1", "2", "3"]


def test_a_backward_that_raises_does_not_stop_later_backward_events(tmp_path: Path) -> None:
    import torch

    import stepscope

    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for i in range(4):
            out = model(torch.randn(2, 4))
            loss = (Boom.apply(out) if i == 1 else out).sum()
            try:
                loss.backward()
            except RuntimeError:
                pass
            optimizer.step()
            optimizer.zero_grad()
    events = read_events(tmp_path / "job")
    backwards = [e["args"]["step_num"] for e in events if e["phase"] == "Backward(post-forward)"]
    assert backwards == ["0", "2", "3"]
    assert [e["args"]["step_num"] for e in steps(events)] == ["0", "1", "2", "3"]


def test_models_are_hooked_alone_and_a_model_first_used_later_is_found(tmp_path: Path) -> None:
    import torch
    from torch.nn.modules import module as torch_module

    import stepscope

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    scorer = torch.nn.Linear(4, 1).eval()  # built at the start, first called in the evaluation
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(20, 4))
    global_hooks_after_step = []
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for (x,) in torch.utils.data.DataLoader(data, batch_size=4):
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            global_hooks_after_step.append(len(torch_module._global_forward_pre_hooks))
        with torch.no_grad():
            for (x,) in torch.utils.data.DataLoader(data, batch_size=8):
                scorer(x)
    # the global hook that finds models is gone once a step found no new model: every module
    # call is back on torch's fast path
    assert global_hooks_after_step == [1, 0, 0, 0, 0]
    events = read_events(tmp_path / "job")
    assert [e["args"]["step_num"] for e in steps(events)] == ["0", "1", "2", "3", "4"]
    assert [e["args"]["step_num"] for e in steps(events, "EVAL")] == ["0", "1", "2"]
    forwards = [e["name"] for e in events if e["phase"] == "Forward"]
    assert forwards == ["Sequential"] * 5 + ["Linear"] * 3


@pytest.mark.filterwarnings("ignore:Using `torch.compile:UserWarning")  # torch's, while finding
# torch's, which dynamo hides from users but not from pytest's warnings-as-errors: resuming a
# compiled function after the model's hooks (a graph break) looks at its output's .grad
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("compiled_part", ["model", "training step"])
# aot_eager traces the backward graph while compiling, with fake tensors: not a backward pass
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_model_gets_its_steps_forward_and_backward(
    tmp_path: Path, compiled_part: str, backend: str
) -> None:
    import torch

    import stepscope

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with stepscope.profile(QUIET, job_dir=tmp_path / "job") as session:
        if compiled_part == "model":
            compiled = torch.compile(model, backend=backend)

            def train_step(x: torch.Tensor) -> None:
                compiled(x).sum().backward()
        else:  # the backward call is inside the compiled function

            @torch.compile(backend=backend)
            def train_step(x: torch.Tensor) -> None:
                model(x).sum().backward()

        for _ in range(4):
            train_step(torch.randn(2, 4))
            optimizer.step()
            optimizer.zero_grad()
    assert not session.guard.failures
    events = read_events(tmp_path / "job")
    assert [e["args"]["step_num"] for e in steps(events)] == ["0", "1", "2", "3"]
    assert [e["name"] for e in events if e["phase"] == "Forward"] == ["Sequential"] * 4
    assert len(in_phase(events, "Backward(post-forward)")) == 4


@pytest.mark.filterwarnings("ignore:Using `torch.compile:UserWarning")  # torch's, while finding
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("compiled_part", ["model", "forward and backward"])
def test_sub_module_events_of_compiled_code_are_named_and_cause_no_recompilation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, compiled_part: str
) -> None:
    # torch.compile traced into the sub-module hooks and compiled their code into frames of its
    # own, recompiled for every sub-module until it hit its recompile limit, with warnings; and
    # a compiled model's sub-modules were named after its wrapper ("_orig_mod.0"), the model
    # itself being one of them
    import torch

    from stepscope.collect.session import Session
    from stepscope.collect.torch import instrument

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    if compiled_part == "model":
        compiled = torch.compile(model, backend="eager")

        def forward_backward(x: torch.Tensor) -> None:
            compiled(x).sum().backward()
    else:

        @torch.compile(backend="eager")
        def forward_backward(x: torch.Tensor) -> None:
            model(x).sum().backward()

    session = Session(QUIET, tmp_path / "job" / "profiler-output").start()
    try:
        instrument(session, submodules=True)
        with caplog.at_level(logging.WARNING, logger="torch._dynamo"):
            for _ in range(4):
                forward_backward(torch.randn(2, 4))
                optimizer.step()
                optimizer.zero_grad()
    finally:
        session.stop()
    assert not [r for r in caplog.records if "recompile" in r.getMessage()]
    events = read_events(tmp_path / "job")
    subs = [e["name"] for e in events if e["phase"] == "Forward-SubModuleInternal"]
    assert sorted(subs) == sorted(["0", "1", "2"] * 4)


def test_backward_passes_are_the_calls_of_the_script(tmp_path: Path) -> None:
    # A backward pass is timed around torch.autograd.backward / grad: re-entrant activation
    # checkpointing (a backward inside the pass) stays one pass, a gradient penalty through the
    # model is a pass of its own, a backward through no model is none, and torch's functions
    # are torch's own again once profiling stops.
    import torch
    from torch.utils.checkpoint import checkpoint

    import stepscope

    backward, grad = torch.autograd.backward, torch.autograd.grad

    class Checkpointed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
            self.head = torch.nn.Linear(8, 1)
            self.checkpointed = True

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.checkpointed:  # re-entrant checkpointing does not allow grad()
                return self.head(self.inner(x))
            return self.head(checkpoint(self.inner, x, use_reentrant=True))

    torch.manual_seed(0)
    model = Checkpointed()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    unrelated = torch.zeros(3, requires_grad=True)
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for step in range(3):
            (unrelated * 2).sum().backward()  # no model forward yet in this step
            x = torch.randn(5, 4, requires_grad=True)
            model.checkpointed = step != 1
            out = model(x)
            loss = out.sum()
            if step == 1:  # a gradient penalty: a pass of its own, through the model
                (penalty,) = torch.autograd.grad(loss, x, create_graph=True)
                loss = loss + penalty.pow(2).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    assert torch.autograd.backward is backward and torch.autograd.grad is grad
    assert model.inner[0].weight.grad is None  # zero_grad ran: the real backward did its work
    events = read_events(tmp_path / "job")
    backwards = in_phase(events, "Backward(post-forward)")
    assert [e["args"]["step_num"] for e in backwards] == ["0", "1", "1", "2"]
    assert {e["name"] for e in backwards} == {"Checkpointed"}
    forwards = {e["args"]["step_num"]: e for e in events if e["phase"] == "Forward"}
    for event in backwards:
        assert forwards[event["args"]["step_num"]]["end_us"] <= event["start_us"]
    # the two passes of step 1 follow each other
    assert backwards[1]["end_us"] <= backwards[2]["start_us"]


def test_a_module_that_returns_its_parameter_keeps_no_hook_after_the_step(tmp_path: Path) -> None:
    # A positional embedding or a learned query returns its own parameter: a leaf tensor, which
    # outlives the step. Its sub-module backward is timed by a hook on it, which must come off,
    # or every step would add one more hook to every backward pass from then on.
    import torch

    import stepscope

    class Position(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Parameter(torch.zeros(1, 4))

        def forward(self) -> torch.Tensor:
            return self.table

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.position = Position()
            self.head = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(x + self.position())

    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = ProfilerConfig(  # sub-module events are on in a detailed range
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=0, num_steps=4)
        )
    )
    hooks_after_step = []
    with stepscope.profile(config, job_dir=tmp_path / "job"):
        for _ in range(4):
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            hooks_after_step.append(len(model.position.table._backward_hooks or {}))
    assert hooks_after_step == [0, 0, 0, 0]
    events = read_events(tmp_path / "job")
    position_backwards = [
        e for e in events if e["phase"] == "Backward-SubModuleInternal" and e["name"] == "position"
    ]
    assert [e["args"]["step_num"] for e in position_backwards] == ["0", "1", "2", "3"]


def test_a_step_that_mixed_precision_skips_is_still_a_step(tmp_path: Path) -> None:
    # GradScaler.step skips the optimizer's step when the gradients hold infs (mixed precision
    # does so while it finds its scale): the training step ends there all the same
    import torch

    import stepscope

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    scaler_step = torch.amp.GradScaler.step
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for step in range(5):
            x = torch.randn(2, 4) * (float("inf") if step in (1, 2) else 1.0)
            optimizer.zero_grad()
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
    assert torch.amp.GradScaler.step is scaler_step  # torch's own again
    events = read_events(tmp_path / "job")
    assert [e["args"]["step_num"] for e in steps(events)] == ["0", "1", "2", "3", "4"]
    assert len(in_phase(events, "Backward(post-forward)")) == 5


def _distillation(train_samples: int) -> tuple[Any, Any, Any, Any, Any]:
    """A frozen teacher (in eval mode), a student and its optimizer, and loaders of batches of
    4: ``train_samples`` samples to train on, 8 to validate on."""
    import torch

    torch.manual_seed(0)
    teacher = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    teacher.eval()
    student = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset
    train = torch.utils.data.DataLoader(data(torch.randn(train_samples, 4)), 4)
    val = torch.utils.data.DataLoader(data(torch.randn(8, 4)), 4)
    return teacher, student, optimizer, train, val


def _assert_inside(forwards: list[dict[str, Any]], in_steps: list[dict[str, Any]]) -> None:
    """Each forward lies inside its step, and carries its number."""
    for forward, step in zip(forwards, in_steps, strict=True):
        assert step["start_us"] <= forward["start_us"] <= forward["end_us"] <= step["end_us"]
        assert forward["args"]["step_num"] == step["args"]["step_num"]


@pytest.mark.parametrize("teacher_first", [True, False], ids=["teacher first", "student first"])
def test_a_teachers_forwards_are_part_of_the_training_steps(
    tmp_path: Path, teacher_first: bool
) -> None:
    # Distillation: a frozen teacher runs under no_grad beside the student in every training
    # step. Its forwards belong to the training steps (not EVAL steps of their own, which would
    # take its time out of them); an evaluation loop afterwards still makes EVAL steps, with
    # the teacher too. A teacher's very first forward, before any training step, cannot be told
    # from an evaluation: it stays an EVAL step.
    import torch

    import stepscope

    teacher, student, optimizer, train, val = _distillation(train_samples=20)

    def teach(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return teacher(x)

    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for (x,) in train:
            if teacher_first:
                target = teach(x)
                out = student(x)
            else:
                out = student(x)
                target = teach(x)
            loss = torch.nn.functional.mse_loss(out, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        for (x,) in val:
            teach(x)
    events = read_events(tmp_path / "job")
    train_steps = steps(events)
    assert [e["args"]["step_num"] for e in train_steps] == ["0", "1", "2", "3", "4"]
    eval_steps = steps(events, "EVAL")
    first_is_eval = 1 if teacher_first else 0
    assert len(eval_steps) == first_is_eval + 2
    assert all(e["start_us"] >= train_steps[-1]["end_us"] for e in eval_steps[first_is_eval:])
    teacher_forwards = [e for e in events if e["phase"] == "Forward" and e["name"] == "Sequential"]
    _assert_inside(teacher_forwards[first_is_eval:5], train_steps[first_is_eval:])


@pytest.mark.parametrize(
    "optimizer", [(), ("--no-optimizer",)], ids=["optimizer", "forward-to-forward"]
)
def test_every_forward_lies_inside_the_step_it_belongs_to(
    tmp_path: Path, optimizer: tuple[str, ...]
) -> None:
    job_dir, _ = run_script(
        tmp_path, TRAIN_SCRIPT, QUIET, "--steps", "5", "--eval-steps", "2", *optimizer
    )
    events = read_events(job_dir)
    forwards = in_phase(events, "Forward")
    assert len(forwards) == 7
    all_steps = steps(events, "TRAIN") + steps(events, "EVAL")
    for forward in forwards:
        holding = [
            s
            for s in all_steps
            if s["start_us"] <= forward["start_us"] and forward["end_us"] <= s["end_us"]
        ]
        assert [s["args"]["step_num"] for s in holding] == [forward["args"]["step_num"]]


def test_an_evaluation_after_a_partial_accumulation_makes_eval_steps(tmp_path: Path) -> None:
    # Gradient accumulation over 3 micro-batches of an epoch of 5: the last 2 micro-batches
    # reach no optimizer step before the evaluation loop. That loop's forwards are EVAL steps,
    # not part of a training step left open until the next epoch's first optimizer step.
    import torch

    import stepscope

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(20, 4)), 4)
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 4)), 4)
    optimizer_steps = evaluations = 0
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for _ in range(2):
            model.train()
            for i, (x,) in enumerate(train):
                model(x).pow(2).mean().backward()
                if (i + 1) % 3 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    optimizer_steps += 1
            model.eval()
            with torch.no_grad():
                for (x,) in val:
                    model(x)
                    evaluations += 1
    events = read_events(tmp_path / "job")
    eval_steps = steps(events, "EVAL")
    assert len(eval_steps) == evaluations
    for step in steps(events, "TRAIN")[3:]:  # the first optimizer step is split (documented)
        inside = [e for e in eval_steps if step["start_us"] <= e["start_us"] <= step["end_us"]]
        assert inside == []
    assert optimizer_steps == 2


#: trains a model and, after every epoch, evaluates a copy it never trains (an EMA of its
#: weights), with data loaders that keep their workers from one epoch to the next
EMA_SCRIPT = """
import copy
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
ema = copy.deepcopy(model).eval()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loading = dict(batch_size=4, num_workers=1, persistent_workers=True)
train = DataLoader(TensorDataset(torch.randn(12, 4)), **loading)
val = DataLoader(TensorDataset(torch.randn(8, 4)), **loading)
evaluations = 0
for epoch in range(3):
    for (x,) in train:
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
        with torch.no_grad():
            for kept, trained in zip(ema.parameters(), model.parameters()):
                kept.mul_(0.9).add_(trained, alpha=0.1)
    with torch.no_grad():
        for (x,) in val:
            ema(x)
            evaluations += 1
print("evaluations", evaluations)
"""


def test_every_epochs_evaluation_makes_eval_steps_with_persistent_workers(tmp_path: Path) -> None:
    # A persistent-workers loader starts each epoch after the first on the iterator it kept:
    # that is a new loop too, so the evaluation of a model never trained is not taken for a
    # teacher's forwards inside the training steps.
    job_dir, result = run_script(tmp_path, EMA_SCRIPT, QUIET)
    evaluations = int(result.stdout.split("evaluations")[1])
    events = read_events(job_dir)
    assert len(steps(events, "EVAL")) == evaluations
    assert len(steps(events, "TRAIN")) == 9


@pytest.mark.parametrize("output", ["distribution", "dataclass"])
def test_a_model_that_returns_an_object_of_tensors_gets_its_backward(
    tmp_path: Path, output: str
) -> None:
    # A policy returns a torch.distributions object, a model a dataclass of tensors: the
    # backward of a loss computed from them is the model's backward pass.
    import dataclasses

    import torch

    import stepscope

    @dataclasses.dataclass
    class Output:
        logits: torch.Tensor

    class Policy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> object:
            logits = self.head(x)
            if output == "distribution":
                return torch.distributions.Categorical(logits=logits)
            return Output(logits)

    torch.manual_seed(0)
    policy = Policy()
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    backward_calls = 0
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for _ in range(4):
            result = policy(torch.randn(8, 4))
            if isinstance(result, Output):
                loss = result.logits.pow(2).mean()
            else:
                loss = -result.log_prob(torch.zeros(8, dtype=torch.long)).mean()
            optimizer.zero_grad()
            loss.backward()
            backward_calls += 1
            optimizer.step()
    events = read_events(tmp_path / "job")
    backwards = in_phase(events, "Backward(post-forward)")
    assert len(backwards) == backward_calls
    assert {e["name"] for e in backwards} == {"Policy"}


def test_a_backward_through_a_frozen_model_is_the_trained_models(tmp_path: Path) -> None:
    # A perceptual loss: a frozen feature network in eval mode runs on the generator's output;
    # the backward that follows trains the generator, and is named after it.
    import torch

    import stepscope

    class Generator(torch.nn.Linear):
        pass

    class Features(torch.nn.Linear):
        pass

    torch.manual_seed(0)
    generator, features = Generator(4, 8), Features(8, 8).eval().requires_grad_(False)
    optimizer = torch.optim.Adam(generator.parameters(), lr=1e-3)
    target = torch.randn(4, 8)
    backward_calls = 0
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for _ in range(4):
            fake = generator(torch.randn(4, 4))
            loss = torch.nn.functional.mse_loss(features(fake), features(target))
            optimizer.zero_grad()
            loss.backward()
            backward_calls += 1
            optimizer.step()
    events = read_events(tmp_path / "job")
    backwards = in_phase(events, "Backward(post-forward)")
    assert [e["name"] for e in backwards] == ["Generator"] * backward_calls


def test_a_script_that_stops_the_session_before_os_exit_keeps_its_last_steps(
    tmp_path: Path,
) -> None:
    # os._exit() skips the exit handlers that hand the last events over: the documented way
    # to keep them is to stop the running session first
    ending = (
        "import os, stepscope\n"
        "with stepscope.profile() as session:\n"
        "    session.stop()\n"
        "os._exit(0)\n"
    )
    config = ProfilerConfig(framework_profile_params=FrameworkProfile())
    job_dir, result = run_script(tmp_path, TRAIN_SCRIPT + ending, config, "--steps", "6")
    assert len(losses(result)) == 6
    assert [e["args"]["step_num"] for e in steps(read_events(job_dir))] == [
        str(n) for n in range(6)
    ]


def test_a_teacher_called_first_in_every_epoch_makes_no_eval_steps_of_its_own(
    tmp_path: Path,
) -> None:
    # Distillation over epochs, each followed by a validation of the student: the teacher's
    # forward at the start of every epoch after the first made an EVAL step of its own (a new
    # data-loader loop looked like an evaluation). Only its very first call, before any training
    # step, cannot be told from an evaluation.
    import torch

    import stepscope

    teacher, student, optimizer, train, val = _distillation(train_samples=12)
    validations = 0
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for _ in range(3):
            student.train()
            for (x,) in train:
                with torch.no_grad():
                    target = teacher(x)
                loss = torch.nn.functional.mse_loss(student(x), target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            student.eval()
            with torch.no_grad():
                for (x,) in val:
                    student(x)
                    validations += 1
    events = read_events(tmp_path / "job")
    train_steps = steps(events)
    assert len(train_steps) == 9
    assert len(steps(events, "EVAL")) == 1 + validations
    teacher_forwards = [e for e in events if e["phase"] == "Forward" and e["name"] == "Sequential"]
    assert len(teacher_forwards) == 9
    _assert_inside(teacher_forwards[1:], train_steps[1:])


def test_a_model_trained_in_eval_mode_makes_training_steps(tmp_path: Path) -> None:
    # Fine-tuning with batch-norm statistics frozen: the model stays in eval mode, and a backward
    # and an optimizer step follow every forward. Those are training steps (each with its
    # backward), not evaluations; the first forward, before any optimizer step, cannot be told
    # from an evaluation.
    import torch

    import stepscope

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)
    ).eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with stepscope.profile(QUIET, job_dir=tmp_path / "job"):
        for _ in range(5):
            loss = model(torch.randn(4, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert not model.training  # stepscope changes no module's mode
    events = read_events(tmp_path / "job")
    assert len(steps(events, "EVAL")) == 1
    train_steps = steps(events)
    assert [e["args"]["step_num"] for e in train_steps] == ["0", "1", "2", "3"]
    backwards = in_phase(events, "Backward(post-forward)")
    for backward, step in zip(backwards, train_steps, strict=True):
        assert step["start_us"] <= backward["start_us"] <= backward["end_us"] <= step["end_us"]
        assert backward["args"]["step_num"] == step["args"]["step_num"]
