"""Shared by the tests of heron's command line and of the repository's scripts."""

import importlib.util
from pathlib import Path

from heron.cli import main

ROOT = Path(__file__).resolve().parent.parent


def load_script(path: str):
    """A script of the repository (``benchmarks/x.py``, ``tools/x.py``) as a module, not run."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cli_error(capsys, argv, code=2):
    """Run the CLI on ``argv`` and return its one-line error, asserting the exit code and the form."""
    got = main(argv)
    err = capsys.readouterr().err
    assert got == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("heron: error: "), err
    assert "Traceback" not in err
    return lines[0]
