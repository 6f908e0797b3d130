"""Training batches: chats drawn from a seeded stream and grouped by length, and copy drills
(random token runs written twice). Both can save and restore their position, so a run that is
stopped resumes where it was (`train.py --resume`)."""

from __future__ import annotations

import random

from thinkgate.benchmarks.training.chats import Chat, make_chat


def encode(tok, chat: Chat) -> tuple[list[int], int]:
    """Prompt + completion + <|im_end|> ids, and where the completion starts."""
    prompt = tok.apply_chat_template(chat.messages, tools=chat.tools, add_generation_prompt=True,
                                     tokenize=False, **chat.template_kwargs)
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    completion_ids = tok.encode(chat.completion + "<|im_end|>", add_special_tokens=False)
    return prompt_ids + completion_ids, len(prompt_ids)


class Batches:
    """Chats drawn from one seeded stream, grouped by length so little of a batch is padding;
    a batch holds at most `batch_size` chats and `max_tokens` tokens with its padding."""

    def __init__(self, tok, model: str, batch_size: int, seed: int, max_tokens: int = 8192,
                 pool: int = 8, weights: tuple[float, ...] | None = None,
                 mix: str = "v2", answer_weight: float = 1.0) -> None:
        self.tok, self.model, self.batch_size, self.pool = tok, model, batch_size, pool
        self.max_tokens, self.weights, self.mix = max_tokens, weights, mix
        self.answer_weight = answer_weight
        self.end_think = tok.convert_tokens_to_ids("</think>")
        self.rng = random.Random(seed)
        self.ready: list[list[tuple[list[int], int]]] = []

    def state(self) -> dict:
        return {"rng": self.rng.getstate(), "ready": self.ready}

    def load_state(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
        self.ready = state["ready"]

    def _refill(self) -> None:
        rows = [encode(self.tok, make_chat(self.rng, self.model, weights=self.weights,
                                                mix=self.mix))
                for _ in range(self.batch_size * self.pool)]
        rows.sort(key=lambda r: len(r[0]))
        batch: list[tuple[list[int], int]] = []
        for row in rows:  # longest last, so a row never makes an earlier one wider
            if batch and (len(batch) == self.batch_size
                          or (len(batch) + 1) * len(row[0]) > self.max_tokens):
                self.ready.append(batch)
                batch = []
            batch.append(row)
        self.ready.append(batch)
        self.rng.shuffle(self.ready)

    def next(self):
        """input_ids, labels (-100 outside the assistant's turn), attention mask, and each
        label's loss weight: `answer_weight` after the turn's `</think>` (the tool calls, JSON
        or text, where a value must be copied and ended exactly), 1 in the thinking."""
        import torch

        if not self.ready:
            self._refill()
        batch = self.ready.pop()
        width = max(len(ids) for ids, _ in batch)
        pad = self.tok.pad_token_id
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)  # (B, T)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        weight = torch.ones((len(batch), width))
        for i, (ids, split) in enumerate(batch):
            input_ids[i, :len(ids)] = torch.tensor(ids)
            labels[i, split:len(ids)] = torch.tensor(ids[split:])
            mask[i, :len(ids)] = 1
            answer = split  # no thinking in the turn: all of it is the answer
            if self.end_think in ids[split:]:
                answer = ids.index(self.end_think, split) + 1
            weight[i, answer:len(ids)] = self.answer_weight
        return input_ids, labels, mask, weight


def repeat_batch(rng: random.Random, batch_size: int, vocab: int):
    """Random token runs written twice, loss on the second: the plainest copying there is, over
    the whole vocabulary (with `induction_targets`, what forms the copy head)."""
    import torch

    rows = []
    for _ in range(batch_size):
        run = [rng.randrange(3, vocab) for _ in range(rng.randint(4, 24))]
        rows.append((run + run, len(run)))
    width = max(len(r) for r, _ in rows)
    input_ids = torch.zeros((batch_size, width), dtype=torch.long)  # (B, T)
    labels = torch.full((batch_size, width), -100, dtype=torch.long)
    mask = torch.zeros((batch_size, width), dtype=torch.long)
    for i, (ids, split) in enumerate(rows):
        input_ids[i, :len(ids)] = torch.tensor(ids)
        labels[i, split + 1:len(ids)] = torch.tensor(ids[split + 1:])
        mask[i, :len(ids)] = 1
    return input_ids, labels, mask
