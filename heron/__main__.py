from heron.cli import entry

raise SystemExit(entry())
