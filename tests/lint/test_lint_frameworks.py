"""lint on the frameworks' own scripts (tests/planted/frameworks/): static, so the packages
need not be installed. The findings point at the user's lines, in the framework's terms,
and the frameworks' idioms raise nothing (Lightning steps the optimizer and moves batches
itself; Accelerate's backward; the Trainer's loop)."""

from __future__ import annotations

import json

from conftest import ROOT

from torchpace.cli import main

FRAMEWORKS = ROOT / "tests" / "planted" / "frameworks"


def lint_json(capsys, *paths) -> list[dict]:
    main(["lint", "--format", "json", *map(str, paths)])
    return json.loads(capsys.readouterr().out)["findings"]


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
