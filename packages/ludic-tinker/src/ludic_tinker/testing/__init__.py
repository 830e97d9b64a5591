"""A loopback fake Tinker service for the ludic-tinker tests (see ``server.py``)."""

from .chat_template import ByteChatTemplate
from .model import EOS_ID, FakeTokenizer, TinyLM
from .server import FAKE_BASE_MODEL, FakeTinkerService, ForwardBackwardCall

__all__ = [
    "ByteChatTemplate",
    "EOS_ID",
    "FAKE_BASE_MODEL",
    "FakeTokenizer",
    "FakeTinkerService",
    "ForwardBackwardCall",
    "TinyLM",
]
