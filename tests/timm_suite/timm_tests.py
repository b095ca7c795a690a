"""timm's own ``tests/test_models.py``, from the sdist of the installed timm, run over chosen models.

The sdist comes from the package registry (``pip download``) the first time and is cached beside the
virtual environment (``<sys.prefix>/timm-tests/``), never in the repository. The test file is read
out of it and patched at run time so that timm's name filters treat our registrations as they treat
timm's own ViTs; every patch anchor must match exactly once, so a changed timm file fails loudly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable
from pathlib import Path

import timm

from tests.support.option_models import OPTION_MODELS
from tests.support.time_limits import calibration_seconds

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

#: timm's prune contract prunes the model at every block, deep-copying it three times per block; timm's own CI
#: leaves it out as too slow, and on a full-size ViT it takes most of the suite's time. It runs on the small option
#: models (4 blocks, 64x64), which share every line of the full-size ViTs' pruning code, and on the distilled DeiT
#: (its second head is pruned too); not on the full-size ViTs, ours (the same code) or timm's (timm's code).
PRUNE_TEST = "test_prune_intermediate_layers_contract"
PRUNE_MODELS = frozenset({"scratch_deit_ti16_distilled", *OPTION_MODELS})


#: DINOv3, ours and timm's of the same architecture: the GELU and the SwiGLU + q/v-bias forms at ViT-S width (the
#: sizes above share their code; timm's suite leaves out its own 7B, as the classic family's tests leave out L and H)
DINOV3_MODELS = {
    "scratch_dinov3_s16": "vit_small_patch16_dinov3",
    "scratch_dinov3_s16_plus_qkvb": "vit_small_plus_patch16_dinov3_qkvb",
}
#: EVA02 tiny, ours and timm's (timm's Eva at 224 px, inside every input limit of timm's tests; the other EVA02
#: and Perception Encoder layouts run as small option models, tests/support/option_models.py)
EVA02_MODELS = {"scratch_eva02_t14": "eva02_tiny_patch14_224"}
#: timm's FX backward test takes inputs up to 224 px and skips models whose default input is larger, DINOv3's
#: 256 px among them (its own DINOv3 too); tests/models/test_dinov3_tracing.py traces and backpropagates ours
BACKWARD_FX_TEST = "test_model_backward_fx"


def selected(test: str, model: str) -> bool:
    """Whether timm's ``test`` runs on ``model`` here: every per-model test does, but :data:`PRUNE_TEST` (on
    :data:`PRUNE_MODELS` only) and :data:`BACKWARD_FX_TEST` (not on the DINOv3 models, which timm skips)."""
    if test == BACKWARD_FX_TEST:
        return model not in DINOV3_MODELS and model not in DINOV3_MODELS.values()
    return test != PRUNE_TEST or model in PRUNE_MODELS


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


#: seconds the child may run, set by hand (0: no limit); unset, the limit comes from :func:`time_limit`
TIMEOUT_VARIABLE = "TIMM_SUITE_TIMEOUT"
#: seconds of the suite per model, in units of :func:`calibration_seconds` measured just before it on the same
#: machine. Measured on a shared 2-core machine: 11 models (10 now) took 352 s while the calibration took 0.23 s at a
#: quiet moment and 5.0 s at a busy one (139 and 6 per model); the larger ratio, rounded up, is used.
SUITE_PER_MODEL = 150.0
#: how many times that estimate the limit allows: the load may grow after the calibration (another job starts)
MARGIN = 4.0
#: no limit is shorter than this: five times the 352 s above, for a calibration that ran at a quiet moment
MINIMUM_LIMIT = 1800.0


def time_limit(models: int) -> tuple[float, str]:
    """The child's time limit in seconds for ``models`` models, and where it comes from (for the message)."""
    value = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if value:
        try:
            return float(value), f"set by {TIMEOUT_VARIABLE}"
        except ValueError:
            raise SuiteIncomplete(f"{TIMEOUT_VARIABLE}={value!r}: expected a number of seconds (0: no limit)") from None
    calibration = calibration_seconds()
    expected = calibration * SUITE_PER_MODEL * models
    limit = max(MINIMUM_LIMIT, MARGIN * expected)
    return limit, f"{MARGIN:.0f}× the {expected:.0f} s expected here from a {calibration:.1f} s calibration run"


class SuiteIncomplete(Exception):
    """timm's test run did not finish (stopped at its time limit, or the child pytest failed to run): one line."""


def run(
    directory: Path,
    models: Iterable[str],
    timeout: float,
    tests: Iterable[str] = PER_MODEL_TESTS,
    timeout_origin: str = "",
) -> Outcomes:
    """Run timm's file over ``models``; return ``{(test, model): [(outcome, message), ...]}``.

    One entry per parametrized item (timm's config tests run once per pretrained tag). ``timeout``: seconds the
    child may run (0: no limit; ``timeout_origin`` says where it came from); past it, the child is stopped and
    :class:`SuiteIncomplete` says so in one line, with how far it got.
    """
    test_file = prepare(directory)
    report = directory / "report.xml"
    env = {
        **os.environ,
        "TIMM_SUITE_MODELS": ",".join(models),
        "TIMM_SUITE_TESTS": ",".join(tests),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",  # its progress reaches us as it goes, so a stopped run can say how far it got
    }
    command = [sys.executable, "-m", "pytest", str(test_file), "-p", PLUGIN, "-p", "no:cacheprovider", "-q", "-rfEs"]
    started = time.monotonic()
    with subprocess.Popen(
        [*command, f"--junitxml={report}"],
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as child:
        try:
            output, _ = child.communicate(timeout=timeout or None)
        except subprocess.TimeoutExpired:
            child.kill()
            output, _ = child.communicate()
            ran = time.monotonic() - started
            raise SuiteIncomplete(
                f"timm's model suite (tests/timm_suite: timm {timm.__version__}'s {TEST_FILE} in a child pytest) "
                f"was stopped at its time limit of {timeout:.0f} s ({timeout_origin or 'given'}), after {ran:.0f} s "
                f"with {progress(output)} of its tests done; a slow or busy machine is the likely cause, not a "
                f"failing test: raise the limit with {TIMEOUT_VARIABLE}=SECONDS (0: none)"
            ) from None
    if child.returncode not in (0, 1) or not report.is_file():  # 0: all passed, 1: some failed
        raise SuiteIncomplete(
            f"timm's model suite (tests/timm_suite) did not complete: its child pytest exited {child.returncode} "
            f"after {time.monotonic() - started:.0f} s:\n{output[-6000:]}"
        )
    return parse_report(report)


def progress(output: str) -> str:
    """How far a ``pytest -q`` run got, from its progress column (``[ 45%]``): "45%", or "none"."""
    done = re.findall(r"\[\s*(\d+)%\]", output)
    return f"{done[-1]}%" if done else "none"


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
