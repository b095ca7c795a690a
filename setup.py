"""Build hooks only (metadata lives in pyproject.toml): ship ``timm_vitscratch_autoload.pth``.

The ``.pth`` must land at the root of site-packages, where ``site`` runs it at every start-up;
``data_files`` cannot put it there. Regular wheels get it from ``build_py`` (everything in
``build_lib`` goes to the wheel's root). PEP 660 editable wheels are assembled by setuptools'
``editable_wheel`` from an editable "strategy" and ignore ``build_lib``, so we wrap the strategy and
write the file into the same wheel, which keeps it in RECORD (``pip uninstall`` removes it).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "timm_vitscratch_autoload.pth"
# One line, run by `site` at start-up. It reads the opt-out variable itself, so that an opted-out
# interpreter does not even import the module (timm_vitscratch_autoload.disabled() has the same rule).
# Editable installs: this name sorts after setuptools' "__editable__.*.pth", whose finder must be in
# place before the module can be imported from the source tree.
PTH_CONTENT = (
    "import os; os.environ.get('TIMM_VITSCRATCH_NO_AUTOLOAD', '') in ('', '0')"
    " and __import__('timm_vitscratch_autoload').install()\n"
)


class build_py_with_pth(build_py):
    """``build_py`` that also writes the ``.pth`` into ``build_lib`` (the regular wheel's root)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            Path(self.build_lib).mkdir(parents=True, exist_ok=True)
            Path(self.build_lib, PTH_NAME).write_text(PTH_CONTENT, encoding="utf-8")

    def get_outputs(self, include_bytecode: bool = True) -> list:
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else [*outputs, str(Path(self.build_lib, PTH_NAME))]


class _StrategyWithPth:
    """An editable strategy that also writes the ``.pth`` into the editable wheel."""

    def __init__(self, strategy) -> None:
        self._strategy = strategy
        self.called = False

    def __call__(self, wheel, files, mapping) -> None:
        self._strategy(wheel, files, mapping)
        wheel.writestr(PTH_NAME, PTH_CONTENT.encode("utf-8"))
        self.called = True

    def __enter__(self):
        self._strategy.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self._strategy.__exit__(*exc_info)


class editable_wheel_with_pth(editable_wheel):
    """``editable_wheel`` whose wheel also carries the ``.pth``; fails loudly if setuptools changed."""

    def _select_strategy(self, name, tag, build_lib):
        self._pth_strategy = _StrategyWithPth(super()._select_strategy(name, tag, build_lib))
        return self._pth_strategy

    def run(self) -> None:
        self._pth_strategy = None
        super().run()
        if self._pth_strategy is None or not self._pth_strategy.called:
            raise RuntimeError(
                f"setuptools' editable_wheel no longer calls _select_strategy: {PTH_NAME} was not added "
                "to the editable wheel, so timm would not see the scratch_* models. Update setup.py."
            )


setup(cmdclass={"build_py": build_py_with_pth, "editable_wheel": editable_wheel_with_pth})
