"""The MLS-MPM example (examples/mpm, the C++ program pmkit_mpm of a CMake build) against
tests/mpm_reference.py's NumPy program of the same scheme: every case within 1e-10.

The build folder is $PMKIT_BUILD_DIR, else build/ at the repository's root; the test
skips where neither holds the program.
"""

import importlib.util
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _program():
    for folder in (os.environ.get("PMKIT_BUILD_DIR"), ROOT / "build"):
        if folder:
            path = pathlib.Path(folder)
            path = path if path.is_absolute() else ROOT / path
            program = path / "examples" / "mpm" / "pmkit_mpm"
            if program.exists():
                return str(program)
    return None


def _reference():
    spec = importlib.util.spec_from_file_location("mpm_reference", ROOT / "tests" / "mpm_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", range(4))
def test_mpm_matches_the_numpy_reference(case):
    program = _program()
    if program is None:
        pytest.skip("no CMake build of examples/mpm (set PMKIT_BUILD_DIR)")
    reference = _reference()
    *setting, steps = reference.CASES[case]
    good, worst = reference.compare(program, *setting, steps=steps)
    assert good, worst
