"""Vector envs of heron's own: ``TorchPendulum``, Pendulum as a torch tensor env (``heron/TorchPendulum-v1``
for ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``)."""
