"""Environments as the algorithms see them.

* ``ids``: which env an id names, users' own envs, and whether this machine can make it;
* ``make``: ``make_env``, the vector env ``VecEnv`` with exact resume, the space checks;
* ``step``: what one vector step returns (``Step``), and how an env's failure surfaces;
* ``native``: vector envs that step their sub-envs themselves (``--vector-mode native``);
* ``user_vector``: a user's own vector env;
* ``atari``, ``dmc``, ``pybullet``, ``envpool``: the families' adapters;
* ``torch_pendulum``: Pendulum as a torch tensor vector env (``heron/TorchPendulum-v1``);
* ``dreamer``: the Dreamers' env stack (pixels and vectors as a Dict, action repeat).

It imports nothing of the run, the fast paths or the algorithms."""
