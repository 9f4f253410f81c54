"""The ``folding`` context strategy: child windows opened by ``find <goal>`` and closed by
``return``, the tree of segments they make, the estimators along its paths, the scripted
oracle that demonstrates it, and the entry points run under it."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_strategies import by_rollout, trainable_runs

from cxsim.advantages import (
    cross_segment_gae,
    group_broadcast,
    stitched_gae,
    tokens_after,
)
from cxsim.agent_api import TurnRequest, TurnResponse
from cxsim.agents.chat import WordChatFormat
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.cli import main as cxsim
from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, PPOConfig
from cxsim.conformance import Checker
from cxsim.conformance.check import cases_for
from cxsim.conformance.pinned_batches import pinned_cases
from cxsim.conformance.quantities import GAE_QUANTITIES, QUANTITIES
from cxsim.conformance.quantities import reference_of as reference
from cxsim.conformance.random_batches import tree_cases
from cxsim.envs import vocabulary
from cxsim.estimators import ESTIMATORS, EstimatorInputs
from cxsim.ppo import score_batch
from cxsim.preflight import preflight
from cxsim.runtime import RolloutBatch, collect_rollouts, env_system_prompt
from cxsim.segment_trees import segment_chains
from cxsim.segments import Segment, pack_segments
from cxsim.strategies import STRATEGIES, ContextStrategy, ResponseMove, RowState, TurnState
from cxsim.strategies.folding import BRANCH_WORD, FOLDING, RETURN_WORD, Folding

FAMILIES = ("cxsim/KeyRecall-v0", "cxsim/FactUpdate-v0", "cxsim/SimRepo-v0")
REPO = "cxsim/SimRepo-v0"


@cache
def chat() -> WordChatFormat:
    return WordChatFormat(default_tokenizer())


@cache
def sized(env_id: str) -> CompactionConfig:
    """The pre-flight's sizes for folding on ``env_id`` (the oracle solves its tasks)."""
    return preflight(
        EnvConfig(env_id=env_id), replace(DEFAULT_COMPACTION, protocol="folding"), chat()
    )


def oracle_rollouts(env_id: str, config: CompactionConfig, seeds) -> RolloutBatch:
    agents = config.strategy.scripted_agents(env_id, chat(), config=config)
    kwargs = EnvConfig(env_id=env_id).kwargs  # the id's defaults, as the pre-flight's
    return collect_rollouts(env_id, kwargs, agents.actor, config, list(seeds), chat())


def system_prompt(env_id: str) -> str:
    import gymnasium as gym

    return env_system_prompt(gym.make(env_id))


# -- the strategy ----------------------------------------------------------------------------


def test_folding_is_registered_and_writes_words_every_tokenizer_holds():
    assert STRATEGIES["folding"] is FOLDING and CompactionConfig(protocol="folding").compacts
    words = set(FOLDING.words(CompactionConfig(protocol="folding")))
    assert {BRANCH_WORD, RETURN_WORD} <= words <= set(vocabulary())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_depth": 0}, r"^max_depth \(0\) must be an integer >= 1$"),
        ({"max_branches": -2}, r"^max_branches \(-2\) must be an integer >= 1$"),
        ({"max_depth": 1.5}, r"^max_depth \(1.5\) must be an integer >= 1$"),
    ],
)
def test_bad_bounds_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Folding(**kwargs)


# -- scripted folding episodes: budget, trainable tokens, the tree ---------------------------


@pytest.mark.parametrize("env_id", FAMILIES)
def test_contexts_fit_and_the_policys_tokens_are_trainable(env_id: str):
    """Every context within the budget; trainable exactly what the policy wrote: in windows,
    each response once (actions, the branching call, ``return``), after an assistant header
    and ended by the end token; in summary segments, the summary. Observations, the parent
    prefix a child or a continuation repeats and the returned turn are not trainable."""
    config = sized(env_id)
    batch = oracle_rollouts(env_id, config, range(8))
    header, end = chat().assistant_prefix(), chat().end_id
    q_sum = FOLDING.summary(config).prompt(chat())
    for rec in batch.records:
        assert rec.success and rec.branches == 1 and rec.peak_context <= config.budget
        segs = by_rollout(batch)[rec.rollout_id]
        assert all(len(s.token_ids) <= config.budget for s in segs)
        lines = rec.transcript.splitlines()
        responses = [x.removeprefix("[assistant] ") for x in lines if x.startswith("[assistant] ")]
        assert responses[0].split()[0] == BRANCH_WORD and RETURN_WORD in responses
        runs = [(s, r) for s in segs if s.role == "execution" for r in trainable_runs(s)]
        assert [chat().decode(tokens) for _, (_, tokens) in runs] == responses
        for seg, (start, tokens) in runs:
            assert seg.token_ids[start - len(header) : start] == header and tokens[-1] == end
        observations = [x.removeprefix("[observation] ") for x in lines if x.startswith("[obs")]
        for seg in segs:  # no observation token is trainable wherever it appears
            for obs in observations + rec.summaries:
                turn = chat().observation(obs)
                for t in range(len(seg.token_ids) - len(turn) + 1):
                    if seg.token_ids[t : t + len(turn)] == turn:
                        assert not any(seg.trainable[t : t + len(turn)])
        summaries = [s for s in segs if s.role == "summary"]
        assert [chat().decode(trainable_runs(s)[0][1]) for s in summaries] == rec.summaries
        for summary in summaries:  # the window it summarizes + q_sum, then the summary only
            window = segs[summary.parent]
            n = len(window.token_ids)
            assert summary.token_ids[: n + len(q_sum)] == window.token_ids + q_sum
            ((start, _),) = trainable_runs(summary)
            assert start == n + len(q_sum)


def test_the_tree_of_a_scripted_folding_episode():
    """SimRepo with room for every window: the root window ends with the branching call
    (segment 0); the child window (1) starts from (s) + (u) + that call and ends with
    ``return``; its summary (2) follows it; the root's continuation (3) repeats segment 0,
    gets the summary as the call's observation, then edits, re-tests and submits. Parents:
    1 and 3 both continue 0 (a tree), 2 continues 1; the root-to-leaf path is 0 -> 3."""
    config = replace(sized(REPO), budget=2000)
    batch = oracle_rollouts(REPO, config, [7])
    (rec,) = batch.records
    segs = batch.segments
    assert rec.success and rec.compactions == 0 and rec.branches == 1
    assert [(s.segment_index, s.parent, s.role) for s in segs] == [
        (0, -1, "execution"), (1, 0, "execution"), (2, 1, "summary"), (3, 0, "execution"),
    ]  # fmt: skip
    root, child, _, continuation = segs
    call = chat().decode(trainable_runs(root)[-1][1])
    assert call == f"{BRANCH_WORD} the bug" and root.token_ids[-1] == chat().end_id
    system = chat().system(system_prompt(REPO))
    task = chat().task(rec.transcript.splitlines()[1].removeprefix("[task] "))
    header = chat().assistant_prefix()
    prefix = system + task + header + chat().encode(call) + [chat().end_id]
    assert child.token_ids[: len(prefix)] == prefix and not any(child.trainable[: len(prefix)])
    acts = [chat().decode(t) for _, t in trainable_runs(child)]
    assert acts[:2] == ["ls", "run_tests"] and acts[2].startswith("view ")
    assert acts[3:] == ["patches", RETURN_WORD]
    returned = chat().observation(rec.summaries[0])
    n = len(root.token_ids)
    assert continuation.token_ids[: n + len(returned)] == root.token_ids + returned
    assert not any(continuation.trainable[: n + len(returned)])
    assert [chat().decode(t)[:4] for _, t in trainable_runs(continuation)] == [
        "edit",
        "run_",
        "subm",
    ]
    assert continuation.end == "terminated" and all(s.end == "none" for s in segs[:3])
    packed = pack_segments(segs)
    assert packed.parent_index.tolist() == [-1, 0, 1, 0]
    chains = segment_chains(packed.rollout_id, packed.segment_index, packed.parent_index)
    assert chains[0] == chains[3] == packed.rollout_id[0] and chains[1] == chains[2] != chains[0]
    # the trainer scores the tree along its paths: the root's last token (the call) is one
    # continuation token (+ 0) from its path's end, the child's summary ends its own path
    cfg = PPOConfig(whiten=False, gamma=1.0, lam=0.5, lambda_scope="fixed")
    scored, _ = score_batch(packed, None, cfg)
    n_k = int(packed.trainable[3].sum())
    assert scored.advantages[0][packed.trainable[0]][-1] == 0.5**n_k
    assert scored.advantages[2][packed.trainable[2]][-1] == 1.0
    assert scored.advantages[1][packed.trainable[1]][-1] == 0.5 ** int(packed.trainable[2].sum())


def test_a_child_window_that_fills_is_compacted_and_still_returns():
    """At the pre-flight's SimRepo sizes the child compacts (the threshold stays the hard
    fallback); each summary continues the window it summarizes, the continuation still
    continues the root."""
    config = sized(REPO)
    batch = oracle_rollouts(REPO, config, range(4))
    for rec in batch.records:
        segs = by_rollout(batch)[rec.rollout_id]
        assert rec.success and rec.compactions >= 1
        continuation = next(s for s in segs if s.parent == 0 and s.segment_index > 1)
        assert all(s.parent == s.segment_index - 1 for s in segs if s is not continuation)
        assert segs[1].parent == 0 and continuation.token_ids[: len(segs[0].token_ids)] == (
            segs[0].token_ids
        )


class Scripted:
    """Answers act requests with the given texts in turn (the last one repeated), and
    summary requests with a short summary; records the requests."""

    def __init__(self, *texts: str):
        self.texts, self.requests = list(texts), []

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        out = []
        for r in requests:
            self.requests.append(r)
            if r.kind == "act":
                text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
            else:
                text = "summary : the key is unknown ."
            ids = [*chat().encode(text), chat().end_id][: r.max_new_tokens]
            out.append(TurnResponse(ids, [0.0] * len(ids), chat().decode(ids), True))
        return out


deep_folding = Folding(max_depth=2, max_branches=3)
"""Folding with its bounds set, as a plug-in strategy (``module:name``)."""


def test_depth_and_branches_are_bounded_and_calls_beyond_reach_the_environment():
    """max_depth 2, max_branches 3: ``find`` opens windows two deep, ``return`` closes them;
    a ``find`` deeper or beyond the branches, and ``return`` in the root, are actions the
    environment gets."""
    config = CompactionConfig(
        protocol=f"{__name__}:deep_folding", budget=600, threshold=72, max_turns=9
    )
    agent = Scripted(
        "find the key", "find the key", "find the key", "return", "return", "find the key",
        "return", "return", "find the key",
    )  # fmt: skip
    batch = collect_rollouts("cxsim/KeyRecall-v0", {}, agent, config, [0], chat())
    (rec,) = batch.records
    depths = [r.depth for r in agent.requests if r.kind == "act"]
    # find, find (depth 2: a third would nest too deep), find refused, return, return (to 0),
    # find (the third branch), return, return refused (root), find refused (branches spent)
    assert depths == [0, 1, 2, 2, 1, 0, 1, 0, 0]
    assert rec.branches == 3 and rec.turns == 9 and rec.end_reason == "max_turns"
    observations = [x for x in rec.transcript.splitlines() if x.startswith("[observation] ")]
    assert len(observations) == 3  # the three refused calls went to the environment
    parents = [(s.segment_index, s.parent, s.role) for s in batch.segments]
    assert parents[:3] == [(0, -1, "execution"), (1, 0, "execution"), (2, 1, "execution")]
    assert all(len(s.token_ids) <= config.budget for s in batch.segments)


class Branching(RowState):
    """A row state that reads ``find ...`` as a branch but keeps no parent window."""

    def response_move(self, chat, text, turn):
        return ResponseMove("branch" if text.startswith(BRANCH_WORD) else "act")


class BranchWithoutParents(ContextStrategy):
    name = "branch-without-parents"

    def row_state(self, config):
        return Branching(config)


branch_without_parents = BranchWithoutParents()


def test_a_branch_whose_row_state_keeps_no_parent_fails_in_one_line():
    """The runtime sets a parent window aside only in the strategy's own row state."""
    config = CompactionConfig(
        protocol=f"{__name__}:branch_without_parents", budget=600, threshold=72
    )
    with pytest.raises(ValueError, match="opened a child window but its row_state keeps no ") as e:
        collect_rollouts("cxsim/KeyRecall-v0", {}, Scripted("find the key"), config, [0], chat())
    assert "\n" not in str(e.value)


def test_a_branch_without_room_for_the_returned_turn_is_not_honoured():
    config = CompactionConfig(protocol="folding", budget=200, threshold=72)
    reserve = config.summary_reserve(chat())
    room = len(chat().observation("")) + config.max_summary_tokens
    fits = 200 - reserve - room  # the longest window after which a return still fits

    def move(text: str, length: int, depth: int = 0) -> str:
        row = FOLDING.row_state(config)
        for _ in range(depth):
            row.branch(None)  # a parent window set aside
        return row.response_move(chat(), text, TurnState(length, 0, 0, row=row)).kind

    assert move("find x", fits) == "branch"
    assert move("find x", fits + 1) == "act"
    assert move("return", 10) == "act"
    assert move("return", 10, depth=1) == "return"
    assert move("next", 10) == "act"


# -- estimators on a tree ---------------------------------------------------------------------


def three_segment_tree(values: list[list[float]] | None = None):
    """Root r (segment 0, 2 trainable tokens), child c (segment 1, parent 0, 3 tokens),
    continuation k (segment 2, parent 0, 1 token); one untrainable prompt token first in
    each row and an untrainable observation between r's tokens. Rows shuffled (k, r, c)."""
    layout = {  # segment -> (parent, trainable mask)
        0: (-1, [False, True, False, True]),
        1: (0, [False, True, True, True]),
        2: (0, [False, True, False, False]),
    }
    rows = [2, 0, 1]
    trainable = torch.tensor([layout[s][1] for s in rows])
    vals = torch.zeros(trainable.shape)
    if values is not None:
        for row, s in enumerate(rows):
            vals[row, trainable[row]] = torch.tensor(values[s])
    return dict(
        values=vals,
        trainable=trainable,
        rewards=torch.ones(3),
        rollout_id=torch.zeros(3, dtype=torch.long),
        segment_index=torch.tensor(rows),
        parent_index=torch.tensor([layout[s][0] for s in rows]),
    )


def test_cross_segment_advantages_on_a_three_segment_tree_by_hand():
    """gamma = 1, lambda = 0.5 (q = 0.5), R = 1.

    Paths: r's latest child is k (segment 2 > 1), so path(r) = (r, k) and N_>r = n_k = 1;
    the child's path is (c) alone, N_>c = 0; N_>k = 0. (As a chain, N_>r would be 4.)

    Zero values: token i of s gets R q^(N_>s + n_s - i):
      r: q^(1+2-1) = 0.25, q^(1+2-2) = 0.5;  c: q^2, q^1, q^0 = 0.25, 0.5, 1;  k: q^0 = 1.

    Values r = (0.2, 0.4), c = (0.1, 0.3, 0.5), k = (0.6): local GAE, then q^N_>s.
      r: delta = (0.4 - 0.2, 1 - 0.4) = (0.2, 0.6); A_loc = (0.2 + 0.5 * 0.6, 0.6) = (0.5, 0.6);
         times q^1: (0.25, 0.3).
      c: delta = (0.2, 0.2, 0.5); A_loc = (0.2 + 0.5 * 0.45, 0.2 + 0.5 * 0.5, 0.5)
         = (0.425, 0.45, 0.5); times q^0.
      k: 1 - 0.6 = 0.4.
    Stitched along the paths (r, k) and (c): r's last token bootstraps from k's value:
      delta = (0.4 - 0.2, 0.6 - 0.4, 1 - 0.6) = (0.2, 0.2, 0.4); A = (0.4, 0.4, 0.4); c as local.
    """
    x = three_segment_tree()
    args = (x["values"], x["trainable"], x["rewards"], x["rollout_id"], x["segment_index"])
    tree = cross_segment_gae(*args, gamma=1.0, lam=0.5, parent_index=x["parent_index"])
    expected = {2: [0, 1.0, 0, 0], 0: [0, 0.25, 0, 0.5], 1: [0, 0.25, 0.5, 1.0]}
    assert tree.tolist() == [expected[s] for s in (2, 0, 1)]
    assert torch.equal(stitched_gae(*args, 1.0, 0.5, parent_index=x["parent_index"]), tree)
    after = tokens_after(x["trainable"], x["rollout_id"], x["segment_index"],
                         parent_index=x["parent_index"])  # fmt: skip
    assert after.tolist() == [0, 1, 0]  # rows k, r, c
    chain = cross_segment_gae(*args, gamma=1.0, lam=0.5)  # the same rows read as a chain
    assert chain[1].tolist() == [0, 0.5**5, 0, 0.5**4]

    y = three_segment_tree([[0.2, 0.4], [0.1, 0.3, 0.5], [0.6]])
    args = (y["values"], y["trainable"], y["rewards"], y["rollout_id"], y["segment_index"])
    cross = cross_segment_gae(*args, gamma=1.0, lam=0.5, parent_index=y["parent_index"])
    expected = {2: [0, 0.4, 0, 0], 0: [0, 0.25, 0, 0.3], 1: [0, 0.425, 0.45, 0.5]}
    torch.testing.assert_close(cross, torch.tensor([expected[s] for s in (2, 0, 1)]))
    stitched = stitched_gae(*args, 1.0, 0.5, parent_index=y["parent_index"])
    expected = {2: [0, 0.4, 0, 0], 0: [0, 0.4, 0, 0.4], 1: [0, 0.425, 0.45, 0.5]}
    torch.testing.assert_close(stitched, torch.tensor([expected[s] for s in (2, 0, 1)]))


def test_the_estimator_registry_passes_the_tree_and_group_broadcast_ignores_it():
    x = three_segment_tree([[0.2, 0.4], [0.1, 0.3, 0.5], [0.6]])
    inputs = EstimatorInputs(
        values=x["values"], mask=x["trainable"], rewards=x["rewards"],
        step_rewards=torch.zeros(x["values"].shape), rollout_id=x["rollout_id"],
        segment_index=x["segment_index"], group_id=torch.zeros(3, dtype=torch.long), gamma=1.0,
        lam=0.5, parent_index=x["parent_index"],
    )  # fmt: skip
    args = (x["values"], x["trainable"], x["rewards"], x["rollout_id"], x["segment_index"], 1.0)
    for name, estimator in (("cross-segment", cross_segment_gae), ("stitched", stitched_gae)):
        direct = estimator(*args, 0.5, parent_index=x["parent_index"])
        assert torch.equal(ESTIMATORS[name].advantages(inputs), direct)
        assert not torch.equal(
            ESTIMATORS[name].advantages(replace(inputs, parent_index=None)), direct
        )
    broadcast = ESTIMATORS["group-broadcast"].advantages(inputs)
    assert torch.equal(broadcast, group_broadcast(x["rewards"], x["trainable"], x["rollout_id"],
                                                  torch.zeros(3, dtype=torch.long)))  # fmt: skip


def random_batch(rng: random.Random, rollouts: int, tree: bool):
    """Random rollouts of 1-6 segments; on a tree each segment's parent is any earlier one."""
    segs = []
    for r in range(rollouts):
        for k in range(rng.randint(1, 6)):
            n = rng.randint(2, 7)
            mask = [False] + [rng.random() < 0.6 for _ in range(n - 1)]
            parent = rng.randint(0, k - 1) if tree and k else k - 1
            segs.append((r, k, parent, mask))
    rng.shuffle(segs)
    width = max(len(m) for *_, m in segs)
    trainable = torch.tensor([m + [False] * (width - len(m)) for *_, m in segs])
    generator = torch.Generator().manual_seed(rng.randint(0, 10**6))
    values = torch.randn(trainable.shape, generator=generator)
    return dict(
        values=values, trainable=trainable,
        rewards=torch.tensor([float(r % 2) for r, *_ in segs]),
        rollout_id=torch.tensor([r for r, *_ in segs]),
        segment_index=torch.tensor([k for _, k, *_ in segs]),
        parent_index=torch.tensor([p for _, _, p, _ in segs]),
    )  # fmt: skip


def test_chains_are_read_exactly_as_before_and_trees_keep_cross_equal_to_stitched():
    """Parents ``segment_index - 1`` give bit-identical advantages to no parents; on random
    trees cross-segment equals stitched at zero values, as on chains."""
    rng = random.Random(3)
    for _ in range(20):
        x = random_batch(rng, rollouts=4, tree=False)
        args = (x["values"], x["trainable"], x["rewards"], x["rollout_id"], x["segment_index"])
        for estimator in (cross_segment_gae, stitched_gae):
            plain = estimator(*args, 0.9, 0.7)
            assert torch.equal(estimator(*args, 0.9, 0.7, parent_index=x["parent_index"]), plain)
        y = random_batch(rng, rollouts=4, tree=True)
        zero = torch.zeros(y["values"].shape)
        args = (zero, y["trainable"], y["rewards"], y["rollout_id"], y["segment_index"])
        cross = cross_segment_gae(*args, 0.97, 0.8, parent_index=y["parent_index"])
        stitched = stitched_gae(*args, 0.97, 0.8, parent_index=y["parent_index"])
        torch.testing.assert_close(cross, stitched)


@pytest.mark.parametrize(
    ("parents", "message"),
    [
        ([-1, 0, 5], r"parent < segment_index\) of the same rollout, present in the batch$"),
        ([-1, 2, 0], r"parent < segment_index"),
        ([-1, -1, 0], r"^parent_index: every rollout needs exactly one segment with parent -1$"),
    ],
)
def test_a_bad_tree_is_a_one_line_error(parents, message):
    x = three_segment_tree()
    x["segment_index"] = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match=message):
        cross_segment_gae(x["values"], x["trainable"], x["rewards"], x["rollout_id"],
                          x["segment_index"], 1.0, 0.5, parent_index=torch.tensor(parents))  # fmt: skip


def test_pack_segments_keeps_parents_only_for_trees():
    def seg(k: int, parent: int | None) -> Segment:
        return Segment("execution", [1, 2], [False, True], [0.0, -1.0], 0, k, parent=parent)

    assert pack_segments([seg(0, None), seg(1, None)]).parent_index is None
    assert pack_segments([seg(0, -1), seg(1, 0)]).parent_index is None  # a chain
    tree = pack_segments([seg(0, -1), seg(1, 0), seg(2, 0)])
    assert tree.parent_index.tolist() == [-1, 0, 0]
    assert tree.select([2, 0]).parent_index.tolist() == [0, -1]
    assert tree.to("cpu").parents.tolist() == [-1, 0, 0]
    assert pack_segments([seg(0, None), seg(1, None)]).parents.tolist() == [-1, 0]
    with pytest.raises(ValueError, match=r"names parent 1, which is not in the list"):
        pack_segments([seg(0, -1), seg(2, 1), seg(3, 0)])
    with pytest.raises(ValueError, match=r"^parent \(3\) must be -1 or the index of an earlier"):
        seg(2, 3)


# -- the oracle at the pre-flight's sizes, and the entry points -------------------------------


@pytest.mark.parametrize("env_id", FAMILIES)
def test_the_oracle_solves_every_family_at_the_preflight_sizes(env_id: str):
    """Pass@1 of the folding oracle on 32 tasks past the sizing and pre-flight seeds."""
    config = sized(env_id)
    batch = oracle_rollouts(env_id, config, range(1000, 1032))
    assert sum(r.success for r in batch.records) == 32
    assert all(r.branches == 1 and r.peak_context <= config.budget for r in batch.records)


SMOKE_ENV = [
    "--env.env-id", "cxsim/KeyRecall-easy-v0",
    "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
    "num_values", "4",
]  # fmt: skip


def test_sft_then_train_under_folding(tmp_path: Path):
    """``cxsim sft`` clones the folding oracle's demonstrations (branch, act, return,
    summaries) and ``cxsim train`` trains on the tree-shaped rollouts, at the derived sizes."""
    common = [
        "--compaction.protocol",
        "folding",
        "--device",
        "cpu",
        *SMOKE_ENV,
        "--no-progress-bar",
    ]
    cxsim(["--quiet", "sft", "--run-dir", str(tmp_path / "sft"), *common, "--sft.episodes", "6",
           "--sft.epochs", "1", "--sft.heldout-episodes", "2", "--sft.omission-rate", "0"])  # fmt: skip
    sft = json.loads((tmp_path / "sft" / "results.json").read_text())
    demos, budget = sft["demonstrations"], sft["config"]["compaction"]["budget"]
    assert demos["charts/success_rate"] == 1.0 and demos["compaction/tokens_summarised"] > 0
    assert demos["compaction/peak_context_mean"] <= budget
    cxsim(["--quiet", "train", "--policy", str(tmp_path / "sft" / "policy"), "--run-dir",
           str(tmp_path / "train"), *common, "--ppo.rollouts-per-batch", "4", "--ppo.iterations",
           "1", "--ppo.critic-warmup", "1", "--ppo.minibatches", "1"])  # fmt: skip
    train = json.loads((tmp_path / "train" / "results.json").read_text())
    assert train["iterations_done"] == 2 and train["config"]["ppo"]["protocol"] == "folding"
    assert train["config"]["compaction"] == sft["config"]["compaction"]
    assert train["history"][-1]["charts/policy_tokens"] > 0


# -- the conformance check on segment trees --------------------------------------------------


def tree_estimator(name: str):
    def advantages(inputs: EstimatorInputs) -> torch.Tensor:
        return ESTIMATORS[name].advantages(inputs)

    return advantages


def chain_only_cross_segment(inputs: EstimatorInputs) -> torch.Tensor:
    """A cross-segment estimator that ignores the parents (every tree read as a chain)."""
    return ESTIMATORS["cross-segment"].advantages(replace(inputs, parent_index=None))


def test_the_pinned_tree_has_the_hand_checked_numbers():
    (case,) = [c for c in pinned_cases() if c.name == "pinned/tree"]
    batch = case.example
    expected = {0: [0.25, 0.5, 0.0], 1: [0.25, 0.5, 1.0], 2: [1.0, 0.0, 0.0]}
    got = reference(batch, "cross-segment-gae")
    for row, k in enumerate(batch.segment_index.tolist()):
        assert got[row].tolist() == expected[k]
    torch.testing.assert_close(reference(batch, "stitched-gae"), got)


def test_the_estimator_layout_checks_trees_and_names_a_chain_reading():
    """``cxsim conform`` in the estimator layout draws segment trees too: cxsim's estimators
    pass them; one that ignores the parents fails, its term named "the path"."""
    only = ("trees/fixed", "pinned/tree")
    for name, quantity in (("cross-segment", "cross-segment-gae"), ("stitched", "stitched-gae")):
        results = Checker(tree_estimator(name), quantity, "estimator").run(3, seed=2, only=only)
        assert [r.case.name for r in results] == list(only) and all(r.passed for r in results)
    wrong = Checker(chain_only_cross_segment, "cross-segment-gae", "estimator", shrink_seconds=0.5)
    results = wrong.run(10, seed=2, only=only)
    assert not any(r.passed for r in results)
    assert {r.failure.term for r in results} == {"the path"}
    plain = {c.name for c in cases_for("cross-segment-gae")}
    assert not any(n.startswith("trees/") or n == "pinned/tree" for n in plain)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of([c.strategy for c in tree_cases()]), st.sampled_from(GAE_QUANTITIES))
def test_the_diagnosis_model_follows_the_tree(batch, quantity):
    assert batch.parent_index is not None
    torch.testing.assert_close(
        QUANTITIES[quantity].model(batch, None, {}),
        reference(batch, quantity),
        rtol=1e-12,
        atol=1e-12,
    )
