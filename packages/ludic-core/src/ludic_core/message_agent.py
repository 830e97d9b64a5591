"""An agent harness for message-level clients (:class:`~ludic_core.message_client.MessageClient`).

It keeps the dialog as chat messages, sends it whole on every call and parses the reply text with the
env's parser; the server's chat template renders the prompt. Its model calls carry no token ids: the
trace of each step is empty, and the step info says ``token_level: False`` (see
:mod:`ludic_core.message_client`), so the rollouts can be evaluated and logged but the SAW builder
refuses them for training.

External tool calls are not supported: a message-level reply is always an env action.
"""

from __future__ import annotations

from collections.abc import Sequence

from ludic_core.call_timeout import call_timeout
from ludic_core.errors import ConfigError, LudicTimeoutError, ProtocolError
from ludic_core.harness import DEFAULT_ACT_OPTIONS, ActOptions, AgentActResult, AgentActStep
from ludic_core.inference import InferenceSpec
from ludic_core.message_client import TOKEN_LEVEL_KEY, MessageClient
from ludic_core.parsing import Parser, ParseResult
from ludic_core.types import Info, Message, TokenTrace, ToolResult

__all__ = ["DEFAULT_INCOMPLETE_FEEDBACK", "MessageAgent"]

DEFAULT_INCOMPLETE_FEEDBACK = "Your reply was cut off at the token limit. Answer within it."


class MessageAgent:
    """Implements :class:`~ludic_core.harness.AgentHarness` over a :class:`MessageClient`.

    ``reject_incomplete_completions``: a reply cut by ``max_tokens`` (``finish_reason == "length"``)
    becomes a parse failure with ``incomplete_completion_penalty`` instead of reaching the parser.
    """

    def __init__(
        self,
        client: MessageClient,
        *,
        parser: Parser,
        system_prompt: str | None = None,
        inference: InferenceSpec | None = None,
        reject_incomplete_completions: bool = True,
        incomplete_completion_penalty: float = -0.1,
    ) -> None:
        if not callable(getattr(client, "complete_messages", None)):
            raise ConfigError(
                f"MessageAgent.client must implement complete_messages (a MessageClient), got "
                f"{type(client).__name__}"
            )
        if not callable(parser):
            raise ConfigError(f"MessageAgent.parser must be callable (str -> ParseResult), got {parser!r}")
        self.client = client
        self.parser = parser
        self._system_prompt = system_prompt
        self.inference = inference or InferenceSpec()
        self.reject_incomplete_completions = reject_incomplete_completions
        self.incomplete_completion_penalty = float(incomplete_completion_penalty)
        self.messages: list[Message] = []

    @property
    def default_system_prompt(self) -> str | None:
        return self._system_prompt

    def reset(self, *, system_prompt: str | None = None) -> None:
        self.messages = [{"role": "system", "content": system_prompt}] if system_prompt else []

    def on_env_reset(self, obs: str, info: Info) -> None:
        self.messages.append({"role": "user", "content": obs})

    def on_after_step(self, obs: str, info: Info) -> None:
        self.messages.append({"role": "user", "content": obs})

    def on_tool_results(self, results: Sequence[ToolResult]) -> None:
        raise ProtocolError("MessageAgent makes no tool calls, so it cannot take tool results")

    async def act(self, options: ActOptions = DEFAULT_ACT_OPTIONS) -> AgentActResult:
        spec = options.inference or self.inference
        prompt_messages = list(self.messages)
        try:
            with call_timeout(options.timeout_s):  # no extra task and no loop timer per call
                completion = await self.client.complete_messages(
                    prompt_messages, spec.sampling, seed=options.sampling_seed
                )
        except TimeoutError as exc:
            raise LudicTimeoutError(
                f"model call did not answer within timeout_s={options.timeout_s}"
            ) from exc
        self.messages.append({"role": "assistant", "content": completion.text})
        info: Info = {TOKEN_LEVEL_KEY: False, "finish_reason": completion.finish_reason}
        if completion.model is not None:
            info["model"] = completion.model
        if completion.usage:
            info["usage"] = dict(completion.usage)
        if completion.finish_reason == "length" and self.reject_incomplete_completions:
            info["incomplete_completion"] = True
            parsed = ParseResult(
                action=None, reward=self.incomplete_completion_penalty, obs=DEFAULT_INCOMPLETE_FEEDBACK
            )
        else:
            parsed = self.parser(completion.text)
        # No token ids: the server rendered and sampled them and did not say which they were.
        trace = TokenTrace(
            prompt_token_ids=(),
            completion_token_ids=(),
            finish_reason=completion.finish_reason,
            sampling_temperature=spec.sampling.temperature,
        )
        step = AgentActStep(
            trace=trace,
            prompt_messages=prompt_messages,
            action=completion.text,
            action_target="env",
            parse_result=parsed,
            info=info,
        )
        return AgentActResult(steps=[step])
