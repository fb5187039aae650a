"""The array libraries pmkit takes arrays from and gives results back in.

The compiled module reads and writes any array through DLPack, the buffer protocol or
``__cuda_array_interface__`` without copying. What it cannot do is make a new array of
the caller's library, or know that library's current CUDA stream: an ``ArrayLibrary``
does both, one per library (NumPy, PyTorch, CuPy, JAX), picked by the type of the
caller's first array. A library pmkit does not know gets NumPy results (so, on a CUDA
plan, its calls need ``out=``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np


class ArrayLibrary:
    """Results and streams for the arrays of one library (the base: NumPy, host memory)."""

    name = "numpy"

    def empty(self, like: Any, shape: Sequence[int], dtype: str) -> Any:
        """A new array of ``shape`` and ``dtype`` on ``like``'s device."""
        return np.empty(shape, dtype=dtype)

    def stream(self, like: Any) -> Optional[int]:
        """The handle of the library's current CUDA stream on ``like``'s device, or None
        where it has none (the plan then stays on the stream it is on)."""
        return None

    def before(self, arrays: Sequence[Any], name: str) -> None:
        """Checks the input arrays of argument ``name`` and makes the work pending on them
        visible to the plan's stream (JAX waits)."""

    def exported(self, arrays: List[Any]) -> List[Any]:
        """The arrays as the compiled module takes them (DLPack capsules, or as they are)."""
        return arrays

    def result(self, array: Any, plan: Any) -> Any:
        """The array a call returns for the result it wrote into ``array``."""
        return array


class TorchLibrary(ArrayLibrary):
    name = "torch"

    def __init__(self) -> None:
        import torch
        from torch.utils.dlpack import to_dlpack

        self._torch = torch
        self._to_dlpack = to_dlpack
        # The current stream's handle without a torch.cuda.Stream object made per call
        # (the raw query is what torch's own Triton launcher uses), or through the public
        # API where this torch lacks it.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._current_stream = raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)

    def empty(self, like: Any, shape: Sequence[int], dtype: str) -> Any:
        torch_dtype = getattr(self._torch, dtype, None)
        if torch_dtype is None:
            raise TypeError(f"this version of torch has no {dtype} tensors; pass out= as a NumPy array")
        return self._torch.empty(tuple(shape), dtype=torch_dtype, device=like.device)

    def before(self, arrays: Sequence[Any], name: str) -> None:
        # A plan's call is not recorded by autograd: a tensor that requires grad would
        # lose its gradient silently.
        if self._torch.is_grad_enabled():
            for i, array in enumerate(arrays):
                if getattr(array, "requires_grad", False):
                    which = name if len(arrays) == 1 else f"{name}[{i}]"
                    raise TypeError(
                        f"{which} requires grad: pmkit.Plan's calls are not differentiable; use pmkit.torch, "
                        f"or pass {which}.detach()"
                    )

    def exported(self, arrays: List[Any]) -> List[Any]:
        # torch.utils.dlpack.to_dlpack costs about a tenth of Tensor.__dlpack__, whose
        # stream handling pmkit does itself (streams.hpp).
        tensor = self._torch.Tensor
        return [self._to_dlpack(a) if isinstance(a, tensor) else a for a in arrays]

    def stream(self, like: Any) -> Optional[int]:
        if not like.is_cuda:
            return None
        return self._current_stream(like.device.index)


class CupyLibrary(ArrayLibrary):
    name = "cupy"

    def __init__(self) -> None:
        import cupy

        self._cupy = cupy

    def empty(self, like: Any, shape: Sequence[int], dtype: str) -> Any:
        with like.device:
            return self._cupy.empty(tuple(shape), dtype=dtype)

    def stream(self, like: Any) -> Optional[int]:
        with like.device:
            return self._cupy.cuda.get_current_stream().ptr


class JaxLibrary(ArrayLibrary):
    """JAX arrays are immutable and JAX does not expose its streams: results are written
    into new arrays of NumPy (CPU) or of torch or CuPy (GPU, whichever is installed) and
    handed to JAX through DLPack without a copy; on the GPU a call waits for its inputs
    before it starts and for the plan's stream before it returns."""

    name = "jax"

    def __init__(self) -> None:
        import jax

        self._jax = jax

    def empty(self, like: Any, shape: Sequence[int], dtype: str) -> Any:
        device = next(iter(like.devices()))
        if device.platform == "cpu":
            return np.empty(shape, dtype=dtype)
        try:
            import torch

            return torch.empty(tuple(shape), dtype=getattr(torch, dtype), device=f"cuda:{device.id}")
        except ImportError:
            pass
        try:
            import cupy
        except ImportError:
            raise TypeError("JAX arrays on the GPU need torch or CuPy installed for pmkit's results") from None
        with cupy.cuda.Device(device.id):
            return cupy.empty(tuple(shape), dtype=dtype)

    def before(self, arrays: Sequence[Any], name: str) -> None:
        for array in arrays:
            if hasattr(array, "block_until_ready"):
                array.block_until_ready()

    def result(self, array: Any, plan: Any) -> Any:
        plan.synchronize()
        return self._jax.dlpack.from_dlpack(array)


NUMPY = ArrayLibrary()
_FACTORIES: Dict[str, Callable[[], ArrayLibrary]] = {
    "numpy": lambda: NUMPY,
    "torch": TorchLibrary,
    "cupy": CupyLibrary,
    "jax": JaxLibrary,
    "jaxlib": JaxLibrary,
}
_BY_TYPE: Dict[type, ArrayLibrary] = {}


def library_of(array: Any) -> ArrayLibrary:
    """The ArrayLibrary of an array, by the top-level module of its type."""
    kind = type(array)
    library = _BY_TYPE.get(kind)
    if library is None:
        factory = _FACTORIES.get(kind.__module__.partition(".")[0])
        library = factory() if factory else NUMPY
        _BY_TYPE[kind] = library
    return library


def shape_of(array: Any, name: str) -> Tuple[int, ...]:
    """The shape of an array argument, from ``shape`` or ``__cuda_array_interface__``
    (TypeError if it has neither)."""
    shape = getattr(array, "shape", None)
    if shape is None:
        interface = getattr(array, "__cuda_array_interface__", None)
        if interface is None:
            raise TypeError(f"{name} must be an array, not {type(array).__name__}")
        shape = interface["shape"]
    return tuple(shape)
