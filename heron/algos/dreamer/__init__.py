"""What DreamerV2 and DreamerV3 share, each piece once. Each Dreamer's folder keeps what differs:
its layers and their initialisation, its losses, its options and its gradient step.

* ``config``: the env and replay options (``DreamerConfig``) and their checks;
* ``spaces``: the env stack and the spaces a saved agent rebuilds itself from;
* ``distributions``: the latents' straight-through sampling and the discrete actions' categorical;
* ``networks``: the recurrent cell, the encoder's and the decoder's shape, and the RSSM's filtering
  (``observe``) and imagination (``imagine``);
* ``losses``: the latents' KL, and the lambda-return targets of imagined trajectories with the
  steps the actor loss scores;
* ``policy``: the player that acts from an RSSM state, and the policy around it;
* ``loop``: the replay and the loop that collects experience and calls the gradient step.
"""
