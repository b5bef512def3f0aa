"""A saved model reproduces its own evaluation: the same weights score the same after a save
and reload (in ``agentsearch eval --run`` and as ``init_from``), with the run's eval settings.

The bug this guards against: transformers 5 reloaded a saved tiny model's tokenizer as
``Qwen2Tokenizer`` (picked from config.json's model_type), whose pre-tokenizer splits text
differently from the shipped BPE; the reloaded model then read unfamiliar token sequences and
lost 6-10 points of dev EM."""

import json
from pathlib import Path

import pytest

from agentsearch.core.config import apply_overrides
from agentsearch.models import load_model, load_tokenizer
from agentsearch.trainer.checkpoint import save_final
from agentsearch.trainer.train_config import TrainConfig

TEXTS = ["Search, then answer. Question: In what year was Ky Stethith born?\n",
         '\n\n<information>Doc 1(Title: "Ky Stethith") Ky Stethith (born 1887) is a '
         'painter.</information>\n\n',
         " <search> Biagam Company </search>", "Doc 1 's , . 12,000 <answer> 7 </answer>"]


def test_a_saved_tokenizer_tokenises_exactly_like_the_original(tmp_path):
    model, tok = load_model("tiny-s", seed=0)
    save_final(model, tok, tmp_path)
    again = load_tokenizer(str(tmp_path))
    for text in TEXTS:
        assert again.encode(text) == tok.encode(text), text
        assert again.decode(tok.encode(text)) == text
    assert (again.eos_token, again.pad_token, again.chat_template) == (tok.eos_token, tok.pad_token,
                                                                       tok.chat_template)


SMALL = ["steps=0", "threads=1", "tensorboard=false", "eval.limit=40", "prompts_per_step=1",
         "group_size=2"]


def _eval_cli(capsys, *args) -> dict:
    from agentsearch.cli import main

    capsys.readouterr()
    assert main(["eval", *args]) == 0
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


@pytest.mark.slow
@pytest.mark.parametrize("settings", [["eval.temperature=0"], ["eval.temperature=0.7", "eval.n=2"]])
def test_eval_of_the_model_in_memory_equals_eval_after_save_and_reload(tmp_path, capsys, settings):
    from agentsearch.trainer.loop import train

    run = tmp_path / "run"
    # evals in memory
    train(apply_overrides(TrainConfig, "tiny", SMALL + settings), run, quiet=True)
    in_memory = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert in_memory["eval/questions"] == 40 and in_memory["eval/mean_at_n"] > 0.1
    reloaded = _eval_cli(capsys, "--run", str(run))  # the run's own eval settings, saved weights
    for key in ("eval/mean_at_n", "eval/best_at_n", "eval/n", "eval/bridge/mean_at_n",
                "eval/searches"):
        assert reloaded[key] == in_memory[key], key
    # and as the starting point of another run
    again = tmp_path / "again"
    train(apply_overrides(TrainConfig, "tiny", SMALL + settings + [f"init_from={run / 'final'}"]),
          again, quiet=True)
    step0 = json.loads((again / "metrics.jsonl").read_text().splitlines()[0])
    assert step0["eval/mean_at_n"] == in_memory["eval/mean_at_n"]
    assert Path(run / "samples" / "step-0.txt").read_text().count("=== ") >= 2


def test_a_saved_fp16_adapter_reloads_as_the_policy_it_was_saved_from(tmp_path, capsys):
    """``save_final`` leaves a LoRA run's adapter alone in fp16 beside ``final``; as
    ``init_from`` (and what ``agentsearch eval --run`` loads when ``final`` is gone: a record
    kept without the merged weights) it gives the trained policy's logits, to fp16 rounding."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from agentsearch.core.config import dump
    from agentsearch.trainer.setup import build_policy

    cfg = apply_overrides(TrainConfig, "tiny", SMALL + ["lora.enabled=true", "lora.r=4"])
    model, tok = build_policy(cfg)
    with torch.no_grad():  # a trained adapter: B is zero at init, which would prove nothing
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    ids = torch.tensor([tok.encode(TEXTS[0] + TEXTS[1])])
    want = model(ids).logits
    run = tmp_path / "run"
    save_final(model, tok, run / "final")
    adapter = run / "adapter"
    assert sorted(p.name for p in adapter.iterdir()) == ["adapter_config.json",
                                                        "adapter_model.safetensors"]
    weights = load_file(str(adapter / "adapter_model.safetensors"))
    assert weights and {w.dtype for w in weights.values()} == {torch.float16}
    again, _ = build_policy(apply_overrides(TrainConfig, "tiny", SMALL + [f"init_from={adapter}"]))
    got = again(ids).logits
    assert torch.allclose(got, want, atol=2e-2), (got - want).abs().max()
    assert not torch.allclose(got, load_model("tiny", seed=0)[0](ids).logits, atol=2e-2)
    # a kept record: config.yaml and adapter/ only
    dump(cfg, run / "config.yaml")
    shutil.rmtree(run / "final")
    assert _eval_cli(capsys, "--run", str(run), "--limit", "4")["eval/questions"] == 4


def test_a_chunked_greedy_eval_equals_the_eval_of_all_at_once():
    """``eval.chunk``: the episodes played a chunk at a time (every turn of a chunk before the
    next) score exactly as all at once when greedy; progress counts over the whole eval."""
    from agentsearch.models import load_model as load
    from agentsearch.rollout.hf import HFBackend
    from agentsearch.trainer.eval import eval_envs, eval_settings, evaluate

    cfg = apply_overrides(TrainConfig, "tiny", ["eval.limit=20", "threads=1"])
    model, tok = load("tiny-base")
    envs, tasks = eval_envs(cfg)
    whole = evaluate(HFBackend(model, tok), envs, tasks, **eval_settings(cfg))
    seen = []
    chunked = evaluate(HFBackend(model, tok), envs, tasks, **{**eval_settings(cfg), "chunk": 7},
                       on_turn=lambda turn, done, total: seen.append((done, total)))
    assert chunked == whole and whole["eval/questions"] == 20
    assert {t for _, t in seen} == {20} and max(d for d, _ in seen) == 20
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # never counts back


def test_a_saved_adapter_as_init_from_under_lora_trains_on_as_itself(tmp_path):
    """``init_from=ADAPTER`` with ``lora.enabled=true`` (RL from a kept warm start): the saved
    adapter is the one that trains (fp32, trainable), so the adapter saved at the end holds
    the warm start's steps and RL's; one of another shape is refused with a way out."""
    import torch

    from agentsearch.core.config import ConfigError
    from agentsearch.models.lora import save_adapter
    from agentsearch.trainer.setup import build_policy

    lora = SMALL + ["lora.enabled=true", "lora.r=4"]
    model, _ = build_policy(apply_overrides(TrainConfig, "tiny", lora))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    save_adapter(model, tmp_path / "warm")
    warm = [f"init_from={tmp_path / 'warm'}"]
    again, _ = build_policy(apply_overrides(TrainConfig, "tiny", lora + warm))
    want = {n: p for n, p in model.named_parameters() if p.requires_grad}
    got = {n: p for n, p in again.named_parameters() if p.requires_grad}
    assert sorted(got) == sorted(want) and all(p.dtype == torch.float32 for p in got.values())
    assert all(torch.allclose(got[n], want[n].half().float()) for n in want)
    with pytest.raises(ConfigError, match="lora.enabled=false"):
        build_policy(apply_overrides(TrainConfig, "tiny", SMALL + [
            "lora.enabled=true", "lora.r=8", f"init_from={tmp_path / 'warm'}"]))
