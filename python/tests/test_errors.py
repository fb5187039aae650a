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
    with pytest.raises(TypeError, match=r"props\[0\] must be an array, not NoneType"):
        plan.spread([None, np.ones(20)])
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


# dtype= is read as numpy.dtype reads it: float and "float" are float64, as NumPy makes
# the caller's arrays.
FLOAT64_SPELLINGS = [float, "float", "f8", "float64", "double", "<f8", np.float64, np.dtype("f8")]
FLOAT32_SPELLINGS = ["f4", "float32", "single", np.float32, np.dtype("f4")]


@pytest.mark.parametrize("dtype", FLOAT64_SPELLINGS + FLOAT32_SPELLINGS)
def test_dtype_is_read_as_numpy_reads_it(dtype):
    want = np.dtype(dtype).name
    plan = pmkit.Plan(pmkit.Grid.periodic((8, 8)), "tsc", dtype=dtype)
    assert plan.dtype == want
    assert pmkit.PairPlan(pmkit.Box.periodic((2.0, 2.0)), 0.5, dtype=dtype).dtype == want
    # The caller's arrays of that dtype are taken: np.zeros(..., dtype=float) is float64.
    plan.set_points(np.full((3, 2), 0.5, dtype=dtype))
    assert plan.spread(np.ones(3, dtype=dtype)).sum() == pytest.approx(3)


class TorchLikeDtype:
    """A dtype of module torch, as pmkit reads one where torch is not installed
    (test_torch.py has the real ones)."""

    __module__ = "torch"

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"

    __repr__ = __str__


def test_torch_dtypes_are_read_by_name():
    assert pmkit.Plan(pmkit.Grid.periodic((8, 8)), dtype=TorchLikeDtype("float32")).dtype == "float32"
    assert pmkit.Plan(pmkit.Grid.periodic((8, 8)), dtype=TorchLikeDtype("float64")).dtype == "float64"
    with pytest.raises(TypeError, match="dtype = .*float16.*float32 or float64"):
        pmkit.Plan(pmkit.Grid.periodic((8, 8)), dtype=TorchLikeDtype("float16"))


@pytest.mark.parametrize("dtype", ["float16", "f2", "i4", int, complex, ">f8", "nonsense", 3, np.int64])
def test_other_dtypes_name_dtype_and_the_accepted_values(dtype):
    message = r"dtype = .*: pmkit plans are float32 or float64"
    with pytest.raises(TypeError, match=message):
        pmkit.Plan(pmkit.Grid.periodic((8, 8)), dtype=dtype)
    with pytest.raises(TypeError, match=message):
        pmkit.PairPlan(pmkit.Box.periodic((2.0, 2.0)), 0.5, dtype=dtype)


def test_particle_values_of_another_count_are_refused_before_a_result_is_made():
    # (N, 1) read as N fields of one particle would be a result of N meshes (391 GiB for
    # N = 200000 on 64^3): the count is checked first, and the message names the forms.
    plan = pmkit.Plan(pmkit.Grid.periodic((64, 64, 64), h=1 / 64), "mp4")
    n = 200000
    plan.set_points(np.random.default_rng(2).random((n, 3)))
    q = np.ones(n)
    with pytest.raises(pmkit.Error, match=r"props has shape \(200000, 1\); it must be \(N,\) or \(F, N\) with "
                                          r"N = 200000") as info:
        plan.spread(q[:, None])
    assert info.value.code == pmkit.ErrorCode.SizeMismatch
    with pytest.raises(pmkit.Error, match=r"vectors has shape \(200000, 5, 3\); it must be \(N, D\) or \(F, N, D\)"):
        plan.spread_gradient(np.zeros((n, 5, 3)))
    with pytest.raises(ValueError, match=r"vectors has shape \(200000,\); it must be \(N, D\) or \(F, N, D\)"):
        plan.spread_gradient(q)
    with pytest.raises(ValueError, match=r"meshes has shape \(200000, 1, 1, 1\); the plan's meshes are "
                                         r"\(64, 64, 64\) \(C order, x last\), or \(F, 64, 64, 64\)"):
        plan.interp(np.zeros((n, 1, 1, 1)))


def test_overlapping_input_and_output_is_a_pmkit_error(plan):
    buffer = np.zeros(plan.mesh_size + 20)
    mesh = buffer[: plan.mesh_size].reshape(plan.mesh_shape)
    with pytest.raises(pmkit.Error, match=r"interp: values\[0\] and meshes\[0\] overlap") as info:
        plan.interp(mesh, out=buffer[plan.mesh_size - 5 : plan.mesh_size + 15])
    assert info.value.code == pmkit.ErrorCode.InvalidArgument
    with pytest.raises(pmkit.Error, match=r"spread: props\[0\] and meshes\[0\] overlap"):
        plan.spread(buffer[plan.mesh_size - 1 : plan.mesh_size + 19], out=mesh)
    with pytest.raises(pmkit.Error, match=r"interp_gradient: gradients\[0\] and meshes\[0\] overlap"):
        plan.interp_gradient(mesh, out=buffer[:60].reshape(20, 3))
    # Side by side in one buffer: apart.
    plan.interp(mesh, out=buffer[plan.mesh_size :])


def test_array_of_another_kind_names_its_dtype(plan):
    with pytest.raises(TypeError, match="props has dtype object; the plan takes float64"):
        plan.spread(np.ones(20, dtype=object))
    with pytest.raises(TypeError, match=r"meshes has dtype <U1; the plan takes float64"):
        plan.interp(np.full(plan.mesh_shape, "a"))


def test_a_list_of_numbers_is_named(plan):
    with pytest.raises(TypeError, match=r"props\[0\] is a number, not an array: props is an array, or a list of arrays"):
        plan.spread([1.0] * 20)
    with pytest.raises(TypeError, match=r"props\[0\] is a number"):
        plan.spread(list(np.ones(20)))  # NumPy scalars, of shape ()
    with pytest.raises(TypeError, match=r"positions\[0\] is a number"):
        plan.set_points([0.5, 0.5, 0.5])
    with pytest.raises(TypeError, match=r"out\[1\] is a number"):
        plan.interp([np.zeros(plan.mesh_shape)] * 2, out=[np.zeros(20), 0.0])


def test_zero_fields_are_a_no_op(plan):
    # As in C++ (spread({}, {}) does nothing): empty results of the right shape.
    assert plan.spread(np.zeros((0, 20))).shape == (0,) + plan.mesh_shape
    assert plan.interp(np.zeros((0,) + plan.mesh_shape)).shape == (0, 20)
    assert plan.interp_gradient(np.zeros((0,) + plan.mesh_shape)).shape == (0, 20, 3)
    assert plan.spread_gradient(np.zeros((0, 20, 3))).shape == (0,) + plan.mesh_shape


def test_zero_particles_are_valid():
    # As in C++: spread of no particles is a zero mesh, interp an empty result.
    plan = pmkit.Plan(pmkit.Grid.periodic((8, 8, 8), h=0.125), "mp4")
    plan.set_points(np.zeros((0, 3)))
    assert plan.num_points == 0
    rho = plan.spread(np.zeros(0))
    assert rho.shape == plan.mesh_shape and not rho.any()
    assert plan.spread(np.zeros((2, 0))).shape == (2,) + plan.mesh_shape
    assert plan.interp(np.ones(plan.mesh_shape)).shape == (0,)
    assert plan.interp_gradient(np.ones((2,) + plan.mesh_shape)).shape == (2, 0, 3)
    assert not plan.spread_gradient(np.zeros((0, 3))).any()


def test_no_result_is_made_before_set_points():
    fresh = pmkit.Plan(pmkit.Grid.periodic((64, 64, 64)), "mp4")
    with pytest.raises(pmkit.Error, match="spread called before set_points") as info:
        fresh.spread(np.zeros((200000, 1)))
    assert info.value.code == pmkit.ErrorCode.NotReady
    with pytest.raises(pmkit.Error, match="interp called before set_points"):
        fresh.interp(np.zeros((5, 1)))


@pytest.mark.parametrize("cells", [(16.7, 16, 16), (16.0, 16, 16), (16, "16", 16), (16, True, 16), (16, None, 16)])
def test_cells_are_integers(cells):
    with pytest.raises(TypeError, match=r"cells\[\d\] = .*: cells are positive integers"):
        pmkit.Grid.periodic(cells)


def test_numpy_integer_cells_are_taken():
    assert pmkit.Grid.periodic(np.array([16, 8, 4])).cells == (16, 8, 4)
    with pytest.raises(pmkit.Error, match=r"grid.cells\[0\] = -4") as info:
        pmkit.Plan(pmkit.Grid.periodic((-4, 8)), "tsc")
    assert info.value.code == pmkit.ErrorCode.InvalidArgument
