"""Run rlvr_gym envs inside other trainers: TRL, SkyRL, verl.

- :mod:`rlvr_gym.adapters.tokens`: the host-neutral part: one multi-turn episode at the token level
  (token-in/token-out: the generated ids are kept as they came, observation ids are appended between turns
  and masked out), given a ``generate(prompt_ids) -> (ids, logprobs)`` function and a tokenizer.
- :mod:`rlvr_gym.adapters.trl`: a ``rollout_func`` for TRL's ``GRPOTrainer`` plus its dataset and reward
  function.
- :mod:`rlvr_gym.adapters.skyrl`: a SkyRL-gym ``BaseTextEnv`` registered in SkyRL-gym's registry.
- :mod:`rlvr_gym.adapters.verl`: an agent loop for verl's ``AgentLoopBase`` (``@register("rlvr_gym")``).

Each host library is imported only by its own module; nothing here imports torch at import time.
"""
