"""Every lint rule, one module each; ``RULES`` lists them in code order."""

from torchpace.lint.rules.accumulation_without_no_sync import AccumulationWithoutNoSync
from torchpace.lint.rules.blocking_copy import BlockingHostToDeviceCopy
from torchpace.lint.rules.clip_before_unscale import ClipBeforeUnscale
from torchpace.lint.rules.conv_bias_before_batchnorm import ConvBiasBeforeBatchNorm
from torchpace.lint.rules.data_parallel import DataParallel
from torchpace.lint.rules.dataloader_workers import DataLoaderWithoutWorkers
from torchpace.lint.rules.debug_api import DebugApiInTraining
from torchpace.lint.rules.deprecated_cuda_amp import DeprecatedCudaAmp
from torchpace.lint.rules.empty_cache_in_loop import EmptyCacheInLoop
from torchpace.lint.rules.find_unused_parameters import FindUnusedParameters
from torchpace.lint.rules.grad_in_eval import GradEnabledInEval
from torchpace.lint.rules.jit_where_compile_serves import JitWhereCompileServes
from torchpace.lint.rules.pageable_copy import PageableHostToDeviceCopy
from torchpace.lint.rules.sync_in_training_loop import SyncInTrainingLoop
from torchpace.lint.rules.syncbn_after_ddp import SyncBnAfterDdpWrap
from torchpace.lint.rules.tensor_accumulated import TensorAccumulatedAcrossSteps
from torchpace.lint.rules.tensor_created_then_moved import TensorCreatedThenMoved
from torchpace.lint.rules.zero_grad_set_to_none import ZeroGradSetToNoneFalse

RULES = sorted(
    [
        AccumulationWithoutNoSync,
        BlockingHostToDeviceCopy,
        ClipBeforeUnscale,
        ConvBiasBeforeBatchNorm,
        DataParallel,
        DataLoaderWithoutWorkers,
        DebugApiInTraining,
        DeprecatedCudaAmp,
        EmptyCacheInLoop,
        FindUnusedParameters,
        GradEnabledInEval,
        JitWhereCompileServes,
        PageableHostToDeviceCopy,
        SyncInTrainingLoop,
        SyncBnAfterDdpWrap,
        TensorAccumulatedAcrossSteps,
        TensorCreatedThenMoved,
        ZeroGradSetToNoneFalse,
    ],
    key=lambda rule: rule.code,
)

__all__ = ["RULES"]
