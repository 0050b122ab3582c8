"""rlvr_gym environment family: rtl (registers its ids when imported)."""
