"""The torch objects the rules look for, under every public path that reaches them."""

DATALOADER = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
DDP = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
}
DATA_PARALLEL = {
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel",
}
NO_GRAD = {
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autograd.no_grad",
    "torch.autograd.grad_mode.no_grad",
    "torch.autograd.grad_mode.inference_mode",
    "torch.set_grad_enabled",
    "torch.autograd.set_grad_enabled",
}
DTYPES = {
    f"torch.{t}"
    for t in [
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "half",
        "float",
        "double",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "long",
        "int",
        "short",
        "bool",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
    ]
}
