"""A loopback fake of the Tinker service, for offline tests and dry runs of Tinker recipes.

The unmodified ``tinker`` SDK talks HTTP to a server on ``127.0.0.1`` that speaks the endpoints and wire
formats the SDK uses, backed by a tiny byte-level torch model, so sampling, logprobs, ``forward_backward``
(every built-in loss) and ``optim_step`` (Adam) are real computations and a recipe's whole loop runs in
seconds on a CPU. Requests the real service would reject fail and go to :attr:`FakeTinkerService.violations`.

    with fake_tinker_service() as service:  # sets TINKER_BASE_URL / TINKER_API_KEY inside the block
        training = await create_training_client(connect(), FAKE_BASE_MODEL, rank=4)
        tokenizer = FakeTokenizer()  # the fake's vocabulary is bytes: not a Hub tokenizer

It does not model real base models (use :class:`FakeTokenizer` and ludic-core's byte-level
:class:`~ludic_core.testing.ByteChatTemplate`, re-exported here), LoRA,
latency or capacity, persistence beyond one service, or real numerics: a dry run checks the wiring, not
the recipe. torch (the ``torch`` extra) is imported only when a service or model is created.
"""

from ludic_core.testing.scripted_agent import ByteChatTemplate
from ludic_tinker.testing.forward_backward import ForwardBackwardCall
from ludic_tinker.testing.model import EOS_ID, FakeTokenizer, TinyLM
from ludic_tinker.testing.server import FAKE_API_KEY, FAKE_BASE_MODEL, FakeTinkerService, fake_tinker_service

__all__ = [
    "EOS_ID",
    "FAKE_API_KEY",
    "FAKE_BASE_MODEL",
    "ByteChatTemplate",
    "FakeTinkerService",
    "FakeTokenizer",
    "ForwardBackwardCall",
    "TinyLM",
    "fake_tinker_service",
]
