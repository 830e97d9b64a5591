"""Pure-Python pieces: the manifest wire format, bucket planning, name normalisation, the serve command."""

from __future__ import annotations

from typing import Any

import pytest

from ludic_core.errors import DataError
from ludic_vllm.names import is_lora_name, normalize_name, normalize_names
from ludic_vllm.update_wire import Manifest, TensorSpec, plan_buckets


def spec(name: str, dtype: str = "float32", shape: tuple[int, ...] = (4,)) -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, shape=shape)


def test_manifest_round_trip_and_checksum_depends_on_order() -> None:
    m = Manifest(entries=(spec("a"), spec("b", "bfloat16", (2, 3))))
    assert Manifest.from_json(m.to_json()) == m
    assert m.total_bytes == 16 + 12
    swapped = Manifest(entries=(m.entries[1], m.entries[0]))
    assert swapped.checksum != m.checksum
    assert Manifest.from_json(m.to_json()).checksum == m.checksum


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ((), "at least one tensor"),
        ((spec("a"), spec("a")), "twice"),
    ],
)
def test_manifest_rejects_bad_entries(entries: tuple[TensorSpec, ...], message: str) -> None:
    with pytest.raises(DataError, match=message):
        Manifest(entries=entries)


def test_tensor_spec_validation_names_the_field() -> None:
    with pytest.raises(DataError, match="dtype"):
        spec("a", "complex64")
    with pytest.raises(DataError, match="shape"):
        spec("a", shape=(-1,))
    with pytest.raises(DataError, match="missing"):
        TensorSpec.from_json({"name": "a"})


def test_buckets_group_consecutive_same_dtype_entries_under_the_cap() -> None:
    m = Manifest(
        entries=(
            spec("a", shape=(10,)),  # 40 B
            spec("b", shape=(10,)),  # 40 B
            spec("c", shape=(10,)),  # 40 B: over the 100 B cap with a and b
            spec("d", "bfloat16", (10,)),  # dtype change
            spec("e", shape=(100,)),  # 400 B: larger than the cap, travels alone
            spec("f", shape=(1,)),
        )
    )
    buckets = plan_buckets(m, 100)
    assert [b.indices for b in buckets] == [(0, 1), (2,), (3,), (4,), (5,)]
    assert [b.dtype for b in buckets] == ["float32", "float32", "bfloat16", "float32", "float32"]
    assert buckets[0].numel == 20
    with pytest.raises(DataError, match="bucket_bytes"):
        plan_buckets(m, 0)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"),
        (
            "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        ("module._orig_mod.model.norm.weight", "model.norm.weight"),
        ("_fsdp_wrapped_module.model.embed_tokens.weight", "model.embed_tokens.weight"),
        ("model.model.layers.1.input_layernorm.weight", "model.layers.1.input_layernorm.weight"),
        ("layers.3.self_attn.o_proj.weight", "model.layers.3.self_attn.o_proj.weight"),
        ("lm_head.weight", "lm_head.weight"),
    ],
)
def test_normalize_name(name: str, expected: str) -> None:
    assert normalize_name(name) == expected


def test_normalize_names_refuses_lora_factors_and_collisions() -> None:
    lora = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
    assert is_lora_name(lora) and not is_lora_name("model.layers.0.self_attn.q_proj.weight")
    with pytest.raises(DataError, match="LoRA factor"):
        normalize_names({lora: 1})
    assert normalize_names({lora: 1, "lm_head.weight": 2}, lora="drop") == {"lm_head.weight": 2}
    with pytest.raises(DataError, match="both normalise"):
        normalize_names({"module.lm_head.weight": 1, "lm_head.weight": 2})


def test_serve_command_injects_the_extension_and_rl_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ludic_vllm import _compat, serve

    monkeypatch.setattr(_compat, "api_server_module", lambda: "vllm.entrypoints.openai.api_server")
    serve.main(["serve", "/m", "--device", "cpu", "--ludic-api-token", "tok", "--port", "9", "--dry-run"])
    out = capsys.readouterr().out
    assert "VLLM_TARGET_DEVICE=cpu" in out and "LUDIC_VLLM_API_TOKEN=***" in out and "tok" not in out
    assert "--worker-extension-cls ludic_vllm.worker.LudicWorkerExtension" in out
    assert "--middleware ludic_vllm.routes.LudicRoutes" in out
    assert "--logprobs-mode processed_logprobs" in out and "--generation-config vllm" in out
    assert "--device" not in out and "--port 9" in out
    argv, _ = serve.build_command("/m", ["--logprobs-mode", "raw_logprobs"])
    assert argv.count("--logprobs-mode") == 1  # the caller's choice wins
    with pytest.raises(SystemExit) as exit_info:
        serve.main(["run", "/m"])
    assert exit_info.value.code == 2 and "usage: ludic-vllm serve" in capsys.readouterr().err
    serve.main(["--help"])  # returns: exit status 0
    assert capsys.readouterr().out.startswith("usage: ludic-vllm serve <model>")


def test_serve_trusts_loopback_only_when_bound_to_loopback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from ludic_vllm import _compat, serve

    monkeypatch.setattr(_compat, "api_server_module", lambda: "vllm.entrypoints.openai.api_server")
    serve.main(
        [
            "serve",
            "/m",
            "--ludic-trust-loopback",
            "--host",
            "127.0.0.1",
            "--ludic-load-dir",
            str(tmp_path),
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert "LUDIC_VLLM_TRUST_LOOPBACK=1" in out and f"LUDIC_VLLM_LOAD_DIRS={tmp_path}" in out
    for host_args in ([], ["--host", "0.0.0.0"], ["--host=10.1.2.3"]):
        with pytest.raises(SystemExit):
            serve.main(["serve", "/m", "--ludic-trust-loopback", *host_args, "--dry-run"])
        assert "needs the server bound to a loopback address" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        serve.main(["serve", "/m", "--ludic-load-dir", str(tmp_path / "missing"), "--dry-run"])
    assert "not a directory" in capsys.readouterr().err


def test_launched_servers_trust_loopback_only_without_a_token_on_loopback() -> None:
    from ludic_vllm.launch import VLLMServer

    assert "--ludic-trust-loopback" in VLLMServer("/m", port=9).command()
    assert "--ludic-trust-loopback" not in VLLMServer("/m", port=9, api_token="t").command()
    assert "--ludic-trust-loopback" not in VLLMServer("/m", host="0.0.0.0", port=9).command()
    cmd = VLLMServer("/m", port=9, load_dirs=["/a", "/b"]).command()
    assert cmd[cmd.index("--ludic-load-dir") :][:4] == ["--ludic-load-dir", "/a", "--ludic-load-dir", "/b"]
