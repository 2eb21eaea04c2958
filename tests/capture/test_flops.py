"""The FLOP counter (capture/flops.py) against the published counts: a GPT's training step
per token against 6N + 12·L·H·Q·T (PaLM's appendix B, nanoGPT's estimate_mfu), ResNet-18's
forward against its 1.82 GMACs at 224 px. Counted in this process with the counter the
capture child uses."""

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from torchpace.capture.flops import StepCounter

torchvision = pytest.importorskip("torchvision")


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width, bias=False)
        self.c_attn = nn.Linear(width, 3 * width, bias=False)
        self.c_proj = nn.Linear(width, width, bias=False)
        self.ln_2 = nn.LayerNorm(width, bias=False)
        self.c_fc = nn.Linear(width, 4 * width, bias=False)
        self.mlp_proj = nn.Linear(4 * width, width, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class TinyGPT(nn.Module):
    """nanoGPT's model, small: token and position embeddings, L blocks, a tied head."""

    def __init__(self, vocab=512, block=64, layers=2, heads=4, width=128):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, bias=False)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in nanoGPT

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def counted(step) -> "StepCounter":
    counter = StepCounter()
    counter.start()
    try:
        step()
    finally:
        counter.stop()
    return counter


def test_gpt_flops_per_token_match_6n_plus_attention():
    layers, heads, width, block, batch = 2, 4, 128, 64, 2
    model = TinyGPT(layers=layers, heads=heads, width=width, block=block)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 512, (batch, block))

    def step():
        loss = model(idx, idx)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # the optimizer's state exists, as in a counted step of a real run
    facts = counted(step).facts(0, batch)
    # nanoGPT's estimate_mfu: N without the position embedding (the tied token embedding is
    # the head's matmul), per token 6N + 12 L H Q T with H Q = width, T the sequence
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    expected = 6 * n + 12 * layers * width * block
    per_token = facts.flops / (batch * block)
    assert per_token == pytest.approx(expected, rel=0.05)
    # forward a third of it, the backward two thirds (every layer's input needs its grad)
    assert facts.flops_backward == pytest.approx(2 * facts.flops_forward, rel=0.05)
    names = {op.name for op in facts.ops if op.flops}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names  # no torch formula
    blocks = {m.name: m for m in facts.modules}
    assert blocks["TinyGPT.h.0"].flops_forward == blocks["TinyGPT.h.1"].flops_forward > 0
    assert facts.flops_by_dtype == {"float32": facts.flops}
    assert facts.uncounted_ops == []


def test_resnet18_forward_flops_match_the_published_count():
    """1.82 GMACs at 224 px; FLOPs scale with H·W (every stride divides 64 as it does 224)."""
    model = torchvision.models.resnet18(weights=None).eval()
    size = 64
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        facts = counted(lambda: model(x)).facts(0, 1)
    published = 2 * 1.82e9 * (size * size) / (224 * 224)
    assert facts.flops_forward == pytest.approx(published, rel=0.05)
    assert facts.flops_backward == 0
    conv = next(op for op in facts.ops if op.name == "aten::convolution")
    assert conv.calls == 20 and conv.bytes > 0


def test_bytes_count_inputs_and_outputs_and_views_move_nothing():
    a = torch.randn(256, 128)
    b = torch.randn(128, 64)

    def step():
        a.t()
        torch.mm(a, b).relu_()

    facts = counted(step).facts(None, None)
    ops = {op.name: op for op in facts.ops}
    assert ops["aten::mm"].bytes == 4 * (256 * 128 + 128 * 64 + 256 * 64)
    assert ops["aten::mm"].flops_forward == 2 * 256 * 128 * 64
    assert ops["aten::t"].bytes == 0
    assert ops["aten::relu_"].bytes == 4 * 2 * 256 * 64 and not ops["aten::relu_"].has_formula


def test_an_op_outside_aten_is_named_as_uncounted():
    lib = torch.library.Library("torchpace_test", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    lib.impl("scale", lambda x: x * 2, "CPU")
    x = torch.randn(8, 8)
    facts = counted(lambda: torch.ops.torchpace_test.scale(x)).facts(None, None)
    assert facts.uncounted_ops == ["torchpace_test::scale"]
    assert math.isclose(facts.flops, 0)
