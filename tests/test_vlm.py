"""The tiny VLM (agentsearch.models.vlm): built offline, image tokens, logprobs,
save/load, errors."""

import time

import pytest
import torch
from PIL import Image

from agentsearch.models import load_model, load_tokenizer
from agentsearch.models.logprobs import token_logprobs
from agentsearch.models.vlm import (
    IMAGE_TOKEN,
    ImageTokenSuppressor,
    collate_pixel_values,
    expand_image_tokens,
    image_token_id,
    load_vlm,
    prepare_images,
    save_vlm,
    tiny_vlm,
    tokens_per_image,
)


@pytest.fixture(scope="module")
def vlm():
    return tiny_vlm(seed=0)


def _img(color, size=(64, 64), box=None):
    im = Image.new("RGB", size, color)
    if box:  # a white square somewhere: images that differ only in layout
        im.paste((255, 255, 255), box)
    return im


def _sample(model, proc, texts, images, **params):
    """Sample through the rollout's ``HFBackend`` (the path training uses): ``(prompt ids,
    Generations)``; ``images`` per text, in order."""
    from agentsearch.models.processor import ImageTextTokenizer
    from agentsearch.rollout import SamplingParams
    from agentsearch.rollout.hf import HFBackend

    tok = ImageTextTokenizer(proc)
    prompts = tok(texts)["input_ids"]
    return prompts, HFBackend(model, tok).generate(prompts, SamplingParams(**params), images=images)


def _left_padded(processor, texts, images):
    processor.tokenizer.padding_side = "left"
    try:
        return processor(text=texts, images=images, return_tensors="pt", padding=True)
    finally:
        processor.tokenizer.padding_side = "right"


def test_builds_offline_small_with_one_image_token(vlm):
    model, proc = vlm
    tok = proc.tokenizer
    assert len(tok) == len(load_tokenizer("tiny")) + 1
    assert (image_token_id(model) == image_token_id(proc) == tok.convert_tokens_to_ids(IMAGE_TOKEN)
            == len(tok) - 1)
    assert (model.get_input_embeddings().weight.shape[0] == model.config.text_config.vocab_size
            == len(tok))
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()  # tied
    assert tokens_per_image(model) == tokens_per_image(proc) == 16  # (64 / 16)^2 patches, no CLS
    assert 0.8e6 < sum(p.numel() for p in model.parameters()) < 2e6
    assert sum(p.numel() for p in model.model.vision_tower.parameters()) < 0.2e6
    a, _ = tiny_vlm(seed=0)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), model.parameters()))


def test_processor_expands_each_placeholder(vlm):
    model, proc = vlm
    iid = image_token_id(proc)
    texts = ["Which is bigger? <image> Answer.", "Left <image><image> right", "no image here"]
    images = [_img((255, 0, 0), (100, 80)), _img((0, 0, 255)), _img((0, 255, 0), (30, 200))]
    enc = proc(text=texts, images=images, return_tensors="pt", padding=True)
    assert enc["pixel_values"].shape == (3, 3, 64, 64)
    counts = (enc["input_ids"] == iid).sum(1).tolist()
    assert counts == [16, 32, 0]
    row = enc["input_ids"][0][enc["attention_mask"][0].bool()].tolist()
    first = row.index(iid)
    assert row[first:first + 16] == [iid] * 16 and iid not in row[first + 16:]
    # expand_image_tokens + the tokenizer give the same ids (how a rollout tokenizes observations)
    for t, ids, m in zip(texts, enc["input_ids"], enc["attention_mask"]):
        assert (proc.tokenizer(expand_image_tokens(t, proc), add_special_tokens=False)["input_ids"]
                == ids[m.bool()].tolist())
    assert proc.tokenizer.decode(row, skip_special_tokens=True) == "Which is bigger?  Answer."
    # pixel_values for observation images, the same as the processor's
    assert torch.equal(prepare_images(proc, images, n_placeholders=3), enc["pixel_values"])
    assert prepare_images(proc, []) is None


def test_generate_logprobs_equal_teacher_forced(vlm):
    model, proc = vlm
    texts = ["Q: colour? <image> A:", "Compare <image> and <image> now, which", "text only"]
    images = [_img((255, 0, 0)), _img((0, 0, 255), box=(0, 0, 20, 20)),
              _img((10, 200, 30), (90, 50))]
    enc = _left_padded(proc, texts, images)
    assert enc["attention_mask"][2, 0] == 0  # left padding really happens
    per_text = [images[:1], images[1:], []]
    torch.manual_seed(0)
    prompts, gens = _sample(model, proc, texts, per_text, max_new_tokens=24, temperature=0.8,
                            top_k=50)
    # prompts of different lengths
    assert [len(p) for p in prompts] == enc["attention_mask"].sum(1).tolist()
    for prompt, gen, imgs in zip(prompts, gens, per_text):
        assert 0 < len(gen.token_ids) == len(gen.logprobs) <= 24
        ids = torch.tensor([prompt + gen.token_ids])
        pixels = prepare_images(proc, imgs) if imgs else None
        with torch.no_grad():
            tf = token_logprobs(model, ids, pixel_values=pixels, temperature=0.8)
        P = len(prompt)
        assert (tf[0, P:] - torch.tensor(gen.logprobs)).abs().max() < 1e-4
        # image tokens: not scored
        assert (tf[0, :P][ids[0, :P] == image_token_id(model)] == 0).all()

    # the same through plain model.generate(output_logits=True): raw logits, image token masked
    P = enc["input_ids"].shape[1]
    sup = ImageTokenSuppressor(image_token_id(model))
    torch.manual_seed(1)
    out = model.generate(**enc, do_sample=True, temperature=0.8, top_k=0, max_new_tokens=12,
                         logits_processor=[sup], output_logits=True, return_dict_in_generate=True,
                         eos_token_id=None, pad_token_id=proc.tokenizer.pad_token_id)
    logits = torch.stack(out.logits, 1).float()  # [B, 12, V]
    logits[..., image_token_id(model)] = float("-inf")
    new = out.sequences[:, P:]
    gen = torch.log_softmax(logits / 0.8, -1).gather(-1, new[..., None]).squeeze(-1)
    with torch.no_grad():
        tf = token_logprobs(model, out.sequences,
                            torch.cat([enc["attention_mask"], torch.ones_like(new)], 1),
                            pixel_values=enc["pixel_values"], temperature=0.8)
    assert (tf[:, P:] - gen).abs().max() < 1e-4


def test_image_token_is_never_sampled():
    model, proc = tiny_vlm(seed=3)
    iid = image_token_id(model)

    def favour_image_token(module, args, out):  # <image> is now the likeliest next token
        out = out.clone()
        out[..., iid] += 20.0
        return out

    model.lm_head.register_forward_hook(favour_image_token)
    enc = proc(text=["Look <image> now"], images=[_img((255, 0, 0))], return_tensors="pt")
    torch.manual_seed(0)
    plain = model.generate(**enc, do_sample=True, max_new_tokens=8, eos_token_id=None)
    assert iid in plain[0, enc["input_ids"].shape[1]:].tolist()  # the hazard is real
    (prompt,), (gen,) = _sample(model, proc, ["Look <image> now"], [[_img((255, 0, 0))]],
                                max_new_tokens=8)
    assert prompt == enc["input_ids"][0].tolist() and iid not in gen.token_ids
    ids = torch.tensor([prompt + gen.token_ids])
    with torch.no_grad():  # and the rescoring of the sampled sequence still works and agrees
        tf = token_logprobs(model, ids, pixel_values=enc["pixel_values"])
    assert (tf[0, len(prompt):] - torch.tensor(gen.logprobs)).abs().max() < 1e-4


def test_save_load_round_trip(vlm, tmp_path):
    model, proc = vlm
    save_vlm(model, proc, tmp_path / "m")
    model2, proc2 = load_vlm(str(tmp_path / "m"))
    texts, images = ["Is it red? <image> yes, it is red"], [_img((255, 0, 0), (80, 64))]
    enc, enc2 = (proc(text=texts, images=images, return_tensors="pt"),
                 proc2(text=texts, images=images, return_tensors="pt"))
    assert torch.equal(enc["input_ids"], enc2["input_ids"])
    assert torch.equal(enc["pixel_values"], enc2["pixel_values"])
    assert ((proc2.tokenizer.pad_token_id, proc2.tokenizer.eos_token_id)
            == (proc.tokenizer.pad_token_id, proc.tokenizer.eos_token_id))
    assert tokens_per_image(proc2) == tokens_per_image(model2) == 16
    with torch.no_grad():
        assert torch.equal(model(**enc).logits, model2(**enc).logits)
        assert torch.equal(
            token_logprobs(model, enc["input_ids"], pixel_values=enc["pixel_values"]),
            token_logprobs(model2, enc["input_ids"], pixel_values=enc["pixel_values"]))
    assert model2.lm_head.weight.data_ptr() == model2.get_input_embeddings().weight.data_ptr()


def test_the_image_changes_only_the_text_after_it(vlm):
    model, proc = vlm
    text = ["Question: which side is the square on? <image> Answer: the left side"]
    a = proc(text=text, images=[_img((0, 0, 0), box=(0, 0, 16, 16))], return_tensors="pt")
    b = proc(text=text, images=[_img((0, 0, 0), box=(48, 48, 64, 64))], return_tensors="pt")
    assert torch.equal(a["input_ids"], b["input_ids"])
    with torch.no_grad():
        la = token_logprobs(model, a["input_ids"], pixel_values=a["pixel_values"])
        lb = token_logprobs(model, b["input_ids"], pixel_values=b["pixel_values"])
    ids = a["input_ids"][0].tolist()
    first = ids.index(image_token_id(model))
    # causal: nothing before the image moves
    assert torch.equal(la[:, :first + 1], lb[:, :first + 1])
    after = slice(first + 16, None)
    assert (la[:, after] - lb[:, after]).abs().max() > 1e-3


def test_grad_target_mask_and_text_only_rows(vlm):
    model, proc = vlm
    enc = proc(text=["See <image> then answer yes", "only text in this row, padded"],
               images=[_img((0, 99, 0))], return_tensors="pt", padding=True)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    tmask = torch.zeros_like(ids, dtype=torch.bool)
    tmask[:, -4:] = True
    model.zero_grad()
    lp = token_logprobs(model, ids, mask, pixel_values=enc["pixel_values"], target_mask=tmask,
                        chunk_tokens=3)
    assert (lp[~tmask] == 0).all() and (lp[tmask & mask.bool()] < 0).all()
    lp.sum().backward()
    for part in (model.model.vision_tower, model.model.multi_modal_projector,
                 model.model.language_model):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())
    with torch.no_grad():
        full = token_logprobs(model, ids, mask, pixel_values=enc["pixel_values"])
    assert torch.allclose(full[tmask], lp[tmask].detach(), atol=1e-6)
    model.zero_grad()


def test_collate_pixel_values_follows_rows_and_cuts(vlm):
    model, proc = vlm
    texts = ["one <image> a <image> b", "none", "two <image> c"]
    rows = [[_img((9, 9, 9)), _img((200, 0, 0))], [], [_img((0, 0, 200))]]
    encs = [proc(text=[t], images=r or None, return_tensors="pt") for t, r in zip(texts, rows)]
    pvs = [e.get("pixel_values") for e in encs]
    width = max(e["input_ids"].shape[1] for e in encs)
    ids = torch.zeros(3, width, dtype=torch.long)
    for b, e in enumerate(encs):
        ids[b, :e["input_ids"].shape[1]] = e["input_ids"][0]
    assert torch.equal(collate_pixel_values(ids, pvs, model), torch.cat([pvs[0], pvs[2]]))
    order = [2, 0, 1]  # a packer that sorts rows passes each row's images with it
    assert torch.equal(collate_pixel_values(ids[order], [pvs[i] for i in order], model),
                       torch.cat([pvs[2], pvs[0]]))
    iid = image_token_id(model)
    second = (ids[0] == iid).nonzero().flatten()[16].item()  # first token of the second image
    cut = ids[:, :second].clone()
    assert torch.equal(collate_pixel_values(cut, pvs, model), torch.cat([pvs[0][:1], pvs[2]]))
    with torch.no_grad():
        lp = token_logprobs(model, cut, pixel_values=collate_pixel_values(cut, pvs, model))
        full = token_logprobs(model, ids[:1], pixel_values=pvs[0])
    assert torch.allclose(lp[0, :second], full[0, :second], atol=1e-5)
    with pytest.raises(ValueError, match="row 0 holds 20 image tokens"):
        collate_pixel_values(ids[:, :second + 4], pvs, model)


def test_lora_wrapped_vlm_scores_the_same():
    import peft  # a base dependency: never skipped

    model, proc = tiny_vlm(seed=1)
    enc = proc(text=["A <image> B C D"], images=[_img((1, 2, 3))], return_tensors="pt")
    with torch.no_grad():
        before = token_logprobs(model, enc["input_ids"], pixel_values=enc["pixel_values"])
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                         task_type="CAUSAL_LM"))
    lp = token_logprobs(wrapped, enc["input_ids"], pixel_values=enc["pixel_values"])
    assert torch.allclose(lp, before, atol=1e-6)  # LoRA B starts at 0
    lp.sum().backward()
    assert any(p.grad is not None for n, p in wrapped.named_parameters() if "lora_" in n)
    _, (gen,) = _sample(wrapped, proc, ["A <image> B C D"], [[_img((1, 2, 3))]], max_new_tokens=3)
    assert 0 < len(gen.token_ids) <= 3


def test_text_base_warm_start_matches_the_text_model():
    from agentsearch.models.logprobs import token_logprobs

    model, _ = tiny_vlm(text="tiny-base")
    base, tok = load_model("tiny-base")
    ids = tok("Question: In what year was Ky Stethith born?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(token_logprobs(model, ids), token_logprobs(base, ids), atol=1e-5)


def test_clear_errors(vlm, tmp_path):
    from agentsearch.rollout import SamplingParams
    from agentsearch.rollout.hf import HFBackend

    model, proc = vlm
    red = _img((255, 0, 0))
    text_model, tok = load_model("tiny-s")
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="text-only model"):
        token_logprobs(text_model, ids, pixel_values=torch.zeros(1, 3, 64, 64))
    with pytest.raises(ValueError, match="text-only"):
        HFBackend(text_model, tok).generate([[1, 2, 3]], SamplingParams(max_new_tokens=2),
                                            images=[[red]])
    with pytest.raises(ValueError, match="text-only tokenizer"):
        prepare_images(tok, [red])
    text_model.save_pretrained(tmp_path / "text")
    tok.save_pretrained(tmp_path / "text")
    with pytest.raises(ValueError, match="text-only model"):
        load_vlm(str(tmp_path / "text"))
    with pytest.raises(ValueError, match="unknown VLM"):
        load_vlm("no-such-vlm")
    # placeholders vs images
    with pytest.raises(ValueError, match=r"2 <image> placeholder\(s\) but 1 image"):
        proc(text=["<image> and <image>"], images=[red], return_tensors="pt")
    with pytest.raises(ValueError, match=r"0 <image> placeholder\(s\) but 1 image"):
        proc(text=["no placeholder"], images=[red], return_tensors="pt")
    with pytest.raises(ValueError, match="placeholder"):
        prepare_images(proc, [red, red], n_placeholders=1)
    enc = proc(text=["x <image> y"], images=[red], return_tensors="pt")
    with pytest.raises(ValueError, match="16 image tokens but 2 image"):
        token_logprobs(model, enc["input_ids"], pixel_values=enc["pixel_values"].repeat(2, 1, 1, 1))
    with pytest.raises(ValueError, match="image tokens but 0 image"):
        token_logprobs(model, enc["input_ids"])
    # sampling checks the same layout
    with pytest.raises(ValueError, match="holds 16 image tokens"):
        _sample(model, proc, ["x <image> y"], [[]], max_new_tokens=2)
    with pytest.raises(ValueError, match="vision tower takes 64x64"):
        token_logprobs(model, enc["input_ids"], pixel_values=torch.zeros(1, 3, 32, 32))
    # too large
    huge = Image.new("L", (2100, 2100))
    with pytest.raises(ValueError, match="over the limit.*downscale"):
        proc(text=["<image>"], images=[huge], return_tensors="pt")
    with pytest.raises(ValueError, match="over the limit"):
        prepare_images(proc, [huge])
    prepare_images(proc, [huge], max_pixels=5_000_000)  # the limit is a setting


def test_forward_time_batch_of_8(vlm):
    """8 sequences of ~100 tokens with one 64x64 image each, one thread (numbers for the docs)."""
    model, proc = vlm
    words = "the red square is left of the blue circle and the answer is"
    texts = [f"Question {i}: <image> " + " ".join([words] * 3) for i in range(8)]
    imgs = [_img((30 * i, 0, 0), box=(i, i, i + 9, i + 9)) for i in range(8)]
    enc = proc(text=texts, images=imgs, return_tensors="pt", padding=True)
    assert 90 <= enc["input_ids"].shape[1] <= 120
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            token_logprobs(model, enc["input_ids"], enc["attention_mask"],
                           pixel_values=enc["pixel_values"])
            t = time.perf_counter()
            for _ in range(5):
                token_logprobs(model, enc["input_ids"], enc["attention_mask"],
                               pixel_values=enc["pixel_values"])
            ms = (time.perf_counter() - t) / 5 * 1000
    finally:
        torch.set_num_threads(threads)
    print(f"token_logprobs with images, 8 x {enc['input_ids'].shape[1]} tokens + 8 images, 1 "
          f"thread: {ms:.1f} ms")
    assert ms < 1000
