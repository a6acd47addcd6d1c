"""An agent episode's training rows: one per call, or its continued calls packed into one.

An agent sends the whole conversation on every call, so call k+1's prompt repeats call
k's prompt and reply (token_ledger.py builds it that way: prompt(k+1) = prompt(k) +
completion(k) + the turn's close + the new turns' ids). One row per call trains the
same ids, but the model reads the shared prefix again in every row: an episode of c calls
costs ~c times the forward tokens of its last call.

`agent.rows: episode` (the default) packs instead: a call that continues a reply (the
ledger's `extends`) is appended to the row that ends with that reply, its new prompt ids
(the close and the turns after the reply: tool results, the user's messages) masked out of
the loss, its completion ids in the loss with their behaviour log-probs. The row is then
exactly the ledger's ids of the last call (prompt + completion); nothing is tokenized
here. What is not continued starts a row of its own: a segment's first call (after a
history rewrite), a reply's second continuation (the agent branched), the other choices
of an n > 1 call. An episode without rewrites or n > 1 is one row, as the built-in
agentic pipeline's.

The per-token terms are the same either way (a token's log-prob depends only on the ids
before it, and those are the same ids), so under loss_agg_mode token-mean or
seq-mean-token-sum the loss is the same number; under seq-mean-token-mean a packed
episode is one sequence (its tokens averaged together) where per call each call was one.
With a KL penalty in the reward (kl_coef > 0) a packed row's reward-to-go runs over the
episode's later calls too (the episode is the trajectory); per call it stops at the call's
end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flywheel.pipelines.agent.episodes import CallRow


@dataclass
class TrainRow:
    """prompt (no loss) + response; `generated[i]` says whether response[i] was sampled
    (a loss token, with its behaviour log-prob) or is the template's / the agent's."""

    prompt: list[int]
    response: list[int] = field(default_factory=list)
    generated: list[bool] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)  # 0.0 where not generated
    version: int = 0  # the oldest version among its calls
    calls: int = 0
    last_call: int = 0  # the index of its last call in the episode

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.response

    def add(self, ids: list[int], log_probs: list[float], version: int, call: int) -> None:
        """Append call `call`'s completion (sampled ids, in the loss)."""
        self.last_call = call
        self.response += ids
        self.generated += [True] * len(ids)
        self.log_probs += log_probs
        self.version = min(self.version, version) if self.calls else version
        self.calls += 1

    def add_context(self, ids: list[int]) -> None:
        """Append ids the model did not sample (out of the loss)."""
        self.response += ids
        self.generated += [False] * len(ids)
        self.log_probs += [0.0] * len(ids)


def call_rows(rows: list[CallRow]) -> list[TrainRow]:
    """One row per call choice."""
    out = []
    for r in rows:
        row = TrainRow(list(r.prompt_ids))
        row.add(list(r.token_ids), list(r.log_probs), r.version, r.call)
        out.append(row)
    return out


def episode_rows(rows: list[CallRow]) -> list[TrainRow]:
    """One episode's call rows (in call order), continued calls packed (module note)."""
    out: list[TrainRow] = []
    open_rows: dict[tuple[int, int], TrainRow] = {}  # (call, choice) a row ends with
    for r in rows:
        row = open_rows.pop(tuple(r.extends), None) if r.extends else None
        if row is not None and r.prompt_ids[:len(row.ids)] == row.ids:
            row.add_context(list(r.prompt_ids[len(row.ids):]))
        else:  # rendered whole, branched, or (never from the ledger) not a continuation
            row = TrainRow(list(r.prompt_ids))
            out.append(row)
        row.add(list(r.token_ids), list(r.log_probs), r.version, r.call)
        open_rows[(r.call, r.choice)] = row
    return out


ROWS = {"episode": episode_rows, "call": call_rows}  # agent.rows -> its rows
