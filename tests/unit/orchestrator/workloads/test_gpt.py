"""The gpt built-in without Ray: its stdlib corpus, its params against the job yamls,
its windows, its schedule, that a few steps of training lower the held-out loss, and
that gpt_large's checkpoint state is as big as the storage benchmarks need."""

from __future__ import annotations

import itertools
import math
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import default_collate

from orchestrator.workloads import WorkloadError, make_workload, validate_params
from orchestrator.workloads.gpt import GPT, SEPARATOR, SKIP_DIRS, read_corpus, stdlib_files
from tests.support.paths import REPO

CONF = REPO / "conf" / "job"
# Small enough that every test here takes well under a second.
TINY: dict[str, Any] = {
    "context": 32,
    "n_layer": 1,
    "n_head": 2,
    "d_model": 32,
    "lr": 1e-2,
    "warmup_steps": 5,
    "max_steps": 40,
    "corpus_bytes": 200_000,
    "eval_windows": 32,
}


@pytest.fixture(autouse=True, scope="module")
def _one_thread_and_restored_rng() -> Iterator[None]:
    """One torch thread, as a worker has (tiny ops on a busy machine are slower with
    more); the global RNG and thread count left as they were found."""
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


def job_yaml(name: str) -> dict[str, Any]:
    """A job yaml as plain data, ``${job.steps}`` substituted."""
    cfg = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"), resolve=True)
    assert isinstance(cfg, dict)
    return cfg


def gpt(**over: Any) -> GPT:
    return GPT(validate_params(GPT, {**TINY, **over}))


def test_the_corpus_is_the_stdlibs_own_source_the_same_every_time() -> None:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files()
    rel = [p.relative_to(root).as_posix() for p in files]
    assert files and rel == sorted(rel)
    assert all(p.suffix == ".py" and not SKIP_DIRS & set(Path(r).parts) for p, r in zip(files, rel, strict=True))
    corpus = read_corpus(100_000)
    assert len(corpus) == 100_000 and corpus == read_corpus(100_000)
    # Nothing but the files' bytes in order, a separator after each.
    whole = b"".join(p.read_bytes() + SEPARATOR for p in files[:200])
    assert len(whole) > len(corpus) and whole.startswith(corpus)
    # The workload's train and held-out parts are that corpus, split at its tail.
    w = gpt(corpus_bytes=100_000, eval_fraction=0.1)
    train, held_out = w.texts()
    assert bytes(train.numpy()) + bytes(held_out.numpy()) == corpus
    assert len(held_out) == 10_000


def test_only_py_files_outside_installed_packages_and_bytecode(tmp_path: Path) -> None:
    for rel in [
        "b.py",
        "a/z.py",
        "a.py",
        "a/notes.txt",
        "site-packages/x.py",
        "__pycache__/b.py",
        "q/dist-packages/y.py",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(rel.encode())
    assert [p.relative_to(tmp_path).as_posix() for p in stdlib_files(str(tmp_path))] == ["a.py", "a/z.py", "b.py"]
    assert read_corpus(1000, str(tmp_path)) == b"a.py\x1ca/z.py\x1cb.py\x1c"
    assert read_corpus(6, str(tmp_path)) == b"a.py\x1ca"


@pytest.mark.parametrize("name", ["gpt", "gpt_large"])
def test_the_job_yamls_params_validate_and_max_steps_follows_job_steps(name: str) -> None:
    cfg = job_yaml(name)
    job, trainer = cfg["job"], cfg["trainer"]
    assert job["workload"] == "gpt" and job["params"]["max_steps"] == job["steps"]
    assert job["batch_size"] % (trainer["workers"] * trainer["grad_accum_steps"]) == 0
    params = validate_params(GPT, job["params"])
    assert params["max_steps"] == job["steps"]
    GPT(params)
    # What a worker builds from the job: through params alone, no from_job.
    assert not hasattr(GPT, "from_job")
    assert isinstance(make_workload(job), GPT)
    with pytest.raises(WorkloadError) as info:
        validate_params(GPT, {**job["params"], "n_layers": 4})
    assert info.value.key == "job.params.n_layers"
    with pytest.raises(WorkloadError):
        validate_params(GPT, {**job["params"], "context": "long"})


def test_the_composed_gpt_job_passes_the_checks_before_launch() -> None:
    from orchestrator.config.compose import compose
    from orchestrator.config.usercode import check_user_code

    cfg = compose(["job=gpt"])
    check_user_code(cfg)
    assert cfg.job.params["max_steps"] == cfg.job.steps
    assert compose(["job=gpt", "job.steps=120"]).job.params["max_steps"] == 120


def test_impossible_sizes_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"job\.params\.d_model"):
        gpt(d_model=30, n_head=4)
    with pytest.raises(ValueError, match=r"job\.params\.eval_fraction"):
        gpt(eval_fraction=0.0)


def test_windows_do_not_overlap_and_y_is_x_shifted_by_one() -> None:
    w = gpt()
    ds = w.dataset()
    train = w.texts()[0]
    c = TINY["context"]
    assert len(ds) == len(train) // (c + 1) > 100
    for i in (0, 1, len(ds) - 1):
        x, y = ds[i]
        assert x.shape == y.shape == (c,) and x.dtype == y.dtype == torch.int64
        assert torch.equal(x[1:], y[:-1])
        assert torch.equal(torch.cat([x, y[-1:]]), train[i * (c + 1) : (i + 1) * (c + 1)].long())
    with pytest.raises(IndexError):
        ds[len(ds)]
    x, y = default_collate([ds[i] for i in range(4)])
    assert x.shape == y.shape == (4, c)


def test_the_schedule_warms_up_then_decays_to_min_lr_ratio() -> None:
    w = gpt(warmup_steps=10, max_steps=50, min_lr_ratio=0.1)
    opt = w.optimizer(w.model())
    sched = w.scheduler(opt)
    lrs = []
    for _ in range(50):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    peak = TINY["lr"]
    assert lrs[0] < lrs[5] < lrs[9] < lrs[10] == pytest.approx(peak)
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))
    assert lrs[30] < peak and lrs[-1] == pytest.approx(0.1 * peak, rel=0.02)
    assert sched.get_last_lr() == pytest.approx([0.1 * peak, 0.1 * peak])


def test_weight_decay_spares_biases_layernorms_and_the_tied_embedding() -> None:
    w = gpt()
    model = w.model()
    assert model.head.weight is model.tok.weight
    decay, rest = w.optimizer(model).param_groups
    assert decay["weight_decay"] > 0 and rest["weight_decay"] == 0
    assert all(p.dim() == 2 for p in decay["params"])
    assert any(p is model.tok.weight for p in rest["params"])
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))


def test_a_short_seeded_loop_lowers_the_held_out_loss() -> None:
    w = gpt()
    ds = w.dataset()
    torch.manual_seed(0)
    model = w.model()
    opt = w.optimizer(model)
    sched = w.scheduler(opt)
    before = w.evaluate(model)
    assert model.training
    assert before["eval_bits_per_byte"] == pytest.approx(before["eval_loss"] / math.log(2))
    assert abs(before["eval_loss"] - math.log(256)) < 0.5
    gen = torch.Generator().manual_seed(0)
    for _ in range(TINY["max_steps"]):
        batch = default_collate([ds[i] for i in torch.randint(len(ds), (16,), generator=gen).tolist()])
        opt.zero_grad(set_to_none=True)
        w.loss(model, batch).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    after = w.evaluate(model)
    assert after["eval_loss"] < before["eval_loss"] - 1.0
    # evaluate() is deterministic and leaves the mode it found.
    model.eval()
    assert w.evaluate(model) == after and not model.training


def test_the_loss_runs_under_bf16_autocast() -> None:
    w = gpt()
    model = w.model()
    batch = default_collate([w.dataset()[i] for i in range(4)])
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        loss = w.loss(model, batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()


def test_gpt_large_checkpoint_state_is_at_least_200_mb() -> None:
    w = GPT(validate_params(GPT, job_yaml("gpt_large")["job"]["params"]))
    with torch.device("meta"):
        model = w.model()
    # parameters() counts the tied embedding and head once, as the checkpoint stores it.
    n = sum(p.numel() for p in model.parameters())
    state_bytes = n * 4 * 3  # fp32 weights + AdamW's exp_avg and exp_avg_sq
    assert n >= 17_000_000
    assert state_bytes >= 200_000_000


def test_a_checkpoint_from_another_corpus_is_refused_by_name() -> None:
    w = GPT(validate_params(GPT, {"corpus_bytes": 50_000, "context": 16}))
    state = w.state_dict()
    w.load_state_dict(state)  # the same bytes: accepted
    with pytest.raises(ValueError, match=r"standard library of Python 3\.0"):
        w.load_state_dict({**state, "corpus_sha256": "0" * 64, "python": "3.0"})
