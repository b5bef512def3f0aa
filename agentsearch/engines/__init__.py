"""Engines beyond one process: OpenRLHF (Ray + vLLM + DeepSpeed) for multi-GPU and multi-node
runs. Each engine is imported lazily, behind its extra (``pip install agentsearch[openrlhf]``)."""
