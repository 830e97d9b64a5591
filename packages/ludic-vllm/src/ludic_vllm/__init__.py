"""ludic-vllm: the vLLM backend of Ludic.

The root exports the client side: :class:`VLLMClient` (token-in/token-out ``ChatClient``, aiohttp only)
with :class:`ServerControl` for the ``/ludic/`` routes; the weight publishers (:class:`GlooPublisher`,
:class:`NcclPublisher`, :class:`FilePublisher`, :class:`Rank0OnlyPublisher`, configured by
:class:`PublishSettings`; ``publisher`` extra);
:class:`VLLMServer` to run a server subprocess; :class:`VLLMBackendConfig` / :func:`open_vllm_backend`.
The server extension is in :mod:`ludic_vllm.serve`, :mod:`ludic_vllm.routes` and
:mod:`ludic_vllm.worker` (``server`` extra); :mod:`ludic_vllm.sampler` registers the ``vllm`` sampler of
the ``ludic train`` RL recipes. ``import ludic_vllm`` imports neither aiohttp nor vLLM.
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
    from ludic_vllm.publisher import (
        FilePublisher,
        GlooPublisher,
        NcclPublisher,
        PublishSettings,
        Rank0OnlyPublisher,
    )

__version__ = "0.1.0"

if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(globals())
