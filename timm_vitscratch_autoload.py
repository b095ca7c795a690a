"""Make every process that imports ``timm`` see the ``scratch_*`` models, with no import of ours.

timm has no plugin entry points, so the wheel installs ``timm_vitscratch_autoload.pth`` at the root
of site-packages (see ``setup.py``). Python runs its one line at start-up, which imports this
module and calls :func:`install` unless the environment opts out. That only puts a :class:`PostImportHook` on ``sys.meta_path``: no torch, no timm,
nothing imported beyond this module, so start-up stays cheap. When a program first imports
``timm``, the hook lets timm's own loader run and, once ``timm/__init__.py`` has finished, imports
``timm_vitscratch``, whose ``@register_model`` functions register the models; then it removes itself.

An explicit ``import timm_vitscratch`` is the same module import, so it is idempotent with this path.
``TIMM_VITSCRATCH_NO_AUTOLOAD=1`` (any value but empty or ``0``) in the environment of a starting
interpreter disables the hook (this module is not even imported); explicit imports still register
the models.

This module is loaded at every interpreter start-up: keep it free of imports beyond ``os`` and
``sys`` (both already loaded by then).
"""

import os
import sys

# nothing beyond os and sys is imported at start-up (not even __future__, so the annotations naming
# these types are strings): mypy reads this name as true, the interpreter as False
TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.abc
    import importlib.machinery
    import types
    from collections.abc import Sequence
    from typing import Any

DISABLE_ENV = "TIMM_VITSCRATCH_NO_AUTOLOAD"
TARGET = "timm"
PLUGIN = "timm_vitscratch"


def disabled() -> bool:
    """Whether the environment opts out (the ``.pth`` line applies the same rule before importing us)."""
    return os.environ.get(DISABLE_ENV, "") not in ("", "0")


def import_plugin(plugin: str) -> None:
    """Import ``plugin``; a failure becomes a warning so that importing timm itself still works."""
    try:
        __import__(plugin)
    except Exception as err:
        import warnings

        warnings.warn(
            f"{plugin} is installed but could not register its models with timm: {err!r}. "
            f"`import {plugin}` shows the full error; set {DISABLE_ENV}=1 to stop the automatic import.",
            RuntimeWarning,
            stacklevel=2,
        )


class PostImportHook:
    """``sys.meta_path`` finder: after ``target`` finishes importing, import ``plugin``.

    It answers only for the top-level ``target`` module, and only by wrapping the spec that the
    other finders produce, so timm is found and executed exactly as without it. Submodule imports
    (timm importing its own modules) never reach it: the parent package is imported first.
    """

    def __init__(self, target: str, plugin: str) -> None:
        self.target = target
        self.plugin = plugin

    def find_spec(
        self, fullname: str, path: "Sequence[str] | None" = None, target: "types.ModuleType | None" = None
    ) -> "importlib.machinery.ModuleSpec | None":
        if fullname != self.target:
            return None
        spec = None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ImportPluginAfterExec(spec.loader, self)
        return spec

    def remove(self) -> None:
        """Take this hook off ``sys.meta_path`` (its job is done)."""
        while self in sys.meta_path:
            sys.meta_path.remove(self)


class _ImportPluginAfterExec:
    """Loader wrapper: runs the real loader, then imports the plugin."""

    def __init__(self, loader: "importlib.abc.Loader", hook: "PostImportHook") -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: "importlib.machinery.ModuleSpec") -> "types.ModuleType | None":
        return self._loader.create_module(spec)

    def exec_module(self, module: "types.ModuleType") -> None:
        # Give the module its real loader back before it runs, so that neither timm nor any tool
        # that inspects timm.__loader__ / timm.__spec__ ever sees this wrapper.
        module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader
        self._loader.exec_module(module)  # if timm fails to import, the hook stays for a retry
        self._hook.remove()
        # timm is complete here, so our modules (which import from timm.models) can load. If the
        # plugin itself is mid-import (`import timm_vitscratch` came first and reached
        # `import timm`), this returns the partial module and that import registers the models.
        import_plugin(self._hook.plugin)

    def __getattr__(self, name: str) -> "Any":
        # anything else a tool may ask of the loader (get_resource_reader, is_package, ...)
        if name == "_loader":
            raise AttributeError(name)
        return getattr(self._loader, name)


def installed_hook(target: str = TARGET) -> "PostImportHook | None":
    """The armed :class:`PostImportHook` for ``target`` on ``sys.meta_path``, or None."""
    for finder in sys.meta_path:
        if isinstance(finder, PostImportHook) and finder.target == target:
            return finder
    return None


def install(target: str = TARGET, plugin: str = PLUGIN) -> None:
    """Arm the import of ``plugin`` for the next ``import target`` (the ``.pth`` calls this).

    Does nothing when opted out or already armed; imports ``plugin`` at once if ``target`` has
    already been imported (another start-up hook got there first).
    """
    if disabled() or installed_hook(target) is not None:
        return
    if target in sys.modules:
        import_plugin(plugin)
        return
    sys.meta_path.insert(0, PostImportHook(target, plugin))
