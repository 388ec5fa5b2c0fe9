#!/usr/bin/env python
"""The docs' option tables, rendered from the config dataclasses.

Every training flag is a field of a config dataclass with its default and a one-line help text
(``heron/config.py``, ``heron/algos/<algo>/config.py``); the CLI's ``--help`` is built from the same
fields. This script writes them into the pages between the markers

    <!-- options-table NAME -->
    ...
    <!-- /options-table -->

where NAME is ``common`` (the fields every algorithm has: environment, budget, device, cadences,
logging) or an algorithm (its own fields, those of ``RunConfig`` left out), and an algorithm's
presets (``heron/algos/<algo>/config.py``, ``PRESETS``) between

    <!-- presets-table ALGO -->
    ...
    <!-- /presets-table -->

and a ``heron bench`` suite's entries beside the published figures (``heron.bench``: ``SUITES``,
``PUBLISHED``) between

    <!-- suite-table SUITE -->
    ...
    <!-- /suite-table -->

and, for the API reference, the same fields as Python sees them (keyword and flag, type, default as
a Python value) between

    <!-- config-table NAME -->
    ...
    <!-- /config-table -->

where NAME is ``common`` or an algorithm, as for the options tables.

``--check`` changes nothing and exits 1 when a page's table is not what the code gives (the test
suite runs it).

    python tools/docs_tables.py            # rewrite the tables in docs/
    python tools/docs_tables.py --check    # are the docs current?
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from heron import registry  # noqa: E402
from heron.config import RunConfig, field_types, flag, type_name  # noqa: E402

BLOCK = re.compile(r"(<!-- options-table (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /options-table -->)", re.S)
PRESETS_BLOCK = re.compile(r"(<!-- presets-table (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /presets-table -->)", re.S)
SUITE_BLOCK = re.compile(r"(<!-- suite-table (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /suite-table -->)", re.S)
CONFIG_BLOCK = re.compile(r"(<!-- config-table (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /config-table -->)", re.S)


def shown(value) -> str:
    """A default as a user types it on the command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return " ".join(map(str, value)) if value else "(none)"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, float) and value != 0 and abs(value) < 1e-2:  # 3e-4, not 0.0003
        mantissa, exponent = f"{value:.6e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return repr(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _values(f: dataclasses.Field, kind) -> str:
    choices = f.metadata.get("choices")
    if choices:
        return " | ".join(f"`{c}`" for c in choices)
    return {
        "true/false": "`true` | `false`",
        "an integer": "integer",
        "a number": "number",
        "a string": "text",
        "a list of integers": "integers",
        "a list of strings": "texts",
    }[type_name(kind)]


def common_rows() -> list[tuple[str, str, str, str]]:
    """(flag, values, default, meaning) of RunConfig's fields; where an algorithm's own default
    differs from the shared one, the cell names each algorithm's."""
    types = field_types(RunConfig)
    algos = {name: registry.get(name) for name in registry.ALGOS}
    rows = []
    for f in dataclasses.fields(RunConfig):
        defaults = {name: getattr(module.Config(), f.name) for name, module in algos.items()}
        if len(set(map(shown, defaults.values()))) == 1:
            default = f"`{shown(next(iter(defaults.values())))}`"
        else:
            default = "<br>".join(f"{name}: `{shown(v)}`" for name, v in defaults.items())
        rows.append((f"`--{flag(f.name)}`", _values(f, types[f.name]), default, f.metadata.get("help", "")))
    return rows


def algo_rows(algo: str) -> list[tuple[str, str, str, str]]:
    cls = registry.get(algo).Config
    types = field_types(cls)
    shared = {f.name for f in dataclasses.fields(RunConfig)}
    cfg = cls()
    return [
        (
            f"`--{flag(f.name)}`",
            _values(f, types[f.name]),
            f"`{shown(getattr(cfg, f.name))}`",
            f.metadata.get("help", ""),
        )
        for f in dataclasses.fields(cls)
        if f.name not in shared
    ]


def render(name: str) -> str:
    if name == "common":
        rows = common_rows()
    elif name in registry.ALGOS:
        rows = algo_rows(name)
    else:
        raise SystemExit(f"unknown options table {name!r}: common or one of {', '.join(registry.ALGOS)}")
    lines = ["| flag | values | default | meaning |", "|---|---|---|---|"]
    lines += [f"| {a} | {_cell(b)} | {c} | {_text(d)} |" for a, b, c, d in rows]
    return "\n".join(lines) + "\n"


def py_value(value) -> str:
    """A default as Python writes it: a keyword of ``heron.train``, a value of a config file."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float) and value != 0 and abs(value) < 1e-2:  # 3e-4, not 0.0003
        return shown(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        return "(" + ", ".join(map(py_value, value)) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def py_type(f: dataclasses.Field, kind) -> str:
    """A field's type as Python spells it (``int``, ``tuple[int, ...]``), or its allowed values."""
    choices = f.metadata.get("choices")
    if choices:
        return " | ".join(f"`{py_value(c)}`" for c in choices)
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"`tuple[{args[0].__name__}, ...]`"
        return f"`tuple[{', '.join(a.__name__ for a in args)}]`"
    return f"`{getattr(kind, '__name__', kind)}`"


def _text(text: str) -> str:
    """Help text as literal Markdown: ``runs/<env>__<algo>`` is neither an HTML tag nor bold."""
    for char in "\\`*_[]":
        text = text.replace(char, "\\" + char)
    return _cell(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def _by_algo(values: dict[str, str], base: str) -> str:
    """``values`` (algorithm -> cell text) in one cell: ``base`` first and unlabelled, when some
    algorithm has it, then each other text after the names of the algorithms that have it."""
    groups: dict[str, list[str]] = {base: []}
    for algo, value in values.items():
        groups.setdefault(value, []).append(algo)
    return "<br>".join(
        value if value == base else f"{', '.join(algos)}: {value}" for value, algos in groups.items() if algos
    )


def config_rows(name: str) -> list[tuple[str, str, str, str]]:
    """(keyword and flag, type, default, meaning) of ``common`` (RunConfig's fields) or of an
    algorithm's own fields. Where an algorithm gives a common field another default or another help
    text, the cell adds that algorithm's, after RunConfig's."""
    if name == "common":
        cls: type = RunConfig
        classes = {algo: registry.get(algo).Config for algo in registry.ALGOS}
        fields = list(dataclasses.fields(RunConfig))
    elif name in registry.ALGOS:
        cls = registry.get(name).Config
        classes = {name: cls}
        shared = {f.name for f in dataclasses.fields(RunConfig)}
        fields = [f for f in dataclasses.fields(cls) if f.name not in shared]
    else:
        raise SystemExit(f"unknown config table {name!r}: common or one of {', '.join(registry.ALGOS)}")
    types = field_types(cls)
    configs = {algo: c() for algo, c in classes.items()}
    own = {algo: {g.name: g for g in dataclasses.fields(c)} for algo, c in classes.items()}
    rows = []
    for f in fields:
        helps = {algo: _text(own[algo][f.name].metadata.get("help", "")) for algo in classes}
        defaults = {algo: f"`{py_value(getattr(cfg, f.name))}`" for algo, cfg in configs.items()}
        rows.append(
            (
                f"`{f.name}`<br>`--{flag(f.name)}`",
                py_type(f, types[f.name]),
                _by_algo(defaults, f"`{py_value(f.default)}`"),
                _by_algo(helps, _text(f.metadata.get("help", ""))),
            )
        )
    return rows


def render_config(name: str) -> str:
    lines = ["| keyword / flag | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| {a} | {_cell(b)} | {c} | {d} |" for a, b, c, d in config_rows(name)]
    return "\n".join(lines) + "\n"


def render_presets(algo: str) -> str:
    """An algorithm's presets: every field each one sets, with its value as a flag takes it."""
    if algo not in registry.ALGOS:
        raise SystemExit(f"unknown presets table {algo!r}: one of {', '.join(registry.ALGOS)}")
    lines = ["| preset | sets |", "|---|---|"]
    for name, values in registry.get(algo).PRESETS.items():
        sets = ", ".join(f"`--{flag(k)} {shown(v)}`" for k, v in values.items())
        lines.append(f"| `{name}` | {sets} |")
    return "\n".join(lines) + "\n"


def render_suite(suite: str) -> str:
    """A bench suite's entries: env, presets, budget and the published figures beside them."""
    from heron.bench import PUBLISHED, SUITES

    if suite not in SUITES:
        raise SystemExit(f"unknown suite table {suite!r}: one of {', '.join(SUITES)}")
    lines = ["| env | presets | env steps | published |", "|---|---|---:|---|"]
    for e in SUITES[suite]:
        published = "; ".join(f"{fig} ({src})" for src, fig in PUBLISHED.get((e.algo, e.env_id), [])) or "-"
        lines.append(f"| {e.env_id} | {' '.join(f'`{p}`' for p in e.presets)} | {e.total_steps:,} | {published} |")
    return "\n".join(lines) + "\n"


def update_docs(check: bool, docs: Path = ROOT / "docs") -> list[str]:
    """Rewrite (or, with ``check``, compare) every options table under ``docs``; returns the pages
    whose tables were out of date."""
    stale = []
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text()
        new = BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)
        new = PRESETS_BLOCK.sub(lambda m: m.group(1) + render_presets(m.group("name")) + m.group(4), new)
        new = SUITE_BLOCK.sub(lambda m: m.group(1) + render_suite(m.group("name")) + m.group(4), new)
        new = CONFIG_BLOCK.sub(lambda m: m.group(1) + render_config(m.group("name")) + m.group(4), new)
        if new != text:
            stale.append(str(page.relative_to(ROOT)))
            if not check:
                page.write_text(new)
    return stale


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is out of date")
    args = p.parse_args(argv)
    stale = update_docs(args.check)
    for page in stale:
        print(
            f"{page}: a generated table {'is out of date' if args.check else 'rewritten'}",
            file=sys.stderr if args.check else sys.stdout,
        )
    if args.check and stale:
        print("run: python tools/docs_tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
