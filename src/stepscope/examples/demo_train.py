"""A small CNN trained on synthetic images, with a slow data loader and one slow step.

Plain PyTorch, no stepscope import: ``stepscope demo`` (or ``stepscope run -- python -m
stepscope.examples.demo_train``) profiles it without a code change. It runs on the CPU in about a
minute with the defaults, and has two problems on purpose, for the rules and the report to find:

* the data loader is too slow for the model: few workers, each sleeping ``--load-delay-ms`` per
  sample (the Dataloader and CPU/IO rules, and the GetNext times show it);
* one training step, ``--slow-step``, takes ``--slow-step-s`` longer (StepOutlier shows it under
  ``stepscope demo``, which sets 3 standard deviations and tolerates no outlier; with the rules'
  defaults, as under ``stepscope run``, 5 standard deviations and 10 outliers tolerated, it
  reports no issue).

Each epoch trains ``--steps-per-epoch`` steps, then evaluates ``--eval-steps`` batches.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

__all__ = ["SmallCNN", "SyntheticImages", "main", "parse_args", "train"]

logger = logging.getLogger(__name__)


#: the seed of the class patterns, shared by every split so that what is learnt carries over
_PATTERN_SEED = 20_211_001


class SyntheticImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Deterministic 3x32x32 images in 10 classes; each item sleeps to mimic slow I/O.

    Each image is its class's fixed pattern under noise four times as strong, so the model has
    something to learn: the loss falls and the accuracy rises within the demo's minute.

    :param size: number of samples.
    :param load_delay_s: time each ``__getitem__`` sleeps (a slow disk, a heavy decode).
    """

    def __init__(self, size: int, load_delay_s: float, seed: int = 0) -> None:
        self.size = size
        self.load_delay_s = load_delay_s
        self.seed = seed
        patterns = torch.Generator().manual_seed(_PATTERN_SEED)
        self.patterns = torch.randn(10, 3, 32, 32, generator=patterns)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.load_delay_s > 0:
            time.sleep(self.load_delay_s)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = torch.randint(0, 10, (), generator=generator)
        image = self.patterns[label] + 4.0 * torch.randn(3, 32, 32, generator=generator)
        return image, label


class SmallCNN(nn.Module):
    """Two convolution blocks and a classifier: enough work to see forward and backward."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.features(x))
        return logits


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=120)
    parser.add_argument("--eval-steps", type=int, default=10, help="eval batches per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=1, help="too few, on purpose")
    parser.add_argument("--load-delay-ms", type=float, default=4.0, help="sleep per sample")
    parser.add_argument("--slow-step", type=int, default=50, help="this training step is slow")
    parser.add_argument("--slow-step-s", type=float, default=1.5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _loader(
    args: argparse.Namespace, batches: int, seed: int
) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    dataset = SyntheticImages(batches * args.batch_size, args.load_delay_ms / 1000.0, seed)
    return DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers)


def train(args: argparse.Namespace) -> list[float]:
    """Train and evaluate; returns the training losses, step by step."""
    torch.manual_seed(args.seed)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    train_loader = _loader(args, args.steps_per_epoch, args.seed)
    eval_loader = _loader(args, args.eval_steps, args.seed + 1)
    losses: list[float] = []
    step = 0
    for epoch in range(args.epochs):
        model.train()
        for images, labels in train_loader:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            if step == args.slow_step:
                time.sleep(args.slow_step_s)  # the injected slow step
            optimizer.step()
            losses.append(loss.item())
            step += 1
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, labels in eval_loader:
                correct += int((model(images).argmax(1) == labels).sum())
                total += len(labels)
        logger.info(
            "epoch %d: last loss %.4f, eval accuracy %.3f",
            epoch,
            losses[-1],
            correct / max(total, 1),
        )
    return losses


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    started = time.perf_counter()
    losses = train(args)
    logger.info(
        "trained %d steps in %.1f s; final loss %.4f",
        len(losses),
        time.perf_counter() - started,
        losses[-1],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
