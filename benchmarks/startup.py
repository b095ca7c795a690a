"""Start-up cost of the zero-import hook (hook armed vs opted out) and of the ``vitscratch`` command.

Times ``python -c pass`` and ``python -c "import timm"`` in fresh processes, alternating the two
configurations run by run (so machine load hits both alike), and prints medians and their ratio.
"Opted out" is the same interpreter with ``TIMM_VITSCRATCH_NO_AUTOLOAD=1``: the ``.pth`` line then
only reads that variable and imports nothing, which is as close to "plugin not installed" as one
interpreter gets. Also reported, from ``-X importtime``: the import of the hook module at start-up,
and the time the armed hook spends importing ``timm_vitscratch`` (the registration) inside
``import timm``.

Then ``vitscratch --help``, ``vitscratch convert --help`` and ``vitscratch --version``, run as the
console script runs them (``timm_vitscratch_cli.main``), interleaved with ``python -c pass``: their
medians, the difference, and whether each imported torch or timm (it must not).

    python benchmarks/startup.py [--python PATH] [--runs 40] [--import-runs 10] [--cli-runs 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

DISABLE_ENV = "TIMM_VITSCRATCH_NO_AUTOLOAD"
#: what the installed ``vitscratch`` script runs (pip writes the same two lines for the entry point)
CONSOLE_SCRIPT = "import sys; from timm_vitscratch_cli import main; sys.exit(main())"
CLI_COMMANDS = (["--help"], ["convert", "--help"], ["--version"])
HEAVY = ("torch", "timm", "timm_vitscratch")
CHECK_ARMED = "import sys; print(any(type(f).__name__ == 'PostImportHook' for f in sys.meta_path))"
CHECK_MODELS = "import timm; print(len(timm.list_models('scratch_*')))"


def _env(opted_out: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    if opted_out:
        env[DISABLE_ENV] = "1"
    return env


def _output(python: str, code: str, opted_out: bool) -> str:
    return subprocess.run(
        [python, "-c", code], env=_env(opted_out), cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True
    ).stdout.strip()


def time_interleaved(python: str, code: str, runs: int) -> dict[str, dict[str, list[float]]]:
    """Per configuration, wall and CPU (user+sys) seconds of ``python -c code``; configurations alternate.

    CPU time is reported beside wall time because it is far less sensitive to other load on a
    shared machine.
    """
    times = {config: {"wall": [], "cpu": []} for config in ("armed", "opted out")}
    for run in range(runs):
        order = ("armed", "opted out") if run % 2 == 0 else ("opted out", "armed")
        for config in order:
            env = _env(config == "opted out")
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(
                [python, "-c", code],
                env=env,
                cwd=tempfile.gettempdir(),
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times[config]["wall"].append(wall)
            times[config]["cpu"].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return times


def _importtime(python: str, code: str) -> list[str]:
    """The ``-X importtime`` lines of ``python -c code``, with the hook armed."""
    return subprocess.run(
        [python, "-X", "importtime", "-c", code],
        env=_env(False),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    ).stderr.splitlines()


def hook_module_import_us(python: str, runs: int) -> float:
    """Median self time (µs) of importing ``timm_vitscratch_autoload`` at start-up (-X importtime)."""
    samples = []
    for _ in range(runs):
        for line in _importtime(python, "pass"):
            cols = line.split("|")
            if line.startswith("import time:") and cols[2].strip() == "timm_vitscratch_autoload":
                samples.append(float(cols[1]))  # cumulative = self: the module imports nothing new
    if not samples:
        raise SystemExit(f"{python}: timm_vitscratch_autoload is not imported at start-up; is the package installed?")
    return statistics.median(samples)


def plugin_import_ms(python: str, runs: int) -> float:
    """Median time (ms) the armed hook spends importing timm_vitscratch inside ``import timm``."""
    samples = []
    for _ in range(runs):
        samples += [
            float(line.split("|")[1]) / 1e3
            for line in _importtime(python, "import timm")
            if line.startswith("import time:") and line.split("|")[2].strip() == "timm_vitscratch"
        ]
    if not samples:
        raise SystemExit(f"{python}: `import timm` did not import timm_vitscratch")
    return statistics.median(samples)


def cli_times(python: str, runs: int) -> dict[str, list[float]]:
    """Wall seconds of each CLI command and of ``python -c pass``, interleaved run by run."""
    commands = {"python -c pass": [python, "-c", "pass"]}
    commands.update({"vitscratch " + " ".join(argv): [python, "-c", CONSOLE_SCRIPT, *argv] for argv in CLI_COMMANDS})
    times: dict[str, list[float]] = {label: [] for label in commands}
    for run in range(runs):
        labels = list(commands) if run % 2 == 0 else list(reversed(commands))
        for label in labels:
            start = time.perf_counter()
            subprocess.run(
                commands[label],
                env=_env(False),
                cwd=tempfile.gettempdir(),
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            times[label].append(time.perf_counter() - start)
    return times


def cli_heavy_imports(python: str) -> dict[str, list[str]]:
    """For each CLI command, which of torch / timm / timm_vitscratch it imported."""
    found = {}
    for argv in CLI_COMMANDS:
        code = (
            f"import sys, timm_vitscratch_cli\ntry:\n    timm_vitscratch_cli.main({argv!r})\nexcept SystemExit:\n"
            f"    pass\nprint('HEAVY', *[m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)"
        )
        err = subprocess.run(
            [python, "-c", code], env=_env(False), cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True
        ).stderr
        found["vitscratch " + " ".join(argv)] = err.strip().splitlines()[-1].split()[1:]
    return found


def _rows(label: str, times: dict[str, dict[str, list[float]]]) -> list[str]:
    rows = []
    for kind in ("wall", "cpu"):
        armed, off = (statistics.median(times[config][kind]) * 1e3 for config in ("armed", "opted out"))
        rows.append(
            f"{label if kind == 'wall' else '':<24} {kind:>4} {armed:>10.1f} {off:>10.1f} {armed - off:>+9.1f}"
            f" {armed / off:>7.3f} {len(times['armed'][kind]):>5}"
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter with timm_vitscratch installed")
    parser.add_argument("--runs", type=int, default=40, help="runs of `python -c pass` per configuration")
    parser.add_argument("--import-runs", type=int, default=10, help="runs of `import timm` per configuration (0: skip)")
    parser.add_argument("--cli-runs", type=int, default=20, help="runs of each vitscratch command (0: skip)")
    args = parser.parse_args(argv)

    if _output(args.python, CHECK_ARMED, False) != "True" or _output(args.python, CHECK_ARMED, True) != "False":
        raise SystemExit(
            f"{args.python}: the timm_vitscratch start-up hook is not installed (or ignores {DISABLE_ENV})"
        )
    models = {config: _output(args.python, CHECK_MODELS, config == "opted out") for config in ("armed", "opted out")}

    pass_times = time_interleaved(args.python, "pass", args.runs)
    module_us = hook_module_import_us(args.python, args.runs)
    if args.import_runs:
        import_times = time_interleaved(args.python, "import timm", args.import_runs)
        plugin_ms = plugin_import_ms(args.python, args.import_runs)

    print(
        f"interpreter: {args.python}  (scratch_* models after `import timm`: armed {models['armed']},"
        f" opted out {models['opted out']})"
    )
    print(f"{'median, ms':<29} {'armed':>10} {'opted out':>10} {'diff':>9} {'ratio':>7} {'runs':>5}")
    print("\n".join(_rows("python -c pass", pass_times)))
    if args.import_runs:
        print("\n".join(_rows('python -c "import timm"', import_times)))
    print(f"timm_vitscratch_autoload import at start-up (-X importtime, median): {module_us:.0f} µs")
    if args.import_runs:
        print(f"timm_vitscratch import inside an armed `import timm` (-X importtime, median): {plugin_ms:.1f} ms")
    if args.cli_runs:
        times, heavy = cli_times(args.python, args.cli_runs), cli_heavy_imports(args.python)
        base = statistics.median(times["python -c pass"]) * 1e3
        print(f"{'median wall, ms':<29} {'command':>10} {'- pass':>10} {'imports torch/timm':>20} {'runs':>5}")
        for label, samples in times.items():
            median = statistics.median(samples) * 1e3
            imported = "" if label not in heavy else (", ".join(heavy[label]) or "no")
            print(f"{label:<29} {median:>10.1f} {median - base:>+10.1f} {imported:>20} {len(samples):>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
