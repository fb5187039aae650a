"""The PyTorch formulation of P2M and M2P that users write without pmkit: index_add_
for the spread, gathers for the interpolation, weights evaluated per node. 3D periodic
K^3 mesh, h = 1, float32, uniform random particles. Prints "case,milliseconds" lines
(median of CUDA-event timings after warm-up) for gpu_bench --torch.
"""
import sys

import torch


def mp4(r):
    r = r.abs()
    return torch.where(r < 1, 1 - 2.5 * r**2 + 1.5 * r**3,
                       torch.where(r < 2, 0.5 * (2 - r) ** 2 * (1 - r), torch.zeros_like(r)))


def linear(r):
    return torch.clamp(1 - r.abs(), min=0)


def stencil(x, K, support, weight):
    """Per dimension: the support's node indices (wrapped) and weights."""
    base = torch.floor(x).to(torch.int64) - (support - 1) // 2
    idx, w = [], []
    for d in range(x.shape[1]):
        nodes = [base[:, d] + a for a in range(support)]
        w.append([weight(x[:, d] - n.to(x.dtype)) for n in nodes])
        idx.append([torch.remainder(n, K) for n in nodes])
    return idx, w


def p2m(x, q, K, support, weight):
    idx, w = stencil(x, K, support, weight)
    mesh = torch.zeros(K ** 3, device=x.device, dtype=x.dtype)
    for c in range(support):
        for b in range(support):
            wcb = w[2][c] * w[1][b] * q
            icb = (idx[2][c] * K + idx[1][b]) * K
            for a in range(support):
                mesh.index_add_(0, icb + idx[0][a], wcb * w[0][a])
    return mesh


def m2p(x, mesh, K, support, weight):
    idx, w = stencil(x, K, support, weight)
    out = torch.zeros(x.shape[0], device=x.device, dtype=x.dtype)
    for c in range(support):
        for b in range(support):
            wcb = w[2][c] * w[1][b]
            icb = (idx[2][c] * K + idx[1][b]) * K
            for a in range(support):
                out += wcb * w[0][a] * mesh[icb + idx[0][a]]
    return out


def median_ms(f, reps=5, warm=1):
    for _ in range(warm):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    quick = "--quick" in sys.argv
    dev = "cuda"
    cases = [("mp4", 24, 256), ("mp4", 22, 128), ("mp4", 20, 64), ("linear", 24, 256), ("mp4", 24, 128)]
    for name, log2n, K in cases:
        log2n = min(log2n, 20) if quick else log2n
        n = 1 << log2n
        g = torch.Generator(device=dev)
        g.manual_seed(1)
        x = torch.rand((n, 3), device=dev, generator=g) * K
        q = torch.rand(n, device=dev, generator=g)
        support, weight = (4, mp4) if name == "mp4" else (2, linear)
        tag = f"{name}-3d-f-2^{log2n}-{K}"
        print(f"p2m-{tag},{median_ms(lambda: p2m(x, q, K, support, weight)):.4f}", flush=True)
        mesh = p2m(x, q, K, support, weight)
        print(f"m2p-{tag},{median_ms(lambda: m2p(x, mesh, K, support, weight)):.4f}", flush=True)


if __name__ == "__main__":
    main()
