"""The baseline training loop of article 002 ("PyTorch model performance analysis and
optimization"), kept deliberately unoptimized: it is the "before" of every torchpace demo.

Faithful to the article: FakeCIFAR (10000 random 32x32x3 uint8 images returned through PIL),
Resize(224) + ToTensor + Normalize, torchvision resnet18 (weights=None: never a download),
CrossEntropyLoss, SGD lr 0.001 momentum 0.9, batch 32, shuffle, num_workers=0, no pinning,
a plain .to(device), zero_grad / backward / step. CUDA when present, else the CPU.

The flags only make it small enough for a 2-core CPU; they change nothing else:

    python examples/fake_cifar_resnet.py --image-size 32 --steps 5
"""

import argparse
import time

import numpy as np
import torch
import torch.nn
import torch.optim
import torch.utils.data
import torchvision.models
import torchvision.transforms as T
from PIL import Image
from torchvision.datasets.vision import VisionDataset


class FakeCIFAR(VisionDataset):
    def __init__(self, transform, size=10000):
        super().__init__(root=None, transform=transform)
        self.data = np.random.randint(low=0, high=256, size=(size, 32, 32, 3), dtype=np.uint8)
        self.targets = np.random.randint(low=0, high=10, size=(size), dtype=np.uint8).tolist()

    def __getitem__(self, index):
        img, target = self.data[index], self.targets[index]
        img = Image.fromarray(img)
        if self.transform is not None:
            img = self.transform(img)
        return img, target

    def __len__(self) -> int:
        return len(self.data)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-size", type=int, default=224, help="Resize target (article: 224)")
    p.add_argument("--dataset-size", type=int, default=10000, help="images (article: 10000)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size (article: 32)")
    p.add_argument(
        "--steps", type=int, default=None, help="stop after this many steps (default: one epoch)"
    )
    p.add_argument(
        "--print-every",
        type=int,
        default=1,
        help="print step time and loss every N steps; 0 prints nothing, which "
        "is exactly the article's loop (printing the loss syncs with the GPU)",
    )
    return p.parse_args()


def main():
    args = parse_args()
    transform = T.Compose(
        [T.Resize(args.image_size), T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
    )
    train_set = FakeCIFAR(transform=transform, size=args.dataset_size)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model = torchvision.models.resnet18(weights=None).to(device)
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    model.train()

    def train(data):
        inputs, labels = data[0].to(device=device), data[1].to(device=device)
        outputs = model(inputs)
        loss = criterion(outputs, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    start = time.perf_counter()
    for step, batch_data in enumerate(train_loader):
        if args.steps is not None and step >= args.steps:
            break
        loss = train(batch_data)
        if args.print_every and step % args.print_every == 0:
            step_ms = 1000 * (time.perf_counter() - start) / args.print_every
            print(f"step {step:4d}  {step_ms:8.1f} ms/step  loss {loss.item():.4f}", flush=True)
            start = time.perf_counter()


if __name__ == "__main__":
    main()
