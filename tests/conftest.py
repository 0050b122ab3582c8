"""Shared pytest configuration: tiers are markers (see pyproject.toml)."""
