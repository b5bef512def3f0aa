"""agentsearch: train LLM search agents with RL where every rollout counts."""
__version__ = "0.1.0"
