"""Hierarchical agents: an agent hands subtasks to fresh sub-agents through an external tool call.

The agent runs exactly as under :class:`~ludic_core.protocols.SingleAgentProtocol` (this protocol is one
of those plus an external tool handler). A call of the delegate tool starts a *child episode*: a fresh
agent, its own context, its own env and turn budget; the child's answer comes back as the tool result
and the parent acts again in the same turn. Children run under a ``DelegatingProtocol`` too, one level
deeper, so they may delegate in turn, up to ``max_depth``.

Every agent of the tree gets its own rollout, so sub-agents are trained on their own decisions with
the outcome of the agent that delegated to them (``child_reward``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from ludic_core.env import LudicEnv
from ludic_core.errors import ConfigError, LudicTimeoutError, ProtocolError
from ludic_core.harness import AgentHarness, ExternalToolHandler
from ludic_core.logs import get_logger
from ludic_core.protocols.acting import failure_from
from ludic_core.protocols.base import EpisodeRun, InteractionProtocol
from ludic_core.protocols.child_reward import CHILD_REWARD_MODES, ChildRewardMode, apply_child_reward
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.protocols.subtask_env import SubtaskEnv
from ludic_core.seeding import derive_seed
from ludic_core.types import AgentStep, EpisodeFailure, Info, Rollout, ToolCall, ToolResult
from ludic_core.validation import int_at_least, one_of, positive_number

__all__ = [
    "DEFAULT_DELEGATE_TOOL",
    "ChildAgentFactory",
    "ChildEnvFactory",
    "DelegatingProtocol",
    "DelegationSettings",
    "check_child_env_factory",
    "child_answer",
]

log = get_logger(__name__)

DEFAULT_DELEGATE_TOOL = "delegate"

ChildAgentFactory: TypeAlias = Callable[[], AgentHarness]
"""Builds a fresh sub-agent for every delegate call (agents keep their dialog, so none is reused)."""

ChildEnvFactory: TypeAlias = Callable[[Mapping[str, Any]], LudicEnv[Any]]
"""Builds the env of a child episode from the delegate call's parsed JSON arguments."""


def _short(value: object, limit: int = 200) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tool_name(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"{type(instance).__name__}.{attribute.name} must be a non-empty str, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class DelegationSettings:
    """How a :class:`DelegatingProtocol` runs delegate calls (each field is described there); every
    level of the tree shares it. ``attrs.evolve(settings, max_depth=1)`` changes one field."""

    delegate_tool: str = attrs.field(default=DEFAULT_DELEGATE_TOOL, validator=_tool_name)
    child_max_steps: int = attrs.field(default=4, validator=int_at_least(1))
    child_timeout_s: float = attrs.field(default=600.0, validator=positive_number())
    max_depth: int = attrs.field(default=2, validator=int_at_least(1))
    max_concurrent_children: int = attrs.field(default=4, validator=int_at_least(1))
    max_children: int = attrs.field(default=16, validator=int_at_least(1))
    child_reward: ChildRewardMode = attrs.field(default="parent", validator=one_of(*CHILD_REWARD_MODES))

    @classmethod
    def coerce(cls, value: object) -> DelegationSettings:
        """``value`` if it is a :class:`DelegationSettings`, else a mapping (a config's JSON) structured
        into one; anything else, an unknown key or a bad value is a :class:`ConfigError` naming it."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            # Imported here: the config loader (and cattrs) is needed only for settings given as data,
            # not by every engine that imports the protocols.
            from ludic_core.run.loading import structure_config

            return structure_config(cls, value)
        raise ConfigError(
            "DelegatingProtocol.settings must be a DelegationSettings or a mapping of its fields, e.g. "
            f"DelegationSettings(max_depth=1), got {type(value).__name__}: {_short(value, 80)}"
        )


def check_child_env_factory(factory: object) -> None:
    if factory is not None and (isinstance(factory, LudicEnv) or not callable(factory)):
        raise ConfigError(
            "DelegatingProtocol.child_env_factory must be None or a callable (arguments) -> LudicEnv "
            f"returning a fresh env per child, got {type(factory).__name__}: {_short(factory, 80)}"
        )


def check_child_agent_factory(factory: object) -> None:
    if isinstance(factory, AgentHarness) or not callable(factory):
        what = "an agent instance" if isinstance(factory, AgentHarness) else "not callable"
        raise ConfigError(
            f"DelegatingProtocol.child_agent_factory is {what} ({type(factory).__name__}: "
            f"{_short(factory, 80)}); expected a callable returning a fresh agent per delegate call, e.g. "
            "`lambda: Agent(client=client, parser=parser)`"
        )


def child_answer(rollout: Rollout) -> str:
    """What a child episode hands back to its parent: its last parsed action, or an error text that
    says why there is none."""
    failure = rollout.failure
    if failure is not None:
        return (
            f"Error: the sub-agent failed ({failure.stage}: {failure.error_type}: {_short(failure.message)})"
        )
    answers = [step.parsed_action for step in rollout.env_steps]
    if answers:
        return answers[-1]
    return f"Error: the sub-agent ended without an answer (ended_by={rollout.meta.get('ended_by')!r})"


# -- the delegation tree -----------------------------------------------------------------------------


@attrs.define
class _ChildBudget:
    """The episode's allowance of child episodes, shared by every level of the tree."""

    max_children: int
    started: int = 0

    def take(self) -> bool:
        if self.started >= self.max_children:
            return False
        self.started += 1
        return True

    def give_back(self) -> None:
        self.started -= 1


@attrs.frozen
class _Position:
    """Where an agent sits in the delegation tree: its depth and its path of call indices from the root."""

    depth: int
    path: tuple[int, ...]
    call_id: str | None
    budget: _ChildBudget = attrs.field(eq=False)

    @property
    def label(self) -> str:
        return ".".join(map(str, self.path))

    def child(self, index: int, call_id: str) -> _Position:
        return _Position(self.depth + 1, (*self.path, index), call_id, self.budget)

    def meta(self, env_agent_id: object) -> Info:
        if self.depth == 0:
            return {"delegation_role": "root", "delegation_depth": 0}
        # A child's agent_id names its place in the tree, so that group credit (keyed by group id and
        # agent id) baselines the k-th sub-agent of each sample in a group against the k-th sub-agents of
        # the other samples, never against the root agents.
        return {
            "delegation_role": "child",
            "delegation_depth": self.depth,
            "delegation_path": self.label,
            "delegate_call_id": self.call_id,
            "agent_id": f"child@{self.label}",
            "env_agent_id": env_agent_id,
        }


@attrs.define
class _Node:
    rollout: Rollout
    children: list[_Node]

    def flatten(self) -> list[Rollout]:
        """Depth-first, parent before its children, siblings in call order."""
        out = [self.rollout]
        for child in self.children:
            out.extend(child.flatten())
        return out


@attrs.define
class _Launch:
    """One delegate call that started a child episode."""

    call: ToolCall
    invocation: int
    protocol: DelegatingProtocol
    delegator: _Delegator
    node: _Node | None = None


def _step_turn_indices(rollout: Rollout) -> list[int]:
    """The turn index (as the SAW builder numbers turns: runs of one ``turn_id``) of every step."""
    indices: list[int] = []
    for position, step in enumerate(rollout.steps):
        same = position > 0 and rollout.steps[position - 1].turn_id == step.turn_id
        indices.append(indices[-1] if same else (indices[-1] + 1 if indices else 0))
    return indices


class _Delegator:
    """The external tool handler of one agent's episode: runs its delegate calls as child episodes and
    keeps what they produced."""

    def __init__(
        self,
        protocol: DelegatingProtocol,
        position: _Position,
        episode: EpisodeRun,
    ) -> None:
        self.protocol = protocol
        self.position = position
        self.episode = episode
        self.launches: list[_Launch] = []
        self.errors: list[dict[str, str]] = []
        self.invocations: list[tuple[ToolCall, ...]] = []
        self._semaphore = asyncio.Semaphore(protocol.settings.max_concurrent_children)

    async def handle(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        calls = tuple(calls)
        invocation = len(self.invocations)
        self.invocations.append(calls)
        tool = self.protocol.settings.delegate_tool
        results: dict[int, ToolResult] = {}
        extra: list[ToolResult] = []
        others = [(i, c) for i, c in enumerate(calls) if c.name != tool]
        if others:
            # These run first: should the handler raise, the episode fails before any child has started.
            for result in await self._run_other_tools([c for _, c in others]):
                slot = next((i for i, c in others if c.id == result.tool_call_id and i not in results), None)
                if slot is None:
                    extra.append(result)
                else:
                    results[slot] = result
        launched: dict[int, _Launch] = {}
        for i, call in enumerate(calls):
            if call.name != tool:
                continue
            # Children join self.launches only once every call of the act has started: if one raises
            # (a broken child_agent_factory), none of them is left looking like a child that ran.
            start = self._start(call, invocation, index=len(self.launches) + len(launched))
            if isinstance(start, _Launch):
                launched[i] = start
            else:
                results[i] = start
        self.launches.extend(launched.values())
        answers = await asyncio.gather(*(self._run_child(launch) for launch in launched.values()))
        results.update(zip(launched, answers, strict=True))
        return [results[i] for i in sorted(results)] + extra

    async def _run_other_tools(self, calls: list[ToolCall]) -> list[ToolResult]:
        handler = self.protocol.external_tool_handler
        if handler is None:
            raise ProtocolError(
                f"agent called external tools {[c.name for c in calls]}; DelegatingProtocol runs only "
                f"{self.protocol.settings.delegate_tool!r} itself and was given no external_tool_handler for the others"
            )
        out = handler(calls)
        return list(await out if inspect.isawaitable(out) else out)

    def _refuse(self, call: ToolCall, reason: str) -> ToolResult:
        self.errors.append({"call_id": call.id, "error": reason})
        log.info("delegating.call_refused", path=self.position.label, call_id=call.id, reason=reason)
        return ToolResult(tool_call_id=call.id, tool_name=call.name, content=f"Error: {reason}")

    def _start(self, call: ToolCall, invocation: int, *, index: int) -> _Launch | ToolResult:
        protocol = self.protocol
        settings = protocol.settings
        try:
            arguments = json.loads(call.arguments)
        except json.JSONDecodeError as exc:
            return self._refuse(
                call, f"the arguments are not valid JSON ({exc.msg}): {_short(call.arguments)}"
            )
        if not isinstance(arguments, dict):
            return self._refuse(call, f"the arguments must be a JSON object, got {_short(call.arguments)}")
        if self.position.depth + 1 > settings.max_depth:
            return self._refuse(
                call, f"delegation depth limit {settings.max_depth} reached; solve it yourself"
            )
        if not self.position.budget.take():
            return self._refuse(
                call, f"this episode's limit of max_children={settings.max_children} sub-agents is reached"
            )
        try:
            env = (
                SubtaskEnv.from_arguments(arguments)
                if protocol.child_env_factory is None
                else protocol.child_env_factory(arguments)
            )
        except Exception as exc:  # the model's arguments did not make a task: its problem, told to it
            self.position.budget.give_back()
            return self._refuse(
                call, f"could not start the subtask: {type(exc).__name__}: {_short(str(exc))}"
            )
        agent = protocol.child_agent_factory()
        if not isinstance(agent, AgentHarness):
            raise ConfigError(
                f"DelegatingProtocol.child_agent_factory() returned {type(agent).__name__}: {_short(agent, 80)}, "
                "which is not an AgentHarness (reset, on_env_reset, act, on_after_step, on_tool_results)"
            )
        position = self.position.child(index, call.id)
        child = protocol.spawn(agent)
        env_seed, sampling_seed = (
            None if seed is None else derive_seed(seed, "delegate", position.label)
            for seed in (self.episode.env_seed, self.episode.sampling_seed)
        )
        episode = attrs.evolve(
            self.episode,
            env=env,
            max_steps=settings.child_max_steps,
            env_seed=env_seed,
            sampling_seed=sampling_seed,
        )
        return _Launch(
            call=call, invocation=invocation, protocol=child, delegator=_Delegator(child, position, episode)
        )

    async def _run_child(self, launch: _Launch) -> ToolResult:
        position = launch.delegator.position
        limit = self.protocol.settings.child_timeout_s
        async with self._semaphore:
            try:
                node = await asyncio.wait_for(launch.protocol.run_node(launch.delegator), limit)
            except TimeoutError:
                error = LudicTimeoutError(
                    f"child episode {position.label} (delegate call {launch.call.id!r}) did not finish "
                    f"within child_timeout_s={limit}"
                )
                node = launch.protocol.failed_node(
                    launch.delegator, EpisodeFailure.from_exception("timeout", error)
                )
            except Exception as exc:  # reported on the child's rollout and to the parent, never lost
                node = launch.protocol.failed_node(launch.delegator, failure_from(exc))
        launch.node = node
        failure = node.rollout.failure
        if failure is not None:
            log.warning(
                "delegating.child_failed",
                path=position.label,
                call_id=launch.call.id,
                stage=failure.stage,
                error=f"{failure.error_type}: {failure.message}",
            )
        return ToolResult(
            tool_call_id=launch.call.id, tool_name=launch.call.name, content=child_answer(node.rollout)
        )

    def children(self, cause: EpisodeFailure | None) -> list[_Node]:
        """The nodes of every child started, in call order. A child still running can only have been
        cancelled by an ancestor's timeout (``cause``); it is kept as a failed rollout."""
        nodes: list[_Node] = []
        for launch in self.launches:
            if launch.node is None:
                stopped = cause or EpisodeFailure(
                    stage="protocol", error_type="ProtocolError", message="the child episode never finished"
                )
                failure = attrs.evolve(
                    stopped, message=f"cancelled with its enclosing episode: {stopped.message}"
                )
                launch.node = launch.protocol.failed_node(launch.delegator, failure)
            nodes.append(launch.node)
        return nodes

    def locate_calls(self, rollout: Rollout) -> list[tuple[int, int] | None]:
        """``(turn_index, step_index)`` in ``rollout`` of the external call behind each handler invocation.

        Invocations follow the agent's external calls in order, so each one is the next external step
        whose tool calls are the ones the handler got.
        """
        turns = _step_turn_indices(rollout)
        located: list[tuple[int, int] | None] = []
        position = 0
        for calls in self.invocations:
            found: tuple[int, int] | None = None
            while position < len(rollout.steps) and found is None:
                step = rollout.steps[position]
                if (
                    isinstance(step, AgentStep)
                    and step.action_target == "external"
                    and step.tool_calls == calls
                ):
                    found = (turns[position], step.index)
                position += 1
            located.append(found)
        return located


class DelegatingProtocol(InteractionProtocol):
    """Drive one agent like :class:`SingleAgentProtocol`, running its delegate calls as child episodes.

    The delegation options are one :class:`DelegationSettings` value, ``settings`` (a mapping of its
    fields is structured into one, as a ``ProtocolSpec``'s JSON kwargs give it).

    **Delegate calls.** An external tool call named ``delegate_tool`` (default ``"delegate"``) starts a
    child episode: a fresh agent from ``child_agent_factory``, a fresh env from
    ``child_env_factory(arguments)`` (the call's JSON arguments; default :class:`SubtaskEnv`, which
    shows ``arguments["task"]`` and takes the first parsed action as the answer), at most
    ``child_max_steps`` turns with the usual truncation, and the parent's ``timeout_s`` per model call.
    The tool result is :func:`child_answer`: the child's last parsed action, or an ``"Error: ..."``
    text when it failed or ended without one. Other external tools go to ``external_tool_handler``; with
    none given such a call fails the episode with an error naming the tool.

    **Limits** (each violation is an ``"Error: ..."`` tool result that the agent can read, never a crash):
    a child runs under a ``DelegatingProtocol`` too, one level deeper, up to ``max_depth`` (default 2:
    parent -> child -> grandchild); ``max_children`` child episodes per episode, counted over the whole
    tree (a cost bound); arguments that are not a JSON object, or that ``child_env_factory`` rejects.
    Sibling children (several delegate calls of one agent) run concurrently, at most
    ``max_concurrent_children`` at a time per agent (each level has its own bound, so a waiting parent
    never holds a slot its children need). ``child_timeout_s`` bounds each whole child episode.

    **Rollouts.** ``run`` returns the parent's rollout first, then the children's rollouts depth-first
    (each child followed by its own children), siblings in call order. Meta links them: every rollout has
    ``delegation_role`` (``"root"``/``"child"``), ``delegation_depth`` and ``child_rollout_ids`` (its
    direct children); a child has ``parent_rollout_id``, ``parent_turn_index`` (the parent's turn, as the
    SAW builder numbers them, whose tool call started it), ``parent_step_index``, ``delegate_call_id``,
    ``delegation_path`` (call indices from the root, e.g. ``"0.1"``) and ``agent_id="child@<path>"``
    (``env_agent_id`` keeps the env's). Group credit groups rollouts by group id and agent id, so a
    child is baselined against the children at the same place in the other samples of its group, never
    against the parents; samples of one group that delegate differently give groups of other sizes,
    which the strict group assigners reject. Refused calls are listed in ``delegation_errors``.

    **Credit** (``child_reward``, applied top-down once the root episode has ended, so a grandchild sees
    its parent's return after that parent's own reward was set): ``"parent"`` (default) replaces the
    child's own env reward on its final reward step with the parent's total return, ``"own"`` keeps it,
    ``"sum"`` adds both (details in :mod:`ludic_core.protocols.child_reward`). The default is
    ``"parent"`` because the hierarchy is trained for the parent's outcome, and the default
    :class:`SubtaskEnv` has no reward of its own.

    **Failures.** A child that fails (env, agent, client, timeout) gets ``Rollout.failure`` on its
    rollout and its parent an error tool result; the parent's episode goes on. The engine, as for any
    failed rollout, then counts the episode as failed. A child cut off by ``child_timeout_s`` is kept as
    an empty failed rollout; its own children that had finished are kept too.
    """

    name = "delegating"

    def __init__(
        self,
        agent: AgentHarness,
        *,
        child_agent_factory: ChildAgentFactory,
        child_env_factory: ChildEnvFactory | None = None,
        settings: DelegationSettings | Mapping[str, Any] = DelegationSettings(),
        external_tool_handler: ExternalToolHandler | None = None,
        stop_on_parse_error: bool = False,
        max_external_rounds: int = 32,
    ) -> None:
        check_child_agent_factory(child_agent_factory)
        check_child_env_factory(child_env_factory)
        self.agent = agent
        self.child_agent_factory = child_agent_factory
        self.child_env_factory = child_env_factory
        self.settings = DelegationSettings.coerce(settings)
        self.external_tool_handler = external_tool_handler
        self.stop_on_parse_error = stop_on_parse_error
        self.max_external_rounds = max_external_rounds

    def spawn(self, agent: AgentHarness) -> DelegatingProtocol:
        """The protocol of a child episode: the same factories and settings, driving ``agent``."""
        return DelegatingProtocol(
            agent,
            child_agent_factory=self.child_agent_factory,
            child_env_factory=self.child_env_factory,
            settings=self.settings,
            external_tool_handler=self.external_tool_handler,
            stop_on_parse_error=self.stop_on_parse_error,
            max_external_rounds=self.max_external_rounds,
        )

    async def play(self, episode: EpisodeRun) -> list[Rollout]:
        root = _Position(depth=0, path=(), call_id=None, budget=_ChildBudget(self.settings.max_children))
        tree = await self.run_node(_Delegator(self, root, episode))
        self._assign_child_rewards(tree)
        return tree.flatten()

    async def run_node(self, delegator: _Delegator) -> _Node:
        """Run this agent's episode (its children inside it) and return its part of the tree."""
        single = SingleAgentProtocol(
            self.agent,
            stop_on_parse_error=self.stop_on_parse_error,
            external_tool_handler=delegator.handle,
            max_external_rounds=self.max_external_rounds,
        )
        [rollout] = await single.play(delegator.episode)
        return self._node(delegator, rollout, cause=None)

    def failed_node(self, delegator: _Delegator, failure: EpisodeFailure) -> _Node:
        """The part of the tree of a child episode that did not return a rollout of its own."""
        meta: Info = {
            "protocol": self.name,
            "env_name": delegator.episode.env.name,
            "episode_truncated": False,
            "truncation_reason": None,
            "ended_by": "failure",
        }
        return self._node(delegator, Rollout(steps=[], meta=meta, failure=failure), cause=failure)

    def _node(self, delegator: _Delegator, rollout: Rollout, cause: EpisodeFailure | None) -> _Node:
        children = delegator.children(cause)
        rollout.meta["protocol"] = self.name
        rollout.meta.update(delegator.position.meta(env_agent_id=rollout.meta.get("agent_id")))
        rollout.meta["child_rollout_ids"] = [child.rollout.id for child in children]
        if delegator.errors:
            rollout.meta["delegation_errors"] = list(delegator.errors)
        located = delegator.locate_calls(rollout)
        for launch, child in zip(delegator.launches, children, strict=True):
            where = located[launch.invocation]
            child.rollout.meta["parent_rollout_id"] = rollout.id
            child.rollout.meta["parent_turn_index"] = None if where is None else where[0]
            child.rollout.meta["parent_step_index"] = None if where is None else where[1]
        return _Node(rollout, children)

    def _assign_child_rewards(self, node: _Node) -> None:
        parent_return = node.rollout.total_reward
        for child in node.children:
            apply_child_reward(child.rollout, parent_return, self.settings.child_reward)
            self._assign_child_rewards(child)
