"""cProfile and pyinstrument profile queries, on profiles made here and on recorded ones."""

from __future__ import annotations

import cProfile
import logging
import math
import pstats
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.collect.torch.torchjob import run_script
from tests.servers import s3_server

from stepscope.analysis import PandasFrame
from stepscope.analysis.python_profile import (
    TOP_COLUMNS,
    Metrics,
    PyinstrumentAnalysis,
    PyinstrumentStats,
    PyinstrumentStepStats,
    cProfileAnalysis,
)
from stepscope.errors import ConfigError, JobNotFoundError, StorageAccessError
from stepscope.store import open_job
from stepscope.store.python_stats import PythonProfileModes

T = 1_700_000_000_000_000


def _folder(
    mode: str, step: str, phase: str, t0: int, emode: str, estep: str, ephase: str, t1: int
) -> str:
    return f"{mode}-{step}-{phase}-{t0}.0_{emode}-{estep}-{ephase}-{t1}.0"


def busy_loader(n: int) -> int:
    return sum(i * i for i in range(n))


def busy_trainer(n: int) -> int:
    return sum(i % 7 for i in range(n))


def _profile_into(path: Path, work, calls: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        work(2000)
    profiler.disable()
    path.parent.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(str(path))


@pytest.fixture
def cprofile_job(tmp_path: Path) -> Path:
    """A job folder with real cProfile dumps: pre-step-zero, TRAIN steps 1 and 2, post-hook-close."""
    base = tmp_path / "job" / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    _profile_into(
        base
        / _folder("prestepzero", "*", "start", T, "train", "0", "stepstart", T + 10)
        / "python_stats",
        busy_loader,
        3,
    )
    _profile_into(
        base
        / _folder("train", "1", "stepstart", T + 20, "train", "1", "stepend", T + 30)
        / "python_stats",
        busy_trainer,
        4,
    )
    _profile_into(
        base
        / _folder("train", "2", "stepstart", T + 40, "train", "2", "stepend", T + 50)
        / "python_stats",
        busy_trainer,
        5,
    )
    _profile_into(
        base
        / _folder("train", "2", "stepend", T + 60, "posthookclose", "*", "end", T + 70)
        / "python_stats",
        busy_loader,
        1,
    )
    return tmp_path / "job"


def _calls(stats: pstats.Stats, function: str) -> int:
    return sum(v[1] for k, v in stats.stats.items() if k[2] == function)  # type: ignore[attr-defined]


def test_steps_are_merged_and_other_intervals_left_out(cprofile_job: Path) -> None:
    analysis = cProfileAnalysis(local_profile_dir=cprofile_job)
    result = analysis.fetch_profile_stats_by_step(1, 2)
    assert len(result.records) == 2
    assert _calls(result.ps, "busy_trainer") == 9
    assert _calls(result.ps, "busy_loader") == 0
    table = result.top_functions(n=50)
    row = table[table["function"] == "busy_trainer"].iloc[0]
    assert row["total_calls"] == 9 and row["prim_calls"] == 9
    assert row["file"] == __file__
    assert row["line"] == busy_trainer.__code__.co_firstlineno
    assert row["per_call_s"] == pytest.approx(row["cumulative_time_s"] / 9)


def test_one_step_is_that_step_only(cprofile_job: Path) -> None:
    result = cProfileAnalysis(cprofile_job).fetch_profile_stats_by_step(2)
    assert [r.start_step for r in result.records] == [2]
    assert _calls(result.ps, "busy_trainer") == 5


def test_pre_step_zero_and_post_hook_close_have_their_own_queries(cprofile_job: Path) -> None:
    analysis = cProfileAnalysis(cprofile_job)
    assert _calls(analysis.fetch_pre_step_zero_profile_stats().ps, "busy_loader") == 3
    assert _calls(analysis.fetch_post_hook_close_profile_stats().ps, "busy_loader") == 1


def test_job_phases_split_initialization_training_loop_and_finalization(cprofile_job: Path) -> None:
    phases = cProfileAnalysis(cprofile_job).fetch_profile_stats_by_job_phase()
    assert _calls(phases["initialization"].ps, "busy_loader") == 3
    assert _calls(phases["training_loop"].ps, "busy_trainer") == 9
    assert _calls(phases["finalization"].ps, "busy_loader") == 1


def test_training_phases_are_the_mode_pairs_present(cprofile_job: Path) -> None:
    phases = cProfileAnalysis(cprofile_job).fetch_profile_stats_by_training_phase()
    m = PythonProfileModes
    assert set(phases) == {
        (m.PRE_STEP_ZERO, m.TRAIN),
        (m.TRAIN, m.TRAIN),
        (m.TRAIN, m.POST_HOOK_CLOSE),
    }
    assert len(phases[(m.TRAIN, m.TRAIN)].records) == 2


def test_a_time_query_in_microseconds_says_where_the_profiles_are(
    cprofile_job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.python_profile"):
        result = cProfileAnalysis(cprofile_job).fetch_profile_stats_by_time(T + 15, T + 45)
    assert result.empty
    assert f"the profiles span {T / 1e6:.6f}..{(T + 70) / 1e6:.6f} s" in caplog.text


def test_a_truncated_dump_is_skipped_with_a_warning_and_the_others_merged(
    cprofile_job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (step_two,) = cprofile_job.rglob("train-2-stepstart-*/python_stats")
    step_two.write_bytes(step_two.read_bytes()[:100])  # as a full disk leaves it
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.python_profile"):
        result = cProfileAnalysis(cprofile_job).fetch_profile_stats_by_step(1, 2)
    assert [r.start_step for r in result.records] == [1]
    assert _calls(result.ps, "busy_trainer") == 4
    assert f"Skipping unreadable cProfile profile {step_two}" in caplog.text


def test_time_query_selects_profiles_overlapping_the_interval(cprofile_job: Path) -> None:
    analysis = cProfileAnalysis(cprofile_job)
    result = analysis.fetch_profile_stats_by_time((T + 15) / 1e6, (T + 45) / 1e6)
    assert [r.start_step for r in result.records] == [1, 2]
    # An interval inside one profile selects it (SageMaker's start-or-end test did not).
    inside = analysis.fetch_profile_stats_by_time((T + 22) / 1e6, (T + 28) / 1e6)
    assert [r.start_step for r in inside.records] == [1]


def test_an_empty_query_returns_an_empty_result_and_says_why(
    cprofile_job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.python_profile"):
        result = cProfileAnalysis(cprofile_job).fetch_profile_stats_by_step(7, 9)
    assert result.empty
    assert list(result.top_functions().columns) == TOP_COLUMNS
    assert result.top_functions().empty
    assert "No cprofile profiles match train steps 7..9" in caplog.text


def test_a_node_without_profiles_is_named_with_those_that_have_some(
    cprofile_job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A mistyped node_id only said that no profile matched the steps, as if they were not
    # profiled.
    analysis = cProfileAnalysis(cprofile_job)
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.python_profile"):
        assert analysis.fetch_profile_stats_by_step(1, 2, node_id="0-algo-2").empty
    assert "Node '0-algo-2' has no cprofile profiles" in caplog.text
    assert "the nodes that have some: 0-algo-1." in caplog.text


def test_a_pandas_frame_reads_the_profiles_of_its_job(cprofile_job: Path, tmp_path: Path) -> None:
    # PT_dataloader_analysis takes the PandasFrame; the profile analyses raised a bare
    # TypeError from os.stat for it.
    for frame in (PandasFrame(cprofile_job), PandasFrame(open_job(cprofile_job))):
        assert len(cProfileAnalysis(frame).fetch_profile_stats_by_step(1, 2).records) == 2
    # one made over a connection names no job
    connection = PandasFrame(open_job(cprofile_job, cache_dir=tmp_path / "cache").connect())
    with pytest.raises(ConfigError, match="cProfileAnalysis.local_profile_dir must be a job"):
        cProfileAnalysis(connection)


def test_a_job_profiled_with_the_other_profiler_says_which_analysis_reads_it(
    cprofile_job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # PyinstrumentAnalysis of a cProfile job said that it had no profiles at all.
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.python_profile"):
        assert PyinstrumentAnalysis(cprofile_job).fetch_profile_stats_by_step(1, 2).empty
    assert "(0 profiles found in total; it has cprofile profiles: read them with " in caplog.text
    assert "cProfileAnalysis)" in caplog.text


def test_listing_and_node_ids(cprofile_job: Path) -> None:
    analysis = cProfileAnalysis(cprofile_job)
    listing = analysis.list_profile_stats()
    assert len(listing) == 4
    assert listing["start_mode"].tolist() == ["prestepzero", "train", "train", "train"]
    assert analysis.list_available_node_ids() == ["0-algo-1"]


def test_listing_has_sagemaker_column_names(cprofile_job: Path) -> None:
    listing = cProfileAnalysis(cprofile_job).list_profile_stats()
    # A notebook written for smdebug filters this table by smdebug's column names.
    assert listing["start_time_since_epoch_in_micros"].tolist() == [T, T + 20, T + 40, T + 60]
    assert listing["end_time_since_epoch_in_micros"].tolist() == [T + 10, T + 30, T + 50, T + 70]
    assert set(listing["profiler_name"]) == {"cprofile"}
    assert all(Path(p).name == "python_stats" and Path(p).is_file() for p in listing["stats_path"])


def test_a_job_opened_by_the_store_is_accepted(cprofile_job: Path, tmp_path: Path) -> None:
    job = open_job(cprofile_job, cache_dir=tmp_path / "cache")
    assert len(cProfileAnalysis(job).fetch_profile_stats_by_step(1, 2).records) == 2


def test_a_wrong_sort_key_is_a_config_error(cprofile_job: Path) -> None:
    result = cProfileAnalysis(cprofile_job).fetch_profile_stats_by_step(1)
    with pytest.raises(ConfigError, match="top_functions.by"):
        result.top_functions(by="speed")


@pytest.mark.parametrize("n", [-1, 0, 2.5, "3", True])
def test_a_top_count_that_is_not_a_positive_integer_is_a_config_error(
    cprofile_job: Path, n: object
) -> None:
    result = cProfileAnalysis(cprofile_job).fetch_profile_stats_by_step(1)
    with pytest.raises(ConfigError, match=r"top_functions\.n must be an integer >= 1"):
        result.top_functions(n=n)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"top_functions\.n must be an integer >= 1"):
        PyinstrumentStats([]).top_functions(n=n)  # type: ignore[arg-type]


def test_numpy_numbers_read_off_a_data_frame_are_steps_times_and_counts(
    cprofile_job: Path,
) -> None:
    analysis = cProfileAnalysis(cprofile_job)
    result = analysis.fetch_profile_stats_by_step(np.int64(1), np.int64(2))
    assert len(result.records) == len(analysis.fetch_profile_stats_by_step(1, 2).records) > 0
    assert len(result.top_functions(n=np.int64(3))) == 3
    first = min(record.start_time_us for record in result.records) / 1e6
    by_time = analysis.fetch_profile_stats_by_time(np.float64(first), np.int64(int(first) + 1))
    assert len(by_time.records) > 0


@pytest.mark.parametrize(
    ("query", "args", "kwargs", "message"),
    [
        ("fetch_profile_stats_by_step", (2,), {"mode": "bogus"}, r"\.mode must be one of .*TRAIN"),
        ("fetch_profile_stats_by_step", (2,), {"end_phase": "x"}, r"\.end_phase must be one of"),
        ("fetch_profile_stats_by_step", (-1,), {}, r"\.start_step must be an integer >= 0"),
        ("fetch_profile_stats_by_step", (1.5,), {}, r"\.start_step must be an integer >= 0"),
        ("fetch_profile_stats_by_step", (2, 1), {}, r"\.end_step must be an integer >= 2"),
        ("fetch_profile_stats_by_time", (-1, 5), {}, r"\.start_time_since_epoch_in_secs must be"),
        ("fetch_profile_stats_by_time", (5, 1), {}, r"\.end_time_since_epoch_in_secs must be"),
        ("fetch_profile_stats_between_modes", ("bogus", "train"), {}, r"\.start_mode must be"),
    ],
)
@pytest.mark.parametrize("analysis", [cProfileAnalysis, PyinstrumentAnalysis])
def test_a_wrong_query_parameter_is_a_config_error_listing_what_is_allowed(
    analysis, cprofile_job: Path, query: str, args: tuple, kwargs: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{query}{message}"):
        getattr(analysis(cprofile_job), query)(*args, **kwargs)


def test_modes_and_phases_are_taken_in_any_case(cprofile_job: Path) -> None:
    # stepscope spells modes "TRAIN" everywhere else (stepscope.step, Step:ModeKeys.TRAIN)
    analysis = cProfileAnalysis(cprofile_job)
    by_step = analysis.fetch_profile_stats_by_step(1, 2, mode="TRAIN", start_phase="STEP_START")
    assert _calls(by_step.ps, "busy_trainer") == 9
    pre = analysis.fetch_profile_stats_between_modes("PRE_STEP_ZERO", "Train")
    assert _calls(pre.ps, "busy_loader") == 3


def test_no_directory_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="local_profile_dir"):
        cProfileAnalysis()


@pytest.mark.parametrize("analysis", [cProfileAnalysis, PyinstrumentAnalysis])
def test_a_folder_that_does_not_exist_is_named_in_the_error(analysis, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-job"
    with pytest.raises(JobNotFoundError, match=f"{analysis.__name__} reads a job folder"):
        analysis(missing)


# -- profiles of a real training job ----------------------------------------------------------------

#: A script that profiles a short training loop with ``stepscope.profile()`` and the profiler
#: named by its second argument, then goes on with work of its own: ``before_training`` runs
#: before step zero, ``after_training`` after the block, in the post-hook-close window (each
#: sleeps long enough for pyinstrument's samples to see it).
PROFILED_SCRIPT = """
import sys, time
import torch
import stepscope
from stepscope import FrameworkProfile, ProfilerConfig, PythonProfilingConfig

def before_training():
    time.sleep(0.02)

def after_training():
    time.sleep(0.02)

config = ProfilerConfig(framework_profile_params=FrameworkProfile(
    python_profiling_config=PythonProfilingConfig(
        start_step=1, num_steps=1, python_profiler=sys.argv[2])))
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with stepscope.profile(config, job_dir=sys.argv[1]):
    before_training()
    for _ in range(3):
        loss = model(torch.randn(2, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
after_training()
"""


def _profiled_job(tmp_path_factory: pytest.TempPathFactory, profiler: str) -> Path:
    pytest.importorskip("torch")
    tmp_path = tmp_path_factory.mktemp(profiler)
    run_script(tmp_path, PROFILED_SCRIPT, None, str(tmp_path / "job"), profiler)
    return tmp_path / "job"


@pytest.fixture(scope="module")
def profiled_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _profiled_job(tmp_path_factory, "cprofile")


def test_pre_step_zero_and_post_hook_close_of_a_real_job_are_each_their_own_window(
    profiled_job: Path,
) -> None:
    analysis = cProfileAnalysis(profiled_job)
    pre = analysis.fetch_pre_step_zero_profile_stats()
    post = analysis.fetch_post_hook_close_profile_stats()
    assert [r.start_mode for r in pre.records] == [PythonProfileModes.PRE_STEP_ZERO]
    assert [r.end_mode for r in post.records] == [PythonProfileModes.POST_HOOK_CLOSE]
    assert (_calls(pre.ps, "before_training"), _calls(pre.ps, "after_training")) == (1, 0)
    assert (_calls(post.ps, "before_training"), _calls(post.ps, "after_training")) == (0, 1)
    phases = analysis.fetch_profile_stats_by_job_phase()
    assert phases["initialization"].records == pre.records
    assert phases["finalization"].records == post.records
    assert [r.start_step for r in phases["training_loop"].records] == [1]


def test_a_step_window_that_ended_inside_its_step_is_that_steps_not_post_hook_close(
    cprofile_job: Path,
) -> None:
    # the window of step 3 ended where the script started its own cProfile: phase "end"
    base = cprofile_job / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    folder = _folder("train", "3", "stepstart", T + 52, "train", "3", "end", T + 55)
    _profile_into(base / folder / "python_stats", busy_trainer, 2)
    analysis = cProfileAnalysis(cprofile_job)
    post = analysis.fetch_post_hook_close_profile_stats()
    assert [r.end_mode for r in post.records] == [PythonProfileModes.POST_HOOK_CLOSE]
    assert _calls(post.ps, "busy_trainer") == 0
    # it is the profile of (the first part of) step 3
    assert _calls(analysis.fetch_profile_stats_by_step(3).ps, "busy_trainer") == 2
    assert _calls(analysis.fetch_profile_stats_by_step(1, 3).ps, "busy_trainer") == 4 + 5 + 2


def test_pyinstrument_profiles_of_a_real_job_are_fetched_by_job_and_training_phase(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pytest.importorskip("pyinstrument")
    analysis = PyinstrumentAnalysis(_profiled_job(tmp_path_factory, "pyinstrument"))
    phases = analysis.fetch_profile_stats_by_job_phase()
    assert {name: len(stats) for name, stats in phases.items()} == {
        "initialization": 1,
        "training_loop": 1,
        "finalization": 1,
    }
    assert "before_training" in set(phases["initialization"].get_function_stats()["function"])
    assert "after_training" in set(phases["finalization"].get_function_stats()["function"])
    m = PythonProfileModes
    by_modes = analysis.fetch_profile_stats_by_training_phase()
    assert set(by_modes) == {
        (m.PRE_STEP_ZERO, m.TRAIN),
        (m.TRAIN, m.TRAIN),
        (m.POST_HOOK_CLOSE, m.POST_HOOK_CLOSE),
    }
    assert [s.record.start_step for s in by_modes[(m.TRAIN, m.TRAIN)]] == [1]


# -- recorded cProfile dumps ---------------------------------------------------------------------


def _recorded(shared_fixtures: Path) -> tuple[Path, list[Path]]:
    root = shared_fixtures / "smdebug" / "cprofile_layout"
    node = root / "framework" / "tensorflow" / "cprofile" / "151-algo-1"
    files = sorted(node.glob("*/python_stats"))
    return root, files


def test_recorded_steps_two_and_three_equal_pstats_of_the_same_files(shared_fixtures: Path) -> None:
    root, files = _recorded(shared_fixtures)
    step_files = [f for f in files if f.parent.name.startswith("train-")]
    assert len(step_files) == 2
    expected = pstats.Stats(*(str(f) for f in step_files))
    result = cProfileAnalysis(
        root / "framework" / "tensorflow" / "cprofile"
    ).fetch_profile_stats_by_step(2, 3)
    assert result.ps.stats.keys() == expected.stats.keys()  # type: ignore[attr-defined]
    assert result.ps.total_calls == expected.total_calls  # type: ignore[attr-defined]
    top = result.top_functions(n=3, by=Metrics.TOTAL_TIME)
    by_tottime = sorted(expected.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    (file, line, function), (prim, total, tottime, cumtime, _) = by_tottime[0]
    assert top.iloc[0][["function", "file", "line"]].tolist() == [function, file, line]
    assert top.iloc[0]["total_time_s"] == pytest.approx(tottime)
    assert top.iloc[0]["cumulative_time_s"] == pytest.approx(cumtime)
    assert top.iloc[0]["total_calls"] == total


def test_recorded_pre_step_zero_equals_pstats_of_that_file(shared_fixtures: Path) -> None:
    root, files = _recorded(shared_fixtures)
    (pre,) = [f for f in files if f.parent.name.startswith("prestepzero-")]
    expected = pstats.Stats(str(pre))
    result = cProfileAnalysis(root).fetch_pre_step_zero_profile_stats()
    assert result.ps.stats == expected.stats  # type: ignore[attr-defined]
    functions = result.get_function_stats()
    assert len(functions) == len(expected.stats)  # type: ignore[attr-defined]
    assert functions["total_calls"].sum() == expected.total_calls  # type: ignore[attr-defined]


# -- pyinstrument --------------------------------------------------------------------------------


def test_a_real_pyinstrument_profile_gives_a_top_function_table(tmp_path: Path) -> None:
    pyinstrument = pytest.importorskip("pyinstrument")
    from pyinstrument.renderers import HTMLRenderer, JSONRenderer

    profiler = pyinstrument.Profiler(interval=0.0005)
    profiler.start()
    for _ in range(40):
        busy_trainer(20000)
    profiler.stop()
    folder = (
        tmp_path
        / "framework"
        / "pytorch"
        / "pyinstrument"
        / "0-algo-1"
        / _folder("train", "4", "stepstart", T, "train", "4", "stepend", T + 1)
    )
    folder.mkdir(parents=True)
    (folder / "python_stats.json").write_text(profiler.output(JSONRenderer()))
    (folder / "python_stats.html").write_text(profiler.output(HTMLRenderer()))

    result = PyinstrumentAnalysis(tmp_path).fetch_profile_stats_by_step(4)
    assert len(result) == 1
    assert result[0].html_file_path.endswith("python_stats.html")
    assert result[0].json_stats["root_frame"]
    table = result.top_functions(n=100, by=Metrics.CUMULATIVE_TIME)
    assert list(table.columns) == TOP_COLUMNS
    row = table[table["function"] == "busy_trainer"].iloc[0]
    assert row["cumulative_time_s"] > 0
    assert row["total_time_s"] <= row["cumulative_time_s"] + 1e-9
    assert math.isnan(row["total_calls"])


def test_pyinstrument_recursion_counts_inclusive_time_once() -> None:
    def frame(function: str, time_s: float, *children: dict) -> dict:
        return {
            "function": function,
            "file_path": "train.py",
            "line_no": {"main": 1, "f": 10, "g": 20}[function],
            "time": time_s,
            "children": list(children),
        }

    tree = {"root_frame": frame("main", 1.0, frame("f", 0.8, frame("f", 0.5, frame("g", 0.3))))}
    stats = PyinstrumentStats([PyinstrumentStepStats("", tree)])
    table = stats.get_function_stats().set_index("function")
    assert table.loc["f", "total_time_s"] == pytest.approx(0.5)  # 0.3 + 0.2 of its own
    assert table.loc["f", "cumulative_time_s"] == pytest.approx(0.8)  # not 1.3
    assert table.loc["g", "cumulative_time_s"] == pytest.approx(0.3)
    assert table.loc["main", "total_time_s"] == pytest.approx(0.2)
    assert stats.top_functions(n=1, by="total_time_s")["function"].tolist() == ["f"]


def test_pyinstrument_self_time_frames_are_their_parents_own_time() -> None:
    # pyinstrument shows a function's own time as a "[self]" child (file ""): counted as a
    # function, one "[self]" row summed every function's own time and topped the table
    def frame(function: str, time_s: float, *children: dict) -> dict:
        return {
            "function": function,
            "file_path": "" if function == "[self]" else "train.py",
            "line_no": {"main": 1, "f": 10, "g": 20, "[self]": 0}[function],
            "time": time_s,
            "children": list(children),
        }

    tree = {
        "root_frame": frame(
            "main",
            1.0,
            frame("[self]", 0.2),
            frame("f", 0.8, frame("[self]", 0.5), frame("g", 0.3)),
        )
    }
    stats = PyinstrumentStats([PyinstrumentStepStats("", tree)])
    table = stats.get_function_stats().set_index("function")
    assert sorted(table.index) == ["f", "g", "main"]
    assert table.loc["f", "total_time_s"] == pytest.approx(0.5)
    assert table.loc["main", "total_time_s"] == pytest.approx(0.2)
    assert table.loc["f", "cumulative_time_s"] == pytest.approx(0.8)
    assert stats.top_functions(n=1, by=Metrics.TOTAL_TIME)["function"].tolist() == ["f"]
    # calls are not counted: ranking by them gave the table's own order
    for by in (Metrics.TOTAL_CALLS, Metrics.PRIMITIVE_CALLS, "per_call_s"):
        with pytest.raises(ConfigError, match="does not count calls"):
            stats.top_functions(n=1, by=by)


def test_pyinstrument_empty_query_is_an_empty_sequence(tmp_path: Path) -> None:
    result = PyinstrumentAnalysis(tmp_path).fetch_pre_step_zero_profile_stats()
    assert result.empty and len(result) == 0
    assert result.top_functions().empty


# -- S3 ------------------------------------------------------------------------------------------


@pytest.fixture
def endpoint(cprofile_job: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A local S3 server holding ``cprofile_job`` at ``s3://training/jobs/run-1``: its URL."""
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    with s3_server(monkeypatch) as url:
        client = boto3.client("s3", endpoint_url=url)
        client.create_bucket(Bucket="training")
        for path in sorted(p for p in cprofile_job.rglob("*") if p.is_file()):
            key = f"jobs/run-1/{path.relative_to(cprofile_job).as_posix()}"
            client.upload_file(str(path), "training", key)
        yield url


def test_profiles_on_s3_are_copied_once_and_queried_like_local_ones(
    endpoint: str, tmp_path: Path
) -> None:
    local = tmp_path / "downloaded"
    analysis = cProfileAnalysis(local_profile_dir=local, s3_path="s3://training/jobs/run-1")
    result = analysis.fetch_profile_stats_by_step(1, 2)
    assert _calls(result.ps, "busy_trainer") == 9
    assert all(Path(r.path).is_relative_to(local) for r in result.records)
    assert len(list(local.rglob("python_stats"))) == 4
    assert analysis.list_available_node_ids() == ["0-algo-1"]


def test_a_partial_copy_of_a_profile_on_s3_is_fetched_again(endpoint: str, tmp_path: Path) -> None:
    # A download cut off mid-object (a dropped connection, the process stopped) left a partial
    # local copy, which every later refresh took as copied: the profile was unreadable for good.
    local = tmp_path / "downloaded"
    url = "s3://training/jobs/run-1"
    cProfileAnalysis(local_profile_dir=local, s3_path=url)
    copies = sorted(local.rglob("python_stats"))
    whole = {copy: copy.read_bytes() for copy in copies}
    for copy in copies:
        copy.write_bytes(whole[copy][: len(whole[copy]) // 2])

    analysis = cProfileAnalysis(local_profile_dir=local, s3_path=url)
    assert {copy: copy.read_bytes() for copy in copies} == whole
    assert _calls(analysis.fetch_profile_stats_by_step(1, 2).ps, "busy_trainer") == 9
    assert not [p for p in local.rglob("*") if p.is_file() and p.name != "python_stats"]


def test_a_job_opened_on_another_s3_endpoint_reads_its_profiles_there(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A JobData opened with storage_options (an S3-compatible store, not AWS) lost them: its
    # profiles were looked for on AWS.
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    options = {"client_kwargs": {"endpoint_url": endpoint}}
    job = open_job("s3://training/jobs/run-1", storage_options=options)
    analysis = cProfileAnalysis(job)
    assert _calls(analysis.fetch_profile_stats_by_step(1, 2).ps, "busy_trainer") == 9
    by_url = cProfileAnalysis(s3_path="s3://training/jobs/run-1", storage_options=options)
    assert len(by_url.list_profile_stats()) == 4


def test_an_s3_job_given_as_the_job_is_read_there(endpoint: str) -> None:
    # cProfileAnalysis("s3://...") said that no job was there, looking for a local folder of
    # that name, while PandasFrame("s3://...") read the same job.
    analysis = cProfileAnalysis("s3://training/jobs/run-1")
    assert _calls(analysis.fetch_profile_stats_by_step(1, 2).ps, "busy_trainer") == 9


def test_a_refresh_on_s3_lists_the_profiles_once(
    endpoint: str, tmp_path: Path, caplog: Any
) -> None:
    # Each refresh listed the profiles twice: once to find them, once more for their sizes.
    local = tmp_path / "downloaded"
    analysis = cProfileAnalysis(local_profile_dir=local, s3_path="s3://training/jobs/run-1")
    with caplog.at_level(logging.DEBUG, logger="s3fs"):
        result = analysis.fetch_profile_stats_by_step(1, 2)
    assert _calls(result.ps, "busy_trainer") == 9
    listings = [
        r.message
        for r in caplog.records
        if r.message.startswith("CALL: list_objects_v2") and "'Delimiter': ''" in r.message
    ]
    assert len(listings) == 1, listings


def test_a_wrong_s3_location_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A missing bucket was a bare FileNotFoundError, a missing prefix a job without profiles,
    # and missing credentials botocore's own NoCredentialsError.
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    with s3_server(monkeypatch) as endpoint:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="training")
        for url, detail in (
            ("s3://no-such-bucket/run", "The bucket 'no-such-bucket' does not exist"),
            ("s3://training/no-such-run", "'training' holds nothing under 'no-such-run/'"),
        ):
            with pytest.raises(JobNotFoundError, match=detail) as missing:
                cProfileAnalysis(s3_path=url)
            assert repr(url) in str(missing.value)
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(key)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        with pytest.raises(StorageAccessError, match="credentials"):
            PyinstrumentAnalysis(s3_path="s3://training/run")
