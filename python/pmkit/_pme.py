"""Smooth particle-mesh Ewald (pmkit::PmePlan) in Python's idiom over the compiled plans."""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Union

from . import _pmkit
from ._arrays import library_of, shape_of
from ._plan import Array, _PlanBase, _size_mismatch

PmeParameters = _pmkit.PmeParameters


class PmeResult(NamedTuple):
    """What ``PmePlan.compute`` returns: arrays of the charges' library on their device,
    None where not asked for."""

    energy: Any  # () float64: the energy
    forces: Any  # (N, 3): the force on each charge
    potential: Any  # (N,): dE/dq_i, the electrostatic potential at each charge
    virial: Any  # (6,) float64: W = -dE/d(strain), Voigt order xx, yy, zz, yz, xz, xy


Output = Union[bool, Array, None]


class PmePlan(_PlanBase):
    """The Coulomb energy, forces, potentials and virial of point charges in a periodic
    orthorhombic box by smooth particle-mesh Ewald (pmkit::PmePlan).

        params = pmkit.PmeParameters.choose(box, cutoff=1.0, tolerance=5e-4)
        pme = pmkit.PmePlan(box, params, dtype="float32", backend="cuda")
        pme.set_points(x)                        # (N, 3), or three arrays of N
        r = pme.compute(q, potential=True)       # r.energy, r.forces, r.potential

    ``box`` is the box's three lengths (origin at 0; positions are wrapped into it).
    The energy is E_real + E_rec + E_self + E_background in Gaussian units (q_i q_j / r)
    times ``coulomb_constant`` (138.935458 for kJ/mol, nm and e); docs/pme.md gives the
    split and the accuracy. Arrays follow the rules of Plan: the plan's dtype (the energy
    and the virial float64) and memory (host for ``backend="cpu"``, GPU ``device`` for
    ``backend="cuda"``), no copies, the caller library's current stream on CUDA, results
    in the caller's array library.
    """

    def __init__(
        self,
        box: Sequence[float],
        parameters: PmeParameters,
        *,
        dtype: Any = "float64",
        backend: str = "cpu",
        device: int = 0,
        threads: int = 0,
        coulomb_constant: float = 1.0,
        deterministic: bool = False,
        max_away_fraction: float = 0.02,
    ) -> None:
        super().__init__(3, dtype, backend, device)
        if not isinstance(parameters, PmeParameters):
            raise TypeError(f"parameters must be a pmkit.PmeParameters, not {type(parameters).__name__}")
        box = tuple(float(b) for b in box)
        if len(box) != 3:
            raise ValueError(f"box = {box}: the three lengths of an orthorhombic box")
        options = self._options(_pmkit.PmeOptions(), threads)
        options.coulomb_constant = float(coulomb_constant)
        options.deterministic = bool(deterministic)
        options.max_away_fraction = float(max_away_fraction)
        cls = getattr(_pmkit, f"PmePlan_{self._dtype}")
        self._impl = cls(box, parameters, options)
        self._points_like: Optional[Array] = None

    @property
    def box(self) -> tuple:
        return tuple(self._impl.box)

    @property
    def parameters(self) -> PmeParameters:
        return self._impl.parameters

    @property
    def coulomb_constant(self) -> float:
        return self._impl.options.coulomb_constant

    def set_points(self, *positions: Array) -> None:
        """Validates and bins the charges' positions: an (N, 3) array, or three arrays of N."""
        self._bind(positions, update=False)

    def update_points(self, *positions: Array) -> None:
        """The same charges (same count and order) after a small move, a molecular
        dynamics step: the results of set_points, keeping the binning where it can."""
        self._bind(positions, update=True)

    def _bind(self, positions, update: bool) -> None:
        arrays = self._positions(positions)
        library = library_of(arrays[0])
        library.before(arrays, "positions")
        call = self._impl.update_points if update else self._impl.set_points
        call(library.exported(arrays), self._call_stream(library, arrays[0]))
        self._library, self._points_like = library, arrays[0]

    def compute(
        self,
        charges: Array,
        *,
        forces: Optional[Array] = None,
        energy: Output = True,
        potential: Output = False,
        virial: Output = False,
        reciprocal_only: bool = False,
    ) -> PmeResult:
        """The energy, forces, and where asked the potentials and the virial of the (N,)
        charges at the positions of the last set_points or update_points.

        Each output is made in the charges' library, or written into the array given:
        ``forces`` (N, 3); ``energy`` () or (1,) float64; ``potential`` (N,); ``virial``
        (6,) float64. ``energy``, ``potential`` and ``virial`` take True (make it), False
        (skip it) or an array. ``reciprocal_only`` computes E_rec and its parts alone,
        for codes that compute the real-space pairs, self term and background themselves.
        The virial W_ab = -dE/de_ab is the energy's derivative under a homogeneous strain
        of box and positions, sum over pairs of r_a F_b for pair forces: the pressure is
        (2 K + trace W) / (3 V), the stress -W / V.
        """
        if not self._impl.has_points:
            self._impl.compute([], [], [], [], [], False, None)  # pmkit.Error NotReady before any array is made
        shape = shape_of(charges, "charges")
        if shape != (self.num_points,):
            raise _size_mismatch(f"charges has shape {shape}; it must be (N,) with N = {self.num_points}, the plan's charges")
        library = library_of(charges)
        library.before([charges], "charges")
        n = self.num_points

        def output(given: Output, name: str, shape: tuple, dtype: str) -> Optional[Array]:
            if given is None or given is False:
                return None
            if given is True:
                return library.empty(charges, shape, dtype)
            return given

        f = output(True if forces is None else forces, "forces", (n, 3), self._dtype)
        e = output(energy, "energy", (1,), "float64")
        phi = output(potential, "potential", (n,), self._dtype)
        w = output(virial, "virial", (6,), "float64")
        e_flat = e.reshape((1,)) if e is not None and shape_of(e, "energy") == () else e

        def listed(a: Optional[Array]) -> List[Array]:
            return [] if a is None else library.exported([a])

        self._impl.compute(
            library.exported([charges]), listed(f), listed(e_flat), listed(phi), listed(w), bool(reciprocal_only),
            self._call_stream(library, charges),
        )

        def result(made: Optional[Array], given: Output) -> Any:
            if made is None or given is not True and given is not None:
                return made
            return library.result(made, self._impl)

        energy_result = result(e, energy)
        if energy_result is not None and energy is True:
            energy_result = energy_result.reshape(())
        return PmeResult(energy_result, result(f, forces), result(phi, potential), result(w, virial))

    def charge_gradient_of_forces(
        self, charges: Array, weights: Array, *, out: Optional[Array] = None, reciprocal_only: bool = False
    ) -> Array:
        """The gradient in the charges of sum_j weights_j . F_j, (N,), for the forces that
        ``compute`` gives (``reciprocal_only``: compute(reciprocal_only=True)'s): a loss on
        forces backpropagated to charges a model predicts. ``weights`` is (N, 3). Exact
        (the forces are quadratic in the charges); about two computes."""
        if not self._impl.has_points:
            self._impl.charge_gradient_of_forces([], [], [], False, None)  # pmkit.Error NotReady
        library = library_of(charges)
        library.before([charges, weights], "charges")
        result = library.empty(charges, (self.num_points,), self._dtype) if out is None else out
        self._impl.charge_gradient_of_forces(
            library.exported([charges]), library.exported([weights]), library.exported([result]),
            bool(reciprocal_only), self._call_stream(library, charges),
        )
        return result if out is not None else library.result(result, self._impl)

    def __repr__(self) -> str:
        return (
            f"pmkit.PmePlan(box={self.box}, {self.parameters!r}, dtype={self._dtype!r}, backend={self._backend!r}, "
            f"num_points={self.num_points})"
        )
