"""A read-only checkpoint: names, shapes and dtypes first, then one tensor at a time.

:class:`Checkpoint` is what every container reader provides (``safetensors_file``, ``torch_file``,
``npz_file``; ``reader.open_checkpoint`` picks one from a file's first bytes), and
:class:`StateDictCheckpoint` wraps a state dict already in memory. Training checkpoints are unwrapped
(``state_dict``, ``model``; ``state_dict_ema`` / ``model_ema`` with ``ema=True``) and ``module.`` (DDP) /
``_orig_mod.`` (``torch.compile``) prefixes stripped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import ConversionError, listed

WRAPPER_KEYS = ("state_dict", "model")
EMA_KEYS = ("state_dict_ema", "model_ema")
KEY_PREFIXES = ("module.", "_orig_mod.")
NPZ_PREFIXES = ("opt/target/",)

Shape = tuple[int, ...]


class Checkpoint:
    """A read-only checkpoint: ``keys()``, ``shape(k)``, ``dtype(k)`` up front, ``tensor(k)`` on demand."""

    container = "?"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.wrapper: str | None = None  # e.g. "state_dict_ema" when unwrapped from a train.py checkpoint
        self.side_config: dict[str, Any] = {}  # config.json beside the weights, when read from a directory
        self.directory: Path | None = None  # the model directory the weights were read from, if one was given
        self.preprocess_config: dict[str, Any] = {}  # preprocessor_config.json (Hugging Face), when present
        self.train_args: dict[str, Any] = {}  # the ``args`` a timm train.py checkpoint stores (model, model_kwargs)
        self._raw: dict[str, str] = {}  # clean name -> name in the file
        self._shapes: dict[str, Shape] = {}
        self._dtypes: dict[str, torch.dtype] = {}

    # --- what every container provides -----------------------------------------------------------
    def keys(self) -> list[str]:
        return list(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw

    def shape(self, key: str) -> Shape:
        return self._shapes[key]

    def dtype(self, key: str) -> torch.dtype:
        return self._dtypes[key]

    def meta(self, key: str) -> torch.Tensor:
        """A storage-less tensor with this entry's shape and dtype (for planning)."""
        return torch.empty(self._shapes[key], dtype=self._dtypes[key], device="meta")

    def tensor(self, key: str) -> torch.Tensor:
        """Read one tensor."""
        try:
            return self._read(key)
        except ConversionError:
            raise
        except Exception as err:  # a file that changed or broke after it was opened
            raise ConversionError(f"cannot read tensor {key!r}: {err}", self.path) from None

    def release(self, key: str) -> None:
        """Say that ``key`` has been consumed, so its memory can be given back."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor, in memory (for verification, which builds whole models anyway)."""
        return {key: self.tensor(key) for key in self._raw}

    def close(self) -> None:
        pass

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- helpers for the containers ----------------------------------------------------------------
    def _read(self, key: str) -> torch.Tensor:
        raise NotImplementedError

    def _set_entries(self, entries: Mapping[str, tuple[Shape, torch.dtype]], prefixes: tuple[str, ...]) -> None:
        for raw_key, (shape, dtype) in entries.items():
            key = strip_prefixes(raw_key, prefixes)
            if key in self._raw:
                raise ConversionError(
                    f"keys {self._raw[key]!r} and {raw_key!r} both name {key!r} once the "
                    f"{'/'.join(prefixes)} prefixes are removed",
                    self.path,
                )
            self._raw[key] = raw_key
            self._shapes[key] = tuple(int(d) for d in shape)
            self._dtypes[key] = dtype
        if not self._raw:
            raise ConversionError("holds no tensors", self.path)


def strip_prefixes(key: str, prefixes: tuple[str, ...]) -> str:
    """Remove wrapper prefixes, in any order and nesting (``_orig_mod.module.x`` -> ``x``)."""
    stripped = True
    while stripped:
        stripped = False
        for prefix in prefixes:
            if key.startswith(prefix):
                key, stripped = key[len(prefix) :], True
    return key


class StateDictCheckpoint(Checkpoint):
    """A state dict already in memory (what timm's loaders hand to ``checkpoint_filter_fn``)."""

    container = "state dict"

    def __init__(self, state_dict: Mapping[str, Any], label: str = "state dict") -> None:
        super().__init__(Path(label))
        tensors, self.wrapper = unwrap(state_dict, False, self.path)
        self._tensors = {k: v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for k, v in tensors.items()}
        self._set_entries({k: (tuple(v.shape), v.dtype) for k, v in self._tensors.items()}, KEY_PREFIXES + NPZ_PREFIXES)

    def _read(self, key: str) -> torch.Tensor:
        return self._tensors[self._raw[key]]


def gate_error(path: Path) -> Callable[[str], ConversionError]:
    """The ``error`` the gate's readers take: their messages start with the file's name, kept as ``.path``."""
    prefix = f"{path}: "

    def error(message: str) -> ConversionError:
        if message.startswith(prefix):
            return ConversionError(message[len(prefix) :], path)
        return ConversionError(message)

    return error


def brief(err: BaseException) -> str:
    """``Type: first line`` of a library's error, for messages about damaged files."""
    first = str(err).strip().split("\n")[0]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _describe(obj: Any) -> str:
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def unwrap(obj: Any, ema: bool, path: Path) -> tuple[dict[str, torch.Tensor], str | None]:
    """The state dict inside a checkpoint: itself, or under state_dict/model (or the EMA keys)."""
    if not isinstance(obj, Mapping):
        raise ConversionError(
            f"holds {_describe(obj)}, not a state dict (a mapping of parameter names to tensors)", path
        )
    wrapper = None
    if ema:
        wrapper = next((k for k in EMA_KEYS if isinstance(obj.get(k), Mapping)), None)
        if wrapper is None:
            raise ConversionError(
                f"EMA weights requested but there is no {' or '.join(EMA_KEYS)} in it "
                f"(top-level keys: {listed(obj, 8)})",
                path,
            )
    elif not any(isinstance(v, torch.Tensor) for v in obj.values()):
        wrapper = next((k for k in WRAPPER_KEYS if isinstance(obj.get(k), Mapping)), None)
    state_dict = obj[wrapper] if wrapper else obj
    for key, value in state_dict.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            where = f" under {wrapper!r}" if wrapper else ""
            raise ConversionError(
                f"is not a state dict: entry {key!r}{where} is {_describe(value)}, not a tensor (expected a "
                f"mapping of parameter names to tensors, or a training checkpoint holding one under "
                f"{' / '.join(WRAPPER_KEYS + EMA_KEYS)}; top-level keys: {listed(obj, 8)})",
                path,
            )
    return dict(state_dict), wrapper
