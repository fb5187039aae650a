"""The mesh plan and the pair plan, in Python's idiom over the compiled ones."""

from __future__ import annotations

import itertools
import numbers
import weakref
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _pmkit
from ._arrays import NUMPY, ArrayLibrary, library_of, shape_of
from ._geometry import Box, Grid, _choice

_BACKENDS = {"cpu": _pmkit.Backend.Cpu, "cuda": _pmkit.Backend.Cuda}
_SPREAD_METHODS = {
    "auto": _pmkit.SpreadMethod.Auto,
    "cpu_slabs": _pmkit.SpreadMethod.CpuSlabs,
    "cpu_private_meshes": _pmkit.SpreadMethod.CpuPrivateMeshes,
    "cuda_global_atomics": _pmkit.SpreadMethod.CudaGlobalAtomics,
    "cuda_shared_tiles": _pmkit.SpreadMethod.CudaSharedTiles,
    "cuda_cell_moments": _pmkit.SpreadMethod.CudaCellMoments,
}
_PAIR_METHODS = {
    "auto": _pmkit.PairMethod.Auto,
    "thread_per_particle": _pmkit.PairMethod.CudaThreadPerParticle,
    "three_threads_per_particle": _pmkit.PairMethod.CudaThreeThreadsPerParticle,
    "block_per_cell": _pmkit.PairMethod.CudaBlockPerCell,
    "x_pencil": _pmkit.PairMethod.CudaXPencil,
    "half_shell": _pmkit.PairMethod.CudaHalfShell,
    "compact_pencil": _pmkit.PairMethod.CudaCompactPencil,
    "row_split": _pmkit.PairMethod.CudaRowSplit,
}

Array = Any  # an array of NumPy, PyTorch, CuPy, JAX, or anything with DLPack or the buffer protocol
Arrays = Union[Array, Sequence[Array]]
KernelLike = Union[str, _pmkit.Kernel]


# Every mesh plan by its key, a string: pmkit.torch's operators take plans by key, as
# torch.library operators take no Python objects.
_PLANS: "weakref.WeakValueDictionary[str, Plan]" = weakref.WeakValueDictionary()
_KEYS = itertools.count()


def plan_of_key(key: str) -> "Plan":
    """The live mesh plan of a key (Plan.key)."""
    return _PLANS[key]


def _dtype_name(dtype: Any) -> str:
    """'float32' or 'float64': the dtype as numpy.dtype reads it (so float, 'float', 'f8',
    'double' and np.float64 are float64; 'f4' and np.float32 float32), or a torch dtype."""
    name = None
    if type(dtype).__module__ == "torch":  # torch.float32, torch.float64: numpy.dtype reads no torch dtype
        name = str(dtype).replace("torch.", "")
    else:
        try:
            resolved = np.dtype(dtype)
            name = resolved.name if resolved.isnative else None
        except (TypeError, ValueError):
            pass
    if name not in ("float32", "float64"):
        raise TypeError(
            f"dtype = {dtype!r}: pmkit plans are float32 or float64, given as numpy.dtype reads them "
            "('float32', 'f4', np.float32; 'float64', 'f8', float, np.float64) or as torch.float32, torch.float64"
        )
    return name


def _require_arrays(items: List[Any], name: str) -> None:
    """A TypeError naming the argument where an item of its list is a number: a list is
    one array per item, so a list of numbers is most likely meant as one array."""
    for i, item in enumerate(items):
        if isinstance(item, numbers.Number) or getattr(item, "shape", None) == ():
            raise TypeError(
                f"{name}[{i}] is a number, not an array: {name} is an array, or a list of arrays; convert a list "
                f"of numbers first (numpy.asarray({name}, dtype=...))"
            )


def _as_list(arrays: Arrays, name: str) -> Tuple[List[Array], bool]:
    """The arrays of an argument as a list, and whether it was one array."""
    if isinstance(arrays, (list, tuple)):
        _require_arrays(list(arrays), name)
        return list(arrays), False
    return [arrays], True


def _require_mutable(arrays: List[Any], name: str, because: str) -> None:
    """A ValueError where an array pmkit would write into is a JAX array: JAX arrays are
    immutable (their DLPack export does not say so)."""
    for i, array in enumerate(arrays):
        if library_of(array).name == "jax":
            which = name if len(arrays) == 1 else f"{name}[{i}]"
            raise ValueError(f"{which} is read-only (a JAX array, immutable); {because}")


def _size_mismatch(message: str) -> Exception:
    """pmkit.Error with code SizeMismatch, as the compiled plan raises for a particle count
    that is not the plan's."""
    error = _pmkit.Error(message)
    error.code = _pmkit.ErrorCode.SizeMismatch
    return error


def _stacked_fields(shape: Tuple[int, ...], name: str, expected: Tuple[int, ...], what: str) -> Tuple[int, ...]:
    """The leading (F,) or () of an array of shape ``expected`` or (F, *expected); another
    shape is a ValueError naming the argument and ``what`` the arrays are."""
    dims = len(expected)
    if len(shape) not in (dims, dims + 1) or shape[-dims:] != expected:
        stacked = ", ".join(map(str, ("F",) + expected))
        raise ValueError(f"{name} has shape {shape}; {what} are {expected} (C order, x last), or ({stacked}) for F fields")
    return shape[:-dims]


def _kernel(kernel: KernelLike) -> _pmkit.Kernel:
    if isinstance(kernel, _pmkit.Kernel):
        return kernel
    if isinstance(kernel, str):
        return _pmkit.Kernel(kernel)
    raise TypeError(f"kernel = {kernel!r}: a kernel name ('mp4', 'tsc', ...) or a pmkit.Kernel")


class _Runner:
    """What every compiled object that maps arrays to arrays shares: dtype, backend and
    device, the caller's stream, and the call from input arrays to output arrays."""

    def __init__(self, dim: int, dtype: Any, backend: str, device: int) -> None:
        self._dtype = _dtype_name(dtype)
        self._backend = backend
        _choice(backend, _BACKENDS, "backend")
        self._device = int(device)
        self._dim = dim

    def _options(self, options: Any, threads: int) -> Any:
        """A plan's options with its ExecutionOptions set: backend, device, threads."""
        options.backend = _BACKENDS[self._backend]
        options.device = self._device
        options.num_threads = int(threads)
        return options

    def _call_stream(self, library: ArrayLibrary, like: Array) -> Optional[int]:
        """The stream a call runs on: the caller library's current stream on CUDA plans
        (None where it has none, and on the CPU: the plan stays where it is)."""
        if self._backend == "cpu":
            return None
        return library.stream(like)

    def _ready(self, method: str, flags: Tuple[bool, ...]) -> None:
        """Raises the compiled object's error of a call it is not ready for (no arrays read)."""

    def _prepare(self, method: str, inputs: Arrays, name: str, out: Optional[Arrays], fields, tail: Tuple[int, ...],
                 flags: Tuple[bool, ...], result_dtype: Optional[str] = None) -> Tuple:
        """The inputs and outputs of one compiled call as lists, the outputs made where not
        given: ``fields(shape, name)`` checks an input's shape and gives its leading field
        axes; a result is those followed by ``tail``, of ``result_dtype`` (the dtype)."""
        items, single = _as_list(inputs, name)
        if not items:
            raise ValueError(f"{name} is empty")
        self._ready(method, flags)
        names = [name if single else f"{name}[{i}]" for i in range(len(items))]
        leading = [fields(shape_of(item, n), n) for item, n in zip(items, names)]
        library = library_of(items[0])
        library.before(items, name)
        if out is None:
            outputs = [library.empty(items[0], f + tail, result_dtype or self._dtype) for f in leading]
        else:
            outputs, _ = _as_list(out, "out")
        return items, single, outputs, library

    def _call(self, method: str, prepared: Tuple, out: Optional[Arrays], *flags: bool) -> Any:
        """Runs one compiled call on what _prepare gave; its results (``out`` if given)."""
        items, single, outputs, library = prepared
        stream = self._call_stream(library, items[0])
        getattr(self._impl, method)(library.exported(items), library.exported(outputs), *flags, stream)
        if out is not None:
            return out
        results = [library.result(o, self._impl) for o in outputs]
        return results[0] if single else results

    def _run(self, method: str, inputs: Arrays, name: str, out: Optional[Arrays], fields, tail: Tuple[int, ...],
             *flags: bool, result_dtype: Optional[str] = None) -> Any:
        """Runs one compiled call from ``inputs`` (argument ``name``) to ``out`` or new results."""
        prepared = self._prepare(method, inputs, name, out, fields, tail, flags, result_dtype)
        return self._call(method, prepared, out, *flags)

    @property
    def dtype(self) -> str:
        """'float32' or 'float64'."""
        return self._dtype

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def backend(self) -> str:
        """'cpu' or 'cuda'."""
        return self._backend

    @property
    def device(self) -> int:
        return self._device

    def synchronize(self) -> None:
        """Waits for the work queued on the CUDA stream (nothing to wait for on the CPU)."""
        self._impl.synchronize()


class _PlanBase(_Runner):
    """What the particle plans share: the stream, the positions."""

    def __init__(self, dim: int, dtype: Any, backend: str, device: int) -> None:
        super().__init__(dim, dtype, backend, device)
        self._library: ArrayLibrary = NUMPY  # of the positions; binned_order's results

    def _positions(self, positions: Tuple[Array, ...]) -> List[Array]:
        """An (N, D) array, D arrays of N, or one sequence of D arrays, as a list."""
        if len(positions) == 1 and isinstance(positions[0], (list, tuple)):
            positions = tuple(positions[0])
        if not positions:
            raise TypeError("positions: give an (N, D) array or D arrays of N")
        _require_arrays(list(positions), "positions")
        return list(positions)

    @property
    def stream(self) -> int:
        """The handle of the CUDA stream the plan's last call ran on, that is the caller's
        current stream then (0: the default stream)."""
        return self._impl.options.stream

    @property
    def num_points(self) -> int:
        return self._impl.num_points

    @property
    def has_points(self) -> bool:
        return self._impl.has_points

    @property
    def last_timings(self) -> Tuple[float, float]:
        """Seconds of the last call: (transfer, compute)."""
        t = self._impl.last_timings
        return t.transfer_s, t.compute_s

    def synchronize(self) -> None:
        """Waits for the work queued on the plan's CUDA stream, then raises the error of a
        position that set_points or update_points rejected on the device (on CUDA arrays
        those calls return before their check has run; a later call reports it too).
        Nothing to wait for on the CPU, whose calls check before they return."""
        self._impl.synchronize()


class _MeshCalls(_PlanBase):
    """The calls of the mesh plans, single and distributed: spread, interp and their
    gradients on the meshes of ``_mesh_shape``."""

    @property
    def grid(self) -> Grid:
        return self._grid

    @property
    def kernel(self) -> _pmkit.Kernel:
        return self._impl.kernel

    def _mesh_options(self, threads: int, deterministic: bool, spread_method: str, host_arrays: bool,
                      max_away_fraction: float) -> Any:
        """The options of a mesh plan (pmkit::Options)."""
        options = self._options(_pmkit.Options(), threads)
        options.deterministic = bool(deterministic)
        options.spread_method = _choice(spread_method, _SPREAD_METHODS, "spread_method")
        options.host_arrays = bool(host_arrays)
        options.max_away_fraction = float(max_away_fraction)
        return options

    def _ready(self, method: str, flags: Tuple[bool, ...]) -> None:
        if not self._impl.has_points:
            # The compiled call raises NotReady before it reads an array: no result is made.
            getattr(self._impl, method)([], [], *flags, None)

    def _particle_fields(self, components: Tuple[int, ...]):
        """The shape check of particle values, (N,) or (F, N) (``components`` ()), or of
        vectors, (N, D) or (F, N, D) (``components`` (D,)): the leading (F,) or (). A shape
        of other dimensions is a ValueError, other extents pmkit.Error SizeMismatch, as the
        compiled plan's for a particle count; both name the forms, before a result is made."""
        symbols = ("N",) + ("D",) * len(components)
        forms = f"({', '.join(symbols)}{',' if not components else ''}) or (F, {', '.join(symbols)})"

        def fields(shape: Tuple[int, ...], name: str) -> Tuple[int, ...]:
            want = (self.num_points,) + components
            k = len(want)
            if len(shape) not in (k, k + 1):
                raise ValueError(f"{name} has shape {shape}; it must be {forms}")
            if shape[-k:] != want:
                sizes = f"N = {want[0]}, the plan's particles" + (f", D = {self._dim}" if components else "")
                raise _size_mismatch(f"{name} has shape {shape}; it must be {forms} with {sizes} (F fields)")
            return shape[:-k]

        return fields

    def _mesh_fields(self, shape: Tuple[int, ...], name: str) -> Tuple[int, ...]:
        """The shape check of meshes, ``mesh_shape`` or (F, *mesh_shape): the leading (F,) or ()."""
        return _stacked_fields(shape, name, self._mesh_shape, "the plan's meshes")

    def spread(self, props: Arrays, out: Optional[Arrays] = None, *, add: bool = False) -> Arrays:
        """P2M: each particle's value spread onto the mesh, sum over particles of
        ``value * W(x_p - x_node)``. ``props`` is (N,) or (F, N); the result is
        ``mesh_shape`` or (F, *mesh_shape). ``add=True`` adds to ``out`` instead of
        overwriting it."""
        if add and out is None:
            raise ValueError("add=True adds to out: give out=")
        return self._run("spread", props, "props", out, self._particle_fields(()), self._mesh_shape, bool(add))

    def interp(self, meshes: Arrays, out: Optional[Arrays] = None) -> Arrays:
        """M2P: the mesh at each particle, sum over nodes of ``W(x_p - x_node) * mesh``, in
        the caller's order of the particles. ``meshes`` is ``mesh_shape`` or
        (F, *mesh_shape); the result (N,) or (F, N)."""
        return self._run("interp", meshes, "meshes", out, self._mesh_fields, (self.num_points,))

    def interp_gradient(self, meshes: Arrays, out: Optional[Arrays] = None) -> Arrays:
        """The gradient of ``interp`` with respect to each particle's position: (N, D) for
        one mesh, (F, N, D) for F (one particle's components side by side)."""
        return self._run("interp_gradient", meshes, "meshes", out, self._mesh_fields, (self.num_points, self._dim))

    def spread_gradient(self, vectors: Arrays, out: Optional[Arrays] = None, *, add: bool = False) -> Arrays:
        """The adjoint of ``interp_gradient`` (a dipole spread): sum over particles and axes
        of ``vectors[p, d] * dW/dx_d(x_p - x_node)``. ``vectors`` is (N, D) or (F, N, D);
        the result ``mesh_shape`` or (F, *mesh_shape)."""
        if add and out is None:
            raise ValueError("add=True adds to out: give out=")
        return self._run("spread_gradient", vectors, "vectors", out, self._particle_fields((self._dim,)),
                         self._mesh_shape, bool(add))


class Plan(_MeshCalls):
    """Particle <-> mesh interpolation on one grid with one kernel (pmkit::Plan).

    ``set_points`` bins the particles once; ``spread`` (P2M), ``interp`` (M2P),
    ``interp_gradient`` and ``spread_gradient`` reuse that binning as often as needed.

    Arrays are those of NumPy, PyTorch, CuPy or JAX (or anything with DLPack, the buffer
    protocol or ``__cuda_array_interface__``), of the plan's dtype and in its memory: the
    host for ``backend="cpu"``, the GPU ``device`` for ``backend="cuda"`` (host memory
    with ``host_arrays=True``, which the plan copies). They are read and written in
    place, by stride: no copy is made, and an array that would need one (another dtype,
    another device, a mesh that is not contiguous) is a TypeError or ValueError naming
    it. Results are new arrays of the library of the first input, on its device, unless
    ``out=`` gives arrays to write (returned as given).

    Shapes, with N particles, D dimensions and F fields:

    - positions: (N, D), or D arrays of N;
    - particle values (``spread``'s input, ``interp``'s result): (N,), or (F, N);
    - meshes: ``mesh_shape`` = (nz, ny, nx) (C order, x last), or (F, nz, ny, nx);
    - gradients and vectors (``interp_gradient``'s result, ``spread_gradient``'s input):
      (N, D), or (F, N, D): one particle's D components side by side, as positions.

    Each argument may also be a list of such arrays; the result is then a list too. An
    input's shape is checked before a result is made.

    ``dtype`` is read as ``numpy.dtype`` reads it (``float`` and ``"f8"`` are float64,
    ``"f4"`` float32), or is a torch dtype; float32 and float64 are taken.

    On the CUDA backend a call runs on the caller library's current stream (torch's or
    CuPy's), in order with the work queued there before and after it, and returns
    without waiting, except ``set_points`` and ``update_points``. JAX arrays, whose
    streams JAX does not expose, are waited for before a call, and the call's results
    before it returns.

    ``interp_gradient`` and ``spread_gradient`` raise pmkit.Error with code Unsupported
    on a backend that does not have them.
    """

    def __init__(
        self,
        grid: Grid,
        kernel: KernelLike = "mp4",
        *,
        dtype: Any = "float64",
        backend: str = "cpu",
        device: int = 0,
        deterministic: bool = False,
        threads: int = 0,
        spread_method: str = "auto",
        host_arrays: bool = False,
        max_away_fraction: float = 0.005,
    ) -> None:
        if not isinstance(grid, Grid):
            raise TypeError(f"grid must be a pmkit.Grid, not {type(grid).__name__}")
        super().__init__(grid.dim, dtype, backend, device)
        options = self._mesh_options(threads, deterministic, spread_method, host_arrays, max_away_fraction)
        self._grid = grid
        cls = getattr(_pmkit, f"Plan_{self._dtype}_{grid.dim}d")
        self._impl = cls(grid._cpp(), _kernel(kernel), options)
        self._mesh_shape: Tuple[int, ...] = tuple(self._impl.mesh_shape)
        self._points_like: Optional[Array] = None
        # Which positions the plan holds, as pmkit.torch identifies them (None: other ones).
        self._points_token: Any = None
        self._key = f"plan{next(_KEYS)}"
        _PLANS[self._key] = self

    @property
    def key(self) -> str:
        """The plan's key for pmkit.torch's operators (unique in the process)."""
        return self._key

    @property
    def mesh_shape(self) -> Tuple[int, ...]:
        """The shape of one mesh array: (nz, ny, nx) in 3D, (ny, nx) in 2D (C order, x last)."""
        return self._mesh_shape

    @property
    def mesh_size(self) -> int:
        return self._impl.mesh_size

    @property
    def num_away(self) -> int:
        """Particles handled outside their bin since the last full binning (update_points)."""
        return self._impl.num_away

    @property
    def spread_method(self) -> str:
        """The method spread runs with (auto resolved)."""
        return self._impl.spread_method

    def set_points(self, *positions: Array) -> None:
        """Validates and bins the particles: an (N, D) array, or D arrays of N (x, y[, z])."""
        arrays = self._positions(positions)
        library = library_of(arrays[0])
        library.before(arrays, "positions")
        self._impl.set_points(library.exported(arrays), self._call_stream(library, arrays[0]))
        self._library = library
        self._points_like = arrays[0]
        self._points_token = None

    def update_points(self, *positions: Array) -> None:
        """The same particles (same count and order) after a small move; see pmkit::Plan."""
        arrays = self._positions(positions)
        library = library_of(arrays[0])
        library.before(arrays, "positions")
        self._impl.update_points(library.exported(arrays), self._call_stream(library, arrays[0]))
        self._points_token = None

    def _points_output(self, out: Optional[Array], shape: Tuple[int, ...], dtype: str) -> Array:
        # Before set_points: an empty array, which the compiled plan refuses (NotReady).
        return self._library.empty(self._points_like, shape, dtype) if out is None else out

    def binned_order(self, out: Optional[Array] = None) -> Array:
        """(N,) uint32: the caller's index of the k-th particle in the plan's binned order.
        Keeping the particle arrays in this order makes every call faster."""
        order = self._points_output(out, (self.num_points,), "uint32")
        self._impl.binned_order(self._library.exported([order]), self._call_stream(self._library, order))
        return order if out is not None else self._library.result(order, self._impl)

    def binned_positions(self, out: Optional[Array] = None) -> Array:
        """(N, D): the binned particles' positions relative to the grid's origin, wrapped on
        periodic axes, as the plan holds them (in binned order)."""
        positions = self._points_output(out, (self.num_points, self._dim), self._dtype)
        self._impl.binned_positions(self._library.exported([positions]), self._call_stream(self._library, positions))
        return positions if out is not None else self._library.result(positions, self._impl)

    def __repr__(self) -> str:
        return (
            f"pmkit.Plan({self._grid!r}, {self.kernel!r}, dtype={self._dtype!r}, backend={self._backend!r}, "
            f"num_points={self.num_points})"
        )


class PairPlan(_PlanBase):
    """Interactions of the particles closer than a cutoff, on cell lists (pmkit::PairPlan),
    with the built-in kernels: Lennard-Jones and neighbour counts.

    The domain is a Box, or the Grid of a mesh plan on the same particles. Arrays follow
    the rules of Plan: the plan's dtype and memory, no copies, results in the caller's
    array library.
    """

    def __init__(
        self,
        domain: Union[Box, Grid],
        cutoff: float,
        *,
        dtype: Any = "float64",
        backend: str = "cpu",
        device: int = 0,
        threads: int = 0,
        half_shell: bool = True,
        method: str = "auto",
    ) -> None:
        if isinstance(domain, Grid):
            domain = Box.of(domain)
        if not isinstance(domain, Box):
            raise TypeError(f"domain must be a pmkit.Box or pmkit.Grid, not {type(domain).__name__}")
        super().__init__(domain.dim, dtype, backend, device)
        options = self._options(_pmkit.PairOptions(), threads)
        options.half_shell = bool(half_shell)
        options.method = _choice(method, _PAIR_METHODS, "method")
        self._box = domain
        cls = getattr(_pmkit, f"PairPlan_{self._dtype}_{domain.dim}d")
        self._impl = cls(domain._cpp(), float(cutoff), options)
        self._points_like: Optional[Array] = None

    @property
    def box(self) -> Box:
        return self._box

    @property
    def cutoff(self) -> float:
        return self._impl.cutoff

    @property
    def cells(self) -> Tuple[int, ...]:
        """Cells of the cell list per axis (x first)."""
        return tuple(self._impl.cells)

    @property
    def last_method(self) -> str:
        """The CUDA method of the last compute ('auto' on the CPU)."""
        return self._impl.last_method

    def set_points(self, *positions: Union[Array, Plan]) -> None:
        """Bins the particles: an (N, D) array, D arrays of N, or a mesh Plan over the same
        domain, whose binned particles are taken as they are (no new validation)."""
        if len(positions) == 1 and isinstance(positions[0], Plan):
            mesh = positions[0]
            if mesh.dtype != self._dtype or mesh.dim != self._dim:
                raise TypeError(f"the mesh plan is {mesh.dtype} {mesh.dim}D, this pair plan {self._dtype} {self._dim}D")
            self._impl.set_points_of(mesh._impl, self._call_stream(mesh._library, mesh._points_like))
            self._library, self._points_like = mesh._library, mesh._points_like
            return
        arrays = self._positions(positions)
        library = library_of(arrays[0])
        library.before(arrays, "positions")
        self._impl.set_points(library.exported(arrays), self._call_stream(library, arrays[0]))
        self._library, self._points_like = library, arrays[0]

    def _compute(self, kernel: str, columns: int, out: Optional[Array], *params: float) -> Array:
        shape = (self.num_points, columns) if columns > 1 else (self.num_points,)
        result = self._library.empty(self._points_like, shape, self._dtype) if out is None else out
        getattr(self._impl, kernel)(*params, self._library.exported([result]), self._call_stream(self._library, result))
        return result if out is not None else self._library.result(result, self._impl)

    def lennard_jones(
        self,
        epsilon: float = 1.0,
        sigma: float = 1.0,
        cutoff: Optional[float] = None,
        softening: float = 0.0,
        out: Optional[Array] = None,
    ) -> Tuple[Array, Array]:
        """The truncated and shifted Lennard-Jones force on each particle and its potential
        energy (half of each pair's): ``(forces (N, D), energy (N,))``, two views of one
        (N, D + 1) array (``out=``, if given). ``cutoff`` is the plan's (the default), where
        the plan's pairs end; ``epsilon`` finite, ``sigma`` positive, ``softening`` zero or
        positive: another value is pmkit.Error naming it."""
        cutoff = self.cutoff if cutoff is None else float(cutoff)
        result = self._compute("lennard_jones", self._dim + 1, out, float(epsilon), float(sigma), cutoff,
                               float(softening))
        return result[:, : self._dim], result[:, self._dim]

    def neighbour_count(self, out: Optional[Array] = None) -> Array:
        """Each particle's number of neighbours closer than the cutoff, (N,) in the plan's dtype."""
        return self._compute("neighbour_count", 1, out)

    def __repr__(self) -> str:
        return f"pmkit.PairPlan({self._box!r}, cutoff={self.cutoff}, dtype={self._dtype!r}, backend={self._backend!r})"
