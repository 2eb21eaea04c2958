"""lint on the frameworks' own scripts (tests/planted/frameworks/): static, so the packages
need not be installed. The findings point at the user's lines, in the framework's terms,
and the frameworks' idioms raise nothing (Lightning steps the optimizer and moves batches
itself; Accelerate's backward; the Trainer's loop)."""

from __future__ import annotations

import json

from conftest import ROOT
from json_schemas import validate_output

from torchpace.cli import main

FRAMEWORKS = ROOT / "tests" / "planted" / "frameworks"


def lint_json(capsys, *paths) -> list[dict]:
    main(["lint", "--format", "json", *map(str, paths)])
    document = json.loads(capsys.readouterr().out)
    validate_output(document, "lint_report")  # every document, findings of each kind
    return document["findings"]


def test_each_framework_gets_tp101_at_the_users_loader_and_nothing_else(capsys):
    findings = lint_json(capsys, FRAMEWORKS)
    got = {(f["path"].rsplit("/", 1)[-1], f["line"], f["code"]) for f in findings}
    assert got == {
        ("lightning_fit.py", 37, "TP101"),  # DataLoader(...) in its train_dataloader
        ("accelerate_loop.py", 32, "TP101"),  # the DataLoader given to accelerator.prepare
        ("hf_trainer.py", 29, "TP101"),  # TrainingArguments(dataloader_num_workers=0)
    }
    hf = next(f for f in findings if f["path"].endswith("hf_trainer.py"))
    assert "Trainer's DataLoader" in hf["message"] and "dataloader_num_workers=0" in hf["message"]


def test_training_arguments_without_workers_says_what_to_add(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(
        "from transformers import Trainer, TrainingArguments\n"
        "args = TrainingArguments(output_dir='out', per_device_train_batch_size=8)\n"
        "ok = TrainingArguments(output_dir='o', dataloader_num_workers=4)\n"
        "kw = TrainingArguments(**settings)\n"  # may carry it: not reported
    )
    (finding,) = lint_json(capsys, script)
    assert finding["line"] == 2
    assert "add dataloader_num_workers=N" in finding["message"]


# Realistic scripts per framework (tests/lint/frameworks/, never run): every framework idiom
# (self.log of tensors, validation without no_grad, manual optimization, accumulate,
# accelerator.backward / clip_grad_norm_, gather_for_metrics, a Trainer subclass) and the
# planted mistakes, each marked MISTAKE in the file. Exactly the mistakes are reported.
REALISTIC = ROOT / "tests" / "lint" / "frameworks"


def mistake_lines(path) -> set[int]:
    lines = path.read_text().splitlines()
    return {n for n, line in enumerate(lines, 1) if "# MISTAKE" in line}


def test_realistic_framework_scripts_get_exactly_their_mistakes(capsys):
    findings = lint_json(capsys, REALISTIC)
    got = {(f["path"].rsplit("/", 1)[-1], f["line"], f["code"]) for f in findings}
    assert got == {
        ("lightning_module.py", 42, "TP201"),  # self.log(..., loss.item())
        ("lightning_module.py", 77, "TP306"),  # torch.cuda.amp.autocast in training_step
        ("lightning_module.py", 127, "TP101"),  # val_dataloader without workers
        ("accelerate_loop.py", 60, "TP201"),  # accelerator.log({...: loss.item()}) each step
        ("accelerate_loop.py", 82, "TP305"),  # torch clip after accelerator.backward, fp16
        ("accelerate_loop.py", 84, "TP303"),
        ("hf_trainer.py", 30, "TP105"),  # torch.ones(...).to(device) in compute_loss
        ("hf_trainer.py", 68, "TP101"),  # TrainingArguments without dataloader_num_workers
    }
    for name in ("lightning_module.py", "accelerate_loop.py", "hf_trainer.py"):
        lines = {f["line"] for f in findings if f["path"].endswith(name)}
        assert lines == mistake_lines(REALISTIC / name), name
    message = {(f["path"].rsplit("/", 1)[-1], f["line"]): f["message"] for f in findings}
    # the fix in the framework's language
    assert "pass the tensor to self.log" in message[("lightning_module.py", 42)]
    assert 'Trainer(precision="bf16-mixed")' in message[("lightning_module.py", 77)]
    assert "in val_dataloader, which Lightning iterates" in message[("lightning_module.py", 127)]
    assert "accelerator.clip_grad_norm_" in message[("accelerate_loop.py", 82)]


def lint_source(tmp_path, capsys, source: str) -> list[tuple[int, str, str]]:
    script = tmp_path / "train.py"
    script.write_text(source)
    return [(f["line"], f["code"], f["message"]) for f in lint_json(capsys, script)]


LIGHTNING_STEP = """\
import pytorch_lightning as pl
import torch.nn.functional as F

class Base(pl.LightningModule):
    pass

class Net(Base):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss)
        if batch_idx % 50 == 0:
            print(loss.item())
        print(loss)
        return loss

trainer = pl.Trainer(accelerator=ACCELERATOR)
"""


def test_lightning_training_step_is_a_training_step_on_a_device(tmp_path, capsys):
    # a subclass of a subclass, the older package: `print(loss)` each step is a sync; the
    # tensor to self.log and the periodic print are not
    got = lint_source(tmp_path, capsys, LIGHTNING_STEP.replace("ACCELERATOR", '"gpu"'))
    assert [(line, code) for line, code, _ in got] == [(14, "TP201")]
    assert "print(tensor) waits for the GPU" in got[0][2]


def test_a_trainer_pinned_to_the_cpu_has_no_gpu_to_wait_for(tmp_path, capsys):
    assert lint_source(tmp_path, capsys, LIGHTNING_STEP.replace("ACCELERATOR", '"cpu"')) == []


def test_hf_trainer_compute_loss_sync_is_per_step(tmp_path, capsys):
    got = lint_source(
        tmp_path,
        capsys,
        "from transformers import Trainer, TrainingArguments\n"
        "class MyTrainer(Trainer):\n"
        "    def compute_loss(self, model, inputs, return_outputs=False, **kw):\n"
        "        loss = model(**inputs).loss\n"
        "        self.seen.append(loss.item())\n"
        "        return loss\n"
        "args = TrainingArguments('out', dataloader_num_workers=2)\n",
    )
    assert [(line, code) for line, code, _ in got] == [(5, "TP201")]


def test_accelerate_clipping_by_hand_only_under_fp16(tmp_path, capsys):
    loop = (
        "import torch\nfrom accelerate import Accelerator\n"
        "accelerator = Accelerator(mixed_precision=PRECISION)\n"
        "for x in loader:\n"
        "    accelerator.backward(model(x).sum())\n"
        "    CLIP(model.parameters(), 1.0)\n"
        "    optimizer.step()\n"
    )
    torch_clip = "torch.nn.utils.clip_grad_norm_"
    fp16 = lint_source(
        tmp_path, capsys, loop.replace("PRECISION", '"fp16"').replace("CLIP", torch_clip)
    )
    assert [(line, code) for line, code, _ in fp16] == [(6, "TP305")]
    for precision, clip in (('"bf16"', torch_clip), ('"fp16"', "accelerator.clip_grad_norm_")):
        source = loop.replace("PRECISION", precision).replace("CLIP", clip)
        assert lint_source(tmp_path, capsys, source) == [], (precision, clip)


def test_deprecated_amp_names_each_frameworks_own_setting(tmp_path, capsys):
    amp = "import torch\nwith torch.cuda.amp.autocast():\n    pass\n"
    for driver, setting in (
        (
            "from accelerate import Accelerator\nAccelerator()\n",
            'Accelerator(mixed_precision="bf16")',
        ),
        (
            "from transformers import Trainer\nclass T(Trainer): pass\n",
            "TrainingArguments(bf16=True)",
        ),
        ("", None),  # a plain script: only the torch.amp spelling
    ):
        ((_line, code, message),) = lint_source(tmp_path, capsys, amp + driver)
        assert code == "TP306" and 'torch.amp.autocast("cuda", ...)' in message
        if setting is None:
            assert "; or" not in message
        else:
            assert setting in message
