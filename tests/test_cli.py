import json
import subprocess
import sys

import pytest

from agentsearch.cli import build_parser, main

SUBCOMMANDS = ["demo", "train", "eval", "index", "serve", "pareto", "report", "check-env",
               "world", "wiki-corpus"]


@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_every_subcommand_has_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([cmd, "--help"])
    assert e.value.code == 0
    assert "usage: agentsearch" in capsys.readouterr().out


def test_world_command_writes_a_world(tmp_path):
    assert main(["world", "--seed", "2", "--entities", "100", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "corpus.jsonl").stat().st_size > 0
    assert (tmp_path / "dev.jsonl").stat().st_size > 0


def test_import_is_light():
    code = ("import sys, agentsearch, agentsearch.cli, agentsearch.core.config; "
            "heavy = [m for m in ('torch', 'transformers', 'vllm', 'openrlhf', 'pyserini', "
            "'faiss') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


DEMO_SMALL = ["model=tiny-s", "steps=1", "prompts_per_step=2", "group_size=2", "max_turns=3",
              "max_seq_len=512", "generation.max_new_tokens=8", "eval.limit=4",
              "sft.steps=0", "sft.pretrain_steps=0", "threads=1", "tensorboard=false"]


@pytest.mark.slow
def test_demo_reruns_into_a_new_folder_and_prints_its_table(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", *DEMO_SMALL]) == 0
    assert main(["demo", *DEMO_SMALL]) == 0  # a second `make demo` must not collide
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 2 and all(r.name.startswith("demo-") for r in runs)
    out = capsys.readouterr().out
    assert out.count("what RL changed") == 2 and str(runs[1].relative_to(tmp_path)) in out
    assert (out.count("learning curve (PNG)") == 2
            and (runs[0] / "learning.png").stat().st_size > 1000)
    assert (runs[0] / "samples" / "step-0.txt").read_text().startswith("=== ")
    # it ends with the path of the run's report
    last_line = out.rstrip().splitlines()[-1]
    assert last_line.endswith(str(runs[1].relative_to(tmp_path) / "report.html"))
    assert (runs[0] / "report.html").read_text().startswith("<!doctype html>")
    s = json.loads((runs[0] / "demo_summary.json").read_text())
    assert s["steps"] == 1 and s["eval_questions"] == 4 and s["time_by_phase"]["generate"] > 0
    # an explicit --out that already holds a run is refused, never overwritten
    assert main(["demo", "--out", str(runs[0]), *DEMO_SMALL]) == 2
    assert "already holds a run" in capsys.readouterr().err


CHATTER = ("it/s]", "Loading weights", "Writing model shards", "Setting accelerator to CPU",
           "Building index from tokens", "fontManager")


@pytest.mark.slow
def test_a_training_run_prints_its_own_lines_and_none_of_the_libraries(tmp_path):
    """Off a terminal (CI, a log file): the progress lines, and none of transformers' bars,
    DeepSpeed's accelerator notice or bm25s's debug lines (a shipped base loaded, the BM25
    index built, the final model saved)."""
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE", "PYTHONWARNINGS")}
    env["AGENTSEARCH_CACHE"] = str(tmp_path / "cache")  # the world's BM25 index is built afresh
    out = subprocess.run(
        [sys.executable, "-m", "agentsearch.cli", "train", "--preset", "tiny", "--out",
         str(tmp_path / "run"), "steps=1", "prompts_per_step=2", "group_size=2", "eval.limit=4",
         "threads=1", "tensorboard=false"],
        capture_output=True, text=True, env=env, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "[train] 1/1" in text and (tmp_path / "run" / "final").is_dir()
    assert not [c for c in CHATTER if c in text], text[-3000:]
