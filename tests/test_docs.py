"""The documentation site: it builds without a warning (broken links, missing pages, a docstring
mkdocstrings cannot read), and its option tables are the config dataclasses, flag for flag and
default for default what ``heron train ALGO --help`` prints."""

import argparse
import dataclasses
import html
import logging
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


API = ROOT / "docs" / "reference" / "api.md"


def _nav_titles() -> dict[str, str]:
    """algorithm -> the title of its page in the site's navigation."""
    nav = (ROOT / "mkdocs.yml").read_text()
    return {algo: title for title, algo in re.findall(r"^\s*- ([^:\n]+): algorithms/(\w+)\.md$", nav, re.M)}


def test_the_api_reference_has_each_algorithms_config_table_under_its_own_heading():
    text = API.read_text()
    titles = _nav_titles()
    assert set(titles) == set(registry.ALGOS), titles
    blocks = [(m.group("name"), m.start()) for m in _tables().CONFIG_BLOCK.finditer(text)]
    assert sorted(name for name, _ in blocks) == sorted(["common", *registry.ALGOS]), blocks
    for name, start in blocks:
        heading = list(re.finditer(r"^#+ (.+)$", text[:start], re.M))[-1]
        section = text[heading.end() : start]
        if name == "common":
            assert heading.group(1) == "Common options" and "`heron.config.RunConfig`" in section
            continue
        assert heading.group(1) == titles[name], (name, heading.group(1))
        cls = registry.get(name).Config
        assert f"`{cls.__module__}.{cls.__qualname__}`" in section, name
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    assert len(headings) == len(set(headings)), headings


@pytest.mark.parametrize("algo", list(registry.ALGOS))
def test_a_config_table_has_every_field_once_with_a_python_type(algo):
    tables = _tables()
    common, own = tables.config_rows("common"), tables.config_rows(algo)
    keywords = [row[0].split("<br>")[0].strip("`") for row in common + own]
    assert sorted(keywords) == sorted(f.name for f in dataclasses.fields(registry.get(algo).Config))
    choice = r'`"[^"`]*"`'
    readable = re.compile(rf"`(int|float|str|bool|tuple\[(int|str), \.\.\.\])`|{choice}( \| {choice})*")
    for row in common + own:
        assert readable.fullmatch(row[1]), row


def test_a_config_table_writes_types_and_defaults_as_python_does():
    tables = _tables()
    sac, common = tables.render_config("sac"), tables.render_config("common")
    assert "| `hidden_sizes`<br>`--hidden-sizes` | `tuple[int, ...]` | `(256, 256)` |" in sac
    assert "| `policy_lr`<br>`--policy-lr` | `float` | `3e-4` |" in sac
    assert '| `lr_schedule`<br>`--lr-schedule` | `"constant"` \\| `"linear"` \\| `"cosine"` | `"constant"` |' in sac
    assert "| `buffer_size`<br>`--buffer-size` | `int` | `1_000_000` |" in sac
    assert '| `run_dir`<br>`--run-dir` | `str` | `""` | run directory; empty means runs/&lt;env&gt;\\_\\_' in common
    assert "| `total_steps`<br>`--total-steps` | `int` | `1_000_000`<br>ppo: `500_000` |" in common
    assert "(0 = off)<br>dreamer_v2, dreamer_v3: deterministic evaluation every N agent steps" in common


def test_the_api_functions_document_what_they_return_as_one_value(caplog):
    griffe = pytest.importorskip("griffe")
    heron = griffe.load("heron", search_paths=[str(ROOT)], docstring_parser="google")
    with caplog.at_level(logging.WARNING, logger="griffe"):
        for name in ("api.train", "api.resume", "api.evaluate", "api.load", "accel.acting.Policy.predict"):
            sections = heron[name].docstring.parse("google")
            returns = [s.value for s in sections if s.kind.value == "returns"]
            assert len(returns) == 1 and len(returns[0]) == 1, (name, returns)
    assert not [r.message for r in caplog.records if r.name.startswith("griffe")]


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

    def text(fragment: str) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("\N{PILCROW SIGN}", "").strip()

    signatures = [text(s) for s in re.findall(r'<div class="doc-signature[^"]*">(.*?)</div>', api, re.S)]
    assert len(signatures) >= 4 and max(len(line) for s in signatures for line in s.splitlines()) <= 80, signatures
    returns = re.findall(r"Returns:</span></p>\s*<ul>(.*?)</ul>", api, re.S)
    assert len(returns) >= 4 and all(r.count("<li") == 1 for r in returns), returns
    headings = [text(h) for h in re.findall(r'<h[1-6] id="[^"]+"[^>]*>(.*?)</h[1-6]>', api, re.S)]
    assert len(headings) == len(set(headings)) and set(_nav_titles().values()) <= set(headings), headings


def test_the_readmes_links_and_images_point_at_files_of_the_repository():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) + re.findall(r'<img src="([^"]+)"', text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links no page of the docs"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
