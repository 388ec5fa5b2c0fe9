"""DreamerV2 (seed 003). Work in progress for issue 4: the losses are here and tested; the world
model, behaviour learning, episode replay and training loop are not yet, so the algorithm is not
in ``heron.registry`` yet."""
