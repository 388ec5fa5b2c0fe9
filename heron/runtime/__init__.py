"""The run around an algorithm: its lifecycle (``run``), its directory and lock (``rundir``), process
setup (``setup``, ``process``, ``cores``, ``memory``), logging (``logger``), checkpoints
(``checkpoint``), evaluations in the process or a worker (``evaluation``, ``evalworker``,
``episodes``) and faults (``faults``).

An algorithm's ``train(cfg, run)`` is handed a ``Run``; nothing here imports an algorithm (the
evaluation worker imports one by name)."""
