"""The file OpenRLHF loads with ``--train.agent_func_path`` (it must define ``AgentExecutor``).

Pass this file's path, ``python -c "import agentsearch.engines.openrlhf.agent_func as m;
print(m.__file__)"``; ``agentsearch openrlhf launch`` does. See ``executor.py``.
"""

from agentsearch.engines.openrlhf.executor import AgentExecutor

__all__ = ["AgentExecutor"]
