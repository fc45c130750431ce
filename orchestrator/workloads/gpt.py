"""A small byte-level GPT trained on the Python standard library's own source.

The LLM-shaped built-in (``job.workload=gpt``): a decoder-only transformer with
causal self-attention, AdamW with warmup and cosine decay, gradient accumulation,
clipping and autocast from the loop. It is written on the public workload protocol
alone (orchestrator/workloads/base.py: ``GPT(params)``, ``dataset()``, no
``from_job``, nothing read from ``job.*``), so it doubles as the example of what a
user's workload looks like.

The text is the standard library's ``*.py`` files: every machine that runs Python
has them, so nothing is downloaded, and the same interpreter gives the same bytes,
which a resumed run needs to end with the weights of an unbroken one.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

VOCAB = 256  # bytes are the tokens: no tokenizer to ship or to download
# Between two files: ASCII "file separator", which Python source does not contain.
SEPARATOR = b"\x1c"
# Folders under the stdlib that hold installed packages or bytecode, not the stdlib's text.
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
# Eval windows per forward pass: bounds evaluate()'s memory whatever eval_windows is.
EVAL_CHUNK = 16


@dataclass
class Params:
    # Model: bytes of context per window, transformer blocks, attention heads per
    # block, width (a multiple of n_head), dropout (off by default: a few hundred
    # steps over megabytes of text do not overfit).
    context: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0
    # AdamW: peak learning rate, decoupled weight decay (matrices only), moments' betas.
    lr: float = 3e-3
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    # Schedule: linear warmup over warmup_steps, then cosine decay to
    # min_lr_ratio * lr at max_steps (the yaml sets it to ${job.steps}).
    warmup_steps: int = 20
    max_steps: int = 300
    min_lr_ratio: float = 0.1
    # Data: how much stdlib source to read, the tail fraction of it held out, and
    # how many held-out windows evaluate() scores (evenly spaced, so always the same).
    corpus_bytes: int = 2_000_000
    eval_fraction: float = 0.05
    eval_windows: int = 64


def stdlib_files(root: str | None = None) -> list[Path]:
    """The standard library's ``*.py`` files, sorted by path relative to its root
    (not by walk order, which depends on the file system)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    found: list[str] = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel = Path(folder).relative_to(base)
        found.extend((rel / f).as_posix() for f in files if f.endswith(".py"))
    return [base / rel for rel in sorted(found)]


def read_corpus(limit: int, root: str | None = None) -> bytes:
    """The first ``limit`` bytes of the stdlib files in order, a separator after each."""
    parts: list[bytes] = []
    size = 0
    for path in stdlib_files(root):
        if size >= limit:
            break  # read only what the limit keeps: a few MB, not the whole stdlib
        data = path.read_bytes() + SEPARATOR
        parts.append(data)
        size += len(data)
    return b"".join(parts)[:limit]


class ByteWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Non-overlapping windows of ``context + 1`` bytes: item i is (x, y), y being x shifted by one."""

    def __init__(self, data: torch.Tensor, context: int) -> None:
        self.data, self.context = data, context

    def __len__(self) -> int:
        return len(self.data) // (self.context + 1)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"window {i} of {len(self)}")
        start = i * (self.context + 1)
        w = self.data[start : start + self.context + 1].long()
        return w[:-1], w[1:]


class Block(nn.Module):
    """Pre-LayerNorm transformer block: causal self-attention, then an MLP, each residual."""

    def __init__(self, d_model: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class TinyGPT(nn.Module):
    def __init__(self, context: int, n_layer: int, n_head: int, d_model: int, dropout: float) -> None:
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.head.weight = self.tok.weight  # tied: one matrix reads and writes bytes
        self.apply(self._init)
        # GPT-2's scaling of the residual projections: the residual stream's variance
        # stays the same whatever the depth.
        for block in self.blocks:
            for layer in (block.proj, block.out):
                nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.context:
            raise ValueError(f"sequence of {t} bytes; the model's context is {self.context}")
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lr_factor(step: int, warmup: int, max_steps: int, min_ratio: float) -> float:
    """The multiplier of the peak lr at scheduler step ``step`` (0-based)."""
    if step < warmup:
        # (step + 1): the first step already learns; it reaches 1 at the end of warmup.
        return (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class GPT:
    Params = Params

    def __init__(self, params: dict[str, Any]) -> None:
        self.p = Params(**params)
        p = self.p
        checks = {
            "context": p.context >= 1,
            "n_layer": p.n_layer >= 1,
            "n_head": p.n_head >= 1,
            "d_model": p.d_model >= 1 and p.d_model % max(p.n_head, 1) == 0,
            "dropout": 0.0 <= p.dropout < 1.0,
            "lr": p.lr > 0,
            "warmup_steps": p.warmup_steps >= 0,
            "max_steps": p.max_steps >= 1,
            "min_lr_ratio": 0.0 <= p.min_lr_ratio <= 1.0,
            "corpus_bytes": p.corpus_bytes > 0,
            "eval_fraction": 0.0 < p.eval_fraction < 1.0,
            "eval_windows": p.eval_windows >= 1,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            k = bad[0]
            hint = " (a multiple of n_head)" if k == "d_model" else ""
            raise ValueError(f"job.params.{k}: got {getattr(p, k)!r}; out of range{hint}")
        # Read on first use, then kept: dataset() and evaluate() share one read.
        self._train: torch.Tensor | None = None
        self._eval: torch.Tensor | None = None
        self._digest: str | None = None

    def texts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The corpus's training bytes and its held-out tail (uint8), read on first call."""
        if self._train is None or self._eval is None:
            corpus = read_corpus(self.p.corpus_bytes)
            if len(corpus) < 2 * (self.p.context + 1):
                raise ValueError(f"the stdlib corpus has {len(corpus)} bytes; too few for two windows")
            data = torch.from_numpy(np.frombuffer(corpus, dtype=np.uint8).copy())
            cut = len(data) - max(self.p.context + 1, round(len(data) * self.p.eval_fraction))
            self._train, self._eval = data[:cut], data[cut:]
        return self._train, self._eval

    # --- the protocol ---------------------------------------------------------------
    def model(self) -> nn.Module:
        p = self.p
        return TinyGPT(p.context, p.n_layer, p.n_head, p.d_model, p.dropout)

    def optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        # Decay only the matrices of Linear layers: decaying biases, LayerNorm gains
        # and embeddings (the tied head included) pulls them towards 0 for no benefit.
        no_decay = {
            id(q) for m in model.modules() if isinstance(m, nn.Embedding | nn.LayerNorm) for q in m.parameters()
        }
        decay, rest = [], []
        for q in model.parameters():  # deduplicated: the tied matrix appears once
            (decay if q.dim() >= 2 and id(q) not in no_decay else rest).append(q)
        groups = [
            {"params": decay, "weight_decay": self.p.weight_decay},
            {"params": rest, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=self.p.lr, betas=(self.p.beta1, self.p.beta2))

    def scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        p = self.p

        def factor(step: int) -> float:
            return lr_factor(step, p.warmup_steps, p.max_steps, p.min_lr_ratio)

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    def dataset(self) -> ByteWindows:
        return ByteWindows(self.texts()[0], self.p.context)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, VOCAB).float(), y.reshape(-1))

    def state_dict(self) -> dict[str, Any]:
        """Which corpus this run trains on: the stdlib differs between Python versions, and
        a resume on other bytes would quietly end with other weights."""
        if self._digest is None:  # once: state_dict() runs at every checkpoint
            train, held_out = self.texts()
            self._digest = hashlib.sha256(train.numpy().tobytes() + held_out.numpy().tobytes()).hexdigest()
        return {"corpus_sha256": self._digest, "python": platform.python_version()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = self.state_dict()
        if state.get("corpus_sha256") != mine["corpus_sha256"]:
            raise ValueError(
                f"the checkpoint was trained on the standard library of Python {state.get('python')}, this node "
                f"has Python {mine['python']} with other sources; resume on nodes with the same Python"
            )

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        windows = ByteWindows(self.texts()[1], self.p.context)
        n = min(self.p.eval_windows, len(windows))
        # Evenly spaced over the held-out text, so the same windows every time.
        picks = [i * len(windows) // n for i in range(n)]
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        try:
            with torch.no_grad():
                for s in range(0, n, EVAL_CHUNK):
                    xs, ys = zip(*(windows[i] for i in picks[s : s + EVAL_CHUNK]), strict=True)
                    x, y = torch.stack(xs).to(device), torch.stack(ys).to(device)
                    logits = model(x).float()
                    total += F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="sum").item()
                    count += y.numel()
        finally:
            model.train(was_training)
        loss = total / count
        return {"eval_loss": loss, "eval_bits_per_byte": loss / math.log(2)}
