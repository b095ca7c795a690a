"""The model-directory format's former import path: it lives in :mod:`timm_vitscratch.model_dir`, beneath both
conversion and the Hub client. Every name resolves there, so code that imports it from here keeps working."""

from typing import Any

from .. import model_dir as _model_dir


def __getattr__(name: str) -> Any:
    return getattr(_model_dir, name)
