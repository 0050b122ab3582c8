"""rlvr_gym environment family: tools (registers its ids when imported)."""
