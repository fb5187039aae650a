"""examples/python/train_charges.py trains: briefly, on the CPU, its loss falls."""

import importlib.util
import pathlib

import pytest

pytest.importorskip("torch")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "train_charges.py"


def test_training_lowers_the_loss(capsys):
    spec = importlib.util.spec_from_file_location("train_charges", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main(["--steps", "150", "--systems", "4", "--check", "--factor", "5"]) == 0
    assert "loss fell" in capsys.readouterr().out
