# The two commands of the README.
.PHONY: quickstart test setup

setup:
	bash .ci/setup

quickstart: setup
	.venv/bin/rlvr-gym train agents/recipes/quickstart.yaml

test: setup
	.venv/bin/python -m pytest -q
