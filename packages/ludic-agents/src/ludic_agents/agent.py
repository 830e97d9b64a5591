"""``Agent``: one model call per turn, a context strategy, a chat template and a parser.

The agent implements :class:`ludic_core.harness.AgentHarness`. Every model call comes back as an
:class:`~ludic_core.harness.AgentActStep` with its exact :class:`~ludic_core.traces.TokenTrace`.
Prompts are rendered locally; within a turn they extend token for token (see
:mod:`ludic_agents.extension`), and how each prompt was built is recorded in the step's ``info``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ludic_agents.chat_template import ChatTemplate, HFChatTemplate
from ludic_agents.context import ContextStrategy, FullDialog, named_context
from ludic_agents.extension import TurnPrompt
from ludic_core.call_timeout import call_timeout
from ludic_core.errors import ConfigError, LudicTimeoutError, ProtocolError
from ludic_core.harness import DEFAULT_ACT_OPTIONS, ActOptions, AgentActResult, AgentActStep
from ludic_core.inference import ChatClient, InferenceSpec, TokenCompletionRequest
from ludic_core.logs import get_logger
from ludic_core.parsing import Parser, ParseResult
from ludic_core.seeding import derive_seed
from ludic_core.types import ChatResponse, FrozenMessage, Info, Message, ToolResult
from ludic_core.validation import check_number

__all__ = ["DEFAULT_INCOMPLETE_FEEDBACK", "Agent", "make_chat_agent"]

log = get_logger(__name__)

# The spec of agents given none, shared: an InferenceSpec is frozen (an agent per episode builds none).
_DEFAULT_INFERENCE = InferenceSpec()

DEFAULT_INCOMPLETE_FEEDBACK = (
    "Your response was cut off because it exceeded the token limit. Please give a shorter answer."
)


class Agent:
    """A single-call agent.

    * ``client``: any :class:`~ludic_core.inference.ChatClient`.
    * ``parser``: turns the completion text into an env action (see :mod:`ludic_agents.parsers`).
    * ``chat_template``: defaults to :class:`HFChatTemplate` over ``client.tokenizer`` when the client
      has one.
    * ``context``: defaults to :class:`FullDialog`; its ``system_prompt`` is the agent's
      ``default_system_prompt``.
    * ``reject_incomplete_completions``: a completion cut by ``max_tokens`` (``finish_reason ==
      "length"``) is a parse failure with ``incomplete_completion_penalty`` and
      ``incomplete_completion_feedback``, and ``info["incomplete_completion"] = True``.
    * ``call_timeout_s``: bound for each model call; when ``act``'s options also give a ``timeout_s``
      (the rollout engine always passes its own), the tighter of the two applies.
    """

    def __init__(
        self,
        *,
        client: ChatClient,
        parser: Parser,
        chat_template: ChatTemplate | None = None,
        context: ContextStrategy | None = None,
        model: str | None = None,
        inference: InferenceSpec | None = None,
        reject_incomplete_completions: bool = True,
        incomplete_completion_penalty: float = -0.1,
        incomplete_completion_feedback: str = DEFAULT_INCOMPLETE_FEEDBACK,
        call_timeout_s: float | None = None,
    ) -> None:
        if not callable(getattr(client, "complete_tokens", None)):
            raise ConfigError(
                f"client must implement complete_tokens (a ChatClient), got {type(client).__name__}"
            )
        if not callable(parser):
            raise ConfigError(f"parser must be callable (str -> ParseResult), got {parser!r}")
        # A finite float penalty and no bound (the defaults: an agent per episode) pass without a call.
        if type(incomplete_completion_penalty) is not float or not math.isfinite(
            incomplete_completion_penalty
        ):
            check_number("incomplete_completion_penalty", incomplete_completion_penalty, optional=True)
        if call_timeout_s is not None:
            check_number("call_timeout_s", call_timeout_s, minimum=0, exclusive=True, optional=True)
        if chat_template is None:
            tokenizer = getattr(client, "tokenizer", None)
            if tokenizer is None or not callable(getattr(tokenizer, "apply_chat_template", None)):
                raise ConfigError(
                    "no chat_template given and the client has no tokenizer with apply_chat_template; "
                    "pass chat_template=HFChatTemplate(tokenizer)"
                )
            chat_template = HFChatTemplate(tokenizer)
        self.client = client
        self.parser = parser
        self.chat_template = chat_template
        self.context = context if context is not None else FullDialog()
        self.model = model
        self.inference = inference if inference is not None else _DEFAULT_INFERENCE
        self.reject_incomplete_completions = reject_incomplete_completions
        self.incomplete_completion_penalty = float(incomplete_completion_penalty)
        self.incomplete_completion_feedback = incomplete_completion_feedback
        self.call_timeout_s = call_timeout_s
        self._turn: TurnPrompt | None = None
        self._turn_calls = 0
        self._pending: list[Message] = []
        self._awaiting_external: set[str] = set()

    # --- AgentHarness -------------------------------------------------------------------------

    @property
    def default_system_prompt(self) -> str | None:
        return self.context.default_system_prompt

    def reset(self, *, system_prompt: str | None = None) -> None:
        self.context.reset(system_prompt=system_prompt)
        self._close_turn()

    def on_env_reset(self, obs: str, info: Info) -> None:
        if self._turn is not None:
            self._close_turn()
        self.context.on_env_reset(obs, info)

    def on_after_step(self, obs: str, info: Info) -> None:
        if self._turn is not None:  # only a turn of several calls stays open between calls
            self._close_turn()
        self.context.on_after_step(obs, info)

    def on_tool_results(self, results: Sequence[ToolResult]) -> None:
        if self._turn is None:
            raise ProtocolError("on_tool_results called but no turn is waiting for external tool results")
        results = list(results)
        unknown = sorted({r.tool_call_id for r in results} - self._awaiting_external)
        if unknown:
            raise ProtocolError(
                f"on_tool_results got results for tool calls {unknown}, which are not awaited "
                f"(awaiting {sorted(self._awaiting_external)})"
            )
        self._awaiting_external -= {r.tool_call_id for r in results}
        self.context.add_tool_results(results)
        self._pending.extend(r.to_message() for r in results)

    async def act(self, options: ActOptions = DEFAULT_ACT_OPTIONS) -> AgentActResult:
        # One model call per turn, and the turn ends with it: the prompt is rendered fresh and no
        # TurnPrompt is kept, since nothing could extend it.
        prompt_messages, prompt_ids = TurnPrompt.render(self.chat_template, self.context.prompt_view())
        response = await self._complete(prompt_ids, options, 0)
        text = self.completion_text(response)
        parse_result, parse_info = self.parse_env_output(text, response.finish_reason)
        info = self._call_info(response)
        info["prompt_render"] = "fresh"
        if parse_info:
            info.update(parse_info)
        return AgentActResult._one(self._env_step(response, text, prompt_messages, 0, parse_result, info))

    # --- building blocks for subclasses -------------------------------------------------------

    def parse_env_output(self, text: str, finish_reason: str | None) -> tuple[ParseResult, Info]:
        """The env-targeted parse: incomplete completions first (when rejected), then the parser."""
        if self.reject_incomplete_completions and finish_reason == "length":
            return (
                ParseResult(None, self.incomplete_completion_penalty, self.incomplete_completion_feedback),
                {"incomplete_completion": True},
            )
        result = self.parser(text)
        if not isinstance(result, ParseResult):
            raise ConfigError(
                f"parser {self.parser!r} returned {type(result).__name__}, expected ParseResult"
            )
        return result, {}

    def _env_step(
        self,
        response: ChatResponse,
        text: str,
        prompt_messages: tuple[Message, ...],
        loop_index: int,
        parse_result: ParseResult,
        info: Info,
    ) -> AgentActStep:
        """The turn's env-targeted last call; the turn closes after it, so its tokens are not added to
        the turn's prompt (nothing extends it)."""
        self.context.add_assistant(FrozenMessage(role="assistant", content=text))
        # A checked response's trace and the turn's frozen messages: the converters would only copy them.
        step = AgentActStep._trusted(
            response.to_trace(), prompt_messages, text, "env", parse_result, loop_index, info=info
        )
        if self._turn is not None:
            self._close_turn()
        return step

    def _close_turn(self) -> None:
        if self._turn is None:
            return  # nothing is open: the pending results and awaited calls belong to a turn
        self._turn = None
        self._turn_calls = 0
        self._pending = []
        self._awaiting_external = set()

    def _next_prompt(
        self, *, tools: Sequence[dict[str, Any]] | None, extra: Sequence[Message] = ()
    ) -> tuple[tuple[int, ...], tuple[Message, ...], Info]:
        """The next prompt of the current turn (its ids and its frozen messages): a fresh render at the
        start of a turn, otherwise the turn's tokens extended by the pending messages (tool results) and
        ``extra`` (prompt-only messages such as a final-answer instruction)."""
        if self._turn is None:
            view = self.context.prompt_view()
            self._turn = TurnPrompt.start(self.chat_template, [*view, *extra] if extra else view, tools=tools)
            self._turn_calls += 1
            return self._turn.prompt_ids, self._turn.messages, {"prompt_render": "fresh"}
        if self._awaiting_external:
            raise ProtocolError(
                f"act called while external tool calls {sorted(self._awaiting_external)} have no results; "
                "pass their results to on_tool_results first"
            )
        new = self._pending + list(extra)
        if not new:
            raise ProtocolError(
                "act called in the middle of a turn with nothing new to show the model; after external tool "
                "calls, pass their results to on_tool_results first"
            )
        prompt_ids, report = self._turn.extend(new)
        self._pending = []
        self._turn_calls += 1
        if "retokenization_divergence" in report:
            log.debug("retokenization_divergence", **report["retokenization_divergence"])
        return prompt_ids, self._turn.messages, {"prompt_render": "extended", **report}

    async def _complete(
        self,
        prompt_ids: Sequence[int],
        options: ActOptions,
        loop_index: int,
    ) -> ChatResponse:
        spec = options.inference if options.inference is not None else self.inference
        seed = None if options.sampling_seed is None else derive_seed(options.sampling_seed, loop_index)
        request = TokenCompletionRequest.from_spec(prompt_ids, spec, seed=seed, model=self.model)
        timeout = options.timeout_s
        if self.call_timeout_s is not None and (timeout is None or self.call_timeout_s < timeout):
            timeout = self.call_timeout_s
        try:
            # Not wait_for (an extra task per call) nor asyncio.timeout (a loop timer per call).
            with call_timeout(timeout):
                response = await self.client.complete_tokens(request)
        except TimeoutError as exc:
            raise LudicTimeoutError(
                f"model call {loop_index} of the turn: {type(self.client).__name__}.complete_tokens did not "
                f"answer within timeout_s={timeout}"
            ) from exc
        # The same tuple handed back (what clients do) needs no element-by-element comparison.
        if response.prompt_token_ids is not request.prompt_token_ids and tuple(
            response.prompt_token_ids
        ) != tuple(request.prompt_token_ids):
            raise ProtocolError(
                f"{type(self.client).__name__} returned prompt_token_ids that differ from the request "
                f"({len(response.prompt_token_ids)} vs {len(request.prompt_token_ids)} tokens)"
            )
        return response

    def completion_text(self, response: ChatResponse) -> str:
        """The completion as text, decoded from the sampled ids with end-of-sequence tokens dropped
        (decoding ourselves keeps special tokens such as ``<think>`` whatever the client's settings)."""
        ids, eos = response.completion_token_ids, self.chat_template.eos_token_ids
        end = len(ids)
        while end and ids[end - 1] in eos:
            end -= 1
        return self.chat_template.decode(ids[:end])

    def _commit_completion(self, response: ChatResponse, message: Message) -> None:
        """Add the sampled tokens to the turn and the assistant message to the context."""
        assert self._turn is not None
        self._turn.add_completion(response.completion_token_ids, message)
        self.context.add_assistant(message)

    @staticmethod
    def _call_info(response: ChatResponse) -> Info:
        info: Info = {"finish_reason": response.finish_reason}
        if response.policy_version_start is not None or response.policy_version_end is not None:
            info["policy_version_start"] = response.policy_version_start
            info["policy_version_end"] = response.policy_version_end
        return info


def make_chat_agent(
    *,
    client: ChatClient,
    parser: Parser,
    system_prompt: str | None = None,
    context: str = "full_dialog",
    **options: Any,
) -> Agent:
    """An :class:`Agent` over ``client``'s own tokenizer and chat template, with a fresh context whose
    system prompt is ``system_prompt`` (None: the env's suggestion). ``context`` names its strategy
    in :data:`~ludic_agents.context.NAMED_CONTEXTS`: ``"full_dialog"`` shows the whole conversation,
    ``"latest_observation"`` the system prompt and the newest observation only (for envs whose
    observation is the whole state, such as a board game).

    Registered as the agent ``"chat"`` (``ludic_core.registry.make_agent("chat", client=..., parser=...)``),
    so packages that may not import ludic-agents, such as ludic-train's ``local`` backend of the
    ``ludic`` command, can still build one; a run config picks the context with
    ``agent_kwargs = {context = "latest_observation"}``. ``options`` are the other :class:`Agent`
    arguments.
    """
    return Agent(client=client, parser=parser, context=named_context(context, system_prompt), **options)
