"""rlvr_gym environment family: web (registers its ids when imported)."""
