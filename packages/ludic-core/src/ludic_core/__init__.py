"""ludic-core: the torch-free contracts and data plane of Ludic.

The names a user needs first are importable from the package root::

    from ludic_core import EnvSpec, ProtocolSpec, RolloutEngine, RolloutRequest, SingleAgentEnv

The submodules (``ludic_core.types``, ``ludic_core.errors``, ``ludic_core.credit``, ``ludic_core.loggers``
…) hold the rest: every error, credit assigner, logger, the filters, the curricula, the Redis pipeline,
serialisation and ``ludic_core.testing``.

Each import below is the one declaration of a root name. The root resolves them lazily, on first use
(see :mod:`ludic_core.exports`), so ``import ludic_core`` imports no submodule.
"""

# Not ``typing.TYPE_CHECKING``: importing ``typing`` would cost several times what the rest of this
# module does. Type checkers treat any ``TYPE_CHECKING`` name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ludic_core.algorithms.spec import AlgorithmSpec
    from ludic_core.batch_sources import RolloutBatchSource
    from ludic_core.credit import CreditAssigner, GroupNormalizedReturn
    from ludic_core.engine import RolloutEngine
    from ludic_core.env import LudicEnv, SingleAgentEnv
    from ludic_core.errors import LudicError
    from ludic_core.evaluation import run_eval
    from ludic_core.harness import AgentHarness
    from ludic_core.inference import ChatClient, InferenceSpec, ReturnSpec, SamplingParams
    from ludic_core.parsing import Parser, ParseResult
    from ludic_core.protocols import InteractionProtocol, MultiAgentProtocol, SingleAgentProtocol
    from ludic_core.registry import make_env, register_env
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.rollout_settings import RolloutSettings
    from ludic_core.saw import BatchSource, SAWBatch, SAWItem
    from ludic_core.saw_builder import build_saw_items
    from ludic_core.strategies import GRPORequestStrategy
    from ludic_core.types import Rollout, StepOutcome

__version__ = "0.2.0"

if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(globals())
