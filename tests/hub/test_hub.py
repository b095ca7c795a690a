"""Push to a local Hub-protocol server, pull back with the real huggingface_hub client and timm."""

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file, save_file
from timm.models import push_to_hf_hub

import timm_vitscratch
from tests.support import TINY, tiny
from tests.support.hub_fixtures import TOKEN, logits, model_dir, repo_for, run_client, tiny_variants, use_hub
from tests.support.local_hub import LocalHub
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.files import sha256_file
from timm_vitscratch.inspect.counts import torchvision_param_count
from timm_vitscratch.models.registry import HUB_WEIGHTS, register_hub_weights, unregister_hub_weights

pytestmark = pytest.mark.slow  # push and pull through the local Hub server, fresh loading processes

VARIANTS = ("plain", "has_logits", "distilled")
TAG = "scratch_vit_ti16.fresh_hub"


@pytest.fixture(scope="module")
def fresh_process(local_hub, tmp_path_factory):
    """Push tiny models here, then load them all in one fresh process with its own empty cache."""
    work = tmp_path_factory.mktemp("fresh-process")
    x = torch.randn(2, 3, 32, 32)
    save_file({"x": x}, str(work / "x.safetensors"))
    models, expected, commits, jobs = {}, {}, {}, []
    with pytest.MonkeyPatch.context() as monkeypatch:
        use_hub(monkeypatch, local_hub.url, work / "hf-home-push")
        stock = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=10)
        push_to_hf_hub(stock.eval(), "tests/fresh-stock-vit-tiny", safe_serialization=True)  # timm's own push
        models["stock"] = stock
        jobs.append(dict(id="stock", kind="logits", model="hf-hub:tests/fresh-stock-vit-tiny", plugin=False))
        for name, model in tiny_variants().items():
            models[name] = model
            commits[name] = hub.push(model_dir(work / name, model), f"tests/fresh-{name}").oid
            jobs.append(dict(id=name, kind="logits", model=f"hf-hub:tests/fresh-{name}"))
        jobs.append(dict(id="num_classes", kind="logits", model="hf-hub:tests/fresh-plain", kwargs={"num_classes": 3}))
        jobs.append(dict(id="register", kind="register_tag", model_tag=TAG, repo_id="tests/fresh-plain"))
        jobs.append(dict(id="tag", kind="logits", model=TAG, kwargs={k: v for k, v in TINY.items()}))
        env = use_hub(monkeypatch, local_hub.url, work / "hf-home-fresh")
    for job in jobs:
        if job["kind"] == "logits":
            job.update(input=str(work / "x.safetensors"), output=str(work / f"{job['id']}.safetensors"))
    expected = {name: logits(model, x) for name, model in models.items()}
    results = run_client(jobs, work, env)
    # the same stock job once more in a process where timm never sees the plugin (autoload opted out)
    stock_only = work / "stock-only"
    stock_only.mkdir()
    stock_job = dict(jobs[0], id="stock_without_plugin", output=str(work / "stock_without_plugin.safetensors"))
    results.update(run_client([stock_job], stock_only, {**env, "TIMM_VITSCRATCH_NO_AUTOLOAD": "1"}))
    return dict(work=work, models=models, expected=expected, results=results, commits=commits)


def _loaded(fresh_process, job_id):
    result = fresh_process["results"][job_id]
    assert result.get("ok"), result
    return load_file(str(fresh_process["work"] / f"{job_id}.safetensors")), result


@pytest.mark.parametrize("variant", VARIANTS)
def test_fresh_process_loads_pushed_model_with_identical_logits(fresh_process, variant):
    tensors, result = _loaded(fresh_process, variant)
    assert result["plugin_imported"]
    max_abs_diff = (tensors["logits"] - fresh_process["expected"][variant]).abs().max().item()
    assert max_abs_diff == 0.0
    assert torch.equal(tensors["logits"], fresh_process["expected"][variant])


def test_other_num_classes_reinitialises_only_the_head(fresh_process):
    tensors, _ = _loaded(fresh_process, "num_classes")
    pushed = fresh_process["models"]["plain"].state_dict()
    assert tensors["logits"].shape == (2, 3)
    assert tensors["sd.head.weight"].shape == (3, 64) and tensors["sd.head.bias"].shape == (3,)
    body = [k for k in pushed if not k.startswith("head.")]
    assert body and all(torch.equal(tensors[f"sd.{k}"], pushed[k]) for k in body)


def test_stock_timm_model_on_the_same_server_loads_with_stock_timm(fresh_process):
    # with the plugin registered (timm imports it automatically) and with stock timm alone
    tensors, result = _loaded(fresh_process, "stock")
    assert result["plugin_imported"]
    assert torch.equal(tensors["logits"], fresh_process["expected"]["stock"])
    tensors, result = _loaded(fresh_process, "stock_without_plugin")
    assert not result["plugin_imported"]
    assert torch.equal(tensors["logits"], fresh_process["expected"]["stock"])


def test_registered_tag_resolves_through_the_hub(fresh_process):
    registered = fresh_process["results"]["register"]
    assert registered["hf_hub_id"] == f"tests/fresh-plain@{fresh_process['commits']['plain']}"
    tensors, _ = _loaded(fresh_process, "tag")
    assert torch.equal(tensors["logits"], fresh_process["expected"]["plain"])


def test_pushed_repo_has_timm_layout_and_a_model_card(hub_env, tmp_path, request):
    repo = repo_for(request)
    model = tiny("scratch_deit_ti16_distilled", num_classes=10)
    directory = model_dir(tmp_path / "model", model)
    hub.push(directory, repo, commit_message="tiny DeiT")
    from huggingface_hub import HfApi, hf_hub_download

    assert sorted(s.rfilename for s in HfApi().model_info(repo).siblings) == [
        ".gitattributes",
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    assert json.loads(Path(hf_hub_download(repo, "config.json")).read_text()) == json.loads(
        (directory / "config.json").read_text()
    )
    card = Path(hf_hub_download(repo, "README.md")).read_text()
    true_count = sum(p.numel() for p in model.parameters())
    leaf_count = sum(
        p.numel()
        for m in model.modules()
        for n, p in m.named_parameters(recurse=False)
        if m is not model and n in ("weight", "bias")
    )
    for text in (
        "library_name: timm",
        "license: apache-2.0",
        "scratch_deit_ti16_distilled",
        "distillation token",
        f"{true_count:,}",
        f"{leaf_count:,}",
        f"timm.create_model('hf-hub:{repo}', pretrained=True)",
        sha256_file(directory / "model.safetensors"),
        '"format": "test"',
    ):
        assert text in card


def test_push_registered_model_name_counts_match_torchvision(hub_env, request):
    repo = repo_for(request)
    assert cli_main(["push", "scratch_vit_ti16", repo]) == 0
    from huggingface_hub import hf_hub_download

    card = Path(hf_hub_download(repo, "README.md")).read_text()
    assert f"{torchvision_param_count('scratch_vit_ti16'):,}" in card  # same architecture as torchvision's
    config = json.loads(Path(hf_hub_download(repo, "config.json")).read_text())
    assert config["architecture"] == "scratch_vit_ti16" and config["vitscratch"]["source"]["weights"] == "random init"


def test_revisions_by_commit_and_by_branch(hub_env, tmp_path, request):
    repo = repo_for(request)
    versions = [tiny(num_classes=4) for _ in range(3)]
    dirs = [model_dir(tmp_path / f"v{i}", m) for i, m in enumerate(versions)]
    c0 = hub.push(dirs[0], repo).oid
    c1 = hub.push(dirs[1], repo, commit_message="second version").oid  # main moves on
    c2 = hub.push(dirs[2], repo, revision="experiment").oid  # a new branch from main
    assert len({c0, c1, c2}) == 3
    wanted = {c0: 0, c1: 1, c2: 2, "main": 1, "experiment": 2}
    for revision, index in wanted.items():
        out = hub.pull(repo, tmp_path / f"pulled-{revision}", revision=revision)
        assert sha256_file(out / "model.safetensors") == sha256_file(dirs[index] / "model.safetensors")
    x = torch.randn(1, 3, 32, 32)
    for revision, index in wanted.items():  # timm's own `@revision` syntax
        loaded = timm.create_model(f"hf-hub:{repo}@{revision}", pretrained=True)
        assert torch.equal(logits(loaded, x), logits(versions[index], x))


def test_pull_installs_a_loadable_verified_directory(hub_env, tmp_path, request):
    repo = repo_for(request)
    model = tiny("scratch_vit_b16_in21k", num_classes=10, representation_size=32)
    hub.push(model_dir(tmp_path / "src", model), repo)
    out = hub.pull(repo, tmp_path / "installed")
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf-home", "installed", "src"]  # no leftovers
    probe = tmp_path / "probe"
    probe.mkdir()  # the modes a plain mkdir gives under this umask, not mkdtemp's 0700
    assert out.stat().st_mode & 0o777 == probe.stat().st_mode & 0o777
    probe.rmdir()
    loaded = timm.create_model(f"local-dir:{out}", pretrained=True)
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(logits(loaded, x), logits(model, x))


def test_pull_into_empty_or_non_empty_directories(hub_env, tmp_path, request):
    repo = repo_for(request)
    hub.push(model_dir(tmp_path / "src", tiny()), repo)
    out = tmp_path / "out"
    out.mkdir()
    hub.pull(repo, out)  # an existing empty directory is fine
    shutil.rmtree(out)
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        hub.pull(repo, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    hub.pull(repo, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf-home", "out", "src"]
    deep = hub.pull(repo, tmp_path / "missing" / "parents" / "out")  # parents created, as convert creates them
    assert sorted(p.name for p in deep.iterdir()) == ["README.md", "config.json", "model.safetensors"]


def test_register_hub_weights_completes_the_repo_id_and_loads(hub_env, tmp_path):
    model = tiny(num_classes=6)
    hub.push(model_dir(tmp_path / "src", model), "tests/scratch_vit_ti16.org_tag")
    try:
        register_hub_weights("scratch_vit_ti16.org_tag", "tests/", num_classes=6, input_size=(3, 32, 32))
        assert HUB_WEIGHTS["scratch_vit_ti16.org_tag"]["hf_hub_id"] == "tests/scratch_vit_ti16.org_tag"
        assert "scratch_vit_ti16.org_tag" in timm.list_models("scratch_vit_ti16*", pretrained=True)
        assert timm.create_model("scratch_vit_ti16").num_classes == 1000  # the untagged default is unchanged
        loaded = timm.create_model("scratch_vit_ti16.org_tag", pretrained=True, **TINY)
        x = torch.randn(1, 3, 32, 32)
        assert torch.equal(logits(loaded, x), logits(model, x))
    finally:
        unregister_hub_weights("scratch_vit_ti16.org_tag")
    assert "scratch_vit_ti16.org_tag" not in timm.list_models("scratch_vit_ti16*", pretrained=True)


def test_register_hub_weights_rejects_bad_input():
    with pytest.raises(ValueError, match="has no tag"):
        register_hub_weights("scratch_vit_b16", "org/x")
    with pytest.raises(ValueError, match="unknown model 'scratch_vit_b61'"):
        register_hub_weights("scratch_vit_b61.t", "org/x")
    with pytest.raises(ValueError, match="unknown pretrained-cfg fields"):
        register_hub_weights("scratch_vit_b16.t", "org/x", num_clases=3)
    with pytest.raises(ValueError, match="ORG/NAME"):
        register_hub_weights("scratch_vit_b16.t", "justaname")
    assert "scratch_vit_b16.t" not in HUB_WEIGHTS


def test_push_and_pull_name_this_library_in_their_user_agent(hub_env, local_hub, tmp_path, request):
    """Every request to the Hub's API says who makes it: ``timm_vitscratch/<version>``, then huggingface_hub's."""
    repo = repo_for(request)
    first = len(local_hub.requests)
    hub.push(model_dir(tmp_path / "src", tiny()), repo)
    pushed = len(local_hub.requests)
    damaged = bytearray((tmp_path / "src" / "model.safetensors").read_bytes())
    hub.pull(repo, tmp_path / "out")
    blob = next((tmp_path / "hf-home").glob("hub/*/blobs/" + sha256_file(tmp_path / "src" / "model.safetensors")))
    damaged[-1] ^= 0xFF
    blob.write_bytes(bytes(damaged))  # the next pull checks the damaged cache with the Hub, downloads again
    hub.pull(repo, tmp_path / "out", force=True)
    seen = list(zip(local_hub.requests, local_hub.user_agents, strict=True))
    push_calls = {(method, path.split("/")[-2]) for (_, method, path, _), _ in seen[first:pushed]}
    pull_calls = {(method, path.split("/")[5]) for (_, method, path, _), _ in seen[pushed:] if path.startswith("/api/")}
    assert push_calls >= {("POST", "preupload"), ("POST", "commit")}
    assert pull_calls >= {("GET", "revision"), ("GET", "tree")}  # the tree: verify_repo_checksums asks for it
    ours = f"timm_vitscratch/{timm_vitscratch.__version__}; hf_hub/"
    assert [(o, m, p) for (o, m, p, _), agent in seen[first:] if o == "api" and not agent.startswith(ours)] == []


def test_cli_push_and_pull_use_hf_endpoint_and_hf_token(hub_env, local_hub, tmp_path, request):
    repo = repo_for(request)
    directory = model_dir(tmp_path / "src", tiny())
    vitscratch = shutil.which("vitscratch", path=str(Path(sys.executable).parent))
    assert vitscratch, "the console script is installed beside the interpreter"
    pushed = subprocess.run(
        [
            vitscratch,
            "push",
            str(directory),
            repo,
            "--revision",
            "cli-branch",
            "--private",
            "--commit-message",
            "from the CLI",
        ],
        env=hub_env,
        capture_output=True,
        text=True,
    )
    assert pushed.returncode == 0, pushed.stderr
    assert f"pushed {directory} to {repo}@cli-branch: commit " in pushed.stdout
    commit = pushed.stdout.strip().rsplit(" ", 1)[-1]
    assert local_hub.store.resolve(repo, "cli-branch")["summary"] == "from the CLI"
    assert local_hub.store.repo(repo)["private"]
    assert cli_main(["pull", repo, "--revision", commit, str(tmp_path / "out")]) == 0
    assert sha256_file(tmp_path / "out" / "model.safetensors") == sha256_file(directory / "model.safetensors")


def test_offline_after_one_pull_with_the_server_stopped(tmp_path, monkeypatch):
    model = tiny(num_classes=5)
    directory = model_dir(tmp_path / "src", model)
    with LocalHub(tmp_path / "server", token=TOKEN) as server:
        env = use_hub(monkeypatch, server.url, tmp_path / "hf-home")
        hub.push(directory, "tests/offline")
        hub.pull("tests/offline", tmp_path / "first-pull")  # the one pull that fills the cache
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=5).close()
    x = torch.randn(2, 3, 32, 32)
    save_file({"x": x}, str(tmp_path / "x.safetensors"))
    jobs = [
        dict(
            id="timm",
            kind="logits",
            model="hf-hub:tests/offline",
            input=str(tmp_path / "x.safetensors"),
            output=str(tmp_path / "offline.safetensors"),
        ),
        dict(id="pull", kind="cli", argv=["pull", "tests/offline", str(tmp_path / "offline-pull")]),
    ]
    results = run_client(jobs, tmp_path, {**env, "HF_HUB_OFFLINE": "1"})
    assert results["timm"].get("ok") and results["pull"] == {"ok": True, "exit_code": 0}
    assert torch.equal(load_file(str(tmp_path / "offline.safetensors"))["logits"], logits(model, x))
    assert sha256_file(tmp_path / "offline-pull" / "model.safetensors") == sha256_file(directory / "model.safetensors")
