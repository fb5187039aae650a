"""Bad input: a TypeError or ValueError naming the argument, or pmkit.Error with its code."""

import os
import subprocess
import sys

import numpy as np
import pytest

import pmkit


@pytest.fixture
def plan():
    p = pmkit.Plan(pmkit.Grid.periodic((8, 8, 8), h=0.125), "mp4")
    p.set_points(np.random.default_rng(1).random((20, 3)))
    return p


def test_wrong_dtype_names_the_argument(plan):
    with pytest.raises(TypeError, match=r"props has dtype float32; the plan takes float64"):
        plan.spread(np.ones(20, np.float32))
    with pytest.raises(TypeError, match=r"out has dtype int64"):
        plan.spread(np.ones(20), out=np.zeros(plan.mesh_shape, np.int64))
    with pytest.raises(TypeError, match=r"positions has dtype float32"):
        plan.set_points(np.zeros((3, 3), np.float32))


def test_not_an_array(plan):
    with pytest.raises(TypeError, match=r"props\[0\] must be an array"):
        plan.spread([1.0, 2.0])
    with pytest.raises(TypeError, match="meshes must be an array, not str"):
        plan.interp("mesh")


def test_wrong_shapes(plan):
    with pytest.raises(ValueError, match=r"out has shape \(8, 8, 9\); the plan's meshes are \(8, 8, 8\)"):
        plan.spread(np.ones(20), out=np.zeros((8, 8, 9)))
    with pytest.raises(ValueError, match=r"props has shape \(2, 2, 5\); it must be \(N,\) or \(F, N\)"):
        plan.spread(np.ones((2, 2, 5)))
    with pytest.raises(ValueError, match="positions holds 2 coordinate arrays, expected 3"):
        plan.set_points(np.zeros((5, 2)))


def test_particle_count_mismatch_is_a_pmkit_error(plan):
    with pytest.raises(pmkit.Error, match="props") as info:
        plan.spread(np.ones(19))
    assert info.value.code == pmkit.ErrorCode.SizeMismatch
    assert isinstance(info.value, RuntimeError)


def test_non_contiguous_mesh(plan):
    mesh = np.zeros((8, 8, 16))[:, :, ::2]
    with pytest.raises(ValueError, match="meshes is not contiguous over its mesh axes"):
        plan.interp(mesh)
    transposed = np.zeros((8, 8, 8)).T
    with pytest.raises(ValueError, match="not contiguous"):
        plan.interp(transposed)


def test_negative_strides(plan):
    with pytest.raises(ValueError, match="props has stride -1 along its particle axis"):
        plan.spread(np.ones(20)[::-1])


def test_read_only_output(plan):
    out = np.zeros(plan.mesh_shape)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        plan.spread(np.ones(20), out=out)


def test_read_only_inputs_are_accepted(plan):
    q = np.ones(20)
    q.flags.writeable = False
    assert plan.spread(q).sum() == pytest.approx(20)


def test_plan_errors():
    grid = pmkit.Grid.periodic((8, 8))
    fresh = pmkit.Plan(grid, "tsc")
    with pytest.raises(pmkit.Error, match="before set_points") as info:
        fresh.spread(np.ones(3))
    assert info.value.code == pmkit.ErrorCode.NotReady
    with pytest.raises(pmkit.Error) as info:
        fresh.set_points(np.array([[0.5, np.nan]]))
    assert info.value.code == pmkit.ErrorCode.NonFinitePosition
    bounded = pmkit.Plan(pmkit.Grid.bounded((8, 8)), "tsc")
    with pytest.raises(pmkit.Error) as info:
        bounded.set_points(np.array([[0.5, 9.0]]))
    assert info.value.code == pmkit.ErrorCode.OutOfBounds
    with pytest.raises(pmkit.Error, match="binned_order called before set_points"):
        fresh.binned_order()


def test_construction_errors():
    with pytest.raises(pmkit.Error, match="kernel name") as info:
        pmkit.Kernel("quintic")
    assert info.value.code == pmkit.ErrorCode.InvalidArgument
    with pytest.raises(pmkit.Error) as info:
        pmkit.Plan(pmkit.Grid.periodic((0, 8)), "mp4")
    assert info.value.code == pmkit.ErrorCode.InvalidArgument
    with pytest.raises(ValueError, match="pmkit grids are 2D or 3D"):
        pmkit.Grid.periodic((8,))
    with pytest.raises(ValueError, match="spacing has 2 values for a 3D domain"):
        pmkit.Grid((4, 4, 4), spacing=(1.0, 1.0))
    with pytest.raises(ValueError, match="backend = 'gpu'"):
        pmkit.Plan(pmkit.Grid.periodic((8, 8)), backend="gpu")
    with pytest.raises(ValueError, match="boundary = 'open'"):
        pmkit.Grid((4, 4), boundary="open")
    with pytest.raises(TypeError, match="float32 or float64"):
        pmkit.Plan(pmkit.Grid.periodic((8, 8)), dtype="float16")
    with pytest.raises(TypeError, match="grid must be a pmkit.Grid"):
        pmkit.Plan((8, 8))
    with pytest.raises(TypeError, match="a kernel name"):
        pmkit.Plan(pmkit.Grid.periodic((8, 8)), 4)


def test_cuda_plan_without_a_gpu_or_the_backend():
    # A build without the CUDA backend, or a machine without a GPU: Unsupported.
    try:
        pmkit.Plan(pmkit.Grid.periodic((8, 8)), backend="cuda")
    except pmkit.Error as e:
        assert e.code == pmkit.ErrorCode.Unsupported
        return
    pytest.skip("a GPU is present and this build has the CUDA backend")


def test_import_needs_no_gpu():
    # The package imports and runs a CPU plan with every GPU hidden.
    code = (
        "import numpy as np, pmkit\n"
        "p = pmkit.Plan(pmkit.Grid.periodic((4, 4)), 'linear')\n"
        "p.set_points(np.zeros((1, 2)))\n"
        "assert p.spread(np.ones(1)).sum() == 1\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))


class CudaArrayInterface:
    """An object with only __cuda_array_interface__, as Numba's device arrays have."""

    def __init__(self, typestr, shape=(20,), strides=None):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (0x1000, False), "strides": strides, "version": 3,
        }


def test_cuda_array_interface_is_read(plan):
    # The interface is parsed (dtype, strides) and its memory found to be a GPU's.
    with pytest.raises(TypeError, match="props has dtype float32"):
        plan.spread(CudaArrayInterface("<f4"))
    with pytest.raises(ValueError, match="props: a stride of 12 bytes is not a whole number of elements"):
        plan.spread(CudaArrayInterface("<f8", strides=(12,)))
    with pytest.raises(ValueError, match="props is not in host memory"):
        plan.spread(CudaArrayInterface("<f8"))
