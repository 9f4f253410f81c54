"""Compaction protocols and their configuration (docs/method.md section 1).

The runtime (``cxsim.runtime``) drives environments under one context strategy
(``cxsim.strategies``), chosen by ``CompactionConfig.protocol``:

- ``compacted``: the paper's protocol. Before each response, if
  ``C - |h_t| < T_comp`` the same policy writes a summary of ``h_t`` and the
  window is rebuilt as ``(s) + [u] + u_resume(S) + last k steps``.
- ``single``: no compaction; the episode fails when the window is full.
- ``sliding-window``: like ``compacted`` but without a summary: the window is
  rebuilt as ``(s) + (u) + last k steps`` (a baseline).
- ``external-summarizer``: like ``compacted`` but another agent (a scripted or
  frozen summarizer) writes the summary (the paper's Table 1 setting).
- ``observation-masking``: no summary: the window is rebuilt as ``(s) + (u) +`` every
  step, the observations of all but the last k replaced by a placeholder.
- ``memory-state``: after every step the policy rewrites a bounded state and the window
  is rebuilt as ``(s) + (u) + u_resume(state) +`` the latest step (MEM1-like).
- ``self-compaction`` / ``self-compaction-drawn``: like ``compacted``, but the policy may
  compact at any turn by answering ``summary``; the threshold stays a fallback (drawn per
  task group in ``[T_comp, 1.5 T_comp]`` for ``-drawn``).
- ``module:name`` or an installed plug-in's name: the user's own strategy
  (docs/training.md, "Your own context strategy").

"The window is full" has one meaning for every protocol: ``C - |h_t| < T_comp``
before a response (``cxsim.strategies.window_full``). Compacting protocols compact
then (while compactions are left); otherwise the episode ends truncated and failed.

Sizes (budget, threshold, response and summary caps) may be left unset (None):
``fit_sizes`` derives them from oracle episodes in the chat format's own tokens,
and ``cxsim.preflight.preflight`` does so for every entry point before any work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated

import tyro

from cxsim.env_kwargs import key_value_flag
from cxsim.strategies import STRATEGIES, ContextStrategy, StepCost, TurnState, window_full
from cxsim.strategies.settings import configured
from cxsim.tracking import RECORDED_WHEN_SET

if TYPE_CHECKING:  # annotations only: importing agents pulls torch, slowing every --help
    from cxsim.agents.chat import ChatFormat
    from cxsim.envs.defaults import EpisodeText
    from cxsim.strategies.strategy_types import TokenCount

PROTOCOLS: tuple[str, ...] = tuple(STRATEGIES)
"""The protocols cxsim holds (``cxsim.strategies.STRATEGIES``); plug-ins come on top."""
# A name the registry holds, an installed plug-in's name, or module:name (cxsim/plugins.py);
# CompactionConfig checks it when it is built.
Protocol = Annotated[str, tyro.conf.arg(metavar="{" + ",".join(PROTOCOLS) + "}|MODULE:NAME")]
StrategyOptions = key_value_flag("--compaction.strategy-options")
"""A strategy's settings as one flag of KEY VALUE pairs (``cxsim.strategies.settings``)."""
SIZES: tuple[str, ...] = ("budget", "threshold", "max_response_tokens", "max_summary_tokens")
"""The sizes ``fit_sizes`` derives when they are None."""


@dataclass(frozen=True)
class CompactionConfig:
    """How contexts are bounded and compacted. Sizes are in tokens."""

    protocol: Protocol = "compacted"
    """Context strategy (cxsim/strategies/) the run is sized, demonstrated, trained and evaluated
    under: ``compacted`` (paper: the policy summarizes a full window), ``single`` (no
    compaction), ``sliding-window`` (the last k steps, no summary), ``external-summarizer``
    (another agent writes the summaries), ``observation-masking`` (every action and the last k
    observations, older ones masked), ``memory-state`` (the policy rewrites a bounded state
    after every step), ``self-compaction`` (the policy compacts when it answers ``summary``;
    the threshold is a fallback), ``self-compaction-drawn`` (that fallback drawn per task
    group), ``folding`` (``find <goal>`` opens a child window that returns a summary),
    ``memory-notes`` (``note <words>`` keeps a note that every rebuilt window carries, and a
    note the final answer uses gets the outcome's credit directly), or module:name for your
    own (docs/training.md, "Context strategies")."""
    budget: int | None = 320
    """Working budget C: no context (window or summary prompt + summary) ever exceeds it.
    None: derived from the environment's text and the chat format (``fit_sizes``)."""
    threshold: int | None = 128
    """T_comp: compact (or, with no compaction left, fail) before a response when
    ``budget - |h_t| < threshold``. Needs ``threshold >= |q_sum| + max_summary_tokens``
    plus the assistant header and one response token. None: derived."""
    max_response_tokens: int | None = 16
    """Cap on one assistant response, its end token included (the paper: equal to the
    threshold). None: derived (the oracle's longest action)."""
    max_summary_tokens: int | None = 48
    """Cap on one summary, its end token included. None: derived (the longest perfect
    scripted summary)."""
    summary_instruction: str = "summary : keep in mind what to do to finish the task ."
    """Text of q_sum, the instruction that asks for a summary."""
    resume_instruction: str = "you are given a summary of the task :"
    """Text of the resume turn u_resume(S) that carries the summary into the rebuilt window."""
    keep_task: bool = False
    """Re-insert the task u into a rebuilt window (paper: no, the summary must carry it).
    ``sliding-window`` always keeps the task (it has no summary to carry it)."""
    keep_last: int = 2
    """k: steps (response + observation) copied into a rebuilt window; lowered to
    k-1, ..., 0 until the rebuilt window leaves at least ``threshold`` tokens.
    ``observation-masking``: the observations kept verbatim (not lowered)."""
    max_compactions: int = 3
    """Compactions allowed per episode (paper: 3, i.e. 4 windows); also bounds
    ``sliding-window`` rebuilds."""
    max_turns: int = 250
    """Assistant responses per episode (paper: 250); the episode is truncated and fails after."""
    strategy_options: StrategyOptions = field(
        default_factory=dict, metadata={RECORDED_WHEN_SET: True}
    )
    """Settings of the strategy ``protocol`` names, as KEY VALUE pairs: its constructor's
    keywords (``folding``: ``max_depth``, ``max_branches``; ``memory-notes``: ``max_notes``,
    ``max_note_tokens``; ``self-compaction``: ``threshold_draw``), e.g.
    ``--compaction.strategy-options max_depth 2``; none: the strategy's defaults. They belong
    to that strategy: the config of another protocol (an evaluation under another strategy,
    :meth:`for_protocol`) drops them."""

    def __post_init__(self) -> None:
        STRATEGIES.check("protocol", self.protocol)  # plug-ins: imported and validated
        configured(STRATEGIES[self.protocol], self.strategy_options)  # one line if unknown
        for name in (*SIZES, "max_turns"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must be >= 1: raise --compaction.{name}"
                )
        for name in ("keep_last", "max_compactions"):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must be >= 0: raise --compaction.{name}"
                )
        budget, threshold = self.budget, self.threshold
        if budget is not None and threshold is not None and window_full(budget, threshold, 0):
            raise ValueError(  # even an empty window would be full
                f"threshold ({threshold}) must be <= budget ({budget}): lower "
                "--compaction.threshold or raise --compaction.budget"
            )
        self.strategy.check(self)
        for name in ("summary_instruction", "resume_instruction"):
            if not getattr(self, name).strip():
                raise ValueError(f"{name} is empty: set --compaction.{name} to a short instruction")

    @property
    def sized(self) -> bool:
        """True when every size is set (a config the runtime can run)."""
        return all(getattr(self, name) is not None for name in SIZES)

    @property
    def strategy(self) -> ContextStrategy:
        """The context strategy ``protocol`` names (``cxsim.strategies.STRATEGIES``), built
        with ``strategy_options`` (``cxsim.strategies.settings``)."""
        return configured(STRATEGIES[self.protocol], self.strategy_options)

    def for_protocol(self, protocol: str) -> CompactionConfig:
        """This config under another strategy: the same sizes; the strategy options kept only
        for the same protocol (they are that strategy's settings)."""
        if protocol == self.protocol:
            return self
        return replace(self, protocol=protocol, strategy_options={})

    @property
    def summarizes(self) -> bool:
        """True for the protocols whose rebuilt windows carry a summary."""
        return self.strategy.summary_by is not None

    @property
    def compacts(self) -> bool:
        """True for the protocols that rebuild a full window instead of failing."""
        return self.strategy.rebuild(self) is not None

    def compactions_left(self, compactions: int) -> bool:
        """Whether a row may still compact after ``compactions`` compactions:
        ``compactions < max_compactions`` (while it may, the summary reserve stays free)."""
        return compactions < self.max_compactions

    def full(self, length: int) -> bool:
        """Whether a window of ``length`` tokens is full under this (sized) config, the one
        compaction rule ``budget - length < threshold`` (:func:`window_full`)."""
        assert self.budget is not None and self.threshold is not None
        return window_full(self.budget, self.threshold, length)

    def summary_reserve(self, chat: ChatFormat) -> int:
        """Tokens kept free in a window while a compaction is left: ``|q_sum| + max_summary_tokens``
        (0 without a summary).

        Responses and observations never eat into it, so the summary prompt plus
        the summary always fits in the budget.
        """
        return self.strategy.summary(self).reserve(chat)

    def validate(self, chat: ChatFormat, system_prompt: str) -> None:
        """Checks that need the chat format; raises ValueError saying what to change.

        The sizes must be set; then the strategy's checks
        (``cxsim.strategies.ContextStrategy.check`` with the chat format):

        - ``threshold >= |q_sum| + max_summary_tokens + |assistant header| + 1``, so
          that whenever a response is allowed at least one token of it fits;
        - the smallest rebuilt window (system prompt + resume turn with a summary of
          ``max_summary_tokens`` tokens, no steps) leaves ``threshold`` tokens free.
        Task lengths vary per episode: a rebuilt window with ``keep_task`` that does
        not fit ends that episode (truncated), it is not a configuration error.
        """
        if not self.sized:
            unset = ", ".join(name for name in SIZES if getattr(self, name) is None)
            raise ValueError(
                f"compaction sizes {unset} are unset: derive them with cxsim.preflight.preflight "
                "(the entry points do) or set --compaction.budget/threshold/max_response_tokens/"
                "max_summary_tokens"
            )
        self.strategy.check(self, chat, system_prompt)


def fit_sizes(
    config: CompactionConfig,
    chat: ChatFormat,
    system_prompt: str,
    episodes: Sequence[EpisodeText],
    floors: Mapping[str, int] | None = None,
) -> CompactionConfig:
    """``config`` with every unset size derived from oracle episodes, in ``chat``'s tokens.

    Sizes already set are kept. The derived ones, in order (each uses the ones before):

    - ``max_response_tokens``: the longest action + the end token (at least the strategy's
      ``StrategySizing.response_floor``: its own responses, such as a note);
    - ``max_summary_tokens``: the longest perfect summary + the end token;
    - ``threshold``: ``|q_sum| + max_summary_tokens + |assistant header| +
      max_response_tokens + the longest observation turn``: the room one step
      needs while the summary reserve stays free, so no observation overflows;
    - ``budget``: the smallest budget under which every episode ends within
      ``max_compactions + 1`` windows, replaying the runtime's rule (compact when
      ``budget - |h| < threshold``; rebuild as system + [task] + resume turn with
      the episode's longest summary + the steps the strategy keeps, by default the last
      k, k lowered until ``threshold`` is free; the strategy's ``turn_trigger`` and its
      rebuilt window's ``steps`` decide).

    ``floors`` (published sizes) raise a derived size that falls below them.
    """
    if not episodes:
        raise ValueError("fit_sizes needs at least one episode to measure")
    floors = floors or {}
    measured = _Measured(chat)
    count = measured.count
    header = count("assistant_prefix")

    def derived(name: str, value: int) -> int:
        given = getattr(config, name)
        return given if given is not None else max(value, floors.get(name, 0))

    strategy = config.strategy
    longest_action = max(count("encode", a) + 1 for e in episodes for a in e.actions)
    response = derived(
        "max_response_tokens", max(longest_action, strategy.sizing(config, count).response_floor())
    )
    summary = derived(
        "max_summary_tokens", max(count("encode", s) + 1 for e in episodes for s in e.summaries)
    )
    caps = replace(config, max_response_tokens=response, max_summary_tokens=summary, threshold=None)
    reserve = caps.summary_reserve(chat)
    longest_obs = max(count("observation", o) for e in episodes for o in e.observations)
    threshold = derived("threshold", reserve + header + response + longest_obs)
    sized = replace(caps, threshold=threshold)
    if config.budget is not None:
        return sized
    system = count("system", system_prompt)
    plans = [_episode_plan(sized, measured, system, e) for e in episodes]
    firsts = max(first for p in plans for first, _ in p.windows)
    low = max(strategy.sizing(sized, count).rebuilt_floor(system), firsts) + threshold
    high = max(f + sum(step.full for step in s) for p in plans for f, s in p.windows) + threshold
    while low < high:  # smallest budget that fits every episode (the fit grows with budget)
        mid = (low + high) // 2
        if all(p.fits(sized, mid) for p in plans):
            high = mid
        else:
            low = mid + 1
    return replace(sized, budget=max(low, floors.get("budget", 0)))


class _Measured:
    """Token counts of a chat format's pieces, each measured once (episodes repeat
    actions and summaries, and a template renders every observation)."""

    def __init__(self, chat: ChatFormat):
        self.chat = chat
        self._counts: dict[tuple[str, tuple[str, ...]], int] = {}

    def count(self, piece: str, *texts: str) -> int:
        """``len(chat.<piece>(*texts))``."""
        key = (piece, texts)
        if key not in self._counts:
            self._counts[key] = len(getattr(self.chat, piece)(*texts))
        return self._counts[key]


@dataclass(frozen=True)
class _EpisodePlan:
    """One episode's window costs in tokens: the first window's fixed part, a rebuilt
    window's fixed part, and each step (assistant header + response + end + observation),
    verbatim and with its observation masked."""

    first: int
    rebuilt: int
    steps: list[StepCost]
    count: TokenCount
    """How the sizing counts tokens (the strategy's sizing reads it)."""
    reserve: int = 0
    """The strategy's summary reserve (its scripted oracle's compaction decisions read it)."""
    chains: tuple[tuple[int, list[StepCost]], ...] = ()
    """The strategy's own split of the episode into chains of windows, each (its first
    window's fixed part, its steps), played in order (``StrategySizing.windows``); empty: one, the
    episode's (``first``, ``steps``)."""

    @property
    def windows(self) -> tuple[tuple[int, list[StepCost]], ...]:
        """The chains of windows the replay plays, in order."""
        return self.chains or ((self.first, self.steps),)

    def fits(self, config: CompactionConfig, budget: int) -> bool:
        """Whether the episode ends within the windows the strategy allows at ``budget``:
        the runtime's decisions (the strategy's turn trigger and rebuilt steps) replayed on
        sizes, the compactions adding up across the strategy's chains of windows."""
        config = replace(config, budget=budget)
        compactions = 0
        for first, steps in self.windows:
            after = self.replay(config, first, steps, compactions)
            if after is None:
                return False
            compactions = after
        return True

    def replay(
        self, config: CompactionConfig, first: int, steps: list[StepCost], compactions: int
    ) -> int | None:
        """The compactions after one chain of windows (from ``first``, taking ``steps``),
        or None when it does not end within the windows allowed."""
        strategy = config.strategy
        rebuilt = strategy.rebuild(config)
        window, new_steps = first, 0
        held: list[StepCost] = []  # the window's steps, as it holds them
        for cost in steps:
            while True:  # the runtime asks again after each rebuild
                turn = TurnState(window, compactions, new_steps)
                trigger = strategy.turn_trigger(config, turn)
                if trigger == "act" and self.oracle_asks(config, turn):
                    trigger = strategy.turn_trigger(config, turn._replace(asked=True))
                if trigger == "act":
                    break
                if trigger == "end":
                    return None
                compactions += 1  # a rebuilt window, with or without a summary
                kept = None if rebuilt is None else rebuilt.steps(self.rebuilt, held)
                if kept is None:
                    return None
                held = [StepCost(held[i].masked, held[i].masked) if m else held[i] for i, m in kept]
                window, new_steps = self.rebuilt + sum(step.full for step in held), 0
            window += cost.full
            held.append(cost)
            new_steps += 1
        return compactions

    def oracle_asks(self, config: CompactionConfig, turn: TurnState) -> bool:
        """The scripted oracle asks to compact before acting (and a compaction is left)."""
        if not config.compactions_left(turn.compactions):
            return False
        return config.strategy.sizing(config, self.count).oracle_compacts(self.reserve, turn)


def _episode_plan(
    config: CompactionConfig, measured: _Measured, system: int, episode: EpisodeText
) -> _EpisodePlan:
    count = measured.count
    task = count("task", episode.task)
    sizing = config.strategy.sizing(config, count)
    rebuilt = sizing.rebuilt_size(system, task, episode.summaries)
    header = count("assistant_prefix")
    window = config.strategy.rebuild(config)
    placeholder = None if window is None else window.placeholder
    steps = []
    for action, observation in zip(episode.actions, episode.observations, strict=True):
        response = header + count("encode", action) + 1
        full = response + count("observation", observation)
        masked = full if placeholder is None else response + count("observation", placeholder)
        steps.append(StepCost(full, masked))
    reserve = config.summary_reserve(measured.chat)
    chains = sizing.windows(system + task, steps, episode)
    return _EpisodePlan(
        first=system + task,
        rebuilt=rebuilt,
        steps=steps,
        count=count,
        reserve=reserve,
        chains=tuple(chains),
    )
