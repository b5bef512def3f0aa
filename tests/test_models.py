import pytest
import torch

from agentsearch.data import read_jsonl
from agentsearch.models import MODEL_SIZES, load_model, load_tokenizer


def test_tokenizer_round_trips_the_corpus(world_path):
    tok = load_tokenizer("tiny")
    texts = [r["contents"] for r in read_jsonl(world_path / "corpus.jsonl")]
    texts += [q["question"] for q in read_jsonl(world_path / "dev.jsonl")]
    texts += ["<search>Ky Stethith</search>", "ünïcödé ✓ 你好", "\n\n\t  x", ""]
    enc = tok(texts, add_special_tokens=False)["input_ids"]
    for t, ids in zip(texts, enc):
        assert tok.decode(ids) == t
    # compact on world text: the BPE was trained on it
    n_chars = sum(len(t) for t in texts[:500])
    n_tokens = sum(len(ids) for ids in enc[:500])
    assert n_chars / n_tokens > 3.0


def test_chat_template_renders_tools():
    tok = load_tokenizer("tiny")
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "Q?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "search", "arguments": {"query": "x"}}}]},
            {"role": "tool", "content": "Doc 1"}]
    text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    assert '<tools>\n{"type": "function"' in text
    assert ('<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call><|im_end|>'
            in text)
    assert "<tool_response>\nDoc 1\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("size", ["tiny-s", "tiny"])
def test_tiny_model_generates_on_cpu(size):
    model, tok = load_model(size)
    n = sum(p.numel() for p in model.parameters())
    assert (0.2e6 if size == "tiny-s" else 1e6) < n < 3.5e6
    enc = tok("Question: When was Ky Stethith born?", return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=8, do_sample=True, top_k=0)
    assert out.shape[1] == enc["input_ids"].shape[1] + 8 or tok.eos_token_id in out[0].tolist()
    assert set(MODEL_SIZES) >= {"tiny", "tiny-s"}


def test_tiny_model_is_seeded():
    a, _ = load_model("tiny-s", seed=1)
    b, _ = load_model("tiny-s", seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def _tokens_per_name_word(tok, world_seed: int) -> float:
    from agentsearch.data.world import generate_world

    words = [w for e in generate_world(seed=world_seed).entities.values() for w in e.name.split()]
    return sum(len(tok(" " + w, add_special_tokens=False)["input_ids"]) for w in words) / len(words)


def test_the_worlds_tokenizer_splits_every_worlds_names_alike():
    """The world tokenizer was trained on world 0, so its names come out shorter there than on
    an unseen world (measured 1.88 against 2.73 tokens a word); ``tiny+worlds``' tokenizer,
    trained on 16 worlds used nowhere else, gives them the same length (2.42 / 2.44)."""
    world, worlds = load_tokenizer("tiny"), load_tokenizer("tiny+worlds")
    assert _tokens_per_name_word(world, 500) - _tokens_per_name_word(world, 0) > 0.6
    assert abs(_tokens_per_name_word(worlds, 500) - _tokens_per_name_word(worlds, 0)) < 0.1
    model, tok = load_model("tiny+worlds")
    assert tok.get_vocab() == worlds.get_vocab() and model.config.vocab_size == len(worlds)
    assert model.config.hidden_size == load_model("tiny")[0].config.hidden_size  # the same shape
    with pytest.raises(ValueError, match="unknown tokenizer 'nope'"):
        load_model("tiny+nope")


@pytest.mark.slow
def test_the_shipped_worlds_tokenizer_is_what_the_script_builds(tmp_path):
    from agentsearch.data.paths import TOKENIZER_DIRS
    from agentsearch.models import train_world_tokenizer
    from agentsearch.models.text import WORLDS_TOKENIZER_SEEDS

    train_world_tokenizer(tmp_path, seeds=WORLDS_TOKENIZER_SEEDS)
    assert ((tmp_path / "tokenizer.json").read_bytes()
            == (TOKENIZER_DIRS["worlds"] / "tokenizer.json").read_bytes())


@pytest.mark.slow
def test_offline_smollm2_loads_and_answers():
    model, tok = load_model("smollm2")
    assert sum(p.numel() for p in model.parameters()) > 100e6
    assert "tools" in tok.chat_template
    enc = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**enc, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in text
