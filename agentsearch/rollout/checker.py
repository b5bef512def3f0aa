"""``agentsearch check-env [IDS...]``: Gymnasium's ``check_env`` plus agentsearch's own checks.

For every id (default: every registered ``agentsearch/*`` id), both turn formats and the
env's ``check_variants`` (e.g. Math with its calculator and python tools):

1. ``gymnasium.utils.env_checker.check_env`` on the unwrapped env (spaces, seeding,
   step determinism, data not shared between calls, render, close);
2. the rollout contract (``agentsearch.rollout.contract.check_rollout_contract``): the
   members, observations, rewards and info keys ``rollout`` relies on (``RolloutEnv``),
   on a malformed turn, each tool's simple call, the golden answer and truncation;
3-7. the env contract checks of ``check_text_env`` (seeded resets, ``options={"task": row}``,
   a correct answer, a malformed turn, reward components, truncation after ``max_turns``);
8. a scripted rollout through the real tokenizer (``check_rollout_masks``): the action
   mask is 1 exactly on the policy's tokens, whose text is the policy's text, and the
   0-runs decode to exactly the prompt and the observations; generation logprobs are 0
   where the mask is 0.
9. with ``--fuzz N``: N seeded adversarial actions (``agentsearch.envs.fuzz.fuzz_env``), every
   step checked (no exception, an error observation for every malformed turn, ...);

It is the only env checker, and it lives here, not in ``agentsearch.envs``, because checks 2
and 8 use a rollout: the rollout layer imports envs, never the other way round.

Each failure says what broke; the exit status is the number of failed ids (0 = all passed).
"""

from __future__ import annotations

import traceback
import warnings

from agentsearch.envs.fuzz import fuzz_env
from agentsearch.envs.text_env import observation_text
from agentsearch.rollout.backends import SamplingParams, ScriptedBackend
from agentsearch.rollout.contract import (
    RolloutContractError,
    answer_action,
    check_rollout_contract,
    probe_action,
)
from agentsearch.rollout.episodes import rollout

__all__ = ["check_text_env", "check_rollout_masks", "main"]


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def check_text_env(env) -> list[str]:
    """Our contract checks on one env instance; returns the names of the checks passed."""
    passed = []
    cfg = env.config
    o1, i1 = env.reset(seed=7)
    o2, i2 = env.reset(seed=7)
    _check(o1 == o2 and i1 == i2, "reset(seed=7) twice gave different prompts/infos: sample "
                                  "tasks with self.np_random after super().reset(seed=seed)")
    task = dict(env.tasks[0])
    obs, info = env.reset(options={"task": task})
    _check(info["question"] == task["question"],
           "reset(options={'task': row}) did not use that row")
    _check(isinstance(info.get("golden_answers"), list), "info['golden_answers'] must be a list")
    passed.append("reset")

    def step(action):
        out = env.step(action)
        _, reward, _, _, inf = out
        comps = {k: v for k, v in inf.items() if k.startswith("reward/")}
        _check({"reward/answer", "reward/format"} <= set(comps),
               f"missing reward components: {comps}")
        _check(abs(reward - sum(comps.values())) < 1e-9, f"reward {reward} != sum of {comps}")
        for key in ("answer_correct", "tool", "tool_latency_s", "error"):
            _check(key in inf, f"step info lacks {key!r}")
        return out

    env.reset(options={"task": task})
    for name in env.tools:
        obs, _, term, trunc, inf = step(probe_action(env, name))
        _check(obs and not term and not trunc and inf["tool"] == name,
               f"a well-formed {name} call did not return an observation: {inf}")
        _check(not inf["tool_error"], f"{name} failed on a simple call: {inf['error']}")
    passed.append("tool-calls")

    env.reset(options={"task": task})
    obs, reward, term, trunc, inf = step("<answer unclosed")
    _check(obs != "" and inf["error"] and inf["malformed"],
           "a malformed turn must get an error observation")
    _check(inf["reward/format"] == -cfg.format_penalty and not term,
           f"a malformed turn must cost format_penalty and continue: {inf}")
    passed.append("malformed")

    env.reset(options={"task": task})
    obs, reward, term, trunc, inf = step(answer_action(env, str(task["golden_answers"][0])))
    _check(term and not trunc and inf["answer_correct"] is True and inf["reward/answer"] == 1.0,
           f"the golden answer did not score: terminated={term} info={inf}")
    passed.append("correct-answer")

    env.reset(options={"task": task})
    for _ in range(cfg.max_turns):
        obs, reward, term, trunc, inf = step("no action here")
    _check(trunc and not term and inf["answer_correct"] is False,
           f"{cfg.max_turns} malformed turns must truncate (not terminate) the episode")
    passed.append("truncation")
    return passed


def check_rollout_masks(env_factory, tokenizer=None) -> None:
    """Scripted rollout: masks and token text agree with the policy and env text exactly."""
    if tokenizer is None:
        from agentsearch.models.text import load_tokenizer

        tokenizer = load_tokenizer("tiny")
    env = env_factory()
    task = dict(env.tasks[0])
    env.reset(options={"task": task})
    turns = [probe_action(env, n) for n in env.tools] + ["not an action"]
    turns.append(answer_action(env, str(task["golden_answers"][0])))
    policy_texts, env_texts = [], []

    def policy(conversation: str) -> str:
        text = turns[len(policy_texts)]
        policy_texts.append(text)
        return text

    def recording_factory():
        e = env_factory()
        real_reset, real_astep = e.reset, e.astep

        def reset(**kw):
            obs, info = real_reset(**kw)
            env_texts.append(observation_text(obs))
            return obs, info

        async def astep(action):
            out = await real_astep(action)
            if not (out[2] or out[3]):
                env_texts.append(observation_text(out[0]))
            return out

        e.reset, e.astep = reset, astep
        return e

    backend = ScriptedBackend(tokenizer, policy)
    episodes, _ = rollout(recording_factory, [task], backend, SamplingParams(max_new_tokens=4096))
    ep = episodes[0]
    _check(len(ep.token_ids) == len(ep.action_mask) == len(ep.gen_logprobs), "length mismatch")
    _check(all(lp == 0.0 for lp, m in zip(ep.gen_logprobs, ep.action_mask) if m == 0),
           "gen_logprobs must be 0.0 where action_mask is 0")
    runs: list[tuple[int, list[int]]] = []
    for t, m in zip(ep.token_ids, ep.action_mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(t)
        else:
            runs.append((m, [t]))
    env_runs = [tokenizer.decode(ids, skip_special_tokens=False) for m, ids in runs if m == 0]
    pol_runs = [tokenizer.decode(ids, skip_special_tokens=False) for m, ids in runs if m == 1]
    _check(env_runs == [t for t in env_texts if t], f"mask-0 text != prompt + observations:\n"
                                                    f"{env_runs!r}\n{env_texts!r}")
    _check(pol_runs == policy_texts, f"mask-1 text != policy text:\n{pol_runs!r}\n{policy_texts!r}")
    _check(ep.terminated and ep.answer_correct, f"the scripted episode did not succeed: {ep.info}")


def main(a) -> int:
    import gymnasium
    from gymnasium.utils.env_checker import check_env

    import agentsearch.envs  # noqa: F401 - registers the ids

    ids = list(getattr(a, "ids", None)
               or [i for i in gymnasium.registry if i.startswith("agentsearch/")])
    failed = 0
    for env_id in ids:
        if env_id not in gymnasium.registry:
            print(f"FAIL {env_id}: not registered (known: "
                  f"{sorted(i for i in gymnasium.registry if i.startswith('agentsearch/'))})")
            failed += 1
            continue
        ok = True
        variants = getattr(gymnasium.spec(env_id).make().unwrapped, "check_variants", ({},))
        for fmt in ("tags", "json"):
            for variant in variants:
                kw = {"turn_format": fmt, **variant}
                label = ", ".join(f"{k}={v}" for k, v in kw.items())
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        env = gymnasium.make(env_id, **kw)
                        check_env(env.unwrapped)
                        env.close()
                    notes = sorted({str(w.message).strip() for w in caught
                                    if "gymnasium" in str(w.filename) or "WARN" in str(w.message)})
                    problems = check_rollout_contract(gymnasium.make(env_id, **kw).unwrapped)
                    if problems:
                        raise RolloutContractError("the rollout contract is broken:\n- "
                                                   + "\n- ".join(problems))
                    passed = check_text_env(gymnasium.make(env_id, **kw).unwrapped)
                    check_rollout_masks(lambda i=env_id, k=kw: gymnasium.make(i, **k).unwrapped)
                    print(f"ok   {env_id} [{label}]: check_env, rollout-contract, "
                          f"{', '.join(passed)}, rollout-masks")
                    if getattr(a, "fuzz", 0):
                        report = fuzz_env(gymnasium.make(env_id, **kw).unwrapped, a.fuzz,
                                          seed=0)
                        print(f"     fuzz: {report.as_dict()}")
                        if report.failures:
                            raise AssertionError("fuzzing broke the env:\n- "
                                                 + "\n- ".join(report.failures))
                    for n in notes:
                        print(f"     warning: {n}")
                except Exception as e:  # noqa: BLE001 - report every env, then fail
                    ok = False
                    print(f"FAIL {env_id} [{label}]: {type(e).__name__}: {e}")
                    print(traceback.format_exc(limit=3))
        failed += not ok
    return failed
