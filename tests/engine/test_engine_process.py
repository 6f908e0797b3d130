"""The engine core in its own process (`EngineProcessClient`): same outputs as in-process,
abort, bad requests, and what a caller sees when the core process dies."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace
from typing import Any

import pytest
from thinkgate import LLM, SamplingParams
from thinkgate.engine.config import EngineConfig
from thinkgate.engine.errors import EngineDeadError
from thinkgate.engine.process.engine_client import EngineProcessClient
from thinkgate.engine.sampling_params import RequestOutputKind, StructuredOutputsParams


@pytest.fixture(scope="module")
def core(demo_dir: str) -> Any:
    client = EngineProcessClient(EngineConfig(model=demo_dir, max_num_seqs=64), "qwen3")
    yield client
    client.shutdown()
    assert not client.process.is_alive()


async def _collect(core: EngineProcessClient, prompt: Any, params: SamplingParams,
                   rid: str) -> list[Any]:
    return [out async for out in core.generate(prompt, params, rid)]


def test_outputs_match_the_in_process_engine(llm: LLM, core: EngineProcessClient) -> None:
    prompts = [[5, 6, 7, 8], [100, 200, 300], [42] * 9]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, logprobs=2)
    expected = llm.generate(prompts, params, use_tqdm=False)
    delta = replace(params, output_kind=RequestOutputKind.DELTA)

    async def main() -> list[list[Any]]:
        return await asyncio.gather(*(_collect(core, p, delta, f"m{i}")
                                      for i, p in enumerate(prompts)))

    for outs, exp in zip(asyncio.run(main()), expected):
        assert len(outs) > 1 and outs[-1].finished and not any(o.finished for o in outs[:-1])
        ids = [t for o in outs for t in o.outputs[0].token_ids]
        text = "".join(o.outputs[0].text for o in outs)
        lps = [e for o in outs for e in o.outputs[0].logprobs]
        assert ids == exp.outputs[0].token_ids and text == exp.outputs[0].text
        assert [sorted(e) for e in lps] == [sorted(e) for e in exp.outputs[0].logprobs]
        assert outs[-1].outputs[0].finish_reason == "length"
        assert outs[0].prompt_token_ids == list(exp.prompt_token_ids)


def test_cumulative_and_final_only_kinds_and_n(core: EngineProcessClient) -> None:
    base = SamplingParams(temperature=1.0, seed=7, n=2, max_tokens=10, ignore_eos=True)
    cumulative = replace(base, output_kind=RequestOutputKind.CUMULATIVE)
    final = replace(base, output_kind=RequestOutputKind.FINAL_ONLY)
    outs = asyncio.run(_collect(core, [9, 10, 11], cumulative, "cum"))
    lengths = [len(o.outputs[0].token_ids) for o in outs]
    assert lengths == sorted(lengths) and lengths[-1] == 10
    (last,) = asyncio.run(_collect(core, [9, 10, 11], final, "fin"))
    assert last.finished and [c.index for c in last.outputs] == [0, 1]
    assert [c.token_ids for c in last.outputs] == [c.token_ids for c in outs[-1].outputs]
    assert last.outputs[0].token_ids != last.outputs[1].token_ids  # seeds differ per sample


def test_a_bad_request_fails_only_its_caller(core: EngineProcessClient) -> None:
    bad = SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(regex="(["))
    good = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)

    async def main() -> tuple[Any, list[Any]]:
        results = await asyncio.gather(_collect(core, [5, 6], bad, "bad"),
                                       _collect(core, [5, 6], good, "good"),
                                       return_exceptions=True)
        return results[0], results[1]

    err, outs = asyncio.run(main())
    assert isinstance(err, ValueError) and "regex" in str(err)
    assert len(outs[-1].outputs[0].token_ids) == 6 and outs[-1].finished  # cumulative (default)
    with pytest.raises(ValueError, match="outside the vocab"):
        asyncio.run(_collect(core, [10**9], good, "oov"))


def test_closing_the_stream_aborts_and_frees_kv(core: EngineProcessClient) -> None:
    params = SamplingParams(temperature=0, max_tokens=500, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)

    async def main() -> int:
        seen = 0
        stream = core.generate([1, 2, 3], params, "long")
        async for out in stream:
            seen += len(out.outputs[0].token_ids)
            if seen >= 3:
                break
        await stream.aclose()
        for _ in range(200):  # the core reports its counters after the abort
            stats = core.stats()
            if stats["num_free_blocks"] == stats["num_kv_blocks"] and not stats["num_running"]:
                break
            await asyncio.sleep(0.01)
        return seen

    assert asyncio.run(main()) >= 3
    stats = core.stats()
    assert stats["num_free_blocks"] == stats["num_kv_blocks"] and stats["num_running"] == 0


def test_a_killed_core_ends_open_streams_and_refuses_new_requests(demo_dir: str) -> None:
    client = EngineProcessClient(EngineConfig(model=demo_dir, max_num_seqs=8), None)
    params = SamplingParams(temperature=0, max_tokens=100_000, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)
    try:
        async def main() -> tuple[int, BaseException | None]:
            seen, error = 0, None
            try:
                async for out in client.generate([1, 2, 3], params, "victim"):
                    seen += len(out.outputs[0].token_ids)
                    if seen == 2:
                        os.kill(client.pid, signal.SIGKILL)
            except EngineDeadError as exc:
                error = exc
            return seen, error

        seen, error = asyncio.run(asyncio.wait_for(main(), timeout=60))
        assert seen >= 2 and error is not None and "exit code -9" in str(error)
        assert not client.is_running
        with pytest.raises(EngineDeadError):
            asyncio.run(_collect(client, [1, 2], params, "after"))
    finally:
        client.shutdown()


def test_core_threads_leave_the_api_a_core_only_for_small_models(monkeypatch) -> None:
    from thinkgate.engine.process import engine_core

    monkeypatch.setattr(engine_core.os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    assert engine_core.default_core_threads(4 << 20) == 3
    assert engine_core.default_core_threads(engine_core.SMALL_MODEL_BYTES) == 4
    monkeypatch.setattr(engine_core.os, "sched_getaffinity", lambda _: {0})
    assert engine_core.default_core_threads(4 << 20) == 1


def test_a_long_prompt_prefills_on_every_core_and_matches_in_process(
        llm: LLM, core: EngineProcessClient) -> None:
    """A small model's core steps on one thread but widens a long prefill to every core
    (long_forward.wide_forward), spinning only briefly at OpenMP barriers; the tokens and
    logprobs stay those of the in-process engine."""
    prompt = [(i * 37) % 3900 + 100 for i in range(600)]  # ids inside the demo vocabulary
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=1)
    expected = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
    outs = asyncio.run(_collect(core, prompt, replace(
        params, output_kind=RequestOutputKind.DELTA), "long"))
    assert [t for o in outs for t in o.outputs[0].token_ids] == expected.token_ids
    got = [e for o in outs for e in o.outputs[0].logprobs]
    for entry, want in zip(got, expected.logprobs):
        assert sorted(entry) == sorted(want)
        for token in entry:
            assert entry[token].logprob == pytest.approx(want[token].logprob, abs=1e-4)
    if len(os.sched_getaffinity(0)) > 1 and not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(
            os.environ):
        with open(f"/proc/{core.pid}/environ", "rb") as f:
            assert b"GOMP_SPINCOUNT=10000" in f.read().split(b"\0")


def test_core_env_bounds_barrier_spins_only_for_a_small_model_on_several_cores(
        monkeypatch, demo_dir: str, tmp_path) -> None:
    from thinkgate.engine.process import engine_core

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setattr(engine_core.os, "sched_getaffinity", lambda _: {0, 1})
    small = EngineConfig(model=demo_dir, device="cpu")
    assert engine_core.core_env(small, None) == {"GOMP_SPINCOUNT": "10000"}
    assert engine_core.core_env(small, 2) == {}  # --engine-threads: the user's count, no widening
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text("{}")
    with open(big / "model.safetensors", "wb") as f:
        f.truncate(engine_core.SMALL_MODEL_BYTES)  # sparse: its size is what counts
    assert engine_core.core_env(EngineConfig(model=str(big), device="cpu"), None) == {}
    for name, value in (("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "0")):
        monkeypatch.setenv(name, value)
        assert engine_core.core_env(small, None) == {}  # the user's own setting wins
        monkeypatch.delenv(name)
    monkeypatch.setattr(engine_core.os, "sched_getaffinity", lambda _: {0})
    assert engine_core.core_env(small, None) == {}


def test_shutdown_ends_open_streams(demo_dir: str) -> None:
    client = EngineProcessClient(EngineConfig(model=demo_dir, max_num_seqs=4), None)
    params = SamplingParams(temperature=0, max_tokens=100_000, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)

    async def main() -> BaseException | None:
        try:
            async for _ in client.generate([1, 2, 3], params, "open"):
                client.shutdown()
        except EngineDeadError as exc:
            return exc
        return None

    error = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert error is not None and "shut down" in str(error)
    assert not client.process.is_alive() and not client.is_running
