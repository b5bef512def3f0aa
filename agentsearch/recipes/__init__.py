"""Recipes: what the CLI and scripts/ run (the demo, diagnose, the base build, experiment
runners)."""
