"""Pure training algorithms: losses, GRPO advantages, episodes to groups, the update, the
optimizer."""
