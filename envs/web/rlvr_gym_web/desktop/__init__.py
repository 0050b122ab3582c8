"""Desktop-like apps written for rlvr_gym, served over file:// and driven through the GUI or their API."""
