"""The update stage: the PPO-family policy update (:mod:`.ppo`), its pure losses (:mod:`.losses`) and the
scoring of continuations against shared prompts (:mod:`.scoring`)."""
