"""Training the byte-level ALiBi decoder with optax: AdamW, warm-up + cosine decay, clipping.

The loss is the mean next-byte cross-entropy; we report it in bits per byte (nats / ln 2).
Each step is one jit-compiled function of (params, optimiser state, batch); the batch of
step s is drawn from (seed, s) alone (``posbias.lm.data.train_batch``) and the initial
parameters from the seed, so a run is deterministic, and a run resumed from a checkpoint
(written atomically every ``checkpoint_every`` steps, see ``posbias.lm.checkpoint``) goes
on exactly as the uninterrupted run would have: same batches, same state, same numbers.

Training runs in float32 under ``jax.enable_x64(False)`` for the duration of the call, so
it neither depends on nor changes the caller's JAX configuration.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posbias.errors import UserError
from posbias.lm import checkpoint as ckpt
from posbias.lm.config import ModelConfig, TrainConfig
from posbias.lm.data import eval_windows, heldout_sequences, load_corpus, train_batch, unigram_bits

LN2 = math.log(2.0)
SUMMARY = "train.json"
EVAL_BATCH = 16


@dataclass(frozen=True)
class TrainResult:
    """Bits per byte of the final model on the train windows and the validation split, the
    unigram baseline, steps done in this call, wall seconds of the whole run, and the files."""

    train_bpb: float
    val_bpb: float
    unigram_bpb: float
    steps: int
    steps_this_call: int
    wall_s: float
    tokens_per_s: float
    resumed_from: int
    files: tuple[Path, ...]
    history: tuple[dict, ...]


def optimizer(cfg: TrainConfig):
    """clip_by_global_norm(clip) then AdamW with linear warm-up to ``lr`` and cosine decay to
    ``lr * final_lr_fraction`` at the last step; weight decay on matrices only."""
    import optax

    from posbias.lm.model import MATRICES, flatten, unflatten

    schedule = optax.warmup_cosine_decay_schedule(0.0, cfg.lr, cfg.warmup, cfg.steps, cfg.lr * cfg.final_lr_fraction)

    def decay_mask(params):
        flat = flatten(params)
        return unflatten({k: k.rsplit("/", 1)[-1] in MATRICES for k in flat})

    return optax.chain(
        optax.clip_by_global_norm(cfg.clip),
        optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay, mask=decay_mask),
    )


def _identity(model: ModelConfig, train: TrainConfig, fingerprint: str) -> dict:
    return {"model": model.to_dict(), "train": train.to_dict(), "corpus": fingerprint}


def _first_difference(saved: dict, wanted: dict) -> str:
    for part in ("model", "train"):
        for key, value in wanted[part].items():
            if saved[part].get(key) != value:
                return f"{part}.{key} = {saved[part].get(key)!r} in the checkpoint, {value!r} requested"
    return f"corpus fingerprint {saved['corpus']} in the checkpoint, {wanted['corpus']} here (another Python version?)"


@contextmanager
def _progress(enabled: bool, total: int, done: int):
    """yields update(step, loss_bits) -> None; a rich bar with loss and ETA on a terminal."""
    if not (enabled and sys.stderr.isatty()):
        yield lambda step, loss: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("train"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]} bpb"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        transient=True,
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("train", total=total, completed=done, loss="-")

        def update(step, loss):
            bar.update(task, completed=step, loss=f"{loss:.3f}")

        yield update


def memory_bytes(model: ModelConfig, cfg: TrainConfig) -> int:
    """Bytes a training step holds at once (float32), estimated before anything is allocated:
    the parameters with their gradients, AdamW moments, update and checkpoint copy (8 P for P
    parameters); the activations the backward pass keeps for a batch of B sequences of N
    bytes through T blocks of width D and H heads (per block and sequence 24 N D for the
    normed inputs, q, k, v, outputs and the 4D-wide MLP, 6 H N^2 for the content logits, biased
    logits, softmax and their cotangents; measured peak resident 1.13 GiB against 1.26 GiB
    estimated for T = 2, H = 4, D = 128, N = 256, B = 32), the logits with their softmax and cotangent (3 B N 256); one
    evaluation batch (EVAL_BATCH sequences, one block live at a time); plus XLA's own
    ``posbias.fit.profile.XLA_OVERHEAD``."""
    from posbias.fit.profile import XLA_OVERHEAD

    t, h, d, n, b = model.layers, model.heads, model.width, model.context, cfg.batch
    f = model.mlp_ratio * d
    params = 2 * 256 * d + 2 * d + t * (4 * d * d + 2 * d * f + f + 5 * d)
    per_block = 24 * n * d + 6 * h * n * n
    floats = 8 * params + b * t * per_block + 3 * b * n * 256 + EVAL_BATCH * (per_block + 3 * n * 256) + h * n * n
    return XLA_OVERHEAD + 4 * floats


def train(
    model: ModelConfig,
    cfg: TrainConfig,
    out: Path,
    *,
    checkpoint_every: int | None = None,
    progress: bool = False,
    log=None,
) -> TrainResult:
    """Train (or resume) the run in folder ``out``; see the module docstring.

    A folder holding a checkpoint of the same model, recipe and corpus resumes from it; one
    of another run is refused (UserError) before anything is written. The memory estimate
    (``memory_bytes``) is checked first; the folder is created only then, and held under an
    exclusive lock (posbias.io.files) for the whole run: a second ``posbias train`` into it is
    refused. A non-finite loss or parameter stops training (UserError) without writing a
    checkpoint of it; a run started by this call that fails so is removed again (folder
    included, when this call created it), a resumed one keeps its last finite checkpoint."""
    import json

    from posbias.io import files
    from posbias.numerics import budget

    every = checkpoint_every or cfg.eval_every
    if every < 1:
        raise UserError(f"--checkpoint-every: expected a positive integer, got {every}")
    out = Path(out)
    if str(out).strip() == "":
        raise UserError("--out: expected a folder name, got an empty string")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    corpus = load_corpus()
    if corpus.train.size < model.context + 2 or corpus.validation.size < model.context + 2:
        raise UserError(
            f"context {model.context} is longer than the corpus splits allow "
            f"(train {corpus.train.size}, validation {corpus.validation.size} bytes)"
        )
    reason = budget.check(
        f"training T = {model.layers}, H = {model.heads}, D = {model.width}, context "
        f"{model.context}, batch {cfg.batch}",
        memory_bytes(model, cfg),
    )
    if reason is not None:
        raise UserError(reason)
    wanted = _identity(model, cfg, corpus.fingerprint)
    emit = log or (lambda line: print(line, file=sys.stderr))
    written: list[Path] = []
    saved = None
    with files.exclusive_folder(out):
        try:
            if (out / ckpt.CHECKPOINT).exists():
                saved = ckpt.load(out / ckpt.CHECKPOINT)
                have = {
                    "model": saved.model.to_dict(),
                    "train": saved.train.to_dict(),
                    "corpus": saved.meta.get("corpus"),
                }
                if have != wanted:
                    raise UserError(
                        f"--out {out}: holds a checkpoint of another run "
                        f"({_first_difference(have, wanted)}); use another --out"
                    )
            import jax

            with jax.enable_x64(False):
                try:
                    return _run(model, cfg, out, corpus, wanted, saved, every, progress, emit, json, written)
                except OSError as exc:
                    raise UserError(f"--out {out}: cannot write ({getattr(exc, 'strerror', None) or exc})") from None
        except Exception:
            if saved is None:  # a run this call started leaves nothing (exclusive_folder removes the empty folder)
                for path in written:
                    path.unlink(missing_ok=True)
            raise


def _run(  # noqa: C901 (split the resume step; issue 20 §4)
    model,
    cfg,
    out,
    corpus,
    wanted,
    saved,
    every,
    progress,
    emit,
    json,
    written,
):
    import jax
    import jax.numpy as jnp
    import optax

    from posbias.lm.model import flatten, init_params, loss_nats, unflatten

    opt = optimizer(cfg)
    params = init_params(model, jax.random.PRNGKey(cfg.seed))
    state = opt.init(params)
    start, history, wall_before = 0, [], 0.0
    if saved is not None:
        params = unflatten({k: jnp.asarray(v, jnp.float32) for k, v in saved.params.items()})
        leaves, treedef = jax.tree_util.tree_flatten(state)
        if len(leaves) != len(saved.opt_leaves) or any(
            np.shape(a) != np.shape(b) for a, b in zip(leaves, saved.opt_leaves)
        ):
            raise UserError(f"{out / ckpt.CHECKPOINT}: optimiser state does not match the recipe")
        state = jax.tree_util.tree_unflatten(
            treedef, [jnp.asarray(v, a.dtype) for a, v in zip(leaves, saved.opt_leaves)]
        )
        start, history = saved.step, list(saved.meta.get("history", []))
        wall_before = float(saved.meta.get("wall_s", 0.0))

    @jax.jit
    def step_fn(params, state, batch):
        loss, grads = jax.value_and_grad(loss_nats)(params, batch, model)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes its int32 step count with floats
            updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    @jax.jit
    def eval_fn(params, batch):  # (B,) mean loss (nats) of each window
        return jax.vmap(lambda w: loss_nats(params, w[None], model))(batch)

    length = model.context + 1
    val_windows = eval_windows(corpus.validation, length)
    train_windows = heldout_sequences(corpus.train, length, len(val_windows))

    def bits(params, windows):
        """Mean bits per predicted byte over ``windows`` (every window predicts length - 1 bytes)."""
        losses = []
        for i in range(0, len(windows), EVAL_BATCH):  # equal-size batches (one compile): the last is padded
            chunk = windows[i : i + EVAL_BATCH]
            batch = np.concatenate([chunk, np.repeat(chunk[:1], EVAL_BATCH - len(chunk), axis=0)])
            losses.append(np.asarray(eval_fn(params, jnp.asarray(batch)))[: len(chunk)])
        return float(np.concatenate(losses).mean()) / LN2

    meta_base = {
        **wanted,
        "corpus_topics": {"train": len(corpus.train_topics), "validation": list(corpus.validation_topics)},
        "python": sys.version.split()[0],
    }
    if saved is None:
        written.append(ckpt.save_config(out, meta_base))
    clock = time.perf_counter()
    running, seen = [], 0

    def diverged(step, what):
        kept = (
            f"the checkpoint of step {saved.step} is kept"
            if saved is not None
            else f"nothing of the run is kept in {out}"
        )
        return UserError(
            f"training diverged: {what} at step {step} of {cfg.steps} (--lr {cfg.lr:g} too large?); "
            f"no checkpoint of it was written, {kept}"
        )

    def save(step):
        flat = {k: np.asarray(v) for k, v in flatten(params).items()}
        leaves = [np.asarray(v) for v in jax.tree_util.tree_leaves(state)]
        if not all(np.all(np.isfinite(v)) for v in [*flat.values(), *leaves]):
            raise diverged(step, "non-finite parameters")
        meta = {**meta_base, "step": step, "history": history, "wall_s": wall_before + time.perf_counter() - clock}
        path = ckpt.save(out, meta, flat, leaves)
        if path not in written:
            written.append(path)

    with _progress(progress, cfg.steps, start) as update:
        for s in range(start, cfg.steps):
            batch = jnp.asarray(train_batch(corpus.train, cfg.batch, length, cfg.seed, s))
            params, state, loss = step_fn(params, state, batch)
            running.append(float(loss) / LN2)
            if not math.isfinite(running[-1]):
                raise diverged(s + 1, f"the training loss is {running[-1]}")
            seen += 1
            update(s + 1, running[-1])
            done = s + 1
            if done % cfg.eval_every == 0 or done == cfg.steps:
                val = bits(params, val_windows)
                if not math.isfinite(val):
                    raise diverged(done, f"the validation loss is {val}")
                history.append({"step": done, "train_loss_bpb": float(np.mean(running)), "val_bpb": val})
                emit(
                    f"step {done}/{cfg.steps}  train loss {np.mean(running):.4f} bpb  validation {val:.4f} bpb  "
                    f"{wall_before + time.perf_counter() - clock:.0f} s"
                )
                running = []
            if done % every == 0 or done == cfg.steps:
                save(done)
    wall = wall_before + time.perf_counter() - clock
    this_call = time.perf_counter() - clock
    train_bpb = bits(params, train_windows)
    val_bpb = history[-1]["val_bpb"] if history and history[-1]["step"] == cfg.steps else bits(params, val_windows)
    if not (math.isfinite(train_bpb) and math.isfinite(val_bpb)):
        raise diverged(cfg.steps, f"the final loss is {train_bpb} (train), {val_bpb} (validation)")
    unigram = unigram_bits(corpus.train, corpus.validation)
    tokens_per_s = seen * cfg.batch * model.context / this_call if seen else 0.0
    summary = {
        **meta_base,
        "steps": cfg.steps,
        "train_bpb": train_bpb,
        "val_bpb": val_bpb,
        "unigram_val_bpb": unigram,
        "wall_s": wall,
        "tokens_per_s_last_session": tokens_per_s,
        "train_bytes": int(corpus.train.size),
        "validation_bytes": int(corpus.validation.size),
        "history": history,
    }
    target = out / SUMMARY
    text = json.dumps(summary, indent=1, allow_nan=False) + "\n"
    ckpt.atomic_write_bytes(target, lambda f: f.write(text.encode("utf-8")))
    written.append(target)
    return TrainResult(
        train_bpb,
        val_bpb,
        unigram,
        cfg.steps,
        seen,
        wall,
        tokens_per_s,
        start,
        (out / ckpt.CHECKPOINT, out / ckpt.CONFIG, target),
        tuple(history),
    )
