"""Write the two small raw samples in public-dataset shapes (hand-made content, no download):

- ``sharegpt.json``: 12 conversations in ShareGPT's shape (``id``, ``conversations`` of ``from``/``value``),
  multi-turn, some opening with the same system prompt, some pasting the same document;
- ``burstgpt.csv``: 60 rows in BurstGPT's shape (``Timestamp,Model,Request tokens,Response tokens,Total
  tokens,Log Type``), bursty arrivals, ChatGPT and GPT-4, conversation and API logs, two failed requests
  (0 response tokens).

Deterministic (seeded). Run from the repository root:  python traces/samples/make_raw.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent

SYSTEM = ("You are a careful assistant for a developer tools company. Answer concisely, cite the relevant "
          "configuration keys, and say when you are unsure. Never invent command-line flags.")
DOC = ("Release notes 4.2: the cache server now evicts by least-recently-used order across all tenants; "
       "the flag --max-entries was replaced by --capacity with units (e.g. 40GiB); metrics are exported on "
       "port 9400 in the Prometheus text format; TLS is on by default and --insecure turns it off for tests.")
TOPICS = ["upgrading from 4.1", "setting a capacity", "reading the metrics", "turning off TLS in tests",
          "debugging evictions", "multi-tenant setups"]
FOLLOW = ["Can you give an example command?", "What happens to existing entries?", "Is that safe in production?",
          "How do I check it worked?", "Thanks. One more thing: does it need a restart?"]


def _answer(rng: random.Random, topic: str, turn: int) -> str:
    n = rng.randint(2, 5)
    parts = [f"For {topic}, step {i + 1}: " + rng.choice([
        "set --capacity to the memory you can spare, with units.",
        "watch the eviction counter on port 9400.",
        "restart is not needed; the server reloads its configuration.",
        "use --insecure only on a test network.",
        "entries written before the upgrade stay readable."]) for i in range(n)]
    return " ".join(parts) + (" Let me know if you want the full configuration." if turn == 0 else "")


def sharegpt(rng: random.Random) -> list[dict]:
    convs = []
    for k in range(12):
        topic = TOPICS[k % len(TOPICS)]
        turns: list[dict] = []
        if k % 3 == 0:
            turns.append({"from": "system", "value": SYSTEM})
        first = f"I am {topic}. " + (f"Here are the release notes:\n\n{DOC}\n\n" if k % 2 == 0 else "") + \
            "What should I do?"
        turns.append({"from": "human", "value": first})
        for t in range(rng.randint(1, 4)):
            turns.append({"from": "gpt", "value": _answer(rng, topic, t)})
            if t < 3 and rng.random() < 0.8:
                turns.append({"from": "human", "value": rng.choice(FOLLOW)})
        convs.append({"id": f"sample-{k:02d}", "conversations": turns})
    return convs


def burstgpt(rng: random.Random) -> str:
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    t = 5.0
    for i in range(60):
        t += rng.expovariate(4.0) if (i // 10) % 2 == 0 else rng.expovariate(0.5)   # bursts and lulls
        model = "GPT-4" if rng.random() < 0.3 else "ChatGPT"
        req = rng.randint(20, 1800)
        resp = 0 if i in (17, 44) else rng.randint(1, 600)
        kind = "Conversation log" if rng.random() < 0.7 else "API log"
        lines.append(f"{t:.0f},{model},{req},{resp},{req + resp},{kind}")
    return "\n".join(lines) + "\n"


def main() -> None:
    (OUT / "sharegpt.json").write_text(json.dumps(sharegpt(random.Random(0)), indent=2, ensure_ascii=False) + "\n")
    (OUT / "burstgpt.csv").write_text(burstgpt(random.Random(1)))


if __name__ == "__main__":
    main()
