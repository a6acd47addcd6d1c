"""sim_train / sim_infer: backends whose only behaviour is how long they take.

Why they exist: the scheduling questions of asynchronous RL (how much does generation
overlap training, is the staleness bound kept, does validation pause prefetch, does a
failure surface) depend on latencies, not on what the model computes. These backends let
a benchmark set generation to G seconds per batch and training to T seconds per step
exactly, and let tests randomise latencies or inject a failure, while every other part of
the pipeline (Ray actors, prefetch, rewards, ledger, metrics) is the real one.

They learn nothing: responses are uniformly random tokens with log-prob −log(V), drawn from
the request's seed and the weights actor_infer holds (sim_train's weights are its count of
train steps), so a run that syncs other weights than another run generates other responses,
as a real model would.

strategy_config keys (all optional):
  seconds_per_prompt   generation latency per prompt (G = this × prompts per batch)
  seconds_per_step     training latency per train_step (T)
  jitter               latencies are scaled by uniform(1 − jitter, 1 + jitter), seeded
  fail_at_call         raise on the N-th generate / train_step call (0 = never)
  nan_at_call          sim_train: the N-th train_step's loss is NaN, stopped by the update
                       loop's divergence check (train_loop.check_finite) as a real one is
  hang_at_call         on the N-th call, wait forever without progress (0 = never): a
                       stalled worker, for the liveness checks (platform/liveness.py)

While they wait they report progress (a tick every 50 ms), as a real backend does per
micro-batch or token, so a long but progressing call is told apart from a stalled one.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from flywheel.config.schema import WorkerConfig
from flywheel.platform.liveness import tick
from flywheel.workers.batch import TokenBatch
from flywheel.workers.strategies.base import (
    Generation,
    InferStrategy,
    SamplingParams,
)
from flywheel.workers.strategies.train_loop import build_schedule, check_finite

KNOBS = {"seconds_per_prompt": 0.0, "seconds_per_step": 0.0, "jitter": 0.0, "fail_at_call": 0,
         "hang_at_call": 0, "nan_at_call": 0}
TICK_S = 0.05


class SimulatedFailure(RuntimeError):
    pass


class _Latency:
    def __init__(self, cfg: WorkerConfig, seed: int):
        unknown = set(cfg.strategy_args.strategy_config) - set(KNOBS)
        if unknown:
            raise ValueError(f"strategy_config: unknown key(s) {sorted(unknown)} for "
                             f"'{cfg.strategy_args.strategy_name}'; known: {sorted(KNOBS)}")
        self.knobs = {**KNOBS, **cfg.strategy_args.strategy_config}
        self.rng = random.Random(seed)
        self.calls = 0

    def spend(self, seconds: float, what: str) -> None:
        self.calls += 1
        if self.calls == self.knobs["fail_at_call"]:
            raise SimulatedFailure(f"injected failure in {what} (call {self.calls})")
        if self.calls == self.knobs["hang_at_call"]:
            while True:  # stalled: no progress, ever
                time.sleep(3600)
        jitter = self.knobs["jitter"]
        end = time.monotonic() + seconds * self.rng.uniform(1 - jitter, 1 + jitter)
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(TICK_S, left))
            tick()


def vocabulary(model_path: str) -> tuple[int, int | None]:
    """The tokenizer's size (added tokens included, as len() of transformers' tokenizer)
    and its eos id, read with the `tokenizers` library from tokenizer.json: these backends
    need nothing else from the tokenizer, and transformers' AutoTokenizer would cost a
    latency-only worker seconds of import at every start. A model without tokenizer.json
    (a slow tokenizer only) goes through transformers."""
    path = Path(model_path)
    if not (path / "tokenizer.json").is_file():
        from flywheel.workers.strategies.hf_model import load_tokenizer

        tokenizer = load_tokenizer(model_path)
        return len(tokenizer), tokenizer.eos_token_id
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    config_file = path / "tokenizer_config.json"
    eos = json.loads(config_file.read_text()).get("eos_token") if config_file.is_file() else None
    if isinstance(eos, dict):  # an AddedToken written out
        eos = eos.get("content")
    return (tokenizer.get_vocab_size(with_added_tokens=True),
            tokenizer.token_to_id(eos) if eos else None)


class SimInferStrategy(InferStrategy):
    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int,
                 context_length: int | None = None,  # no model: nothing to bound
                 sleep_mode: bool = False):  # nor to free (InferStrategy.sleep)
        self.vocab, self.eos_id = vocabulary(model_path)
        self.latency = _Latency(cfg, seed)
        self.weights_steps = 0  # the train steps in the weights synced last

    def generate(self, prompts: list[list[int]], sampling: SamplingParams,
                 images: list | None = None) -> list[Generation]:
        if images is not None and any(images):
            raise ValueError("latency_sim: takes no image inputs (image prompts run on hf_infer)")
        self.latency.spend(self.latency.knobs["seconds_per_prompt"] * len(prompts), "generate")
        rng = random.Random(f"{sampling.seed}/{self.weights_steps}")
        lp = -math.log(self.vocab)
        out = []
        for i in range(len(prompts)):
            for _ in range(sampling.n):
                ids = [rng.randrange(4, self.vocab)
                       for _ in range(rng.randint(1, sampling.max_new_tokens))]
                reason = "length" if len(ids) == sampling.max_new_tokens else "stop"
                if reason == "stop":
                    ids[-1] = self.eos_id
                out.append(Generation(i, ids, [lp] * len(ids), reason))
        return out

    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int) -> None:
        self.weights_steps = int(named_tensors.get("steps", 0))  # sim_train's only "weight"

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return _uniform_logprobs(batch, self.vocab)


class SimTrainStrategy:
    """Time spent as a train call, nothing learned. Not a `TrainStrategy`: it has no model,
    so it has nothing to run the update loop on; it answers the calls a train role gets."""

    def __init__(self, model_path: str, cfg: WorkerConfig, seed: int, total_steps: int,
                 trainable: bool = True, head: object = None):
        self.vocab, _ = vocabulary(model_path)
        self.latency = _Latency(cfg, seed)
        self.steps = 0
        # the learning-rate curve a real backend would follow (one optimizer step per
        # train step), reported as actor/lr: the schedule's horizon is the loop's to keep
        self.horizon, self.args = total_steps, cfg.training_args
        self.optimizer, self.scheduler = self._schedule_after(0)

    def forward_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return _uniform_logprobs(batch, self.vocab)

    def fuses_old_logprobs(self, rows: int, ppo_epochs: int) -> bool:
        """No: the old log-probs come from `forward_logprobs`, as the tests expect them
        (TrainStrategy.fuses_old_logprobs)."""
        return False

    def train_step(self, batch: TokenBatch, loss_fn: object, ppo_epochs: int = 1) -> dict:
        self.latency.spend(self.latency.knobs["seconds_per_step"], "train_step")
        self.steps += 1
        self.optimizer.step()
        self.scheduler.step()
        metrics = {"pg/loss": 0.0, "actor/optimizer_steps": 1.0,
                   "actor/lr": self.scheduler.get_last_lr()[0]}
        if self.latency.calls == self.latency.knobs["nan_at_call"]:
            metrics["pg/loss"] = math.nan
        check_finite(metrics, optimizer_step=1)
        return metrics

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        return {"steps": torch.tensor(self.steps)}

    def weights_for_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        yield from self.state_dict_for_sync().items()

    def offload(self, part: str) -> str:  # TrainStrategy.offload: no model, nothing to move
        return "no-op: sim_train holds no model"

    def onload(self) -> str:
        return "no-op: sim_train holds no model"

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "sim_state.json"), "w") as f:
            json.dump({"steps": self.steps}, f)

    def load(self, path: str) -> None:
        with open(os.path.join(path, "sim_state.json")) as f:
            self.steps = json.load(f)["steps"]
        self.optimizer, self.scheduler = self._schedule_after(self.steps)

    def _schedule_after(self, steps: int):
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)],
                                    lr=self.args.learning_rate)
        scheduler = build_schedule(optimizer, self.args, self.horizon)
        for _ in range(steps):
            optimizer.step()
            scheduler.step()
        return optimizer, scheduler


def _uniform_logprobs(batch: TokenBatch, vocab: int) -> torch.Tensor:
    lp = torch.full(batch.input_ids.shape, -math.log(vocab))
    lp[:, 0] = 0.0
    return lp * batch.attention_mask
