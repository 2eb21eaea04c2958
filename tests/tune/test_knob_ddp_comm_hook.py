"""ddp-comm-hook (knobs/ddp_comm_hook.py): planned for a multi-rank DDP job on a GPU (bf16
where the GPU runs it, fp16 always), not on a CPU; applied as a hook registered on every DDP
the script builds, which all-reduces the gradients in 16 bits (run here on 2 gloo ranks)."""

from __future__ import annotations

import dataclasses
import socket

import pytest
from knob_fakes import ctx, facts

from torchpace import knobs
from torchpace.facts.run import WrapperFacts

KNOB = knobs.get("ddp-comm-hook")


def context(*, cuda: bool, capability=(9, 0), world_size=2):
    wrapper = WrapperFacts(
        kind="DistributedDataParallel", location="train.py:30", find_unused_parameters=False,
        bucket_cap_mb=25.0, gradient_as_bucket_view=False, static_graph=False,
        broadcast_buffers=True, has_buffers=False, world_size=world_size,
    )  # fmt: skip
    run = dataclasses.replace(facts(), wrappers=[wrapper])
    return ctx(run, cuda=cuda, capability=capability, nproc_per_node=world_size)


def test_planned_on_a_gpu_bf16_where_it_runs():
    assert KNOB.plan(context(cuda=True)).values == ("bf16", "fp16")
    assert KNOB.plan(context(cuda=True, capability=(7, 0))).values == ("fp16",)
    assert KNOB.changes_numerics  # tune's loss check applies


def test_not_planned_on_a_cpu_nor_on_one_rank():
    plan = KNOB.plan(context(cuda=False))
    assert not plan.applicable and "CPU" in plan.reason
    plan = KNOB.plan(context(cuda=True, world_size=1))
    assert not plan.applicable and "--nproc-per-node" in plan.reason


def test_a_toml_value_is_one_of_the_hooks():
    from torchpace.knobs.config import ConfigError, parse_config

    assert parse_config('[knobs]\nddp-comm-hook = "bf16"\n').knobs == {"ddp-comm-hook": "bf16"}
    with pytest.raises(ConfigError, match="ddp-comm-hook"):
        parse_config('[knobs]\nddp-comm-hook = "int8"\n')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, value: str, out, world=2, backend="gloo") -> None:
    import torch
    import torch.distributed as dist

    device = "cuda" if backend == "nccl" else "cpu"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip

    class Runtime:
        @staticmethod
        def user_location():
            return "train.py:30"

    notes = KNOB.apply(value, Runtime())
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1, bias=False).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    # gradients whose average is not a 16-bit number: x = 1 + 1/1000 on rank 0, 0 on the rest
    x = torch.full((1, 4), 1.001 if rank == 0 else 0.0, device=device)
    ddp(x).sum().backward()
    out.put((rank, model.weight.grad.cpu().tolist()[0], str(notes)))
    dist.destroy_process_group()


def _run_job(value: str, world: int, backend: str) -> dict:
    import torch.multiprocessing as mp

    spawn = mp.get_context("spawn")
    out = spawn.Queue()
    port = _free_port()
    procs = [
        spawn.Process(target=_rank, args=(r, port, value, out, world, backend))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results = {r: (g, n) for r, g, n in (out.get(timeout=300) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


def _check(results: dict, value: str, dtype: str, world: int) -> None:
    import torch

    # the hook divides the 16-bit bucket by the world size, then all-reduces it in 16 bits
    rounded = torch.tensor(1.001).to(getattr(torch, dtype)).div(world).float().item()
    for grad, notes in results.values():
        assert grad == pytest.approx([rounded] * 4, abs=1e-7)
        assert grad[0] != pytest.approx(1.001 / world, abs=1e-7)  # fp32's average
        assert "the DDP at train.py:30" in notes


@pytest.mark.distributed
@pytest.mark.parametrize("value, dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_the_hook_all_reduces_the_gradients_in_16_bits_on_gloo(value, dtype):
    _check(_run_job(value, world=2, backend="gloo"), value, dtype, world=2)


@pytest.mark.parametrize("value, dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_the_hook_runs_on_nccl(value, dtype):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (NCCL)")
    _check(_run_job(value, world=1, backend="nccl"), value, dtype, world=1)
