# The README's commands. `make quickstart` is the main job; `make test` the default test tier.
.PHONY: quickstart test test-browser test-slow lint setup

setup:
	bash .ci/setup

quickstart: setup
	.venv/bin/rlvr-gym train agents/recipes/quickstart.yaml

test: setup
	.venv/bin/python -m pytest -q

# Real Chromium through Playwright (installed by .ci/setup): web envs, the Ray pool with browsers.
test-browser: setup
	.venv/bin/python -m pytest -q -m "browser and not slow"

# Minutes-long runs: full suites, 200-episode leak test, the whole quickstart.
test-slow: setup
	.venv/bin/python -m pytest -q -m "slow and not gpu and not docker"

# Style and types (ruff, mypy over every package).
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy rlvr_gym agents/rlvr_gym_agents $(filter-out %.egg-info,$(wildcard envs/*/rlvr_gym_*))
