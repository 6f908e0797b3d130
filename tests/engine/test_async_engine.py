"""The asyncio engine the server uses: streaming, concurrency, abort, errors."""

from __future__ import annotations

import asyncio

import pytest
from thinkgate import LLM, SamplingParams
from thinkgate.engine.async_engine import AsyncLLMEngine
from thinkgate.engine.sampling_params import RequestOutputKind


@pytest.fixture
def async_engine(llm: LLM):
    engine = AsyncLLMEngine.from_engine(llm.llm_engine)
    yield engine
    engine.shutdown()
    assert not engine.engine.has_unfinished_requests()


def test_streams_deltas_concurrently(llm: LLM, async_engine: AsyncLLMEngine) -> None:
    prompts = ["hello", "What is the weather in Paris?", "1 2 3"]
    delta = SamplingParams(temperature=0, max_tokens=12, output_kind=RequestOutputKind.DELTA)
    expected = llm.generate(prompts, dataclass_replace(delta), use_tqdm=False)

    async def collect(i: int) -> tuple[str, list[int], int, str | None]:
        text, ids, count, reason = "", [], 0, None
        async for out in async_engine.generate(prompts[i], delta, f"s{i}"):
            text += out.outputs[0].text
            ids += out.outputs[0].token_ids
            count += 1
            reason = out.outputs[0].finish_reason
        return text, ids, count, reason

    async def main() -> list:
        return await asyncio.gather(*(collect(i) for i in range(3)))

    results = asyncio.run(main())
    for (text, ids, count, reason), exp in zip(results, expected):
        assert ids == exp.outputs[0].token_ids and text == exp.outputs[0].text
        assert count == len(ids) and reason == exp.outputs[0].finish_reason


def dataclass_replace(params: SamplingParams) -> SamplingParams:
    import dataclasses

    return dataclasses.replace(params, output_kind=RequestOutputKind.CUMULATIVE)


def test_closing_the_stream_aborts(async_engine: AsyncLLMEngine) -> None:
    params = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
    blocks = async_engine.engine.block_manager

    async def main() -> int:
        seen = 0
        stream = async_engine.generate("hello", params, "long")
        async for _ in stream:
            seen += 1
            if seen == 3:
                break
        await stream.aclose()
        await asyncio.sleep(0.05)
        return seen

    assert asyncio.run(main()) == 3
    assert not async_engine.engine.has_unfinished_requests()
    assert blocks.num_free_blocks == blocks.num_blocks


def test_bad_request_raises_in_the_caller_only(async_engine: AsyncLLMEngine) -> None:
    async def main() -> str:
        with pytest.raises(ValueError, match="outside the vocab"):
            async for _ in async_engine.generate([10**9], SamplingParams(max_tokens=2), "bad"):
                pass
        text = ""
        async for out in async_engine.generate(
            "hi", SamplingParams(temperature=0, max_tokens=3), "ok"
        ):
            text = out.outputs[0].text
        return text

    asyncio.run(main())
    assert async_engine.is_running


def test_callers_cancelled_while_adding_leave_the_loop_running(
    async_engine: AsyncLLMEngine,
) -> None:
    """A client that goes away while its request is being added must not kill the step loop."""

    async def consume(i: int) -> None:
        async for _ in async_engine.generate("Hi", SamplingParams(max_tokens=4), f"gone-{i}"):
            pass

    async def main() -> list:
        for _ in range(5):
            tasks = [asyncio.create_task(consume(i)) for i in range(16)]
            await asyncio.sleep(0)  # each task has queued its add
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        params = SamplingParams(max_tokens=4, temperature=0)
        return [out async for out in async_engine.generate("Hello", params, "after")]

    outputs = asyncio.run(main())
    assert async_engine.is_running
    assert outputs[-1].finished and len(outputs[-1].outputs[0].token_ids) == 4
