"""A loopback fake of the Tinker service, for offline tests and dry runs of Tinker recipes.

It is a stand-in for the real service, not a simulation of it. The **unmodified** ``tinker`` SDK
talks HTTP to a server on ``127.0.0.1`` that speaks the endpoints and wire formats the SDK uses and
is backed by a tiny torch language model, so sampling, logprobs, ``forward_backward`` (every
built-in loss: ``cross_entropy``, ``importance_sampling``, ``ppo``, ``cispo``, ``dro``, ``gspo``) and
``optim_step`` (Adam) are real computations, and a recipe's whole loop — sampler hand-over,
checkpoints, resume — runs end to end in seconds on a CPU. It rejects what the real service would
reject or misread (tensor lengths, inputs per loss, dtypes, token ids, ``seq_id`` order), fails the
request and records it in :attr:`FakeTinkerService.violations`.

    from ludic_tinker import connect, create_training_client
    from ludic_tinker.testing import FAKE_BASE_MODEL, ByteChatTemplate, FakeTokenizer, fake_tinker_service

    with fake_tinker_service() as service:  # sets TINKER_BASE_URL / TINKER_API_KEY inside the block
        training = await create_training_client(connect(), FAKE_BASE_MODEL, rank=4)
        tokenizer = FakeTokenizer()  # the fake's vocabulary is bytes: use this, not a Hub tokenizer
        ...

What it does **not** model:

* Real base models. Every base model name it serves is the same ~25k-parameter byte-level network
  (vocabulary: bytes + 3 specials, EOS = 2), randomly initialised from the name; use
  :class:`FakeTokenizer` and :class:`ByteChatTemplate`. ``training_client.get_tokenizer()`` would try
  the Hugging Face Hub for the name and does not work for it.
* LoRA: a "LoRA" run fine-tunes the whole tiny model; the rank is only recorded.
* Scale and timing: no queueing, rate limits, latency, retries or capacity errors (failures can be
  injected with :attr:`FakeTinkerService.fail_next`); requests run synchronously on server threads.
* Persistence and accounts: checkpoints and ``tinker://`` paths live in memory for the life of one
  service; the API key is checked only for the ``tml-`` prefix; the REST listing, download and
  deletion endpoints, and anything else the SDK does not call in ludic's paths, answer 404 (an
  unknown POST is also recorded as a violation).
* Numerics: logprobs are float32 from CPU torch, not from the real service's inference stack, so
  learning curves say nothing about a real model — a dry run checks the wiring, not the recipe.

torch comes with the ``torch`` extra (``pip install "ludic-tinker[torch]"``); this module imports it
only when a service or model is created, so ``import ludic_tinker.testing`` works without it.
"""

from ludic_tinker.testing.chat_template import ByteChatTemplate
from ludic_tinker.testing.model import EOS_ID, FakeTokenizer, TinyLM
from ludic_tinker.testing.server import (
    FAKE_API_KEY,
    FAKE_BASE_MODEL,
    FakeTinkerService,
    ForwardBackwardCall,
    fake_tinker_service,
)

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
