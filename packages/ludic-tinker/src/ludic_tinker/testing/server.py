"""A loopback fake of the Tinker service, for driving the unmodified ``tinker`` SDK offline.

Only what cannot run here is faked: the remote service. The SDK, its HTTP transport, its protobuf
wire format and its futures are the real ones. The fake speaks the endpoints and wire formats the SDK
uses (JSON for most requests, protobuf for ``forward_backward`` bodies and for sample and
forward-backward results), parses every JSON request with the installed SDK's own strict pydantic
request models, and is backed by :class:`~ludic_tinker.testing.model.TinyLM`, so sampling, logprobs,
``forward_backward`` and ``optim_step`` are real computations.

It also checks what it receives, beyond what the SDK checks client-side: every ``loss_fn_inputs``
tensor has the datum's input length, each loss gets exactly the inputs it needs with the right dtypes,
token ids are in the vocabulary, sampling requests carry ``max_tokens``, and training requests arrive
in ``seq_id`` order. A violation fails the request (``RequestFailedError``, category user) and is
recorded in :attr:`FakeTinkerService.violations` (see :meth:`FakeTinkerService.raise_for_violations`).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

from ludic_tinker.testing.forward_backward import (
    ForwardBackwardCall,
    decode_forward_backward,
    run_forward_backward,
)
from ludic_tinker.testing.loopback import LoopbackHandler, LoopbackServer, Result, Violation
from ludic_tinker.testing.model import FakeTokenizer, TinyLM, require_torch, sample_sequence, seed_from_name

if TYPE_CHECKING:
    import torch

FAKE_BASE_MODEL = "fake/tiny-char-lm"
"""The base model the fake serves unless told other names (``FakeTinkerService(base_models=...)``)."""
FAKE_API_KEY = "tml-fake-api-key"
"""An API key the fake accepts: it checks only the ``tml-`` prefix the real keys have."""


@attrs.define
class TrainingRun:
    model_id: str
    base_model: str
    lora_rank: int
    model: TinyLM
    optimizer: torch.optim.AdamW
    last_seq_id: int = 0
    optim_steps: int = 0
    lock: threading.Lock = attrs.field(factory=threading.Lock)


def _new_adamw(model: TinyLM) -> torch.optim.AdamW:
    import torch

    return torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)


class FakeTinkerService:
    """Start with :meth:`start` (or use :func:`~ludic_tinker.testing.fake_tinker_service`); point the
    SDK at :attr:`base_url` with an api key ``tml-...`` (:attr:`api_key`).

    ``seed`` seeds the sampler when a request carries no seed; each base model's initial weights are
    a function of its name only. ``base_models`` are the names ``create_model`` and
    ``create_sampling_session`` accept: all of them are the same tiny byte-level architecture.
    """

    api_key: str = FAKE_API_KEY

    def __init__(self, *, seed: int = 0, base_models: tuple[str, ...] = (FAKE_BASE_MODEL,)) -> None:
        require_torch()
        if isinstance(base_models, str) or not base_models:
            raise ValueError(f"base_models must be a non-empty tuple of names, got {base_models!r}")
        self.tokenizer = FakeTokenizer()
        self.base_models = base_models
        self.violations: list[str] = []
        self.forward_backward_calls: list[ForwardBackwardCall] = []
        self.optim_step_params: list[dict[str, Any]] = []
        self.sample_requests: list[dict[str, Any]] = []
        self.endpoint_counts: dict[str, int] = {}
        self.fail_next: dict[str, str] = {}
        """Endpoint path → error message: the next request to it fails with that user error."""
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._runs: dict[str, TrainingRun] = {}
        self._samplers: dict[str, tuple[str, TinyLM]] = {}
        self._saved: dict[str, dict[str, Any]] = {}
        self._futures: dict[str, Result] = {}
        self._base_weights = {
            name: TinyLM(self.tokenizer.vocab_size, seed=seed_from_name(name)).state_dict()
            for name in base_models
        }
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake Tinker service is not started")
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"  # the address start() binds

    def start(self) -> FakeTinkerService:
        if self._server is not None:
            raise RuntimeError(f"the fake Tinker service is already started at {self.base_url}")
        service = self

        class Handler(LoopbackHandler):
            fake = service
            routes = _JSON_ROUTES

        self._server = LoopbackServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-tinker", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if server is not None:
            server.close_connections()

    def __enter__(self) -> FakeTinkerService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def raise_for_violations(self) -> None:
        """Raise ``AssertionError`` listing every invalid request received so far, if any.

        The SDK sees each one as a failed request already; this catches those a caller swallowed.
        """
        if self.violations:
            raise AssertionError(
                f"the fake Tinker service received {len(self.violations)} invalid request(s): {self.violations}"
            )

    # ------------------------------------------------------------------ introspection for tests

    def training_run(self, model_id: str) -> TrainingRun:
        return self._runs[model_id]

    @property
    def training_runs(self) -> list[TrainingRun]:
        return list(self._runs.values())

    @property
    def sampler_ids(self) -> list[str]:
        return list(self._samplers)

    def base_model_instance(self, name: str = FAKE_BASE_MODEL) -> TinyLM:
        model = TinyLM(self.tokenizer.vocab_size, seed=0)
        model.load_state_dict(self._base_weights[name])
        return model

    # ------------------------------------------------------------------ helpers

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def _future(self, result: Result) -> dict[str, Any]:
        request_id = self._next_id("req")
        with self._lock:
            self._futures[request_id] = result
        return {"request_id": request_id}

    @staticmethod
    def _json(obj: Any) -> Result:
        return Result(json.dumps(obj).encode(), "application/json")

    def _user_error(self, message: str) -> Result:
        return self._json({"error": message, "category": "user"})

    def _violation(self, message: str) -> Result:
        with self._lock:
            self.violations.append(message)
        return self._user_error(message)

    def _check_tokens(self, tokens: list[int], what: str) -> None:
        bad = [t for t in tokens if not 0 <= t < self.tokenizer.vocab_size]
        if bad:
            raise Violation(
                f"{what} holds token ids outside the vocabulary (size {self.tokenizer.vocab_size}): {bad[:5]}"
            )

    def _new_run(self, model_id: str, base_model: str, rank: int) -> TrainingRun:
        if base_model not in self._base_weights:
            raise Violation(f"unknown base_model {base_model!r}; the fake serves {list(self._base_weights)}")
        model = TinyLM(self.tokenizer.vocab_size, seed=0)
        model.load_state_dict(self._base_weights[base_model])
        run = TrainingRun(model_id, base_model, rank, model, _new_adamw(model))
        with self._lock:
            self._runs[model_id] = run
        return run

    def _run(self, model_id: str) -> TrainingRun:
        try:
            return self._runs[model_id]
        except KeyError:
            raise Violation(f"unknown model_id {model_id!r}") from None

    def _check_seq(self, run: TrainingRun, seq_id: int | None, what: str) -> None:
        # Requests on one training client must be applied in the order they were submitted.
        if seq_id is None:
            raise Violation(f"{what} for {run.model_id} carries no seq_id")
        if seq_id <= run.last_seq_id:
            raise Violation(
                f"{what} seq_id {seq_id} arrived after seq_id {run.last_seq_id} on {run.model_id}"
            )
        run.last_seq_id = seq_id

    # ------------------------------------------------------------------ endpoints (JSON)

    def create_session(self, body: dict[str, Any]) -> Any:
        types.CreateSessionRequest.model_validate(body)
        return {"session_id": self._next_id("session"), "type": "create_session"}

    def create_model(self, body: dict[str, Any]) -> Any:
        req = types.CreateModelRequest.model_validate(body)
        model_id = f"{req.session_id}:train:{req.model_seq_id}"
        rank = req.lora_config.rank if req.lora_config is not None else 32
        try:
            self._new_run(model_id, req.base_model, rank)
        except Violation as exc:
            return self._future(self._violation(str(exc)))
        return self._future(self._json({"model_id": model_id, "type": "create_model"}))

    def get_info(self, body: dict[str, Any]) -> Any:
        req = types.GetInfoRequest.model_validate(body)
        run = self._run(req.model_id)
        return {
            "model_id": run.model_id,
            "model_data": {"arch": "tiny-char-lm", "model_name": run.base_model},
            "is_lora": True,
            "lora_rank": run.lora_rank,
            "model_name": run.base_model,
            "type": "get_info",
        }

    def optim_step(self, body: dict[str, Any]) -> Any:
        import torch

        req = types.OptimStepRequest.model_validate(body)
        try:
            run = self._run(req.model_id)
            params = req.optim_params
            if not isinstance(params, types.AdamParams):
                raise Violation(f"optim_step got {type(params).__name__}, the fake run uses Adam")
            with run.lock:
                self._check_seq(run, req.seq_id, "optim_step")
                self.optim_step_params.append(params.model_dump())
                for group in run.optimizer.param_groups:
                    group.update(
                        lr=params.learning_rate,
                        betas=(params.beta1, params.beta2),
                        eps=params.eps,
                        weight_decay=params.weight_decay,
                    )
                grads = [p.grad for p in run.model.parameters() if p.grad is not None]
                grad_norm = (
                    float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0
                )
                if params.grad_clip_norm > 0:
                    torch.nn.utils.clip_grad_norm_(run.model.parameters(), params.grad_clip_norm)
                run.optimizer.step()
                run.optimizer.zero_grad(set_to_none=True)
                run.optim_steps += 1
        except Violation as exc:
            return self._future(self._violation(str(exc)))
        return self._future(self._json({"metrics": {"grad_norm:mean": grad_norm}}))

    def _snapshot(self, run: TrainingRun) -> TinyLM:
        model = TinyLM(self.tokenizer.vocab_size, seed=0)
        model.load_state_dict(copy.deepcopy(run.model.state_dict()))
        return model

    def save_weights_for_sampler(self, body: dict[str, Any]) -> Any:
        req = types.SaveWeightsForSamplerRequest.model_validate(body)
        try:
            run = self._run(req.model_id)
            with run.lock:
                self._check_seq(run, req.seq_id, "save_weights_for_sampler")
                snapshot = self._snapshot(run)
        except Violation as exc:
            return self._future(self._violation(str(exc)))
        if req.path is None:
            sampler_id = f"{run.model_id}:sample:{req.sampling_session_seq_id}"
            self._samplers[sampler_id] = (run.base_model, snapshot)
            result = {"sampling_session_id": sampler_id, "type": "save_weights_for_sampler"}
        else:
            path = f"tinker://{run.model_id}/sampler_weights/{req.path}"
            self._saved[path] = {"kind": "sampler", "base_model": run.base_model, "model": snapshot}
            result = {"path": path, "type": "save_weights_for_sampler"}
        return self._future(self._json(result))

    def save_weights(self, body: dict[str, Any]) -> Any:
        req = types.SaveWeightsRequest.model_validate(body)
        try:
            run = self._run(req.model_id)
            if not req.path:
                raise Violation("save_weights needs a name")
            path = f"tinker://{run.model_id}/weights/{req.path}"
            if path in self._saved and not req.overwrite:
                raise Violation(f"checkpoint {path} exists and overwrite is false")
            with run.lock:
                self._check_seq(run, req.seq_id, "save_weights")
                self._saved[path] = {
                    "kind": "state",
                    "base_model": run.base_model,
                    "lora_rank": run.lora_rank,
                    "weights": copy.deepcopy(run.model.state_dict()),
                    "optimizer": copy.deepcopy(run.optimizer.state_dict()),
                }
        except Violation as exc:
            return self._future(self._violation(str(exc)))
        return self._future(self._json({"path": path, "type": "save_weights"}))

    def load_weights(self, body: dict[str, Any]) -> Any:
        req = types.LoadWeightsRequest.model_validate(body)
        try:
            saved = self._saved.get(req.path)
            if saved is None or saved["kind"] != "state":
                raise Violation(f"no training checkpoint at {req.path!r}")
            if req.model_id is not None:
                run = self._run(req.model_id)
                with run.lock:
                    self._check_seq(run, req.seq_id, "load_weights")
            else:
                if req.session_id is None or req.model_seq_id is None:
                    raise Violation("load_weights needs model_id, or session_id and model_seq_id")
                model_id = f"{req.session_id}:train:{req.model_seq_id}"
                run = self._new_run(model_id, req.base_model or saved["base_model"], saved["lora_rank"])
            with run.lock:
                run.model.load_state_dict(copy.deepcopy(saved["weights"]))
                run.optimizer = _new_adamw(run.model)
                if req.optimizer:
                    run.optimizer.load_state_dict(copy.deepcopy(saved["optimizer"]))
        except Violation as exc:
            return self._future(self._violation(str(exc)))
        return self._future(self._json({"path": req.path, "model_id": run.model_id, "type": "load_weights"}))

    def create_sampling_session(self, body: dict[str, Any]) -> Any:
        req = types.CreateSamplingSessionRequest.model_validate(body)
        sampler_id = f"{req.session_id}:sample:{req.sampling_session_seq_id}"
        if req.model_path is not None:
            saved = self._saved.get(req.model_path)
            if saved is None or saved["kind"] != "sampler":
                raise Violation(f"no sampler weights at {req.model_path!r}")
            self._samplers[sampler_id] = (saved["base_model"], saved["model"])
        elif req.base_model is not None:
            if req.base_model not in self._base_weights:
                raise Violation(f"unknown base_model {req.base_model!r}")
            self._samplers[sampler_id] = (req.base_model, self.base_model_instance(req.base_model))
        else:
            raise Violation("create_sampling_session needs model_path or base_model")
        return {"sampling_session_id": sampler_id, "type": "create_sampling_session"}

    def asample(self, body: dict[str, Any]) -> Any:
        req = types.SampleRequest.model_validate(body)
        self.sample_requests.append(body)
        n = req.num_samples
        seq_ids = [self._next_id("seq") for _ in range(n)]
        try:
            result = self._sample(req)
        except Violation as exc:
            return {**self._future(self._violation(str(exc))), "sample_sequence_ids": seq_ids}
        return {**self._future(result), "sample_sequence_ids": seq_ids}

    def _sample(self, req: Any) -> Result:
        if req.sampling_session_id is None or req.sampling_session_id not in self._samplers:
            raise Violation(f"unknown sampling_session_id {req.sampling_session_id!r}")
        _, model = self._samplers[req.sampling_session_id]
        prompt = req.prompt.to_ints()
        if not prompt:
            raise Violation("sample got an empty prompt")
        self._check_tokens(prompt, "the prompt")
        params = req.sampling_params
        if params.max_tokens is None or params.max_tokens < 1:
            raise Violation(f"sampling_params.max_tokens must be set and >= 1, got {params.max_tokens!r}")
        if params.temperature < 0 or not 0 < params.top_p <= 1:
            raise Violation(f"invalid temperature/top_p: {params.temperature!r}/{params.top_p!r}")
        stop = params.stop
        stop_ids: frozenset[int] = frozenset({self.tokenizer.eos_token_id})
        stop_strings: list[str] = []
        if stop is not None:
            stop_list = [stop] if isinstance(stop, str) else list(stop)
            if all(isinstance(s, int) for s in stop_list):
                self._check_tokens([int(s) for s in stop_list], "sampling_params.stop")
                stop_ids = frozenset(int(s) for s in stop_list)
            elif all(isinstance(s, str) for s in stop_list):
                stop_ids, stop_strings = frozenset(), [str(s) for s in stop_list]
            else:
                raise Violation(f"sampling_params.stop mixes strings and token ids: {stop_list!r}")
        import torch

        seed = params.seed if params.seed is not None else self._rng.randrange(2**31)
        gen = torch.Generator().manual_seed(seed)
        out = pb.SampleResponse()
        for _ in range(req.num_samples):
            tokens, logprobs, reason = sample_sequence(
                model,
                prompt,
                max_tokens=params.max_tokens,
                temperature=params.temperature,
                top_k=params.top_k,
                top_p=params.top_p,
                stop_token_ids=stop_ids,
                stop_strings=stop_strings,
                generator=gen,
            )
            seq = out.sequences.add()
            seq.tokens = np.asarray(tokens, dtype=np.int32).tobytes()
            seq.logprobs = np.asarray(logprobs, dtype=np.float32).tobytes()
            seq.stop_reason = pb.STOP_REASON_STOP if reason == "stop" else pb.STOP_REASON_LENGTH
        if req.prompt_logprobs:
            with torch.no_grad():
                lp = (
                    model.token_logprobs(prompt[:-1], prompt[1:]).numpy() if len(prompt) > 1 else np.array([])
                )
            out.prompt_logprobs = np.concatenate([[np.nan], lp]).astype(np.float32).tobytes()
        return Result(out.SerializeToString(), "application/x-protobuf")

    def retrieve_future(self, body: dict[str, Any]) -> Result:
        req = types.FutureRetrieveRequest.model_validate(body)
        with self._lock:
            result = self._futures.pop(req.request_id, None)
        if result is None:
            return self._user_error(f"unknown request_id {req.request_id!r}")
        return result

    # ------------------------------------------------------------------ forward_backward (protobuf)

    def forward_backward(self, body: bytes) -> Any:
        msg = pb.ForwardBackwardRequest()
        msg.ParseFromString(body)
        try:
            run = self._run(msg.model_id)
            call = decode_forward_backward(msg, self._check_tokens)
            with run.lock:
                self._check_seq(run, msg.seq_id, "forward_backward")
                result = run_forward_backward(run.model, call)
        except Violation as exc:
            return self._future(self._violation(str(exc)))
        self.forward_backward_calls.append(call)
        return self._future(result)


_JSON_ROUTES: dict[str, Callable[[FakeTinkerService, dict[str, Any]], Any]] = {
    "/api/v1/client/config": lambda s, b: {
        **types.ClientConfigResponse().model_dump(),
        # Let ≤0.36 SDKs create clients from checkpoints with one load_weights request, as 0.38 does.
        "create_model_via_load_weights": True,
    },
    "/api/v1/client/dynamic_config": lambda s, b: {},
    "/api/v1/create_session": FakeTinkerService.create_session,
    "/api/v1/session_heartbeat": lambda s, b: {"type": "session_heartbeat"},
    "/api/v1/telemetry": lambda s, b: {"status": "accepted"},
    "/api/v1/create_model": FakeTinkerService.create_model,
    "/api/v1/get_info": FakeTinkerService.get_info,
    "/api/v1/optim_step": FakeTinkerService.optim_step,
    "/api/v1/save_weights": FakeTinkerService.save_weights,
    "/api/v1/save_weights_for_sampler": FakeTinkerService.save_weights_for_sampler,
    "/api/v1/load_weights": FakeTinkerService.load_weights,
    "/api/v1/create_sampling_session": FakeTinkerService.create_sampling_session,
    "/api/v1/asample": FakeTinkerService.asample,
    "/api/v1/retrieve_future": FakeTinkerService.retrieve_future,
    "/api/v1/healthz": lambda s, b: {"status": "ok"},
}


_SDK_ENV = ("TINKER_BASE_URL", "TINKER_API_KEY")


@contextlib.contextmanager
def fake_tinker_service(
    *,
    seed: int = 0,
    base_models: Sequence[str] = (FAKE_BASE_MODEL,),
    set_env: bool = True,
    check: bool = True,
) -> Iterator[FakeTinkerService]:
    """Run a :class:`FakeTinkerService` on a free loopback port for the duration of a ``with`` block.

    With ``set_env`` (the default) ``TINKER_BASE_URL`` and ``TINKER_API_KEY`` point at the fake inside
    the block, so ``ludic_tinker.connect()`` and ``tinker.ServiceInterface()`` reach it without
    arguments; their previous values (or absence) are restored on exit. The environment is
    process-wide: with ``set_env`` do not run two of these blocks at once, or pass
    ``service.base_url`` and ``service.api_key`` explicitly with ``set_env=False``.

    With ``check`` (the default) a block that exits normally raises ``AssertionError`` if the fake
    received any request the real service would reject (:meth:`FakeTinkerService.raise_for_violations`).
    The server is stopped on exit either way. Needs torch (``pip install "ludic-tinker[torch]"``).
    """
    service = FakeTinkerService(seed=seed, base_models=tuple(base_models)).start()
    saved = {name: os.environ.get(name) for name in _SDK_ENV}
    try:
        if set_env:
            os.environ["TINKER_BASE_URL"] = service.base_url
            os.environ["TINKER_API_KEY"] = service.api_key
        yield service
    finally:
        if set_env:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        service.stop()
    if check:
        service.raise_for_violations()
