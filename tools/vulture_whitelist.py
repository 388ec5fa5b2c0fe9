"""Names vulture would report as unused that are used, by something it cannot see (.ci/run runs
``vulture heron tests benchmarks tools/vulture_whitelist.py`` and reports what it finds in heron/)."""

from types import SimpleNamespace

_ = SimpleNamespace()
# torch reads it: set on an optimizer, it silences the warning for the eager warm-up steps of a
# step recorded as a CUDA graph (heron.accel.graphs.capturable)
_._warned_capturable_if_run_uncaptured  # noqa: B018
# pybullet_envs reads it from the pkg_resources stand-in (heron.envs.pybullet)
_.parse_version  # noqa: B018
# torch prints it in a module's repr (heron.rl.batch_renorm.BatchRenorm)
_.extra_repr  # noqa: B018
