"""ludic-core: the torch-free contracts and data plane of Ludic.

The concepts a user needs are importable from the package root::

    from ludic_core import EnvSpec, ProtocolSpec, RolloutEngine, RolloutRequest, SingleAgentEnv

The submodules (``ludic_core.types``, ``ludic_core.env``, ``ludic_core.protocols`` …) stay importable and
hold the rest: the filters, the curricula, serialisation, logging and ``ludic_core.testing``.

The root resolves its names lazily, on first use, so ``import ludic_core`` imports no submodule and
costs no more than it did when the root held only the version.
"""

# Not ``typing.TYPE_CHECKING``: importing ``typing`` would cost several times what the rest of this
# module does. Type checkers treat any ``TYPE_CHECKING`` name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ludic_core.algorithms.spec import AlgorithmSpec
    from ludic_core.batch_sources import OfflineBatchSource, RolloutBatchSource
    from ludic_core.client_pool import ClientPool
    from ludic_core.credit import (
        ConstantCredit,
        CreditAssigner,
        EpisodicReturn,
        GroupNormalizedReturn,
        HybridNormalizedReturn,
        MonteCarloReturn,
        PerStepReward,
    )
    from ludic_core.engine import RolloutEngine
    from ludic_core.env import LudicEnv, SingleAgentEnv
    from ludic_core.errors import (
        ConfigError,
        ConformanceError,
        DataError,
        EpisodeError,
        LudicError,
        LudicTimeoutError,
        MissingExtraError,
        ProtocolError,
        RegistryError,
        TransportError,
    )
    from ludic_core.evaluation import EvalResult, MeanAtK, PassAtK, run_eval, run_eval_sync
    from ludic_core.harness import AgentActResult, AgentActStep, AgentHarness
    from ludic_core.inference import (
        ChatClient,
        InferenceSpec,
        ReturnSpec,
        SamplingParams,
        TokenCompletionRequest,
        VersionedClient,
    )
    from ludic_core.loggers.base import TrainingLogger
    from ludic_core.loggers.console import PrintLogger, RichConsoleLogger
    from ludic_core.loggers.jsonl import JsonlLogger
    from ludic_core.loggers.step_result import StepResult
    from ludic_core.loggers.tee import TeeLogger
    from ludic_core.loggers.wandb import WandbLogger
    from ludic_core.parsing import Parser, ParseResult
    from ludic_core.pipeline import RedisBatchSource, RedisPipelineActor, run_pipeline_actor
    from ludic_core.protocols import (
        DelegatingProtocol,
        InteractionProtocol,
        MultiAgentProtocol,
        SingleAgentProtocol,
    )
    from ludic_core.publisher import PolicyPublisher
    from ludic_core.registry import (
        make_agent,
        make_algorithm,
        make_env,
        make_protocol,
        register_agent,
        register_algorithm,
        register_env,
        register_protocol,
    )
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.rollout_settings import RolloutSettings
    from ludic_core.saw import BatchSource, SAWBatch, SAWItem
    from ludic_core.saw_builder import build_saw_items
    from ludic_core.seeding import derive_seed
    from ludic_core.spo import SPOAdvantage, SPORequests, SPOValueTracker
    from ludic_core.strategies import GRPORequestStrategy, RequestStrategy
    from ludic_core.teachers import TeacherScoredBatchSource, TeacherScorer
    from ludic_core.types import (
        AgentStep,
        ChatResponse,
        EnvironmentStep,
        Info,
        Message,
        Rollout,
        Step,
        StepOutcome,
        TokenTrace,
    )

__version__ = "0.2.0"

# Which submodule defines each public name; ``__getattr__`` imports it on first access.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "ludic_core.harness": ("AgentActResult", "AgentActStep", "AgentHarness"),
    "ludic_core.algorithms.spec": ("AlgorithmSpec",),
    "ludic_core.batch_sources": ("OfflineBatchSource", "RolloutBatchSource"),
    "ludic_core.client_pool": ("ClientPool",),
    "ludic_core.credit": (
        "ConstantCredit",
        "CreditAssigner",
        "EpisodicReturn",
        "GroupNormalizedReturn",
        "HybridNormalizedReturn",
        "MonteCarloReturn",
        "PerStepReward",
    ),
    "ludic_core.engine": ("RolloutEngine",),
    "ludic_core.rollout_settings": ("RolloutSettings",),
    "ludic_core.env": ("LudicEnv", "SingleAgentEnv"),
    "ludic_core.errors": (
        "ConfigError",
        "ConformanceError",
        "DataError",
        "EpisodeError",
        "LudicError",
        "LudicTimeoutError",
        "MissingExtraError",
        "ProtocolError",
        "RegistryError",
        "TransportError",
    ),
    "ludic_core.evaluation": ("EvalResult", "MeanAtK", "PassAtK", "run_eval", "run_eval_sync"),
    "ludic_core.loggers.base": ("TrainingLogger",),
    "ludic_core.loggers.console": ("PrintLogger", "RichConsoleLogger"),
    "ludic_core.loggers.jsonl": ("JsonlLogger",),
    "ludic_core.loggers.step_result": ("StepResult",),
    "ludic_core.loggers.tee": ("TeeLogger",),
    "ludic_core.loggers.wandb": ("WandbLogger",),
    "ludic_core.inference": (
        "ChatClient",
        "InferenceSpec",
        "ReturnSpec",
        "SamplingParams",
        "TokenCompletionRequest",
        "VersionedClient",
    ),
    "ludic_core.parsing": ("ParseResult", "Parser"),
    "ludic_core.pipeline": ("RedisBatchSource", "RedisPipelineActor", "run_pipeline_actor"),
    "ludic_core.publisher": ("PolicyPublisher",),
    "ludic_core.protocols": (
        "DelegatingProtocol",
        "InteractionProtocol",
        "MultiAgentProtocol",
        "SingleAgentProtocol",
    ),
    "ludic_core.registry": (
        "make_agent",
        "make_algorithm",
        "make_env",
        "make_protocol",
        "register_agent",
        "register_algorithm",
        "register_env",
        "register_protocol",
    ),
    "ludic_core.requests": ("EnvSpec", "ProtocolSpec", "RolloutRequest"),
    "ludic_core.saw": ("BatchSource", "SAWBatch", "SAWItem"),
    "ludic_core.saw_builder": ("build_saw_items",),
    "ludic_core.seeding": ("derive_seed",),
    "ludic_core.spo": ("SPOAdvantage", "SPORequests", "SPOValueTracker"),
    "ludic_core.strategies": ("GRPORequestStrategy", "RequestStrategy"),
    "ludic_core.teachers": ("TeacherScoredBatchSource", "TeacherScorer"),
    "ludic_core.types": (
        "AgentStep",
        "ChatResponse",
        "EnvironmentStep",
        "Info",
        "Message",
        "Rollout",
        "Step",
        "StepOutcome",
        "TokenTrace",
    ),
}
_MODULE_OF: dict[str, str] = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "AgentActResult",
    "AgentActStep",
    "AgentHarness",
    "AgentStep",
    "AlgorithmSpec",
    "BatchSource",
    "ChatClient",
    "ChatResponse",
    "ClientPool",
    "ConfigError",
    "ConformanceError",
    "ConstantCredit",
    "CreditAssigner",
    "DataError",
    "DelegatingProtocol",
    "EnvSpec",
    "EnvironmentStep",
    "EpisodeError",
    "EpisodicReturn",
    "EvalResult",
    "GRPORequestStrategy",
    "GroupNormalizedReturn",
    "HybridNormalizedReturn",
    "InferenceSpec",
    "Info",
    "InteractionProtocol",
    "JsonlLogger",
    "LudicEnv",
    "LudicError",
    "LudicTimeoutError",
    "MeanAtK",
    "Message",
    "MissingExtraError",
    "MonteCarloReturn",
    "MultiAgentProtocol",
    "OfflineBatchSource",
    "ParseResult",
    "Parser",
    "PassAtK",
    "PerStepReward",
    "PolicyPublisher",
    "PrintLogger",
    "ProtocolError",
    "ProtocolSpec",
    "RedisBatchSource",
    "RedisPipelineActor",
    "RegistryError",
    "RequestStrategy",
    "ReturnSpec",
    "RichConsoleLogger",
    "Rollout",
    "RolloutBatchSource",
    "RolloutEngine",
    "RolloutRequest",
    "RolloutSettings",
    "SAWBatch",
    "SAWItem",
    "SPOAdvantage",
    "SPORequests",
    "SPOValueTracker",
    "SamplingParams",
    "SingleAgentEnv",
    "SingleAgentProtocol",
    "Step",
    "StepOutcome",
    "StepResult",
    "TeacherScoredBatchSource",
    "TeacherScorer",
    "TeeLogger",
    "TokenCompletionRequest",
    "TokenTrace",
    "TrainingLogger",
    "TransportError",
    "VersionedClient",
    "WandbLogger",
    "__version__",
    "build_saw_items",
    "derive_seed",
    "make_agent",
    "make_algorithm",
    "make_env",
    "make_protocol",
    "register_agent",
    "register_algorithm",
    "register_env",
    "register_protocol",
    "run_eval",
    "run_eval_sync",
    "run_pipeline_actor",
]

# Not for type checkers: they read the names from the imports above (see ludic_core.exports).
if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(__name__, _MODULE_OF, globals())
