"""The pickle of a ``torch.save`` file, read as records of its tensors, without ``torch.load`` and without
running anything from the file.

First the opcodes are walked with ``pickletools.genops`` (pure Python, nothing built): at most
:data:`MAX_PICKLE_OPS` of them, memo indices below that, no global outside :data:`ALLOWED_GLOBALS`, and
none of the opcodes a checkpoint never needs (sets, out-of-band buffers, old-style instances, the
extension registry). Only then does an unpickler run,
whose ``find_class`` knows a short allow-list, each entry building a small record instead of an object:
a :class:`StorageRecord` per stored buffer (its key, dtype and element count) and a :class:`TensorRecord`
per tensor (its storage, offset, sizes and strides). Anything else is refused by name.
:mod:`.torch_save` checks the records against the bounds of :mod:`.checkpoints` before ``torch.load``.
"""

from __future__ import annotations

import argparse
import codecs
import io
import pickle
import pickletools
import reprlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .weight_dtypes import EXPECTED

#: bytes of one pickle (a checkpoint's pickle takes about 100 bytes a tensor)
MAX_PICKLE_BYTES = 8 << 20
#: opcodes in all (about 33 a tensor): each builds at most one small object
MAX_PICKLE_OPS = 40 * 16_384
#: ... of which build a container (a dict, list or tuple: about 6 a tensor)
MAX_CONTAINER_OPS = 8 * 16_384
#: once the tensors are counted: at most this many opcodes a tensor, beyond OPS_FLOOR (args, metrics ...)
OPS_PER_TENSOR = 64
OPS_FLOOR = 1 << 18
#: nesting of containers in the unpickled checkpoint (an optimizer's state is 4 deep)
MAX_NESTING = 32

_REFUSED_OPS = {
    "EMPTY_SET",
    "ADDITEMS",
    "FROZENSET",
    "BYTEARRAY8",
    "NEXT_BUFFER",
    "READONLY_BUFFER",
    "INST",
    "OBJ",
    "EXT1",
    "EXT2",
    "EXT4",
    "NEWOBJ_EX",
}
_MEMO_OPS = {"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"}
_CONTAINER_OPS = {"EMPTY_DICT", "DICT", "EMPTY_LIST", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"}

#: torch.save's storage classes, by name, and the dtype of their elements
STORAGE_DTYPES = {
    "DoubleStorage": torch.float64,
    "FloatStorage": torch.float32,
    "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
}
_DTYPE_NAMES = {str(dtype).removeprefix("torch."): dtype for dtype in STORAGE_DTYPES.values()}
#: the globals a checkpoint's pickle may name ("module name"), each building a record or a plain value
ALLOWED_GLOBALS = {
    "collections OrderedDict",
    "torch._utils _rebuild_tensor_v2",
    "torch._utils _rebuild_tensor_v3",
    "torch._utils _rebuild_parameter",
    "torch._utils _rebuild_parameter_with_state",
    "torch._tensor _rebuild_from_type_v2",
    "torch Tensor",
    "torch.nn.parameter Parameter",
    "argparse Namespace",
    "_codecs encode",
    "torch device",
    *(f"torch {name}" for name in STORAGE_DTYPES),
    *(f"torch {name}" for name in _DTYPE_NAMES),
}


#: storage classes of tensors that are never weights (gate.weight_dtypes): refused with what they hold
_NOT_WEIGHT_STORAGES = {
    "torch ComplexFloatStorage": "complex64",
    "torch ComplexDoubleStorage": "complex128",
    "torch.storage UntypedStorage": "float8, unsigned integer or other",
}
NOT_WEIGHTS = (
    f"weights are {EXPECTED}, and tensors of another dtype (float8, integer, bool, complex) are refused, never "
    f"cast: cast them to a float dtype and save the file again"
)


class Refused(Exception):
    """The pickle asks for something a checkpoint reader does not build; the message says what."""


class Incomplete(Refused):
    """The bytes end before the pickle's STOP."""


class UnsafeGlobal(Refused):
    """The pickle names a global outside the allow-list (it would run code, or build a non-tensor object)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass(frozen=True, slots=True)
class StorageType:
    name: str
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class StorageRecord:
    """A buffer of ``numel`` elements of ``dtype`` stored under ``key``."""

    key: str
    dtype: torch.dtype
    numel: int
    view: object = None  # legacy files only: (view key, offset, size) of a storage view


@dataclass(frozen=True, slots=True)
class TensorRecord:
    """A tensor: ``shape`` elements of its storage, from ``offset`` with ``stride``."""

    storage: StorageRecord
    offset: Any  # as the pickle gave them: checked by .checkpoints before use
    shape: Any
    stride: Any


class Namespace:
    """What a pickled ``argparse.Namespace`` becomes here (one class per read: nothing shared is changed)."""

    def __setstate__(self, state: object) -> None:
        self.state = state


def scan(data: bytes, budget: list[int], label: str) -> int:
    """Walk one pickle's opcodes without building anything; returns where its STOP ends.

    ``budget`` is ``[opcodes left, container opcodes left]``, shared by the pickles of one file. Raises
    :class:`Refused`.
    """
    try:
        for opcode, arg, pos in pickletools.genops(io.BytesIO(data)):
            budget[0] -= 1
            if budget[0] < 0:
                raise Refused(
                    f"its {label} has more than {MAX_PICKLE_OPS:,} pickle opcodes; at most that many are read"
                )
            if opcode.name in _CONTAINER_OPS:
                budget[1] -= 1
                if budget[1] < 0:
                    raise Refused(
                        f"its {label} builds more than {MAX_CONTAINER_OPS:,} dicts, lists and tuples; at most that "
                        f"many are read (a checkpoint builds about 6 a tensor)"
                    )
            if opcode.name in _REFUSED_OPS:
                raise Refused(f"its {label} uses the pickle opcode {opcode.name}, which no checkpoint needs")
            if opcode.name in _MEMO_OPS and not (isinstance(arg, int) and 0 <= arg < MAX_PICKLE_OPS):
                raise Refused(
                    f"its {label} uses pickle memo slot {str(arg)[:20]}; expected one below {MAX_PICKLE_OPS:,}"
                )
            if opcode.name == "GLOBAL" and arg not in ALLOWED_GLOBALS:  # (STACK_GLOBAL: see find_class)
                if arg in _NOT_WEIGHT_STORAGES:
                    raise Refused(
                        f"it holds {_NOT_WEIGHT_STORAGES[arg]} tensors (torch writes them with "
                        f"{arg.replace(' ', '.', 1)}); {NOT_WEIGHTS}"
                    )
                raise UnsafeGlobal(str(arg).replace(" ", ".", 1)[:200])
            if opcode.name == "STOP":
                return (pos or 0) + 1
    except Refused:
        raise
    except ValueError as err:
        if any(words in str(err) for words in ("but only", "exhausted", "not enough data")):  # genops' words for it
            raise Incomplete(f"its {label} is not a complete pickle (truncated?): {err}") from None
        raise Refused(f"its {label} is not a readable pickle (truncated or corrupt?): ValueError: {err}") from None
    except Exception as err:  # an unknown opcode, a malformed argument ...
        raise Refused(
            f"its {label} is not a readable pickle (truncated or corrupt?): {type(err).__name__}: {err}"
        ) from None
    raise Incomplete(f"its {label} is not a complete pickle (no STOP opcode: truncated?)")


class RecordUnpickler(pickle.Unpickler):
    """An unpickler whose globals build records (see the module's docstring); run only after :func:`scan`."""

    def __init__(self, data: bytes, legacy: bool) -> None:
        super().__init__(io.BytesIO(data))
        self.legacy = legacy
        self.storages: dict[str, StorageRecord] = {}
        namespace = type("Namespace", (Namespace,), {})  # fresh: a BUILD on the class changes only this copy
        # bound methods and per-read objects only: a pickle's BUILD cannot change a shared function
        self.allowed: dict[tuple[str, str], Any] = {
            ("collections", "OrderedDict"): OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2"): self._rebuild_tensor,
            ("torch._utils", "_rebuild_tensor_v3"): self._rebuild_tensor_v3,
            ("torch._utils", "_rebuild_parameter"): self._rebuild_parameter,
            ("torch._utils", "_rebuild_parameter_with_state"): self._rebuild_parameter,
            ("torch._tensor", "_rebuild_from_type_v2"): self._rebuild_from_type,
            ("torch", "Tensor"): self._tensor_type,
            ("torch.nn.parameter", "Parameter"): self._tensor_type,
            ("argparse", "Namespace"): namespace,
            ("_codecs", "encode"): self._encode,
            ("torch", "device"): self._device,
        }
        for name, dtype in STORAGE_DTYPES.items():
            self.allowed[("torch", name)] = StorageType(name, dtype)
        for name, dtype in _DTYPE_NAMES.items():
            self.allowed[("torch", name)] = dtype

    def find_class(self, module: str, name: str) -> Any:
        found = self.allowed.get((module, name))
        if found is None:
            raise UnsafeGlobal(f"{module}.{name}"[:200])
        return found

    def persistent_load(self, pid: Any) -> StorageRecord:
        fields = 6 if self.legacy else 5
        if not isinstance(pid, tuple) or len(pid) != fields or pid[0] not in ("storage", b"storage"):
            raise Refused(f"its pickle refers to {_short(pid)}; expected a storage record of {fields} fields")
        storage_type, key, location, numel = pid[1:5]
        if not isinstance(storage_type, StorageType):
            raise Refused(f"its pickle names storage type {_short(storage_type)}; expected a torch storage class")
        if not isinstance(key, str) or len(key) > 64 or not isinstance(location, (str, bytes)) or len(location) > 64:
            raise Refused(f"its pickle has a storage key {_short(key)} at {_short(location)}; expected short strings")
        if not isinstance(numel, int) or isinstance(numel, bool) or numel < 0:
            raise Refused(f"its storage {key!r} claims {_short(numel)} elements; expected a count")
        view = pid[5] if self.legacy else None
        record = StorageRecord(key, storage_type.dtype, numel, view)
        known = self.storages.setdefault(key, record)
        if known != record:
            raise Refused(f"its storage {key!r} is described twice, differently ({known} and {record})")
        return record

    # --- the allow-list's functions: records only ----------------------------------------------------
    def _rebuild_tensor(self, storage: Any, offset: Any, shape: Any, stride: Any, *rest: Any) -> TensorRecord:
        if not isinstance(storage, StorageRecord):
            raise Refused(f"its pickle rebuilds a tensor from {_short(storage)}; expected a stored buffer")
        return TensorRecord(storage, offset, shape, stride)

    def _rebuild_tensor_v3(self, storage: Any, offset: Any, shape: Any, stride: Any, *rest: Any) -> TensorRecord:
        dtype = rest[2] if len(rest) > 2 else "?"
        raise Refused(f"it holds {_short(dtype).removeprefix('torch.')} tensors; {NOT_WEIGHTS}")

    def _rebuild_parameter(self, data: Any, *rest: Any) -> Any:
        if not isinstance(data, TensorRecord):
            raise Refused(f"its pickle makes a parameter of {_short(data)}; expected a tensor")
        return data

    def _tensor_type(self, *args: Any) -> Any:
        raise Refused("its pickle calls a tensor type directly; expected tensors rebuilt from storages")

    def _rebuild_from_type(self, func: Any, new_type: Any, args: Any, state: Any) -> Any:
        if func != self._rebuild_tensor or new_type != self._tensor_type or not isinstance(args, tuple):
            raise Refused("its pickle rebuilds a tensor subclass; expected plain tensors")
        return func(*args)

    @staticmethod
    def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
        if not isinstance(text, str) or encoding != "latin1":
            raise Refused("its pickle encodes something other than bytes; expected _codecs.encode(str, 'latin1')")
        return codecs.encode(text, "latin1")

    @staticmethod
    def _device(*args: Any) -> str:
        if not args or not all(isinstance(a, (str, int)) for a in args):
            raise Refused("its pickle names a device other than by a name; expected e.g. 'cpu'")
        return str(args[0])


def unpickle(data: bytes, budget: list[int], label: str, legacy: bool = False) -> tuple[Any, int, RecordUnpickler]:
    """The records of the first pickle in ``data`` (scanned first), where it ends, and its unpickler."""
    end = scan(data, budget, label)
    unpickler = RecordUnpickler(data[:end], legacy)
    try:
        return unpickler.load(), end, unpickler
    except Refused:
        raise
    except RecursionError:
        raise Refused(f"its {label} nests deeper than this reader follows") from None
    except Exception as err:  # damage the scan could not see: a GET of an empty slot, a REDUCE of a non-callable
        raise Refused(
            f"its {label} is not a readable pickle (truncated or corrupt?): {type(err).__name__}: {err}"
        ) from None


def new_budget() -> list[int]:
    """What the pickles of one file may use in all (see :func:`scan`)."""
    return [MAX_PICKLE_OPS, MAX_CONTAINER_OPS]


def check_ops_per_tensor(budget: list[int], tensors: int) -> None:
    """The opcodes used are what ``tensors`` tensors need (:data:`OPS_PER_TENSOR` each, beyond :data:`OPS_FLOOR`):
    ``torch.load`` reads the pickle again, in Python, so it runs only on as much pickle as the tensors explain."""
    used = MAX_PICKLE_OPS - budget[0]
    if used > OPS_FLOOR + OPS_PER_TENSOR * tensors:
        raise Refused(
            f"its pickle has {used:,} opcodes for {tensors:,} tensors; at most {OPS_PER_TENSOR} a tensor beyond "
            f"{OPS_FLOOR:,} are read (a checkpoint's pickle has about 33 a tensor)"
        )


_CONTAINERS = (dict, list, tuple, Namespace, argparse.Namespace)


def _children(node: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, dict):
        return iter(node.items())
    if isinstance(node, (list, tuple)):
        return enumerate(node)
    state = getattr(node, "state", None) if isinstance(node, Namespace) else vars(node)
    return iter(state.items()) if isinstance(state, dict) else iter(())


def walk(obj: Any, tensor_type: type | tuple[type, ...], budget: int) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` for every tensor reached in ``obj``, by every path (a tensor named twice counts twice),
    in a fixed order (containers' own); the name joins the keys on the way with ``/``.

    Raises :class:`Refused` past :data:`MAX_NESTING` levels, when a container holds itself, or past
    ``budget`` visits (a container shared many times would make its tensors many). Only tensors and
    containers are kept on the way: a list of a million numbers costs no more than the list.
    """
    if isinstance(obj, tensor_type):
        yield "", obj
        return
    if not isinstance(obj, _CONTAINERS):
        return
    # each entry: a container's name, the ids of the containers down to it, and its children still to visit
    stack: list[tuple[str, tuple[int, ...], Iterator[tuple[Any, Any]]]] = [("", (id(obj),), _children(obj))]
    while stack:
        name, above, children = stack[-1]
        for key, child in children:
            budget -= 1
            if budget < 0:
                raise Refused("its pickle reaches the same containers over and over; expected each once")
            if isinstance(child, tensor_type):
                yield (f"{name}/{_key(key)}" if name else _key(key)), child
                break
            if isinstance(child, _CONTAINERS):
                inner = f"{name}/{_key(key)}" if name else _key(key)
                if id(child) in above:
                    raise Refused(f"its pickle has a container that holds itself (at {inner!r})")
                if len(above) >= MAX_NESTING:
                    raise Refused(f"its pickle nests containers deeper than {MAX_NESTING} levels")
                stack.append((inner, above + (id(child),), _children(child)))
                break
        else:
            stack.pop()


def _key(key: Any) -> str:
    text = key if isinstance(key, str) else repr(key)
    return text if len(text) <= 200 else text[:197] + "..."


def _short(value: object) -> str:
    return reprlib.repr(value)  # bounded in depth and length, whatever the pickle built
