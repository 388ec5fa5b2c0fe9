"""The reinforcement-learning pieces the algorithms are made of: replay and rollout storage
(``buffers``), return estimators (``returns``), networks, normalizers and the tanh-Gaussian
(``nets``), learning-rate schedules (``schedules``).

Pure computation on tensors: it knows nothing of envs, runs or fast paths (``heron.ops`` below it is
all it imports)."""
