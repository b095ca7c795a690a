"""Fast inference on a CPU: a model's forward in bfloat16 (CPUs with bf16 instructions) or with int8 linear layers.

Opt-in, for inference only, and it changes the model in place::

    from timm_vitscratch.models.fast_cpu import fast_cpu_inference
    model = fast_cpu_inference(timm.create_model("scratch_vit_b16", pretrained=True))
    logits = model(images)  # float32 images in, float32 logits out

``"bf16"`` casts the parameters and buffers to bfloat16 and adds two hooks to the model itself: one casts the
floating-point inputs of ``model(...)`` to bfloat16, the other casts its floating-point outputs back to
float32. Where the CPU has bf16 instructions (AVX512-BF16, AMX) the matmuls run at several times the fp32
rate; elsewhere torch emulates bf16 and it is slower than float32. Other entry points
(``forward_features``, ``forward_intermediates``) take bfloat16 input as they are.

``"int8"`` replaces every ``nn.Linear`` with torch's dynamically quantised one (int8 weights, activations
quantised per batch): ``torch.ao.quantization.quantize_dynamic``, which torch marks deprecated in favour of
the separate torchao package. It is the route for CPUs without bf16 instructions; hooks on the linear
layers' modules see the quantised modules, and the model no longer trains.

``"auto"`` (the default) picks bf16 where the CPU has bf16 instructions, int8 elsewhere.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

Mode = Literal["auto", "bf16", "int8"]
MODES: tuple[str, ...] = ("auto", "bf16", "int8")


def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX512-BF16 or AMX-BF16), as torch reports its capabilities."""
    capabilities = torch.cpu.get_capabilities()
    return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))


def resolve_mode(mode: str = "auto") -> str:
    """``mode`` with ``"auto"`` decided for this CPU: ``"bf16"`` with bf16 instructions, ``"int8"`` without."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    if mode == "auto":
        return "bf16" if cpu_has_bf16() else "int8"
    return mode


def _cast(value: Any, dtype: torch.dtype) -> Any:
    """Floating-point tensors in ``value`` (a tensor, or one inside a tuple, list or dict) cast to ``dtype``."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, tuple | list):
        return type(value)(_cast(item, dtype) for item in value)
    if isinstance(value, dict):
        return {key: _cast(item, dtype) for key, item in value.items()}
    return value


def _inputs_to_bf16(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    return _cast(args, torch.bfloat16), _cast(kwargs, torch.bfloat16)


def _outputs_to_float(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
    return _cast(output, torch.float32)


def fast_cpu_inference(model: nn.Module, mode: Mode = "auto") -> nn.Module:
    """``model`` in eval mode, made faster for CPU inference in place (see the module's notes); returns it.

    ``model(x)`` still takes and returns float32. The logits move by bf16's or int8's rounding:
    benchmarks/cpu_fast.py measures the speed and the agreement with float32 on real pictures.
    """
    chosen = resolve_mode(mode)
    done = getattr(model, "fast_cpu_mode", None)
    if done is not None:
        raise ValueError(f"the model is already prepared for fast CPU inference ({done})")
    model.eval()
    if chosen == "bf16":
        model.to(torch.bfloat16)
        model.register_forward_pre_hook(_inputs_to_bf16, with_kwargs=True)
        model.register_forward_hook(_outputs_to_float)
    else:
        torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
    setattr(model, "fast_cpu_mode", chosen)  # noqa: B010  (nn.Module's __setattr__ is typed for tensors and modules)
    return model
