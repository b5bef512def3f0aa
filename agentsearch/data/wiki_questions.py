"""Questions over real Wikipedia text: the ovos wheel's 10,033 English lead summaries.

A reproducible construction (no model, no randomness: the same wheel gives the same bytes),
three question types read off each summary, each answer a string of its gold summary that
the question does not give away:

- ``name``: the subject named from its summary's defining first sentence. "Tsinghua
  University is a public research university in Haidian, Beijing, China." gives "What is the
  name of the public research university in Haidian, Beijing, China?" -> "Tsinghua
  University" (Jeopardy!-style, as SearchQA built its questions).
- ``year``: the one year of a sentence of the summary, blanked (a cloze): 'In the article
  "Arab League": "The Arab League was formed in Cairo on 22 March ____, initially with seven
  members ..." Which year fills the blank?' -> "1945".
- ``nationality``: "Andy Warhol was an American artist and filmmaker." gives "What nationality
  was Andy Warhol?" -> "American".

Pages are split by a hash of their title (``dev``: bucket 0 of 10, ``test``: bucket 1,
``train``: the rest), so no page has questions in two splits. A fourth split, ``people``, is
written by people: FanOutQA's dev sub-questions (``fanoutqa`` wheel) whose evidence page is
among the summaries and whose answer string occurs in it (evaluation only).

A row: ``{"id", "question", "golden_answers", "type", "gold_doc_ids", "title", "hops"}``.
``wiki_dir()`` writes ``corpus.jsonl`` and the four splits once into the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from pathlib import Path

from agentsearch.data.loaders import _package_file, wiki_corpus, write_jsonl

__all__ = ["VERSION", "SPLITS", "build_wiki_questions", "people_questions", "wiki_dir",
           "gives_away", "page_split", "oracle_query"]

VERSION = 1
"""Bumped whenever the construction changes (the cache folder's name carries it)."""
SPLITS = ("train", "dev", "test", "people")

_SENTENCE = re.compile(r"(?<=[a-z0-9)\]])\. (?=[A-Z\"'])")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-2][0-9])\b")
_ANY_NUMBER_YEARLIKE = re.compile(r"\b\d{3,4}s?\b")
_COPULA = re.compile(r" (is|was|are|were) (?:a|an|the) ")
_DEMONYM = re.compile(r"(?:is|was) an? ((?:[A-Z][a-z]+)(?:-[A-Z][a-z]+)?) [a-z]")
# Capitalised words after "was a" that name a faith, a family of languages or a region, not
# a nationality.
_NOT_NATIONALITY = {"Muslim", "Hindu", "Christian", "Abrahamic", "Jewish", "Buddhist", "Indic",
                    "Dravidian", "Nordic", "Catholic", "Protestant", "Islamic", "Arabic",
                    "Middle-Eastern", "Ethio-Semitic", "Semitic", "Germanic", "Romance",
                    "Celtic", "Slavic", "Latin", "Old", "Ancient", "Classical", "Greco-Roman"}
_STOP = {"a", "an", "the", "of", "and", "in", "on", "at", "to", "for", "is", "was", "by", "de",
         "la", "le", "von", "van", "der", "s"}
MAX_QUESTION_WORDS = 40


def _norm_tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def gives_away(answer: str, question: str) -> bool:
    """Whether ``question`` gives ``answer`` away: the answer's normalised words occur in it
    in order, or more than half of the answer's content words occur in it at all."""
    a, q = _norm_tokens(answer), _norm_tokens(question)
    if not a:
        return True
    if f" {' '.join(a)} " in f" {' '.join(q)} ":
        return True
    content = [t for t in a if t not in _STOP]
    return bool(content) and sum(t in set(q) for t in content) * 2 > len(content)


def page_split(title: str) -> str:
    """The split of a page: ``dev`` (hash bucket 0 of 10), ``test`` (1) or ``train``."""
    bucket = int(hashlib.sha1(title.encode("utf-8")).hexdigest(), 16) % 10
    return {0: "dev", 1: "test"}.get(bucket, "train")


def _bare_title(title: str) -> str:
    """"Jeff Austin (baseball)" -> "Jeff Austin"; "Maximilian I, Holy Roman Emperor" stays."""
    return re.sub(r"\s*\([^()]*\)$", "", title).strip()


def _clip(words: list[str], limit: int) -> str | None:
    """The words up to ``limit``, cut after the last comma inside the limit when longer
    (None when no clause boundary leaves at least 5 words)."""
    if len(words) <= limit:
        return " ".join(words)
    head = words[:limit]
    cut = max((i for i, w in enumerate(head) if w.endswith(",")), default=-1)
    if cut < 4:
        return None
    return " ".join(head[:cut + 1]).rstrip(",")


def _name_question(title: str, first: str) -> dict | None:
    bare = _bare_title(title)
    for subject in (bare, f"The {bare}"):
        if first.startswith(subject + " "):
            rest = first[len(subject):]
            break
    else:
        return None
    m = _COPULA.match(rest)
    if m is None:
        return None
    desc = rest[m.end():].strip().rstrip(".").strip('"')
    desc = _clip(desc.split(), MAX_QUESTION_WORDS - 6)
    if desc is None or len(desc.split()) < 3 or '"' in desc:
        return None
    return {"question": f"What is the name of the {desc}?", "answers": [bare], "type": "name"}


def _year_question(title: str, sentences: list[str]) -> dict | None:
    for s in sentences:
        s = s.strip().rstrip(".")
        years = _YEAR.findall(s)
        if len(years) != 1 or len(_ANY_NUMBER_YEARLIKE.findall(s)) != 1:
            continue
        n = len(s.split())
        if not 8 <= n <= MAX_QUESTION_WORDS - 8 or '"' in s:
            continue
        blanked = _YEAR.sub("____", s, count=1)
        return {"question": f'In the article "{title}": "{blanked}." Which year fills the blank?',
                "answers": [years[0]], "type": "year"}
    return None


def _nationality_question(title: str, first: str) -> dict | None:
    bare = _bare_title(title)
    if not first.startswith(bare + " "):
        return None
    m = _DEMONYM.match(first[len(bare) + 1:])
    if m is None or m.group(1) in _NOT_NATIONALITY:
        return None
    verb = first[len(bare) + 1:].split()[0]
    return {"question": f"What nationality {verb} {bare}?", "answers": [m.group(1)],
            "type": "nationality"}


def oracle_query(row: dict) -> str:
    """What a scripted searcher types for a question, from the question alone (never the
    answer): a ``name`` question's description, a ``year`` question's article title, a
    ``nationality`` question's person; a question written by people is searched as it is."""
    q = str(row["question"]).strip()
    kind = row.get("type")
    if kind == "name" and q.startswith("What is the name of the "):
        return q[len("What is the name of the "):].rstrip("?")
    if kind == "year" and (m := re.match(r'In the article "(.+?)": ', q)):
        return m.group(1)
    if kind == "nationality" and (m := re.match(r"What nationality (?:is|was) (.+)\?$", q)):
        return m.group(1)
    return q


def build_wiki_questions(corpus: list[dict] | None = None) -> dict[str, list[dict]]:
    """The ``train``/``dev``/``test`` questions of the summaries (``wiki_corpus()`` rows), by
    split. Each kept question's answer occurs in its gold summary and is not given away."""
    corpus = wiki_corpus() if corpus is None else corpus
    out: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    for row in corpus:
        head, _, text = row["contents"].partition("\n")
        title = head.strip().strip('"')
        sentences = _SENTENCE.split(text)
        if not sentences or not title:
            continue
        first = sentences[0].strip()
        split = page_split(title)
        made = (_name_question(title, first), _year_question(title, sentences),
                 _nationality_question(title, first))
        for q in made:
            if q is None:
                continue
            answer = q["answers"][0]
            if answer not in text or gives_away(answer, q["question"]):
                continue
            out[split].append({"id": f"{row['id']}-{q['type']}", "question": q["question"],
                               "golden_answers": q["answers"], "type": q["type"],
                               "gold_doc_ids": [row["id"]], "title": title, "hops": 1})
    return out


def _leaves(question: dict):
    for sub in question.get("decomposition") or []:
        if sub.get("decomposition"):
            yield from _leaves(sub)
        else:
            yield sub


def people_questions(corpus: list[dict] | None = None) -> list[dict]:
    """FanOutQA's human-written dev sub-questions answerable from one summary: the evidence
    page is a summary's title and the (single-string) answer occurs in that summary."""
    corpus = wiki_corpus() if corpus is None else corpus
    by_title = {}
    for row in corpus:
        head, _, text = row["contents"].partition("\n")
        by_title[head.strip().strip('"')] = (row["id"], text)
    src = _package_file("fanoutqa", "data", "fanout-final-dev.json")
    rows, seen = [], set()
    for top in json.loads(src.read_text(encoding="utf-8")):
        for sub in _leaves(top):
            answer, title = sub.get("answer"), (sub.get("evidence") or {}).get("title")
            if not isinstance(answer, str) or title not in by_title or sub["id"] in seen:
                continue
            doc_id, text = by_title[title]
            if not answer.strip() or answer not in text or gives_away(answer, sub["question"]):
                continue
            seen.add(sub["id"])
            rows.append({"id": f"fanoutqa-{sub['id']}", "question": sub["question"],
                         "golden_answers": [answer], "type": "people",
                         "gold_doc_ids": [doc_id], "title": title, "hops": 1})
    return rows


def wiki_dir() -> Path:
    """The folder of the real-text task, written on first use and cached:
    ``corpus.jsonl``, ``train/dev/test/people.jsonl`` and ``stats.json`` (counts by split and
    type). Lives under ``$AGENTSEARCH_CACHE/worlds/wiki-en-v{VERSION}``."""
    from agentsearch.core.cache import cache_dir, publish_dir

    out = cache_dir() / "worlds" / f"wiki-en-v{VERSION}"
    if (out / "stats.json").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    corpus = wiki_corpus(tmp / "corpus.jsonl")
    splits = {**build_wiki_questions(corpus), "people": people_questions(corpus)}
    for name, rows in splits.items():
        write_jsonl(rows, tmp / f"{name}.jsonl")
    stats = {name: dict(sorted(Counter(r["type"] for r in rows).items()))
             for name, rows in splits.items()}
    (tmp / "stats.json").write_text(json.dumps({"version": VERSION, "docs": len(corpus),
                                                "questions": stats}, indent=1) + "\n")
    return publish_dir(tmp, out)
