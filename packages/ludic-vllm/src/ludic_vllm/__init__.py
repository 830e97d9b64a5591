"""ludic-vllm: the vLLM backend of Ludic.

* :mod:`ludic_vllm.client` — :class:`~ludic_vllm.client.VLLMClient`, the async token-in/token-out
  ``ChatClient`` (needs only aiohttp);
* :mod:`ludic_vllm.serve`, :mod:`ludic_vllm.routes`, :mod:`ludic_vllm.worker` — the server extension
  (``ludic-vllm serve``; needs the ``server`` extra);
* :mod:`ludic_vllm.publisher` — weight publishers (needs the ``publisher`` extra);
* :mod:`ludic_vllm.launch` — start and stop a server subprocess from scripts and tests.
"""

__version__ = "0.1.0"
