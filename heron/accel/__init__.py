"""The fast paths: how fast a step runs, never what it computes.

* ``step``: the step builder every algorithm calls (``build_step``): autograd, a hand-written step,
  ``torch.compile``, CUDA-graph recording, in one order, and the hand-written step's check against
  the readable one;
* ``acting``: how actors act (numpy twins, a recorded CUDA graph, acting ahead; ``Acting`` for
  training, ``Policy`` for evaluation and the Python API);
* ``handwritten``: the hand-written gradient steps and the derivatives they need;
* ``graphs``: CUDA graphs for gradient steps;
* ``precision``: ``--precision``, around the optimizer step.

The algorithms reach it through ``step`` and ``acting`` only."""
