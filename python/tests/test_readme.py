"""The README's Python quick start runs as written."""

import pathlib

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example():
    if not README.exists():
        pytest.skip("README.md is not beside the tests")
    text = README.read_text()
    start = text.index("```python\n") + len("```python\n")
    code = text[start : text.index("```", start)]
    namespace = {}
    exec(compile(code, str(README), "exec"), namespace)
    assert namespace["rho"].shape == (32, 32, 32)
    assert namespace["rho"].sum() == pytest.approx(100_000)
    assert namespace["phi"].shape == (100_000,)
