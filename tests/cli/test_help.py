"""Every option a subcommand's ``--help`` lists is documented where users learn stepscope, and
``stepscope --version`` says which stepscope it is."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

import stepscope
from stepscope.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def _documentation() -> str:
    return "\n".join(
        path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_in_help_is_documented(command: str) -> None:
    parser = argparse.ArgumentParser(prog=f"stepscope {command}")
    importlib.import_module(f"stepscope.cli.{COMMANDS[command][0]}").add_arguments(parser)
    docs = _documentation()
    missing = [
        "/".join(action.option_strings)
        for action in parser._actions
        if action.option_strings and action.dest != "help"
        if not any(re.search(re.escape(o) + r"(?![\w-])", docs) for o in action.option_strings)
    ]
    assert not missing, f"stepscope {command} options in no doc: {missing}"


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    # --version was refused: "the following arguments are required: COMMAND"
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"stepscope {stepscope.__version__}\n"
