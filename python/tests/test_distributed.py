"""pmkit.DistributedPlan under MPI: distributed_ranks.py runs on 1, 2 and 3 ranks (mpirun,
as a separate job) against the single Plan, and the docs' example runs on 2 ranks. Skips
where this build has no MPI, or mpirun or mpi4py is missing."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import pmkit

HERE = pathlib.Path(__file__).resolve().parent
DOCS = HERE.parents[1] / "docs" / "python.md"


def mpirun(script, ranks, tmp_path, *arguments):
    """Runs `script` with this Python on `ranks` ranks; its output, after checking that it
    exited cleanly."""
    launcher = shutil.which("mpirun")
    if launcher is None:
        pytest.skip("mpirun is not installed (Debian: openmpi-bin)")
    pytest.importorskip("mpi4py")
    if not pmkit.built_with_mpi():
        pytest.skip("this build of pmkit has no distributed plan (no MPI)")
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    command = [launcher, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), sys.executable, str(script),
               *arguments]
    done = subprocess.run(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout
    return done.stdout


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_distributed_plan_matches_the_single_plan(ranks, tmp_path):
    output = mpirun(HERE / "distributed_ranks.py", ranks, tmp_path)
    for rank in range(ranks):
        assert re.search(rf"rank {rank} of {ranks}: ok, [1-9][0-9]* checks", output), output


def test_cuda_ranks_on_cupy_arrays(tmp_path):
    cupy = pytest.importorskip("cupy")
    if not pmkit.built_with_cuda() or cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("needs a GPU and a CUDA build of pmkit")
    output = mpirun(HERE / "distributed_ranks.py", 2, tmp_path, "cuda")
    for rank in range(2):
        assert re.search(rf"rank {rank} of 2: ok, [1-9][0-9]* checks", output), output


def test_docs_example_runs_on_two_ranks(tmp_path):
    text = DOCS.read_text()
    section = text[text.index("## Distributed plans") :]
    start = section.index("```python\n") + len("```python\n")
    script = tmp_path / "example.py"
    script.write_text(section[start : section.index("```", start)])
    output = mpirun(script, 2, tmp_path)
    assert "total charge" in output, output


def test_without_mpi_the_plan_says_so(monkeypatch):
    monkeypatch.setattr(pmkit._pmkit, "built_with_mpi", lambda: False)
    with pytest.raises(pmkit.Error, match="without MPI") as error:
        pmkit.DistributedPlan(None, pmkit.Grid.periodic((8, 8)))
    assert error.value.code == pmkit.ErrorCode.Unsupported
