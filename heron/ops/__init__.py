"""The operations every layer above computes with, and nothing that decides how a run goes.

* ``fused``: MLPs whose forward and backward are one autograd node each, and their kernels;
* ``adam``: torch's fused Adam with a lean step;
* ``dist``: the data-parallel collectives (torch.distributed);
* ``rng``: random generators' states for checkpoints;
* ``capture``: whether a CUDA graph is being recorded;
* ``torch_private``: every private torch API heron uses.

It imports nothing from heron but ``heron.errors``."""
