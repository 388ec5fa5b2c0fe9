"""The docs held to the code: every ``heron ...`` command they quote parses with today's command line,
and wherever they list the algorithms they name every one ``heron list`` shows.

Nothing trains: a quoted command goes through the parsers of ``heron/cli.py`` and stops once its
arguments are read (``_reject_unknown``, the last step of every command's parsing)."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
import torch

from heron import api, bench, cli, config, registry
from heron.config import flag
from heron.errors import HeronError

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
# the files that describe heron in a line: where a list of the algorithms is most often written
DESCRIPTIONS = [ROOT / "mkdocs.yml", ROOT / "pyproject.toml", ROOT / "CITATION.cff"]
FENCE = re.compile(r"^\s*(```|~~~)")
NOT_SHELL = ("python", "py", "yaml", "yml", "toml", "json")  # code blocks that hold no command lines

# -- every quoted command parses ----------------------------------------------------------------------

# Placeholders the docs write for a value, and what stands in for them when a command is parsed: an
# algorithm for ALGO, a number for a flag's N, K or S (after --preset, S is DreamerV3's size preset).
# Other capitals (RUN_DIR, ENV_ID, FILE.yaml, SUITE, ...) are read as the strings they are.
STAND_INS = {"ALGO": "sac"}
NUMBERS = {"N": "1", "K": "1", "S": "1"}


class _Parsed(Exception):
    """A command has read its arguments; nothing after that runs."""


@pytest.fixture
def parse(monkeypatch):
    """``parse(argv)``: (heron's error or None, the flags the command knows, its parsed namespaces)
    for ``heron *argv``, read by the command's own parsers and stopped there."""
    state: dict = {}
    real_reject, real_parse = cli._reject_unknown, argparse.ArgumentParser.parse_known_args

    def reject(unknown, known, why=""):
        state["known"] = list(known)
        real_reject(unknown, known, why)
        raise _Parsed

    def recording(self, args=None, namespace=None):
        result = real_parse(self, args, namespace)
        state["parsed"].append((self, result[0]))
        return result

    def refuse(*args, **kwargs):
        raise AssertionError("checking the docs' commands ran one")

    monkeypatch.setattr(cli, "_reject_unknown", reject)
    monkeypatch.setattr(cli._Parser, "parse_known_args", recording)
    monkeypatch.setattr(api, "read_yaml", lambda path: {})  # --config FILE: the docs' files are not here
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the docs' GPU commands, on any machine
    real_device = config.check_device
    monkeypatch.setattr(config, "check_device", lambda name, option: real_device(re.sub(r":\d+$", "", name), option))
    for name in ("train", "resume", "evaluate"):
        monkeypatch.setattr(api, name, refuse)

    def run(argv: list[str]) -> tuple[str | None, list[str], list]:
        state.update(known=[], parsed=[])
        error = None
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                cli.COMMANDS[argv[0]](argv[1:])
            except _Parsed:
                pass
            except SystemExit as exc:  # --help
                error = None if exc.code in (0, None) else f"exit code {exc.code}"
            except HeronError as exc:
                error = str(exc)
        return error, state["known"], state["parsed"]

    return run


def _flags(parse) -> dict[tuple[str, str | None], set[str]]:
    """(command, algorithm or None for any) -> the flags it takes, without the removed ones: a removed
    flag still parses, to be refused with what to do instead, but the docs must not show it."""
    removed = {a: {f"--{flag(n)}" for n in getattr(registry.get(a).Config, "REMOVED", {})} for a in registry.ALGOS}
    out: dict[tuple[str, str | None], set[str]] = {}
    for algo in registry.ALGOS:
        config = registry.get(algo).Config
        parser = cli.config_parser(algo, config, config())
        out["train", algo] = {o for a in parser._actions for o in a.option_strings} - removed[algo]
        error, known, _ = parse(["tune", algo, "--trials", "1"])
        assert error is None, error
        out["tune", algo] = set(known) - removed[algo]
    for command in ("train", "tune"):
        out[command, None] = set().union(*(out[command, a] for a in registry.ALGOS))
    for command, argv in (
        ("train", ["--resume", "runs/x"]),
        ("eval", ["runs/x"]),
        ("check-env", ["CartPole-v1"]),
        ("plot", ["runs/x"]),
        ("bench", ["smoke"]),
        ("export", ["runs/x"]),
        ("list", ["x"]),  # refused: list takes no arguments
    ):
        error, known, _ = parse([command, *argv])
        assert error is None or command == "list", (command, error)
        out[command, "--resume" if argv[0] == "--resume" else None] = set(known)
    for key in out:
        if key[0] != "list":
            out[key] |= {"-h", "--help"}
    return out


def _snippets(path: Path):
    """(line, code, the line after it) of every place a page may quote a command: each line of a code
    block that is not Python or a config file (a line ending in a backslash joined to the next), and
    each inline code span, its line breaks read as spaces."""
    lines = path.read_text().splitlines()
    prose: list[str] = []
    fence: str | None = None  # the open block's language
    i = 0
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            fence = None if fence is not None else (line.strip().strip("`~").strip() or "text")
            prose.append("")
            i += 1
            continue
        if fence is None:
            prose.append(line)
            i += 1
            continue
        start = i
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        prose.extend([""] * (i + 1 - start))
        i += 1
        if not fence.lower().startswith(NOT_SHELL):
            yield start + 1, line.strip(), lines[i].strip() if i < len(lines) else ""
    text = "\n".join(prose)
    for m in re.finditer(r"(?<!`)`((?:[^`\n]|\n(?![ \t]*\n))+)`(?!`)", text):
        yield text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split()), ""


def _commands(code: str):
    """The argv after ``heron`` of each command in a line of shell (``a && b``, ``VAR=x heron ...``,
    ``python -m heron ...``, ``torchrun ... -m heron ...``; a ``#`` comment ends it)."""
    for segment in re.split(r"\s+\|\|?\s+|\s*&&\s*|;\s+", code):
        segment = re.sub(r"^\s*\$\s+", "", segment)  # a shell prompt
        try:
            words = shlex.split(segment, comments=True)
        except ValueError:  # an unbalanced quote: prose, or output
            words = segment.split()
        while words and re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0]):
            words.pop(0)
        if words and words[0] in ("python", "python3", "torchrun"):
            at = [i for i in range(len(words) - 1) if words[i : i + 2] == ["-m", "heron"]]
            words = words[at[0] + 1 :] if at else []
        if words and words[0] == "heron":
            yield words[1:]


def _check(parse, flags, argv: list[str]) -> str | None:
    """Why ``heron *argv`` as the docs write it does not parse today, or None. A synopsis (``[--flag N]``,
    ``a|b``) is held to its flags; a mention without arguments to its command; a quote that leaves out
    a required argument to the flags it names."""
    if not argv or argv[0] in ("-h", "--help"):
        return None
    command, words = argv[0], [w for w in argv[1:] if w not in ("...", "…")]
    if command not in cli.COMMANDS:
        return f"unknown command {command!r}"
    algo = None
    if command in ("train", "tune") and words and not words[0].startswith("-") and words[0] != "ALGO":
        algo = words[0]
        if algo not in registry.ALGOS:
            return f"unknown algorithm {algo!r}"
    if command == "train" and words and words[0].startswith("--resume"):
        algo = "--resume"
    if words and not any(re.search(r"[\[\]|]", w) for w in words):
        concrete = []
        for i, w in enumerate(words):
            prev = words[i - 1] if i else ""
            if w in STAND_INS and not prev.startswith("-"):
                w = STAND_INS[w]
            elif w in NUMBERS and prev.startswith("--") and prev != "--preset":
                w = NUMBERS[w]
            concrete.append(w)
        error, _, parsed = parse([command, *concrete])
        if error is not None and not re.search(r"arguments are required|expected one argument", error):
            return error  # (a quote that leaves out a value or a required argument is held to its flags)
        read = [vars(n) for p, n in parsed if p.prog == f"heron train {algo}"]  # none after --help
        if error is None and algo in registry.ALGOS and read:
            overrides = {k: v for k, v in read[-1].items() if k not in ("config", "preset")}
            try:  # the values too, as heron train reads them
                api.make_config(algo, read[-1].get("preset", []), None, **overrides)
            except HeronError as exc:
                return str(exc)
        if error is None and command == "bench":
            suite = next(n.suite for p, n in parsed if hasattr(n, "suite"))
            if suite and suite not in bench.SUITES and suite != "SUITE":
                return f"unknown suite {suite!r}"
    known = flags[command, algo]
    for w in words:
        name = w.strip("[]").split("=")[0]
        if name.startswith("-") and not re.fullmatch(r"-[\d.e-]+", name) and name not in known:
            return f"{name} is not a flag of heron {command}" + (f" {algo}" if algo and algo != "--resume" else "")
    return None


def _quoted(pages=PAGES):
    """(page, line, argv, the line after it) of every heron command the pages quote."""
    for page in pages:
        for line, code, after in _snippets(page):
            for argv in _commands(code):
                yield page, line, argv, after


def test_every_heron_command_the_docs_quote_parses_today(parse):
    flags = _flags(parse)
    problems, checked = [], 0
    for page, line, argv, after in _quoted():
        checked += 1
        where = f"{page.relative_to(ROOT)}:{line}: heron {' '.join(argv)}"
        error = _check(parse, flags, argv)
        if after.startswith("heron: error:"):  # an example of an error: where parsing finds it, as shown
            if error is not None and after != f"heron: error: {error}":
                problems.append(f"{where}: the page shows '{after}', heron says 'heron: error: {error}'")
        elif error is not None:
            problems.append(f"{where}: {error}")
    assert checked > 100, f"only {checked} commands found: the extraction missed the docs' code"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "quote",
    [
        "heron train sac --act-on-host",  # a removed flag: it parses, to be refused with advice
        "heron train sac --btach-size 3",
        "heron train sac --preset nope",
        "heron train ppo --num-minibatches 2.5",
        "heron trian sac",
        "heron train dreamer_v4",
        "heron eval RUN_DIR --episodes N --no-such-flag",
        "heron eval RUN_DIR [--episodes N] [--seeds S]",
        "heron train --resume runs/X --seed 4",
        "heron bench smok",
        "heron tune --jobs K --no-such-flag",
    ],
)
def test_a_command_heron_would_refuse_fails_the_check(parse, quote):
    argv = next(_commands(quote))
    assert _check(parse, _flags(parse), argv) is not None


def test_placeholders_synopses_and_mentions_pass_the_check(parse):
    flags = _flags(parse)
    for quote in (
        "heron train ALGO --help",
        "heron train --resume RUN_DIR [--total-steps N] [--torch-threads N] [--eval-async auto|on|off]",
        "heron bench --list | --report [--out DIR]",
        "heron tune --jobs K",
        "heron eval",
        "MUJOCO_GL=osmesa heron train dreamer_v3 --preset atari --preset M  # a comment",
        "torchrun --standalone --nproc-per-node 2 -m heron train --resume runs/...",
    ):
        assert _check(parse, flags, next(_commands(quote))) is None, quote


# -- wherever the docs list the algorithms, they list them all -----------------------------------------


def _names() -> dict[str, str]:
    """Each algorithm ``heron list`` shows -> the name the docs give it: the title of its page."""
    out = {}
    for algo in registry.ALGOS:
        page = ROOT / "docs" / "algorithms" / f"{algo}.md"
        assert page.exists(), f"heron list shows {algo}, which has no page {page.relative_to(ROOT)}"
        out[algo] = page.read_text().splitlines()[0].removeprefix("# ").strip()
    return out


def _passages(text: str):
    """(line, kind, text) of each passage that may list the algorithms: every sentence of a paragraph
    or list item and every heading and table row ("prose"), every table's first column ("column": its
    cells, a line each) and every code block ("block": the first word of each line, as in
    ``heron check-env``'s report, an algorithm a line)."""
    para: list[tuple[int, str]] = []
    column: list[tuple[int, str]] = []
    block: list[tuple[int, str]] = []
    fence = False

    def sentences():
        joined, starts = "", []
        for n, s in para:
            starts.append((len(joined), n))
            joined += s + " "
        para.clear()
        for m in re.finditer(r"\S.*?(?:[.!?](?=\s+[A-Z*`\[(])|$)", joined.strip()):
            yield max(n for at, n in starts if at <= m.start()), "prose", m.group(0)

    def first_column():
        if column:
            yield column[0][0], "column", "\n".join(c.strip() for _, c in column)
        column.clear()

    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if FENCE.match(line) or fence:
            yield from sentences()
            yield from first_column()
            if FENCE.match(line) and fence and block:
                yield block[0][0], "block", "\n".join(code.split()[0] for _, code in block if code)
                block.clear()
            elif fence:
                block.append((n, s))
            fence = fence != bool(FENCE.match(line))
            continue
        if s.startswith("|"):
            yield from sentences()
            yield n, "prose", s
            if not re.fullmatch(r"[\s|:-]+", s):
                column.append((n, s.strip("|").split("|")[0]))
            continue
        yield from first_column()
        if not s or s.startswith("#") or re.match(r"([-*+]|\d+\.)\s", s):
            yield from sentences()
        if s.startswith("#"):
            yield n, "prose", s
        elif s:
            para.append((n, s))
    yield from sentences()
    yield from first_column()


COUNTS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten".split())}


def _names_alone(item: str, patterns: dict[str, re.Pattern]) -> bool:
    """Whether ``item`` names algorithms and nothing else ("SAC, TD3", "[PPO](ppo.md)", "dreamer_v3")."""
    rest = item
    for pattern in patterns.values():
        rest = pattern.sub("", rest)
    return rest != item and not re.sub(r"\(.*?\)|\b(and|or)\b|[\s,`*/&\[\]]", "", rest)


def _stale_lists(text: str, names: dict[str, str]):
    """(line, why) for each passage of ``text`` that names all the algorithms but one (and at least
    three), and each "N algorithms" with N not their number. Display names (``DreamerV3``, the title
    of its page) and ids (``dreamer_v3``) both count."""
    needed = max(3, len(names) - 1)
    patterns = {
        algo: re.compile(rf"(?<![\w/.=-])(?:{re.escape(name)}|{re.escape(algo)})(?![\w-])")
        for algo, name in names.items()
    }
    for line, kind, passage in _passages(text):
        if kind != "prose":  # a table's first cells, a code block's first words: those that are names alone
            passage = " ".join(item for item in passage.splitlines() if _names_alone(item, patterns))
        found = {algo for algo, pattern in patterns.items() if pattern.search(passage)}
        if needed <= len(found) < len(names):
            missing = ", ".join(names[a] for a in names if a not in found)
            yield line, f"names {len(found)} of the {len(names)} algorithms, not {missing}: {passage}"
        for m in re.finditer(r"\b(\w+) algorithms\b", passage, re.IGNORECASE):
            count = COUNTS.get(m.group(1).lower(), int(m.group(1)) if m.group(1).isdigit() else None)
            if count is not None and count != len(names):
                yield line, f"'{m.group(0)}', but heron has {len(names)}: {passage}"


def test_wherever_the_docs_list_the_algorithms_they_name_every_one():
    names = _names()
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {why}"
        for path in PAGES + DESCRIPTIONS
        for line, why in _stale_lists(path.read_text(), names)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "text",
    [
        "Deep reinforcement learning in PyTorch: **SAC**, **TD3**, **PPO** and **DreamerV2**, complete,\ncorrect.",
        "site_description: Deep reinforcement learning in PyTorch - SAC, TD3, PPO and DreamerV2\n",
        "abstract: >-\n  SAC, TD3, PPO and DreamerV2 in PyTorch, with one command line\n  and one Python API.",
        "Train `sac`, `td3`, `ppo` or `dreamer_v2`.",
        "| algorithm | actions |\n|---|---|\n| SAC, TD3 | Box |\n| PPO | any |\n| DreamerV2 | Box |\n",
        "- **Four algorithms with every option.** Each as its authors describe it.",
        "```\n  algorithms\n    sac         yes\n    td3         yes\n    ppo         yes\n    dreamer_v2  yes\n```\n",
    ],
)
def test_the_algorithm_check_sees_a_list_that_leaves_one_out(text):
    assert list(_stale_lists(text, _names()))


def test_the_algorithm_check_leaves_a_subset_alone():
    text = "SAC, TD3 and PPO train on the state vectors; DreamerV2 and DreamerV3 also see pixels.\n\n" + (
        "The small networks of SAC, TD3 and PPO are launch-bound on a GPU. DreamerV2's are not.\n"
    )
    assert not list(_stale_lists(text, _names()))
