"""Learns per-atom charges through pmkit's differentiable PME.

A batch of random periodic systems (a few species of atoms at random places) gets its
"true" charges from a fixed model of each atom's species and neighbourhood; the targets
are the systems' Ewald energies and the forces on the atoms. A small torch model
predicts the charges from the same features and is trained by backpropagation through
pmkit.torch.pme into its weights: the energies' gradient in the charges is the
potentials, the forces' is PmePlan.charge_gradient_of_forces.

    python examples/python/train_charges.py [--steps 300] [--systems 8] [--device cuda]

It prints the loss as it falls; with --check it exits non-zero unless the loss falls by
--factor (the test in python/tests/test_examples.py runs it so).
"""

import argparse
import sys

import torch

import pmkit.torch as pt

SPECIES = 3


def features(positions, species, cell, batch):
    """Per-atom features: the species one-hot, and a smooth count of neighbours within
    about 0.4 of the atom in its own periodic system (computed once: positions are data)."""
    onehot = torch.nn.functional.one_hot(species, SPECIES).to(positions.dtype)
    delta = positions[:, None, :] - positions[None, :, :]
    box = cell[batch]
    delta = delta - box[:, None, :] * torch.round(delta / box[:, None, :])
    same = batch[:, None] == batch[None, :]
    distance = delta.norm(dim=-1)
    neighbours = (torch.sigmoid((0.4 - distance) / 0.05) * same).sum(1) - torch.sigmoid(torch.tensor(8.0))
    return torch.cat([onehot, neighbours[:, None] / 4], dim=1)


def neutral(charges, batch, systems):
    """The charges less each system's mean: every system neutral."""
    total = charges.new_zeros(systems).index_add_(0, batch, charges)
    count = charges.new_zeros(systems).index_add_(0, batch, torch.ones_like(charges))
    return charges - (total / count)[batch]


def make_batch(systems, generator, device, dtype):
    sizes = torch.randint(20, 41, (systems,), generator=generator)
    cells = 1.5 + 0.4 * torch.rand(systems, 3, generator=generator, dtype=dtype)
    batch = torch.repeat_interleave(torch.arange(systems), sizes)
    positions = torch.rand(int(sizes.sum()), 3, generator=generator, dtype=dtype) * cells[batch]
    species = torch.randint(0, SPECIES, (int(sizes.sum()),), generator=generator)
    return positions.to(device), species.to(device), cells.to(device), batch.to(device)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--systems", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda with a CUDA build of pmkit")
    parser.add_argument("--check", action="store_true", help="exit non-zero unless the loss falls by --factor")
    parser.add_argument("--factor", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7, help="of the systems and the models' weights")
    args = parser.parse_args(argv)
    dtype = torch.float64
    torch.manual_seed(args.seed)  # the models' initial weights
    generator = torch.Generator().manual_seed(args.seed)
    positions, species, cell, batch = make_batch(args.systems, generator, args.device, dtype)
    x = features(positions, species, cell, batch)
    # Systems of a few dozen charges: one CPU thread each is fastest.
    pme = pt.Pme(cutoff=0.7, tolerance=1e-3, threads=1)

    # The "true" charges, from a fixed random model of the same features, and the targets.
    truth = torch.nn.Linear(x.shape[1], 1, dtype=dtype).to(args.device)
    torch.nn.init.normal_(truth.weight, std=1.0)
    with torch.no_grad():
        q_true = neutral(torch.tanh(truth(x)).squeeze(1), batch, args.systems)
        target = pme(positions, q_true, cell, batch)

    model = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], 16, dtype=dtype), torch.nn.Tanh(), torch.nn.Linear(16, 1, dtype=dtype)
    ).to(args.device)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for step in range(args.steps):
        q = neutral(model(x).squeeze(1), batch, args.systems)
        out = pme(positions, q, cell, batch)
        loss = (out.energy - target.energy).square().mean() + (out.forces - target.forces).square().mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        first = loss.item() if first is None else first
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.3e}")
    last = loss.item()
    print(f"loss fell from {first:.3e} to {last:.3e} ({first / last:.1f}x)")
    if args.check and not last * args.factor <= first:
        print(f"the loss did not fall by {args.factor}x", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
