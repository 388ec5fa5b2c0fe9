"""The documentation site: it builds without a warning (broken links, missing pages, a docstring
mkdocstrings cannot read), and its option tables are the config dataclasses, flag for flag and
default for default what ``heron train ALGO --help`` prints."""

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import load_script

from heron import registry
from heron.cli import config_parser
from heron.config import RunConfig, flag

ROOT = Path(__file__).resolve().parent.parent


def _tables():
    return load_script("tools/docs_tables.py")


def test_the_docs_option_tables_are_the_config_dataclasses(capsys):
    assert _tables().main(["--check"]) == 0, capsys.readouterr().err


def test_every_page_of_the_site_that_shows_options_has_its_table():
    tables = _tables()
    pages = {
        m.group("name"): page for page in (ROOT / "docs").rglob("*.md") for m in tables.BLOCK.finditer(page.read_text())
    }
    assert set(pages) == {"common", *registry.ALGOS}, pages
    presets = {
        m.group("name")
        for page in (ROOT / "docs").rglob("*.md")
        for m in tables.PRESETS_BLOCK.finditer(page.read_text())
    }
    assert presets == set(registry.ALGOS)


def test_a_presets_table_gives_every_value_a_preset_sets_as_a_flag_takes_it():
    text = _tables().render_presets("td3")
    assert "| `mujoco` | `--total-steps 1000000`, `--learning-starts 25000`," in text
    assert "| `original` | `--hidden-sizes 400 300`, `--batch-size 100`, `--policy-lr 1e-3`, `--q-lr 1e-3`," in text


def _help_defaults(algo: str) -> dict[str, str]:
    """``--flag`` -> the default its ``--help`` line states, for every flag the help shows."""
    module = registry.get(algo)
    parser = config_parser(algo, module.Config, module.Config())
    out = {}
    for action in parser._actions:
        if not action.option_strings or action.help in (None, argparse.SUPPRESS):
            continue
        m = re.search(r"\(default: (.*)\)$", action.help)
        if m:
            out[action.option_strings[0]] = m.group(1).replace("%%", "%")
    return out


@pytest.mark.parametrize("algo", list(registry.ALGOS))
def test_the_tables_agree_with_help(algo):
    tables = _tables()
    helped = _help_defaults(algo)
    cfg = registry.get(algo).Config()
    rows = tables.algo_rows(algo)
    common = [f"`--{flag(f.name)}`" for f in dataclasses.fields(RunConfig)]
    assert [r[0] for r in tables.common_rows()] == common
    for name, _values, default, _meaning in rows + [r for r in tables.common_rows()]:
        key = name.strip("`")
        assert key in helped, f"{key} is in the docs' table but not in heron train {algo} --help"
        value = getattr(cfg, key[2:].replace("-", "_"))
        shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
        assert helped[key] == repr(shown), (key, helped[key], shown)
        if name in common:
            continue
        assert default == f"`{tables.shown(value)}`"
    documented = {r[0].strip("`") for r in rows} | {c.strip("`") for c in common}
    assert documented == set(helped), set(helped) ^ documented


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "getting-started" / "index.html").exists()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "predict" in api and "Diverged" in api


def test_the_readmes_links_and_images_point_at_files_of_the_repository():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) + re.findall(r'<img src="([^"]+)"', text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links no page of the docs"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
