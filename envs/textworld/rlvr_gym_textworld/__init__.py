"""rlvr_gym environment family: textworld (registers its ids when imported)."""
