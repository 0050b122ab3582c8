"""Berkeley Function Calling Leaderboard tasks (data and back-ends from the ``bfcl-eval`` wheel, Apache-2.0)."""
