"""A Lightning script as people write it (lint fixture, never run): a LightningModule with
training, validation and test steps that log, a LightningDataModule, a manual-optimization
GAN, Trainer.fit with bf16 and gradient clipping. Lightning moves batches, zeroes the
gradients, runs backward and steps the optimizers; `self.log` takes tensors without a sync.
Three mistakes are planted, each marked MISTAKE."""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class LitClassifier(L.LightningModule):
    def __init__(self, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 10),
        )
        self.val_preds = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log("train_loss", loss, prog_bar=True)
        self.log_dict({"train_acc": acc}, on_step=True, on_epoch=True)
        if batch_idx % 100 == 0:
            print(f"step {batch_idx}: loss {loss.item():.3f}")
        self.log("lr", self.optimizers().param_groups[0]["lr"])
        self.log("seen", float(batch_idx * x.shape[0]))
        self.log("loss_value", loss.item())  # MISTAKE: a sync every step (pass the tensor)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)  # Lightning runs validation under torch.no_grad and model.eval
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.val_preds.append(logits.argmax(dim=1).cpu())

    def on_validation_epoch_end(self):
        preds = torch.cat(self.val_preds)
        self.log("val_pred_mean", preds.float().mean())
        self.val_preds.clear()

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self(x).argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class LitGAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 128))
        self.discriminator = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        real, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.shape[0], 32, device=self.device)
        with torch.cuda.amp.autocast():  # MISTAKE: AMP by hand (and the deprecated API)
            fake = self.generator(z)
        self.toggle_optimizer(opt_d)
        d_loss = F.binary_cross_entropy_with_logits(
            self.discriminator(real), torch.ones(real.shape[0], 1, device=self.device)
        ) + F.binary_cross_entropy_with_logits(
            self.discriminator(fake.detach()), torch.zeros(real.shape[0], 1, device=self.device)
        )
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        self.clip_gradients(opt_d, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(
            self.discriminator(fake), torch.ones(real.shape[0], 1, device=self.device)
        )
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss}, prog_bar=True)

    def configure_optimizers(self):
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=2e-4)
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-4)
        return [opt_g, opt_d]


class RandomImages(L.LightningDataModule):
    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        x = torch.randn(2048, 3, 32, 32)
        y = torch.randint(0, 10, (2048,))
        self.train_set, self.val_set = random_split(TensorDataset(x, y), [1792, 256])

    def train_dataloader(self):
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=4,
            pin_memory=True,
            persistent_workers=True,
        )

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)  # MISTAKE: no workers


def main():
    L.seed_everything(0)
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="auto",
        devices="auto",
        precision="bf16-mixed",
        gradient_clip_val=1.0,
        accumulate_grad_batches=2,
        log_every_n_steps=10,
    )
    model = LitClassifier()
    trainer.fit(model, datamodule=RandomImages())
    trainer.validate(model, datamodule=RandomImages())
    L.Trainer(max_epochs=1, accelerator="auto").fit(LitGAN(), datamodule=RandomImages())


if __name__ == "__main__":
    main()
