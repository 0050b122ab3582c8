"""rlvr_gym environment family: code (registers its ids when imported)."""
