"""ludic-vllm: the vLLM backend of Ludic.

The client side is importable from the package root::

    from ludic_vllm import GlooPublisher, VLLMClient, VLLMServer

* :class:`VLLMClient` — the async token-in/token-out ``ChatClient`` (needs only aiohttp), with
  :class:`ServerControl` for the ``/ludic/`` routes and the errors a server reports;
* weight publishers (:class:`GlooPublisher`, :class:`NcclPublisher`, :class:`FilePublisher`,
  :class:`Rank0OnlyPublisher`; publishing needs the ``publisher`` extra);
* :class:`VLLMServer` to start and stop a server subprocess from scripts and tests, and
  :class:`VLLMBackendConfig` / :func:`open_vllm_backend` to build a trainer's client and publisher.

The server extension stays in its submodules, :mod:`ludic_vllm.serve`, :mod:`ludic_vllm.routes`,
:mod:`ludic_vllm.worker` (``ludic-vllm serve``; needs the ``server`` extra). Every submodule keeps its
names importable where they were. :mod:`ludic_vllm.sampler` registers the sampler ``vllm`` of the
``ludic train`` RL recipes (``ludic train tictactoe-grpo backend.kind=vllm``).

The root resolves its names lazily, on first use: ``import ludic_vllm`` imports neither aiohttp nor vLLM.
"""

# Not ``typing.TYPE_CHECKING``: importing ``typing`` would cost more than the rest of this module.
# Type checkers treat any ``TYPE_CHECKING`` name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ludic_vllm.backend import VLLMBackend, VLLMBackendConfig, open_vllm_backend
    from ludic_vllm.client import VLLMClient, VLLMClientConfig
    from ludic_vllm.control import ServerControl, ServerHealth
    from ludic_vllm.errors import EngineDeadError, RequestRejectedError, ServerError, UpdateRejectedError
    from ludic_vllm.launch import VLLMServer, free_port
    from ludic_vllm.publisher import FilePublisher, GlooPublisher, NcclPublisher, Rank0OnlyPublisher

__version__ = "0.1.0"

if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(globals())
