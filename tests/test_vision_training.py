"""Multimodal GRPO + HDR: images go from ``agentsearch/Vision-v0`` through the rollout (a
tiny VLM on the HF backend), into replay groups (their pixels stored), and back into the
trainer's rescoring, the update and the replay scan."""

import pytest
import torch

from agentsearch.rollout import SamplingParams, rollout

KW = dict(turn_format="tags", chat_template="none", system_prompt="Answer. ", kinds=("bigger",),
          image_size=64)


@pytest.fixture(scope="module")
def vlm():
    from agentsearch.models.processor import ImageTextTokenizer
    from agentsearch.models.vlm import load_vlm

    torch.set_num_threads(1)
    model, processor = load_vlm("tiny-vlm", seed=0)
    return model, ImageTextTokenizer(processor)


def _episodes(vlm, n_tasks=2, n=3, tools=("crop",), max_turns=2):
    from agentsearch.envs.vision import VisionEnv
    from agentsearch.rollout.hf import HFBackend

    model, tok = vlm
    tasks = VisionEnv(split="dev", **KW).tasks[:n_tasks]
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=3)
    eps, _ = rollout(lambda: VisionEnv(split="dev", tools=tools, **KW), tasks,
                     HFBackend(model, tok), params, n_per_task=n, max_turns=max_turns,
                     max_seq_len=400)
    return eps


def test_rollout_with_images_is_token_exact_and_masks_image_tokens(vlm):
    from agentsearch.models.logprobs import token_logprobs
    from agentsearch.models.vlm import image_token_id, tokens_per_image

    model, tok = vlm
    eps = _episodes(vlm)
    iid, per = image_token_id(model), tokens_per_image(model)
    for ep in eps:
        ids = torch.tensor(ep.token_ids)
        mask = torch.tensor(ep.action_mask, dtype=torch.bool)
        images = ep.info["images"]
        assert int((ids == iid).sum()) == per * len(images) >= per   # one block per kept image
        # image tokens are env tokens
        assert not mask[ids == iid].any()
        # the sampled tokens' logprobs are the teacher-forced ones, images encoded
        lp = token_logprobs(model, ids[None], pixel_values=tok.pixel_values(images),
                            target_mask=mask[None])[0]
        gen = torch.tensor(ep.gen_logprobs)
        assert torch.allclose(lp[mask], gen[mask], atol=1e-4), float(
            (lp[mask] - gen[mask]).abs().max())


def test_replay_scores_of_a_multimodal_group_equal_at_ingress_and_on_replay(vlm):
    from agentsearch.algorithms.grouping import episodes_to_groups, rescore
    from agentsearch.models.logprobs import make_score_fn
    from agentsearch.replay import ReplayGroup, make_replay

    model, tok = vlm
    eps = _episodes(vlm, n_tasks=2, n=4)
    groups, _ = episodes_to_groups(eps, 4, step=0, pad_id=tok.pad_token_id,
                                   pixel_fn=tok.pixel_values)
    assert all(g.pixel_values is not None and len(g.pixel_values) == 4 for g in groups)
    score_fn = make_score_fn(model, max_batch_tokens=300)   # small batches: rows get reordered
    rescore(groups, score_fn)                                  # ingress: gen_logprobs := trainer's
    again = score_fn(groups)                                   # the replay scan, same weights
    for g, lp in zip(groups, again):
        assert torch.equal(lp[g.action_mask], g.gen_logprobs[g.action_mask])
    # the buffer's state keeps the pixels (a resumed run rescans the same inputs)
    buf = make_replay("hdr", capacity=8, k_rep=2, tau=1e-2)
    for g in groups:  # make the outcomes mixed so ingress keeps them
        g.answer_correct = torch.tensor([True, False, False, False])
    buf.add(groups, step=0)
    state = buf.state_dict()
    back = ReplayGroup.from_state_dict(state["groups"][0])
    assert all(torch.equal(a, b) for a, b in zip(back.pixel_values, groups[0].pixel_values))
    sel = buf.select(score_fn, step=1)
    assert sel.accepted and all(r == 0.0 for r in [sel.stats["replay/drift_accepted"]])


def test_a_text_model_on_an_image_env_is_a_clear_error():
    from agentsearch.envs.vision import VisionEnv
    from agentsearch.models import load_model
    from agentsearch.rollout.hf import HFBackend

    model, tok = load_model("tiny", seed=0)
    task = VisionEnv(split="dev", **KW).tasks[0]
    with pytest.raises(ValueError, match="text-only"):
        rollout(lambda: VisionEnv(split="dev", **KW), [task], HFBackend(model, tok),
                SamplingParams(8))


@pytest.mark.slow
def test_tiny_vision_trains_end_to_end_and_resumes_exactly(tmp_path):
    """Two steps, stop, resume to three: every step's metrics (all but wall-clock seconds) and the
    final weights equal those of an uninterrupted three-step run."""
    import json

    from safetensors.torch import load_file

    from agentsearch.cli.commands import train_main

    # both runs pretrain the same way
    over = ["sft.steps=5", "sft.episodes=40", "eval.limit=16", "eval.every=1", "prompts_per_step=4",
            "group_size=4", "checkpoint_every=1", "threads=1", "sft.pretrain_steps=3",
            "sft.pretrain_episodes=20", "sft.pretrain_cache=false"]
    ref, run = tmp_path / "ref", tmp_path / "run"

    def _seconds(key):  # wall-clock and memory measurements differ between any two runs
        return key.startswith(("time/", "sys/")) or key.endswith("_seconds")

    def rows(folder):
        return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]

    assert train_main(preset="tiny-vision", out=str(ref), overrides=over + ["steps=3"]) == 0
    assert train_main(preset="tiny-vision", out=str(run), overrides=over + ["steps=2"]) == 0
    warm = rows(run)[0]  # both warm-start stages ran, each on its own population
    assert (warm["sft/pretrain_steps"] == 3 and warm["sft/pretrain_episodes"] == 20
            and warm["sft/steps"] == 5)
    assert warm["sft/pretrain_crop_share"] + warm["sft/pretrain_guess_share"] == 1.0
    assert train_main(preset="tiny-vision", out=None, overrides=["steps=3"], resume=str(run)) == 0
    a, b = rows(ref), rows(run)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 1, 2, 3]
    for ra, rb in zip(a[1:], b[1:]):
        keys = sorted(k for k in ra if not _seconds(k))
        assert keys == sorted(k for k in rb if not _seconds(k)), ra["step"]
        assert ra["eval/questions"] == 16 and ra["replay/buffer_size"] >= 0 and "time/update" in rb
        for k in keys:
            assert rb[k] == pytest.approx(ra[k], abs=1e-6), (ra["step"], k)
    wa, wb = (load_file(ref / "final" / "model.safetensors"),
              load_file(run / "final" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_the_crop_population_zooms_into_the_named_quarter_then_answers(vlm):
    """The warm start's agents on ``quarter`` questions: ``crop`` asks for the quarter the
    question names and answers what the enlarged quarter shows (gold, checked by the env's
    reward); ``guess`` answers at once with one of the picture's colours."""
    from agentsearch.envs.tasks.vision_tasks import QUARTERS
    from agentsearch.envs.vision import VisionEnv
    from agentsearch.warmstart.vision_oracle import (
        crop_region,
        guess_answer,
        vision_oracle_episodes,
    )

    _, tok = vlm
    kw = dict(KW, kinds=("quarter",), image_size=128, tools=("crop",))
    env = VisionEnv(split="train", **kw)
    tasks = env.tasks[:12]
    crop = vision_oracle_episodes(lambda: env, tok, tasks, strategies={"crop": 1.0}, max_turns=2,
                                  max_seq_len=256)
    for task, ep in zip(tasks, crop):
        region = crop_region(task)
        assert region in QUARTERS and f"the {region} quarter" in task["question"]
        assert ep.info["strategy"] == "crop" and ep.info["tool_calls"] == 1 and ep.answer_correct
        assert (len(ep.info["images"]) == 2
                and f"<crop> {region} </crop>" in tok.decode(ep.token_ids))
    guess = vision_oracle_episodes(lambda: env, tok, tasks, strategies={"guess": 1.0}, max_turns=2,
                                   max_seq_len=256, seed=1)
    for task, ep in zip(tasks, guess):
        assert ep.info["tool_calls"] == 0 and len(ep.info["images"]) == 1
        assert ep.info["answer"] in {o["colour"] for o in task["spec"]["shapes"]}
    # right about a quarter of the time
    assert 0 < sum(ep.answer_correct for ep in guess) < len(tasks)
    assert guess_answer(tasks[0]) == guess_answer(tasks[0])  # without an rng: seeded by the task id
    json_env = VisionEnv(split="train", **dict(kw, turn_format="json", chat_template=None))
    (ep,) = vision_oracle_episodes(lambda: json_env, tok, tasks[:1], strategies={"crop": 1.0},
                                   max_turns=2, max_seq_len=1024, turn_format="json")
    assert ep.info["tool_calls"] == 1 and ep.info["tool_errors"] == 0 and ep.answer_correct
    with pytest.raises(ValueError, match="shares of"):
        vision_oracle_episodes(lambda: env, tok, tasks, strategies={"crop": 0.5, "peek": 0.5})
