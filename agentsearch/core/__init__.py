"""Shared foundations that import nothing else of agentsearch: typed configs, registries, the
cache, progress."""
