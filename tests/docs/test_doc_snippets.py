"""Every snippet the README and docs/ show runs, or is listed here with the reason it cannot run offline.

A snippet is a fenced ``python`` block (one snippet) or one ``vitscratch ...`` command line of a shell
block; blocks under a ``<!-- check: ... -->`` marker are output, checked by ``test_doc_blocks.py``. Each
snippet is in exactly one of two tables, by page and first line:

- ``RUN``: run, with its stand-ins: text replaced (a tiny model where the page names a big one) or put
  before it. A page's snippets run in order in one child process (``snippet_runner.py``), in a workspace
  that the page's ``SETUP`` fills with small files where the page names big ones, and, where the page talks
  to the Hub, with this process's huggingface_hub pointed at a local Hub-protocol server.
- ``NOT_RUN``: the reason it cannot run offline.

A snippet in neither table, or a table entry that names no snippet, fails the test: a changed snippet is
looked at again.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.test_cli_docs import SHELL_FENCES
from tests.docs.test_doc_blocks import FENCE, MARKER, ROOT, markdown_files, shown_path
from tests.support import time_limits

pytestmark = pytest.mark.slow  # a child per page, each importing torch, timm and transformers

#: the longest a page's snippets take on a quiet machine (the time limit scales from it: tests/support/time_limits.py)
PAGE_QUIET_S = 60
COMMENT = re.compile(r"\s+#.*$")  # a shell comment after a command


@dataclass(frozen=True)
class Snippet:
    page: str  # relative to the repository root
    line: int  # 1-based, the snippet's first line
    kind: str  # "python" or "vitscratch"
    text: str

    @property
    def key(self) -> str:
        """The page and the first line (a command without its comment)."""
        first = next(line for line in self.text.splitlines() if line.strip()).strip()
        if self.kind == "vitscratch":
            first = COMMENT.sub("", first)
        return f"{self.page}: {first}"


@dataclass(frozen=True)
class StandIn:
    """How a snippet runs offline and small: ``replace`` (old, new) pairs applied to its text, ``before``
    code put in front of it, ``cwd`` a sub-directory of the workspace to run it in."""

    replace: tuple[tuple[str, str], ...] = ()
    before: str = ""
    cwd: str = ""

    def apply(self, snippet: Snippet) -> str:
        text = snippet.text
        for old, new in self.replace:
            if old not in text:
                raise ValueError(f"{snippet.key}: the stand-in replaces {old!r}, which the snippet no longer holds")
            text = text.replace(old, new)
        return self.before + text


def snippets(path: Path) -> list[Snippet]:
    """The snippets of one page, in order."""
    page = shown_path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, info = opening.group("fence"), lines[index][len(opening.group("fence")) :].strip()
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == fence)
        output = index > 0 and MARKER.match(lines[index - 1])
        if info == "python" and not output:
            found.append(Snippet(page, index + 2, "python", "\n".join(lines[index + 1 : end]) + "\n"))
        elif info in SHELL_FENCES and not output:
            line = index + 1
            while line < end:
                start, text = line, lines[line]
                while text.endswith("\\") and line + 1 < end:  # a continued command is one snippet
                    line += 1
                    text = text[:-1] + " " + lines[line].strip()
                if text.strip().startswith("vitscratch "):
                    found.append(Snippet(page, start + 1, "vitscratch", text.strip()))
                line += 1
        index = end + 1
    return found


PAGES = [path for path in markdown_files() if snippets(path)]
SNIPPETS = [snippet for path in PAGES for snippet in snippets(path)]

HUB = "a Hub repo: run against a local Hub-protocol server"
PRETRAINED_AS_RANDOM = ("pretrained=True", "pretrained=False")  # the tag resolved and built; its weights not fetched

#: page -> setup steps (``snippet_runner.SETUPS``: ``step:PATH`` makes PATH in the workspace; ``hub``: a local Hub)
SETUP: dict[str, list[str]] = {
    "README.md": ["torchvision:home/.cache/torch/hub/checkpoints/vit_b_16-c867db91.pth", "hub"],
    "docs/conversion.md": [
        "torchvision:vit_b_16-c867db91.pth",
        "torchvision:vit_b_16.pth",
        "non_empty:project",
        "train_checkpoint:last.pth.tar",
        "classes:classes.txt",
        "npz:vit.npz",
        "transformers_folder:google-vit",
    ],
    "docs/hub.md": ["ti16_3_classes:out", "classes:classes.txt", "image_folder:data/train", "image:cat.jpg", "hub"],
    "docs/inspection.md": ["image:photo.jpg", "tiny_directory:out/my_model"],
    "docs/dinov3.md": ["timm_weights:vit_small_patch16_dinov3.safetensors"],
    "docs/encoders.md": ["timm_weights:eva02_base_patch14_448.safetensors"],
    "docs/native_resolution.md": ["image_folder:data/train"],
    "docs/training.md": ["train_checkpoint:runs/hfhub/model_best.pth.tar", "hub"],
}
#: page -> the Hub repo pushed (a tiny model) before the page runs, for snippets that only load it
HUB_REPO = {"README.md": "ORG/NAME"}

RUN: dict[str, StandIn] = {
    # README.md
    "README.md: import timm  # installed, timm sees the scratch_* models": StandIn(
        replace=(('_ft_in1k", pretrained=True', '_ft_in1k", pretrained=False'),)  # the tag's weights: network
    ),
    "README.md: vitscratch convert ~/.cache/torch/hub/checkpoints/vit_b_16-c867db91.pth out/vit_b16 --verify "
    "--num-heads 12 --license bsd-3-clause": StandIn(),
    "README.md: vitscratch push out/vit_b16 ORG/scratch_vit_b16.tv_in1k": StandIn(),
    "README.md: vitscratch summary scratch_vit_b16 --num-classes 5": StandIn(),
    # docs/conversion.md: each file is a tiny one of the format the page names
    "docs/conversion.md: vitscratch convert vit_b_16-c867db91.pth out/ --verify --num-heads 12": StandIn(),
    "docs/conversion.md: vitscratch convert last.pth.tar out/ --ema --labels classes.txt": StandIn(),
    "docs/conversion.md: vitscratch convert vit_b_16.pth project/ --force": StandIn(),
    "docs/conversion.md: vitscratch convert vit.npz out/ --from jax --model scratch_vit_b16 --img-size 384 "
    "--dtype bfloat16": StandIn(replace=(("scratch_vit_b16", "scratch_vit_ti16"),)),  # the tiny .npz is a ViT-Ti
    "docs/conversion.md: vitscratch convert google-vit/ out/ --verify --strict": StandIn(),
    "docs/conversion.md: vitscratch export out/ --to torchvision vit.pth": StandIn(),
    "docs/conversion.md: import timm": StandIn(
        replace=(  # vit_b_16.pth is a tiny torchvision ViT here: one block, 48 wide, 12 heads, 32x32 in 8x8 patches
            (
                'create_model("scratch_vit_b16", num_classes=1000)',
                'create_model("scratch_vit_b16", num_classes=4, img_size=32, patch_size=8, depth=1, embed_dim=48, '
                "mlp_ratio=2.0)",
            ),
        )
    ),
    "docs/conversion.md: vitscratch export out/ --to jax vit.npz --dtype float32": StandIn(),
    # docs/guarantees.md: its own local server
    'docs/guarantees.md: """hf_hub_download builds cache paths from the Hub\'s answer headers without checking them."""': (
        StandIn()
    ),
    # docs/hub.md: out/ is a ViT-Ti/16 with 3 classes
    "docs/hub.md: vitscratch push out/ ORG/scratch_vit_b16.tv_in1k": StandIn(),
    'docs/hub.md: vitscratch push out/ ORG/NAME --revision experiment --private --commit-message "first try"': StandIn(),
    "docs/hub.md: vitscratch push scratch_vit_ti16 ORG/NAME": StandIn(),
    "docs/hub.md: vitscratch push out/ ORG/NAME --labels classes.txt": StandIn(),
    "docs/hub.md: vitscratch push out/ ORG/NAME --labels data/train": StandIn(),
    "docs/hub.md: vitscratch push out/ ORG/NAME --replace-card": StandIn(),
    "docs/hub.md: vitscratch push out/ ORG/NAME --strict": StandIn(),
    "docs/hub.md: from timm_vitscratch.hub import push": StandIn(),
    "docs/hub.md: vitscratch pull ORG/NAME models/name": StandIn(),
    "docs/hub.md: vitscratch pull ORG/NAME --revision experiment models/name-exp": StandIn(),
    "docs/hub.md: vitscratch pull ORG/NAME --revision 0123456789abcdef0123456789abcdef01234567 models/name-v1": StandIn(
        replace=(("--revision 0123456789abcdef0123456789abcdef01234567", "--revision main"),)  # a made-up commit id
    ),
    "docs/hub.md: vitscratch pull ORG/NAME models/name --force": StandIn(),
    "docs/hub.md: vitscratch pull ORG/NAME models/name --strict": StandIn(
        replace=(("models/name --strict", "models/name-strict --strict"),)  # models/name is full by now
    ),
    "docs/hub.md: vitscratch pull ORG/NAME models/name --online": StandIn(
        replace=(("models/name --online", "models/name-online --online"),)  # models/name is full by now
    ),
    "docs/hub.md: vitscratch pull ORG/NAME .": StandIn(cwd="empty"),
    "docs/hub.md: from timm_vitscratch.hub import pull": StandIn(replace=(('"models/name"', '"models/name-py"'),)),
    "docs/hub.md: import timm": StandIn(),
    "docs/hub.md: from timm_vitscratch.hub import register_tag_from_hub": StandIn(
        replace=(("scratch_vit_b16", "scratch_vit_ti16"),)  # ORG/NAME holds a ViT-Ti/16 here
    ),
    "docs/hub.md: from transformers import AutoModelForImageClassification, pipeline": StandIn(
        before="import torch\nimages = torch.randn(1, 3, 224, 224)\n"
    ),
    # docs/inspection.md
    "docs/inspection.md: vitscratch list": StandIn(),
    "docs/inspection.md: vitscratch list --no-reference": StandIn(),
    "docs/inspection.md: vitscratch list --pretrained | head -3": StandIn(),
    "docs/inspection.md: vitscratch attention photo.jpg --model scratch_vit_b16 --out photo.attention.png": StandIn(),
    "docs/inspection.md: vitscratch attention photo.jpg --model out/my_model/": StandIn(),
    "docs/inspection.md: from timm_vitscratch.inspect.attention_maps import attention_maps, load_image, load_model": (
        StandIn()
    ),
    # docs/dinov3.md: the tag resolved and built, one block deep; its weights would come from the network
    "docs/dinov3.md: import timm, torch": StandIn(replace=(("pretrained=True", "pretrained=False, depth=1"),)),
    # docs/encoders.md: the tags resolved and built, one block deep; their weights would come from the network
    "docs/encoders.md: import timm, torch": StandIn(replace=(("pretrained=True", "pretrained=False, depth=1"),)),
    # the offline forms: timm's file of the tag's model, one block deep, laid beside the snippet
    "docs/dinov3.md: import timm": StandIn(replace=(("pretrained=True,", "pretrained=True, depth=1,"),)),
    "docs/encoders.md: import timm": StandIn(replace=(("pretrained=True,", "pretrained=True, depth=1,"),)),
    "docs/inspection.md: import timm": StandIn(),
    # docs/models.md: the export blocks on a one-block model (what they show does not depend on depth)
    "docs/models.md: import timm, timm_vitscratch": StandIn(),
    'docs/models.md: model = timm.create_model("scratch_vit_b16", pre_norm=True, act_layer="quick_gelu", '
    "norm_eps=1e-5)": StandIn(),
    'docs/models.md: model = timm.create_model("scratch_vit_b16", pretrained=True, pooled_forward=True)': StandIn(
        replace=(PRETRAINED_AS_RANDOM,)
    ),
    "docs/models.md: import timm, torch": StandIn(replace=(("scriptable=True)", "scriptable=True, depth=1)"),)),
    'docs/models.md: batch = torch.export.Dim("batch", min=1, max=256)': StandIn(),
    'docs/models.md: model = timm.create_model("scratch_vit_s16", dynamic_img_size=True).eval()': StandIn(
        replace=(("dynamic_img_size=True)", "dynamic_img_size=True, depth=1)"),)
    ),
    "docs/models.md: import onnxruntime, timm, torch": StandIn(
        replace=(('"scratch_vit_s16")', '"scratch_vit_s16", depth=1)'),)
    ),
    # docs/native_resolution.md: data/ is a small image folder
    "docs/native_resolution.md: import timm, torch": StandIn(replace=(PRETRAINED_AS_RANDOM,)),
    "docs/native_resolution.md: from timm.data import create_dataset, create_naflex_loader": StandIn(),
    # docs/performance.md: the fast CPU route on a one-block model with random weights, on random images
    "docs/performance.md: import timm, timm_vitscratch": StandIn(
        replace=(("pretrained=True))", "pretrained=False, depth=1))"),),
        before="import torch\nimages = torch.randn(2, 3, 224, 224)\n",
    ),
    # docs/performance.md: the low-latency route wrapped on the CPU, one block deep (it compiles at the first call)
    'docs/performance.md: model = torch.compile(timm.create_model("scratch_vit_b16", pretrained=True).cuda().eval(), '
    'mode="reduce-overhead")': StandIn(
        replace=(("pretrained=True).cuda()", "pretrained=False, depth=1)"),),
        before="import timm, torch\n",
    ),
    # docs/pretrained.md: the tags resolved and built on meta; their weights would come from the network
    "docs/pretrained.md: import timm": StandIn(replace=(("pretrained=True", 'pretrained=False, device="meta"'),)),
    # docs/training.md: the checkpoint train.py would have written, tiny
    "docs/training.md: vitscratch convert runs/hfhub/model_best.pth.tar out/shapes3 --ema --verify": StandIn(),
    "docs/training.md: vitscratch push out/shapes3 me/scratch_vit_ti16.shapes3 --license apache-2.0": StandIn(),
}
#: the conversion page's commands on the files its families' authors publish: the checked block of each section runs
#: the same command on a tiny file of that format (tests/docs/test_doc_blocks.py)
_SHOWN_BY_ITS_BLOCK = (
    "a file or folder the reader downloads; the section's checked block runs this command on a tiny one"
)
NOT_RUN: dict[str, str] = {
    **dict.fromkeys(
        (
            "docs/conversion.md: vitscratch convert siglip2-base-patch16-224/ out/ --verify --strict",
            "docs/conversion.md: vitscratch convert siglip-so400m-patch14-384/ out/ --img-size 448",
            "docs/conversion.md: vitscratch export out/ --to transformers hf/",
            "docs/conversion.md: vitscratch convert PE-Core-L14-336.pt out/ --verify",
            "docs/conversion.md: vitscratch convert eva02_B_pt_in21k_p14.pt out/ --verify",
            "docs/conversion.md: vitscratch convert EVA02_CLIP_B_psz16_s8B.pt out/",
            "docs/conversion.md: vitscratch convert open_clip_pytorch_model.bin out/ --from baai_eva",
            "docs/conversion.md: from timm_vitscratch.convert import convert",
            "docs/conversion.md: vitscratch convert hub_download_dir/ out/ --verify --strict",
            "docs/conversion.md: vitscratch convert eva02_small.safetensors out/ --verify",
        ),
        _SHOWN_BY_ITS_BLOCK,
    ),
    **dict.fromkeys(
        (
            "docs/training.md: vitscratch export-checkpoint runs/7b out/7b",
            "docs/training.md: vitscratch export-checkpoint runs/7b/checkpoints/step-5000 out/7b-5000",
            "docs/training.md: vitscratch export-checkpoint --ema runs/7b out/7b-ema",
        ),
        "needs the checkpoints of a multi-GPU DINOv3-7B run; tests/training/test_fsdp.py exports a torchrun "
        "checkpoint of a tiny model through the same export_checkpoint",
    ),
    "docs/training.md: vitscratch train --data-dir /data/my_images --model scratch_dinov3_l16 --pretrained "
    "--num-classes 10  --output runs/l16": (
        "needs the reader's images and DINOv3-L's weights from huggingface.co; tests/training/test_fsdp.py runs "
        "vitscratch train on a tiny model"
    ),
    "docs/hub.md: vitscratch push scratch_vit_b16.tv_in1k ORG/NAME": (
        "loads the tag's weights first: torchvision's 330 MB ViT-B/16 file from download.pytorch.org"
    ),
    "docs/inspection.md: vitscratch attention photo.jpg --model scratch_vit_b16.augreg2_in21k_ft_in1k --img-size 224": (
        "loads the tag's weights: timm's ViT-B/16 from huggingface.co"
    ),
    "docs/pretrained.md: model = timm.create_model(": (
        "reads torchvision's 330 MB ViT-B/16 file from a path of the reader's (/data/weights/)"
    ),
}


def test_every_snippet_is_run_or_listed_with_a_reason():
    keys = [snippet.key for snippet in SNIPPETS]
    assert len(keys) == len(set(keys)), "two snippets of one page start with the same line: tell them apart"
    neither = [key for key in keys if key not in RUN and key not in NOT_RUN]
    both = [key for key in keys if key in RUN and key in NOT_RUN]
    stale = [key for key in (*RUN, *NOT_RUN) if key not in keys]
    assert not neither, "snippets neither run nor listed as not runnable (add each to RUN or NOT_RUN):\n" + "\n".join(
        neither
    )
    assert not both and not stale, f"run and listed: {both}; entries naming no snippet: {stale}"


@pytest.mark.parametrize("page", [shown_path(p) for p in PAGES])
def test_page_snippets_run(page, tmp_path):
    chosen = [s for s in SNIPPETS if s.page == page and s.key in RUN]
    if not chosen:
        assert all(s.key in NOT_RUN for s in SNIPPETS if s.page == page)
        return
    workspace = tmp_path / "work"
    workspace.mkdir()
    spec = dict(
        workspace=str(workspace),
        setup=SETUP.get(page, []),
        hub_repo=HUB_REPO.get(page),
        snippets=[
            dict(key=s.key, kind=s.kind, text=RUN[s.key].apply(s), cwd=RUN[s.key].cwd)
            for s in chosen  # in page order
        ],
    )
    spec_file, results_file = tmp_path / "spec.json", tmp_path / "results.json"
    spec_file.write_text(json.dumps(spec))
    env = dict(os.environ)
    env.update(
        HOME=str(workspace / "home"),  # ~ in a snippet is the workspace's
        HF_HOME=str(tmp_path / "hf-home"),
        HF_ENDPOINT="http://127.0.0.1:9",  # nobody answers: a snippet that reaches for the network fails at once
        TORCH_HOME=str(tmp_path / "torch-home"),
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )
    done = time_limits.run(
        [sys.executable, "-m", "tests.docs.snippet_runner", str(spec_file), str(results_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        quiet_seconds=PAGE_QUIET_S,
    )
    assert done.returncode == 0, f"the snippet runner failed:\n{done.stderr[-3000:]}"
    results = json.loads(results_file.read_text())
    assert [r["key"] for r in results] == [s["key"] for s in spec["snippets"]]
    failed = [f"{r['key']}\n{r['error']}" for r in results if r["error"] is not None]
    assert not failed, f"{len(failed)} of {len(results)} snippets of {page} failed:\n\n" + "\n\n".join(failed)


def test_a_failing_snippet_is_reported_with_its_error(tmp_path):
    """The runner itself: a Python block that raises and a command that exits 2 are each reported, and the
    snippets after them still run."""
    spec = dict(
        workspace=str(tmp_path),
        setup=[],
        hub_repo=None,
        snippets=[
            dict(key="a", kind="python", text="raise ValueError('stale docs')\n", cwd=""),
            dict(key="b", kind="vitscratch", text="vitscratch summary scratch_vit_b17", cwd=""),
            dict(key="c", kind="python", text="x = 1\n", cwd=""),
        ],
    )
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    time_limits.run(
        [sys.executable, "-m", "tests.docs.snippet_runner", str(tmp_path / "spec.json"), str(tmp_path / "out.json")],
        cwd=ROOT,
        env=env,
        check=True,
        quiet_seconds=PAGE_QUIET_S,
    )
    a, b, c = json.loads((tmp_path / "out.json").read_text())
    assert "ValueError: stale docs" in a["error"]
    assert "exit 2: vitscratch: error:" in b["error"] and "scratch_vit_b17" in b["error"]
    assert c == {"key": "c", "error": None}


def test_pages_that_run_the_examples_say_where_they_run_from():
    """``python -m examples.…`` and ``torchrun -m examples.…`` work only from the repository root (``examples/``
    is not installed): every section that shows one says so."""
    from tests.docs.test_cli_docs import sections

    showing = [(where, text) for where, text in sections() if "-m examples." in text]
    assert showing
    silent = [where for where, text in showing if "repository root" not in text]
    assert not silent, f"sections that run an example without saying it runs from the repository root: {silent}"
