"""``memory-notes``: the policy keeps notes that every rebuilt window carries, tagged with
their step, and a note the final answer uses is credited with the outcome directly.

**Notes.** At any turn the policy may answer :data:`NOTE_WORD` followed by the note's
words (``note the key is k3``; ``note``, the tags' numbers, ``:`` and ``;`` are words
every cxsim tokenizer holds: ``cxsim.envs.vocab``) instead of an action. The runtime keeps
it (a ``note`` move, :meth:`NotesRow.response_move`): no environment step, one turn, its
tokens stay in the window, trainable, and the row's :class:`NotesRow` stores it
(:class:`Note`) with the number of environment steps taken before it (its step). Bounds (``MemoryNotes(max_notes, max_note_tokens)``, validated): at most
``max_notes`` notes per episode, each of at most ``max_note_tokens`` tokens (the note word
and the end token left out), written at step :data:`LAST_NOTE_STEP` at the latest (the
numbers every cxsim tokenizer holds); a note beyond them is not kept and reaches the
environment as an action.

**Compaction** is ``compacted``'s (the threshold, the summary written by the policy),
except that every rebuilt window also carries the notes so far, after the resume turn and
before the steps it copies: one observation turn ``note 0 : the key is k3 ; note 7 : the
key is now k5`` (each note tagged with its step, in the order written), untrainable. The
room that takes is bounded by the bounds, and the sizing keeps it free
(:meth:`MemoryNotes.notes_room`: in the first window and in every rebuilt one, so the
derived budget holds any notes within the bounds, raw or carried; ``check`` checks that a
rebuilt window with a full summary and that room is not full; the response cap holds a note
of ``max_note_tokens``, :class:`NotesSizing`).

**Credit: a used note is a leaf.** A note is *used* when the episode terminated (the
environment ended it) and one of the final action's words after its first (``answer k3``:
``k3``; ``submit``: none) is a word of the note. Once the episode ended
(``NoteCredit.finished``, :func:`route_note_credit`), each window segment w holding used
notes is cut in three kinds of segments, in this order:

- its **head**: w's tokens up to the first used note's response (the assistant header
  included), trainable where w was, parent w's parent (it may have no trainable token, when
  the note is the window's first response);
- one **note segment** per used note: w's tokens up to the note's end token, trainable on
  the note's response only, parent the head;
- the **rest**: all of w's tokens, trainable where w was after the head, used notes left
  out, parent the head; every segment that continued from w continues from it.

The rest is the head's latest child, so the tree's paths (``cxsim.advantages``, "Segment
trees") run head -> rest -> ... as the chain ran, and each note segment is a leaf, its path
the note segment alone: the rollout's terminal reward R sits at its last trainable token
(the note's end token). So a used note's n trainable tokens get, under cross-segment and
stitched GAE alike (``N_>s = 0``), the local GAE of that segment:
``delta_i = gamma V_{i+1} - V_i`` (i < n), ``delta_n = R - V_n``,
``A_i = delta_i + gamma lam A_{i+1}``: at zero values ``R (gamma lam)^(n - i)``, whatever
the distance from the note to the answer. Group broadcast reads rollout ids only: unchanged.
The tokens of the main path no longer count a used note among their later tokens. A note
that is not used stays an action of its window (credited along the path like any other);
rollouts without a used note stay chains. Horizon figures count the head and the note
segments among a rollout's execution segments.

**Scripted oracle** (``scripted_agents`` for a sized config: :class:`NotingOracle`, below, around
the usual oracle): before each action, while notes are left, it notes a needed fact the
environment has shown whose current value it has not noted yet (the first one, in the
task's order; in its env family's sentence, ``EnvFamily.notes``: ``the key is k3``, ``the
red code is k4``, ``the bug is at calc.py:13``, ``the fix is p2``), so a revision is noted
too; it answers from its context, which always holds its notes. KeyRecall and FactUpdate's answers use the latest note of the
asked fact; SimRepo's final action (``submit``) uses none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from cxsim.agent_api import TurnResponse
from cxsim.strategies.base import _chat_count, check_counts
from cxsim.strategies.compacted import Compacted, PolicySummaries
from cxsim.strategies.parts import RebuiltWindow, RowState
from cxsim.strategies.rollout_agents import RolloutAgents, ScriptedOptions
from cxsim.strategies.sizing import StrategySizing
from cxsim.strategies.strategy_types import ResponseMove, StepCost, TokenCount, TurnState

if TYPE_CHECKING:
    from cxsim.agent_api import Agent, TurnRequest
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig
    from cxsim.envs.defaults import EpisodeText
    from cxsim.envs.family import EnvFamily
    from cxsim.segments import Segment

NOTE_WORD = "note"
"""The first word of a response that keeps a note; the words after it are the note."""
TAG = ":"
"""Between a carried note's step and its words."""
SEPARATOR = ";"
"""Between two carried notes."""
MAX_NOTES = 6
"""Notes per episode, at most, by default (FactUpdate-v0's oracle writes up to 5: its two
asked codes and three revisions)."""
MAX_NOTE_TOKENS = 6
"""Tokens of one note's words, at most, by default (the oracle's longest note: 5 words)."""
LAST_NOTE_STEP = 99
"""The latest step a note may be written at: its tag is a number every cxsim tokenizer holds."""


class Note(NamedTuple):
    """A note the policy kept (a ``note`` move), as the row's :class:`NotesRow` records it."""

    text: str
    """Its words, the word that marks a note left out."""
    step: int
    """Environment steps taken in the episode before it was written."""
    segment: int = -1
    """``segment_index`` of the window segment it was written in (-1: that window is still
    open, or was not recorded)."""
    start: int = 0
    """Where its response tokens start in that window segment (after the assistant header)."""
    end: int = 0
    """Where they end (exclusive: the end token included)."""


def note_line(note: Note) -> str:
    """How a rebuilt window carries ``note``: ``note <step> : <words>``."""
    return f"{NOTE_WORD} {note.step} {TAG} {note.text}"


def used_notes(notes: Sequence[Note], final_action: str | None) -> list[Note]:
    """The recorded notes the final action uses: one of its words after the first is a word
    of the note (none when the episode did not terminate)."""
    if final_action is None:
        return []
    values = set(final_action.split()[1:])
    return [n for n in notes if n.segment >= 0 and values & set(n.text.split())]


def route_note_credit(
    segments: list[Segment], notes: Sequence[Note], final_action: str | None
) -> list[Segment]:
    """``segments`` (one rollout's, in time order) with each window that holds used notes cut
    into its head, one note segment per used note and the rest (module docstring, "Credit");
    unchanged when no note is used."""
    by_window: dict[int, list[Note]] = {}
    for note in used_notes(notes, final_action):
        by_window.setdefault(note.segment, []).append(note)
    if not by_window:
        return segments
    out: list[Segment] = []
    moved: dict[int, int] = {-1: -1}  # old segment_index -> the new one that continues it

    def add(seg: Segment, parent: int) -> int:
        seg.segment_index, seg.parent = len(out), parent
        out.append(seg)
        return seg.segment_index

    for seg in segments:
        parent = moved[seg.parent_index]
        used = sorted(by_window.get(seg.segment_index, []), key=lambda n: n.start)
        if not used:
            moved[seg.segment_index] = add(replace(seg), parent)
            continue
        cut = used[0].start
        rewards = seg.step_rewards or [0.0] * len(seg.token_ids)
        head = add(_piece(seg, cut, range(cut), rewards), parent)
        for note in used:
            add(_piece(seg, note.end, range(note.start, note.end), None), head)
        spans = {t for note in used for t in range(note.start, note.end)}
        rest = [t for t in range(cut, len(seg.token_ids)) if t not in spans]
        tail = [0.0] * cut + rewards[cut:]
        moved[seg.segment_index] = add(_piece(seg, len(seg.token_ids), rest, tail), head)
        out[-1].end = seg.end
    return out


def _piece(
    seg: Segment, length: int, trained: Sequence[int] | range, rewards: list[float] | None
) -> Segment:
    """``seg``'s first ``length`` tokens, trainable at ``trained`` (where ``seg`` was) only."""
    from cxsim.segments import Segment

    keep = set(trained)
    trainable = [seg.trainable[t] and t in keep for t in range(length)]
    return Segment(
        role=seg.role, token_ids=seg.token_ids[:length], trainable=trainable,
        logprobs=[p if on else 0.0 for p, on in zip(seg.logprobs, trainable, strict=False)],
        rollout_id=seg.rollout_id, segment_index=seg.segment_index, reward=seg.reward,
        group_id=seg.group_id,
        step_rewards=None if rewards is None else list(rewards[:length]),
    )  # fmt: skip


class MemoryNotes(Compacted):
    """Compacted, with notes the policy keeps: every rebuilt window carries them, and a note
    the final answer uses is a leaf segment credited with the outcome."""

    name = "memory-notes"
    help = (
        "the policy may answer note <words> to keep a note that every rebuilt window carries "
        "with its step; a full window is compacted; a note the final answer uses is credited "
        "with the outcome directly"
    )

    def __init__(self, max_notes: int = MAX_NOTES, max_note_tokens: int = MAX_NOTE_TOKENS) -> None:
        check_counts(max_notes=max_notes, max_note_tokens=max_note_tokens)
        self.max_notes = max_notes
        self.max_note_tokens = max_note_tokens

    # -- the notes ------------------------------------------------------------------
    def row_state(self, config: CompactionConfig) -> NotesRow:
        """A row that keeps its notes (:class:`NotesRow`)."""
        return NotesRow(config, self)

    def rebuild(self, config: CompactionConfig) -> NotesWindow:
        """Compacted's rebuilt window, carrying the notes (:class:`NotesWindow`)."""
        return NotesWindow(config, task=config.keep_task, summary=True)

    def notes_room(self, config: CompactionConfig, count: TokenCount) -> int:
        """The most tokens notes within the bounds take in one window: each of the
        ``max_notes`` either carried (its tag, its words, a separator) or written in the
        window (assistant header, note word, its words, end token), in one observation turn."""
        carried = count("encode", f"{NOTE_WORD} {LAST_NOTE_STEP} {TAG}") + count(
            "encode", SEPARATOR
        )
        written = count("assistant_prefix") + count("encode", NOTE_WORD) + 1
        per_note = max(carried, written) + self.max_note_tokens
        return count("observation", "") + self.max_notes * per_note

    def words(self, config: CompactionConfig) -> list[str]:
        tags = [str(step) for step in range(LAST_NOTE_STEP + 1)]
        return [*super().words(config), NOTE_WORD, TAG, SEPARATOR, *tags]

    def segments(self, config: CompactionConfig) -> NoteCredit:
        """Compacted's segments, a used note's made a leaf (:class:`NoteCredit`)."""
        return NoteCredit(config)

    # -- sizes and checks -------------------------------------------------------------
    def sizing(self, config: CompactionConfig, count: TokenCount) -> NotesSizing:
        return NotesSizing(self, config, count)

    def check(
        self, config: CompactionConfig, chat: ChatFormat | None = None, system_prompt: str = ""
    ) -> None:
        """Also, with a chat format (``config`` sized): a rebuilt window with a full summary
        and the notes' room is not full."""
        if chat is not None:
            self.check_notes_room(config, chat, system_prompt)
        super().check(config, chat, system_prompt)

    def check_notes_room(self, config: CompactionConfig, chat: ChatFormat, system_prompt: str):
        sizing = self.sizing(config, _chat_count(chat))
        rebuilt = sizing.rebuilt_floor(len(chat.system(system_prompt)))
        assert config.budget is not None and config.threshold is not None
        if config.full(rebuilt):
            raise ValueError(
                f"budget ({config.budget}) is too small for a rebuilt window with notes: system "
                f"prompt, resume turn with a full summary and {self.max_notes} notes of "
                f"{self.max_note_tokens} tokens take {rebuilt} tokens, leaving "
                f"{config.budget - rebuilt} < threshold ({config.threshold}); raise "
                "--compaction.budget or lower --compaction.threshold / max_summary_tokens"
            )

    # -- the scripted oracle ------------------------------------------------------------
    def scripted_note(
        self,
        chat: ChatFormat,
        request: TurnRequest,
        noted: Sequence[tuple[str, str]],
        family: EnvFamily,
    ) -> tuple[str, str, str] | None:
        """What the scripted oracle notes before its action in ``request``, given what it
        noted so far in the episode (``noted``: (fact, value) in order): (fact, value, the
        note's words, ``family.note``) for the first needed fact shown whose current value it
        has not noted and its context holds, while notes are left; else None."""
        from cxsim.envs.scripted import shown_facts

        info: dict[str, Any] = request.info
        if len(noted) >= self.max_notes or info.get("step", 0) > LAST_NOTE_STEP:
            return None
        if "key_facts" not in info or "needed_facts" not in info:
            return None
        latest = dict(noted)  # each fact's last noted value
        present = set(request.context_text.split())
        for name in shown_facts(info):
            value = info["key_facts"][name]
            if latest.get(name) == value or value not in present:
                continue
            text = family.note(name, value)
            if text is not None and len(chat.encode(text)) <= self.max_note_tokens:
                return name, value, text
        return None

    def scripted_agents(
        self,
        env_id: str,
        chat: ChatFormat,
        options: ScriptedOptions = ScriptedOptions(),
        config: CompactionConfig | None = None,
    ) -> RolloutAgents:
        """The oracle, noting each needed fact as it is shown (:meth:`scripted_note`, in the
        sentences of the env's family), given a sized ``config``; without one, the oracle
        alone."""
        from cxsim.envs.family import require_family_of_id

        agents = super().scripted_agents(env_id, chat, options)
        if config is None:
            return agents
        family = require_family_of_id(env_id)

        def note(request: TurnRequest, noted: Sequence[tuple[str, str]]):
            return self.scripted_note(chat, request, noted, family)

        return RolloutAgents(NotingOracle(agents.actor, chat, NOTE_WORD, note))


class NotesRow(RowState):
    """Memory-notes' rows: the notes kept so far in the episode, in order (those written in
    the current window not yet given their segment), and the environment steps taken."""

    def __init__(self, config: CompactionConfig, strategy: MemoryNotes) -> None:
        super().__init__(config)
        self.strategy = strategy
        self.notes: list[Note] = []
        self.open: list[int] = []
        """Indices into ``notes`` of those written in the current window (not recorded yet)."""
        self.env_steps = 0

    def response_move(self, chat: ChatFormat, text: str, turn: TurnState) -> ResponseMove:
        """``note <words>`` (``note``) while notes are left, at step :data:`LAST_NOTE_STEP`
        at the latest, its words at most ``max_note_tokens`` tokens; else an action."""
        words, strategy = text.split(), self.strategy
        if len(words) < 2 or words[0] != NOTE_WORD:
            return ResponseMove()
        if len(self.notes) >= strategy.max_notes or self.env_steps > LAST_NOTE_STEP:
            return ResponseMove()
        kept = " ".join(words[1:])
        if len(chat.encode(kept)) > strategy.max_note_tokens:
            return ResponseMove()
        return ResponseMove("note", kept)

    def moved(self, move: ResponseMove, start: int, end: int) -> None:
        """An action is a step; a note is kept, written at ``start:end`` of the window."""
        if move.kind == "act":
            self.env_steps += 1
        elif move.kind == "note":
            self.open.append(len(self.notes))
            self.notes.append(Note(move.note, self.env_steps, -1, start, end))

    def recorded(self, segment: int) -> None:
        """The notes written in the window just closed are where it was recorded."""
        if segment >= 0:
            for i in self.open:
                self.notes[i] = self.notes[i]._replace(segment=segment)
        self.open = []


class NoteCredit(PolicySummaries):
    """Memory-notes' segments: compacted's, each window holding used notes cut around them
    once the episode ended (:func:`route_note_credit`)."""

    def finished(
        self, segments: list[Segment], row: RowState, final_action: str | None
    ) -> list[Segment]:
        assert isinstance(row, NotesRow)
        return route_note_credit(segments, row.notes, final_action)


class NotesWindow(RebuiltWindow):
    """Memory-notes' rebuilt window: compacted's, with the notes after the resume turn."""

    def prefix(
        self,
        chat: ChatFormat,
        system: list[int],
        task: list[int],
        summary: str | None,
        row: RowState | None = None,
    ) -> list[int]:
        """The compacted prefix, then one observation turn with every note the row kept
        (``row``, its :class:`NotesRow`), ``note <step> : <words>``, joined by ``;`` (none
        without notes)."""
        tokens = super().prefix(chat, system, task, summary)
        notes = row.notes if isinstance(row, NotesRow) else []
        if not notes:
            return tokens
        return tokens + chat.observation(f" {SEPARATOR} ".join(note_line(n) for n in notes))


class NotesSizing(StrategySizing):
    """Memory-notes' sizes: the notes' room kept free in every window, and a note's
    response."""

    strategy: MemoryNotes

    def notes_room(self) -> int:
        return self.strategy.notes_room(self.config, self.count)

    def response_floor(self) -> int:
        """A note of ``max_note_tokens``: the note word, its words, the end token."""
        return self.count("encode", NOTE_WORD) + self.strategy.max_note_tokens + 1

    def rebuilt_floor(self, system: int) -> int:
        return super().rebuilt_floor(system) + self.notes_room()

    def rebuilt_size(self, system: int, task: int, summaries: Sequence[str]) -> int:
        return super().rebuilt_size(system, task, summaries) + self.notes_room()

    def windows(
        self, first: int, steps: list[StepCost], episode: EpisodeText
    ) -> list[tuple[int, list[StepCost]]]:
        """The episode's window with the notes' room kept free (as every rebuilt window)."""
        return [(first + self.notes_room(), steps)]


MEMORY_NOTES = MemoryNotes()


class NotingOracle:
    """A scripted agent that also keeps notes (``memory-notes``): before an ``act`` request,
    ``note(request, noted)`` may name a fact to note, (fact, value, words), given the row's
    notes so far in the episode (``noted``: (fact, value) in order); it then answers
    ``<note_word> <words>`` (ended by ``chat.end_id``) instead of asking ``agent``, if that
    fits the request's cap. Every other request goes to ``agent``. A row's notes restart
    with its episode (a request that resets the context before the first step)."""

    def __init__(
        self,
        agent: Agent,
        chat: ChatFormat,
        note_word: str,
        note: Callable[[TurnRequest, list[tuple[str, str]]], tuple[str, str, str] | None],
    ):
        self.agent = agent
        self.chat = chat
        self.note_word = note_word
        self.note = note
        self.noted: dict[int, list[tuple[str, str]]] = {}

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        decided: list[TurnResponse | None] = []
        for request in requests:
            if request.reset and request.info.get("step") == 0:
                self.noted[request.row] = []
            noted = self.noted.setdefault(request.row, [])
            fact = self.note(request, noted) if request.kind == "act" else None
            ids = [] if fact is None else self.encoded(f"{self.note_word} {fact[2]}")
            if fact is None or len(ids) > request.max_new_tokens:
                decided.append(None)
                continue
            noted.append((fact[0], fact[1]))
            decided.append(TurnResponse(ids, [0.0] * len(ids), self.chat.decode(ids), True))
        passed = [r for r, d in zip(requests, decided, strict=True) if d is None]
        answers = iter(self.agent.respond(passed) if passed else [])
        return [d if d is not None else next(answers) for d in decided]

    def encoded(self, text: str) -> list[int]:
        return [*self.chat.encode(text), self.chat.end_id]
