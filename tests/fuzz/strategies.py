"""Hypothesis strategies of hostile input: JSON values of every type and size, rows of each input format
whose fields are plausible or hostile, CSV cells, option values as a user might type them."""

from __future__ import annotations

import csv
import io
import json

from hypothesis import strategies as st

#: integers around every boundary the schema has (int32, int64, uint64) and far beyond
INTS = st.one_of(st.integers(-10, 5000), st.integers(-2**70, 2**70),
                 st.sampled_from([0, 1, -1, 2**24, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30]))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -0.0, 0.5, 1e30, 1e300, 9.3e18, float("inf"), float("nan")]))
TEXT = st.one_of(st.text(max_size=16), st.sampled_from(
    ["", " ", "\x1b[2J", "[/]", "[bold]x", "<a>", "\n<br>", "\n\n", "\ufeff", "\udcff", "\u202e", "{", "<script>",
     "\n<output>x</output>", "THOUGHT: x", '{"name": 1}']))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(TEXT, inner, max_size=3)), max_leaves=8)


def either(plausible):
    """A field that is usually plausible, sometimes any JSON value at all."""
    return st.one_of(plausible, plausible, VALUES)


ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "wizard", ""])
MESSAGE = st.fixed_dictionaries({"role": either(ROLES)},
                                optional={"content": either(st.one_of(TEXT, st.lists(st.one_of(
                                    TEXT, st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
                                    st.fixed_dictionaries({"type": st.just("image_url")})), max_size=3))),
                                          "tool_calls": VALUES})
ROWS = {
    "openai-chat": st.fixed_dictionaries(
        {"messages": either(st.lists(MESSAGE, max_size=4))},
        optional={"tools": VALUES, "max_tokens": either(INTS), "timestamp": either(FLOATS), "arrival_us": INTS,
                  "session_id": either(TEXT), "agent_id": either(TEXT), "output_tokens": INTS}),
    "lmcache-agent": st.fixed_dictionaries(
        {"timestamp": either(st.integers(0, 10**12)), "input": either(TEXT.map(lambda t: t * 3))},
        optional={"output": either(TEXT), "session_id": either(TEXT), "agent_id": VALUES}),
    "mooncake": st.fixed_dictionaries(
        {"timestamp": either(st.integers(0, 10**9)), "input_length": either(st.integers(0, 2000)),
         "output_length": either(st.integers(0, 100)),
         "hash_ids": either(st.lists(st.integers(0, 20), max_size=5))}),
    "tokens": st.one_of(
        st.fixed_dictionaries({"tokens": either(st.lists(st.integers(0, 1000), max_size=8))},
                              optional={"arrival_us": either(INTS), "output_tokens": either(INTS),
                                        "session_id": either(TEXT)}),
        st.fixed_dictionaries({"segments": either(st.lists(st.fixed_dictionaries(
            {"kind": either(st.sampled_from(["system", "user", "tools", "banana"])),
             "tokens": either(st.lists(st.integers(0, 1000), max_size=6))}), max_size=3))})),
    "sharegpt": st.fixed_dictionaries(
        {"conversations": either(st.lists(st.fixed_dictionaries(
            {"from": either(st.sampled_from(["human", "gpt", "system", "tool", "alien"])), "value": either(TEXT)}),
            max_size=4))}, optional={"id": either(TEXT)}),
}
CSV_HEADERS = {
    "azure": ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
    "burstgpt": ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"],
}
CELLS = st.one_of(st.integers(-5, 3000).map(str), INTS.map(str), FLOATS.map(repr), TEXT,
                  st.sampled_from(["2023-11-16 18:17:03.9799600", "9999-12-31 23:59:59", "0001-01-01",
                                   "2023-11-16T18:17:03+05:00", "1e300", "nan", "inf", "-1", "9" * 5000]))


@st.composite
def jsonl_file(draw, fmt: str) -> bytes:
    """1-4 lines of ``fmt`` rows (some may be garbage bytes or nested 100k deep), maybe a BOM first."""
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["row", "row", "row", "garbage", "deep"]))
        if kind == "row":
            lines.append(json.dumps(draw(ROWS[fmt])).encode("utf-8", "surrogatepass"))
        elif kind == "garbage":
            lines.append(draw(st.binary(max_size=24)).replace(b"\n", b" "))
        else:
            lines.append(b'{"x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")
    bom = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    return bom + b"\n".join(lines) + b"\n"


@st.composite
def csv_file(draw, fmt: str) -> bytes:
    header = CSV_HEADERS[fmt]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for _ in range(draw(st.integers(1, 4))):
        width = draw(st.sampled_from([len(header), len(header), len(header) - 1]))
        w.writerow([draw(CELLS) for _ in range(width)])
    return buf.getvalue().encode("utf-8", "surrogatepass")


def input_file(fmt: str):
    return csv_file(fmt) if fmt in CSV_HEADERS else jsonl_file(fmt)


#: option values as typed after ``--set KEY=``: numbers of every size and spelling, words, garbage
OPTION_TEXT = st.one_of(
    st.integers(-2**80, 2**80).map(str), st.integers(-3, 5000).map(str),
    FLOATS.map(repr), FLOATS.map(str), st.floats(0, 1).map(str),
    st.sampled_from(["true", "false", "maybe", "", " ", "none", "1e400", "-0", "0x10", "1_000", "200.7", "2e3",
                     "lru", "lfu", "fifo", "nope", "1,2,3", "prefix", "irminsul", "epic", "cacheblend", "single",
                     "exact", "16", "64", "4096"]),
    st.text(max_size=8))
