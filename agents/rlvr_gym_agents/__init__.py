"""The learning side of rlvr_gym: policies, rollouts, credit assignment, losses and the trainer."""
