"""Planted: forward and backward run inside optimizer.step(closure), as in Lightning's
automatic optimization and LBFGS: they must not be counted as optimizer time."""

import torch
from _common import batches, mlp, parse_steps


def main():
    steps = parse_steps()
    model = mlp(width=512, depth=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = batches(4, batch=256, width=512)
    for step in range(steps):
        x, y = data[step % len(data)]

        def closure(x=x, y=y):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)


if __name__ == "__main__":
    main()
