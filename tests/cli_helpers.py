"""Shared by the CLI tests."""

from heron.cli import main


def cli_error(capsys, argv, code=2):
    """Run the CLI on ``argv`` and return its one-line error, asserting the exit code and the form."""
    got = main(argv)
    err = capsys.readouterr().err
    assert got == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("heron: error: "), err
    assert "Traceback" not in err
    return lines[0]
