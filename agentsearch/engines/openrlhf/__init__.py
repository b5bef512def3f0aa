"""agentsearch on OpenRLHF (Ray + vLLM + DeepSpeed), for runs past one node.

Imported lazily and only with the ``openrlhf`` extra (OpenRLHF 0.11.2, ``compat.py``):

- ``executor`` / ``agent_func.py``: the agent executor OpenRLHF's rollout actors load
  (``--train.agent_func_path``); it plays any registered agentsearch env, token in, token out;
- ``hdr``: Headroom-Drift Replay (or any registered replay kind) as OpenRLHF's experience
  maker, sample generator and trainer;
- ``lora_sync``: LoRA weight sync to vLLM that works (merged weights under the base names);
- ``launch`` / ``entry``: ``agentsearch openrlhf launch`` builds and runs ``train_ppo_ray``;
- ``smoke``: ``agentsearch openrlhf smoke``, one CPU round of the real pieces.
"""
