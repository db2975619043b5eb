"""GPU executor: a policy's Plans run on real layers over a paged latent cache; TTFT, HBM bytes, joules."""

from pic.kernels.executor.device import GpuUnavailable, check_gpu
from pic.kernels.executor.layout import HostBatch, PagePool, full_layout, plan_layout
from pic.kernels.executor.run import ExecConfig, Executor

__all__ = ["ExecConfig", "Executor", "GpuUnavailable", "HostBatch", "PagePool", "check_gpu", "full_layout",
           "plan_layout"]
