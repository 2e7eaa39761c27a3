"""Several training processes (torchrun): joining the process group and the few collectives a
trainer uses. With one process (no WORLD_SIZE, or 1) every collective is a no-op, so the same
code runs under `forgeline ppo` and `torchrun ... -m forgeline.cli ppo`."""
from __future__ import annotations

import os
from typing import Any, Sequence


def setup_distributed() -> tuple[int, int, Any]:
    """(rank, world size, device). Under torchrun (WORLD_SIZE > 1) joins the process group:
    NCCL on GPU, gloo on CPU."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), device
    return 0, 1, device


def teardown_distributed() -> None:
    """Leave the process group, if this process joined one."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def gather(obj: Any, world: int) -> list[Any]:
    """Every process's `obj`, in rank order."""
    if world == 1:
        return [obj]
    import torch.distributed as dist
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def barrier(world: int) -> None:
    """Wait for every process."""
    if world > 1:
        import torch.distributed as dist
        dist.barrier()


def allreduce_(tensors: Sequence, world: int, op: str = "sum") -> None:
    """Reduce each tensor in place over the processes: "sum" or "max"."""
    if world == 1:
        return
    import torch.distributed as dist
    red = dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX
    for t in tensors:
        dist.all_reduce(t, op=red)
