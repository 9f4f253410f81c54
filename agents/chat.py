"""Chat formats: how turns of a compaction episode become token ids.

The runtime builds each context by concatenating the pieces below and appends
the policy's own response tokens in between, so every method returns only the
tokens its turn adds (a message delta), never a whole re-rendered conversation:

    system(s) + task(u) + assistant_prefix() + response + end_id
              + observation(o) + assistant_prefix() + response + end_id
              + summary_request(q_sum) + summary + end_id            (compaction)
    system(s) + resume(q_resume, summary) + retained turns ...       (rebuilt window)

`WordChatFormat` serves the built-in word tokenizer; `HFChatFormat` renders the
same deltas with any Hugging Face tokenizer's own chat template.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Literal, Protocol

from transformers import PreTrainedTokenizerBase

from cxsim.agents.tokenizer import (
    ASSISTANT,
    END,
    OBSERVATION,
    PAD,
    RESUME,
    SPECIAL_TOKENS,
    SUMMARIZE,
    SYSTEM,
    TASK,
    UNK,
    missing_words,
    unknown_words_error,
)
from cxsim.model_options import ChatOptions, SystemRole  # torch-free: entry points' flags


class ChatFormat(Protocol):
    """The contract of CONTRACTS.md (Agents); every method returns token ids."""

    end_id: int
    """Token that ends a response or a summary (sampling stops on it)."""
    pad_id: int
    """Token used to pad batches (always masked out)."""

    def system(self, text: str) -> list[int]: ...
    def task(self, text: str) -> list[int]: ...
    def assistant_prefix(self) -> list[int]: ...
    def observation(self, text: str) -> list[int]: ...
    def summary_request(self, instruction: str) -> list[int]: ...
    def resume(self, instruction: str, summary: str) -> list[int]: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


class WordChatFormat:
    """Turns marked by the special tokens of `build_tokenizer`.

    system: `<|system|> s`   task: `<|task|> u`   assistant_prefix: `<|assistant|>`
    response: `... <|end|>`  observation: `<|observation|> o`
    summary_request: `<|summarize|> q <|assistant|>`   resume: `<|resume|> q summary`

    A word the tokenizer lacks is a ValueError naming it (`check_words`, and `encode`
    when a text it is given holds one), never a silent `<unk>`.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        ids = tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))
        if ids != list(range(len(SPECIAL_TOKENS))):
            raise ValueError(
                "WordChatFormat needs a tokenizer made by cxsim.agents.build_tokenizer "
                f"(special tokens at ids 0..{len(SPECIAL_TOKENS) - 1}); got ids {ids}. "
                "Use HFChatFormat for other tokenizers."
            )
        self.tokenizer = tokenizer
        self._id = dict(zip(SPECIAL_TOKENS, ids, strict=True))
        self.end_id: int = self._id[END]
        self.pad_id: int = self._id[PAD]
        self._unk_id = self._id[UNK]
        self._vocab: dict[str, int] | None = None  # get_vocab(), read once it is needed

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if self._unk_id in ids:  # the only cost on known text: one scan of the ids
            self.check_words(text.split(), f"the text {_excerpt(text)!r}")
        return ids

    def check_words(self, words: Iterable[str], where: str) -> None:
        """Raises ValueError naming the ``words`` the tokenizer lacks (found in ``where``)."""
        if self._vocab is None:
            self._vocab = self.tokenizer.get_vocab()
        missing = missing_words(self._vocab, words)
        if missing:
            raise unknown_words_error(missing, where)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def system(self, text: str) -> list[int]:
        return [self._id[SYSTEM], *self.encode(text)]

    def task(self, text: str) -> list[int]:
        return [self._id[TASK], *self.encode(text)]

    def assistant_prefix(self) -> list[int]:
        return [self._id[ASSISTANT]]

    def observation(self, text: str) -> list[int]:
        return [self._id[OBSERVATION], *self.encode(text)]

    def summary_request(self, instruction: str) -> list[int]:
        return [self._id[SUMMARIZE], *self.encode(instruction), self._id[ASSISTANT]]

    def resume(self, instruction: str, summary: str) -> list[int]:
        return [self._id[RESUME], *self.encode(instruction), *self.encode(summary)]


def _excerpt(text: str, words: int = 12) -> str:
    split = text.split()
    return " ".join(split[:words]) + (" ..." if len(split) > words else "")


_MARK = "cxsim-response-mark"
_SYSTEM_MARK = "cxsim-system-mark"


class HFChatFormat:
    """Message deltas rendered with a Hugging Face tokenizer's chat template.

    Each delta is the text `apply_chat_template` adds when one message is
    appended to a fixed conversation (system, user, assistant), tokenized
    without extra special tokens. `end_id` is the first token the template
    writes after an assistant message's content (its end-of-turn token, e.g.
    `<|im_end|>` or `<|eot_id|>`), or the tokenizer's eos when it writes none.
    Whatever the template puts between that token and the next turn (often a
    newline) opens the turns that follow a response (observation, summary
    request). Observations are `observation_role` messages ("user" or "tool");
    the summary request is a user message plus the generation prompt; the
    resume turn is a user message `instruction + "\\n\\n" + summary` following
    the system turn.

    Without a system role (``system_role`` merge, or auto on a template that
    refuses or drops system messages) the system text opens the first user
    message: `system(s)` is that message's opening plus ``s + "\\n\\n"``, and
    the task (or resume) turn completes it, so the pieces render
    ``user: s + "\\n\\n" + u``.

    Templates that rewrite earlier turns when a message is added (so that a
    conversation's rendering is not a prefix of its extension) are rejected
    with a ValueError, and so is a turn the template itself refuses (its rule
    is quoted: e.g. a ``tool`` observation under a template whose roles must
    alternate user/assistant).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        options: ChatOptions | None = None,
        *,
        observation_role: Literal["user", "tool"] | None = None,
    ):
        if tokenizer.chat_template is None:
            raise ValueError(
                "HFChatFormat needs a tokenizer with a chat template "
                "(tokenizer.chat_template is None); set one or use a model that ships one."
            )
        options = options or ChatOptions()
        if observation_role is not None:
            options = replace(options, observation_role=observation_role)
        self.tokenizer = tokenizer
        self.options = options
        self.observation_role = options.observation_role
        self._kwargs = options.template_kwargs()
        self.merge_system = self._merges_system(options.system_role)
        self._system = [] if self.merge_system else [{"role": "system", "content": "s"}]
        self._user = [*self._system, {"role": "user", "content": "u"}]
        self._answered = [*self._user, {"role": "assistant", "content": _MARK}]

        answered = self._render(self._answered)
        after = answered[answered.rindex(_MARK) + len(_MARK) :]
        after_ids = self.encode(after)
        specials = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        if after_ids and after_ids[0] in specials:
            self.end_id: int = after_ids[0]
            end_text = tokenizer.decode(after_ids[:1])
            self._after_response = answered.rindex(_MARK) + len(_MARK) + after.index(end_text)
            self._after_response += len(end_text)
        elif tokenizer.eos_token_id is not None:
            self.end_id = tokenizer.eos_token_id
            self._after_response = len(answered) - len(after)
        else:
            raise ValueError(
                "the chat template writes no end-of-turn token after an assistant message "
                "and the tokenizer has no eos token; cannot tell where a response ends"
            )
        self.pad_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id
        )
        # Fail now, not mid-rollout, on a turn the template refuses.
        self.observation("o")
        self.summary_request("q")

    def _merges_system(self, mode: SystemRole) -> bool:
        """Whether the system text goes into the first user turn."""
        if mode == "merge":
            return True
        probe = [{"role": "system", "content": _SYSTEM_MARK}, {"role": "user", "content": "u"}]
        try:
            native = _SYSTEM_MARK in self._render(probe)
        except ValueError as err:
            if mode == "native":
                raise
            if not self._render_ok([{"role": "user", "content": "u"}]):
                raise ValueError(f"the chat template renders neither turn: {err}") from err
            return True
        if mode == "native" and not native:
            raise ValueError(
                "the chat template drops system messages; use --chat.system-role merge "
                "(the system text then opens the first user turn)"
            )
        return not native

    def _render_ok(self, messages: list[dict[str, str]]) -> bool:
        try:
            self._render(messages)
        except ValueError:
            return False
        return True

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool = False) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation_prompt, **self._kwargs
            )
        except Exception as err:  # jinja's TemplateError, raised by the template's own rules
            roles = "/".join(m["role"] for m in messages)
            raise ValueError(
                f"the chat template refuses the turns {roles}: its rule says {str(err)!r}; "
                "change --chat.observation-role or --chat.system-role to fit it"
            ) from err

    def _delta(
        self, before: list[dict[str, str]], message: dict[str, str], generation_prompt: bool
    ) -> list[int]:
        """Tokens the template adds after `before` when `message` is appended."""
        head = self._render(before) if before else ""
        full = self._render([*before, message], generation_prompt)
        if before and before[-1]["role"] == "assistant":
            # The context holds the response up to end_id, not the template's tail.
            head = head[: self._after_response]
        if not full.startswith(head):
            raise ValueError(
                f"chat template is not incremental: appending a {message['role']!r} message "
                "changes the rendering of earlier turns; HFChatFormat cannot render deltas"
            )
        return self.encode(full[len(head) :])

    def _first_user(self) -> tuple[str, str]:
        """(opening, closing) text of a lone first user message, around its content."""
        rendered = self._render([{"role": "user", "content": _SYSTEM_MARK}])
        cut = rendered.index(_SYSTEM_MARK)
        return rendered[:cut], rendered[cut + len(_SYSTEM_MARK) :]

    def _opening_turn(self, content: str) -> list[int]:
        """The first user turn's tokens after `system(...)` (task or resume)."""
        if not self.merge_system:
            return self._delta(self._system, {"role": "user", "content": content}, False)
        return self.encode(content + self._first_user()[1])

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def system(self, text: str) -> list[int]:
        if self.merge_system:
            return self.encode(self._first_user()[0] + (f"{text}\n\n" if text else ""))
        return self.encode(self._render([{"role": "system", "content": text}]))

    def task(self, text: str) -> list[int]:
        return self._opening_turn(text)

    def assistant_prefix(self) -> list[int]:
        head = self._render(self._user)
        full = self._render(self._user, generation_prompt=True)
        if not full.startswith(head):
            raise ValueError("chat template's generation prompt rewrites earlier turns")
        return self.encode(full[len(head) :])

    def observation(self, text: str) -> list[int]:
        return self._delta(self._answered, {"role": self.observation_role, "content": text}, False)

    def summary_request(self, instruction: str) -> list[int]:
        return self._delta(self._answered, {"role": "user", "content": instruction}, True)

    def resume(self, instruction: str, summary: str) -> list[int]:
        return self._opening_turn(f"{instruction}\n\n{summary}")
