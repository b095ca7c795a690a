"""The vitscratch console script."""

import subprocess
import sys
from pathlib import Path

import pytest

from timm_vitscratch.cli import main


@pytest.mark.slow  # the summary of full-size models
def test_summary_explains_both_counts(capsys):
    assert main(["summary", "scratch_vit_b16", "--num-classes", "5"]) == 0
    out = capsys.readouterr().out
    for text in ("85,802,501", "85,650,437", "152,064", "cls_token", "pos_embed", "151,296", "12h²+13h"):
        assert text in out


def test_list_has_every_variant_and_the_reference_models_agree(capsys):
    """The counts pinned in the package (tests/inspect/test_zoo_counts.py counts them afresh)."""
    from timm_vitscratch.models.variants import ARCHITECTURES

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "86,567,656 (torchvision vit_b_16)" in out and "632,045,800 (torchvision vit_h_14)" in out
    assert "6,716,030,976 (timm vit_7b_patch16_dinov3)" in out
    rows = [line for line in out.splitlines() if line.startswith("scratch_")]
    assert [row.split()[0] for row in rows] == list(ARCHITECTURES)
    # every reference agrees; DeiT distilled has none (torchvision has no distilled ViT)
    assert all(row.endswith(" yes") or "_distilled" in row for row in rows)


@pytest.mark.slow  # the CLI in a process
def test_unknown_model_suggests_close_names():
    result = subprocess.run(
        [sys.executable, "-m", "timm_vitscratch.cli", "summary", "scratch_vit_b61"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "unknown model 'scratch_vit_b61'" in result.stderr and "scratch_vit_b16" in result.stderr


def test_timms_name_points_to_its_mirror_and_a_folder_is_not_taken_for_a_model(tmp_path, capsys):
    """timm's own name is answered with ours that mirrors it; a folder without config.json is said to be no
    model directory; a name close to nothing points to `vitscratch list` instead of listing every name."""
    assert main(["summary", "vit_base_patch16_dinov3"]) == 2
    err = capsys.readouterr().err
    assert "that is timm's name; its mirror here is scratch_dinov3_b16" in err
    assert main(["summary", str(tmp_path)]) == 2
    assert "is a folder but not a model directory: it holds no config.json" in capsys.readouterr().err
    assert main(["summary", "qqqq"]) == 2
    err = capsys.readouterr().err
    assert "vitscratch list shows every registered name" in err and "scratch_vit_b16," not in err


def test_list_prints_the_pinned_counts_and_imports_neither_torch_nor_the_package(tmp_path):
    """`vitscratch list` reads the counts the package pins: no model is built, not even torch is imported."""
    from timm_vitscratch.inspect.zoo_counts import read, zoo_text

    code = (
        "import sys, timm_vitscratch_cli as cli\n"
        "assert cli.main(['list']) == 0 and cli.main(['list', '--no-reference']) == 0\n"
        "print(sorted(m for m in ('torch', 'timm', 'timm_vitscratch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = list(read()[1].values())
    assert done.stdout == f"{zoo_text(rows)}\n{zoo_text(rows, reference=False)}\n[]\n"


def test_list_reads_the_registry_when_its_sources_are_not_the_pinned_ones(monkeypatch, capsys):
    """models/variants.py or family.py changed since the counts were pinned: the registry's rows are printed
    (tests/inspect/test_zoo_counts.py: a row the file does not hold is built for it)."""
    import timm_vitscratch_cli as cli
    from timm_vitscratch.inspect import render

    standalone = cli._read_standalone("inspect/zoo_counts.py")
    monkeypatch.setattr(standalone, "pinned_rows", lambda: None)
    read = cli._read_standalone
    monkeypatch.setattr(
        cli, "_read_standalone", lambda path: standalone if path == "inspect/zoo_counts.py" else read(path)
    )
    monkeypatch.setattr(render, "zoo_table", lambda reference=True: f"the registry's rows, reference={reference}")
    assert main(["list", "--no-reference"]) == 0
    assert capsys.readouterr().out == "the registry's rows, reference=False\n"


def test_list_live_says_whether_each_row_equals_the_pinned_one(monkeypatch, capsys):
    """--live counts every row afresh (stand-ins here: tests/inspect/test_zoo_counts.py counts them), a column
    says whether each equals the pinned row, and any difference is named, with status 1."""
    from dataclasses import replace

    from timm_vitscratch.inspect import zoo_counts

    rows = list(zoo_counts.read()[1].values())
    monkeypatch.setattr(zoo_counts, "live_rows", lambda reference=True: rows)
    assert main(["list", "--live"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-3:] == ["reference", "same", "pinned"]
    assert all(line.endswith(" yes") for line in out[2 : 2 + len(rows)])
    assert out[-1] == f"all {len(rows)} rows equal the pinned counts (timm_vitscratch/inspect/zoo_counts.json)"

    changed = replace(rows[2], leaf_module=rows[2].leaf_module + 1, reference=None, reference_true=None)
    monkeypatch.setattr(zoo_counts, "live_rows", lambda reference=True: [*rows[:2], changed, *rows[3:]])
    assert main(["list", "--live", "--no-reference"]) == 1  # the references are not compared, our counts are
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-2:] == ["hidden", "pinned"]
    assert [line.split()[0] for line in out[2:-3] if line.endswith(" NO")] == [rows[2].name]
    assert out[-2:] == [
        f"{rows[2].name}: leaf_module pinned {rows[2].leaf_module}, live {rows[2].leaf_module + 1}",
        "the pinned counts (timm_vitscratch/inspect/zoo_counts.json) are stale: regenerate them with "
        "python -m timm_vitscratch.inspect.zoo_counts",
    ]


@pytest.mark.slow  # builds the wheel and a venv
def test_the_wheel_ships_the_pinned_counts(built_wheel):
    import zipfile

    from timm_vitscratch.inspect.zoo_counts import DATA

    with zipfile.ZipFile(built_wheel) as wheel:
        assert wheel.read("timm_vitscratch/inspect/zoo_counts.json") == DATA.read_bytes()


def test_attention_mistakes_are_answered_before_torch_is_imported(tmp_path):
    """A missing output directory, a missing image, the model and image swapped and a text file given as the
    image: each one line, exit 2, and neither torch nor the package imported to say it."""
    (tmp_path / "photo.jpg").write_bytes(b"not read")
    (tmp_path / "README.md").write_text("# not a picture\n")
    code = (
        "import sys, timm_vitscratch_cli as cli\n"
        "for argv in (['attention', 'photo.jpg', '--model', 'scratch_vit_ti16', '--out', 'nodir/x.png'],\n"
        "             ['attention', 'missing.jpg', '--model', 'scratch_vit_ti16'],\n"
        "             ['attention', '--model', 'photo.jpg', 'scratch_vit_ti16'],\n"
        "             ['attention', 'README.md', '--model', 'scratch_vit_ti16']):\n"
        "    assert cli.main(argv) == 2, argv\n"
        "print(sorted(m for m in ('torch', 'timm', 'timm_vitscratch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert done.stderr.splitlines() == [
        "vitscratch: error: output directory 'nodir' does not exist (for --out 'nodir/x.png'); create it first",
        "vitscratch: error: cannot read image 'missing.jpg': it does not exist; expected an image file (PNG, JPEG, "
        "GIF, BMP, TIFF, WebP or PPM)",
        "vitscratch: error: --model got the file 'photo.jpg' and the image is 'scratch_vit_ti16', which is no file: "
        "the image comes first, the model after --model (vitscratch attention 'photo.jpg' --model 'scratch_vit_ti16')",
        "vitscratch: error: cannot read image 'README.md': its bytes are not a picture in any of the formats read; "
        "expected an image file (PNG, JPEG, GIF, BMP, TIFF, WebP or PPM)",
    ]


def test_help_and_version_import_neither_torch_nor_timm_nor_the_package():
    """Parsing needs the standard library only: each command imports the library when it runs."""
    code = (
        "import sys, timm_vitscratch_cli as cli\n"
        "for argv in [['--help'], ['--version']] + [[c, '--help'] for c in cli.command_parsers()]:\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit as done:\n"
        "        assert done.code == 0, (argv, done.code)\n"
        "print(sorted(m for m in ('torch', 'timm', 'timm_vitscratch', 'numpy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "usage: vitscratch convert" in done.stdout and "--strict" in done.stdout


@pytest.mark.slow  # the CLI in a process
def test_version_is_the_packages():
    import timm_vitscratch

    done = subprocess.run([sys.executable, "-m", "timm_vitscratch.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"vitscratch {timm_vitscratch.__version__}"


def test_help_offers_the_lists_the_library_checks_against():
    """--help runs the package's own timm_vitscratch/choices.py (no copy to drift), and offers what it holds."""
    import timm_vitscratch_cli as cli
    from timm_vitscratch import choices

    assert cli.choices is not choices and Path(cli.choices.__file__) == Path(choices.__file__)
    parsers = cli.command_parsers()
    convert, export = parsers["convert"].format_help(), parsers["export"].format_help()

    def listed(names):
        return "{" + ",".join(names) + "}"

    assert listed(("auto", *choices.SOURCES)) in convert and listed(choices.DTYPE_NAMES) in convert
    assert listed(choices.EXPORT_TARGETS) in export and listed(choices.DTYPE_NAMES) in export


@pytest.mark.slow  # vitscratch list in processes
def test_a_closed_pipe_ends_quietly_with_status_0():
    """`vitscratch list | head -1`: the reader has gone before the table is written."""
    command = f"set -o pipefail; {sys.executable} -m timm_vitscratch.cli list --no-reference | true"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    command = f"set -o pipefail; {sys.executable} -m timm_vitscratch.cli list --no-reference | head -1"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "") and done.stdout.startswith("model ")


@pytest.mark.slow  # the summary of full-size models
def test_summary_takes_tags_directories_and_local_dir(tmp_path, capsys):
    from tests.support import tiny
    from timm_vitscratch.model_dir import save_model_directory

    assert main(["summary", "scratch_vit_b16.tv_swag_e2e_in1k"]) == 0  # the tag's 384x384 input
    assert capsys.readouterr().out.startswith(
        "scratch_vit_b16.tv_swag_e2e_in1k: image 384x384, patch 16 -> 576 patches"
    )
    model = tiny(num_classes=3)
    directory = save_model_directory(model, tmp_path / "tiny")
    true_count = sum(p.numel() for p in model.parameters())
    for ref in (str(directory), f"local-dir:{directory}"):
        assert main(["summary", ref]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"{ref}: image 32x32, patch 8 -> 16 patches") and f"{true_count:,}" in out
    assert main(["summary", "scratch_vit_b16.no_such_tag"]) == 2
    assert "scratch_vit_b16 has no pretrained tag 'no_such_tag'" in capsys.readouterr().err


@pytest.mark.slow  # push and read through the local Hub server
def test_summary_and_attention_take_hf_hub_models(hub_env, tmp_path, capsys):
    from PIL import Image

    from tests.support import tiny
    from tests.support.hub_fixtures import model_dir
    from timm_vitscratch import hub

    model = tiny(num_classes=3)
    hub.push(model_dir(tmp_path / "src", model), "tests/cli-summary")
    assert main(["summary", "hf-hub:tests/cli-summary"]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("hf-hub:tests/cli-summary: image 32x32")
        and f"{sum(p.numel() for p in model.parameters()):,}" in out
    )
    Image.new("RGB", (40, 30), (200, 30, 30)).save(tmp_path / "red.png")
    assert (
        main(
            [
                "attention",
                str(tmp_path / "red.png"),
                "--model",
                "hf-hub:tests/cli-summary",
                "--out",
                str(tmp_path / "red.attention.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "red.attention.png").stat().st_size > 0
    assert main(["summary", "hf-hub:tests/no-such-repo"]) == 2
    assert "repository 'tests/no-such-repo' not found at" in capsys.readouterr().err
