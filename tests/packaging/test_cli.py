"""The vitscratch console script."""
import subprocess
import sys

from timm_vitscratch.cli import main


def test_summary_explains_both_counts(capsys):
    assert main(["summary", "scratch_vit_b16", "--num-classes", "5"]) == 0
    out = capsys.readouterr().out
    for text in ("85,802,501", "85,650,437", "152,064", "cls_token", "pos_embed", "151,296", "12h²+13h"):
        assert text in out


def test_list_has_every_variant_and_torchvision_agrees(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "86,567,656 (vit_b_16)" in out and "632,045,800 (vit_h_14)" in out
    assert " NO" not in out
    assert out.count("scratch_") == 15


def test_unknown_model_suggests_close_names():
    result = subprocess.run([sys.executable, "-m", "timm_vitscratch.cli", "summary", "scratch_vit_b61"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "unknown model 'scratch_vit_b61'" in result.stderr and "scratch_vit_b16" in result.stderr
