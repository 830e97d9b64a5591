"""LocalPolicyClient generation throughput against the generation loop it replaced.

The workload is the CPU demo's: many concurrent short completions whose prompts share a system prompt
and chat-template header, one batch, temperature 1.0 (training) and 0 (greedy, evaluation). By default
(``--model smollm2``) the model is SmolLM2-135M-Instruct and the prompts are ``--requests`` distinct
Tic-Tac-Toe boards rendered as the demo renders them, ``--max-tokens`` each, three alternated repeats
(about four minutes on 2 CPU cores). ``--model tiny`` is a random Llama shaped like SmolLM2-135M (hidden
576, 9 heads with 3 KV heads, MLP 1536, vocabulary 49,152, tied embeddings) with fewer layers
(``--layers``) and ``--requests`` prompts of ``--prompt-len`` random tokens, the first ``--prefix-len``
of them shared, ``--new-tokens`` new tokens each (no eos can end a row early, so every side generates
exactly the same number of tokens): seconds on 2 CPU cores, and what ``tools/gpu_check.py`` runs on
CUDA.

* ``baseline`` — a verbatim copy of the client's generation loop before this rewrite
  (:func:`legacy_generate`): logits for every prompt position, one Python-level sampling step per row,
  the whole prompt of every row through the model.
* ``local_client`` — ``LocalPolicyClient._generate`` as shipped: last-position logits, batched
  sampling, the shared prefix run once, finished rows dropped, a KV cache that grows in place and
  grouped-query attention that reads each key/value head once.
* ``stock_kv`` — the same client with transformers' own KV cache (``torch.cat`` per token) and
  ``sdpa`` attention (key/value heads copied per query head under a mask): what the last two changes
  save. Its outputs must equal ``local_client``'s exactly, logprobs included (``same_as_stock_kv``).

Both sides run the same requests on the same model, alternated repetition by repetition. Prints one
JSON object: median seconds and tokens/s per side and mode, the speed-up (baseline seconds / client
seconds), the speed-up over ``stock_kv`` and whether greedy tokens agree. The speed-up is what matters: the machines are shared and
absolute times drift.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from _machine import emit, machine_facts

from ludic_core.inference import ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_core.seeding import MAX_SEED
from ludic_train import local_client
from ludic_train.local_client import LocalPolicyClient
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm

# --- the baseline: the generation loop as it was before the rewrite ------------------------------------


def legacy_generate(
    client: LocalPolicyClient, requests: Sequence[TokenCompletionRequest]
) -> list[tuple[list[int], list[float], str]]:
    """The former ``LocalPolicyClient._generate``, unchanged but for ``self`` → ``client``."""
    model = client.model
    device = torch.device(client._device) if client._device is not None else next(model.parameters()).device
    n = len(requests)
    prompt_lens = [len(r.prompt_token_ids) for r in requests]
    width = max(prompt_lens)
    input_ids = torch.full((n, width), client._pad, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    for i, r in enumerate(requests):
        input_ids[i, width - prompt_lens[i] :] = torch.tensor(r.prompt_token_ids, dtype=torch.long)
        attention[i, width - prompt_lens[i] :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)

    generators = []
    for r in requests:
        g = torch.Generator(device="cpu")
        g.manual_seed(r.seed if r.seed is not None else client._seed_rng.randint(0, MAX_SEED))
        generators.append(g)
    stop_ids = [set(client._eos) | set(r.sampling.stop_token_ids) for r in requests]
    max_new = [r.sampling.max_tokens for r in requests]

    outputs: list[list[int]] = [[] for _ in requests]
    logps: list[list[float]] = [[] for _ in requests]
    reasons: list[str | None] = [None] * n

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            positions = (attention.cumsum(-1) - 1).clamp(min=0)
            out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
            cache = out.past_key_values
            logits = out.logits[:, -1, :].float()
            next_pos = positions[:, -1:] + 1
            for _step in range(max(max_new)):
                chosen = torch.full((n,), client._pad, dtype=torch.long)
                for i, r in enumerate(requests):
                    if reasons[i] is not None:
                        continue
                    token, logp = _legacy_sample_row(logits[i], r, generators[i])
                    outputs[i].append(token)
                    logps[i].append(logp)
                    chosen[i] = token
                    if token in stop_ids[i] or client._hit_stop_string(outputs[i], r.sampling.stop):
                        reasons[i] = "stop"
                    elif len(outputs[i]) >= max_new[i]:
                        reasons[i] = "length"
                if all(reason is not None for reason in reasons):
                    break
                attention = torch.cat(
                    [attention, torch.ones((n, 1), dtype=attention.dtype, device=device)], 1
                )
                out = model(
                    input_ids=chosen.view(n, 1).to(device),
                    attention_mask=attention,
                    position_ids=next_pos,
                    past_key_values=cache,
                    use_cache=True,
                )
                cache = out.past_key_values
                logits = out.logits[:, -1, :].float()
                next_pos = next_pos + 1
    finally:
        model.train(was_training)
    return [(outputs[i], logps[i], reasons[i] or "length") for i in range(n)]


def _legacy_sample_row(
    logits: torch.Tensor, request: TokenCompletionRequest, generator: torch.Generator
) -> tuple[int, float]:
    s = request.sampling
    if s.temperature == 0:
        logprobs = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits).item())
        return token, float(logprobs[token].item())
    scaled = logits / s.temperature
    logprobs = torch.log_softmax(scaled, dim=-1)
    filtered = _legacy_filter_logits(scaled, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p)
    probs = torch.softmax(filtered, dim=-1).cpu()
    token = int(torch.multinomial(probs, 1, generator=generator).item())
    return token, float(logprobs[token].item())


def _legacy_filter_logits(
    logits: torch.Tensor, *, top_k: int | None, top_p: float, min_p: float
) -> torch.Tensor:
    out = logits
    if top_k is not None and top_k < out.numel():
        kth = torch.topk(out, top_k).values[-1]
        out = out.masked_fill(out < kth, float("-inf"))
    if min_p > 0:
        probs = torch.softmax(out, dim=-1)
        out = out.masked_fill(probs < min_p * probs.max(), float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


# --- the workload --------------------------------------------------------------------------------------


def smollm2_shaped_model(layers: int) -> Any:
    """A random Llama with SmolLM2-135M's widths and vocabulary, ``layers`` deep (SmolLM2 has 30)."""
    return tiny_causal_lm(
        bpe_tokenizer(),
        arch="llama",
        seed=0,
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
    )


def make_requests(
    n: int, *, prompt_len: int, prefix_len: int, new_tokens: int, temperature: float, vocab: int, seed: int
) -> list[TokenCompletionRequest]:
    rng = random.Random(seed)
    prefix = [rng.randrange(vocab) for _ in range(prefix_len)]
    requests = []
    for i in range(n):
        # Suffix lengths vary around the mean, as board states and dialog turns do.
        suffix = rng.randint(max(1, (prompt_len - prefix_len) // 2), (prompt_len - prefix_len) * 3 // 2)
        requests.append(
            TokenCompletionRequest(
                prompt_token_ids=prefix + [rng.randrange(vocab) for _ in range(suffix)],
                sampling=SamplingParams(temperature=temperature, max_tokens=new_tokens),
                return_=ReturnSpec.for_rl(),
                seed=1000 + i,
            )
        )
    return requests


# The CPU demo's system prompt (Tic-Tac-Toe's run defaults, ludic_envs.run_defaults), copied so the
# workload does not move when the demo's wording does.
DEMO_SYSTEM_PROMPT = (
    "You play Tic-Tac-Toe. Reply with one free cell in move tags, for example <move>B2</move>."
)


def demo_requests(
    tokenizer: Any, n: int, *, temperature: float, max_tokens: int, seed: int
) -> list[TokenCompletionRequest]:
    """``n`` distinct prompts of the demo's shape: the system prompt and the latest board (0-2 moves of
    random players each), rendered with the model's chat template; stop string ``</move>``, one seed
    per request. Distinct on purpose: repeated prompts (a GRPO group's first move) run once, which would
    flatter the client."""
    from ludic_envs.tictactoe import TicTacToeEnv

    rng = random.Random(seed)
    prompts: dict[tuple[int, ...], None] = {}
    while len(prompts) < n:
        env = TicTacToeEnv(opponent="random", seed=rng.randrange(2**31))
        obs = env.reset(seed=rng.randrange(2**31))["agent_0"][0]
        for _ in range(rng.randint(0, 2)):
            free = [
                cell
                for cell in (f"{c}{r}" for r in "123" for c in "ABC")
                if cell in obs.split("Your move")[-1]
            ]
            outcome = env.step({"agent_0": rng.choice(free)})["agent_0"]
            if outcome.terminated:
                break
            obs = outcome.obs
        messages = [{"role": "system", "content": DEMO_SYSTEM_PROMPT}, {"role": "user", "content": obs}]
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        prompts[tuple(ids["input_ids"])] = None
    return [
        TokenCompletionRequest(
            prompt_token_ids=prompt,
            sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, stop=("</move>",)),
            return_=ReturnSpec.for_rl(),
            seed=1000 + i,
        )
        for i, prompt in enumerate(prompts)
    ]


@contextlib.contextmanager
def stock_kv_path() -> Iterator[None]:
    """The client with transformers' own KV cache and ``sdpa`` attention (the ``stock_kv`` side)."""
    cache, attention = local_client.growing_kv_cache, local_client.grouped_kv_attention
    local_client.growing_kv_cache = lambda config, **_: None  # type: ignore[assignment]
    local_client.grouped_kv_attention = lambda model: contextlib.nullcontext(False)  # type: ignore[assignment]
    try:
        yield
    finally:
        local_client.growing_kv_cache, local_client.grouped_kv_attention = cache, attention


def time_both(
    client: LocalPolicyClient, requests: list[TokenCompletionRequest], repeats: int
) -> dict[str, Any]:
    """Median seconds per side over ``repeats`` alternated runs, tokens/s, speed-ups, agreement."""
    times: dict[str, list[float]] = {"baseline": [], "stock_kv": [], "local_client": []}
    outputs: dict[str, list[Any]] = {}
    for _ in range(repeats):  # alternated, so that machine noise hits every side alike
        for side in times:
            start = time.perf_counter()
            if side == "baseline":
                outputs[side] = legacy_generate(client, requests)
            elif side == "stock_kv":
                with stock_kv_path():
                    outputs[side] = client._generate(requests)
            else:
                outputs[side] = client._generate(requests)
            times[side].append(time.perf_counter() - start)
    seconds = {side: statistics.median(t) for side, t in times.items()}
    # Results start with (ids, logprobs, finish reason); the current client also returns prompt logprobs.
    tokens = {side: sum(len(result[0]) for result in out) for side, out in outputs.items()}
    entry: dict[str, Any] = {
        "seconds": seconds,
        "generated_tokens": tokens,
        "tokens_per_s": {side: tokens[side] / seconds[side] for side in seconds},
        "speedup": seconds["baseline"] / seconds["local_client"],
        "speedup_vs_stock_kv": seconds["stock_kv"] / seconds["local_client"],
        "same_as_stock_kv": outputs["stock_kv"] == outputs["local_client"],
    }
    if all(r.sampling.temperature == 0 for r in requests):
        entry["tokens_match_baseline"] = [o[0] for o in outputs["baseline"]] == [
            o[0] for o in outputs["local_client"]
        ]
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        choices=["tiny", "smollm2"],
        default="smollm2",
        help="smollm2: SmolLM2-135M-Instruct and the demo's Tic-Tac-Toe prompts (the bench session's "
        "run, about four minutes); tiny: the random SmolLM2-shaped Llama and random prompts",
    )
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=100, help="tiny: mean prompt length in tokens")
    parser.add_argument("--prefix-len", type=int, default=60, help="tiny: tokens shared by every prompt")
    parser.add_argument("--new-tokens", type=int, default=8, help="tiny: tokens per completion")
    parser.add_argument("--max-tokens", type=int, default=10, help="smollm2: the demo's cap per move")
    parser.add_argument("--layers", type=int, default=2, help="tiny: decoder layers (SmolLM2 has 30)")
    parser.add_argument(
        "--modes", default="sampled,greedy", help="comma-separated: sampled (T=1), greedy (T=0)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternated runs per side; the median counts")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the model runs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    facts = machine_facts()

    result: dict[str, Any] = {
        "benchmark": "local_client_vs_legacy_generate",
        "model": args.model,
        "requests": args.requests,
        "threads": args.threads,
        "device": args.device,
        "repeats": args.repeats,
    }
    if args.model == "tiny":
        model = smollm2_shaped_model(args.layers).to(args.device)
        vocab = model.config.vocab_size
        # No eos in reach: every row generates exactly --new-tokens tokens on both sides.
        client = LocalPolicyClient(model, None, eos_token_ids=[-1], pad_token_id=0)
        result.update(
            layers=args.layers,
            vocab=vocab,
            prompt_len=args.prompt_len,
            prefix_len=args.prefix_len,
            new_tokens=args.new_tokens,
        )

        def workload(temperature: float, n: int) -> list[TokenCompletionRequest]:
            return make_requests(
                n,
                prompt_len=args.prompt_len,
                prefix_len=args.prefix_len,
                new_tokens=args.new_tokens,
                temperature=temperature,
                vocab=vocab,
                seed=0,
            )
    else:
        from ludic_train.testing import load_smollm2

        model, tokenizer = load_smollm2()
        model = model.to(args.device)
        client = LocalPolicyClient(model, tokenizer)
        result.update(max_tokens=args.max_tokens)

        def workload(temperature: float, n: int) -> list[TokenCompletionRequest]:
            return demo_requests(tokenizer, n, temperature=temperature, max_tokens=args.max_tokens, seed=0)

    modes = {"sampled": 1.0, "greedy": 0.0}
    warm = workload(1.0, 4)
    legacy_generate(client, warm)  # first-call costs (allocator, kernels) on both sides
    client._generate(warm)
    for mode in args.modes.split(","):
        requests = workload(modes[mode], args.requests)
        lengths = [len(r.prompt_token_ids) for r in requests]
        entry = time_both(client, requests, args.repeats)
        entry["prompt_tokens"] = {"mean": statistics.mean(lengths), "min": min(lengths), "max": max(lengths)}
        result[mode] = entry
    headline: dict[str, Any] = {}
    for mode in args.modes.split(","):
        headline[f"{mode}: local client (tokens/s)"] = round(result[mode]["tokens_per_s"]["local_client"])
        headline[f"{mode}: local client / legacy generate"] = round(result[mode]["speedup"], 2)
        headline[f"{mode}: local client / stock KV cache and attention"] = round(
            result[mode]["speedup_vs_stock_kv"], 2
        )
    emit(result, facts=facts, headline=headline)


if __name__ == "__main__":
    main()
