"""Every option a subcommand's ``--help`` lists is documented where users learn stepscope and
says its default, and ``stepscope --version`` says which stepscope it is."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

import stepscope
from stepscope.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def _documentation() -> str:
    return "\n".join(
        path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    )


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"stepscope {command}")
    importlib.import_module(f"stepscope.cli.{COMMANDS[command][0]}").add_arguments(parser)
    return parser


def _undocumented(parser: argparse.ArgumentParser) -> list[str]:
    docs = _documentation()
    return [
        "/".join(action.option_strings)
        for action in parser._actions
        if action.option_strings and action.dest != "help"
        if not any(re.search(re.escape(o) + r"(?![\w-])", docs) for o in action.option_strings)
    ]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_in_help_is_documented(command: str) -> None:
    missing = _undocumented(_parser(command))
    assert not missing, f"stepscope {command} options in no doc: {missing}"


def test_every_option_of_stepscope_itself_is_documented() -> None:
    # -v/--verbose was in every command's --help and in no doc
    missing = _undocumented(build_parser())
    assert not missing, f"stepscope options in no doc: {missing}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_that_takes_a_value_says_its_default(command: str) -> None:
    # `stepscope run --help` said nothing of what --config and --nproc-per-node are without them
    silent = [
        "/".join(action.option_strings)
        for action in _parser(command)._actions
        if action.option_strings and action.nargs != 0
        if "default" not in (action.help or "")
    ]
    assert not silent, f"stepscope {command} options whose help gives no default: {silent}"


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    # --version was refused: "the following arguments are required: COMMAND"
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"stepscope {stepscope.__version__}\n"
