"""Periodic real <-> complex FFTs of a mesh (pmkit::RealFft), for the arrays the plans take."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

from . import _pmkit
from ._geometry import _counts
from ._plan import Arrays, _as_list, _require_mutable, _Runner, _stacked_fields


class RealFft(_Runner):
    """Periodic real <-> complex FFTs of one mesh shape (pmkit::RealFft): FFTW on the CPU,
    cuFFT on a CUDA device, planned once here.

    ``shape`` is the real mesh's shape in C order with x last, as ``Plan.mesh_shape``
    gives it (2 or 3 axes). ``forward`` keeps the Hermitian half along x:
    ``spectrum_shape`` is ``shape`` with its last axis ``nx // 2 + 1``, the layout of
    ``numpy.fft.rfftn``. Neither transform scales::

        fft.forward(f)  == numpy.fft.rfftn(f)
        fft.inverse(F)  == numpy.fft.irfftn(F, s=fft.shape) * fft.size
        fft.inverse(fft.forward(f)) == f * fft.size

    Real meshes are of ``dtype``, spectra of ``complex_dtype`` (complex64 for float32,
    complex128 for float64), contiguous, in the plan's memory (host for ``backend="cpu"``,
    GPU ``device`` for ``backend="cuda"``); a leading axis of F fields transforms F meshes.
    Arrays are read and written in place, results made in the caller's array library, on
    its current stream, as for Plan. ``inverse`` reads its spectrum through a copy unless
    ``overwrite_spectrum=True`` lets it use the spectrum as scratch (FFTW's and cuFFT's
    multidimensional inverses do), which saves that copy.
    """

    def __init__(self, shape: Sequence[int], *, dtype: Any = "float64", backend: str = "cpu", device: int = 0,
                 threads: int = 0) -> None:
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__"):
            raise TypeError(f"shape = {shape!r}: the real mesh's shape, a sequence of 2 or 3 integers (C order, x last)")
        shape = _counts(shape, "shape")
        if len(shape) not in (2, 3):
            raise ValueError(f"shape = {shape}: RealFft meshes are 2D or 3D (2 or 3 axes, C order, x last)")
        super().__init__(len(shape), dtype, backend, device)
        options = self._options(_pmkit.FftOptions(), threads)
        cls = getattr(_pmkit, f"RealFft_{self._dtype}_{self._dim}d")
        self._impl = cls(tuple(reversed(shape)), options)  # the C++ shape is x first
        self._shape: Tuple[int, ...] = tuple(self._impl.shape)
        self._spectrum_shape: Tuple[int, ...] = tuple(self._impl.spectrum_shape)
        self._complex_dtype = "complex64" if self._dtype == "float32" else "complex128"

    @property
    def shape(self) -> Tuple[int, ...]:
        """The real mesh's shape, C order (x last)."""
        return self._shape

    @property
    def spectrum_shape(self) -> Tuple[int, ...]:
        """The spectrum's shape: ``shape`` with its last axis ``nx // 2 + 1``."""
        return self._spectrum_shape

    @property
    def size(self) -> int:
        """Points of the real mesh: the factor of ``inverse(forward(f))``."""
        n = 1
        for extent in self._shape:
            n *= extent
        return n

    @property
    def complex_dtype(self) -> str:
        """'complex64' or 'complex128': the spectrum's dtype."""
        return self._complex_dtype

    @property
    def stream(self) -> int:
        """The handle of the CUDA stream of the last transform (0: the default stream)."""
        return self._impl.options.stream

    def _real_fields(self, shape: Tuple[int, ...], name: str) -> Tuple[int, ...]:
        return _stacked_fields(shape, name, self._shape, "the FFT's real meshes")

    def _spectrum_fields(self, shape: Tuple[int, ...], name: str) -> Tuple[int, ...]:
        return _stacked_fields(shape, name, self._spectrum_shape, "the FFT's spectra")

    def forward(self, real: Arrays, out: Optional[Arrays] = None) -> Arrays:
        """The spectrum of ``real`` (``shape`` or (F, *shape), of ``dtype``): ``spectrum_shape``
        or (F, *spectrum_shape), of ``complex_dtype``; ``real`` is left as it was."""
        return self._run("forward", real, "real", out, self._real_fields, self._spectrum_shape,
                         result_dtype=self._complex_dtype)

    def inverse(self, spectrum: Arrays, out: Optional[Arrays] = None, *, overwrite_spectrum: bool = False) -> Arrays:
        """The real mesh of ``spectrum`` (``spectrum_shape`` or (F, *spectrum_shape), of
        ``complex_dtype``), unscaled: ``shape`` or (F, *shape). The imaginary parts of the
        self-conjugate wavenumbers (0, and n/2 on even axes) are ignored. ``spectrum`` is
        left as it was unless ``overwrite_spectrum=True`` (then its values are undefined
        after the call, and it must be writable)."""
        if overwrite_spectrum:
            _require_mutable(_as_list(spectrum, "spectrum")[0], "spectrum", "overwrite_spectrum=True writes into it")
        return self._run("inverse", spectrum, "spectrum", out, self._spectrum_fields, self._shape,
                         bool(overwrite_spectrum))

    def __repr__(self) -> str:
        return f"pmkit.RealFft({self._shape}, dtype={self._dtype!r}, backend={self._backend!r})"
