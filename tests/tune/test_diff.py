"""tune/diff.py: knobs' source edits as a unified diff, written only when asked."""

import os
import stat
import textwrap

import pytest

from torchpace.knobs.base import SourceEdit
from torchpace.tune.diff import DiffWriteError, parse_location, source_diff, write_diff


def _file(tmp_path, text: str, name: str = "train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def _new(result, index: int = 0) -> str:
    return result.files[index].new.decode()


LOADERS = """
    import torch
    from torch.utils.data import DataLoader as DL


    def loaders(ds):
        train = DL(
            ds,
            batch_size=32,  # keep this comment
            num_workers=0,
        )
        val = torch.utils.data.DataLoader(ds, 8, True)
        return train, val
"""


def test_loader_kwargs_replaced_added_and_positional_values_replaced(tmp_path):
    path = _file(tmp_path, LOADERS)
    result = source_diff(
        {
            "num-workers": [
                SourceEdit("loader-kwargs", "train.py:7", {"num_workers": 4}),
                SourceEdit("loader-kwargs", "train.py:11", {"num_workers": 4}),
            ],
            "pin-memory": [
                SourceEdit("loader-kwargs", "train.py:9", {"pin_memory": True}),
                SourceEdit("loader-kwargs", "train.py:11", {"shuffle": False}),
            ],
        },
        tmp_path,
    )
    assert result.problems == []
    (change,) = result.files
    assert change.path == path and change.name == "train.py"
    assert change.knobs == ["num-workers", "pin-memory"]
    assert _new(result) == textwrap.dedent(LOADERS).lstrip("\n").replace(
        "        num_workers=0,\n",
        "        num_workers=4,\n        pin_memory=True,\n",
    ).replace("DataLoader(ds, 8, True)", "DataLoader(ds, 8, False, num_workers=4)")
    assert (
        "-        num_workers=0,\n+        num_workers=4,\n+        pin_memory=True,\n"
        in result.text
    )
    assert result.text.startswith("--- a/train.py\n+++ b/train.py\n")
    assert path.read_text() == textwrap.dedent(LOADERS).lstrip("\n")  # nothing written


def test_optimizer_kwargs_on_torch_optim_calls_only(tmp_path):
    _file(
        tmp_path,
        """
        import torch
        from torch.optim import AdamW

        a = torch.optim.SGD(params, lr=0.1)
        b = AdamW(params, lr=1e-3, fused=True)
        c = make_optimizer(params)
        """,
    )
    result = source_diff(
        {
            "fused-optimizer": [
                SourceEdit("optimizer-kwargs", f"train.py:{line}", {"fused": True})
                for line in (4, 5, 6)
            ]
        },
        tmp_path,
    )
    assert "a = torch.optim.SGD(params, lr=0.1, fused=True)\n" in _new(result)
    assert "b = AdamW(params, lr=1e-3, fused=True)\n" in _new(result)  # already so
    (problem,) = result.problems
    assert problem.edit.location == "train.py:6"
    assert "no torch.optim optimizer constructor call at train.py:6" in str(problem)


CUDNN = "import torch\ntorch.backends.cudnn.benchmark = True\n"


def test_statement_after_imports_is_inserted_once(tmp_path):
    path = _file(
        tmp_path,
        """
        '''A training script.'''
        import os

        import torch  # the framework

        torch.manual_seed(0)
        """,
    )
    edits = {"cudnn-benchmark": [SourceEdit("statement-after-imports", code=CUDNN)]}
    result = source_diff(edits, tmp_path, default_file="train.py")
    assert result.problems == []
    assert _new(result) == (
        "'''A training script.'''\nimport os\n\nimport torch  # the framework\n"
        "torch.backends.cudnn.benchmark = True\n\ntorch.manual_seed(0)\n"
    )
    write_diff(result)
    again = source_diff(edits, tmp_path, default_file=path)
    assert again.files == [] and again.problems == [] and again.text == ""


def test_statement_after_imports_without_imports_goes_after_the_docstring(tmp_path):
    _file(tmp_path, '"""Doc."""\nx = 1\n')
    edits = {"cudnn-benchmark": [SourceEdit("statement-after-imports", "train.py", code=CUDNN)]}
    assert _new(source_diff(edits, tmp_path)) == f'"""Doc."""\n{CUDNN}x = 1\n'


def test_wrap_assignment_rebinds_the_target_in_its_block_once(tmp_path):
    _file(
        tmp_path,
        """
        import torch


        def main():
            model = Net().to("cuda")  # build
            for _ in range(3):
                model(x)
        """,
    )
    edit = SourceEdit("wrap-assignment", "train.py:5", code="{} = torch.compile({})", note="n")
    result = source_diff({"compile": [edit]}, tmp_path)
    assert '    model = Net().to("cuda")  # build\n    model = torch.compile(model)\n' in _new(
        result
    )
    assert result.notes == ["compile: n"]
    write_diff(result)
    assert source_diff({"compile": [edit]}, tmp_path).files == []


def test_crlf_bom_and_everything_outside_the_edit_stay_byte_identical(tmp_path):
    original = (
        "\ufeff# -*- coding: utf-8 -*-\r\nimport torch\r\n# ünïcode\r\n"
        "loader = torch.utils.data.DataLoader(ds)   # odd  spacing\r\n\r\n"
    ).encode()
    (tmp_path / "train.py").write_bytes(original)
    result = source_diff(
        {
            "num-workers": [SourceEdit("loader-kwargs", "train.py:4", {"num_workers": 2})],
            "cudnn-benchmark": [SourceEdit("statement-after-imports", "train.py", code=CUDNN)],
        },
        tmp_path,
    )
    assert result.files[0].new == original.replace(
        b"import torch\r\n", b"import torch\r\ntorch.backends.cudnn.benchmark = True\r\n"
    ).replace(b"DataLoader(ds)", b"DataLoader(ds, num_workers=2)")


def test_unparsable_file_is_reported_and_untouched(tmp_path):
    path = _file(tmp_path, "import torch\nloader = DataLoader(ds\n")
    result = source_diff(
        {"num-workers": [SourceEdit("loader-kwargs", "train.py:2", {"num_workers": 2})]},
        tmp_path,
    )
    assert result.files == []
    (problem,) = result.problems
    assert "train.py:2 does not parse" in problem.reason
    assert "left unchanged" in problem.reason
    assert path.read_text() == "import torch\nloader = DataLoader(ds\n"


def test_locations_that_cannot_be_found_are_reported_not_guessed(tmp_path):
    _file(tmp_path, "a = DataLoader(x); b = DataLoader(y)\nmodel, opt = build()\n")
    result = source_diff(
        {
            "num-workers": [
                SourceEdit("loader-kwargs", "train.py:1", {"num_workers": 2}),
                SourceEdit("loader-kwargs", "missing.py:3", {"num_workers": 2}),
                SourceEdit("loader-kwargs", "train.py", {"num_workers": 2}),
                SourceEdit("loader-kwargs", None, {"num_workers": 2}),
            ],
            "compile": [SourceEdit("wrap-assignment", "train.py:2", code="{} = c({})")],
            "odd": [SourceEdit("loader-kwargs", "train.py:1", {"collate_fn": len})],
        },
        tmp_path,
    )
    assert result.files == []
    reasons = [str(p) for p in result.problems]
    assert reasons == [
        "train.py: num-workers: the location has no line",
        "num-workers: the edit has no location and no capture was given to place it",
        "train.py:1: num-workers: 2 DataLoader(...) calls at train.py:1; not edited",
        "train.py:2: compile: the assignment at train.py:2 has no single target to rebind",
        "train.py:1: odd: collate_fn=<built-in function len> is not a literal that can be "
        "written in source",
        "missing.py:3: num-workers: missing.py cannot be read (No such file or directory)",
    ]


def test_write_diff_writes_atomically_keeping_the_mode(tmp_path):
    path = _file(tmp_path, "import torch\n")
    os.chmod(path, 0o750)
    edits = {"cudnn-benchmark": [SourceEdit("statement-after-imports", "train.py", code=CUDNN)]}
    result = source_diff(edits, tmp_path)
    assert write_diff(result) == [path]
    assert path.read_text() == CUDNN
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # no temporary left


def test_write_diff_refuses_a_file_changed_since_it_was_read_and_writes_nothing(tmp_path):
    a = _file(tmp_path, "import torch\n", "a.py")
    b = _file(tmp_path, "import torch\n", "b.py")
    edit = "statement-after-imports"
    result = source_diff(
        {
            "cudnn-benchmark": [
                SourceEdit(edit, "a.py", code=CUDNN),
                SourceEdit(edit, "b.py", code=CUDNN),
            ]
        },
        tmp_path,
    )
    assert len(result.files) == 2
    b.write_text("import torch\nprint('edited meanwhile')\n")
    with pytest.raises(DiffWriteError, match=r"b.py changed since the diff was made"):
        write_diff(result)
    assert a.read_text() == "import torch\n"  # not written either
    assert b.read_text() == "import torch\nprint('edited meanwhile')\n"


def test_parse_location():
    assert parse_location("train.py:42") == ("train.py", 42)
    assert parse_location("src/a:b.py") == ("src/a:b.py", None)
    assert parse_location("train.py") == ("train.py", None)


# --- edits without a location, placed from the capture ------------------------------------


def _facts(loaders=(), optimizers=(), model=None, other_models=()):
    from torchpace.facts.run import (
        LoaderFacts,
        ModelFacts,
        OptimizerFacts,
        RunFacts,
        Status,
    )

    facts = RunFacts(
        command=["python", "train.py"], step_source="optimizer", optimizers=[],
        optimizer_steps_per_step=1.0, warmup=1, steps_requested=1, status=Status.COMPLETE,
    )  # fmt: skip
    facts.loaders = [LoaderFacts(loc, 0, False, False, None, 2, False, 4, "D") for loc in loaders]
    facts.optimizer_details = [OptimizerFacts("SGD", loc, 1, None, None) for loc in optimizers]
    if model is not None:
        facts.model = ModelFacts(model[0], model[1], 1, 0, 0, "cpu", "float32")
    facts.other_models = [ModelFacts(c, loc, 1, 0, 0, "cpu", "float32") for c, loc in other_models]
    return facts


SCRIPT = """
    import torch
    from torch.utils.data import DataLoader


    def train(model, loader, opt):
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()


    def main():
        train_loader = DataLoader(ds, batch_size=2)
        val_loader = DataLoader(ds, batch_size=8)
        model = build_resnet()
        model = model.to("cuda")
        criterion = torch.nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        train(model, train_loader, opt)
"""


def test_edits_without_location_go_where_the_capture_saw_the_objects(tmp_path):
    _file(tmp_path, SCRIPT)
    facts = _facts(
        loaders=["train.py:12", "train.py:13", "train.py:12"],
        optimizers=["train.py:17"],
        model=("ResNet", "train.py:7"),  # first called inside train(), built in main()
    )
    result = source_diff(
        {
            "num-workers": [SourceEdit("loader-kwargs", kwargs={"num_workers": 2})],
            "fused-optimizer": [SourceEdit("optimizer-kwargs", kwargs={"fused": True})],
            "compile": [SourceEdit("wrap-assignment", code="{} = torch.compile({})")],
            "threads": [SourceEdit("statement-after-imports", code="torch.set_num_threads(2)")],
        },
        tmp_path,
        default_file="train.py",
        facts=facts,
    )
    assert result.problems == []
    # every edit placed: no note says otherwise (the quick-start printed "not every model's
    # edit was placed: the capture recorded no optimizer's location" under a placed edit)
    assert not [n for n in result.notes if "not every" in n], result.notes
    new = _new(result)
    assert "from torch.utils.data import DataLoader\ntorch.set_num_threads(2)\n" in new
    assert "DataLoader(ds, batch_size=2, num_workers=2)" in new
    assert "DataLoader(ds, batch_size=8, num_workers=2)" in new
    assert "torch.optim.SGD(model.parameters(), lr=0.1, fused=True)" in new
    # after the last binding of `model`, not `loss`, `criterion` (a loss) or `x`
    assert '    model = model.to("cuda")\n    model = torch.compile(model)\n' in new
    assert new.count("torch.compile") == 1


def test_a_model_that_cannot_be_placed_is_reported(tmp_path):
    _file(tmp_path, "a = Net()\nb = Net()\nout = a(b(x))\n")
    edits = {"compile": [SourceEdit("wrap-assignment", code="{} = torch.compile({})")]}
    result = source_diff(edits, tmp_path, facts=_facts(model=("Net", "train.py:3")))
    (problem,) = result.problems
    assert problem.reason == (
        "the model is first called at train.py:3, but it is not clear which of a, b is the model"
    )
    result = source_diff(edits, tmp_path, facts=_facts(model=("Net", "train.py:1")))
    assert "no name called on that line is assigned in that file" in result.problems[0].reason
    result = source_diff(edits, tmp_path, facts=_facts())
    assert "the capture recorded no model" in result.problems[0].reason
    result = source_diff(edits, tmp_path)
    assert "no capture was given to place it" in result.problems[0].reason
    assert result.files == []


GAN = """
    netG = Generator()
    netD = Discriminator()
    criterion = nn.BCELoss()
    for real in loader:
        output = netD(real)
        fake = netG(noise)
"""


def test_a_model_edit_goes_to_every_trained_model(tmp_path):
    _file(tmp_path, GAN)
    edits = {"compile": [SourceEdit("wrap-assignment", code="{}.compile()")]}
    facts = _facts(model=("Discriminator", "train.py:5"),
                   other_models=[("Generator", "train.py:6")])  # fmt: skip
    result = source_diff(edits, tmp_path, facts=facts)
    assert result.problems == [] and result.notes == []
    assert "netG = Generator()\nnetG.compile()\nnetD = Discriminator()\nnetD.compile()\n" in (
        _new(result)
    )
    # one placed, one not: the edit is made and the note says which was left
    facts.other_models[0].location = "train.py:3"
    result = source_diff(edits, tmp_path, facts=facts)
    assert _new(result).count(".compile()") == 1
    assert any("not every model's edit was placed" in n for n in result.notes)


def test_a_script_outside_the_folder_tune_ran_in_is_named_by_its_absolute_path(tmp_path):
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    path = _file(elsewhere, LOADERS)
    ran_in = tmp_path / "somewhere_else"
    ran_in.mkdir()
    edit = SourceEdit("loader-kwargs", "../project/train.py:7", {"num_workers": 4})
    result = source_diff({"num-workers": [edit]}, ran_in)
    (change,) = result.files
    assert change.name == str(path)  # normalised: no "somewhere_else/.." left in it
    assert result.text.startswith(f"--- {path}\n+++ {path}\n")


def test_an_environment_setting_is_a_note_not_an_edit(tmp_path):
    _file(tmp_path, LOADERS)
    note = "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    result = source_diff({"expandable-segments": [SourceEdit("environment", note=note)]}, tmp_path)
    assert result.files == [] and result.problems == []
    assert result.notes == [f"expandable-segments: {note}"]


def test_the_compile_knobs_edit_compiles_in_place_and_keeps_checkpoints_loading(tmp_path):
    # dcgan (pytorch/examples) loads `--netD` into the name right after building it: a
    # rebinding `netD = torch.compile(netD)` would make its keys '_orig_mod.'-prefixed
    import dataclasses

    import torch

    from torchpace.knobs import get

    _file(tmp_path, "import torch\nnet = torch.nn.Linear(2, 2)\nnet.load_state_dict(sd)\n")
    edits = [dataclasses.replace(e, location="train.py:2") for e in get("compile").source_edits(
        "default"
    )]  # fmt: skip
    new = _new(source_diff({"compile": edits}, tmp_path))
    assert "net = torch.nn.Linear(2, 2)\nnet.compile()\nnet.load_state_dict(sd)\n" in new
    (tuned,) = get("compile").source_edits("max-autotune-no-cudagraphs")
    assert tuned.code == "{}.compile(mode='max-autotune-no-cudagraphs')"
    # what the edit does keeps a checkpoint of the uncompiled module loading (no compile runs
    # until the first call, so this is instant)
    net = torch.nn.Linear(2, 2)
    saved = net.state_dict()
    net.compile()
    assert net.load_state_dict(saved) is not None and list(net.state_dict()) == list(saved)


COMPILE = {"compile": [SourceEdit("wrap-assignment", code="{} = torch.compile({})")]}


def test_a_rebinding_goes_after_a_binding_that_runs_whenever_the_call_does(tmp_path):
    """`if args.cuda: model = model.cuda()` runs on a GPU only: a rebinding placed in that
    branch would change nothing on the CPU. It goes after the last binding that runs
    whenever the model is called; a binding in the call's own branch runs with it."""
    _file(
        tmp_path,
        """
        import torch
        model = Net()
        if args.cuda:
            model = model.cuda()
        out = model(x)
    """,
    )
    result = source_diff(COMPILE, tmp_path, facts=_facts(model=("Net", "train.py:5")))
    assert result.problems == []
    assert "model = Net()\nmodel = torch.compile(model)\nif args.cuda:" in _new(result)
    _file(
        tmp_path,
        """
        import torch
        if args.train:
            model = Net()
            out = model(x)
    """,
    )
    result = source_diff(COMPILE, tmp_path, facts=_facts(model=("Net", "train.py:4")))
    assert result.problems == []
    assert "    model = Net()\n    model = torch.compile(model)\n" in _new(result)


def test_a_model_bound_only_in_branches_is_reported_not_guessed(tmp_path):
    """pytorch/examples' imagenet binds its model in five branches (pretrained or not, then
    DDP, one GPU, DataParallel): on the CPU, channels_last's edit went after the
    DataParallel one, which never ran there."""
    _file(
        tmp_path,
        """
        import torch
        def main():
            if args.pretrained:
                model = models.resnet18(pretrained=True)
            else:
                model = models.resnet18()
            if args.distributed:
                model = torch.nn.parallel.DistributedDataParallel(model)
            elif use_accel:
                model = torch.nn.DataParallel(model).cuda()
            else:
                model.to(device)
            train(model)
        def train(model):
            out = model(x)
    """,
    )
    result = source_diff(COMPILE, tmp_path, facts=_facts(model=("ResNet", "train.py:15")))
    (problem,) = result.problems
    assert "bound only in branches that depend on the run (lines 4, 6, 8, 10)" in problem.reason
    assert result.files == []
