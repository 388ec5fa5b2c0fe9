"""Gradient steps written out by hand, with the derivatives of the losses they mirror.

Each module is a fast path of one algorithm's readable step (``make_update`` in its ``train.py``):
it computes every value with that algorithm's ``losses.py`` and its networks' pieces, and every
derivative with a ``*_grad`` here. ``heron.accel.step.build_step`` chooses one only after checking,
at the run's start, that it computes what the readable step computes."""
