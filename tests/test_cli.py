import subprocess
import sys

import pytest

from agentsearch.cli import build_parser, main

SUBCOMMANDS = ["demo", "train", "eval", "index", "serve", "pareto", "check-env", "world",
               "wiki-corpus"]


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
    code = ("import sys, agentsearch, agentsearch.cli, agentsearch.config; "
            "heavy = [m for m in ('torch', 'transformers', 'vllm', 'openrlhf', 'pyserini', 'faiss') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
