"""The ``memory-notes`` context strategy: notes the policy keeps, carried with their step into
every rebuilt window within the budget, the credit a note the final answer uses gets (a leaf
segment of the rollout's tree), the scripted oracle that demonstrates it, and the entry
points run under it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from functools import cache
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from test_strategies import by_rollout, trainable_runs

from cxsim.advantages import cross_segment_gae, stitched_gae
from cxsim.agent_api import TurnRequest, TurnResponse
from cxsim.agents.chat import WordChatFormat
from cxsim.agents.scripted import ScriptedAgent
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.cli import main as cxsim
from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig
from cxsim.envs import vocabulary
from cxsim.preflight import preflight
from cxsim.runtime import RolloutBatch, collect_rollouts, env_system_prompt
from cxsim.segment_trees import segment_chains
from cxsim.segments import Segment, pack_segments
from cxsim.strategies import STRATEGIES, Note, TurnState
from cxsim.strategies.memory_notes import (
    LAST_NOTE_STEP,
    MEMORY_NOTES,
    NOTE_WORD,
    MemoryNotes,
    route_note_credit,
)

FAMILIES = ("cxsim/KeyRecall-v0", "cxsim/FactUpdate-v0", "cxsim/SimRepo-v0")
ANSWERED = FAMILIES[:2]
"""The families whose final action is an answer a note holds (SimRepo's is ``submit``)."""

one_note = MemoryNotes(max_notes=1)
"""A plug-in with room for one note per episode."""
ONE_NOTE = f"{__name__}:one_note"


@cache
def chat() -> WordChatFormat:
    return WordChatFormat(default_tokenizer())


@cache
def sized(env_id: str) -> CompactionConfig:
    """The pre-flight's sizes for memory-notes on ``env_id`` (the oracle solves its tasks)."""
    return preflight(
        EnvConfig(env_id=env_id), replace(DEFAULT_COMPACTION, protocol="memory-notes"), chat()
    )


def oracle_rollouts(env_id: str, config: CompactionConfig, seeds) -> RolloutBatch:
    agents = config.strategy.scripted_agents(env_id, chat(), config=config)
    kwargs = EnvConfig(env_id=env_id).kwargs  # the id's defaults, as the pre-flight's
    return collect_rollouts(env_id, kwargs, agents.actor, config, list(seeds), chat())


def notes_at_each_compaction(transcript: str) -> list[list[str]]:
    """From a transcript: before each summary, the notes kept so far as a rebuilt window
    carries them (``note <environment steps before it> : <words>``)."""
    notes: list[str] = []
    steps, out = 0, []
    lines = transcript.splitlines()
    for line, after in zip(lines, [*lines[1:], ""], strict=True):
        kept = not after.startswith("[observation] ")  # else it reached the environment
        if line.startswith(f"[assistant] {NOTE_WORD} ") and kept:
            notes.append(f"{NOTE_WORD} {steps} : {line.removeprefix('[assistant] note ')}")
        elif line.startswith("[observation] "):
            steps += 1
        elif line.startswith("[summary "):
            out.append(list(notes))
    return out


def note_leaves(segs: list[Segment]) -> list[Segment]:
    """A rollout's note segments: leaves (no segment names them as parent) whose one
    trainable run is a note that ends the segment."""
    parents = {s.parent for s in segs}
    out = []
    for seg in segs:
        runs = trainable_runs(seg)
        if seg.segment_index in parents or len(runs) != 1:
            continue
        (start, tokens), n = runs[0], len(seg.token_ids)
        if chat().decode(tokens).startswith(f"{NOTE_WORD} ") and start + len(tokens) == n:
            out.append(seg)
    return out


# -- the strategy ----------------------------------------------------------------------------


def test_memory_notes_is_registered_and_writes_words_every_tokenizer_holds():
    assert STRATEGIES["memory-notes"] is MEMORY_NOTES
    config = CompactionConfig(protocol="memory-notes")
    assert config.compacts and config.summarizes and MEMORY_NOTES.summary_by == "policy"
    words = set(MEMORY_NOTES.words(config))
    assert {NOTE_WORD, ":", ";", "0", str(LAST_NOTE_STEP)} <= words <= set(vocabulary())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_notes": 0}, r"^max_notes \(0\) must be an integer >= 1$"),
        ({"max_note_tokens": -1}, r"^max_note_tokens \(-1\) must be an integer >= 1$"),
        ({"max_notes": 2.5}, r"^max_notes \(2.5\) must be an integer >= 1$"),
        ({"max_note_tokens": True}, r"^max_note_tokens \(True\) must be an integer >= 1$"),
    ],
)
def test_bad_bounds_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MemoryNotes(**kwargs)


def test_a_note_is_kept_within_its_bounds_only():
    config = CompactionConfig(protocol="memory-notes")

    def keeps(text: str, step: int, notes: int) -> str | None:
        row = MEMORY_NOTES.row_state(config)
        row.env_steps, row.notes = step, [Note("x", 0)] * notes
        move = row.response_move(chat(), text, TurnState(10, 0, 0, row=row))
        return move.note if move.kind == "note" else None

    assert keeps("note the key is k3", step=0, notes=0) == "the key is k3"
    assert keeps("note the key is k3", step=LAST_NOTE_STEP, notes=5) is not None
    assert keeps("note the key is k3", step=LAST_NOTE_STEP + 1, notes=0) is None
    assert keeps("note the key is k3", step=5, notes=6) is None  # max_notes
    six = "the key is now k5 ."
    assert keeps(f"note {six}", step=0, notes=0) == six
    assert keeps(f"note {six} k5", step=0, notes=0) is None  # 7 tokens
    for action in ("note", "answer k3", "a note says k3", ""):
        assert keeps(action, step=0, notes=0) is None


def test_a_budget_without_room_for_the_notes_is_a_one_line_error():
    """The smallest rebuilt window: the system prompt, the resume turn with a full summary and
    the notes' room (6 notes of 6 tokens: 6 x (tag + separator, 4, + 6) + the observation
    token = 61)."""
    system = "remember ."
    config = CompactionConfig(
        protocol="memory-notes", budget=200, threshold=72, max_response_tokens=8,
        max_summary_tokens=32,
    )  # fmt: skip
    count = lambda piece, *texts: len(getattr(chat(), piece)(*texts))  # noqa: E731
    assert MEMORY_NOTES.notes_room(config, count) == 61
    floor = MEMORY_NOTES.sizing(config, count).rebuilt_floor(len(chat().system(system)))
    compacted = replace(config, protocol="compacted").strategy.sizing(config, count)
    assert floor == compacted.rebuilt_floor(len(chat().system(system))) + 61
    MEMORY_NOTES.check(replace(config, budget=floor + 72), chat(), system)
    with pytest.raises(ValueError, match=r"too small for a rebuilt window with notes") as info:
        MEMORY_NOTES.check(replace(config, budget=floor + 71), chat(), system)
    assert "\n" not in str(info.value) and "raise --compaction.budget" in str(info.value)


# -- the oracle's episodes: budget, trainable tokens, notes carried with their step ----------


@pytest.mark.parametrize("env_id", FAMILIES)
def test_contexts_fit_and_notes_survive_compaction_with_their_step(env_id: str):
    """Every context within the budget. Trainable: each response once (notes included, in
    the segment where it was written or its note segment), after an assistant header and
    ended by the end token. Every rebuilt window carries, right after its prefix, exactly the
    notes kept so far, each tagged with the environment steps before it, untrainable."""
    config = sized(env_id)
    batch = oracle_rollouts(env_id, config, range(8))
    system = chat().system(env_system_prompt(gym.make(env_id)))
    header, end = chat().assistant_prefix(), chat().end_id
    carried = 0
    for rec in batch.records:
        assert rec.success and rec.peak_context <= config.budget
        segs = by_rollout(batch)[rec.rollout_id]
        assert all(len(s.token_ids) <= config.budget for s in segs)
        lines = rec.transcript.splitlines()
        responses = [x.removeprefix("[assistant] ") for x in lines if x.startswith("[assistant] ")]
        assert any(r.startswith(f"{NOTE_WORD} ") for r in responses)
        runs = [(s, r) for s in segs if s.role == "execution" for r in trainable_runs(s)]
        assert Counter(chat().decode(tokens) for _, (_, tokens) in runs) == Counter(responses)
        for seg, (start, tokens) in runs:
            assert seg.token_ids[start - len(header) : start] == header and tokens[-1] == end
        task = chat().task(lines[1].removeprefix("[task] "))
        carrying = notes_at_each_compaction(rec.transcript)
        assert len(carrying) == len(rec.summaries) == rec.compactions
        summaries_before = 0
        for seg in segs:  # the segments of window k + 1 come after the k-th summary segment
            if seg.role == "summary":
                summaries_before += 1
                continue
            if summaries_before == 0:
                continue
            summary, notes = rec.summaries[summaries_before - 1], carrying[summaries_before - 1]
            prefix = MEMORY_NOTES.rebuild(config).prefix(chat(), system, task, summary)
            block = chat().observation(" ; ".join(notes)) if notes else []
            end_of_block = len(prefix) + len(block)
            assert seg.token_ids[:end_of_block] == prefix + block
            assert not any(seg.trainable[:end_of_block])  # the copies are never trained
            assert seg.token_ids[end_of_block : end_of_block + len(header)] == header
            carried += len(notes)
    assert carried > 0  # the episodes compact after their first note


# -- the credit of a used note ------------------------------------------------------------------


def hand_rollout() -> tuple[list[Segment], list[Note]]:
    """A window w (segment 0) with a used note (tokens 3-5: ``note the key is k3``, folded into
    3 tokens here), an action (7-8) and an unused note (11-13); its summary (segment 1); the
    last window (segment 2), whose final action ``answer k3`` ends the episode."""
    S, U, H, E, OBS, Q = 1, 2, 3, 4, 5, 6  # system, task, header, end, observation, q_sum
    window = [S, U, H, 10, 11, E, H, 12, E, OBS, H, 10, 13, E]
    on = [t in (3, 4, 5, 7, 8, 11, 12, 13) for t in range(14)]
    steps = [0.0] * 14
    steps[8] = 0.5  # the action's step reward, at its last token
    segments = [
        Segment("execution", window, on, [-0.1 * t if on[t] else 0.0 for t in range(14)],
                rollout_id=7, segment_index=0, step_rewards=steps, parent=-1),
        Segment("summary", [*window, Q, 20, E], [False] * 15 + [True, True], [0.0] * 17,
                rollout_id=7, segment_index=1, parent=0),
        Segment("execution", [S, 21, 20, E, H, 14, 11, E], [False] * 5 + [True] * 3, [0.0] * 8,
                rollout_id=7, segment_index=2, parent=1),
    ]  # fmt: skip
    notes = [
        Note("the key is k3", step=0, segment=0, start=3, end=6),
        Note("the gate is k5", step=1, segment=0, start=11, end=14),
    ]
    return segments, notes


def test_a_used_note_becomes_a_leaf_by_hand():
    """``answer k3`` uses the first note (k3), not the second (k5). w becomes its head (tokens
    0-2, nothing trainable, w's parent -1), the note segment (tokens 0-5, trainable 3-5, parent
    the head), the rest (all of w, trainable 7-8 and the unused note 11-13, parent the head);
    the summary now continues from the rest."""
    segments, notes = hand_rollout()
    out = route_note_credit([replace(s) for s in segments], notes, "answer k3")
    assert [s.segment_index for s in out] == [0, 1, 2, 3, 4]
    assert [s.parent for s in out] == [-1, 0, 0, 2, 3]
    head, note, rest, summary, last = out
    window = segments[0].token_ids
    assert head.token_ids == window[:3] and not any(head.trainable)
    assert note.token_ids == window[:6] and [t for t in range(6) if note.trainable[t]] == [3, 4, 5]
    assert note.logprobs == pytest.approx([0.0] * 3 + [-0.3, -0.4, -0.5])
    assert note.step_rewards is None  # no environment reward is the note's
    assert rest.token_ids == window
    assert [t for t in range(14) if rest.trainable[t]] == [7, 8, 11, 12, 13]
    assert rest.step_rewards[8] == 0.5 and sum(rest.step_rewards) == 0.5
    assert summary.token_ids == segments[1].token_ids and last.token_ids == segments[2].token_ids
    # unused: the rollout stays as recorded (a chain); no terminating answer: no note is used
    assert route_note_credit(segments, notes, "answer k9") is segments
    assert route_note_credit(segments, notes, None) is segments


def test_the_advantages_of_a_used_note_by_hand():
    """gamma = 1, lambda = 0.5 (q = 0.5), R = 1, no step reward.

    Paths: head -> rest -> summary -> last (the head's latest child is the rest), and the
    note segment alone (a leaf: N_>note = 0). Trainable tokens: note 3, rest 5, summary 2,
    last 3.

    Zero values, token i of s gets R q^(N_>s + n_s - i):
      note: q^2, q^1, q^0 = 0.25, 0.5, 1   (read as the recorded chain, w's first note token
            had N_>w = 5 later tokens and 8 in w: q^12)
      rest: N_> = 2 + 3 = 5, n = 5: q^9 .. q^5;  summary: q^4, q^3;  last: q^2, q^1, q^0.

    Values on the note's tokens (0.1, 0.3, 0.5): delta = (0.3 - 0.1, 0.5 - 0.3, 1 - 0.5)
      = (0.2, 0.2, 0.5); A = (0.2 + 0.5 * 0.45, 0.2 + 0.5 * 0.5, 0.5) = (0.425, 0.45, 0.5),
      for cross-segment and stitched alike (the note's path is the note segment alone).
    """
    segments, notes = hand_rollout()
    for seg in segments:
        seg.step_rewards, seg.reward = None, 1.0
    routed = pack_segments(route_note_credit(segments, notes, "answer k3"))
    assert routed.parent_index.tolist() == [-1, 0, 0, 2, 3]
    chains = segment_chains(routed.rollout_id, routed.segment_index, routed.parent_index)
    assert chains[0] == chains[2] == chains[3] == chains[4] != chains[1]
    args = (routed.trainable, routed.rewards, routed.rollout_id, routed.segment_index)
    zero = torch.zeros(routed.trainable.shape)
    cross = cross_segment_gae(zero, *args, 1.0, 0.5, parent_index=routed.parent_index)
    q = 0.5
    assert cross[1][routed.trainable[1]].tolist() == [0.25, 0.5, 1.0]
    assert cross[2][routed.trainable[2]].tolist() == [q**9, q**8, q**7, q**6, q**5]
    assert cross[3][routed.trainable[3]].tolist() == [q**4, q**3]
    assert cross[4][routed.trainable[4]].tolist() == [0.25, 0.5, 1.0]
    assert not routed.trainable[0].any() and not cross[0].any()
    assert torch.equal(stitched_gae(zero, *args, 1.0, 0.5, parent_index=routed.parent_index), cross)
    recorded = pack_segments(segments)  # the chain as recorded: the note 12 tokens from the end
    plain = cross_segment_gae(torch.zeros(recorded.trainable.shape), recorded.trainable,
                              recorded.rewards, recorded.rollout_id, recorded.segment_index,
                              1.0, 0.5)  # fmt: skip
    assert plain[0][recorded.trainable[0]].tolist()[0] == q**12

    values = zero.clone()
    values[1, 3:6] = torch.tensor([0.1, 0.3, 0.5])
    for estimator in (cross_segment_gae, stitched_gae):
        adv = estimator(values, *args, 1.0, 0.5, parent_index=routed.parent_index)
        torch.testing.assert_close(adv[1, 3:6], torch.tensor([0.425, 0.45, 0.5]))


@pytest.mark.parametrize("env_id", ANSWERED)
def test_the_oracles_used_note_is_a_leaf_credited_with_the_outcome(env_id: str):
    """In the oracle's rollouts the note of the answered value is a note segment: a leaf whose
    parent is its window's head; at zero values its tokens get R q^(n - i) under the
    estimators that follow the tree, wherever the answer came."""
    config = sized(env_id)
    batch = oracle_rollouts(env_id, config, range(8))
    q = 0.9
    for rec in batch.records:
        segs = by_rollout(batch)[rec.rollout_id]
        final = [x for x in rec.transcript.splitlines() if x.startswith("[assistant] ")][-1]
        value = final.split()[-1]
        leaves = note_leaves(segs)
        assert leaves and all(value in chat().decode(s.token_ids[-8:]).split() for s in leaves)
        batch_of_one = pack_segments(segs)
        args = (batch_of_one.trainable, batch_of_one.rewards, batch_of_one.rollout_id)
        zero = torch.zeros(batch_of_one.trainable.shape)
        for estimator in (cross_segment_gae, stitched_gae):
            adv = estimator(zero, *args, batch_of_one.segment_index, 1.0, q,
                            parent_index=batch_of_one.parent_index)  # fmt: skip
            for leaf in leaves:
                row = segs.index(leaf)
                n = sum(leaf.trainable)
                expected = [rec.reward * q ** (n - i) for i in range(1, n + 1)]
                got = adv[row][batch_of_one.trainable[row]].tolist()
                assert got == pytest.approx(expected)
                head = segs[leaf.parent]
                assert leaf.token_ids[: len(head.token_ids)] == head.token_ids


def test_rollouts_without_a_used_note_stay_chains():
    """SimRepo's final action (``submit``) uses no note: its segments are recorded as the
    chain compacted records, notes trained in their windows."""
    config = sized("cxsim/SimRepo-v0")
    batch = oracle_rollouts("cxsim/SimRepo-v0", config, range(4))
    assert pack_segments(batch.segments).parent_index is None
    assert not any(note_leaves(segs) for segs in by_rollout(batch).values())


class NotesTwice:
    """An agent that answers ``note the key is <its value>`` at its first two turns, then
    acts as the oracle does."""

    def __init__(self, env_id: str):
        self.oracle = ScriptedAgent(env_id, chat())
        self.turns: dict[int, int] = {}

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        out = []
        for request in requests:
            turn = self.turns.get(request.row, 0)
            self.turns[request.row] = turn + 1
            if request.kind == "act" and turn < 2:
                ids = [*chat().encode(f"note the key is {request.info['key_facts']['key']}")]
                ids.append(chat().end_id)
                out.append(TurnResponse(ids, [0.0] * len(ids), chat().decode(ids), True))
            else:
                out += self.oracle.respond([request])
        return out


def test_a_note_beyond_the_bounds_reaches_the_environment():
    """With room for one note, the second ``note`` response is an action: the environment
    answers it (an error observation) and counts it as a step."""
    env_id = "cxsim/KeyRecall-v0"
    config = replace(sized(env_id), protocol=ONE_NOTE)
    kwargs = EnvConfig(env_id=env_id).kwargs
    batch = collect_rollouts(env_id, kwargs, NotesTwice(env_id), config, [3], chat())
    lines = batch.records[0].transcript.splitlines()
    first, second = (i for i, x in enumerate(lines) if x.startswith("[assistant] note "))
    assert lines[second] == lines[first] and second == first + 1  # the first: no observation
    assert lines[second + 1].startswith("[observation] error")
    notes = notes_at_each_compaction(batch.records[0].transcript)
    assert notes and all(carried == [notes[0][0]] for carried in notes)
    assert notes[0][0].startswith("note 0 : the key is ")


# -- the oracle at the pre-flight's sizes, and the entry points -------------------------------


@pytest.mark.parametrize("env_id", FAMILIES)
def test_the_oracle_solves_every_family_at_the_preflight_sizes(env_id: str):
    """Pass@1 of the noting oracle on 32 tasks past the sizing and pre-flight seeds (the
    pre-flight accepts every family)."""
    config = sized(env_id)
    batch = oracle_rollouts(env_id, config, range(1000, 1032))
    assert sum(r.success for r in batch.records) == 32
    assert all(r.peak_context <= config.budget for r in batch.records)
    assert sum(r.compactions for r in batch.records) >= 32
    used = sum(len(note_leaves(segs)) for segs in by_rollout(batch).values())
    assert used >= 32 if env_id in ANSWERED else used == 0


SMOKE_ENV = [
    "--env.env-id", "cxsim/KeyRecall-easy-v0",
    "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
    "num_values", "4",
]  # fmt: skip


def test_sft_train_and_eval_under_memory_notes(tmp_path: Path):
    """``cxsim sft`` clones the noting oracle's demonstrations, ``cxsim train`` trains on
    rollouts under memory-notes and ``cxsim eval`` evaluates under it, at the sizes derived
    for it (this short corridor fits the derived window: the notes' room is kept free)."""
    common = ["--compaction.protocol", "memory-notes", "--device", "cpu", *SMOKE_ENV]
    cxsim(["--quiet", "sft", "--run-dir", str(tmp_path / "sft"), *common, "--no-progress-bar",
           "--sft.episodes", "6", "--sft.epochs", "1", "--sft.heldout-episodes", "2",
           "--sft.omission-rate", "0"])  # fmt: skip
    sft = json.loads((tmp_path / "sft" / "results.json").read_text())
    demos, budget = sft["demonstrations"], sft["config"]["compaction"]["budget"]
    assert demos["charts/success_rate"] == 1.0
    assert demos["compaction/peak_context_mean"] <= budget
    cxsim(["--quiet", "train", "--policy", str(tmp_path / "sft" / "policy"), "--run-dir",
           str(tmp_path / "train"), *common, "--no-progress-bar", "--ppo.rollouts-per-batch", "4",
           "--ppo.iterations", "1", "--ppo.critic-warmup", "1", "--ppo.minibatches", "1"])  # fmt: skip
    train = json.loads((tmp_path / "train" / "results.json").read_text())
    assert train["iterations_done"] == 2 and train["config"]["ppo"]["protocol"] == "memory-notes"
    assert train["config"]["compaction"] == sft["config"]["compaction"]
    assert train["history"][-1]["charts/policy_tokens"] > 0
    out = tmp_path / "eval.json"
    cxsim(["--quiet", "eval", "--policy", str(tmp_path / "sft" / "policy"), "--out", str(out),
           *common, "--eval.episodes", "2"])  # fmt: skip
    results = {r["protocol"]: r for r in json.loads(out.read_text())["results"]}
    assert list(results) == ["single", "memory-notes"]
    assert 0.0 <= results["memory-notes"]["pass_at_1"] <= 1.0
