"""Side-by-side benchmark: our ViT, timm's and torchvision's, in one process, interleaved.

    python benchmarks/run.py                     # everything, ViT-B/16, CPU, all cores
    python benchmarks/run.py --quick             # a smoke run: ViT-Ti/16, fewer rounds and batch sizes
    python benchmarks/run.py --measure infer train --variants ti16 b16 --batch-sizes 1 16 --repeats 9
    python benchmarks/run.py --device cuda       # on a GPU (adds peak CUDA memory)
    python benchmarks/run.py --out benchmarks/results --name cpu --replace   # refresh the committed results

Writes ``<out>/<name>.json`` (every sample), ``<name>.md`` (the tables) and ``<name>.png``
(throughput against batch size): by default a new file, ``benchmarks/results/local/<device>-<time>``
(git-ignored). An existing results file is replaced only with ``--replace`` (or extended with
``--append``), so the committed results change only when asked. Ratios are ours/peer, taken per
round and summarised by their median; see ``--help`` for every option.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import result_records
from contestants import CONTESTANTS, VARIANTS, build, check_variant, create_pretrained
from timing import (
    CLOCKS,
    calls_for,
    forward_flops,
    inference_task,
    interleave,
    make_optimizer,
    matmul_task,
    paired_ratio,
    synchronize,
    timed,
    training_step,
    use_clock,
)

MEASUREMENTS = ("infer", "infer_bf16", "train", "memory", "create", "pretrained", "compile", "latency")
HERE = Path(__file__).resolve().parent
#: where runs go unless --out says otherwise (git-ignored: a run never changes the committed results)
LOCAL_RESULTS = HERE / "results" / "local"
#: --quick: what it changes, unless the option is given (ViT-Ti/16 and a smaller matmul keep it to a minute or two)
QUICK = dict(
    variants=["ti16"],
    pretrained_variants=["ti16"],
    repeats=3,
    create_repeats=3,
    batch_sizes=[1, 8],
    train_batch_sizes=[8],
    min_time=0.2,
    matmul_size=2048,
)
#: what --quick leaves out of "all": compiling takes minutes, and bf16 autocast is emulated (slow) on most CPUs
QUICK_SKIPS = ("compile", "infer_bf16", "latency")


def _usable_cores() -> int:
    """Cores this process may run on (the affinity mask, where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--measure",
        nargs="+",
        choices=MEASUREMENTS + ("all",),
        default=["all"],
        help="which measurements to run ('all' = every one; with --quick, all but compile and infer_bf16)",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["b16"],
        choices=sorted(VARIANTS),
        help="architectures for throughput, memory, create and compile",
    )
    parser.add_argument(
        "--contestants",
        nargs="+",
        default=["ours", "ours-pooled", "timm", "torchvision"],
        choices=CONTESTANTS,
        help="models to compare; ours is our model as built by default, ours-pooled with the opt-in "
        "pooled-token forward, ours-sdpa / ours-eager with one attention path forced",
    )
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32], help="inference batch sizes")
    parser.add_argument("--train-batch-sizes", nargs="+", type=int, default=[16], help="training batch sizes")
    parser.add_argument(
        "--memory-batch",
        type=int,
        default=None,
        help="training batch for peak memory (default: the first training batch size)",
    )
    parser.add_argument("--compile-batch", type=int, default=8, help="batch for the torch.compile numbers")
    parser.add_argument(
        "--pretrained-variants",
        nargs="+",
        default=["l16", "h14"],
        choices=sorted(VARIANTS),
        help="architectures for create_model(pretrained=True) from a local safetensors file",
    )
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds per measurement")
    parser.add_argument("--create-repeats", type=int, default=5, help="rounds for create / pretrained timings")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds before each measurement")
    parser.add_argument(
        "--min-time",
        type=float,
        default=0.5,
        help="seconds one throughput sample lasts at least (quick calls are repeated)",
    )
    parser.add_argument("--matmul-size", type=int, default=4096, help="n of the n x n fp32 matmul ceiling")
    parser.add_argument("--threads", type=int, default=_usable_cores(), help="torch CPU threads (default: all cores)")
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (or 'cuda:N')")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="what throughput samples read: wall-clock time, or (CPU, --threads 1) the CPU time "
        "the process used, which other processes on a shared machine do not add to",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=LOCAL_RESULTS,
        help="directory for the results (the committed ones are in benchmarks/results)",
    )
    parser.add_argument(
        "--name", default=None, help="file name stem of the results (default: the device type and the start time)"
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="overwrite an existing <out>/<name>.* (without it, an existing results file is refused)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the pretrained weight files are written (default: a temporary directory)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: ViT-Ti/16, 3 rounds, batches 1 and 8, training batch 8, a 2048 matmul, "
        "no compile or bf16 unless asked for (each given option still applies)",
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add this run's records to an existing <out>/<name>.json (several bounded runs, "
        "e.g. one per variant with its own batch sizes, make one report)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        metavar="JSON",
        help="measure nothing: rewrite the Markdown and plot of an earlier results JSON",
    )
    args = parser.parse_args(argv)
    if args.quick:
        given = set(argv if argv is not None else sys.argv[1:])
        for key, value in QUICK.items():
            if "--" + key.replace("_", "-") not in given:
                setattr(args, key, value)
    if "all" in args.measure:
        args.measure = [m for m in MEASUREMENTS if not (args.quick and m in QUICK_SKIPS)]
    args.memory_batch = args.memory_batch or args.train_batch_sizes[0]
    args.device = torch.device(args.device)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda given but torch sees no CUDA device")
    if args.clock == "cpu" and (args.device.type != "cpu" or args.threads != 1):
        parser.error("--clock cpu times CPU work on one thread: use it with --device cpu --threads 1")
    for variant in args.variants + args.pretrained_variants:
        check_variant(variant)
    if args.name is None:
        args.name = f"{args.device.type}{'-quick' if args.quick else ''}-{time.strftime('%Y%m%d-%H%M%S')}"
    existing = [p for p in (args.out / f"{args.name}{suffix}" for suffix in (".json", ".md", ".png")) if p.exists()]
    if existing and not (args.replace or args.append or args.render):
        parser.error(
            f"{existing[0]} exists: pass --replace to overwrite it, --append to add this run to it, "
            f"or another --name / --out"
        )
    return args


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _images(batch: int, device: torch.device) -> torch.Tensor:
    return torch.randn(batch, 3, 224, 224, device=device)


def measure_inference(args, variant: str, autocast_dtype) -> list[dict[str, Any]]:
    """img/s per batch size; fp32 runs also time the matmul ceiling in the same rounds."""
    kind = "infer_bf16" if autocast_dtype else "infer"
    models = {name: build(name, variant).to(args.device).eval() for name in args.contestants}
    flops = forward_flops(models[args.contestants[0]], _images(1, args.device))
    records = []
    for batch in args.batch_sizes:
        images = _images(batch, args.device)
        tasks = {}
        for name, model in models.items():
            probe = inference_task(model, images, 1, autocast_dtype)
            calls = calls_for(probe, args.device, args.min_time)
            tasks[name] = inference_task(model, images, calls, autocast_dtype)
        if not autocast_dtype:
            tasks["matmul"] = matmul_task(args.matmul_size, args.device)
        _log(f"{kind} {variant} batch {batch}: {args.repeats} rounds of {', '.join(tasks)}")
        samples = interleave(tasks, args.repeats, args.warmup)
        record = result_records.throughput_record(kind, variant, batch, samples, args.contestants)
        if "matmul" in samples:
            record["forward_flops_per_image"] = flops
            record.update(result_records.ceiling_fraction(samples, batch, flops, args.matmul_size, args.contestants))
        records.append(record)
        _log(result_records.one_line(record))
    return records


def measure_training(args, variant: str) -> list[dict[str, Any]]:
    records = []
    for batch in args.train_batch_sizes:
        tasks = {}
        for name in args.contestants:
            torch.manual_seed(0)
            model = build(name, variant).to(args.device).train()
            step = training_step(
                model,
                make_optimizer(model),
                _images(batch, args.device),
                torch.randint(0, 1000, (batch,), device=args.device),
            )
            tasks[name] = (lambda s: lambda: timed(s, args.device))(step)
        _log(f"train {variant} batch {batch}: {args.repeats} rounds of {', '.join(tasks)}")
        samples = interleave(tasks, args.repeats, args.warmup)
        del tasks
        gc.collect()
        records.append(result_records.throughput_record("train", variant, batch, samples, args.contestants))
        _log(result_records.one_line(records[-1]))
    return records


def measure_memory(args, variant: str) -> dict[str, Any]:
    """One fresh process per model (see step_memory.py for the method)."""
    results = {}
    for name in args.contestants:
        command = [
            sys.executable,
            str(HERE / "step_memory.py"),
            name,
            variant,
            str(args.memory_batch),
            str(args.device),
            str(args.threads),
        ]
        _log(f"memory {variant} batch {args.memory_batch}: {name} in a subprocess")
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    record = result_records.memory_record(variant, args.memory_batch, results, args.contestants)
    _log(result_records.one_line(record))
    return record


def _create_task(name: str, variant: str):
    def task() -> dict[str, float]:
        start = time.perf_counter()
        model = build(name, variant)
        elapsed = time.perf_counter() - start
        del model
        gc.collect()
        return {"time": elapsed}

    return task


def _constructions(contestants: list[str]) -> list[str]:
    """Contestants that build differently: ours-pooled is ours until the forward, so it is left out."""
    return [name for name in contestants if name != "ours-pooled"]


def measure_create(args, variant: str) -> dict[str, Any]:
    names = _constructions(args.contestants)
    tasks = {name: _create_task(name, variant) for name in names}
    _log(f"create {variant}: {args.create_repeats} rounds of {', '.join(tasks)}")
    samples = interleave(tasks, args.create_repeats, warmup=1)
    record = result_records.duration_record("create", variant, samples, names)
    _log(result_records.one_line(record))
    return record


def _write_weights(variant: str, directory: Path) -> Path:
    """A safetensors file of a randomly initialised timm model: the names both timm and we load."""
    from safetensors.torch import save_file

    path = directory / f"{VARIANTS[variant].timm}.safetensors"
    if not path.exists():
        torch.manual_seed(0)
        model = build("timm", variant)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
        del model
        gc.collect()
    return path


def _pretrained_task(name: str, variant: str, weights: Path, image: torch.Tensor):
    def task() -> dict[str, float]:
        start = time.perf_counter()
        model = create_pretrained(name, variant, str(weights))
        created = time.perf_counter() - start
        with torch.inference_mode():
            model.eval()(image)
        first_logits = time.perf_counter() - start
        del model
        gc.collect()
        return {"time": created, "first_logits": first_logits}

    return task


def measure_pretrained(args, variant: str, work_dir: Path) -> dict[str, Any]:
    """create_model(pretrained=True) from one local file, ours against timm's own loading path."""
    names = [n for n in _constructions(args.contestants) if n != "torchvision"]
    _log(f"pretrained {variant}: writing the weight file")
    weights = _write_weights(variant, work_dir)
    image = _images(1, torch.device("cpu"))
    tasks = {name: _pretrained_task(name, variant, weights, image) for name in names}
    _log(f"pretrained {variant}: {args.create_repeats} rounds of {', '.join(tasks)}")
    samples = interleave(tasks, args.create_repeats, warmup=1)  # the warm-up also fills the page cache
    batch = _images(2, torch.device("cpu"))
    with torch.inference_mode():
        reference = create_pretrained("timm", variant, str(weights)).eval()(batch)
        diffs = {
            name: (create_pretrained(name, variant, str(weights)).eval()(batch) - reference).abs().max().item()
            for name in names
            if name != "timm"
        }
    record = result_records.duration_record("pretrained", variant, samples, names)
    record["logits_max_abs_diff_vs_timm"] = diffs
    _log(result_records.one_line(record))
    return record


def _warm_up_compiler(device: torch.device) -> None:
    """Compile a toy function first, so the compiler's one-time start-up is nobody's compile time."""
    layer = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).to(device)
    torch.compile(layer)(torch.randn(2, 8, device=device)).sum().backward()
    torch._dynamo.reset()


def measure_compiled(args, variant: str, work_dir: Path) -> list[dict[str, Any]]:
    """torch.compile (default inductor settings, same for all): compile time, inference and training.

    Inductor's kernel cache is pointed at an empty directory of this run, so every model compiles
    from a cold cache (a second run would otherwise reuse kernels from the first).
    """
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work_dir / "inductor-cache")
    _warm_up_compiler(args.device)
    batch = args.compile_batch
    images = _images(batch, args.device)
    labels = torch.randint(0, 1000, (batch,), device=args.device)
    infer_tasks, train_tasks, compile_s = {}, {}, {}
    for name in args.contestants:
        torch._dynamo.reset()
        model = torch.compile(build(name, variant).to(args.device).eval())
        _log(f"compile {variant}: compiling {name} (inference)")
        start = time.perf_counter()
        with torch.inference_mode():
            model(images)
        synchronize(args.device)
        compile_s[f"{name} inference"] = time.perf_counter() - start
        infer_tasks[name] = inference_task(model, images, 1, None)
        torch.manual_seed(0)
        train_model = build(name, variant).to(args.device).train()
        compiled_train = torch.compile(train_model)
        step = training_step(compiled_train, make_optimizer(train_model), images, labels)
        _log(f"compile {variant}: compiling {name} (training)")
        start = time.perf_counter()
        step()
        synchronize(args.device)
        compile_s[f"{name} training"] = time.perf_counter() - start
        train_tasks[name] = (lambda s: lambda: timed(s, args.device))(step)
    records = []
    for kind, tasks in (("compiled_infer", infer_tasks), ("compiled_train", train_tasks)):
        _log(f"{kind} {variant} batch {batch}: {args.repeats} rounds")
        samples = interleave(tasks, args.repeats, args.warmup)
        record = result_records.throughput_record(kind, variant, batch, samples, args.contestants)
        record["compile_seconds"] = compile_s
        records.append(record)
        _log(result_records.one_line(record))
    return records


def measure_latency(args, variant: str) -> list[dict[str, Any]]:
    """Batch 1, the case where the GPU waits on Python: ours and timm eager, and each under
    ``torch.compile(mode="reduce-overhead")`` (CUDA graphs on CUDA), all in the same interleaved rounds.

    bf16 autocast on CUDA, fp32 on the CPU (where autocast bf16 is emulated on most CPUs). The compiled
    record carries ``reduce_overhead_gain``: each model compiled against itself eager, per round.
    """
    dtype = torch.bfloat16 if args.device.type == "cuda" else None
    image = _images(1, args.device)
    peers = [name for name in args.contestants if name in ("ours", "timm")]
    tasks = {}
    for name in peers:
        model = build(name, variant).to(args.device).eval()
        torch._dynamo.reset()
        compiled = torch.compile(model, mode="reduce-overhead")
        for label, runner in ((name, model), (f"{name} compiled", compiled)):
            probe = inference_task(runner, image, 1, dtype)
            for _ in range(3):  # compile, then record the graphs and replay them once
                probe()
            calls = calls_for(probe, args.device, args.min_time)
            tasks[label] = inference_task(runner, image, calls, dtype)
    rounds = max(args.repeats, 5)
    _log(f"latency {variant} batch 1: {rounds} rounds of {', '.join(tasks)}")
    samples = interleave(tasks, rounds, args.warmup)
    eager = result_records.throughput_record("latency", variant, 1, {n: samples[n] for n in peers}, peers)
    compiled_samples = {name: samples[f"{name} compiled"] for name in peers}
    compiled = result_records.throughput_record("latency_compiled", variant, 1, compiled_samples, peers)
    compiled["reduce_overhead_gain"] = {
        name: paired_ratio(samples[name]["time"], samples[f"{name} compiled"]["time"]) for name in peers
    }
    for record in (eager, compiled):
        _log(result_records.one_line(record))
    return [eager, compiled]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        for path in result_records.render(args.render):
            _log(f"wrote {path}")
        return 0
    torch.set_num_threads(args.threads)
    use_clock(args.clock)
    machine = result_records.machine_info(args)
    _log(f"{machine['cpu']} | {args.threads} threads | device {args.device} | torch {machine['torch']}")
    records: list[dict[str, Any]] = []
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="vitscratch-bench-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        for variant in args.variants:
            if "infer" in args.measure:
                records += measure_inference(args, variant, None)
            if "infer_bf16" in args.measure:
                records += measure_inference(args, variant, torch.bfloat16)
            if "train" in args.measure:
                records += measure_training(args, variant)
            if "memory" in args.measure:
                records.append(measure_memory(args, variant))
            if "create" in args.measure:
                records.append(measure_create(args, variant))
            if "compile" in args.measure:
                records += measure_compiled(args, variant, work_dir)
            if "latency" in args.measure:
                records += measure_latency(args, variant)
        if "pretrained" in args.measure:
            for variant in args.pretrained_variants:
                records.append(measure_pretrained(args, variant, work_dir))
    finally:
        if args.work_dir is None:
            shutil.rmtree(work_dir, ignore_errors=True)
    machine["load_average_end"] = result_records.load_average()
    name = args.name
    settings = vars(args)
    if args.append and (args.out / f"{name}.json").exists():
        machine, settings, records = result_records.appended(args.out / f"{name}.json", machine, settings, records)
    paths = result_records.write(args.out, name, machine, settings, records)
    for path in paths:
        _log(f"wrote {path}")
    print(Path(paths[1]).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
