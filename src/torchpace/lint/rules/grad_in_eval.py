"""TP301 grad-enabled-in-eval (P07)."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.index import CallSite, FileIndex, Function
from torchpace.lint.names import dotted, is_false, positional
from torchpace.lint.rule import Rule
from torchpace.lint.rules._names import NO_GRAD
from torchpace.lint.training import is_backward

EVAL_WORDS = {
    "eval",
    "evaluate",
    "evaluation",
    "validate",
    "validation",
    "val",
    "predict",
    "prediction",
    "infer",
    "inference",
}
# Framework hooks (Lightning's validation_step, on_validation_epoch_end, ...) already run
# under no_grad/inference_mode.
HOOK_SUFFIXES = {"step", "end", "start", "hook", "callback"}
MODEL_NAMES = ("model", "net", "network", "module", "encoder", "decoder", "classifier")
MODEL_VERBS = (
    "get", "load", "build", "create", "make", "init", "save", "setup", "add", "to",
    "wrap", "unwrap", "prepare", "compile",
)  # fmt: skip


def _looks_like_model(call: CallSite, callee: str) -> bool:
    """`model(x)`, `self.net(x)`, `teacher_model(x)`: a forward, going by the name."""
    last = callee.split(".")[-1].lower().lstrip("_")  # `self._wrap_model(...)`: a verb
    if not call.node.args or last.startswith(MODEL_VERBS):
        return False  # solver.model(), get_model(cfg): not a forward
    return last in MODEL_NAMES or last.endswith(("_model", "_net"))


def is_eval_name(name: str) -> bool:
    tokens = name.lower().strip("_").split("_")
    if tokens[-1] in HOOK_SUFFIXES or name.startswith("__"):
        return False
    if tokens == ["test"]:
        return True  # `def test(model, loader)`; `test_*` are pytest tests
    return tokens[0] != "test" and any(t in EVAL_WORDS for t in tokens)


def _grad_off(names) -> bool:
    return any(n in NO_GRAD or n.endswith(("no_grad", "inference_mode")) for n in names if n)


def _function_grad_off(function: Function | None) -> bool:
    while function is not None and function.node is not None:
        if _grad_off(name for _, name in function.decorators):
            return True
        function = function.parent
    return False


def _sets_grad_off(call: CallSite) -> bool:
    if call.name not in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled"):
        return False
    args = positional(call.node)
    return bool(args) and is_false(args[0].value)


def _needs_grad_call(call: CallSite) -> bool:
    return is_backward(call) or call.name in ("torch.autograd.grad", "torch.enable_grad")


def _called_without_grad(index: FileIndex, name: str) -> bool:
    """Some caller in this file runs ``name(...)`` under no_grad: it cannot be told apart."""
    return any(
        isinstance(c.node.func, cst.Name | cst.Attribute)
        and (dotted(c.node.func) or "").split(".")[-1] == name
        and (_grad_off(c.withs) or _function_grad_off(c.function))
        for c in index.calls
    )


class GradEnabledInEval(Rule):
    """## What it does

    Flags a function named `eval`, `evaluate`, `validate`, `validation`, `test` or
    `predict`/`infer` (or a `model.eval()` region) that runs a model without `torch.no_grad()` /
    `torch.inference_mode()` (as a `with` block or a decorator).

    ## Why it matters

    With autograd on, every forward keeps its activations for a backward that never comes: more
    memory (smaller eval batches) and extra bookkeeping per op.

    ## Example

    ```python
    def evaluate(model, loader):
        model.eval()
        for x, y in loader:
            out = model(x)
    ```

    ## Use instead

    ```python
    @torch.inference_mode()
    def evaluate(model, loader):
        model.eval()
        for x, y in loader:
            out = model(x)
    ```

    ## Fix safety

    No automatic fix: a function named `test` may need gradients (e.g. gradient checks,
    adversarial examples).
    """

    code = "TP301"
    message = "evaluation runs the model with autograd on"
    VALID = (
        "import torch\n@torch.no_grad()\ndef evaluate(model, loader):\n"
        "    model.eval()\n    for x in loader:\n        model(x)\n",
        "import torch\ndef validate(model, x):\n    with torch.inference_mode():\n"
        "        return model(x)\n",
        "def validation_step(self, batch, i):\n    return self.model(batch)\n",
        "def test_forward():\n    model = make()\n    model(x)\n",
        "def evaluation_loop(self, loader):\n    model = self._wrap_model(self.model)\n",
    )
    INVALID = (
        "def evaluate(model, loader):\n    model.eval()\n    for x in loader:\n"
        "        out = model(x)\n",
        "def train(model, loader, val_loader):\n    model.eval()\n    for x in val_loader:\n"
        "        out = model(x)\n    model.train()\n",
    )

    def check(self, index):
        for function in index.functions:
            if function.node is None or _function_grad_off(function):
                continue
            call = self._first_model_call(function)
            if call is None or _called_without_grad(index, function.name):
                continue
            yield self.finding(
                call.node,
                f"{self.message} in {function.name}(): wrap it in torch.no_grad() "
                "or torch.inference_mode()",
            )

    @staticmethod
    def _first_model_call(function: Function) -> CallSite | None:
        """The first model call of an evaluation region that runs with autograd on.

        A region is the whole of an eval-named function, or from `model.eval()` to
        `model.train()`. A backward in the region means it needs gradients (adversarial
        examples, training with frozen BatchNorm statistics): no finding then."""
        eval_named = is_eval_name(function.name)
        evaluated: set[str] = set()  # receivers of `.eval()` in the current region
        candidate: CallSite | None = None
        for call in function.calls:
            if call.method == "eval" and not call.node.args:
                if (receiver := dotted(call.receiver)) is not None:
                    evaluated.add(receiver)
                continue
            if call.method == "train" and dotted(call.receiver) in evaluated:
                evaluated.discard(dotted(call.receiver))
                if candidate is not None and not eval_named:
                    return candidate
                continue
            if _needs_grad_call(call) or _sets_grad_off(call):
                if eval_named:
                    return None
                candidate, evaluated = None, set()
                continue
            callee = dotted(call.node.func)
            if candidate is not None or callee is None or _grad_off(call.withs):
                continue
            # Outside eval-named functions only a loop of forwards counts: a single forward
            # after `model.eval()` (tracing, calibration, export) costs nothing worth reporting.
            if (callee in evaluated and (eval_named or call.loops)) or (
                eval_named and _looks_like_model(call, callee)
            ):
                candidate = call
        return candidate
