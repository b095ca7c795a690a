"""timm's own ``tests/test_models.py``, from the sdist of the installed timm, run over chosen models.

The sdist comes from the package registry (``pip download``) the first time and is cached beside the
virtual environment (``<sys.prefix>/timm-tests/``), never in the repository. The test file is read
out of it and patched at run time so that timm's name filters treat our registrations as they treat
timm's own ViTs; every patch anchor must match exactly once, so a changed timm file fails loudly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable
from pathlib import Path

import timm

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(sys.prefix) / "timm-tests"
TEST_FILE = "tests/test_models.py"
PLUGIN = "tests.timm_suite.selection_plugin"

#: timm's tests that take a model name from its registry and apply to a ViT. Left out:
#: ``test_model_load_pretrained`` (downloads weights) and the tests with fixed model lists.
PER_MODEL_TESTS = (
    "test_model_forward",
    "test_model_backward",
    "test_model_default_cfgs_non_std",
    "test_model_forward_torchscript",
    "test_model_forward_intermediates_features",
    "test_model_forward_intermediates",
    "test_prune_intermediate_layers_contract",
    "test_model_forward_fx",
    "test_model_backward_fx",
    "test_model_forward_fx_torchscript",
)


def sdist(version: str = timm.__version__) -> Path:
    """The timm sdist of ``version``, downloaded from the package registry once and then cached."""
    target = CACHE_DIR / f"timm-{version}.tar.gz"
    if target.is_file() and tarfile.is_tarfile(target):
        return target
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as download_dir:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"timm=={version}",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
                download_dir,
            ],
            capture_output=True,
            text=True,
        )
        downloaded = list(Path(download_dir).glob("timm-*.tar.gz"))
        if result.returncode or len(downloaded) != 1:
            raise RuntimeError(
                f"could not download the timm {version} sdist from the package registry "
                f"(pip exit {result.returncode}):\n{result.stdout}{result.stderr}"
            )
        os.replace(downloaded[0], target)  # atomic: a concurrent run sees the whole file or none
    return target


def read_test_file(archive: Path, member: str = TEST_FILE) -> str:
    """One file of the sdist, read from the archive (nothing is extracted to disk)."""
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]  # "timm-<version>"
        handle = tar.extractfile(f"{top}/{member}")
        if handle is None:
            raise RuntimeError(f"{archive.name} has no file {member}")
        return handle.read().decode("utf-8")


def _our_modules() -> list[str]:
    """The registry modules that hold scratch_* models (timm's feature tests select by module name)."""
    return sorted(m for m in timm.list_modules() if timm.list_models("scratch_*", module=m))


def patch(source: str) -> str:
    """Extend timm's name filters so that they treat ours as timm's ViTs.

    * ``NON_STD_FILTERS`` holds ``vit_*`` and ``deit*``: their head/feature shapes are a token
      sequence, so the standard-CNN config test is replaced by the non-standard one. Ours too.
    * ``FEAT_INTER_FILTERS`` lists the modules whose models have ``forward_intermediates`` and
      ``features_only`` through timm's feature getter (``vision_transformer``, ``deit``). Ours too.
    """
    anchor = "NUM_NON_STD = len(NON_STD_FILTERS)"
    count = source.count(anchor)
    if count != 1:
        raise RuntimeError(
            f"timm {timm.__version__}'s {TEST_FILE} holds {anchor!r} {count} times, expected once: "
            "its filter lists changed; update tests/timm_suite/timm_tests.py:patch"
        )
    for name in ("FEAT_INTER_FILTERS = [", "NON_STD_FILTERS = ["):
        if source.count(name) != 1:
            raise RuntimeError(f"timm {timm.__version__}'s {TEST_FILE} no longer defines {name[:-4]!r} once")
    extension = (
        "# added at test time by timm_vitscratch: treat the scratch_* ViTs as timm's own ViTs\n"
        f"FEAT_INTER_FILTERS += {_our_modules()!r}\n"
        "NON_STD_FILTERS += ['scratch_*']\n"
    )
    return source.replace(anchor, extension + anchor)


def prepare(directory: Path) -> Path:
    """Write the patched ``test_models.py`` (and an empty pytest.ini that makes it the rootdir) into ``directory``."""
    test_file = directory / "test_models.py"
    test_file.write_text(patch(read_test_file(sdist())), encoding="utf-8")
    # the child pytest must not pick up the repository's pyproject.toml (its addopts, testpaths)
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return test_file


Outcomes = dict[tuple[str, str], list[tuple[str, str]]]

#: this session's run, once it happened: ``section`` = (title, table) for the end-of-run report
LAST_RUN: dict[str, tuple[str, str]] = {}


def run(
    directory: Path, models: Iterable[str], tests: Iterable[str] = PER_MODEL_TESTS, timeout: float = 900
) -> tuple[Outcomes, str]:
    """Run timm's file over ``models``; return ``{(test, model): [(outcome, message), ...]}`` and the output.

    One entry per parametrized item (timm's config tests run once per pretrained tag).
    """
    test_file = prepare(directory)
    report = directory / "report.xml"
    env = {
        **os.environ,
        "TIMM_SUITE_MODELS": ",".join(models),
        "TIMM_SUITE_TESTS": ",".join(tests),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(test_file),
            "-p",
            PLUGIN,
            "-p",
            "no:cacheprovider",
            "-q",
            "-rfEs",
            f"--junitxml={report}",
        ],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = result.stdout + result.stderr
    if result.returncode not in (0, 1) or not report.is_file():  # 0: all passed, 1: some failed
        raise RuntimeError(f"timm's test run did not complete (pytest exit {result.returncode}):\n{output[-6000:]}")
    return parse_report(report), output


def parse_report(report: Path) -> Outcomes:
    outcomes: Outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        test, _, params = name.partition("[")
        model = params.rstrip("]").split("-")[-1].split(".")[0]  # "1-vit_tiny_patch16_224.augreg_in21k"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = {"failure": "failed"}.get(child.tag, child.tag), child.get("message", "")
                break
        outcomes.setdefault((test, model), []).append((outcome, message))
    return outcomes


def summary(outcomes: Outcomes, test: str, model: str) -> str:
    """One word for a (test, model) pair: passed / failed / error / skipped / not run."""
    results = [outcome for outcome, _ in outcomes.get((test, model), [])]
    if not results:
        return "not run"
    for worst in ("error", "failed", "skipped"):
        if worst in results:
            return worst
    return "passed"


def table(outcomes: Outcomes, models: list[str], tests: Iterable[str] = PER_MODEL_TESTS) -> str:
    """A Markdown table: one row per timm test, one column per model."""
    lines = ["| timm test | " + " | ".join(models) + " |", "|---" * (len(models) + 1) + "|"]
    for test in tests:
        lines.append(f"| {test} | " + " | ".join(summary(outcomes, test, model) for model in models) + " |")
    return "\n".join(lines)
